/* cmd_verify.c: `kforge verify` — re-hash every entry against its meta.json
 * and every manifest reference against its entry. Reads only. */
#include "cmd_cache.h"
#include "commands.h"
#include "manifest.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge verify [--cache DIR] [--json]\n"
    "Re-hashes every cache entry; prints 'damaged: <key> <kernel-id>: <reason>'\n"
    "for each damaged one and exits 1 if any. --json prints {\"cache\", \"checked\",\n"
    "\"ok\", \"entries\": [{key, kernel_id, ok, reason}], \"damaged\": [{key, kernel_id,\n"
    "manifest, reason}]} instead.\n";

typedef struct {
  const kf_cache *c;
  int damaged;
  int checked;
  cJSON *entries; /* with --json */
  cJSON *problems;
} verify_ctx;

/* One damaged entry or manifest reference; key, id and manifest may be
 * NULL. */
static void damage(verify_ctx *v, const char *key, const char *id, const char *manifest,
                   const char *reason) {
  v->damaged++;
  if (!v->problems) {
    if (key)
      printf("damaged: %s %s: %s\n", key, id ? id : "?", reason);
    else
      printf("damaged: manifest %s: %s\n", manifest, reason);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  if (key)
    cJSON_AddStringToObject(o, "key", key);
  if (key || id)
    cJSON_AddStringToObject(o, "kernel_id", id ? id : "?");
  if (manifest)
    cJSON_AddStringToObject(o, "manifest", manifest);
  cJSON_AddStringToObject(o, "reason", reason);
  cJSON_AddItemToArray(v->problems, o);
}

static void check_entry(const char *key, void *ctx) {
  verify_ctx *v = ctx;
  char *why = NULL;
  v->checked++;
  int ok = kf_cache_check_entry(v->c, key, NULL, &why) == KF_ENTRY_OK;
  /* name the kernel even when meta.json is what broke */
  kf_entry_meta m;
  kf_entry_meta_load(v->c, key, &m);
  const char *reason = why ? why : "entry is incomplete";
  if (!ok)
    damage(v, key, m.kernel_id, NULL, reason);
  if (v->entries) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "key", key);
    cJSON_AddStringToObject(o, "kernel_id", m.kernel_id ? m.kernel_id : "?");
    cJSON_AddBoolToObject(o, "ok", ok);
    if (!ok)
      cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddItemToArray(v->entries, o);
  }
  kf_entry_meta_free(&m);
  free(why);
}

static void check_reference(verify_ctx *v, const char *path, const kf_manifest_kernel *k) {
  kf_entry_meta meta;
  int st = kf_cache_check_entry(v->c, k->key, &meta, NULL);
  char *why = NULL;
  if (st == KF_ENTRY_MISSING)
    why = kf_xasprintf("manifest %s references a missing entry", path);
  else if (st == KF_ENTRY_OK && strcmp(meta.checksum, k->checksum) != 0)
    why = kf_xasprintf("manifest %s expects checksum %s", path, k->checksum);
  if (why)
    damage(v, k->key, k->id, path, why);
  free(why);
  kf_entry_meta_free(&meta);
}

static void check_manifest(const char *path, void *ctx) {
  verify_ctx *v = ctx;
  kf_manifest m;
  char *err = NULL;
  if (kf_manifest_load(path, &m, &err) != 0)
    damage(v, NULL, NULL, path, "not a valid manifest");
  for (size_t i = 0; i < m.nkernels; i++) {
    const kf_manifest_kernel *k = &m.kernels[i];
    if (!k->id || !k->key || !k->checksum)
      damage(v, NULL, NULL, path, "a kernel lacks id, key or checksum");
    else
      check_reference(v, path, k);
  }
  free(err);
  kf_manifest_free(&m);
}

int kf_cmd_verify(int argc, char **argv) {
  kf_cache c;
  int json = 0;
  int rc = kf_cache_cli(argc, argv, usage, &c, &json, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  verify_ctx v = {&c, 0, 0, NULL, NULL};
  if (json) {
    v.entries = cJSON_CreateArray();
    v.problems = cJSON_CreateArray();
  }
  kf_cache_each_entry(&c, check_entry, &v);
  kf_cache_each_manifest(&c, check_manifest, &v);
  if (json) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "cache", c.root);
    cJSON_AddNumberToObject(root, "checked", v.checked);
    cJSON_AddBoolToObject(root, "ok", v.damaged == 0);
    cJSON_AddItemToObject(root, "entries", v.entries);
    cJSON_AddItemToObject(root, "damaged", v.problems);
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
    cJSON_Delete(root);
  } else if (v.damaged) {
    printf("%d damaged of %d entries in %s\n", v.damaged, v.checked, c.root);
  } else {
    printf("%d entries ok in %s\n", v.checked, c.root);
  }
  kf_cache_free(&c);
  return v.damaged ? 1 : 0;
}
