/* A fake CUDA driver (libfake_cuda.so) for the runtime's CPU tests: the
 * entry points libkforge_rt dlopens, with the driver's error codes and its
 * rules that matter here (a context must be current to load or launch;
 * dynamic shared memory above 48 KiB needs the function's opt-in, up to the
 * device's limit). Behaviour is set by environment variables read at each
 * call: FAKE_CUDA_CC (compute capability as 90, 100; default 90),
 * FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_INIT_ERROR (cuInit's result),
 * FAKE_CUDA_OPTIN (opt-in shared memory limit, default 232448),
 * FAKE_CUDA_LOAD_US (each cuModuleLoadData busy-waits this long, as a real
 * driver's ~20 us per small cubin: startup timing on a CPU; default 0),
 * FAKE_CUDA_SMS (SMs, default 132), FAKE_CUDA_BLOCKS_PER_SM (what the
 * occupancy query answers, default 2; a cooperative launch of more blocks
 * than SMs times that fails, as a real driver's does). Built without
 * cuLaunchKernelEx (FAKE_CUDA_NO_LAUNCH_EX) or without
 * cuOccupancyMaxActiveBlocksPerMultiprocessor (FAKE_CUDA_NO_OCCUPANCY) it
 * stands for older drivers. */
#include "fake_driver.h"

#include <time.h>

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
};

static int primary_ctx; /* its address is the one context */
static _Thread_local void *ctx_stack[16];
static _Thread_local int ctx_depth;
static atomic_int initialised;

static int cc(void) { return fake_env_int("FAKE_CUDA_CC", 90); }

