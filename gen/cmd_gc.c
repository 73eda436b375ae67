/* cmd_gc.c: `kforge gc --max-size SIZE` — evicts least recently used entries
 * until the cache fits, entries that no manifest references first. An entry
 * being built (its lock held) is never evicted. */
#include "cmd_cache.h"
#include "commands.h"
#include "report.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge gc --max-size SIZE [--cache DIR] [--json]\n"
    "Evicts least recently used entries until the cache holds at most SIZE bytes\n"
    "(suffixes K, M, G); entries that no manifest references go first. --json prints\n"
    "{\"cache\", \"evicted\": [{key, kernel_id, bytes, referenced}], \"evicted_bytes\",\n"
    "\"remaining_bytes\"} instead.\n";

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

int kf_cmd_gc(int argc, char **argv) {
  kf_cache c;
  const char *max = NULL;
  int json = 0;
  int rc = kf_cache_cli(argc, argv, usage, &c, &json, &max);
  if (rc)
    return rc == 1 ? 0 : rc;
  uint64_t limit;
  if (!max || kf_parse_size(max, &limit) != 0) {
    kf_error(NULL, NULL, "gc needs --max-size SIZE (e.g. 500M, 2G), got '%s'",
             max ? max : "nothing");
    kf_cache_free(&c);
    return 2;
  }
  kf_entry_list l;
  kf_entry_list_load(&c, &l);
  long long total = 0;
  for (size_t i = 0; i < l.n; i++)
    total += l.v[i].bytes;
  qsort(l.v, l.n, sizeof *l.v, cmp_victim);
  int evicted = 0;
  long long freed = 0;
  cJSON *list = json ? cJSON_CreateArray() : NULL;
  for (size_t i = 0; i < l.n && (uint64_t)total > limit; i++) {
    int fd = kf_cache_trylock(&c, l.v[i].key);
    if (fd < 0)
      continue;
    if (kf_cache_remove_entry(&c, l.v[i].key) == 0) {
      if (list)
        evicted_json(list, &l.v[i]);
      else
        printf("evicted %s %s%s\n", l.v[i].key, l.v[i].kernel_id,
               l.v[i].referenced ? " (referenced by a manifest)" : "");
      total -= l.v[i].bytes;
      freed += l.v[i].bytes;
      evicted++;
    }
    kf_cache_unlock(fd);
  }
  if (list) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "cache", c.root);
    cJSON_AddItemToObject(root, "evicted", list);
    cJSON_AddNumberToObject(root, "evicted_bytes", (double)freed);
    cJSON_AddNumberToObject(root, "remaining_bytes", (double)total);
    char *text = cJSON_Print(root);
    puts(text);
    free(text);
    cJSON_Delete(root);
  } else {
    printf("evicted %d entries (%lld bytes); %lld bytes remain in %s\n", evicted, freed, total,
           c.root);
  }
  kf_entry_list_free(&l);
  kf_cache_free(&c);
  return 0;
}
