// moe.cuh: the mixture-of-experts MLP of a decode step, in four kinds:
//
//   router       logits[r, e] = x[r] . w_router[e] (fp32), softmax over the
//                experts (or, moe_router_sigmoid, each expert's sigmoid
//                with a correction bias added for the choice), the TOPK
//                largest (ties: the lower expert index wins), renormalised
//                to sum 1 when RENORM, times SCALE; writes ids[r, k] and
//                weights[r, k], k the rank (0 = largest)
//   moe_gate_up  for every expert some row chose: act = silu(x w_gate^T) *
//                (x w_up^T) for all rows, into that expert's slot of `act`
//   moe_down     for every expert some row chose: y[r, k] = act . w_down^T
//                for each row r that chose it, k its rank in r's choice
//   moe_combine  out[r] = sum over k = 0..TOPK-1 of weights[r, k] * y[r, k],
//                in rank order, fp32 (moe_combine_shared: plus the shared
//                expert's output shared[r]), rounded once to bf16
//
// Weights: w_router [EXPERTS x HIDDEN]; w_gate_up [EXPERTS x 2 I x HIDDEN]
// (per expert the merged gate rows then up rows, as the dense gate_up_proj);
// w_down [EXPERTS x HIDDEN x I]; bf16, row-major.
//
// Distinct experts: the experts a step's rows chose, in ascending order,
// are its slots 0..n-1 (n <= min(EXPERTS, rows * TOPK)). moe_gate_up and
// moe_down deal the (slot, tile) items of those n slots to their blocks
// (moe_items), so an expert chosen by several rows is read once for all of
// them and only chosen experts are read. Each block is skinny_gemm_block over all of the step's
// rows, and a row's sums depend on nothing but its own activations and the expert's weights (the
// sweep's rotation is a function of the tile within its expert, never of the slot): a row's result
// is bitwise the same alone or beside rows that share its experts (batch invariance).
//
// Buffers (declared in the schemas): the router's logits [W x EXPERTS]
// fp32 and its semaphore (one int, zeroed once: the last block of the
// router to finish its logits picks every row's experts and resets it);
// act [min(W * TOPK, EXPERTS) slots x W x I] bf16, written by moe_gate_up and read by
// moe_down; y [W x TOPK x HIDDEN] fp32, written by moe_down and read by
// moe_combine. Launches that share them must not overlap.
//
// Programmatic: every kind waits for the kernel before first (which experts
// to read is known only from the router's output). Inside a layer kernel
// (KF_MONO) each kind is a phase: its blocks are work items
// (block_idx_x / grid_dim_x), and its wait is for the phase before.
#ifndef KF_MOE_CUH
#define KF_MOE_CUH

#include "gate_up_silu.cuh"
#include "kf_portability.cuh"
#include "kf_reduce.cuh"
#include "skinny_gemm.cuh"

