/* pool.h: the parallel compile engine. A unit is one kernel to build; the
 * caller keys units one after another and hands each cache miss to the pool,
 * whose workers compile it into the cache while the caller keys the next
 * (so libclang's parsing overlaps the compilers). Identical keys compile
 * once. */
#ifndef KF_POOL_H
#define KF_POOL_H

#include "cache.h"
#include "digest.h"
#include "plan.h"

enum { KF_UNIT_PENDING, KF_UNIT_CACHED, KF_UNIT_COMPILED, KF_UNIT_FAILED };

typedef struct kf_job kf_job;

typedef struct {
  kf_instance *in;
  kf_toolchain *tc;
  kf_compile_setup cs;
  kf_records records;
  char key[33];
  int keyed;
  int state;
  char checksum[33];           /* of the entry's object, once it is known good */
  char sha256[65];             /* of the same, where known ("": read it from the object) */
  long long size;              /* the object's bytes */
  kf_meta_resources resources; /* the entry's, once it is known good */
  kf_job *job;                 /* the pool's job that builds its key */
  char *error;                 /* why it failed */
  int on_remote; /* 1: on the remote (fetched or uploaded); -1: the remote's was refused */
} kf_unit;

/* How the pool shows progress on stderr. */
typedef enum {
  KF_PROGRESS_NONE,
  KF_PROGRESS_TTY,  /* one line rewritten in place: "[i/N] compiling <id>" */
  KF_PROGRESS_LINES /* a line per finished compile: "[i/N] compiled <id> (x.x s)" */
} kf_progress;

typedef struct kf_pool kf_pool;

/* Starts jobs workers compiling into c, which must be prepared. total is
 * the number of kernels the progress counter counts ("[i/N]"): every unit
 * of the build, the cached ones included (see kf_pool_settled). */
kf_pool *kf_pool_start(const kf_cache *c, int jobs, int total, kf_progress progress);
/* If a job for u's key is queued already, u shares it and 1 is returned;
 * else 0. */
int kf_pool_share(kf_pool *p, kf_unit *u);
/* Queues u (keyed, its entry missing or damaged) for compiling. */
void kf_pool_add(kf_pool *p, kf_unit *u);
/* Counts a unit settled without a compile of its own (cached, shared or
 * failed before compiling) towards the progress counter. */
void kf_pool_settled(kf_pool *p);
/* Waits for every job, sets the state, checksum and size (or error) of every
 * unit given to kf_pool_share or kf_pool_add, and frees the pool. */
void kf_pool_finish(kf_pool *p);

/* The code object's file name inside an entry of u's backend. */
const char *kf_unit_object_name(const kf_unit *u);
/* Copies a good entry's checksum, size and resources into u. */
void kf_unit_take_entry(kf_unit *u, const kf_entry_meta *meta);
/* What of u's resources breaks its instance's limits (caller frees), or
 * NULL when they hold. */
char *kf_unit_limits_problem(const kf_unit *u);

#endif /* KF_POOL_H */
