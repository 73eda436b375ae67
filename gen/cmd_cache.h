/* cmd_cache.h: what the cache-inspecting commands (ls, verify, gc) share:
 * a listing of entries with their kernel id, size, last use and whether a
 * manifest references them. */
#ifndef KF_CMD_CACHE_H
#define KF_CMD_CACHE_H

#include "cache.h"

#include <time.h>

typedef struct {
  char key[33];
  char *kernel_id; /* from meta.json, or "?" */
  long long bytes; /* object + meta.json */
  time_t last_use;
  int referenced; /* by some manifest */
} kf_entry_info;

typedef struct {
  kf_entry_info *v;
  size_t n;
  kf_strv referenced_keys;
} kf_entry_list;

/* Lists every entry (sorted by key). Reads only. */
void kf_entry_list_load(const kf_cache *c, kf_entry_list *out);
void kf_entry_list_free(kf_entry_list *l);
/* Parses the cache options of ls/verify/gc. Returns 0, 1 (help shown) or 2. */
int kf_cache_cli(int argc, char **argv, const char *usage, kf_cache *c, int *json,
                 const char **max_size);

#endif /* KF_CMD_CACHE_H */
