/* cmd_explain.c: `kforge explain` — every input of a kernel's key with its
 * own hash, and which inputs changed since the last build of that id (the
 * entry its manifest names). */
#include "commands.h"
#include "json.h"
#include "report.h"
#include "session.h"

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

/* The inputs recorded by the last build of id, from its manifest's entry. */
static cJSON *last_inputs(const kf_cache *c, const kf_instance *in, char **key) {
  char *mp = kf_cache_manifest_path(c, in->model->name, in->arch);
  size_t len;
  char *text = kf_read_file(mp, &len);
  free(mp);
  if (!text)
    return NULL;
  cJSON *man = cJSON_ParseWithLength(text, len);
  free(text);
  cJSON *inputs = NULL;
  const cJSON *ks = man ? cJSON_GetObjectItemCaseSensitive(man, "kernels") : NULL;
  for (const cJSON *k = ks ? ks->child : NULL; k; k = k->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(k, "id");
    const cJSON *kk = cJSON_GetObjectItemCaseSensitive(k, "key");
    if (!cJSON_IsString(id) || strcmp(id->valuestring, in->id) != 0 || !cJSON_IsString(kk) ||
        strlen(kk->valuestring) != 32 || strchr(kk->valuestring, '/'))
      continue;
    char *dir = kf_cache_entry_dir(c, kk->valuestring);
    char *metap = kf_path_join(dir, "meta.json");
    char *mt = kf_read_file(metap, &len);
    free(dir);
    free(metap);
    cJSON *meta = mt ? cJSON_ParseWithLength(mt, len) : NULL;
    free(mt);
    if (meta) {
      inputs = cJSON_DetachItemFromObjectCaseSensitive(meta, "inputs");
      cJSON_Delete(meta);
      *key = kf_xstrdup(kk->valuestring);
    }
  }
  cJSON_Delete(man);
  return inputs;
}

static const cJSON *find_input(const cJSON *inputs, const char *tag, const char *name) {
  for (const cJSON *e = inputs ? inputs->child : NULL; e; e = e->next) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tag");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(t) && cJSON_IsString(n) && !strcmp(t->valuestring, tag) &&
        !strcmp(n->valuestring, name))
      return e;
  }
  return NULL;
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
  if (rc != 0)
    goto out;
  kf_unit *u = NULL;
  for (size_t i = 0; i < s.plan.n; i++)
    if (!strcmp(s.plan.v[i].id, id))
      u = &s.units[i];
  if (!u) {
    kf_error(NULL, NULL,
             "no kernel '%s' in %s (ids look like <model>/<kind>/w<W>/<arch>;"
             " `kforge keys %s` lists them)",
             id, cli.inputs.v[0], cli.inputs.v[0]);
    rc = 2;
    goto out;
  }
  if (kf_session_key(&s, u) != 0) {
    kf_error(NULL, NULL, "%s: %s", id, u->error);
    rc = 1;
    goto out;
  }
  char *last_key = NULL;
  cJSON *last = last_inputs(&s.cache, u->in, &last_key);
  cJSON *json = cli.json ? cJSON_CreateObject() : NULL;
  cJSON *jin = json ? cJSON_AddArrayToObject(json, "inputs") : NULL;
  cJSON *jch = json ? cJSON_AddArrayToObject(json, "changes") : NULL;
  if (json) {
    cJSON_AddStringToObject(json, "id", id);
    cJSON_AddStringToObject(json, "key", u->key);
    if (last_key)
      cJSON_AddStringToObject(json, "last_key", last_key);
    cJSON_AddStringToObject(json, "templates_dir", cli.mopt.templates_dir);
    cJSON_AddStringToObject(json, "families_dir", cli.mopt.families_dir);
  } else {
    printf("kernel %s\nkey %s\ntemplates %s\nfamilies %s\n\ninputs:\n", id, u->key,
           cli.mopt.templates_dir, cli.mopt.families_dir);
  }
  kf_strv changes = {0};
  for (size_t i = 0; i < u->records.n; i++) {
    const kf_record *r = &u->records.v[i];
    char h[17];
    kf_record_hash(r, h);
    if (json) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "tag", r->tag);
      cJSON_AddStringToObject(o, "name", r->name);
      cJSON_AddStringToObject(o, "hash", h);
      cJSON_AddStringToObject(o, "value", r->value);
      cJSON_AddItemToArray(jin, o);
    } else if (show_records) {
      printf("  %-6s %-28s %s  %s\n", r->tag, r->name, h, r->value);
    } else {
      printf("  %-6s %-28s %s\n", r->tag, r->name, h);
    }
    if (!last)
      continue;
    const cJSON *prev = find_input(last, r->tag, r->name);
    const cJSON *ph = prev ? cJSON_GetObjectItemCaseSensitive(prev, "hash") : NULL;
    if (!prev) {
      kf_strv_push_owned(&changes, kf_xasprintf("added: %s %s", r->tag, r->name));
    } else if (!cJSON_IsString(ph) || strcmp(ph->valuestring, h) != 0) {
      const cJSON *pv = cJSON_GetObjectItemCaseSensitive(prev, "value");
      if (cJSON_IsString(pv) && strcmp(r->tag, "file") != 0)
        kf_strv_push_owned(&changes, kf_xasprintf("changed: %s %s: '%s' -> '%s'", r->tag, r->name,
                                                  pv->valuestring, r->value));
      else
        kf_strv_push_owned(&changes, kf_xasprintf("changed: %s %s", r->tag, r->name));
    }
  }
  for (const cJSON *e = last ? last->child : NULL; e; e = e->next) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tag");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(t) || !cJSON_IsString(n))
      continue;
    int present = 0;
    for (size_t i = 0; i < u->records.n; i++)
      present |= !strcmp(u->records.v[i].tag, t->valuestring) &&
                 !strcmp(u->records.v[i].name, n->valuestring);
    if (!present)
      kf_strv_push_owned(&changes, kf_xasprintf("removed: %s %s", t->valuestring, n->valuestring));
  }
  if (json) {
    for (size_t i = 0; i < changes.n; i++)
      cJSON_AddItemToArray(jch, cJSON_CreateString(changes.v[i]));
    cJSON_AddBoolToObject(json, "built_before", last != NULL);
    char *text = cJSON_Print(json);
    puts(text);
    free(text);
    cJSON_Delete(json);
  } else if (!last) {
    printf("\nno earlier build of %s in %s\n", id, s.cache.root);
  } else if (changes.n == 0) {
    printf("\nunchanged since last build (key %s)\n", last_key);
  } else {
    printf("\nsince last build (key %s):\n", last_key);
    for (size_t i = 0; i < changes.n; i++)
      printf("  %s\n", changes.v[i]);
  }
  kf_strv_free(&changes);
  cJSON_Delete(last);
  free(last_key);
out:
  kf_session_free(&s);
  cli.inputs.n = 1;
  kf_cli_free(&cli);
  free(id);
  return rc;
}
