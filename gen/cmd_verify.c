/* cmd_verify.c: `kforge verify` — re-hash every entry against its meta.json
 * and every manifest reference against its entry. Reads only. */
#include "cmd_cache.h"
#include "commands.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] = "usage: kforge verify [--cache DIR]\n"
                            "Re-hashes every cache entry; prints 'damaged: <key> <kernel-id>: "
                            "<reason>'\nfor each damaged one and exits 1 if any.\n";

typedef struct {
  const kf_cache *c;
  int damaged;
  int checked;
} verify_ctx;

static void check_entry(const char *key, void *ctx) {
  verify_ctx *v = ctx;
  char *why = NULL;
  v->checked++;
  int st = kf_cache_check_entry(v->c, key, NULL, &why);
  if (st != KF_ENTRY_OK) {
    /* name the kernel even when meta.json is what broke */
    char *dir = kf_cache_entry_dir(v->c, key);
    char *mp = kf_path_join(dir, "meta.json");
    size_t len;
    char *text = kf_read_file(mp, &len);
    cJSON *m = text ? cJSON_ParseWithLength(text, len) : NULL;
    const cJSON *id = m ? cJSON_GetObjectItemCaseSensitive(m, "kernel_id") : NULL;
    printf("damaged: %s %s: %s\n", key, cJSON_IsString(id) ? id->valuestring : "?",
           why ? why : "entry is incomplete");
    cJSON_Delete(m);
    free(text);
    free(mp);
    free(dir);
    v->damaged++;
  }
  free(why);
}

static void check_manifest(const char *path, void *ctx) {
  verify_ctx *v = ctx;
  size_t len;
  char *text = kf_read_file(path, &len);
  cJSON *m = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *ks = m ? cJSON_GetObjectItemCaseSensitive(m, "kernels") : NULL;
  if (!cJSON_IsArray(ks)) {
    printf("damaged: manifest %s: not a valid manifest\n", path);
    v->damaged++;
    cJSON_Delete(m);
    return;
  }
  for (const cJSON *k = ks->child; k; k = k->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(k, "id");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(k, "key");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(k, "checksum");
    if (!cJSON_IsString(id) || !cJSON_IsString(key) || !cJSON_IsString(sum)) {
      printf("damaged: manifest %s: a kernel lacks id, key or checksum\n", path);
      v->damaged++;
      continue;
    }
    cJSON *meta = NULL;
    int st = kf_cache_check_entry(v->c, key->valuestring, &meta, NULL);
    if (st == KF_ENTRY_MISSING) {
      printf("damaged: %s %s: manifest %s references a missing entry\n", key->valuestring,
             id->valuestring, path);
      v->damaged++;
    } else if (st == KF_ENTRY_OK) {
      const cJSON *ms = cJSON_GetObjectItemCaseSensitive(meta, "checksum");
      if (!cJSON_IsString(ms) || strcmp(ms->valuestring, sum->valuestring) != 0) {
        printf("damaged: %s %s: manifest %s expects checksum %s\n", key->valuestring,
               id->valuestring, path, sum->valuestring);
        v->damaged++;
      }
    }
    cJSON_Delete(meta);
  }
  cJSON_Delete(m);
}

int kf_cmd_verify(int argc, char **argv) {
  kf_cache c;
  int rc = kf_cache_cli(argc, argv, usage, &c, NULL, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  verify_ctx v = {&c, 0, 0};
  kf_cache_each_entry(&c, check_entry, &v);
  kf_cache_each_manifest(&c, check_manifest, &v);
  if (v.damaged)
    printf("%d damaged of %d entries in %s\n", v.damaged, v.checked, c.root);
  else
    printf("%d entries ok in %s\n", v.checked, c.root);
  kf_cache_free(&c);
  return v.damaged ? 1 : 0;
}
