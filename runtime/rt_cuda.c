/* CUDA backend: the driver API (libcuda.so.1) opened with dlopen, so that
 * libkforge_rt links no GPU library and builds without CUDA headers. The few
 * types and entry points used are declared here. Objects are loaded into the
 * device's primary context (the one the CUDA runtime and PyTorch use); each
 * call that needs it makes that context current for its duration and
 * restores the caller's, so any thread may launch. */
#include "rt_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;

/* cuLaunchKernelEx's configuration (cuda.h, CUDA 11.8 and later): an
 * attribute is its id padded to 8 bytes, then a 64-byte value. */
typedef struct {
  int id;
  char pad[4];
  union {
    int programmatic_stream_serialization;
    int cooperative;
    char bytes[64];
  } value;
} CUlaunchAttribute;

typedef struct {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
} CUlaunchConfig;

enum {
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_NOT_FOUND = 500,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
  RT_CUDA_DEFAULT_SHARED = 48 * 1024 /* usable without opting in */
};

typedef struct cuda_fns {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext *);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext *);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncGetAttribute)(int *, int, CUfunction); /* optional */
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **); /* optional */
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int,
                                                          size_t); /* optional */
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
} cuda_fns;

/* Entry points by exported name; the _v2 names are what cuda.h maps the
 * plain names to since CUDA 4/11, the plain ones the fallback. Optional ones
 * may be missing (older drivers): their pointer stays NULL. */
static const struct {
  const char *name, *alt;
  size_t offset;
  int optional;
} cuda_syms[] = {
#define SYM(field, name, alt)                                                                      \
  { name, alt, offsetof(cuda_fns, field), 0 }
#define OPTIONAL_SYM(field, name)                                                                  \
  { name, NULL, offsetof(cuda_fns, field), 1 }
    SYM(cuInit, "cuInit", NULL),
    SYM(cuDeviceGetCount, "cuDeviceGetCount", NULL),
    SYM(cuDeviceGet, "cuDeviceGet", NULL),
    SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL),
    SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
    SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
    SYM(cuCtxGetCurrent, "cuCtxGetCurrent", NULL),
    SYM(cuCtxPushCurrent, "cuCtxPushCurrent_v2", "cuCtxPushCurrent"),
    SYM(cuCtxPopCurrent, "cuCtxPopCurrent_v2", "cuCtxPopCurrent"),
    SYM(cuModuleLoadData, "cuModuleLoadData", NULL),
    SYM(cuModuleGetFunction, "cuModuleGetFunction", NULL),
    SYM(cuModuleUnload, "cuModuleUnload", NULL),
    SYM(cuFuncSetAttribute, "cuFuncSetAttribute", NULL),
    OPTIONAL_SYM(cuFuncGetAttribute, "cuFuncGetAttribute"),
    SYM(cuLaunchKernel, "cuLaunchKernel", NULL),
    OPTIONAL_SYM(cuLaunchKernelEx, "cuLaunchKernelEx"),
    OPTIONAL_SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor,
                 "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
    SYM(cuGetErrorName, "cuGetErrorName", NULL),
    SYM(cuGetErrorString, "cuGetErrorString", NULL),
#undef SYM
#undef OPTIONAL_SYM
};

/* Call sites read as driver calls: RT_CHECK(d, err, cuInit(0)) records
 * "cuInit(0)" and calls through the table f in scope. */
#define cuInit (f->cuInit)
#define cuDeviceGetCount (f->cuDeviceGetCount)
#define cuDeviceGet (f->cuDeviceGet)
#define cuDeviceGetAttribute (f->cuDeviceGetAttribute)
#define cuDevicePrimaryCtxRetain (f->cuDevicePrimaryCtxRetain)
#define cuDevicePrimaryCtxRelease (f->cuDevicePrimaryCtxRelease)
#define cuCtxGetCurrent (f->cuCtxGetCurrent)
#define cuCtxPushCurrent (f->cuCtxPushCurrent)
#define cuCtxPopCurrent (f->cuCtxPopCurrent)
#define cuModuleLoadData (f->cuModuleLoadData)
#define cuModuleGetFunction (f->cuModuleGetFunction)
#define cuModuleUnload (f->cuModuleUnload)
#define cuFuncSetAttribute (f->cuFuncSetAttribute)
#define cuFuncGetAttribute (f->cuFuncGetAttribute)
#define cuLaunchKernel (f->cuLaunchKernel)
#define cuLaunchKernelEx (f->cuLaunchKernelEx)
#define cuOccupancyMaxActiveBlocksPerMultiprocessor (f->cuOccupancyMaxActiveBlocksPerMultiprocessor)

