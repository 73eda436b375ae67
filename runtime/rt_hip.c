/* HIP backend: the HIP runtime (libamdhip64.so, versioned names too) opened
 * with dlopen, so that libkforge_rt links no GPU library and builds without
 * ROCm. The device's arch is its gcnArchName with target features
 * ("gfx942:sramecc+:xnack-"), read from hipDeviceProp_t; only the part of
 * that struct's R0600 layout (ROCm 6 and later) up to gcnArchName is
 * declared here. HIP's current device is per thread, so each call that
 * needs it selects the runtime's device and restores the caller's. */
#include "rt_internal.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

enum { hipErrorNoDevice = 100, hipErrorNotFound = 500 };

/* hipDeviceProp_tR0600 up to gcnArchName. Runs of int fields are grouped
 * into arrays, which keeps every offset of the real struct. */
typedef struct hip_props_r0600 {
  char name[256];
  unsigned char uuid[16];
  char luid[8];
  unsigned int luid_device_node_mask;
  size_t total_global_mem;
  size_t shared_mem_per_block;
  int regs_per_block, warp_size;
  size_t mem_pitch;
  int max_threads_per_block, max_threads_dim[3], max_grid_size[3], clock_rate;
  size_t total_const_mem;
  int major, minor;
  size_t texture_alignment, texture_pitch_alignment;
  int device_overlap_to_max_surface_cubemap_layered[46];
  size_t surface_alignment;
  int concurrent_kernels_to_local_l1_cache_supported[16];
  size_t shared_mem_per_multiprocessor;
  int regs_per_multiprocessor_to_cooperative_multi_device_launch[12];
  size_t shared_mem_per_block_optin;
  int pageable_access_to_access_policy_max_window_size[4];
  size_t reserved_shared_mem_per_block;
  int host_register_supported_to_unified_function_pointers[13];
  int reserved[63];
  int hip_reserved[32];
  char gcn_arch_name[256];
} hip_props_r0600;

/* Counted by hand from ROCm 6's header: gcnArchName at 1160 of the whole
 * struct's 1472 bytes (LP64). */
_Static_assert(offsetof(hip_props_r0600, gcn_arch_name) == 1160, "hipDeviceProp_tR0600 layout");
_Static_assert(offsetof(hip_props_r0600, shared_mem_per_block) == 296,
               "hipDeviceProp_tR0600 layout");

/* The real struct is larger than this prefix; the runtime writes all of it. */
#define RT_HIP_PROPS_BUFFER 8192

typedef struct hip_fns {
  hipError_t (*hipInit)(unsigned);
  hipError_t (*hipGetDeviceCount)(int *);
  hipError_t (*hipGetDeviceProperties)(void *, int);
  hipError_t (*hipGetDevice)(int *);
  hipError_t (*hipSetDevice)(int);
  hipError_t (*hipModuleLoadData)(void **, const void *);
  hipError_t (*hipModuleGetFunction)(void **, void *, const char *);
  hipError_t (*hipModuleUnload)(void *);
  hipError_t (*hipModuleLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, void *, void **, void **);
  const char *(*hipGetErrorName)(hipError_t);
  const char *(*hipGetErrorString)(hipError_t);
  /* optional (cooperative kernels only; module functions, hence the
   * hipModule variants rather than hipOccupancy... / hipLaunchCooperative...,
   * which take a host-side kernel handle) */
  hipError_t (*hipModuleOccupancyMaxActiveBlocksPerMultiprocessor)(int *, void *, int, size_t);
  hipError_t (*hipModuleLaunchCooperativeKernel)(void *, unsigned, unsigned, unsigned, unsigned,
                                                 unsigned, unsigned, unsigned, void *, void **);
} hip_fns;

/* Optional entry points may be missing (older ROCm): their pointer stays
 * NULL. */
