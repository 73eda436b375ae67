/* stats.c: the cache's statistics file (see stats.h). */
#define _GNU_SOURCE
#include "stats.h"

#include <cjson/cJSON.h>

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* Every figure with its name in the file, in the order `kforge stats`
 * prints them. */
/* clang-format would lay this list out anew on every run */
// clang-format off
#define KF_STATS_FIELDS(X)                                                                         \
  X(local_hits)                                                                                    \
  X(compiled)                                                                                      \
  X(remote_hits) X(remote_misses) X(remote_refused) X(remote_errors) X(uploads) X(requests)        \
      X(bytes_in) X(bytes_out)
// clang-format on

static char *stats_path(const kf_cache *c) { return kf_path_join(c->v1, "stats.json"); }

static void load_at(const char *path, kf_stats *out) {
  memset(out, 0, sizeof *out);
  size_t len;
  char *text = kf_read_file(path, &len);
  cJSON *o = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
#define LOAD(f)                                                                                    \
  {                                                                                                \
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, #f);                                      \
    out->f = cJSON_IsNumber(v) && v->valuedouble > 0 ? kf_i64_of_double(v->valuedouble) : 0;       \
  }
  KF_STATS_FIELDS(LOAD)
#undef LOAD
  cJSON_Delete(o);
}

void kf_stats_load(const kf_cache *c, kf_stats *out) {
  char *p = stats_path(c);
  load_at(p, out);
  free(p);
}

void kf_stats_add(const kf_cache *c, const kf_stats *d) {
  char *lock = kf_xasprintf("%s/locks/stats.lock", c->v1);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(lock);
  if (fd < 0)
    return;
  if (flock(fd, LOCK_EX) == 0) {
    char *p = stats_path(c);
    kf_stats s;
    load_at(p, &s);
    cJSON *o = cJSON_CreateObject();
#define ADD(f) cJSON_AddNumberToObject(o, #f, (double)(s.f + d->f));
    KF_STATS_FIELDS(ADD)
#undef ADD
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    kf_write_file_atomic(p, text, strlen(text));
    free(text);
    free(p);
  }
  close(fd);
}

void kf_stats_of_remote(kf_stats *d, const kf_remote_stats *r) {
  d->remote_hits = r->hits;
  d->remote_misses = r->misses;
  d->remote_refused = r->bad;
  d->remote_errors = r->errors;
  d->uploads = r->uploads;
  d->requests = r->requests;
  d->bytes_in = r->bytes_in;
  d->bytes_out = r->bytes_out;
}

void kf_stats_add_remote(const kf_cache *c, const kf_remote_stats *r) {
  kf_stats d = {0};
  kf_stats_of_remote(&d, r);
  kf_stats_add(c, &d);
}
