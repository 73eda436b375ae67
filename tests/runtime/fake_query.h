/* Test-side access to the fake drivers' bookkeeping (fake_driver.h). The
 * runtime dlopens the fake by path; dlopen of the same path here returns the
 * same instance, so these read what the runtime did. */
#ifndef KF_FAKE_QUERY_H
#define KF_FAKE_QUERY_H

#include <dlfcn.h>
#include <stdlib.h>

static inline void *fq_sym(const char *lib, const char *name) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  void *s;
  if (!h)
    abort();
  s = dlsym(h, name);
  if (!s)
    abort();
  return s;
}

/* The library's own export, or NULL (no abort). */
static inline void *fq_sym_or_null(const char *lib, const char *name) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h)
    abort();
  return dlsym(h, name);
}

static inline long fq_stat(const char *lib, const char *what) {
  long (*fn)(const char *) = (long (*)(const char *))fq_sym(lib, "fake_stat");
  return fn(what);
}

static inline void fq_reset(const char *lib) { ((void (*)(void))fq_sym(lib, "fake_reset"))(); }

static inline long long fq_stream(const char *lib, int stream, int rows) {
  long long (*fn)(int, int) = (long long (*)(int, int))fq_sym(lib, "fake_stream_stat");
  return fn(stream, rows);
}

typedef struct fq_launch {
  char name[128];
  unsigned grid[3], block[3], shared;
  void *stream;
  long long params[16];
  int nparams;
} fq_launch;

static inline void fq_last(const char *lib, fq_launch *l) {
  int (*fn)(char *, size_t, unsigned *, unsigned *, unsigned *, void **, long long *, int *) =
      (int (*)(char *, size_t, unsigned *, unsigned *, unsigned *, void **, long long *,
               int *))fq_sym(lib, "fake_last_launch");
  fn(l->name, sizeof l->name, l->grid, l->block, &l->shared, &l->stream, l->params, &l->nparams);
}

#endif /* KF_FAKE_QUERY_H */