FAKE_EXPORT CUresult cuInit(unsigned flags) {
  int rc = fake_env_int("FAKE_CUDA_INIT_ERROR", 0);
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (rc == 0)
    atomic_store(&initialised, 1);
  return rc;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *n) {
  if (!atomic_load(&initialised))
    return CUDA_ERROR_NOT_INITIALIZED;
  *n = fake_env_int("FAKE_CUDA_DEVICES", 1);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= fake_env_int("FAKE_CUDA_DEVICES", 1))
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  switch (attr) {
  case 75:
    *v = cc() / 10;
    return CUDA_SUCCESS;
  case 76:
    *v = cc() % 10;
    return CUDA_SUCCESS;
  case 16: /* SMs */
    *v = fake_env_int("FAKE_CUDA_SMS", 132);
    return CUDA_SUCCESS;
  case 81: /* shared memory per SM */
    *v = fake_env_int("FAKE_CUDA_SM_SHARED", 233472);
    return CUDA_SUCCESS;
  case 97:
    *v = fake_env_int("FAKE_CUDA_OPTIN", 232448);
    return CUDA_SUCCESS;
  case 111: /* shared memory reserved per block */
    *v = 1024;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  (void)dev;
  *ctx = &primary_ctx;
  atomic_fetch_add(&fake.retained, 1);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  (void)dev;
  if (atomic_fetch_sub(&fake.retained, 1) <= 0) {
    atomic_fetch_add(&fake.retained, 1);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(void *ctx) {
  if (ctx != NULL && ctx != &primary_ctx)
    return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx == NULL) {
    if (ctx_depth)
      ctx_depth--;
  } else if (ctx_depth) {
    ctx_stack[ctx_depth - 1] = ctx;
  } else {
    ctx_stack[ctx_depth++] = ctx;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(void *ctx) {
  if (ctx != &primary_ctx || ctx_depth == 16)
    return CUDA_ERROR_INVALID_CONTEXT;
  ctx_stack[ctx_depth++] = ctx;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(void **ctx) {
  if (ctx_depth == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = ctx_stack[--ctx_depth];
  return CUDA_SUCCESS;
}

static int have_ctx(void) {
  return ctx_depth > 0 && ctx_stack[ctx_depth - 1] == &primary_ctx &&
         atomic_load(&fake.retained) > 0;
}

static void spin_us(int us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do
    clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

FAKE_EXPORT CUresult cuModuleLoadData(void **mod, const void *image) {
  int us = fake_env_int("FAKE_CUDA_LOAD_US", 0);
  if (!have_ctx())
    return CUDA_ERROR_INVALID_CONTEXT;
  if (us > 0)
    spin_us(us);
  return fake_module_load((fake_module **)mod, image) ? CUDA_ERROR_INVALID_IMAGE : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  if (!mod)
    return CUDA_ERROR_INVALID_HANDLE;
  return fake_function_get((fake_function **)fn, mod, name) ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuModuleUnload(void *mod) {
  if (!have_ctx())
    return CUDA_ERROR_INVALID_CONTEXT;
  fake_module_unload(mod);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
  fake_function *f = fn;
  if (attr != 8 || value < 0 || value > fake_env_int("FAKE_CUDA_OPTIN", 232448))
    return CUDA_ERROR_INVALID_VALUE;
  f->max_dynamic_shared = value;
  return CUDA_SUCCESS;
}

/* Only the static shared memory (FAKE_CUDA_STATIC_SHARED, every
 * function's). */
FAKE_EXPORT CUresult cuFuncGetAttribute(int *v, int attr, void *fn) {
  if (!fn || attr != 1)
    return CUDA_ERROR_INVALID_VALUE;
  *v = fake_env_int("FAKE_CUDA_STATIC_SHARED", 0);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shared, void *stream,
                                    void **params, void **extra) {
  fake_function *f = fn;
  unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  (void)extra;
  /* static (FAKE_CUDA_STATIC_SHARED, every function's) plus dynamic shared
   * memory above 48 KiB needs the opt-in for the dynamic part */
  const int static_shared = fake_env_int("FAKE_CUDA_STATIC_SHARED", 0);
  if (!have_ctx() || !f || !params ||
      (static_shared + (int)shared > 48 * 1024 && (int)shared > f->max_dynamic_shared)) {
    atomic_fetch_add(&fake.launch_failures, 1);
    return have_ctx() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT;
  }
  fake_record_launch(f, g, b, shared, stream, params);
  return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_NO_OCCUPANCY
FAKE_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *fn, int threads,
                                                                 size_t shared) {
  if (!have_ctx())
    return CUDA_ERROR_INVALID_CONTEXT;
  return fake_occupancy(blocks, fn, threads, shared, fake_env_int("FAKE_CUDA_BLOCKS_PER_SM", 2))
             ? CUDA_ERROR_INVALID_VALUE
             : CUDA_SUCCESS;
}
#endif // FAKE_CUDA_NO_OCCUPANCY

#ifndef FAKE_CUDA_NO_LAUNCH_EX
/* cuda.h's CUlaunchAttribute and CUlaunchConfig (CUDA 11.8 and later). */
typedef struct {
  int id;
  char pad[4];
  union {
    int value;
    char bytes[64];
  } v;
} fake_launch_attr;

typedef struct {
  unsigned g[3], b[3], shared;
  void *stream;
  fake_launch_attr *attrs;
  unsigned nattrs;
} fake_launch_config;

/* Accepts only the cooperative (id 2) and programmatic stream serialisation
 * (id 6) attributes, each at most once. */
FAKE_EXPORT CUresult cuLaunchKernelEx(const fake_launch_config *cfg, void *fn, void **params,
                                      void **extra) {
  int programmatic = 0, cooperative = 0, seen = 0;
  if (!cfg || (cfg->nattrs && !cfg->attrs))
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < cfg->nattrs; i++) {
    const int id = cfg->attrs[i].id;
    if ((id != 2 && id != 6) || (seen & (1 << id)))
      return CUDA_ERROR_INVALID_VALUE;
    seen |= 1 << id;
    if (id == 6)
      programmatic = cfg->attrs[i].v.value != 0;
    else
      cooperative = cfg->attrs[i].v.value != 0;
  }
  if (cooperative && (unsigned long long)cfg->g[0] * cfg->g[1] * cfg->g[2] >
                         (unsigned long long)fake_env_int("FAKE_CUDA_SMS", 132) *
                             (unsigned)fake_env_int("FAKE_CUDA_BLOCKS_PER_SM", 2)) {
    atomic_fetch_add(&fake.launch_failures, 1);
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  CUresult rc = cuLaunchKernel(fn, cfg->g[0], cfg->g[1], cfg->g[2], cfg->b[0], cfg->b[1], cfg->b[2],
                               cfg->shared, cfg->stream, params, extra);
  if (rc == CUDA_SUCCESS && programmatic)
    atomic_fetch_add(&fake.programmatic_launches, 1);
  if (rc == CUDA_SUCCESS && cooperative)
    atomic_fetch_add(&fake.cooperative_launches, 1);
  return rc;
}
#endif // FAKE_CUDA_NO_LAUNCH_EX

FAKE_EXPORT CUresult cuGetErrorName(CUresult rc, const char **s) {
  switch (rc) {
  case CUDA_ERROR_INVALID_VALUE:
    *s = "CUDA_ERROR_INVALID_VALUE";
    return 0;
  case CUDA_ERROR_NOT_INITIALIZED:
    *s = "CUDA_ERROR_NOT_INITIALIZED";
    return 0;
  case 100:
    *s = "CUDA_ERROR_NO_DEVICE";
    return 0;
  case CUDA_ERROR_INVALID_DEVICE:
    *s = "CUDA_ERROR_INVALID_DEVICE";
    return 0;
  case CUDA_ERROR_INVALID_IMAGE:
    *s = "CUDA_ERROR_INVALID_IMAGE";
    return 0;
  case CUDA_ERROR_INVALID_CONTEXT:
    *s = "CUDA_ERROR_INVALID_CONTEXT";
    return 0;
  case CUDA_ERROR_INVALID_HANDLE:
    *s = "CUDA_ERROR_INVALID_HANDLE";
    return 0;
  case CUDA_ERROR_NOT_FOUND:
    *s = "CUDA_ERROR_NOT_FOUND";
    return 0;
  }
  *s = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult rc, const char **s) {
  switch (rc) {
  case CUDA_ERROR_INVALID_IMAGE:
    *s = "device kernel image is invalid";
    return 0;
  case CUDA_ERROR_NOT_FOUND:
    *s = "named symbol not found";
    return 0;
  case 100:
    *s = "no CUDA-capable device is detected";
    return 0;
  case CUDA_ERROR_INVALID_CONTEXT:
    *s = "invalid device context";
    return 0;
  }
  return cuGetErrorName(rc, s) == 0 ? 0 : CUDA_ERROR_INVALID_VALUE;
}
