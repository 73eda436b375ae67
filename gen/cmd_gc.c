/* cmd_gc.c: `kforge gc --max-size SIZE` — evicts least recently used entries
 * that no manifest references until the cache fits. An entry a manifest
 * references is kept (a server may load it), unless that manifest is
 * dropped first with --drop-manifest; an entry being built (its lock held)
 * is never evicted. */
#include "cmd_cache.h"
#include "commands.h"
#include "report.h"

#include "rt_arch.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: kforge gc --max-size SIZE [--drop-manifest MODEL[/ARCH]]... [--cache DIR] [--json]\n"
    "Evicts least recently used entries that no manifest references until the cache\n"
    "holds at most SIZE bytes (suffixes K, M, G). Entries a manifest references are\n"
    "kept and listed; --drop-manifest removes the manifest of MODEL for ARCH (or for\n"
    "every arch) first, so that its entries may go too. --json prints {\"cache\",\n"
    "\"dropped_manifests\", \"evicted\": [{key, kernel_id, bytes, referenced}],\n"
    "\"kept\": [{key, kernel_id, bytes}], \"evicted_bytes\", \"remaining_bytes\"} instead.\n";

/* 1 for a model name as descriptions spell it ([a-z0-9][a-z0-9._-]*, no
 * ".."), so that a name cannot leave the manifests directory. */
static int model_name_ok(const char *s) {
  if (!*s || strlen(s) > 64 || strstr(s, "..") ||
      !(islower((unsigned char)*s) || isdigit((unsigned char)*s)))
    return 0;
  for (; *s; s++)
    if (!islower((unsigned char)*s) && !isdigit((unsigned char)*s) && !strchr("._-", *s))
      return 0;
  return 1;
}

typedef struct {
  const char *model;
  kf_strv *out;
} match_ctx;

/* Collects the manifests of one model: <v1>/manifests/<model>/<arch>.json. */
static void match_model(const char *path, void *ctx) {
  match_ctx *mc = ctx;
  char *dir = kf_path_dirname(path);
  const char *base = strrchr(dir, '/');
  if (base && !strcmp(base + 1, mc->model))
    kf_strv_push(mc->out, path);
  free(dir);
}

/* The manifest files that each --drop-manifest names, into paths; every
 * spec must name at least one. Returns 0, or 2 after reporting. Reads
 * only. */
static int resolve_drops(const kf_cache *c, const kf_strv *specs, kf_strv *paths) {
  int bad = 0;
  for (size_t i = 0; i < specs->n; i++) {
    char *model = kf_xstrdup(specs->v[i]);
    char *arch = strchr(model, '/');
    if (arch)
      *arch++ = '\0';
    rt_arch a;
    if (!model_name_ok(model) || (arch && rt_arch_parse(arch, &a) != 0)) {
      kf_error(NULL, "--drop-manifest", "'%s' is not MODEL or MODEL/ARCH (e.g. qwen3-0.6b/sm_90a)",
               specs->v[i]);
      bad = 1;
    } else {
      size_t before = paths->n;
      if (arch) {
        char *p = kf_cache_manifest_path(c, model, arch);
        if (kf_path_exists(p))
          kf_strv_push(paths, p);
        free(p);
      } else {
        match_ctx mc = {model, paths};
        kf_cache_each_manifest(c, match_model, &mc);
      }
      if (paths->n == before) {
        kf_error(NULL, "--drop-manifest", "no manifest of %s in %s", specs->v[i], c->root);
        bad = 1;
      }
    }
    free(model);
  }
  return bad ? 2 : 0;
}

static int cmp_victim(const void *a, const void *b) {
  const kf_entry_info *x = a, *y = b;
  if (x->referenced != y->referenced)
    return x->referenced - y->referenced;
  if (x->last_use != y->last_use)
    return x->last_use < y->last_use ? -1 : 1;
  return strcmp(x->key, y->key);
}

static void evicted_json(cJSON *list, const kf_entry_info *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", e->key);
  cJSON_AddStringToObject(o, "kernel_id", e->kernel_id);
  cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
  cJSON_AddBoolToObject(o, "referenced", e->referenced);
  cJSON_AddItemToArray(list, o);
}

static void entry_json(cJSON *list, const kf_entry_info *e) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", e->key);
  cJSON_AddStringToObject(o, "kernel_id", e->kernel_id);
  cJSON_AddNumberToObject(o, "bytes", (double)e->bytes);
  cJSON_AddItemToArray(list, o);
}

/* Removes each manifest of paths (and its model's directory once empty).
 * Returns 0, or 2 after reporting one it could not remove. */
