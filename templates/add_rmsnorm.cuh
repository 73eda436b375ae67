// add_rmsnorm.cuh: residual add fused with RMSNorm, for a decoder layer's
// input_norm and post_attn_norm.
//
//   z        = x + residual                    (fp32)
//   residual = bf16(z)                         (updated in place)
//   out      = bf16(z * rsqrt(mean(z^2) + EPS) * weight)
//
// One block per row, 256 threads (schema: add_rmsnorm.json). A row's result
// depends on that row's inputs alone: the sum of squares runs in a fixed
// order (kf_reduce.cuh), so it is bitwise the same at every width. Pad rows
// (row >= rows) read and write nothing.
#ifndef KF_ADD_RMSNORM_CUH
#define KF_ADD_RMSNORM_CUH

#include "kf_portability.cuh"
#include "kf_reduce.cuh"

namespace kf {

constexpr int kAddRmsnormThreads = 256; // == add_rmsnorm.json launch.block[0]

// Building block: one row of HIDDEN values by a block of THREADS threads.
// scratch: THREADS / warp size floats of shared memory.
template <int HIDDEN, int THREADS>
KF_DEVICE void add_rmsnorm_row(const kf_bf16 *x, kf_bf16 *residual, const kf_bf16 *weight,
                               kf_bf16 *out, float eps, float *scratch) {
  static_assert(HIDDEN % 8 == 0, "HIDDEN must be a multiple of 8");
  constexpr int kVecs = HIDDEN / 8;
  constexpr int kPerThread = (kVecs + THREADS - 1) / THREADS;
  const int tid = (int)threadIdx.x;

  // A slot past the row's end (when THREADS does not divide HIDDEN / 8) is
  // zero, never read: every slot is defined on every path.
  float z[kPerThread][8] = {};
  vec8 wv[kPerThread] = {}; // the weight, loaded before the reduction needs the block
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int v = tid + i * THREADS;
    if (kVecs % THREADS == 0 || v < kVecs) {
      wv[i] = load_shared_ro(weight + v * 8);
      float a[8], b[8];
      unpack8(load_vec(x + v * 8), a);
      unpack8(load_vec(residual + v * 8), b);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        z[i][e] = a[e] + b[e];
        ss = fmaf(z[i][e], z[i][e], ss);
      }
      store_vec(residual + v * 8, pack8(z[i]));
    }
  }
  ss = block_sum<THREADS>(ss, scratch);
  const float inv_rms = rsqrtf(ss * (1.0f / (float)HIDDEN) + eps);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int v = tid + i * THREADS;
    if (kVecs % THREADS == 0 || v < kVecs) {
      float w[8], o[8];
      unpack8(wv[i], w);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        o[e] = z[i][e] * inv_rms * w[e];
      store_vec(out + v * 8, pack8(o));
    }
  }
}

// Entry: grid [W], block [256]. x, residual, out: [rows, HIDDEN]; weight:
// [HIDDEN].
template <class P>
KF_DEVICE void add_rmsnorm_entry(const kf_bf16 *x, kf_bf16 *residual, const kf_bf16 *weight,
                                 kf_bf16 *out, int rows) {
  __shared__ float scratch[kAddRmsnormThreads / kWarpSize];
  grid_dep_launch();
  grid_dep_wait(); // x and residual come from the previous kernels
  const int row = block_idx_x();
  if (row >= rows)
    return;
  const long long off = (long long)row * P::HIDDEN;
  add_rmsnorm_row<P::HIDDEN, kAddRmsnormThreads>(x + off, residual + off, weight, out + off, P::EPS,
                                                 scratch);
}

} // namespace kf

#endif // KF_ADD_RMSNORM_CUH
