/* kf_bench_startup: how long a server waits, from kf_runtime_open until every
 * kernel of a model is resolved, against the floor of any loader: plain
 * cuModuleLoadData + cuModuleGetFunction on the same bytes, already in
 * memory, in the same process. Driver initialisation (dlopen, cuInit, the
 * primary context), which every loader pays once, is timed on its own first.
 * Runs on a GPU (scripts/bench-startup); builds anywhere.
 *
 * Usage: kf_bench_startup CACHE MODEL [MODEL...]   (env: BENCH_REPS=7,
 * KFORGE_CUDA_DRIVER) Prints one "result" line per measurement and a table. */
#define _GNU_SOURCE
#include "kforge/runtime.h"

#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef struct cu {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(int *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
  CUresult (*cuCtxSetCurrent)(void *);
  CUresult (*cuModuleLoadData)(void **, const void *);
  CUresult (*cuModuleGetFunction)(void **, void *, const char *);
  CUresult (*cuModuleUnload)(void *);
} cu;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  fclose(f);
  if (len)
    *len = (size_t)n;
  return buf;
}

typedef struct model {
  int n;
  char **kind, **symbol, **path;
  int *width;
  char **bytes;
} model;

static int model_read(const char *cache, const char *name, const char *arch, model *m) {
  char path[4096];
  char *text;
  cJSON *root, *ks;
  snprintf(path, sizeof path, "%s/v1/manifests/%s/%s.json", cache, name, arch);
  if (!(text = slurp(path, NULL))) {
    fprintf(stderr, "bench: cannot read %s\n", path);
    return -1;
  }
  root = cJSON_Parse(text);
  free(text);
  ks = cJSON_GetObjectItem(root, "kernels");
  m->n = cJSON_GetArraySize(ks);
  m->kind = calloc((size_t)m->n, sizeof(char *));
  m->symbol = calloc((size_t)m->n, sizeof(char *));
  m->path = calloc((size_t)m->n, sizeof(char *));
  m->bytes = calloc((size_t)m->n, sizeof(char *));
  m->width = calloc((size_t)m->n, sizeof(int));
  for (int i = 0; i < m->n; i++) {
    cJSON *k = cJSON_GetArrayItem(ks, i);
    m->kind[i] = strdup(cJSON_GetObjectItem(k, "kind")->valuestring);
    m->symbol[i] = strdup(cJSON_GetObjectItem(k, "symbol")->valuestring);
    m->width[i] = cJSON_GetObjectItem(k, "width")->valueint;
    if (asprintf(&m->path[i], "%s/v1/%s", cache, cJSON_GetObjectItem(k, "object")->valuestring) < 0)
      return -1;
  }
  cJSON_Delete(root);
  return 0;
}

/* Floor: load + resolve every object from bytes in memory. */
static double floor_once(const cu *c, model *m, int with_read) {
  void **mods = calloc((size_t)m->n, sizeof(void *));
  double t0 = now_ms(), t;
  for (int i = 0; i < m->n; i++) {
    void *fn;
    char *bytes = with_read ? slurp(m->path[i], NULL) : m->bytes[i];
    if (c->cuModuleLoadData(&mods[i], bytes) != 0 ||
        c->cuModuleGetFunction(&fn, mods[i], m->symbol[i]) != 0) {
      fprintf(stderr, "bench: floor load of %s failed\n", m->path[i]);
      exit(1);
    }
    if (with_read)
      free(bytes);
  }
  t = now_ms() - t0;
  for (int i = 0; i < m->n; i++)
    c->cuModuleUnload(mods[i]);
  free(mods);
  return t;
}

static double kforge_once(const char *cache, const char *name, model *m, int lazy,
                          double *open_only) {
  kf_runtime_options o;
  kf_runtime *rt;
  double t0, t;
  kf_runtime_options_init(&o);
  o.cache_dir = cache;
  o.model = name;
  o.lazy = lazy;
  o.backend = KF_BACKEND_CUDA;
  t0 = now_ms();
  if (kf_runtime_open(&o, &rt) != KF_OK) {
    fprintf(stderr, "bench: kf_runtime_open: %s\n", kf_last_error());
    exit(1);
  }
  *open_only = now_ms() - t0;
  for (int i = 0; i < m->n; i++) {
    kf_kernel *k;
    if (kf_kernel_find(rt, m->kind[i], m->width[i], &k) != KF_OK ||
        kf_kernel_width(k) != m->width[i]) {
      fprintf(stderr, "bench: kf_kernel_find: %s\n", kf_last_error());
      exit(1);
    }
  }
  t = now_ms() - t0;
  kf_runtime_close(rt);
  return t;
}