static const struct {
  const char *name, *alt;
  size_t offset;
  int optional;
} hip_syms[] = {
#define SYM(field, name, alt)                                                                      \
  { name, alt, offsetof(hip_fns, field), 0 }
#define OPTIONAL_SYM(field, name)                                                                  \
  { name, NULL, offsetof(hip_fns, field), 1 }
    SYM(hipInit, "hipInit", NULL),
    SYM(hipGetDeviceCount, "hipGetDeviceCount", NULL),
    SYM(hipGetDeviceProperties, "hipGetDevicePropertiesR0600", NULL),
    SYM(hipGetDevice, "hipGetDevice", NULL),
    SYM(hipSetDevice, "hipSetDevice", NULL),
    SYM(hipModuleLoadData, "hipModuleLoadData", NULL),
    SYM(hipModuleGetFunction, "hipModuleGetFunction", NULL),
    SYM(hipModuleUnload, "hipModuleUnload", NULL),
    SYM(hipModuleLaunchKernel, "hipModuleLaunchKernel", NULL),
    SYM(hipGetErrorName, "hipGetErrorName", NULL),
    SYM(hipGetErrorString, "hipGetErrorString", NULL),
    OPTIONAL_SYM(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor,
                 "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"),
    OPTIONAL_SYM(hipModuleLaunchCooperativeKernel, "hipModuleLaunchCooperativeKernel"),
#undef SYM
#undef OPTIONAL_SYM
};

/* Call sites read as runtime calls; see rt_cuda.c. */
#define hipInit (f->hipInit)
#define hipGetDeviceCount (f->hipGetDeviceCount)
#define hipGetDevicePropertiesR0600 (f->hipGetDeviceProperties)
#define hipGetDevice (f->hipGetDevice)
#define hipSetDevice (f->hipSetDevice)
#define hipModuleLoadData (f->hipModuleLoadData)
#define hipModuleGetFunction (f->hipModuleGetFunction)
#define hipModuleUnload (f->hipModuleUnload)
#define hipModuleLaunchKernel (f->hipModuleLaunchKernel)
#define hipModuleOccupancyMaxActiveBlocksPerMultiprocessor                                         \
  (f->hipModuleOccupancyMaxActiveBlocksPerMultiprocessor)
#define hipModuleLaunchCooperativeKernel (f->hipModuleLaunchCooperativeKernel)

static void hip_error_text(const rt_driver *d, int code, char *buf, size_t size) {
  const hip_fns *f = d->fns;
  const char *name = f->hipGetErrorName(code);
  const char *text = f->hipGetErrorString(code);
  if (name && text)
    snprintf(buf, size, "%s (%s)", name, text);
  else
    snprintf(buf, size, "hipError_t %d", code);
}

static kf_status dev_enter(rt_driver *d, int *prev, rt_err *err) {
  const hip_fns *f = d->fns;
  *prev = -1;
  if (RT_CHECK(d, err, hipGetDevice(prev)) != KF_OK)
    return err->status;
  if (*prev == d->device) {
    *prev = -1;
    return KF_OK;
  }
  if (RT_CHECK(d, err, hipSetDevice(d->device)) != KF_OK) {
    *prev = -1;
    return err->status;
  }
  return KF_OK;
}

static void dev_leave(rt_driver *d, int prev) {
  const hip_fns *f = d->fns;
  rt_err ignored; /* the caller's own outcome is what it reports */
  if (prev >= 0)
    RT_CHECK(d, &ignored, hipSetDevice(prev));
}

/* launch.max_blocks_per_sm and one_wave are a CUDA matter (kforge writes
 * them for NVIDIA arches only): launches pass the manifest's shared bytes. */
static kf_status hip_load(rt_driver *d, const void *image, const char *symbol, unsigned shared,
                          unsigned max_blocks, void **module, void **function,
                          unsigned *launch_shared, rt_err *err) {
  const hip_fns *f = d->fns;
  void *mod = NULL, *fn = NULL;
  int prev;
  kf_status st;
  rt_err ignored;
  *module = *function = NULL;
  (void)max_blocks;
  *launch_shared = shared;
  /* AMD GPUs give a workgroup all its LDS without opting in; more than the
   * device has can't be launched, so refuse at load, not at every launch. */
  if (shared > d->shared_limit)
    return rt_err_set(err, KF_ERR_DRIVER,
                      "needs %u bytes of dynamic shared memory, the device "
                      "allows %zu per block",
                      shared, d->shared_limit);
  if ((st = dev_enter(d, &prev, err)) != KF_OK)
    return st;
  if ((st = RT_CHECK(d, err, hipModuleLoadData(&mod, image))) != KF_OK)
    goto out;
  if ((st = RT_CHECK(d, err, hipModuleGetFunction(&fn, mod, symbol))) != KF_OK) {
    if (err->code == hipErrorNotFound)
      err->status = st = KF_ERR_SYMBOL;
    RT_CHECK(d, &ignored, hipModuleUnload(mod));
    goto out;
  }
  *module = mod;
  *function = fn;
out:
  dev_leave(d, prev);
  return st;
}

