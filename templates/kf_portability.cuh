// kf_portability.cuh: the one place that maps CUDA and HIP names for kforge's
// templates. Everything vendor-specific (bf16 type, warp/wavefront width,
// shuffles, fences, cache-hinted loads) is spelled here once; templates use
// only the kf_ names below. Architecture tests are predicates on one integer,
// KF_ARCH_CODE:
//   0                 host compilation pass (no device code is generated)
//   100 .. 0xffff     NVIDIA, __CUDA_ARCH__ (900 = sm_90a, 1000 = sm_100a)
//   0x10000 | 0xMNS   AMD gfxMNS (gfx942 = 0x10942, gfx90a = 0x1090a,
//                     gfx1100 = 0x11100)
#ifndef KF_PORTABILITY_CUH
#define KF_PORTABILITY_CUH

#include <stdint.h>

// The runtime header first, then the bf16 one.
// clang-format off
#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#define KF_VENDOR_HIP 1
#include <hip/hip_runtime.h>
#if __has_include(<hip/hip_bf16.h>)
#define KF_HIP_BF16_HEADER 1 // ROCm 5.7 and later: __hip_bfloat16
#include <hip/hip_bf16.h>
#else
#define KF_HIP_BF16_HEADER 0 // older ROCm (Debian 12's 5.2): hip_bfloat16
#include <hip/hip_bfloat16.h>
#endif // __has_include(<hip/hip_bf16.h>)
#else
#define KF_VENDOR_HIP 0
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#endif // defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
// clang-format on

// ---- a HIP build without device libraries ----------------------------------
// kforge compiles with a plain clang HIP driver (Debian's clang-19 for gfx942)
// with -nogpulib and KF_NO_DEVICE_LIBS defined: no ROCm device library exists
// for the target. The HIP headers still call a few of its functions
// (threadIdx, blockIdx, blockDim, gridDim, __syncthreads, rsqrtf, __sincosf,
// and double exp2/log2 in RoPE); they are defined here on clang builtins, with
// the headers' own declarations. Nothing else may call the device library.
#if KF_VENDOR_HIP && defined(KF_NO_DEVICE_LIBS) && defined(__HIP_DEVICE_COMPILE__)
extern "C" {
// The builtin of dimension dim (x, y or z), else `other`.
#define KF_BY_DIM(dim, X, Y, Z, other)                                                             \
  ((dim) == 0 ? X() : (dim) == 1 ? Y() : (dim) == 2 ? Z() : (other))
__device__ size_t __ockl_get_local_id(uint dim) {
  return KF_BY_DIM(dim, __builtin_amdgcn_workitem_id_x, __builtin_amdgcn_workitem_id_y,
                   __builtin_amdgcn_workitem_id_z, 0);
}
__device__ size_t __ockl_get_group_id(uint dim) {
  return KF_BY_DIM(dim, __builtin_amdgcn_workgroup_id_x, __builtin_amdgcn_workgroup_id_y,
                   __builtin_amdgcn_workgroup_id_z, 0);
}
// HIP launches whole workgroups: the size is the launch's block size.
__device__ size_t __ockl_get_local_size(uint dim) {
  return KF_BY_DIM(dim, __builtin_amdgcn_workgroup_size_x, __builtin_amdgcn_workgroup_size_y,
                   __builtin_amdgcn_workgroup_size_z, 1);
}
__device__ size_t __ockl_get_num_groups(uint dim) {
  const size_t grid = KF_BY_DIM(dim, __builtin_amdgcn_grid_size_x, __builtin_amdgcn_grid_size_y,
                                __builtin_amdgcn_grid_size_z, 1);
  const size_t size = __ockl_get_local_size(dim);
  return (grid + size - 1) / size;
}
#undef KF_BY_DIM
// The memory-space flags are not needed: a fence orders every space.
__device__ void __atomic_work_item_fence(__cl_mem_fence_flags, __memory_order order,
                                         __memory_scope scope) {
  // the builtin takes constants only
#define KF_FENCE(SCOPE)                                                                            \
  switch (order) {                                                                                 \
  case __memory_order_acquire:                                                                     \
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, SCOPE);                                               \
    break;                                                                                         \
  case __memory_order_release:                                                                     \
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, SCOPE);                                               \
    break;                                                                                         \
  case __memory_order_acq_rel:                                                                     \
    __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, SCOPE);                                               \
    break;                                                                                         \
  case __memory_order_seq_cst:                                                                     \
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, SCOPE);                                               \
    break;                                                                                         \
  default:                                                                                         \
    break;                                                                                         \
  }
  if (scope == __memory_scope_work_item)
    return;
  if (scope == __memory_scope_sub_group) {
    KF_FENCE("wavefront")
  } else if (scope == __memory_scope_work_group) {
    KF_FENCE("workgroup")
  } else if (scope == __memory_scope_device) {
    KF_FENCE("agent")
  } else {
    KF_FENCE("")
  }
