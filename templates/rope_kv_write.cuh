// rope_kv_write.cuh: the step between the qkv projection and attention, for
// one decode token per row:
//   q, k   <- per-head RMSNorm (QK-norm, Qwen3; QK_NORM only), then RoPE in
//             the neox layout at the row's position (Llama 3 frequency
//             scaling when ROPE_SCALING_FACTOR > 1)
//   q_out  <- q                                   [rows, NUM_Q_HEADS, HEAD_DIM]
//   k_cache[slot], v_cache[slot] <- k, v          cache [pages, PAGE_SIZE,
//                                                 NUM_KV_HEADS, HEAD_DIM]
// where slot = page * PAGE_SIZE + offset in page (vLLM's slot mapping).
// qkv is the projection's output [rows, (NUM_Q_HEADS + 2 NUM_KV_HEADS) *
// HEAD_DIM]: q heads, then k heads, then v heads.
//
// One row per block x, HEAD_DIM / 8 lanes per head, 8 values per lane, the
// row's heads over blocks y of 256 threads (whole heads each); every value
// is computed from its own row alone (batch invariant). Pad rows read
// and write nothing. Two entries share the row building block:
// rope_kv_write_entry (rope_kv_write.json) and qknorm_rope_kv_write_entry
// (qknorm_rope_kv_write.json, which also takes the two norm weights).
#ifndef KF_ROPE_KV_WRITE_CUH
#define KF_ROPE_KV_WRITE_CUH

#include "kf_portability.cuh"
#include "kf_reduce.cuh"
#include "kf_rope.cuh"

namespace kf {

// Building block: the heads of one row that thread numbers `tid` hold
// (HEAD_DIM / 8 per head; numbers past the last head do nothing).
template <class R, int HQ, int HKV, int PAGE_SIZE, bool QK_NORM>
KF_DEVICE void rope_kv_write_row(const kf_bf16 *qkv, int position, long long slot,
                                 const kf_bf16 *q_norm_w, const kf_bf16 *k_norm_w, float eps,
                                 kf_bf16 *q_out, kf_bf16 *k_cache, kf_bf16 *v_cache,
                                 int tid = (int)threadIdx.x) {
  constexpr int D = R::HEAD_DIM;
  constexpr int kGroup = D / 8;
  static_assert(D % 16 == 0 && kGroup <= kWarpSize && (kGroup & (kGroup - 1)) == 0,
                "HEAD_DIM / 8 must be a power of two no larger than the warp");
  __shared__ float cos_t[D / 2], sin_t[D / 2];
  const int head = tid / kGroup, j = tid % kGroup;
  const bool is_q = head < HQ, is_v = head >= HQ + HKV;
  const bool real = head < HQ + 2 * HKV; // whole groups only: never splits a warp's shuffles
  // Loads first, so that their latency overlaps the table's arithmetic.
  const vec8 raw = real ? load_vec(qkv + (long long)head * D + 8 * j) : zero_vec();
  vec8 wraw = zero_vec();
  if (QK_NORM && real)
    wraw = load_shared_ro((is_q ? q_norm_w : k_norm_w) + 8 * j);
  rope_table<R>(position, cos_t, sin_t);
  if (!real)
    return;

  float v[8];
  unpack8(raw, v);
  if (QK_NORM) {
    float w[8];
    unpack8(wraw, w);
    float normed[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      normed[e] = v[e];
    head_rmsnorm8<kGroup>(normed, w, eps);
    if (!is_v) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = normed[e];
    }
  }
  rope_neox8<R>(v, cos_t, sin_t, !is_v);

  const vec8 out = pack8(v);
  if (is_q) {
    store_vec(q_out + (long long)head * D + 8 * j, out);
  } else {
    const int kv_head = is_v ? head - HQ - HKV : head - HQ;
    const long long page = slot / PAGE_SIZE, in_page = slot % PAGE_SIZE;
    const long long off = ((page * PAGE_SIZE + in_page) * HKV + kv_head) * D + 8 * j;
    store_vec((is_v ? v_cache : k_cache) + off, out);
  }
}

// The threads of a block: HEAD_DIM / 8 per head, whole heads, so a row's
// heads take blocks y = 0 .. ceil(heads * HEAD_DIM / 8 / 256) - 1.
constexpr int kRopeThreads = 256;

// Both entries: this block's row (block x) and heads (block y), after the
// previous kernel (qkv comes from it); q_norm_w, k_norm_w and eps are used
// only with QK_NORM.
template <class P, bool QK_NORM>
KF_DEVICE void rope_kv_write_block(const kf_bf16 *qkv, const int *positions, const int *slots,
                                   const kf_bf16 *q_norm_w, const kf_bf16 *k_norm_w, float eps,
                                   kf_bf16 *q_out, kf_bf16 *k_cache, kf_bf16 *v_cache, int rows) {
  static_assert(kRopeThreads % (P::HEAD_DIM / 8) == 0, "a block holds whole heads");
  grid_dep_launch();
  grid_dep_wait(); // qkv comes from the previous kernel
  const int row = block_idx_x();
  if (row >= rows)
    return;
  constexpr int kStride = (P::NUM_Q_HEADS + 2 * P::NUM_KV_HEADS) * P::HEAD_DIM;
  rope_kv_write_row<rope_config<P::HEAD_DIM, P>, P::NUM_Q_HEADS, P::NUM_KV_HEADS, P::PAGE_SIZE,
                    QK_NORM>(qkv + (long long)row * kStride, positions[row], slots[row], q_norm_w,
                             k_norm_w, eps, q_out + (long long)row * P::NUM_Q_HEADS * P::HEAD_DIM,
                             k_cache, v_cache, block_idx_y() * kRopeThreads + (int)threadIdx.x);
}

// Entry (no QK-norm): grid [W, ceil((NUM_Q_HEADS + 2 NUM_KV_HEADS) *
// HEAD_DIM / 8 / 256)], block [256]. positions[rows], slots[rows].
template <class P>
KF_DEVICE void rope_kv_write_entry(const kf_bf16 *qkv, const int *positions, const int *slots,
                                   kf_bf16 *q_out, kf_bf16 *k_cache, kf_bf16 *v_cache, int rows) {
  rope_kv_write_block<P, false>(qkv, positions, slots, nullptr, nullptr, 0.f, q_out, k_cache,
                                v_cache, rows);
}

// Entry (QK-norm, Qwen3): as rope_kv_write_entry, plus q_norm_w and k_norm_w
// [HEAD_DIM] and the norm's EPS.
template <class P>
KF_DEVICE void qknorm_rope_kv_write_entry(const kf_bf16 *qkv, const int *positions,
                                          const int *slots, const kf_bf16 *q_norm_w,
                                          const kf_bf16 *k_norm_w, kf_bf16 *q_out, kf_bf16 *k_cache,
                                          kf_bf16 *v_cache, int rows) {
  rope_kv_write_block<P, true>(qkv, positions, slots, q_norm_w, k_norm_w, P::EPS, q_out, k_cache,
                               v_cache, rows);
}

} // namespace kf

#endif // KF_ROPE_KV_WRITE_CUH
