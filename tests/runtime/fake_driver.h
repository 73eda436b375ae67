/* Shared by the fake CUDA driver and the fake HIP runtime used by the
 * runtime's CPU tests: the fake code-object format and the bookkeeping of
 * loads and launches that tests read back.
 *
 * A fake object is text: "KFFAKE\n" then one line per entry symbol,
 * "<symbol> <param sizes, comma-separated>\n", NUL-terminated. Loading
 * anything else fails as an invalid image, and resolving a symbol that has
 * no line fails as "not found", as a real driver would. */
#ifndef KF_FAKE_DRIVER_H
#define KF_FAKE_DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAGIC "KFFAKE\n"
#define FAKE_MAX_PARAMS 16
#define FAKE_STREAMS 64

typedef struct fake_function fake_function;

typedef struct fake_module {
  char *text;
  int nfns;
  fake_function *fns[32]; /* resolved functions, freed with the module */
} fake_module;

struct fake_function {
  struct fake_module *module;
  char name[128];
  int nparams;
  size_t sizes[FAKE_MAX_PARAMS];
  int max_dynamic_shared;
};

/* What tests read back (fake_stat, fake_last_launch, fake_stream_stat). */
typedef struct fake_state {
  atomic_long loads, unloads, live_modules, launches, launch_failures;
  atomic_long programmatic_launches; /* cuLaunchKernelEx with programmatic serialisation */
  atomic_long cooperative_launches;  /* cuLaunchKernelEx with the cooperative attribute,
                                        hipModuleLaunchCooperativeKernel */
  atomic_long occupancy_queries;     /* the occupancy entry point's calls, and its */
  atomic_long occupancy_threads;     /* last block size and dynamic shared memory */
  atomic_long occupancy_shared;
  atomic_long retained;
  pthread_mutex_t mu; /* guards last_* and per-stream sums */
  char last_name[128];
  unsigned last_grid[3], last_block[3], last_shared;
  void *last_stream;
  int last_nparams;
  long long last_params[FAKE_MAX_PARAMS];
  long long stream_launches[FAKE_STREAMS], stream_rows[FAKE_STREAMS];
} fake_state;

static fake_state fake = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int fake_env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* 0 on success, else nonzero (caller maps to its invalid-image code). */
static int fake_module_load(fake_module **out, const void *image) {
  const char *text = image;
  fake_module *m;
  if (!image || strncmp(text, FAKE_MAGIC, strlen(FAKE_MAGIC)) != 0)
    return -1;
  m = calloc(1, sizeof *m);
  m->text = strdup(text);
  *out = m;
  atomic_fetch_add(&fake.loads, 1);
  atomic_fetch_add(&fake.live_modules, 1);
  return 0;
}

static void fake_module_unload(fake_module *m) {
  for (int i = 0; i < m->nfns; i++)
    free(m->fns[i]);
  free(m->text);
  free(m);
  atomic_fetch_add(&fake.unloads, 1);
  atomic_fetch_sub(&fake.live_modules, 1);
}

