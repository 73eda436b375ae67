/* cmd_explain.c: `kforge explain` — every input of a kernel's key with its
 * own hash, and which inputs changed since the last build of that id (the
 * entry its manifest names). */
#include "commands.h"
#include "manifest.h"
#include "report.h"
#include "session.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge explain [--arch LIST] [--cache DIR] [--json] [--records] MODEL.json "
    "KERNEL-ID\n"
    "Lists the inputs of the kernel's key as '<tag> <name> <hash>' and, against the last\n"
    "build of that kernel in the cache, which inputs changed. --records prints the exact\n"
    "bytes hashed for each input (all but file tokens, which show as their hash).\n";

static int show_records;

static int extra(const char *opt, const char *val, void *ctx) {
  (void)ctx;
  if (!strcmp(opt, "--records") && !val) {
    show_records = 1;
    return 0;
  }
  return -1;
}

/* The inputs recorded by the last build of in (the entry its manifest
 * names): 0 with *last filled and *key set (caller frees both), or -1 when
 * there is none. */
static int last_inputs(const kf_cache *c, const kf_instance *in, kf_entry_meta *last, char **key) {
  memset(last, 0, sizeof *last);
  char *mp = kf_cache_manifest_path(c, in->model->name, in->arch);
  kf_manifest man;
  char *err = NULL;
  int found = -1;
  if (kf_manifest_load(mp, &man, &err) == 0)
    for (size_t i = 0; i < man.nkernels; i++) {
      const kf_manifest_kernel *k = &man.kernels[i];
      if (!k->id || strcmp(k->id, in->id) != 0 || !k->key)
        continue;
      kf_entry_meta meta;
      if (kf_entry_meta_load(c, k->key, &meta) != 0)
        continue;
      kf_entry_meta_free(last);
      free(*key);
      *last = meta;
      *key = kf_xstrdup(k->key);
      found = 0;
    }
  free(err);
  free(mp);
  kf_manifest_free(&man);
  return found;
}

static const kf_meta_input *find_input(const kf_entry_meta *last, const char *tag,
                                       const char *name) {
  for (size_t i = 0; i < last->ninputs; i++)
    if (!strcmp(last->inputs[i].tag, tag) && !strcmp(last->inputs[i].name, name))
      return &last->inputs[i];
  return NULL;
}

/* The differences between the records of this build and the last one's. */
static void diff_inputs(const kf_records *now, const kf_entry_meta *last, kf_strv *changes) {
  for (size_t i = 0; i < now->n; i++) {
    const kf_record *r = &now->v[i];
    char h[17];
    kf_record_hash(r, h);
    const kf_meta_input *prev = find_input(last, r->tag, r->name);
    if (!prev)
      kf_strv_push_owned(changes, kf_xasprintf("added: %s %s", r->tag, r->name));
    else if (strcmp(prev->hash, h) != 0 && prev->value && strcmp(r->tag, "file") != 0)
      kf_strv_push_owned(changes, kf_xasprintf("changed: %s %s: '%s' -> '%s'", r->tag, r->name,
                                               prev->value, r->value));
    else if (strcmp(prev->hash, h) != 0)
      kf_strv_push_owned(changes, kf_xasprintf("changed: %s %s", r->tag, r->name));
  }
  for (size_t i = 0; i < last->ninputs; i++) {
    const kf_meta_input *e = &last->inputs[i];
    int present = 0;
    for (size_t k = 0; k < now->n; k++)
      present |= !strcmp(now->v[k].tag, e->tag) && !strcmp(now->v[k].name, e->name);
    if (!present)
      kf_strv_push_owned(changes, kf_xasprintf("removed: %s %s", e->tag, e->name));
  }
}

