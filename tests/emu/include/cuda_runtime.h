// Host stand-in for <cuda_runtime.h> when the templates are compiled as host
// C++ for tests/emu (KF_EMU_WARP defined, no __CUDA_ARCH__): the CUDA names
// that the portable (no matrix instruction) paths use, run by emu.h's
// threads. One block runs at a time, so __shared__ variables are statics.
#pragma once
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
extern thread_local dim3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

struct uint4 {
  unsigned x, y, z, w;
};
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline void __sincosf(float x, float *s, float *c) {
  *s = sinf(x);
  *c = cosf(x);
}
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline float __ldcg(const float *p) { return *p; }
inline float4 __ldcg(const float4 *p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicCAS(unsigned *p, unsigned expected, unsigned desired) {
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected; // the old value either way
}
inline unsigned atomicOr(unsigned *p, unsigned v) {
  return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __float_as_int(float f) {
  int i;
  memcpy(&i, &f, 4);
  return i;
}
inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
// PTX prmt's default mode: byte i of the result is byte (selector nibble i)
// of the 8 bytes {b, a}.
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t s) {
  const uint64_t x = ((uint64_t)b << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= (uint32_t)((x >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}

void __syncthreads();
int __syncthreads_or(int predicate);
void emu_bar_arrive(int id, int threads); // named barriers (kf::bar_arrive)
void emu_bar_sync(int id, int threads);
float emu_shfl(float v, int src, bool is_xor);
void emu_warp_sync(); // kf::warp_sync
void emu_spin();      // a thread that polls lets the others run (kf::bar_sync without hardware)
void emu_back_off();  // kf_sync.cuh's pause between polls
unsigned char *emu_dynamic_smem();                                        // KF_DYNAMIC_SMEM
void emu_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]); // KF_EMU_MMA
inline float __shfl_xor_sync(unsigned, float v, int m) { return emu_shfl(v, m, true); }
inline float __shfl_sync(unsigned, float v, int s) { return emu_shfl(v, s, false); }
[[noreturn]] inline void __trap() {
  fprintf(stderr, "emu: __trap()\n");
  abort();
}