#undef KF_FENCE
}
__device__ float __ocml_rsqrt_f32(float x) { return __builtin_amdgcn_rsqf(x); }
// The hardware's sin and cos take revolutions.
__device__ float __ocml_native_sin_f32(float x) {
  return __builtin_amdgcn_sinf(x * 0.15915494309189535f);
}
__device__ float __ocml_native_cos_f32(float x) {
  return __builtin_amdgcn_cosf(x * 0.15915494309189535f);
}
// log2 of a positive finite double: x = m * 2^e with m in [sqrt(1/2),
// sqrt(2)), ln m = 2 atanh(f) for f = (m - 1) / (m + 1), |f| < 0.172, whose
// odd series is below double rounding by f^23 (the result within a few ulp).
// Zero, negatives, infinities and NaN follow C.
__device__ double __ocml_log2_f64(double x) {
  if (!(x > 0.0) || __builtin_isinf(x))
    return x == 0.0 ? -__builtin_inf() : x > 0.0 ? x : __builtin_nan("");
  int e = __builtin_amdgcn_frexp_exp(x);
  double m = __builtin_amdgcn_frexp_mant(x); // [0.5, 1)
  if (m < 0.70710678118654752) {
    m *= 2.0;
    e -= 1;
  }
  const double f = (m - 1.0) / (m + 1.0), s = f * f;
  double sum = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2)
    sum = __builtin_fma(sum, s, 1.0 / k);
  return __builtin_fma(2.0 * f * sum, 1.4426950408889634, (double)e);
}
// 2^x: 2^n * e^(r ln 2) for n = rint(x), |r ln 2| <= 0.347, whose Taylor
// series is below double rounding by the 17th term (within an ulp or two).
__device__ double __ocml_exp2_f64(double x) {
  if (__builtin_isnan(x))
    return x;
  if (x > 1024.0)
    return __builtin_inf();
  if (x < -1075.0)
    return 0.0;
  const double n = __builtin_rint(x), t = (x - n) * 0.69314718055994531;
  double sum = 1.0;
  for (int k = 17; k >= 1; k--)
    sum = __builtin_fma(sum, t / k, 1.0);
  return __builtin_amdgcn_ldexp(sum, (int)n);
}
// __syncthreads_or (kf_sync.cuh): the block's OR of a predicate, through one
// word of shared memory between barriers (the first keeps a previous call's
// readers ahead of the reset).
__device__ __attribute__((convergent)) int __ockl_wgred_or_i32(int a) {
  __shared__ int any;
  __syncthreads();
  if (__ockl_get_local_id(0) == 0 && __ockl_get_local_id(1) == 0 && __ockl_get_local_id(2) == 0)
    any = 0;
  __syncthreads();
  if (a)
    __hip_atomic_fetch_or(&any, 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __syncthreads();
  return any;
}
} // extern "C"
#endif // KF_VENDOR_HIP && defined(KF_NO_DEVICE_LIBS) && defined(__HIP_DEVICE_COMPILE__)

// ---- the architecture code -------------------------------------------------
#if KF_VENDOR_HIP
#if defined(__gfx950__)
#define KF_ARCH_CODE 0x10950
#elif defined(__gfx942__)
#define KF_ARCH_CODE 0x10942
#elif defined(__gfx941__)
#define KF_ARCH_CODE 0x10941
#elif defined(__gfx940__)
#define KF_ARCH_CODE 0x10940
#elif defined(__gfx90a__)
#define KF_ARCH_CODE 0x1090a
#elif defined(__gfx1100__)
#define KF_ARCH_CODE 0x11100
#elif defined(__HIP_DEVICE_COMPILE__)
#define KF_ARCH_CODE 0x10000 // an AMD target this table does not name
#else
#define KF_ARCH_CODE 0
#endif // gfx target macros
#else
#if defined(__CUDA_ARCH__)
#define KF_ARCH_CODE __CUDA_ARCH__
#else
#define KF_ARCH_CODE 0
#endif // defined(__CUDA_ARCH__)
#endif // KF_VENDOR_HIP