int main(int argc, char **argv) {
  const char *lib = getenv("KFORGE_CUDA_DRIVER");
  int reps = getenv("BENCH_REPS") ? atoi(getenv("BENCH_REPS")) : 7;
  double t0, t_dlopen, t_init;
  void *h, *ctx;
  int dev;
  cu c;
  char arch[32] = "sm_90a";
  if (argc < 3) {
    fprintf(stderr, "usage: %s CACHE MODEL [MODEL...]\n", argv[0]);
    return 2;
  }
  if (getenv("BENCH_ARCH"))
    snprintf(arch, sizeof arch, "%s", getenv("BENCH_ARCH"));
  t0 = now_ms();
  h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  t_dlopen = now_ms() - t0;
  if (!h) {
    fprintf(stderr, "bench: %s\n", dlerror());
    return 1;
  }
  *(void **)&c.cuInit = dlsym(h, "cuInit");
  *(void **)&c.cuDeviceGet = dlsym(h, "cuDeviceGet");
  *(void **)&c.cuDevicePrimaryCtxRetain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&c.cuCtxSetCurrent = dlsym(h, "cuCtxSetCurrent");
  *(void **)&c.cuModuleLoadData = dlsym(h, "cuModuleLoadData");
  *(void **)&c.cuModuleGetFunction = dlsym(h, "cuModuleGetFunction");
  *(void **)&c.cuModuleUnload = dlsym(h, "cuModuleUnload");
  if (!c.cuInit || !c.cuDeviceGet || !c.cuDevicePrimaryCtxRetain || !c.cuCtxSetCurrent ||
      !c.cuModuleLoadData || !c.cuModuleGetFunction || !c.cuModuleUnload) {
    fprintf(stderr, "bench: the driver lacks an entry point\n");
    return 1;
  }
  t0 = now_ms();
  if (c.cuInit(0) || c.cuDeviceGet(&dev, 0) || c.cuDevicePrimaryCtxRetain(&ctx, dev) ||
      c.cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "bench: driver initialisation failed\n");
    return 1;
  }
  t_init = now_ms() - t0;
  printf("result driver_init dlopen_ms=%.3f init_ctx_ms=%.3f\n", t_dlopen, t_init);
  printf("\n%-10s %5s %11s %11s %11s %11s %11s %9s %9s\n", "model", "N", "floor", "floor+read",
         "kf_eager", "kf_lazy", "lazy_open", "eager/fl", "us/kern");
  for (int a = 2; a < argc; a++) {
    model m = {0};
    double *fl = calloc((size_t)reps, sizeof(double));
    double *flr = calloc((size_t)reps, sizeof(double));
    double *ea = calloc((size_t)reps, sizeof(double));
    double *la = calloc((size_t)reps, sizeof(double));
    double *lo = calloc((size_t)reps, sizeof(double));
    double dummy, mf, mfr, me, ml, mlo;
    if (model_read(argv[1], argv[a], arch, &m) != 0)
      return 1;
    for (int i = 0; i < m.n; i++)
      m.bytes[i] = slurp(m.path[i], NULL);
    /* One untimed round of each warms the page cache and the driver. */
    floor_once(&c, &m, 0);
    kforge_once(argv[1], argv[a], &m, 0, &dummy);
    for (int r = 0; r < reps; r++) {
      fl[r] = floor_once(&c, &m, 0);
      flr[r] = floor_once(&c, &m, 1);
      ea[r] = kforge_once(argv[1], argv[a], &m, 0, &dummy);
      la[r] = kforge_once(argv[1], argv[a], &m, 1, &lo[r]);
    }
    mf = median(fl, reps);
    mfr = median(flr, reps);
    me = median(ea, reps);
    ml = median(la, reps);
    mlo = median(lo, reps);
    printf("result model=%s n=%d floor_ms=%.3f floor_read_ms=%.3f "
           "kforge_eager_ms=%.3f kforge_lazy_ms=%.3f lazy_open_ms=%.3f "
           "reps=%d\n",
           argv[a], m.n, mf, mfr, me, ml, mlo, reps);
    printf("%-10s %5d %9.2fms %9.2fms %9.2fms %9.2fms %9.2fms %8.2fx %9.1f\n", argv[a], m.n, mf,
           mfr, me, ml, mlo, me / mf, 1e3 * me / m.n);
    free(fl);
    free(flr);
    free(ea);
    free(la);
    free(lo);
  }
  return 0;
}