static int fake_function_get(fake_function **out, fake_module *m, const char *name) {
  size_t n = strlen(name);
  const char *p = m->text + strlen(FAKE_MAGIC);
  for (int i = 0; i < m->nfns; i++)
    if (strcmp(m->fns[i]->name, name) == 0) {
      *out = m->fns[i];
      return 0;
    }
  while (p && *p && m->nfns < 32) {
    if (strncmp(p, name, n) == 0 && p[n] == ' ') {
      fake_function *f = calloc(1, sizeof *f);
      m->fns[m->nfns++] = f;
      const char *s = p + n + 1;
      f->module = m;
      snprintf(f->name, sizeof f->name, "%s", name);
      while (*s && *s != '\n' && f->nparams < FAKE_MAX_PARAMS) {
        f->sizes[f->nparams++] = (size_t)strtoul(s, (char **)&s, 10);
        if (*s == ',')
          s++;
      }
      *out = f;
      return 0;
    }
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  return -1;
}

static void fake_record_launch(const fake_function *f, const unsigned g[3], const unsigned b[3],
                               unsigned shared, void *stream, void **params) {
  long long values[FAKE_MAX_PARAMS] = {0};
  uintptr_t s = (uintptr_t)stream;
  for (int i = 0; i < f->nparams; i++)
    memcpy(&values[i], params[i], f->sizes[i] <= 8 ? f->sizes[i] : 8);
  pthread_mutex_lock(&fake.mu);
  snprintf(fake.last_name, sizeof fake.last_name, "%s", f->name);
  memcpy(fake.last_grid, g, sizeof fake.last_grid);
  memcpy(fake.last_block, b, sizeof fake.last_block);
  fake.last_shared = shared;
  fake.last_stream = stream;
  fake.last_nparams = f->nparams;
  memcpy(fake.last_params, values, sizeof values);
  if (s < FAKE_STREAMS) {
    fake.stream_launches[s]++;
    /* The last parameter is "int rows" by the kforge convention. */
    if (f->nparams > 0)
      fake.stream_rows[s] += (int)values[f->nparams - 1];
  }
  pthread_mutex_unlock(&fake.mu);
  atomic_fetch_add(&fake.launches, 1);
}

#define FAKE_EXPORT __attribute__((visibility("default")))

/* The occupancy entry points: `per_sm` blocks of any function per SM (CU),
 * recording what was asked. */
__attribute__((unused)) static int fake_occupancy(int *blocks, const void *fn, int threads,
                                                  size_t shared, int per_sm) {
  if (!blocks || !fn || threads <= 0)
    return -1;
  atomic_fetch_add(&fake.occupancy_queries, 1);
  atomic_store(&fake.occupancy_threads, threads);
  atomic_store(&fake.occupancy_shared, (long)shared);
  *blocks = per_sm;
  return 0;
}

/* Test-side queries, exported by both fakes. */
FAKE_EXPORT long fake_stat(const char *what) {
  if (strcmp(what, "loads") == 0)
    return atomic_load(&fake.loads);
  if (strcmp(what, "unloads") == 0)
    return atomic_load(&fake.unloads);
  if (strcmp(what, "live_modules") == 0)
    return atomic_load(&fake.live_modules);
  if (strcmp(what, "launches") == 0)
    return atomic_load(&fake.launches);
  if (strcmp(what, "launch_failures") == 0)
    return atomic_load(&fake.launch_failures);
  if (strcmp(what, "programmatic_launches") == 0)
    return atomic_load(&fake.programmatic_launches);
  if (strcmp(what, "retained") == 0)
    return atomic_load(&fake.retained);
  if (strcmp(what, "cooperative_launches") == 0)
    return atomic_load(&fake.cooperative_launches);
  if (strcmp(what, "occupancy_queries") == 0)
    return atomic_load(&fake.occupancy_queries);
  if (strcmp(what, "occupancy_threads") == 0)
    return atomic_load(&fake.occupancy_threads);
  if (strcmp(what, "occupancy_shared") == 0)
    return atomic_load(&fake.occupancy_shared);
  return -1;
}

FAKE_EXPORT int fake_last_launch(char *name, size_t size, unsigned grid[3], unsigned block[3],
                                 unsigned *shared, void **stream, long long *params, int *nparams) {
  pthread_mutex_lock(&fake.mu);
  snprintf(name, size, "%s", fake.last_name);
  memcpy(grid, fake.last_grid, sizeof fake.last_grid);
  memcpy(block, fake.last_block, sizeof fake.last_block);
  *shared = fake.last_shared;
  *stream = fake.last_stream;
  *nparams = fake.last_nparams;
  memcpy(params, fake.last_params, sizeof fake.last_params);
  pthread_mutex_unlock(&fake.mu);
  return 0;
}

FAKE_EXPORT long long fake_stream_stat(int stream, int rows) {
  long long v;
  if (stream < 0 || stream >= FAKE_STREAMS)
    return -1;
  pthread_mutex_lock(&fake.mu);
  v = rows ? fake.stream_rows[stream] : fake.stream_launches[stream];
  pthread_mutex_unlock(&fake.mu);
  return v;
}

FAKE_EXPORT void fake_reset(void) {
  atomic_store(&fake.loads, 0);
  atomic_store(&fake.unloads, 0);
  atomic_store(&fake.launches, 0);
  atomic_store(&fake.launch_failures, 0);
  atomic_store(&fake.programmatic_launches, 0);
  atomic_store(&fake.cooperative_launches, 0);
  atomic_store(&fake.occupancy_queries, 0);
  atomic_store(&fake.occupancy_threads, 0);
  atomic_store(&fake.occupancy_shared, 0);
  pthread_mutex_lock(&fake.mu);
  memset(fake.stream_launches, 0, sizeof fake.stream_launches);
  memset(fake.stream_rows, 0, sizeof fake.stream_rows);
  fake.last_name[0] = '\0';
  pthread_mutex_unlock(&fake.mu);
}

#endif /* KF_FAKE_DRIVER_H */