static void cuda_error_text(const rt_driver *d, int code, char *buf, size_t size) {
  const cuda_fns *f = d->fns;
  const char *name = NULL, *text = NULL;
  if (f->cuGetErrorName(code, &name) != 0)
    name = NULL;
  if (f->cuGetErrorString(code, &text) != 0)
    text = NULL;
  if (name && text)
    snprintf(buf, size, "%s (%s)", name, text);
  else
    snprintf(buf, size, "CUresult %d", code);
}

/* Makes the primary context current unless it is; *pushed says to pop. */
static kf_status ctx_enter(rt_driver *d, int *pushed, rt_err *err) {
  const cuda_fns *f = d->fns;
  CUcontext cur = NULL;
  *pushed = 0;
  if (RT_CHECK(d, err, cuCtxGetCurrent(&cur)) != KF_OK)
    return err->status;
  if (cur == d->ctx)
    return KF_OK;
  if (RT_CHECK(d, err, cuCtxPushCurrent(d->ctx)) != KF_OK)
    return err->status;
  *pushed = 1;
  return KF_OK;
}

static void ctx_leave(rt_driver *d, int pushed) {
  const cuda_fns *f = d->fns;
  CUcontext popped;
  rt_err ignored; /* the caller's own outcome is what it reports */
  if (pushed)
    RT_CHECK(d, &ignored, cuCtxPopCurrent(&popped));
}

/* The dynamic shared memory that keeps at most max_blocks blocks of fn on an
 * SM (launch.max_blocks_per_sm, one_wave): enough that one block more would
 * not fit beside them. shared itself when that already holds, when more
 * would not fit in a block, or when the driver cannot tell the sizes. */
static unsigned cuda_capped_shared(rt_driver *d, CUfunction fn, unsigned shared,
                                   unsigned max_blocks) {
  const cuda_fns *f = d->fns;
  int static_shared = 0;
  rt_err ignored; /* without the sizes the launch goes ahead uncapped */
  if (!max_blocks || d->sm_shared <= 0 || !cuFuncGetAttribute ||
      RT_CHECK(d, &ignored,
               cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn)) !=
          KF_OK)
    return shared;
  const long long per_block = (long long)d->sm_shared / ((long long)max_blocks + 1) + 1;
  const long long need = per_block - static_shared - d->block_reserved_shared;
  if (need <= (long long)shared || static_shared + need > (long long)d->shared_limit)
    return shared;
  return (unsigned)need;
}

static kf_status cuda_load(rt_driver *d, const void *image, const char *symbol, unsigned shared,
                           unsigned max_blocks, void **module, void **function,
                           unsigned *launch_shared, rt_err *err) {
  const cuda_fns *f = d->fns;
  CUmodule mod = NULL;
  CUfunction fn = NULL;
  int pushed;
  kf_status st;
  rt_err ignored;
  *module = *function = NULL;
  if ((st = ctx_enter(d, &pushed, err)) != KF_OK)
    return st;
  if ((st = RT_CHECK(d, err, cuModuleLoadData(&mod, image))) != KF_OK)
    goto out;
  if ((st = RT_CHECK(d, err, cuModuleGetFunction(&fn, mod, symbol))) != KF_OK) {
    if (err->code == CUDA_ERROR_NOT_FOUND)
      err->status = st = KF_ERR_SYMBOL;
    goto unload;
  }
  /* The 48 KiB usable without opting in count the kernel's static shared
   * memory too, which the manifest does not give: any dynamic shared memory
   * is opted into (which also checks, at load, that it fits beside it). */
  shared = cuda_capped_shared(d, fn, shared, max_blocks);
  if (shared > 0 &&
      (st = RT_CHECK(d, err,
                     cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        (int)shared))) != KF_OK)
    goto unload;
  *module = mod;
  *function = fn;
  *launch_shared = shared;
  goto out;