/* Cooperative kernels need the occupancy query and the cooperative launch
 * of module functions; a runtime without either refuses them at load. */
static kf_status hip_occupancy(rt_driver *d, void *function, unsigned threads, unsigned shared,
                               int *per_sm, rt_err *err) {
  const hip_fns *f = d->fns;
  int prev;
  kf_status st;
  *per_sm = 0;
  if (!hipModuleOccupancyMaxActiveBlocksPerMultiprocessor || !hipModuleLaunchCooperativeKernel)
    return rt_err_set(err, KF_ERR_CORESIDENCY, "the HIP runtime %s lacks %s", d->lib_path,
                      hipModuleLaunchCooperativeKernel
                          ? "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor"
                          : "hipModuleLaunchCooperativeKernel");
  if ((st = dev_enter(d, &prev, err)) != KF_OK)
    return st;
  st = RT_CHECK(d, err,
                hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, function, (int)threads,
                                                                   (size_t)shared));
  dev_leave(d, prev);
  return st;
}

/* HIP has no programmatic dependent launch: every launch is ordinary, which
 * programmatic kernels run correctly under. Cooperative kernels go through
 * hipModuleLaunchCooperativeKernel, which hip_occupancy found at load. */
static kf_status hip_launch(rt_driver *d, void *function, const unsigned grid[3],
                            const unsigned block[3], unsigned shared, unsigned flags, void *stream,
                            void **params, rt_err *err) {
  const hip_fns *f = d->fns;
  int prev;
  kf_status st;
  if ((st = dev_enter(d, &prev, err)) != KF_OK)
    return st;
  if ((flags & RT_LAUNCH_COOPERATIVE) && hipModuleLaunchCooperativeKernel)
    st = RT_CHECK(d, err,
                  hipModuleLaunchCooperativeKernel(function, grid[0], grid[1], grid[2], block[0],
                                                   block[1], block[2], shared, stream, params));
  else
    st = RT_CHECK(d, err,
                  hipModuleLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                        block[2], shared, stream, params, NULL));
  dev_leave(d, prev);
  return st;
}

static void hip_unload(rt_driver *d, void *module) {
  const hip_fns *f = d->fns;
  int prev;
  rt_err ignored; /* unloading at close has no one to report to */
  if (dev_enter(d, &prev, &ignored) != KF_OK)
    return;
  RT_CHECK(d, &ignored, hipModuleUnload(module));
  dev_leave(d, prev);
}

static void hip_close(rt_driver *d) {
  free(d->fns);
  d->fns = NULL;
}

/* gcnArchName from the properties buffer; if the struct's layout differs
 * from R0600 (a ROCm we don't know), find the "gfx..." string instead. */
static int copy_arch(const unsigned char *s, size_t max, char *out, size_t size) {
  size_t n = strnlen((const char *)s, max);
  if (n == max || n >= size)
    return -1;
  memcpy(out, s, n + 1);
  return 0;
}

static int arch_from_props(const unsigned char *buf, char *out, size_t size) {
  const hip_props_r0600 *p = (const void *)buf;
  const unsigned char *name = (const unsigned char *)p->gcn_arch_name;
  if (strncmp(p->gcn_arch_name, "gfx", 3) == 0)
    return copy_arch(name, sizeof p->gcn_arch_name, out, size);
  for (size_t i = 0; i + 4 < RT_HIP_PROPS_BUFFER; i++)
    if (memcmp(buf + i, "gfx", 3) == 0 && buf[i + 3] >= '0' && buf[i + 3] <= '9' &&
        (i == 0 || buf[i - 1] == '\0'))
      return copy_arch(buf + i, RT_HIP_PROPS_BUFFER - i, out, size);
  return -1;
}