#define KF_ARCH_IS_NVIDIA (KF_ARCH_CODE > 0 && KF_ARCH_CODE < 0x10000)
#define KF_ARCH_IS_AMD (KF_ARCH_CODE >= 0x10000)
// Warp-level bf16 matrix instruction mma.sync.m16n8k16 (sm_80 and later,
// sm_90a and sm_100a included).
#define KF_HAS_MMA_BF16 (KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 800)
// Templates may be built with KF_FORCE_GENERIC defined to take their portable
// (no matrix instruction) paths on NVIDIA too, which lets the HIP code paths
// be tested on a CUDA machine.
// The host emulation (tests/emu) takes them with KF_EMU_MMA defined, the
// instruction emulated lane by lane.
#if defined(KF_FORCE_GENERIC)
#define KF_USE_MMA 0
#elif defined(KF_EMU_MMA)
#define KF_USE_MMA 1
#else
#define KF_USE_MMA KF_HAS_MMA_BF16
#endif // defined(KF_FORCE_GENERIC)

// ---- types -----------------------------------------------------------------
// Templates use kf_bf16 only as 2-byte storage and convert with the bit
// operations below, so either ROCm type serves.
#if KF_VENDOR_HIP && KF_HIP_BF16_HEADER
typedef __hip_bfloat16 kf_bf16;
#elif KF_VENDOR_HIP
typedef hip_bfloat16 kf_bf16;
#else
typedef __nv_bfloat16 kf_bf16;
#endif // KF_VENDOR_HIP

#define KF_DEVICE __device__ __forceinline__
// A device function kept out of line (the host emulation spells it as GCC
// does: libstdc++'s headers use __noinline__ as an attribute name).
#if defined(KF_EMU_WARP)
#define KF_NOINLINE __attribute__((noinline))
#else
#define KF_NOINLINE __noinline__
#endif // defined(KF_EMU_WARP)

// Declares `name` as the block's dynamic shared memory (the launch's
// shared_bytes); the host emulation (tests/emu) hands out a buffer of its own.
#if defined(KF_EMU_WARP)
#define KF_DYNAMIC_SMEM(name) unsigned char *const name = emu_dynamic_smem()
#else
#define KF_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif // defined(KF_EMU_WARP)

// Threads that execute in lockstep: 32 on NVIDIA; 64 on AMD CDNA (gfx9),
// 32 on RDNA built for wave32. Never hard-code 32 in a template.
#if KF_VENDOR_HIP
#if defined(__AMDGCN_WAVEFRONT_SIZE__)
#define KF_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define KF_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define KF_WARP_SIZE 64
#endif // wavefront size macros
#elif defined(KF_EMU_WARP)
#define KF_WARP_SIZE KF_EMU_WARP // host emulation of the portable paths (tests/emu)
#else
#define KF_WARP_SIZE 32
#endif // KF_VENDOR_HIP

