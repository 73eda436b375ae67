/* pool.c: the compile workers (see pool.h). A worker takes the key's flock,
 * checks the cache again (another builder may have published meanwhile),
 * runs the compiler with no shell into a private tmp directory, writes
 * meta.json and renames the directory into place. */
#define _GNU_SOURCE
#include "pool.h"
#include "amdgpu.h"
#include "report.h"
#include "sign.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kf_job {
  kf_unit *unit; /* the first unit with this key; others share the result */
  int state;
  kf_job *next; /* in the queue */
};

struct kf_pool {
  const kf_cache *cache;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kf_job *head, *tail; /* waiting to be compiled */
  int closing;
  kf_job **jobs; /* every job, for sharing and cleanup */
  size_t njobs;
  kf_unit **units; /* every unit given, to settle at the end */
  size_t nunits;
  pthread_t *threads;
  int nthreads;
  int done, total; /* progress counter: kernels settled of all */
  kf_progress progress;
};

const char *kf_unit_object_name(const kf_unit *u) {
  return u->tc->backend == KF_BACKEND_HIP ? "object.hsaco" : "object.cubin";
}

void kf_unit_take_entry(kf_unit *u, const kf_entry_meta *meta) {
  snprintf(u->checksum, sizeof u->checksum, "%s", meta->checksum);
  snprintf(u->sha256, sizeof u->sha256, "%s",
           meta->sha256 && strlen(meta->sha256) == 64 ? meta->sha256 : "");
  u->size = meta->size;
  kf_meta_resources none = KF_META_RESOURCES_NONE;
  u->resources = meta->has_resources ? meta->resources : none;
}

char *kf_unit_limits_problem(const kf_unit *u) {
  const kf_instance *in = u->in;
  int64_t threads = in->block[0] * in->block[1] * in->block[2];
  return kf_limits_check(&in->limits, &u->resources, in->arch, (int)threads, in->shared_bytes);
}

/* ptxas -v: "Used 32 registers, used 1 barriers, 512 bytes smem" and
 * "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
 * clang's resource remarks: "VGPRs: 32", "AGPRs: 0", "SGPRs: 11",
 * "ScratchSize [bytes/lane]: 0", "Occupancy [waves/SIMD]: 8",
 * "VGPRs Spill: 0", "SGPRs Spill: 0", "LDS Size [bytes/block]: 512".
 * Values are taken only from complete matches at the start of a word. */
static int amd_figure(const char *p, const char *name, long *into) {
  size_t n = strlen(name);
  if (strncmp(p, name, n) != 0)
    return 0;
  *into = strtol(p + n, NULL, 10);
  return 1;
}

static kf_meta_resources parse_resources(const char *out) {
  kf_meta_resources r = KF_META_RESOURCES_NONE;
  r.stack_bytes = r.spill_stores = r.spill_loads = r.shared_bytes = 0;
  long vgpr_spill = -1, sgpr_spill = -1;
  for (const char *p = out; p && *p; p++) {
    if (p != out && p[-1] != ' ' && p[-1] != '\n' && p[-1] != ':')
      continue;
    long a, b, c;
    int n = 0;
    if (sscanf(p, "Used %ld registers%n", &a, &n) == 1 && n > 0)
      r.registers = a;
    else if (n = 0,
             sscanf(p, "%ld bytes stack frame, %ld bytes spill stores, %ld bytes spill loads%n", &a,
                    &b, &c, &n) == 3 &&
                 n > 0) {
      r.stack_bytes = a;
      r.spill_stores = b;
      r.spill_loads = c;
    } else if (n = 0, sscanf(p, "%ld bytes smem%n", &a, &n) == 1 && n > 0)
      r.shared_bytes = a;
    else if (amd_figure(p, "VGPRs: ", &r.registers) || amd_figure(p, "AGPRs: ", &r.agprs) ||
             amd_figure(p, "SGPRs: ", &r.sgprs) ||
             amd_figure(p, "ScratchSize [bytes/lane]: ", &r.stack_bytes) ||
             amd_figure(p, "Occupancy [waves/SIMD]: ", &r.waves_per_eu) ||
             amd_figure(p, "VGPRs Spill: ", &vgpr_spill) ||
             amd_figure(p, "SGPRs Spill: ", &sgpr_spill) ||
             amd_figure(p, "LDS Size [bytes/block]: ", &r.shared_bytes))
      continue;
  }
  if (vgpr_spill >= 0 && sgpr_spill >= 0)
    r.spilled_registers = vgpr_spill + sgpr_spill;
  return r;
}