namespace kf {

constexpr int kMoeThreads = 256;  // == launch.block[0] of the moe_*.json schemas
constexpr int kRouterExperts = 8; // experts per router block: one a warp (8 warps)
constexpr int kRouterMaxExperts = 256;

// The distinct experts among ids[0 .. rows * TOPK) (entries outside
// [0, EXPERTS) are ignored), ascending, into list; returns their number.
// Every thread of the block calls it; list is __shared__ with room for
// W * TOPK entries. A bitmap of the experts in shared memory: each choice
// sets its bit, then thread e writes expert e at the number of set bits
// below it (constant time per thread, whatever the rows and TOPK).
template <int W, int TOPK, int EXPERTS>
KF_DEVICE int moe_distinct(const int *ids, int rows, int *list) {
  static_assert(EXPERTS <= kMoeThreads, "one thread per expert");
  static_assert(W * TOPK <= kMoeThreads, "one thread per choice");
  constexpr int kWords = (EXPERTS + 31) / 32;
  __shared__ unsigned chosen[kWords];
  const int tid = (int)threadIdx.x; // (a phase of all the layer block's threads: the same)
  if (tid < kWords)
    chosen[tid] = 0u;
  block_sync<kMoeThreads>();
  if (tid < rows * TOPK) {
    const int e = ids[tid];
    if (e >= 0 && e < EXPERTS)
      atomicOr(&chosen[e / 32], 1u << (e % 32));
  }
  block_sync<kMoeThreads>();
  int below = 0, n = 0;
#pragma unroll
  for (int q = 0; q < kWords; ++q) {
    const unsigned word = chosen[q];
    n += __popc(word);
    if (q < tid / 32)
      below += __popc(word);
    else if (q == tid / 32)
      below += __popc(word & ((1u << (tid % 32)) - 1u));
  }
  if (tid < EXPERTS && (chosen[tid / 32] >> (tid % 32) & 1u))
    list[below] = tid;
  block_sync<kMoeThreads>();
  return n;
}

// ---- router -------------------------------------------------------------------

// How the router scores the experts: a softmax over them (Qwen3-MoE,
// Mixtral), or each expert's sigmoid, to which a per-expert correction bias
// is added for the choice only (DeepSeek-V3's router, GLM-4.5's): the
// weights are the unbiased sigmoids of the chosen experts.
enum class RouterScore { kSoftmax, kSigmoidBiased };

// One row's choice from its logits (every lane of a warp calls it): the
// scores, K rounds of the largest remaining choice key (ties to the lower
// expert index; the key is the score, plus bias[e] for kSigmoidBiased),
// renormalisation of the chosen scores to sum 1 when RENORM, and scale;
// lane 0 writes ids and weights.
template <class P, RouterScore S>
KF_DEVICE void router_pick(const float *logits, const float *bias, int *ids, float *weights,
                           int lane) {
  constexpr int E = P::EXPERTS, K = P::TOPK;
  constexpr int kPer = (E + kWarpSize - 1) / kWarpSize;
  // Taken keys (and those of experts past E) become kTaken, below every
  // key: probabilities are >= 0, a sigmoid plus its bias any finite value.
  constexpr float kTaken = S == RouterScore::kSoftmax ? -1.f : -INFINITY;
  float p[kPer], key[kPer];
  if constexpr (S == RouterScore::kSoftmax) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x_e = lane + j * kWarpSize;
      p[j] = x_e < E ? load_coherent(logits + x_e) : -INFINITY;
      mx = fmaxf(mx, p[j]);
    }
    mx = group_max<kWarpSize>(mx);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      p[j] = lane + j * kWarpSize < E ? expf(p[j] - mx) : 0.f;
      sum += p[j];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      p[j] = p[j] / sum;
      key[j] = p[j];
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x_e = lane + j * kWarpSize;
      p[j] = x_e < E ? 1.f / (1.f + expf(-load_coherent(logits + x_e))) : 0.f;
      key[j] = x_e < E ? p[j] + bias[x_e] : kTaken;
    }
  }
  float picked[K];
  int picked_id[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float best = kTaken, best_p = 0.f;
    int best_e = E;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x_e = lane + j * kWarpSize;
      if (x_e < E && key[j] > best) { // ascending e: the first of equals stays
        best = key[j];
        best_p = p[j];
        best_e = x_e;
      }
    }
#pragma unroll
    for (int m = 1; m < kWarpSize; m <<= 1) {
      const float ob = shfl_xor(best, m);
      const float op = S == RouterScore::kSoftmax ? ob : shfl_xor(best_p, m);
      const int oe = __float_as_int(shfl_xor(__int_as_float(best_e), m));
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_p = op;
        best_e = oe;
      }
    }
    picked[k] = S == RouterScore::kSoftmax ? best : best_p;
    picked_id[k] = best_e;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (lane + j * kWarpSize == best_e)
        key[j] = kTaken;
  }
  float norm = 1.f;
  if (P::RENORM) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      s += picked[k];
    norm = 1.f / s;
  }
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      ids[k] = picked_id[k];
      weights[k] = picked[k] * norm * (float)P::SCALE;
    }
  }
}

