// kf_reduce.cuh: reductions across lanes, groups of lanes and whole blocks.
//
// Batch invariance rests on these: every reduction here combines its inputs
// in an order fixed by the code alone (a butterfly over lane indices, then
// warps in index order), never by timing, atomics or the launch's width.
#ifndef KF_REDUCE_CUH
#define KF_REDUCE_CUH

#include "kf_portability.cuh"

namespace kf {

// Sum over aligned groups of GROUP consecutive lanes (GROUP a power of two,
// at most the warp size); every lane of a group gets the group's sum.
template <int GROUP> KF_DEVICE float group_sum(float v) {
  static_assert(GROUP >= 1 && GROUP <= kWarpSize && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two no larger than the warp");
#pragma unroll
  for (int m = 1; m < GROUP; m <<= 1)
    v += shfl_xor(v, m);
  return v;
}

// The same for the maximum.
template <int GROUP> KF_DEVICE float group_max(float v) {
  static_assert(GROUP >= 1 && GROUP <= kWarpSize && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two no larger than the warp");
#pragma unroll
  for (int m = 1; m < GROUP; m <<= 1)
    v = fmaxf(v, shfl_xor(v, m));
  return v;
}

KF_DEVICE float warp_sum(float v) { return group_sum<kWarpSize>(v); }

// Sum over the whole block of THREADS threads (a multiple of the warp size);
// every thread gets the same bits. scratch holds THREADS / warp size floats.
// Ends with the block synchronised, so scratch may be reused afterwards only
// after another block_sync<THREADS>().
template <int THREADS> KF_DEVICE float block_sum(float v, float *scratch) {
  static_assert(THREADS % kWarpSize == 0, "block must be whole warps");
  constexpr int kWarps = THREADS / kWarpSize;
  v = warp_sum(v);
  if (kWarps == 1)
    return v;
  if (lane_id() == 0)
    scratch[warp_id()] = v;
  block_sync<THREADS>();
  float s = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w)
    s += scratch[w];
  return s;
}

} // namespace kf

#endif // KF_REDUCE_CUH
