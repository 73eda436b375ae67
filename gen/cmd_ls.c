/* cmd_ls.c: `kforge ls` — the cache's entries, and the listing helpers that
 * verify and gc share (cmd_cache.h). */
#define _GNU_SOURCE
#include "cmd_cache.h"
#include "commands.h"
#include "report.h"

#include "manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
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
  kf_manifest m;
  char *err = NULL;
  if (kf_manifest_load(path, &m, &err) == 0)
    for (size_t i = 0; i < m.nkernels; i++) {
      const char *key = m.kernels[i].key;
      if (key && !kf_strv_contains(&l->referenced_keys, key))
        kf_strv_push(&l->referenced_keys, key);
    }
  free(err);
  kf_manifest_free(&m);
}

typedef struct {
  const kf_cache *c;
  kf_entry_list *l;
} collect_ctx;

static void collect_entry(const char *key, void *ctx) {
  collect_ctx *cc = ctx;
  kf_entry_list *l = cc->l;
  l->v = kf_xpush(l->v, l->n, sizeof *l->v);
  kf_entry_info *e = &l->v[l->n++];
  memset(e, 0, sizeof *e);
  memcpy(e->key, key, 33);
  char *dir = kf_cache_entry_dir(cc->c, key);
  struct stat st;
  e->last_use = stat(dir, &st) == 0 ? st.st_mtime : 0;
  char *mp = kf_path_join(dir, "meta.json");
  kf_entry_meta m;
  kf_entry_meta_load(cc->c, key, &m);
  e->kernel_id = kf_xstrdup(m.kernel_id ? m.kernel_id : "?");
  e->bytes = file_size(mp);
  if (m.object && !strchr(m.object, '/')) {
    char *op = kf_path_join(dir, m.object);
    e->bytes += file_size(op);
    free(op);
  }
  kf_entry_meta_free(&m);
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
    "id, width, key, registers, spills, launch and object size. --json prints either\n"
    "list as a JSON array. Exit 2 when the cache directory does not exist.\n"
    "kforge ls --remote URL [--trusted-keys LIST] [--arch LIST] [--json] MODEL|MODEL.json...\n"
    "lists what a remote holds of those models instead (docs/cli.md).\n";

typedef struct {
  const kf_cache *c;
  int rows;
  cJSON *json; /* with --json: the array of kernels */
} table_ctx;

static void kernel_json(cJSON *arr, const kf_manifest_kernel *k, const kf_entry_meta *meta,
                        int ok) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", k->id);
  cJSON_AddNumberToObject(o, "width", k->width);
  cJSON_AddStringToObject(o, "key", k->key);
  cJSON_AddNumberToObject(o, "registers", ok ? (double)meta->resources.registers : -1);
  cJSON_AddNumberToObject(o, "spill_stores", ok ? (double)meta->resources.spill_stores : -1);
  if (k->launch.has_dims) {
    cJSON_AddItemToObject(o, "grid", cJSON_CreateArray());
    cJSON_AddItemToObject(o, "block", cJSON_CreateArray());
    for (int d = 0; d < 3; d++) {
      cJSON_AddItemToArray(cJSON_GetObjectItem(o, "grid"),
                           cJSON_CreateNumber((double)k->launch.grid[d]));
      cJSON_AddItemToArray(cJSON_GetObjectItem(o, "block"),
                           cJSON_CreateNumber((double)k->launch.block[d]));
    }
  }
  cJSON_AddNumberToObject(o, "bytes", (double)k->size);
  cJSON_AddNumberToObject(o, "compile_seconds", ok ? meta->compile_seconds : 0);
  cJSON_AddBoolToObject(o, "entry_ok", ok);
  cJSON_AddItemToArray(arr, o);
}

static void kernel_row(table_ctx *t, const kf_manifest_kernel *k, const kf_entry_meta *meta,
                       int ok) {
  if (t->rows == 0)
    printf("%-46s %-12s %5s %6s %-14s %-10s %8s %7s\n", "kernel", "key", "regs", "spills", "grid",
           "block", "bytes", "compile");
  char g[72] = "?", b[72] = "?";
  const kf_manifest_launch *l = &k->launch;
  if (l->has_dims) {
    snprintf(g, sizeof g, "%lld,%lld,%lld", (long long)l->grid[0], (long long)l->grid[1],
             (long long)l->grid[2]);
    snprintf(b, sizeof b, "%lld,%lld,%lld", (long long)l->block[0], (long long)l->block[1],
             (long long)l->block[2]);
  }
  printf("%-46s %.12s %5ld %6ld %-14s %-10s %8lld %6.2fs%s\n", k->id, k->key,
         ok ? meta->resources.registers : -1, ok ? meta->resources.spill_stores : -1, g, b,
         (long long)k->size, ok ? meta->compile_seconds : 0,
         ok ? "" : "  (entry damaged or missing)");
}

static void print_manifest(const char *path, void *ctx) {
  table_ctx *t = ctx;
  kf_manifest m;
  char *err = NULL;
  kf_manifest_load(path, &m, &err);
  free(err);
  for (size_t i = 0; i < m.nkernels; i++) {
    const kf_manifest_kernel *k = &m.kernels[i];
    if (!k->id || !k->key)
      continue;
    kf_entry_meta meta;
    int ok = kf_cache_check_entry(t->c, k->key, &meta, NULL) == KF_ENTRY_OK;
    if (t->json)
      kernel_json(t->json, k, &meta, ok);
    else
      kernel_row(t, k, &meta, ok);
    t->rows++;
    kf_entry_meta_free(&meta);
  }
  kf_manifest_free(&m);
}

static void print_json(cJSON *v) {
  char *t = cJSON_Print(v);
  puts(t);
  free(t);
  cJSON_Delete(v);
}

static void list_kernels(const kf_cache *c, int json) {
  table_ctx t = {c, 0, json ? cJSON_CreateArray() : NULL};
  kf_cache_each_manifest(c, print_manifest, &t);
  if (json)
    print_json(t.json);
  else
    printf("%d kernels in %s\n", t.rows, c->root);
}

static void list_entries(const kf_cache *c, int json) {
  kf_entry_list l;
  kf_entry_list_load(c, &l);
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
    print_json(arr);
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
    printf("%zu entries, %lld bytes in %s\n", l.n, total, c->root);
  }
  kf_entry_list_free(&l);
}

int kf_cmd_ls(int argc, char **argv) {
  for (int i = 1; i < argc; i++) /* a remote's listing (cmd_ls_remote.c) */
    if (!strcmp(argv[i], "--remote") || !strncmp(argv[i], "--remote=", 9))
      return kf_cmd_ls_remote(argc, argv);
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
  struct stat st;
  if (stat(c.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
    kf_error(NULL, NULL, "cache %s does not exist%s", c.root,
             errno == ENOENT ? "" : " or is not a directory");
    kf_cache_free(&c);
    return 2;
  }
  if (kernels)
    list_kernels(&c, json);
  else
    list_entries(&c, json);
  kf_cache_free(&c);
  return 0;
}