unload:
  RT_CHECK(d, &ignored, cuModuleUnload(mod));
out:
  ctx_leave(d, pushed);
  return st;
}

/* Cooperative kernels need both the occupancy query (their grid is checked
 * against it at load) and cuLaunchKernelEx (their launches carry the
 * cooperative attribute): a driver without either refuses them at load. */
static kf_status cuda_occupancy(rt_driver *d, void *function, unsigned threads, unsigned shared,
                                int *per_sm, rt_err *err) {
  const cuda_fns *f = d->fns;
  int pushed;
  kf_status st;
  *per_sm = 0;
  if (!cuOccupancyMaxActiveBlocksPerMultiprocessor || !cuLaunchKernelEx)
    return rt_err_set(err, KF_ERR_CORESIDENCY, "the CUDA driver %s lacks %s", d->lib_path,
                      cuLaunchKernelEx ? "cuOccupancyMaxActiveBlocksPerMultiprocessor"
                                       : "cuLaunchKernelEx (CUDA 11.8 and later)");
  if ((st = ctx_enter(d, &pushed, err)) != KF_OK)
    return st;
  st = RT_CHECK(
      d, err,
      cuOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, function, (int)threads, (size_t)shared));
  ctx_leave(d, pushed);
  return st;
}

/* A programmatic kernel (docs/contracts.md) goes through cuLaunchKernelEx
 * with programmatic stream serialisation, where the driver has it; any other
 * launch, or a driver without it, is an ordinary cuLaunchKernel, which such a
 * kernel also runs correctly under. A cooperative kernel always goes through
 * cuLaunchKernelEx with the cooperative attribute (beside the programmatic
 * one when both are set); cuda_occupancy refused it at load otherwise. */
static kf_status cuda_launch(rt_driver *d, void *function, const unsigned grid[3],
                             const unsigned block[3], unsigned shared, unsigned flags, void *stream,
                             void **params, rt_err *err) {
  const cuda_fns *f = d->fns;
  int pushed;
  kf_status st;
  if ((st = ctx_enter(d, &pushed, err)) != KF_OK)
    return st;
  if ((flags & (RT_LAUNCH_PROGRAMMATIC | RT_LAUNCH_COOPERATIVE)) &&
      cuLaunchKernelEx) { /* NULL: an older driver */
    CUlaunchAttribute attrs[2];
    unsigned n = 0;
    memset(attrs, 0, sizeof attrs);
    if (flags & RT_LAUNCH_COOPERATIVE) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n++].value.cooperative = 1;
    }
    if (flags & RT_LAUNCH_PROGRAMMATIC) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n++].value.programmatic_stream_serialization = 1;
    }
    const CUlaunchConfig cfg = {grid[0],  grid[1], grid[2], block[0], block[1],
                                block[2], shared,  stream,  attrs,    n};
    st = RT_CHECK(d, err, cuLaunchKernelEx(&cfg, function, params, NULL));
  } else {
    st = RT_CHECK(d, err,
                  cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                 shared, stream, params, NULL));
  }
  ctx_leave(d, pushed);
  return st;
}

static void cuda_unload(rt_driver *d, void *module) {
  const cuda_fns *f = d->fns;
  int pushed;
  rt_err ignored; /* unloading at close has no one to report to */
  if (ctx_enter(d, &pushed, &ignored) != KF_OK)
    return;
  RT_CHECK(d, &ignored, cuModuleUnload(module));
  ctx_leave(d, pushed);
}

static void cuda_close(rt_driver *d) {
  const cuda_fns *f = d->fns;
  rt_err ignored;
  if (d->ctx)
    RT_CHECK(d, &ignored, cuDevicePrimaryCtxRelease(d->device));
  d->ctx = NULL;
  free(d->fns);
  d->fns = NULL;
}

