/* A fake HIP runtime (libfake_hip.so) for the runtime's CPU tests: the entry
 * points libkforge_rt dlopens, writing gcnArchName into hipDeviceProp_t at
 * its R0600 offset. FAKE_HIP_ARCH sets it (default "gfx942:sramecc+:xnack-"),
 * FAKE_HIP_DEVICES the device count (default 1), FAKE_HIP_CUS its compute
 * units (default 304), FAKE_HIP_BLOCKS_PER_CU what the occupancy query
 * answers, default 2; a cooperative launch of more blocks than CUs times
 * that fails, as a real runtime's does). The device is per thread,
 * as in HIP: loading and launching need the runtime to select device 0 in a
 * thread that selected another (FAKE_HIP_DEVICES=2). */
#include "fake_driver.h"

#include <stddef.h>

typedef int hipError_t;
enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200,
  hipErrorNotFound = 500
};

/* gcnArchName's offset in hipDeviceProp_tR0600 (ROCm 6 hip_runtime_api.h),
 * counted field by field: 1160 on LP64. The runtime computes it from its own
 * declaration, so this independent figure checks that declaration. */
#define FAKE_GCN_ARCH_NAME_OFFSET 1160
#define FAKE_SHARED_PER_BLOCK_OFFSET 296
#define FAKE_MULTIPROCESSOR_COUNT_OFFSET 388

static _Thread_local int current_device;

FAKE_EXPORT hipError_t hipInit(unsigned flags) { return flags ? hipErrorInvalidValue : hipSuccess; }

FAKE_EXPORT hipError_t hipGetDeviceCount(int *n) {
  *n = fake_env_int("FAKE_HIP_DEVICES", 1);
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipGetDevicePropertiesR0600(void *props, int dev) {
  const char *arch = getenv("FAKE_HIP_ARCH");
  size_t shared = 65536;
  if (dev < 0 || dev >= fake_env_int("FAKE_HIP_DEVICES", 1))
    return hipErrorInvalidDevice;
  memset(props, 0, 1472);
  snprintf((char *)props, 256, "AMD Instinct MI300X");
  snprintf((char *)props + FAKE_GCN_ARCH_NAME_OFFSET, 256, "%s",
           arch && *arch ? arch : "gfx942:sramecc+:xnack-");
  memcpy((char *)props + FAKE_SHARED_PER_BLOCK_OFFSET, &shared, sizeof shared);
  const int cus = fake_env_int("FAKE_HIP_CUS", 304);
  memcpy((char *)props + FAKE_MULTIPROCESSOR_COUNT_OFFSET, &cus, sizeof cus);
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipGetDevice(int *dev) {
  *dev = current_device;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipSetDevice(int dev) {
  if (dev < 0 || dev >= fake_env_int("FAKE_HIP_DEVICES", 1))
    return hipErrorInvalidDevice;
  current_device = dev;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleLoadData(void **mod, const void *image) {
  return fake_module_load((fake_module **)mod, image) ? hipErrorInvalidImage : hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleGetFunction(void **fn, void *mod, const char *name) {
  return fake_function_get((fake_function **)fn, mod, name) ? hipErrorNotFound : hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleUnload(void *mod) {
  fake_module_unload(mod);
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                             void *stream, void **params, void **extra) {
  unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  (void)extra;
  if (!fn || !params || current_device != 0) {
    atomic_fetch_add(&fake.launch_failures, 1);
    return hipErrorInvalidValue;
  }
  fake_record_launch(fn, g, b, shared, stream, params);
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *fn,
                                                                          int threads,
                                                                          size_t shared) {
  return fake_occupancy(blocks, fn, threads, shared, fake_env_int("FAKE_HIP_BLOCKS_PER_CU", 2))
             ? hipErrorInvalidValue
             : hipSuccess;
}

FAKE_EXPORT hipError_t hipModuleLaunchCooperativeKernel(void *fn, unsigned gx, unsigned gy,
                                                        unsigned gz, unsigned bx, unsigned by,
                                                        unsigned bz, unsigned shared, void *stream,
                                                        void **params) {
  if ((unsigned long long)gx * gy * gz > (unsigned long long)fake_env_int("FAKE_HIP_CUS", 304) *
                                             (unsigned)fake_env_int("FAKE_HIP_BLOCKS_PER_CU", 2)) {
    atomic_fetch_add(&fake.launch_failures, 1);
    return hipErrorInvalidValue; /* hipErrorCooperativeLaunchTooLarge */
  }
  hipError_t rc = hipModuleLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, NULL);
  if (rc == hipSuccess)
    atomic_fetch_add(&fake.cooperative_launches, 1);
  return rc;
}

FAKE_EXPORT const char *hipGetErrorName(hipError_t e) {
  switch (e) {
  case hipErrorInvalidImage:
    return "hipErrorInvalidImage";
  case hipErrorNotFound:
    return "hipErrorNotFound";
  case hipErrorInvalidDevice:
    return "hipErrorInvalidDevice";
  }
  return "hipErrorInvalidValue";
}

FAKE_EXPORT const char *hipGetErrorString(hipError_t e) {
  return e == hipErrorNotFound ? "named symbol not found" : "fake hip error";
}