static void print_json(const char *id, const kf_unit *u, const kf_model_options *mopt,
                       const char *last_key, int built_before, const kf_strv *changes) {
  cJSON *json = cJSON_CreateObject();
  cJSON *jin = cJSON_AddArrayToObject(json, "inputs");
  cJSON *jch = cJSON_AddArrayToObject(json, "changes");
  cJSON_AddStringToObject(json, "id", id);
  cJSON_AddStringToObject(json, "key", u->key);
  if (last_key)
    cJSON_AddStringToObject(json, "last_key", last_key);
  cJSON_AddStringToObject(json, "templates_dir", mopt->templates_dir);
  cJSON_AddStringToObject(json, "families_dir", mopt->families_dir);
  for (size_t i = 0; i < u->records.n; i++) {
    const kf_record *r = &u->records.v[i];
    char h[17];
    kf_record_hash(r, h);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tag", r->tag);
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "hash", h);
    cJSON_AddStringToObject(o, "value", r->value);
    cJSON_AddItemToArray(jin, o);
  }
  for (size_t i = 0; i < changes->n; i++)
    cJSON_AddItemToArray(jch, cJSON_CreateString(changes->v[i]));
  cJSON_AddBoolToObject(json, "built_before", built_before);
  char *text = cJSON_Print(json);
  puts(text);
  free(text);
  cJSON_Delete(json);
}

static void print_text(const char *id, const kf_unit *u, const kf_model_options *mopt,
                       const char *cache_root, const char *last_key, const kf_strv *changes) {
  printf("kernel %s\nkey %s\ntemplates %s\nfamilies %s\n\ninputs:\n", id, u->key,
         mopt->templates_dir, mopt->families_dir);
  for (size_t i = 0; i < u->records.n; i++) {
    const kf_record *r = &u->records.v[i];
    char h[17];
    kf_record_hash(r, h);
    if (show_records)
      printf("  %-6s %-28s %s  %s\n", r->tag, r->name, h, r->value);
    else
      printf("  %-6s %-28s %s\n", r->tag, r->name, h);
  }
  if (!last_key) {
    printf("\nno earlier build of %s in %s\n", id, cache_root);
  } else if (changes->n == 0) {
    printf("\nunchanged since last build (key %s)\n", last_key);
  } else {
    printf("\nsince last build (key %s):\n", last_key);
    for (size_t i = 0; i < changes->n; i++)
      printf("  %s\n", changes->v[i]);
  }
}

/* Explains one kernel of a loaded session. Returns the exit status. */
static int explain(kf_session *s, const char *id, int json) {
  kf_unit *u = NULL;
  for (size_t i = 0; i < s->plan.n; i++)
    if (!strcmp(s->plan.v[i].id, id))
      u = &s->units[i];
  const char *desc = s->cli->inputs.v[0];
  if (!u) {
    kf_error(NULL, NULL,
             "no kernel '%s' in %s (ids look like <model>/<kind>/w<W>/<arch>;"
             " `kforge keys %s` lists them)",
             id, desc, desc);
    return 2;
  }
  if (kf_session_key(s, u) != 0) {
    kf_error(NULL, NULL, "%s: %s", id, u->error);
    return 1;
  }
  char *last_key = NULL;
  kf_entry_meta last;
  int built_before = last_inputs(&s->cache, u->in, &last, &last_key) == 0;
  kf_strv changes = {0};
  if (built_before)
    diff_inputs(&u->records, &last, &changes);
  if (json)
    print_json(id, u, &s->cli->mopt, last_key, built_before, &changes);
  else
    print_text(id, u, &s->cli->mopt, s->cache.root, last_key, &changes);
  kf_strv_free(&changes);
  kf_entry_meta_free(&last);
  free(last_key);
  return 0;
}

int kf_cmd_explain(int argc, char **argv) {
  kf_cli cli;
  show_records = 0;
  int rc = kf_cli_parse(&cli, argc, argv, usage, extra, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (cli.inputs.n != 2) {
    kf_usage_error(usage, "explain takes a description and a kernel id");
    kf_cli_free(&cli);
    return 2;
  }
  char *id = kf_xstrdup(cli.inputs.v[1]);
  cli.inputs.n = 1;
  free(cli.inputs.v[1]);
  kf_session s;
  rc = kf_session_load(&s, &cli, 0);
  if (rc == 0)
    rc = explain(&s, id, cli.json);
  kf_session_free(&s);
  kf_cli_free(&cli);
  free(id);
  return rc;
}
