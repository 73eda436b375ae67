/* stats.h: the cache's running statistics, <cache>/v1/stats.json, as
 * ccache's: what build, warm and pull found where, and what they moved to
 * and from the remotes. Updated under an flock by every command that uses
 * the cache, best effort (a read-only cache keeps none); read by
 * `kforge stats`. */
#ifndef KF_STATS_H
#define KF_STATS_H

#include "cache.h"
#include "remote.h"

typedef struct {
  long long local_hits;     /* kernels found in the local cache */
  long long compiled;       /* kernels compiled here */
  long long remote_hits;    /* entries fetched from a remote, verified */
  long long remote_misses;  /* local misses the remotes lacked too */
  long long remote_refused; /* remote entries that failed verification */
  long long remote_errors;  /* remote requests that failed */
  long long uploads;        /* entries and manifests stored on a remote */
  long long requests;       /* sent to remotes */
  long long bytes_in, bytes_out;
} kf_stats;

/* Adds delta to the cache's statistics (best effort: nothing on a cache
 * that cannot be written). */
void kf_stats_add(const kf_cache *c, const kf_stats *delta);
/* Sets d's remote figures from a command's. */
void kf_stats_of_remote(kf_stats *d, const kf_remote_stats *r);
/* Adds a command's remote figures alone. */
void kf_stats_add_remote(const kf_cache *c, const kf_remote_stats *r);
/* Reads the statistics (all zero when there are none yet). */
void kf_stats_load(const kf_cache *c, kf_stats *out);

#endif /* KF_STATS_H */