// The router's body: grid [ceil(EXPERTS / 8)], block [256]. Block b
// computes the logits of experts 8 b .. 8 b + 7 for every row, a warp per
// expert (lanes over HIDDEN in 8-element pieces, one fixed butterfly: a
// row's logit depends on that row alone; with 64-lane wavefronts each takes
// two experts); the last block to finish picks the experts of every row, a
// warp per row.
template <class P, RouterScore S>
KF_DEVICE void moe_router_body(const kf_bf16 *x, const kf_bf16 *w, const float *bias, int *ids,
                               float *weights, float *logits, int *semaphores, int rows) {
  constexpr int H = P::HIDDEN, E = P::EXPERTS, K = P::TOPK, W = P::W;
  static_assert(H % 8 == 0, "HIDDEN must be a multiple of 8");
  static_assert(E >= 1 && E <= kRouterMaxExperts, "at most 256 experts");
  static_assert(K >= 1 && K <= E, "TOPK must be 1..EXPERTS");
  __shared__ int is_last;
  grid_dep_launch();
  grid_dep_wait(); // x comes from the kernel before
  constexpr int kWarps = kMoeThreads / kWarpSize;
  const int warp = warp_id(), lane = lane_id();
  for (int q = warp; q < kRouterExperts; q += kWarps) {
    const int e = block_idx_x() * kRouterExperts + q;
    if (e >= E)
      break;
    float acc[W];
#pragma unroll
    for (int r = 0; r < W; ++r)
      acc[r] = 0.f;
    const kf_bf16 *wr = w + (long long)e * H;
    for (int c = lane; c < H / 8; c += kWarpSize) {
      float wf[8];
      unpack8(load_stream(wr + c * 8), wf);
#pragma unroll
      for (int r = 0; r < W; ++r) {
        // Rows past rows read row 0 (in bounds; their sums are never written).
        float xf[8];
        unpack8(load_vec(x + (long long)(r < rows ? r : 0) * H + c * 8), xf);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          acc[r] = fmaf(wf[j], xf[j], acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < W; ++r) {
      const float sum = warp_sum(acc[r]);
      if (r < rows && lane == 0)
        logits[(long long)r * E + e] = sum;
    }
  }
  if (!block_arrives_last<kMoeThreads>(semaphores, 0, grid_dim_x(), 1, is_last))
    return;
  // The experts of rows warp, warp + kWarps, ...: lane l holds experts l,
  // l + warp size, ...
  for (int r = warp; r < W && r < rows; r += kWarps)
    router_pick<P, S>(logits + (long long)r * E, bias, ids + r * K, weights + r * K, lane);
}

// Entry of moe_router (softmax scores).
template <class P>
KF_DEVICE void moe_router_entry(const kf_bf16 *x, const kf_bf16 *w, int *ids, float *weights,
                                float *logits, int *semaphores, int rows) {
  moe_router_body<P, RouterScore::kSoftmax>(x, w, nullptr, ids, weights, logits, semaphores, rows);
}

// Entry of moe_router_sigmoid: sigmoid scores, the choice on score +
// bias[e] (bias fp32 [EXPERTS]).
template <class P>
KF_DEVICE void moe_router_sigmoid_entry(const kf_bf16 *x, const kf_bf16 *w, const float *bias,
                                        int *ids, float *weights, float *logits, int *semaphores,
                                        int rows) {
  moe_router_body<P, RouterScore::kSigmoidBiased>(x, w, bias, ids, weights, logits, semaphores,
                                                  rows);
}

// ---- experts -----------------------------------------------------------------

// The work items of moe_gate_up and moe_down: (slot, tile) pairs, slot-major,
// n_slots * TILES of them; block b takes items b, b + blocks, ... (the
// schemas size the grid to min(W * TOPK, EXPERTS, ceil(1024 / TILES)) *
// TILES: at most the items a width can have, and about 1024 blocks, so that
// no block is launched only to find nothing to do and every block has about
// as many items). Batch invariance does not depend on which block takes an
// item: its sums follow the tile (skinny_gemm_block's ROT_AT).
template <int TILES, class Item> KF_DEVICE void moe_items(int n_slots, Item item) {
  for (int i = block_idx_x(); i < n_slots * TILES; i += grid_dim_x()) {
    item(i / TILES, i % TILES);
    block_sync<kMoeThreads>(); // the item's shared memory is free before the next one's copies
  }
}

// Entry: grid [G * INTERMEDIATE / (16 - 8 HALF_TILES)] (moe_items), block
// [256], shared_bytes as gate_up_silu's. Item (slot, tile): 16 gate and 16
// up rows of the slot's expert (HALF_TILES: 8 and 8, one 16-row matrix tile,
// twice the items: fewer blocks idle in a launch's last wave, as
// gate_up_silu's HALF_TILES); act[slot][r][:] for every real row r.
template <class P>
KF_DEVICE void moe_gate_up_entry(const kf_bf16 *x, const kf_bf16 *w, const int *ids, kf_bf16 *act,
                                 int rows) {
  constexpr int I = P::INTERMEDIATE, H = P::HIDDEN, W = P::W;
  static_assert(I % kGemmTileRows == 0, "INTERMEDIATE must be a multiple of 16");
  constexpr int kRows = P::HALF_TILES ? kGemmTileRows / 2 : kGemmTileRows;
  __shared__ int list[W * P::TOPK];
  grid_dep_launch();
  grid_dep_wait(); // ids come from the router
  const int n = moe_distinct<W, P::TOPK, P::EXPERTS>(ids, rows, list);
  moe_items<I / kRows>(n, [&](int slot, int tile) {
    const long long base = (long long)list[slot] * 2 * I * H;
    const int n0 = tile * kRows;
    const long long off[2] = {base + (long long)n0 * H, base + (long long)(I + n0) * H};
    kf_bf16 *out = act + (long long)slot * W * I;
    skinny_gemm_block<H, 2, W, kGemmThreads, P::HALF_TILES != 0, 1, P::DEEP_RING != 0, 0, true>(
        x, w, off, rows,
        [&](int wrow, int xrow, const float *v) {
          store_bf16(out + (long long)xrow * I + n0 + wrow, silu_mul(v[0], v[1]));
        },
        tile);
  });
}

// Entry: grid [G * HIDDEN / 16] (moe_items), block [256]. Item (slot, tile):
// 16 rows of the slot's expert's w_down; y[r][k][:] for every row r whose
// rank-k choice is that expert.
//
// SMEM_CAP: 0, or the most dynamic shared memory a block asks for on the
// long path (INTERMEDIATE >= 8192 or DEEP_RING): its weight ring keeps the
// most slots a warp that fit, 4 down to 2 (gemm_long_slots_within), for
// more blocks an SM where the 64 KB ring and 4 KB of activations a row would
// leave room for two (Mixtral's K = 14336 from width 4). The sums are the
// same bits with any ring.
template <class P>
KF_DEVICE void moe_down_entry(const kf_bf16 *act, const kf_bf16 *w, const int *ids, float *y,
                              int rows) {
  constexpr int I = P::INTERMEDIATE, H = P::HIDDEN, W = P::W, K = P::TOPK;
  static_assert(H % kGemmTileRows == 0, "HIDDEN must be a multiple of 16");
  constexpr int kLongSlots = gemm_long_slots_within(P::SMEM_CAP, W); // 0: the default ring
  __shared__ int list[W * K];
  grid_dep_launch();
  grid_dep_wait(); // act comes from moe_gate_up, ids from the router
  const int n = moe_distinct<W, K, P::EXPERTS>(ids, rows, list);
  moe_items<H / kGemmTileRows>(n, [&](int slot, int tile) {
    const int e = list[slot];
    const int n0 = tile * kGemmTileRows;
    const long long off[1] = {((long long)e * H + n0) * I};
    skinny_gemm_block<I, 1, W, kGemmThreads, false, 1, P::DEEP_RING != 0, 0, true, kLongSlots>(
        act + (long long)slot * W * I, w, off, rows,
        [&](int wrow, int xrow, const float *v) {
          for (int k = 0; k < K; ++k)
            if (ids[xrow * K + k] == e)
              y[((long long)xrow * K + k) * H + n0 + wrow] = v[0];
        },
        tile);
  });
}

// moe_combine's body: grid [W], block [256], row block_idx_x(). With a shared
// expert (SHARED), its output shared[r] (bf16, from the dense kinds) is
// added to the rank-order sum before the one rounding.
template <class P, bool SHARED>
KF_DEVICE void moe_combine_body(const float *y, const float *weights, const kf_bf16 *shared,
                                kf_bf16 *out, int rows) {
  constexpr int H = P::HIDDEN, K = P::TOPK;
  static_assert(H % 8 == 0, "HIDDEN must be a multiple of 8");
  grid_dep_launch();
  grid_dep_wait(); // y comes from moe_down, weights from the router
  const int r = block_idx_x();
  if (r >= rows)
    return;
  float wk[K];
#pragma unroll
  for (int k = 0; k < K; ++k)
    wk[k] = weights[r * K + k];
  for (int c = thread_idx(); c < H / 8; c += kMoeThreads) {
    float acc[8] = {};
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const float *yk = y + ((long long)r * K + k) * H + c * 8;
      const float4 a = load_coherent4(yk), b = load_coherent4(yk + 4);
      const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int q = 0; q < 8; ++q)
        acc[q] = fmaf(wk[k], v[q], acc[q]);
    }
    if constexpr (SHARED) {
      float sh[8];
      unpack8(load_vec(shared + (long long)r * H + c * 8), sh);
#pragma unroll
      for (int q = 0; q < 8; ++q)
        acc[q] += sh[q];
    }
    store_vec(out + (long long)r * H + c * 8, pack8(acc));
  }
}

// Entry of moe_combine: grid [W], block [256]: row block_idx_x().
template <class P>
KF_DEVICE void moe_combine_entry(const float *y, const float *weights, kf_bf16 *out, int rows) {
  moe_combine_body<P, false>(y, weights, nullptr, out, rows);
}

// Entry of moe_combine_shared: as moe_combine, plus the shared expert's
// output shared [rows x HIDDEN] bf16 (GLM-4.5's, DeepSeek-V3's).
template <class P>
KF_DEVICE void moe_combine_shared_entry(const float *y, const float *weights, const kf_bf16 *shared,
                                        kf_bf16 *out, int rows) {
  moe_combine_body<P, true>(y, weights, shared, out, rows);
}

} // namespace kf

#endif // KF_MOE_CUH