static int drop_manifests(const kf_strv *paths, int json) {
  for (size_t i = 0; i < paths->n; i++) {
    if (unlink(paths->v[i]) != 0 && errno != ENOENT) {
      kf_error(NULL, NULL, "cannot remove %s: %s", paths->v[i], strerror(errno));
      return 2;
    }
    char *dir = kf_path_dirname(paths->v[i]);
    rmdir(dir); /* fails, harmlessly, while other arches remain */
    free(dir);
    if (!json)
      printf("dropped manifest %s\n", paths->v[i]);
  }
  return 0;
}

int kf_cmd_gc(int argc, char **argv) {
  kf_cache c;
  const char *max = NULL;
  int json = 0;
  /* --drop-manifest is gc's own; the rest are the cache commands' options */
  kf_strv specs = {0};
  char **rest = kf_xcalloc((size_t)argc + 1, sizeof *rest);
  int nrest = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--drop-manifest") && i + 1 < argc)
      kf_strv_push(&specs, argv[++i]);
    else if (!strncmp(argv[i], "--drop-manifest=", 16))
      kf_strv_push(&specs, argv[i] + 16);
    else
      rest[nrest++] = argv[i];
  }
  int rc = kf_cache_cli(nrest, rest, usage, &c, &json, &max);
  free(rest);
  if (rc) {
    kf_strv_free(&specs);
    return rc == 1 ? 0 : rc;
  }
  uint64_t limit;
  kf_strv drop = {0};
  if (!max || kf_parse_size(max, &limit) != 0) {
    kf_error(NULL, NULL, "gc needs --max-size SIZE (e.g. 500M, 2G), got '%s'",
             max ? max : "nothing");
    rc = 2;
  } else {
    rc = resolve_drops(&c, &specs, &drop);
  }
  if (!rc)
    rc = drop_manifests(&drop, json);
  kf_strv_free(&specs);
  if (rc) {
    kf_strv_free(&drop);
    kf_cache_free(&c);
    return rc;
  }
  kf_entry_list l;
  kf_entry_list_load(&c, &l); /* references read after the drops */
  long long total = 0;
  for (size_t i = 0; i < l.n; i++)
    total += l.v[i].bytes;
  qsort(l.v, l.n, sizeof *l.v, cmp_victim);
  int evicted = 0;
  long long freed = 0;
  cJSON *list = json ? cJSON_CreateArray() : NULL;
  cJSON *kept_list = json ? cJSON_CreateArray() : NULL;
  int kept = 0;
  long long kept_bytes = 0;
  for (size_t i = 0; i < l.n && (uint64_t)total > limit; i++) {
    if (l.v[i].referenced) { /* sorted last: every unreferenced one is gone */
      if (kept_list)
        entry_json(kept_list, &l.v[i]);
      else
        printf("kept %s %s (referenced by a manifest)\n", l.v[i].key, l.v[i].kernel_id);
      kept++;
      kept_bytes += l.v[i].bytes;
      continue;
    }
    int fd = kf_cache_trylock(&c, l.v[i].key);
    if (fd < 0)
      continue;
    if (kf_cache_remove_entry(&c, l.v[i].key) == 0) {
      if (list)
        evicted_json(list, &l.v[i]);
      else
        printf("evicted %s %s\n", l.v[i].key, l.v[i].kernel_id);
      total -= l.v[i].bytes;
      freed += l.v[i].bytes;
      evicted++;
    }
    kf_cache_unlock(fd);
  }
  if (list) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "cache", c.root);
    cJSON *dropped = cJSON_AddArrayToObject(root, "dropped_manifests");
    for (size_t i = 0; i < drop.n; i++)
      cJSON_AddItemToArray(dropped, cJSON_CreateString(drop.v[i]));
    cJSON_AddItemToObject(root, "evicted", list);
    cJSON_AddItemToObject(root, "kept", kept_list);
    cJSON_AddNumberToObject(root, "evicted_bytes", (double)freed);
    cJSON_AddNumberToObject(root, "remaining_bytes", (double)total);
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
    cJSON_Delete(root);
  } else {
    printf("evicted %d entries (%lld bytes); %lld bytes remain in %s\n", evicted, freed, total,
           c.root);
    if (kept)
      printf("kept %d entries (%lld bytes) that a manifest references; --drop-manifest "
             "MODEL[/ARCH] lets them go\n",
             kept, kept_bytes);
  }
  kf_strv_free(&drop);
  kf_entry_list_free(&l);
  kf_cache_free(&c);
  return 0;
}
