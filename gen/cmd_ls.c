/* cmd_ls.c: `kforge ls` — the cache's entries, and the listing helpers that
 * verify and gc share (cmd_cache.h). */
#define _GNU_SOURCE
#include "cmd_cache.h"
#include "commands.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static long long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

static void collect_manifest(const char *path, void *ctx) {
  kf_entry_list *l = ctx;
  size_t len;
  char *text = kf_read_file(path, &len);
  cJSON *m = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *ks = m ? cJSON_GetObjectItemCaseSensitive(m, "kernels") : NULL;
  for (const cJSON *k = ks ? ks->child : NULL; k; k = k->next) {
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(k, "key");
    if (cJSON_IsString(key) && !kf_strv_contains(&l->referenced_keys, key->valuestring))
      kf_strv_push(&l->referenced_keys, key->valuestring);
  }
  cJSON_Delete(m);
}

typedef struct {
  const kf_cache *c;
  kf_entry_list *l;
} collect_ctx;

static void collect_entry(const char *key, void *ctx) {
  collect_ctx *cc = ctx;
  kf_entry_list *l = cc->l;
  l->v = kf_xrealloc(l->v, (l->n + 1) * sizeof *l->v);
  kf_entry_info *e = &l->v[l->n++];
  memset(e, 0, sizeof *e);
  memcpy(e->key, key, 33);
  char *dir = kf_cache_entry_dir(cc->c, key);
  struct stat st;
  e->last_use = stat(dir, &st) == 0 ? st.st_mtime : 0;
  char *mp = kf_path_join(dir, "meta.json");
  size_t len;
  char *text = kf_read_file(mp, &len);
  cJSON *m = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *id = m ? cJSON_GetObjectItemCaseSensitive(m, "kernel_id") : NULL;
  const cJSON *obj = m ? cJSON_GetObjectItemCaseSensitive(m, "object") : NULL;
  e->kernel_id = kf_xstrdup(cJSON_IsString(id) ? id->valuestring : "?");
  e->bytes = file_size(mp);
  if (cJSON_IsString(obj) && !strchr(obj->valuestring, '/')) {
    char *op = kf_path_join(dir, obj->valuestring);
    e->bytes += file_size(op);
    free(op);
  }
  cJSON_Delete(m);
  free(mp);
  free(dir);
  e->referenced = kf_strv_contains(&l->referenced_keys, key);
}

void kf_entry_list_load(const kf_cache *c, kf_entry_list *out) {
  memset(out, 0, sizeof *out);
  kf_cache_each_manifest(c, collect_manifest, out);
  collect_ctx cc = {c, out};
  kf_cache_each_entry(c, collect_entry, &cc);
}

void kf_entry_list_free(kf_entry_list *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i].kernel_id);
  free(l->v);
  kf_strv_free(&l->referenced_keys);
}

int kf_cache_cli(int argc, char **argv, const char *usage, kf_cache *c, int *json,
                 const char **max_size) {
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(usage, stdout);
      return 1;
    } else if (!strcmp(a, "--json") && json) {
      *json = 1;
    } else if (!strncmp(a, "--cache=", 8)) {
      dir = a + 8;
    } else if (!strcmp(a, "--cache") && i + 1 < argc) {
      dir = argv[++i];
    } else if (max_size && !strncmp(a, "--max-size=", 11)) {
      *max_size = a + 11;
    } else if (max_size && !strcmp(a, "--max-size") && i + 1 < argc) {
      *max_size = argv[++i];
    } else {
      kf_usage_error(usage, "unexpected argument '%s'", a);
      return 2;
    }
  }
  kf_cache_init(c, dir);
  return 0;
}

static const char usage[] =
    "usage: kforge ls [--cache DIR] [--json] [--kernels]\n"
    "Lists cache entries: key, kernel id, bytes, last use, and '*' when a manifest\n"
    "references the entry. --kernels lists the kernels of every manifest instead:\n"
    "id, width, key, registers, spills, launch and object size.\n";

typedef struct {
  const kf_cache *c;
  int rows;
} table_ctx;