kf_status rt_hip_open(rt_driver *d, const char *path, int device, rt_err *err) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"};
  hip_fns *f;
  unsigned char *props = NULL;
  int count = 0;
  kf_status st;
  char tried[RT_REASON_MAX / 2] = "";

  memset(d, 0, sizeof *d);
  d->backend = KF_BACKEND_HIP;
  d->api = "HIP runtime";
  d->device = device;
  d->error_text = hip_error_text;
  d->load = hip_load;
  d->occupancy = hip_occupancy;
  d->launch = hip_launch;
  d->unload = hip_unload;
  d->close = hip_close;
  if (!path || !*path)
    path = getenv("KFORGE_HIP_RUNTIME");
  if (path && *path) {
    d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d->lib)
      snprintf(tried, sizeof tried, "%s", dlerror());
  } else {
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !d->lib; i++) {
      path = names[i];
      d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!d->lib && i == 0)
        snprintf(tried, sizeof tried, "%s", dlerror());
    }
  }
  if (!d->lib)
    return rt_err_set(err, KF_ERR_NO_DRIVER,
                      "cannot open the HIP runtime %s: %s (is ROCm "
                      "installed?)",
                      path, tried);
  snprintf(d->lib_path, sizeof d->lib_path, "%s", path);
  f = calloc(1, sizeof *f);
  if (!f)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  d->fns = f;
  for (size_t i = 0; i < sizeof hip_syms / sizeof hip_syms[0]; i++) {
    void *sym = dlsym(d->lib, hip_syms[i].name);
    if (!sym && hip_syms[i].alt)
      sym = dlsym(d->lib, hip_syms[i].alt);
    if (!sym && !hip_syms[i].optional) {
      st = rt_err_set(err, KF_ERR_NO_DRIVER,
                      "%s is not a usable HIP runtime (ROCm 6 or later): it "
                      "lacks %s",
                      path, hip_syms[i].name);
      goto fail;
    }
    memcpy((char *)f + hip_syms[i].offset, &sym, sizeof sym);
  }
  if ((st = RT_CHECK(d, err, hipInit(0))) != KF_OK) {
    if (err->code == hipErrorNoDevice)
      err->status = st = KF_ERR_NO_DEVICE;
    goto fail;
  }
  if ((st = RT_CHECK(d, err, hipGetDeviceCount(&count))) != KF_OK) {
    if (err->code == hipErrorNoDevice)
      err->status = st = KF_ERR_NO_DEVICE;
    goto fail;
  }
  if (device < 0 || device >= count) {
    st = rt_err_set(err, KF_ERR_NO_DEVICE,
                    "device %d does not exist: the HIP runtime sees %d "
                    "device(s)",
                    device, count);
    goto fail;
  }
  props = calloc(1, RT_HIP_PROPS_BUFFER);
  if (!props) {
    st = rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  if ((st = RT_CHECK(d, err, hipGetDevicePropertiesR0600(props, device))) != KF_OK)
    goto fail;
  if (arch_from_props(props, d->device_arch, sizeof d->device_arch) != 0 ||
      !rt_arch_valid(KF_BACKEND_HIP, d->device_arch)) {
    st =
        rt_err_set(err, KF_ERR_DRIVER, "cannot read device %d's gcnArchName from %s", device, path);
    goto fail;
  }
  d->shared_limit = ((const hip_props_r0600 *)(void *)props)->shared_mem_per_block;
  /* multiProcessorCount follows deviceOverlap; CUs, for cooperative kernels */
  d->sm_count =
      ((const hip_props_r0600 *)(void *)props)->device_overlap_to_max_surface_cubemap_layered[1];
  if (d->shared_limit == 0)
    d->shared_limit = 64 * 1024;
  free(props);
  return KF_OK;
fail:
  free(props);
  free(d->fns);
  d->fns = NULL;
  return st;
}