namespace kf {

constexpr int kWarpSize = KF_WARP_SIZE;

// ---- lane exchange ---------------------------------------------------------
KF_DEVICE float shfl_xor(float v, int mask) {
#if KF_VENDOR_HIP
  return __shfl_xor(v, mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif // KF_VENDOR_HIP
}

KF_DEVICE float shfl(float v, int src_lane) {
#if KF_VENDOR_HIP
  return __shfl(v, src_lane);
#else
  return __shfl_sync(0xffffffffu, v, src_lane);
#endif // KF_VENDOR_HIP
}

// ---- layer kernels (KF_MONO) ------------------------------------------------
// A layer kernel (kf_layer.cuh; the generator's "layer" kinds) runs the
// kernels of a decoder layer as phases of one persistent launch: each block
// takes work items, each item being one block of the separate kernel's grid.
// Templates therefore ask for their block's index and their grid's size
// through block_idx_* / grid_dim_x (the item's, inside a layer kernel), and
// synchronise their THREADS threads with block_sync<THREADS> (a phase of
// fewer threads than the layer's KF_MONO_THREADS runs on the first THREADS
// and syncs them with barrier 15: kf::bar_sync, a named barrier on NVIDIA,
// software on AMD). Outside a layer kernel these are
// blockIdx, gridDim and __syncthreads, so the separate kernels compile to
// what they were.
#ifndef KF_MONO
#define KF_MONO 0
#endif // KF_MONO
#if KF_MONO
#ifndef KF_MONO_THREADS
#error "a layer kernel defines KF_MONO_THREADS, its block size"
#endif // KF_MONO_THREADS
namespace layer {
struct Item {
  int x, y, z; // the item's block index in its kernel's grid
  int grid_x;  // that grid's x size
};
// A packed phase (the schema's launch.layer_pack) runs kMaxPack items of
// KF_MONO_THREADS / kMaxPack threads side by side in each block, item slot
// s on threads [s * that, (s + 1) * that); other phases run one item at a
// time in slot 0.
constexpr int kMaxPack = 2;
__shared__ Item item[kMaxPack]; // written by kf_layer.cuh before each item
// The current phase's threads per slot, as log2 (KF_MONO_THREADS unless
// packed), and each slot's share of the dynamic shared memory in bytes.
__shared__ int slot_shift, slot_smem_bytes;
KF_DEVICE int slot() { return (int)threadIdx.x >> slot_shift; }
// The thread's index within its item's threads.
KF_DEVICE int slot_thread() { return (int)threadIdx.x & ((1 << slot_shift) - 1); }
// The item's share of the layer kernel's dynamic shared memory.
KF_DEVICE unsigned char *slot_smem() {
  KF_DYNAMIC_SMEM(kf_layer_smem);
  return kf_layer_smem + slot() * slot_smem_bytes;
}
// Split K (skinny_gemm.cuh) through global memory, kf_layer.cuh.
constexpr int kSplitRecordBytes = 1024; // one rank's partial tiles
KF_DEVICE float *split_record(int tile, int ksplit, int rank);
KF_DEVICE void split_arrive(int tile);
KF_DEVICE void split_wait(int tile, int arrivals);
} // namespace layer
#endif // KF_MONO

KF_DEVICE int block_idx_x() {
#if KF_MONO
  return layer::item[layer::slot()].x;
#else
  return (int)blockIdx.x;
#endif // KF_MONO
}
KF_DEVICE int block_idx_y() {
#if KF_MONO
  return layer::item[layer::slot()].y;
#else
  return (int)blockIdx.y;
#endif // KF_MONO
}
KF_DEVICE int block_idx_z() {
#if KF_MONO
  return layer::item[layer::slot()].z;
#else
  return (int)blockIdx.z;
#endif // KF_MONO
}
KF_DEVICE int grid_dim_x() {
#if KF_MONO
  return layer::item[layer::slot()].grid_x;
#else
  return (int)gridDim.x;
#endif // KF_MONO
}

KF_DEVICE void bar_sync(int id, int threads);

// Barrier of the THREADS threads that run a template's block.
template <int THREADS> KF_DEVICE void block_sync() {
#if KF_MONO
  if constexpr (THREADS >= KF_MONO_THREADS)
    __syncthreads();
  else
    bar_sync(15 - layer::slot(), THREADS);
#else
  __syncthreads();
#endif // KF_MONO
}

// The thread's index in its block (in a layer kernel: among its item's
// threads), its lane and its warp.
KF_DEVICE int thread_idx() {
#if KF_MONO
  return layer::slot_thread();
#else
  return (int)threadIdx.x;
#endif // KF_MONO
}
// The thread's item slot in a layer kernel's packed phase; 0 elsewhere.
KF_DEVICE int item_slot() {
#if KF_MONO
  return layer::slot();
#else
  return 0;
#endif // KF_MONO
}
KF_DEVICE int lane_id() { return (int)(threadIdx.x % kWarpSize); }
KF_DEVICE int warp_id() {
#if KF_MONO
  return (int)((unsigned)layer::slot_thread() / kWarpSize);
#else
  return (int)(threadIdx.x / kWarpSize);
#endif // KF_MONO
}

// ---- memory ----------------------------------------------------------------
// 16-byte vector of 8 bf16 values, as raw bits.
struct alignas(16) vec8 {
  uint32_t w[4];
};

// A load of data read once per launch (weights, KV cache): no L1 allocation,
// so that activations re-read by many blocks keep their L1 lines, and an L2
// miss fetches the whole 128-byte line (.L2::128B), whose other half the
// same warp's next instruction reads (decode attention's K and V rows: on the
// H200 8K tokens 0.5-1.3% faster at every width, 32K with 4 rows 2.3-2.7%;
// 256-byte fetches lost, notes/perf/journal.md v13). The
// compiler sees no memory access in this asm and may move it across
// grid_dep_wait: use it only for data no kernel before this one in the
// stream writes (weights), or in kernels launched ordinarily.
KF_DEVICE vec8 load_stream(const void *p) {
  vec8 v;
#if KF_ARCH_IS_NVIDIA
  asm("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
      : "l"(p));
#else
  v = *reinterpret_cast<const vec8 *>(p);
#endif // KF_ARCH_IS_NVIDIA
  return v;
}

// Asks L2 to fetch `bytes` (a multiple of 16) at p (16-byte aligned) from
// device memory; holds no registers and returns nothing. A hint: a no-op
// before sm_90 and on AMD.
KF_DEVICE void prefetch_l2(const void *p, int bytes) {
#if KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif // KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 900
}

// A load of data the kernel before may write (KV cache rows in a
// programmatic launch), for after grid_dep_wait: volatile, with a memory
// clobber, so the compiler keeps it after the wait, and coherent (no .nc):
// ptxas treats ld.global.nc as reading memory nothing writes while the
// kernel runs and may hoist it above griddepcontrol.wait (seen on sm_90a
// with a GEMM variant: its activation loads and matrix instructions moved
// ahead of the wait), which would read the data unwritten. Whole lines from
// L2 as load_stream.
KF_DEVICE vec8 load_stream_after_wait(const void *p) {
  vec8 v;
#if KF_ARCH_IS_NVIDIA
  asm volatile("ld.global.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p)
               : "memory");
#else
  v = *reinterpret_cast<const vec8 *>(p);
#endif // KF_ARCH_IS_NVIDIA
  return v;
}

// A load of constant data many blocks read (norm weights): cached at every
// level, through the read-only path (ld.global.nc). Never for data a kernel
// before this one writes (see load_stream_after_wait): use load_vec.
KF_DEVICE vec8 load_shared_ro(const void *p) {
#if KF_ARCH_IS_NVIDIA
  const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
  vec8 v;
  v.w[0] = u.x;
  v.w[1] = u.y;
  v.w[2] = u.z;
  v.w[3] = u.w;
  return v;
#else
  return *reinterpret_cast<const vec8 *>(p);
#endif // KF_ARCH_IS_NVIDIA
}

// A load of data another block of this launch wrote: read from the device-
// coherent level (L2), never from a stale L1 line.
KF_DEVICE float load_coherent(const float *p) {
#if KF_VENDOR_HIP
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return __ldcg(p);
#endif // KF_VENDOR_HIP
}

// A plain load (ld.global): for data this thread may also write (a residual
// in place), and for data the kernel before writes (activations, q), after
// grid_dep_wait, which orders it (the pattern the CUDA guide gives for
// programmatic launches) where an ld.global.nc may be hoisted above it (see
// load_stream_after_wait).
KF_DEVICE vec8 load_vec(const void *p) { return *reinterpret_cast<const vec8 *>(p); }

// Four floats another block of this launch wrote (16-byte aligned).
KF_DEVICE float4 load_coherent4(const float *p) {
#if KF_VENDOR_HIP
  float4 v;
  v.x = load_coherent(p);
  v.y = load_coherent(p + 1);
  v.z = load_coherent(p + 2);
  v.w = load_coherent(p + 3);
  return v;
#else
  return __ldcg(reinterpret_cast<const float4 *>(p));
#endif // KF_VENDOR_HIP
}

// Asynchronous 16-byte global -> shared copies (cp.async, sm_80 and later):
// in flight without holding registers, completed in commit-group order. A
// thread that reads back only what it copied itself needs no barrier, only
// async_wait. Elsewhere they are plain copies.
#define KF_HAS_CP_ASYNC (KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 800)

KF_DEVICE void async_copy16(void *smem, const void *gmem) {
#if KF_HAS_CP_ASYNC
  const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<vec8 *>(smem) = *reinterpret_cast<const vec8 *>(gmem);
#endif // KF_HAS_CP_ASYNC
}

KF_DEVICE void async_commit() {
#if KF_HAS_CP_ASYNC
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif // KF_HAS_CP_ASYNC
}

// Waits until at most N of this thread's commit groups are still in flight.
template <int N> KF_DEVICE void async_wait() {
#if KF_HAS_CP_ASYNC
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif // KF_HAS_CP_ASYNC
}

// Orders the shared-memory accesses of a warp's lanes (cp.async data one lane
// copied and another reads, after async_wait; a slot read before its refill).
KF_DEVICE void warp_sync() {
#if KF_ARCH_IS_NVIDIA
  __syncwarp();
#elif defined(KF_EMU_WARP)
  emu_warp_sync();
#endif // KF_ARCH_IS_NVIDIA
}

// Programmatic dependent launch (sm_90 and later; schemas with
// "launch": {"programmatic": true}, which the runtime launches with the
// driver's programmatic stream serialisation). grid_dep_launch lets the next
// kernel of the stream start its blocks while this one still runs;
// grid_dep_wait blocks until the previous kernel has completed and its
// writes are visible. A kernel reads nothing a previous kernel may write,
// and writes nothing, before grid_dep_wait: only inputs no kernel that may
// still run writes (weights; decode_attention's page tables and older KV
// rows, docs/contracts.md) may be fetched ahead of it. Every block calls grid_dep_wait before it
// can exit, so a kernel never completes before its predecessor. Both are no-ops in a normal launch
// and on other targets.
#define KF_HAS_GRID_DEP (KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 900)

// Inside a layer kernel (KF_MONO, kf_layer.cuh) a phase's grid_dep_wait
// waits for the layer's previous phase instead, and grid_dep_launch does
// nothing: the phases are the kernels of the chain, run by one launch.
#if KF_MONO
namespace layer {
KF_DEVICE void wait_previous_phase(); // kf_layer.cuh
} // namespace layer
#endif // KF_MONO

KF_DEVICE void grid_dep_wait() {
#if KF_MONO
  layer::wait_previous_phase();
#elif KF_HAS_GRID_DEP
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif // KF_MONO
}

KF_DEVICE void grid_dep_launch() {
#if KF_HAS_GRID_DEP && !KF_MONO
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif // KF_HAS_GRID_DEP && !KF_MONO
}

// Named barriers (NVIDIA): `threads` (a multiple of the warp size) arrive at
// barrier `id` (1..15; 0 is __syncthreads'), some with bar_arrive, which
// does not wait, and the rest with bar_sync, which waits for all of them.
// A warp that arrives makes its earlier shared-memory writes visible to
// the warps that sync. Producer / consumer hand-offs inside a block
// without stopping the producers. The host emulation (tests/emu) has them
// too; HIP has none.
#if KF_ARCH_IS_NVIDIA
#define KF_HAS_NAMED_BARRIERS 1
KF_DEVICE void bar_arrive(int id, int threads) {
  asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
KF_DEVICE void bar_sync(int id, int threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#elif defined(KF_EMU_WARP) && !defined(KF_EMU_SOFT_BARRIERS)
#define KF_HAS_NAMED_BARRIERS 1
KF_DEVICE void bar_arrive(int id, int threads) { emu_bar_arrive(id, threads); }
KF_DEVICE void bar_sync(int id, int threads) { emu_bar_sync(id, threads); }
#else
#define KF_HAS_NAMED_BARRIERS 0
#endif // named barriers

// Sub-block barriers without hardware (AMD has one barrier per workgroup,
// s_barrier): bar_sync(id, threads) in shared memory, for layer kernels'
// phases of fewer threads than the block (block_sync) and their packed slots
// (kf_layer.cuh). Lane 0 of each arriving wavefront adds the wavefront's
// lanes to counter `id` and spins until the counter reaches the next multiple
// of `threads`: the counters only grow (a launch passes far fewer than the
// 2^32 / 64 arrivals that would wrap one), so a barrier needs no reset and a
// slot may reach its next barrier while the other slot still waits at one.
// Every caller of one id passes the same `threads`, a multiple of the
// wavefront size. A release fence before the arrival and an acquire fence
// after the wait order the group's shared- and global-memory accesses as
// __syncthreads does. bar_init() zeroes the counters; the block syncs before
// the first bar_sync. The host emulation at 64 lanes runs this code too
// (KF_EMU_SOFT_BARRIERS).
#if KF_VENDOR_HIP || defined(KF_EMU_SOFT_BARRIERS)
#define KF_HAS_SOFT_BARRIERS 1
namespace detail {
__shared__ unsigned soft_bar[16];
} // namespace detail
KF_DEVICE void bar_init() {
  if (threadIdx.x < 16)
    detail::soft_bar[threadIdx.x] = 0;
}
KF_DEVICE void bar_sync(int id, int threads) {
#if KF_VENDOR_HIP
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_wave_barrier();
  if (lane_id() == 0) {
    const unsigned before = __hip_atomic_fetch_add(&detail::soft_bar[id], (unsigned)kWarpSize,
                                                   __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
    const unsigned target = (before / (unsigned)threads + 1) * (unsigned)threads;
    while (__hip_atomic_load(&detail::soft_bar[id], __ATOMIC_RELAXED,
                             __HIP_MEMORY_SCOPE_WORKGROUP) < target)
      __builtin_amdgcn_s_sleep(1);
  }
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#else
  // the same, with the orders on the atomics (ThreadSanitizer checks those)
  emu_warp_sync();
  if (lane_id() == 0) {
    const unsigned before =
        __atomic_fetch_add(&detail::soft_bar[id], (unsigned)kWarpSize, __ATOMIC_ACQ_REL);
    const unsigned target = (before / (unsigned)threads + 1) * (unsigned)threads;
    while (__atomic_load_n(&detail::soft_bar[id], __ATOMIC_ACQUIRE) < target)
      emu_spin();
  }
  emu_warp_sync();
#endif // KF_VENDOR_HIP
}
#else
#define KF_HAS_SOFT_BARRIERS 0
KF_DEVICE void bar_init() {}
#endif // KF_VENDOR_HIP || defined(KF_EMU_SOFT_BARRIERS)

// Thread-block clusters (sm_90 and later; schemas with "launch": {"cluster":
// [...]}, which kforge compiles into the entry as __cluster_dims__ on those
// arches only). The blocks of a cluster run at the same time and read each
// other's shared memory. Templates that use clusters keep a path for targets
// without them (KF_HAS_CLUSTERS 0), where the same grid runs without;
// KF_FORCE_GENERIC takes that path on NVIDIA too, as HIP would.
#if defined(KF_FORCE_GENERIC)
#define KF_HAS_CLUSTERS 0
#else
#define KF_HAS_CLUSTERS (KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 900)
#endif // defined(KF_FORCE_GENERIC)

// The cluster helpers are PTX of their own rather than cooperative_groups:
// that header would join every kernel's include closure (and key) for three
// instructions, and libclang 16 leaks memory parsing it.

// This block's rank among the n consecutive blocks along x that make its
// cluster: the hardware's with clusters (the launch's clusters must be n x 1
// x 1, checked: a mismatch traps), blockIdx.x % n without.
KF_DEVICE int cluster_rank_x(int n) {
#if KF_MONO
  return block_idx_x() % n; // a layer kernel splits K through global memory
#elif KF_HAS_CLUSTERS
  unsigned rank, blocks, dim_x;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(blocks));
  asm("mov.u32 %0, %%cluster_nctaid.x;" : "=r"(dim_x));
  if ((int)blocks != n || (int)dim_x != n)
    __trap();
  return (int)rank;
#else
  return (int)blockIdx.x % n;
#endif // KF_HAS_CLUSTERS
}

// Barrier of every thread of the cluster; shared-memory writes before it are
// visible to the whole cluster after it.
KF_DEVICE void cluster_sync() {
#if KF_HAS_CLUSTERS
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
#endif // KF_HAS_CLUSTERS
}

// The address of *p (this block's shared memory) in block `rank` of the
// cluster, for ordinary loads (with clusters only).
template <class T> KF_DEVICE T *cluster_shared(T *p, int rank) {
#if KF_HAS_CLUSTERS
  unsigned long long r;
  asm("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank));
  return reinterpret_cast<T *>(r);
#else
  return rank == 0 ? p : nullptr;
#endif // KF_HAS_CLUSTERS
}

// Bytes of dynamic shared memory the launch gave this block (NVIDIA; the
// largest unsigned elsewhere, where no template checks it).
KF_DEVICE unsigned dynamic_smem_bytes() {
#if KF_ARCH_IS_NVIDIA
  unsigned v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
#else
  return 0xffffffffu;
#endif // KF_ARCH_IS_NVIDIA
}

// Stops the kernel with an error the host sees at its next synchronisation
// (a broken launch contract, never data).
KF_DEVICE void trap() {
#if KF_VENDOR_HIP
  __builtin_trap();
#else
  __trap();
#endif // KF_VENDOR_HIP
}

KF_DEVICE void store_vec(void *p, vec8 v) { *reinterpret_cast<vec8 *>(p) = v; }

KF_DEVICE vec8 zero_vec() {
  vec8 v;
  v.w[0] = v.w[1] = v.w[2] = v.w[3] = 0u;
  return v;
}

#define KF_HAS_ACQ_REL_ATOMIC (KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 700)

// A block's arrival at a device-wide counter that `arrivals` arrivals reach,
// for "the last block to arrive does the rest": every thread of the block
// calls it, and the block counts as `count` arrivals (the parts of the work
// it did); it returns true to every thread of the last block, which has
// then also reset the counter to zero for the next launch. What the blocks
// wrote before their arrival is visible to the whole last block after it.
// NVIDIA from sm_70: thread 0 adds with one acquire-release atomic between
// two barriers (the PTX memory model orders the other threads' writes before
// the release through the first barrier, and their later reads after the
// acquire through the second); no thread fences on its own. Elsewhere every
// thread fences before and after.
// The counter is counters[i]; `last` is a __shared__ int of the caller's.
// (So spelled on purpose: a flag of the helper's own, or the counter's
// address computed before the call, gave decode_attention code that ran
// 0.2-1 us slower per launch on the H200; notes/perf/journal.md, v10.)
// THREADS: the threads of the caller's block (block_sync).
template <int THREADS>
KF_DEVICE bool block_arrives_last(int *counters, long long i, int arrivals, int count, int &last) {
#if !KF_HAS_ACQ_REL_ATOMIC
  __threadfence();
#endif // !KF_HAS_ACQ_REL_ATOMIC
  block_sync<THREADS>();
  if (thread_idx() == 0) {
    int before;
#if KF_HAS_ACQ_REL_ATOMIC
    asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], %2;"
                 : "=r"(before)
                 : "l"(counters + i), "r"(count)
                 : "memory");
#else
    before = atomicAdd(counters + i, count);
#endif // KF_HAS_ACQ_REL_ATOMIC
    last = before + count == arrivals;
    if (last)
      counters[i] = 0; // every block has arrived: ready for the next launch
  }
  block_sync<THREADS>();
#if !KF_HAS_ACQ_REL_ATOMIC
  __threadfence();
#endif // !KF_HAS_ACQ_REL_ATOMIC
  return last;
}

// ---- bf16 <-> float (bit exact and identical on every vendor) -------------
KF_DEVICE float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
KF_DEVICE float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

// Round to nearest even; NaN stays NaN.
KF_DEVICE uint32_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

KF_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
#if KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 800
  uint32_t r; // one instruction, the same round-to-nearest-even
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return float_to_bf16_bits(lo) | (float_to_bf16_bits(hi) << 16);
#endif // KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 800
}

KF_DEVICE void unpack8(const vec8 &v, float f[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bf16_lo(v.w[i]);
    f[2 * i + 1] = bf16_hi(v.w[i]);
  }
}

KF_DEVICE vec8 pack8(const float f[8]) {
  vec8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    v.w[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
  return v;
}

KF_DEVICE void store_bf16(kf_bf16 *p, float v) {
  *reinterpret_cast<uint16_t *>(p) = (uint16_t)float_to_bf16_bits(v);
}

KF_DEVICE float load_bf16(const kf_bf16 *p) {
  return __uint_as_float((uint32_t) * reinterpret_cast<const uint16_t *>(p) << 16);
}

// Two bf16 halves taken from two words: (lo16 of a, lo16 of b) for
// take_hi == false, (hi16 of a, hi16 of b) otherwise.
KF_DEVICE uint32_t interleave_bf16(uint32_t a, uint32_t b, bool take_hi) {
#if KF_VENDOR_HIP
  return take_hi ? ((a >> 16) | (b & 0xffff0000u)) : ((a & 0xffffu) | (b << 16));
#else
  return __byte_perm(a, b, take_hi ? 0x7632 : 0x5410);
#endif // KF_VENDOR_HIP
}

} // namespace kf

#endif // KF_PORTABILITY_CUH