static void print_manifest(const char *path, void *ctx) {
  table_ctx *t = ctx;
  size_t len;
  char *text = kf_read_file(path, &len);
  cJSON *m = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *ks = m ? cJSON_GetObjectItemCaseSensitive(m, "kernels") : NULL;
  for (const cJSON *k = ks ? ks->child : NULL; k; k = k->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(k, "id");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(k, "key");
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(k, "size");
    const cJSON *launch = cJSON_GetObjectItemCaseSensitive(k, "launch");
    const cJSON *grid = launch ? cJSON_GetObjectItemCaseSensitive(launch, "grid") : NULL;
    const cJSON *block = launch ? cJSON_GetObjectItemCaseSensitive(launch, "block") : NULL;
    if (!cJSON_IsString(id) || !cJSON_IsString(key))
      continue;
    cJSON *meta = NULL;
    kf_cache_check_entry(t->c, key->valuestring, &meta, NULL);
    const cJSON *res = meta ? cJSON_GetObjectItemCaseSensitive(meta, "resources") : NULL;
    const cJSON *regs = res ? cJSON_GetObjectItemCaseSensitive(res, "registers") : NULL;
    const cJSON *spill = res ? cJSON_GetObjectItemCaseSensitive(res, "spill_stores") : NULL;
    const cJSON *secs = meta ? cJSON_GetObjectItemCaseSensitive(meta, "compile_seconds") : NULL;
    if (t->rows++ == 0)
      printf("%-46s %-12s %5s %6s %-14s %-10s %8s %7s\n", "kernel", "key", "regs", "spills", "grid",
             "block", "bytes", "compile");
    char g[48] = "?", b[48] = "?";
    if (cJSON_GetArraySize(grid) == 3 && cJSON_GetArraySize(block) == 3) {
      snprintf(g, sizeof g, "%d,%d,%d", cJSON_GetArrayItem(grid, 0)->valueint,
               cJSON_GetArrayItem(grid, 1)->valueint, cJSON_GetArrayItem(grid, 2)->valueint);
      snprintf(b, sizeof b, "%d,%d,%d", cJSON_GetArrayItem(block, 0)->valueint,
               cJSON_GetArrayItem(block, 1)->valueint, cJSON_GetArrayItem(block, 2)->valueint);
    }
    printf("%-46s %.12s %5d %6d %-14s %-10s %8.0f %6.2fs%s\n", id->valuestring, key->valuestring,
           cJSON_IsNumber(regs) ? regs->valueint : -1, cJSON_IsNumber(spill) ? spill->valueint : -1,
           g, b, cJSON_IsNumber(size) ? size->valuedouble : 0,
           cJSON_IsNumber(secs) ? secs->valuedouble : 0,
           meta ? "" : "  (entry damaged or missing)");
    cJSON_Delete(meta);
  }
  cJSON_Delete(m);
}

int kf_cmd_ls(int argc, char **argv) {
  kf_cache c;
  int json = 0, kernels = 0, n = 0;
  char **args = kf_xcalloc((size_t)argc + 1, sizeof *args);
  for (int i = 0; i < argc; i++) {
    if (i > 0 && !strcmp(argv[i], "--kernels"))
      kernels = 1;
    else
      args[n++] = argv[i];
  }
  int rc = kf_cache_cli(n, args, usage, &c, &json, NULL);
  free(args);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (kernels) {
    table_ctx t = {&c, 0};
    kf_cache_each_manifest(&c, print_manifest, &t);
    printf("%d kernels in %s\n", t.rows, c.root);
    kf_cache_free(&c);
    return 0;
  }
  kf_entry_list l;
  kf_entry_list_load(&c, &l);
  if (json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < l.n; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "key", l.v[i].key);
      cJSON_AddStringToObject(o, "kernel_id", l.v[i].kernel_id);
      cJSON_AddNumberToObject(o, "bytes", (double)l.v[i].bytes);
      cJSON_AddNumberToObject(o, "last_use", (double)l.v[i].last_use);
      cJSON_AddBoolToObject(o, "referenced", l.v[i].referenced);
      cJSON_AddItemToArray(arr, o);
    }
    char *t = cJSON_Print(arr);
    puts(t);
    free(t);
    cJSON_Delete(arr);
  } else {
    long long total = 0;
    for (size_t i = 0; i < l.n; i++) {
      char when[32];
      struct tm tm;
      gmtime_r(&l.v[i].last_use, &tm);
      strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      printf("%s %c %-48s %8lld %s\n", l.v[i].key, l.v[i].referenced ? '*' : ' ', l.v[i].kernel_id,
             l.v[i].bytes, when);
      total += l.v[i].bytes;
    }
    printf("%zu entries, %lld bytes in %s\n", l.n, total, c.root);
  }
  kf_entry_list_free(&l);
  kf_cache_free(&c);
  return 0;
}