/* Writes the entry's meta.json into the build directory tmp. */
static int write_meta(const char *tmp, const kf_unit *u, const kf_strv *argv, const char *sum,
                      const char *sha256, size_t olen, const char *output, double secs) {
  kf_entry_meta m = {0};
  m.key = (char *)u->key;
  m.kernel_id = u->in->id;
  m.object = (char *)kf_unit_object_name(u);
  m.checksum = (char *)sum;
  m.sha256 = (char *)sha256;
  m.has_size = 1;
  m.size = (long long)olen;
  m.command = *argv;
  m.compiler_output = (char *)(output ? output : "");
  m.has_seconds = 1;
  m.compile_seconds = secs;
  m.has_resources = 1;
  m.resources = u->resources;
  for (size_t i = 0; i < u->records.n; i++) {
    const kf_record *r = &u->records.v[i];
    char h[17];
    kf_record_hash(r, h);
    int tokens = !strcmp(r->tag, "file") || !strcmp(r->tag, "source");
    kf_entry_meta_add_input(&m, r->tag, r->name, h, tokens ? NULL : r->value);
  }
  int rc = kf_entry_meta_write(tmp, &m);
  int e = errno;
  /* only the inputs are the meta's own; the rest is borrowed */
  kf_entry_meta inputs = {.inputs = m.inputs, .ninputs = m.ninputs};
  kf_entry_meta_free(&inputs);
  errno = e;
  return rc;
}

/* Runs the compiler for u into tmp. Returns the object's bytes (caller
 * frees), or NULL with *err set. */
static char *run_compiler(kf_unit *u, const char *tmp, kf_strv *argv, size_t *olen, char **output,
                          double *secs, char **err) {
  char *obj = kf_path_join(tmp, kf_unit_object_name(u));
  kf_strv_push(argv, u->tc->compiler);
  for (size_t i = 0; i < u->cs.compile_args.n; i++)
    kf_strv_push(argv, u->cs.compile_args.v[i]);
  kf_strv_push(argv, "-o");
  kf_strv_push(argv, obj);
  kf_strv_push(argv, u->cs.source_path);
  kf_strv_push_owned(argv, NULL);
  double t0 = kf_now();
  int rc = kf_run_capture(argv->v, output);
  *secs = kf_now() - t0;
  argv->n--;
  char *bytes = rc == 0 ? kf_read_file(obj, olen) : NULL;
  free(obj);
  if (rc < 0)
    *err = kf_xasprintf("cannot run %s: %s", u->tc->compiler, strerror(errno));
  else if (!bytes)
    *err = kf_xasprintf("%s failed (exit %d) on %s:\n%s", u->tc->compiler, rc, u->cs.source_path,
                        *output ? *output : "");
  return bytes;
}

/* Compiles and publishes u's entry with the key's lock held. */
static int build_entry(const kf_cache *c, kf_unit *u, double *secs, char **err) {
  char *tmp = kf_cache_tmpdir(c, u->key);
  if (!tmp) {
    *err = kf_xasprintf("cannot create a directory in %s/tmp: %s", c->v1, strerror(errno));
    return KF_UNIT_FAILED;
  }
  kf_strv argv = {0};
  size_t olen = 0;
  char *output = NULL;
  char *bytes = run_compiler(u, tmp, &argv, &olen, &output, secs, err);
  int result = KF_UNIT_FAILED;
  if (bytes) {
    char sum[33], sha[65];
    kf_hash128_hex(bytes, olen, sum);
    kf_sha256_hex(bytes, olen, sha);
    u->resources = parse_resources(output);
    if (u->tc->backend == KF_BACKEND_HIP) /* the object's own figures, where readable */
      kf_amdgpu_object_figures(u->tc->readelf, tmp, bytes, olen, u->in->arch, u->in->symbol,
                               &u->resources);
    if (write_meta(tmp, u, &argv, sum, sha, olen, output, *secs) != 0 ||
        kf_cache_publish(c, u->key, tmp) != 0) {
      *err = kf_xasprintf("cannot publish %s into %s: %s", u->key, c->v1, strerror(errno));
    } else {
      memcpy(u->checksum, sum, sizeof u->checksum);
      memcpy(u->sha256, sha, sizeof u->sha256);
      u->size = (long long)olen;
      result = KF_UNIT_COMPILED;
    }
  }
  if (result != KF_UNIT_COMPILED)
    kf_remove_tree(tmp);
  free(bytes);
  free(output);
  free(tmp);
  kf_strv_free(&argv);
  return result;
}

/* Compiles one key into the cache. Runs on a worker thread. */
static int compile_job(const kf_cache *c, kf_unit *u, double *secs, char **err) {
  *secs = 0;
  int fd = kf_cache_lock(c, u->key);
  if (fd < 0) {
    *err = kf_xasprintf("cannot lock %s: %s", u->key, strerror(errno));
    return KF_UNIT_FAILED;
  }
  char *why = NULL;
  kf_entry_meta found;
  int st = kf_cache_check_entry(c, u->key, &found, &why);
  if (st == KF_ENTRY_OK) {
    kf_unit_take_entry(u, &found);
    kf_entry_meta_free(&found);
    kf_cache_unlock(fd);
    return KF_UNIT_CACHED; /* another builder published it meanwhile */
  }
  if (st == KF_ENTRY_DAMAGED) {
    kf_warning(NULL, NULL, "%s: cache entry %s is damaged (%s); rebuilding", u->in->id, u->key,
               why);
    kf_cache_remove_entry(c, u->key);
  }
  free(why);
  int result = build_entry(c, u, secs, err);
  kf_cache_unlock(fd);
  return result;
}