kf_status rt_cuda_open(rt_driver *d, const char *path, int device, rt_err *err) {
  cuda_fns *f;
  CUdevice dev;
  int count = 0, optin = 0;
  kf_status st;

  memset(d, 0, sizeof *d);
  d->backend = KF_BACKEND_CUDA;
  d->api = "CUDA driver";
  d->device = device;
  d->error_text = cuda_error_text;
  d->load = cuda_load;
  d->occupancy = cuda_occupancy;
  d->launch = cuda_launch;
  d->unload = cuda_unload;
  d->close = cuda_close;
  if (!path)
    path = getenv("KFORGE_CUDA_DRIVER");
  if (!path || !*path)
    path = "libcuda.so.1";
  snprintf(d->lib_path, sizeof d->lib_path, "%s", path);

  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib)
    return rt_err_set(err, KF_ERR_NO_DRIVER,
                      "cannot open the CUDA driver %s: %s (is the NVIDIA "
                      "driver installed, and in a container, is the GPU "
                      "runtime enabled?)",
                      path, dlerror());
  f = calloc(1, sizeof *f);
  if (!f)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  d->fns = f;
  for (size_t i = 0; i < sizeof cuda_syms / sizeof cuda_syms[0]; i++) {
    void *sym = dlsym(d->lib, cuda_syms[i].name);
    if (!sym && cuda_syms[i].alt)
      sym = dlsym(d->lib, cuda_syms[i].alt);
    if (!sym && !cuda_syms[i].optional) {
      free(f);
      d->fns = NULL;
      return rt_err_set(err, KF_ERR_NO_DRIVER, "%s is not a usable CUDA driver: it lacks %s", path,
                        cuda_syms[i].name);
    }
    memcpy((char *)f + cuda_syms[i].offset, &sym, sizeof sym);
  }

  if ((st = RT_CHECK(d, err, cuInit(0))) != KF_OK) {
    if (err->code == CUDA_ERROR_NO_DEVICE)
      err->status = KF_ERR_NO_DEVICE;
    goto fail;
  }
  if ((st = RT_CHECK(d, err, cuDeviceGetCount(&count))) != KF_OK)
    goto fail;
  if (device < 0 || device >= count) {
    st = rt_err_set(err, KF_ERR_NO_DEVICE,
                    "device %d does not exist: the CUDA driver sees %d "
                    "device(s)",
                    device, count);
    goto fail;
  }
  if ((st = RT_CHECK(d, err, cuDeviceGet(&dev, device))) != KF_OK ||
      (st = RT_CHECK(d, err,
                     cuDeviceGetAttribute(&d->cc_major,
                                          CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))) !=
          KF_OK ||
      (st = RT_CHECK(d, err,
                     cuDeviceGetAttribute(&d->cc_minor,
                                          CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))) !=
          KF_OK ||
      (st = RT_CHECK(d, err,
                     cuDeviceGetAttribute(
                         &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev))) !=
          KF_OK)
    goto fail;
  d->device = dev;
  d->shared_limit = optin > 0 ? (size_t)optin : RT_CUDA_DEFAULT_SHARED;
  /* for launch.max_blocks_per_sm, one_wave and cooperative only: a driver
   * without them caps nothing (and refuses cooperative kernels) */
  rt_err ignored;
  if (RT_CHECK(d, &ignored,
               cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) !=
      KF_OK)
    d->sm_count = 0;
  if (RT_CHECK(d, &ignored,
               cuDeviceGetAttribute(&d->sm_shared,
                                    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                                    dev)) != KF_OK ||
      RT_CHECK(d, &ignored,
               cuDeviceGetAttribute(&d->block_reserved_shared,
                                    CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev)) !=
          KF_OK)
    d->sm_shared = d->block_reserved_shared = 0;
  snprintf(d->device_arch, sizeof d->device_arch, "sm_%d%d", d->cc_major, d->cc_minor);
  if ((st = RT_CHECK(d, err, cuDevicePrimaryCtxRetain(&d->ctx, dev))) != KF_OK) {
    d->ctx = NULL;
    goto fail;
  }
  return KF_OK;
fail:
  free(d->fns);
  d->fns = NULL;
  return err->status;
}