static const char *const state_words[] = {"pending", "found", "compiled", "failed"};

/* Reports a finished job; call with the mutex held. */
static void report_done(kf_pool *p, const kf_job *j, double secs) {
  p->done++;
  if (p->progress == KF_PROGRESS_TTY && j->unit->error)
    fputs("\r\033[K", stderr);
  if (j->unit->error)
    kf_error(NULL, NULL, "%s: %s", j->unit->in->id, j->unit->error);
  if (p->progress == KF_PROGRESS_LINES) {
    fprintf(stderr, "[%d/%d] %s %s (%.1f s)\n", p->done, p->total, state_words[j->state],
            j->unit->in->id, secs);
    fflush(stderr);
  }
}

static void *worker(void *arg) {
  kf_pool *p = arg;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (!p->head && !p->closing)
      pthread_cond_wait(&p->cv, &p->mu);
    kf_job *j = p->head;
    if (!j) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    p->head = j->next;
    if (!p->head)
      p->tail = NULL;
    if (p->progress == KF_PROGRESS_TTY) {
      fprintf(stderr, "\r\033[K[%d/%d] compiling %s", p->done, p->total, j->unit->in->id);
      fflush(stderr);
    }
    pthread_mutex_unlock(&p->mu);
    char *err = NULL;
    double secs;
    int st = compile_job(p->cache, j->unit, &secs, &err);
    pthread_mutex_lock(&p->mu);
    j->state = st;
    j->unit->error = err;
    report_done(p, j, secs);
    pthread_mutex_unlock(&p->mu);
  }
}

kf_pool *kf_pool_start(const kf_cache *c, int jobs, int total, kf_progress progress) {
  kf_pool *p = kf_xcalloc(1, sizeof *p);
  p->cache = c;
  p->total = total;
  p->progress = progress;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->nthreads = jobs < 1 ? 1 : jobs;
  if (total > 0 && p->nthreads > total)
    p->nthreads = total;
  p->threads = kf_xcalloc((size_t)p->nthreads, sizeof *p->threads);
  for (int t = 0; t < p->nthreads; t++)
    pthread_create(&p->threads[t], NULL, worker, p);
  return p;
}

static void remember(kf_pool *p, kf_unit *u) {
  p->units = kf_xpush(p->units, p->nunits, sizeof *p->units);
  p->units[p->nunits++] = u;
}

int kf_pool_share(kf_pool *p, kf_unit *u) {
  for (size_t j = 0; j < p->njobs; j++)
    if (!strcmp(p->jobs[j]->unit->key, u->key)) {
      u->job = p->jobs[j];
      remember(p, u);
      kf_pool_settled(p);
      return 1;
    }
  return 0;
}

void kf_pool_add(kf_pool *p, kf_unit *u) {
  kf_job *j = kf_xcalloc(1, sizeof *j);
  j->unit = u;
  u->job = j;
  p->jobs = kf_xpush(p->jobs, p->njobs, sizeof *p->jobs);
  p->jobs[p->njobs++] = j;
  remember(p, u);
  pthread_mutex_lock(&p->mu);
  if (p->tail)
    p->tail->next = j;
  else
    p->head = j;
  p->tail = j;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void kf_pool_settled(kf_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->done++;
  pthread_mutex_unlock(&p->mu);
}

/* A unit takes its job's result; one that shares another's job takes that
 * unit's entry. */
static void settle(kf_unit *u) {
  const kf_unit *first = u->job->unit;
  int st = u->job->state;
  if (first != u && st == KF_UNIT_FAILED && !u->error)
    u->error = kf_xstrdup("an identical kernel failed to compile");
  u->state = st == KF_UNIT_PENDING ? KF_UNIT_FAILED : st;
  if (first != u) {
    memcpy(u->checksum, first->checksum, sizeof u->checksum);
    memcpy(u->sha256, first->sha256, sizeof u->sha256);
    u->size = first->size;
    u->resources = first->resources;
  }
  u->job = NULL;
}

void kf_pool_finish(kf_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->closing = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int t = 0; t < p->nthreads; t++)
    pthread_join(p->threads[t], NULL);
  if (p->progress == KF_PROGRESS_TTY)
    fputs("\r\033[K", stderr);
  for (size_t i = 0; i < p->nunits; i++)
    settle(p->units[i]);
  for (size_t j = 0; j < p->njobs; j++)
    free(p->jobs[j]);
  free(p->jobs);
  free(p->units);
  free(p->threads);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}
