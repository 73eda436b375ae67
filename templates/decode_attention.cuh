// decode_attention.cuh: paged grouped-query attention for decode, one query
// token per row, flash-decoding style, with the combine in the same launch.
//
//   out[r, hq, :] = softmax(q[r, hq] . K[r, :, hq / G]^T / sqrt(HEAD_DIM)) V
//
// over the row's own seq_lens[r] tokens, found through its page-table row
// block_tables[r * block_table_stride + token / PAGE_SIZE] in the caches
// [pages, PAGE_SIZE, NUM_KV_HEADS, HEAD_DIM]. G = NUM_Q_HEADS / NUM_KV_HEADS.
// PAGE_SIZE: a multiple of the 16-token tile (a tile lies in one page), or
// 1, 2, 4 or 8 (a tile spans pages: each token's page is looked up; 1 is a
// token-granular pool's layout). Page-table entries past a row's
// ceil(seq_lens[r] / PAGE_SIZE) pages are never read.
//
// Work split: grid [ceil(SPLITS / W), NUM_KV_HEADS, W], block 128 threads.
// The row's ceil(L / 16) tiles of 16 tokens are cut into ranges of
// max(ceil(tiles / SPLITS), NW) tiles (NW = 128 / warp size: 4 warps on
// NVIDIA, 2 wavefronts of 64 on AMD CDNA), which depends on the row's own
// length L alone. A block owns one (row, kv head) and attends its ranges
// x, x + gridDim.x, ... one after the other (one range at width 1, up to W
// wider, so that every width launches about SPLITS * NUM_KV_HEADS blocks of
// longer streams). K and V of the kv head are read once for all G query
// heads. In a range, warp w takes tiles w, w + NW, ... and keeps an online
// softmax; the block merges its warps in warp order. A row with one range
// writes out directly; otherwise each range writes (max, sum, unnormalised
// output) to `workspace` and the block that arrives last on the (row, kv
// head) counter in `semaphores` merges the ranges in range order and resets
// the counter to zero. So every reduction order is a function of (L,
// SPLITS) only, whichever block attends a range: batch invariant, and
// deterministic.
//
// Buffers the caller provides:
//   workspace   W * NUM_KV_HEADS * SPLITS * (G * HEAD_DIM + 4 * ceil(G / 2))
//               floats (= ... * G * (HEAD_DIM + 2) for even G)
//   semaphores  W * NUM_KV_HEADS ints, zero before the first launch; every
//               launch leaves them zero.
// Launches that share these buffers must not run concurrently.
//
// Launched programmatically: before grid_dep_wait it reads seq_lens,
// block_tables and the K and V of each row's older tokens (all but token
// seq_lens[r] - 1), so those must be in place before the layer's first kernel
// starts (host copies, or kernels that have completed); q and the newest
// token's K and V, which rope_kv_write writes just before, only after it.
#ifndef KF_DECODE_ATTENTION_CUH
#define KF_DECODE_ATTENTION_CUH

#include "kf_mma.cuh"
#include "kf_portability.cuh"
#include "kf_reduce.cuh"

namespace kf {

constexpr int kAttnThreads = 128; // == decode_attention.json launch.block[0]
constexpr int kAttnTile = 16;     // tokens per tile

// One warp's running softmax state for the G query heads of a kv head, in a
// form both code paths produce: per head the running max m (log2 units), the
// running sum l and the unnormalised output o[HEAD_DIM]. o's rows are
// padded by 4 floats: the matrix path stores a lane's 8 consecutive dims of
// a head as two float4, which rows HEAD_DIM apart would put on the same
// banks for the 4 lanes of a group (8-way conflicts before, v15).
template <int G, int D, int NW> struct attn_partials {
  static constexpr int kRow = D + 4;
  float m[NW][G];
  float l[NW][G];
  __align__(16) float o[NW][G][kRow];
};

// The weight of a softmax state with maximum m against a running maximum
// mx >= m: exp2f(x) for x = m - mx > -200, 0 below (exactly exp2f's value
// there: 0 in fp32) and for NaN, so that a state that saw no token (m = -inf,
// and mx = -inf too where none did) weighs 0. Without a branch: the guard
// `m == -inf ? 0 : exp2f(m - mx)` compiles to one per state, and a merge's
// loop then waits out each state's reads and exponential in turn
// (notes/perf/journal.md, v17).
KF_DEVICE float exp2_weight(float x) { return exp2f(fmaxf(x, -200.f)); }

// Cache row (token `tok` of the row, kv head h), given the row's page table.
template <int PAGE_SIZE, int HKV, int D>
KF_DEVICE long long kv_offset(const int *page_row, int tok, int h) {
  const long long page = page_row[tok / PAGE_SIZE];
  return ((page * PAGE_SIZE + tok % PAGE_SIZE) * HKV + h) * D;
}

// Tuning knob: launches of width <= KF_ATTN_TWO_TILES_MAX_W keep two tiles
// of K and V per warp in registers: the next tile's loads go out before the
// current tile's arithmetic, and both of a warp's first tiles are read ahead
// of grid_dep_wait (twice the bytes in flight, about 224 registers instead
// of 180). Width 1 is capped at 2 blocks per SM anyway (launch.one_wave), so
// the registers cost it no blocks. Measured on the H200 (notes/perf/journal.md,
// v9 and v11): width 1, 8K tokens 47-52 -> 49-56% of the read ceiling, 32K
// 75-79 -> 77-81%. Wider launches, whose blocks attend several ranges, take
// one tile: with two, the loop that crosses ranges needs more than 255
// registers and spills (v15). Only on sm_90: for sm_100a ptxas needs 255
// registers and still spills, and no sm_100 GPU has measured it.
// The tuning below was measured on sm_90 (H200) only; other arches keep the
// plain defaults.
#if KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 900 && KF_ARCH_CODE < 1000
#define KF_ATTN_SM90_TUNED 1
#else
#define KF_ATTN_SM90_TUNED 0
#endif
#ifndef KF_ATTN_TWO_TILES_MAX_W
#define KF_ATTN_TWO_TILES_MAX_W KF_ATTN_SM90_TUNED
#endif // KF_ATTN_TWO_TILES_MAX_W
// KF_ATTN_PEEL 1 gives the one-tile launches (wider than
// KF_ATTN_TWO_TILES_MAX_W) width 1's start: the first two tiles of a warp's
// first range both go into registers ahead of grid_dep_wait and are attended
// before the loop, which then streams one tile at a time (sm_90 only; 237-255
// registers, no spills). Measured on the H200 (notes/perf/journal.md, v16): 8K
// tokens with 2-8 rows 1-4% faster, 32K and 128K 1-2%; 1K with 2 rows
// (nothing to peel: one tile a warp) 1-4% slower.
#ifndef KF_ATTN_PEEL
#define KF_ATTN_PEEL KF_ATTN_SM90_TUNED
#endif // KF_ATTN_PEEL

// Tuning knobs of the programmatic launch (notes/perf/journal.md, v7):
// KF_ATTN_READ_AHEAD 1 loads each warp's first tile before grid_dep_wait
// (the entry says which); KF_ATTN_EARLY_RELEASE 1 lets the next kernel start
// its blocks as soon as every block of this one has passed grid_dep_wait, 0
// only as this kernel's blocks exit. The next kernel's blocks then take the
// slots this one's leave at once and read ahead of their own wait while
// this one merges: measured on the H200 (notes/perf/journal.md, v16), against
// a release once a block's K and V were read (v7-v15), 8K tokens with one
// row 3.5-4.5% faster, 1K 3-8%, two rows and more 0-2%, the layer within
// 1%. Early release needs the width-1 launch capped at 2 blocks per SM (the
// schema's launch.one_wave): uncapped, the next launch's first
// blocks took each SM's third slot while this one merged, and the blocks
// placed later piled onto the SMs that emptied first (v7: 32K tokens at
// R = 1: 75 -> 66%).
#ifndef KF_ATTN_READ_AHEAD
#define KF_ATTN_READ_AHEAD 1
#endif // KF_ATTN_READ_AHEAD
#ifndef KF_ATTN_EARLY_RELEASE
#define KF_ATTN_EARLY_RELEASE 1
#endif // KF_ATTN_EARLY_RELEASE
// KF_ATTN_L2_AHEAD n > 0 also asks L2, ahead of grid_dep_wait, for each
// warp's next n tiles after those it loads into registers there (sm_90
// only, like the other tuning): the memory system, idle while the kernel
// before merges, fetches them then. Measured on the H200
// (notes/perf/journal.md, v16), n = 1: 2-4% faster at 8K and 32K tokens at
// every width, within 1.5% at 1K and 128K; n = 2 or 3 no better or slower
// (their traffic delays the merges of the kernel before).
#ifndef KF_ATTN_L2_AHEAD
#define KF_ATTN_L2_AHEAD KF_ATTN_SM90_TUNED
#endif // KF_ATTN_L2_AHEAD

// Tuning knobs of a block's range ends (notes/perf/journal.md, v15):
// KF_ATTN_MERGE_SETS 1 merges the parked ranges of a flush side by side
// where a kv head has more than 2 query heads (with 2, Qwen3-0.6B, one set
// at a time was 1-2.5% faster at 8K and 32K tokens with 2-8 rows once
// KF_ATTN_PEEL was in, v16), KF_ATTN_HAND_OFF 1 has one warp merge each
// parked range while the others stream on (blocks of more than 2 ranges).
// Same arithmetic either way. Only on sm_90: on sm_100a ptxas keeps these
// kernels to 168 registers and then spills, and no sm_100 GPU has measured
// them.
#ifndef KF_ATTN_MERGE_SETS
#define KF_ATTN_MERGE_SETS KF_ATTN_SM90_TUNED
#endif // KF_ATTN_MERGE_SETS
#ifndef KF_ATTN_HAND_OFF
#define KF_ATTN_HAND_OFF KF_ATTN_SM90_TUNED
#endif // KF_ATTN_HAND_OFF
// KF_ATTN_BRANCHY_FLUSH: how a block's flush (merge_warps) weighs its warps'
// states, with exp2_weight (0), with the guard that branches at width 2
// where a kv head has more than 2 query heads (1), or with the guard
// everywhere (2, as before v17). Same values either way. Measured on the
// H200 (notes/perf/journal.md, v17): 1; the guard at width 2 with 4 heads, at
// 255 registers, was 0.6-2.6% faster at 8K tokens, exp2_weight 1-2% faster
// at widths 1, 4 and 8. Elsewhere 2: on sm_100a the width-2 kernels keep
// 168 registers and spill with exp2_weight.
#ifndef KF_ATTN_BRANCHY_FLUSH
#define KF_ATTN_BRANCHY_FLUSH (KF_ATTN_SM90_TUNED ? 1 : 2)
#endif // KF_ATTN_BRANCHY_FLUSH

#if KF_USE_MMA
// One 16-token tile of K and V as a lane holds it for the matrix
// instructions: K tokens 8 nt + g at head-dim 32 j + 8 t; V tokens
// {2t, 2t+1, 8+2t, 9+2t} at head-dim 64 hh + 8 g. Tokens >= len are zeros
// (never read: a page's tail may hold anything, NaN included).
template <int D> struct kv_tile {
  vec8 k[2][D / 32];
  vec8 v[4][D / 64];
};

// The page a lane passes to load_kv_tile for tile `tile` of a row (page_row:
// its page-table row): with pages of a tile or more, the tile's page; with
// smaller pages, the page of the lane's token of the tile, lane % 16 (0
// past the row's length, whose entries are not read).
template <int PAGE_SIZE> KF_DEVICE int tile_page(const int *page_row, int tile, int len, int lane) {
  if constexpr (PAGE_SIZE >= kAttnTile) {
    return tile >= 0 ? page_row[tile * kAttnTile / PAGE_SIZE] : 0;
  } else {
    const int tok = tile * kAttnTile + (lane & (kAttnTile - 1));
    return tile >= 0 && tok < len ? page_row[tok / PAGE_SIZE] : 0;
  }
}

// page: tile_page's answer for the tile. With pages smaller than a tile
// each token's page comes from the lane that looked it up (every lane of
// the warp calls this). AFTER_WAIT: the loads stay after grid_dep_wait (the
// tile may hold a token the kernel before writes); false only for tiles
// read ahead of the wait.
template <int D, int HKV, int PAGE_SIZE, bool AFTER_WAIT = true>
KF_DEVICE void load_kv_tile(kv_tile<D> &r, const kf_bf16 *k_cache, const kf_bf16 *v_cache, int page,
                            int kv_head, int len, int tile, int lane) {
  auto load = [](const kf_bf16 *p) {
    return AFTER_WAIT ? load_stream_after_wait(p) : load_stream(p);
  };
  const int g = lane >> 2, t = lane & 3;
  const int tok0 = tile * kAttnTile;
  if constexpr (PAGE_SIZE < kAttnTile) {
    // Token i of the tile (its page from lane i) at kv head kv_head.
    auto row = [&](int i) {
      const long long pg = __float_as_int(shfl(__int_as_float(page), i));
      return ((pg * PAGE_SIZE + i % PAGE_SIZE) * HKV + kv_head) * (long long)D;
    };
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const bool ok = tok0 + 8 * nt + g < len;
      const kf_bf16 *p = k_cache + row(8 * nt + g);
#pragma unroll
      for (int j = 0; j < D / 32; ++j)
        r.k[nt][j] = ok ? load(p + 32 * j + 8 * t) : zero_vec();
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int i = (a >> 1) * 8 + 2 * t + (a & 1);
      const bool ok = tok0 + i < len;
      const kf_bf16 *p = v_cache + row(i);
#pragma unroll
      for (int hh = 0; hh < D / 64; ++hh)
        r.v[a][hh] = ok ? load(p + 64 * hh + 8 * g) : zero_vec();
    }
    return;
  }
  const long long base =
      ((long long)page * PAGE_SIZE + tok0 % PAGE_SIZE) * HKV * D + (long long)kv_head * D;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int tok = tok0 + 8 * nt + g;
    const bool ok = tok < len;
    const kf_bf16 *p = k_cache + base + (long long)(8 * nt + g) * HKV * D;
#pragma unroll
    for (int j = 0; j < D / 32; ++j)
      r.k[nt][j] = ok ? load(p + 32 * j + 8 * t) : zero_vec();
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int tok = tok0 + (a >> 1) * 8 + 2 * t + (a & 1);
    const bool ok = tok < len;
    const kf_bf16 *p = v_cache + base + (long long)(tok - tok0) * HKV * D;
#pragma unroll
    for (int hh = 0; hh < D / 64; ++hh)
      r.v[a][hh] = ok ? load(p + 64 * hh + 8 * g) : zero_vec();
  }
}

// Warp building block (matrix instructions): one warp's online softmax over
// 16-token tiles of one row and kv head, for the G query heads (q_head0
// points at the first, HEAD_DIM apart). reset() starts a range, attend()
// takes the next tile of it, store() leaves the range's state in part[warp].
//
// S^T = Q K^T runs as m16n8k16 with the heads as M and 8 tokens as N; its
// accumulator layout (head g, tokens 2t, 2t+1) is exactly the B fragment of
// the next product O^T = V^T P^T (M = head-dim rows, N = heads), so P never
// leaves registers. V^T fragments are built from 16-byte row loads with byte
// permutes. Up to 8 heads use rows g of the score tile (rows g + 8 are
// zeros); 9 to 16 heads (GLM-4.5's 12) use rows g + 8 for heads 8 and up,
// which take their own softmax state and a second O^T product per tile
// (the "hi" members below, unused for G <= 8).
// The hi set's state (below): nothing where G <= 8, so that those kernels'
// state is what it was before the hi set existed (a member left unused
// still changed the code ptxas made for them).
template <int D, bool HI> struct mma_hi_heads {};
template <int D> struct mma_hi_heads<D, true> {
  uint32_t qa_hi[D / 32][2][2]; // Q rows g + 8: heads 8 + g < G
  float m_hi, l_hi;
  float o_hi[D / 16][4];
};

template <int D, int G> struct warp_softmax_mma : mma_hi_heads<D, (G > 8)> {
  static_assert(D % 64 == 0, "HEAD_DIM must be a multiple of 64");
  static_assert(G >= 1 && G <= 16, "at most 16 query heads per kv head");
  static constexpr int KJ = D / 32; // 16-byte K loads per token row per lane
  static constexpr int VH = D / 64; // 16-byte V loads per token per lane
  static constexpr int MT = D / 16; // O^T m-tiles
  static constexpr bool kHi = G > 8;

  uint32_t qa[KJ][2][2]; // Q as the A operand: rows g < G are heads, the rest zero
  float m_run, l_run;
  float o[MT][4];

  KF_DEVICE void load_q(const kf_bf16 *q_head0, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < KJ; ++j) {
      const vec8 qv = g < G ? load_vec(q_head0 + (long long)g * D + 32 * j + 8 * t) : zero_vec();
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        qa[j][hf][0] = qv.w[2 * hf];
        qa[j][hf][1] = qv.w[2 * hf + 1];
      }
      if constexpr (kHi) {
        const vec8 qh =
            g + 8 < G ? load_vec(q_head0 + (long long)(g + 8) * D + 32 * j + 8 * t) : zero_vec();
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          this->qa_hi[j][hf][0] = qh.w[2 * hf];
          this->qa_hi[j][hf][1] = qh.w[2 * hf + 1];
        }
      }
    }
  }

  // Q rows g + 8 as the A operand: zeros where G <= 8.
  KF_DEVICE uint32_t q_hi(int j, int hf, int i) const {
    if constexpr (kHi)
      return this->qa_hi[j][hf][i];
    else
      return 0u;
  }

  KF_DEVICE void reset() {
    m_run = -INFINITY;
    l_run = 0.f;
#pragma unroll
    for (int i = 0; i < MT; ++i)
      o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    if constexpr (kHi) {
      this->m_hi = -INFINITY;
      this->l_hi = 0.f;
#pragma unroll
      for (int i = 0; i < MT; ++i)
        this->o_hi[i][0] = this->o_hi[i][1] = this->o_hi[i][2] = this->o_hi[i][3] = 0.f;
    }
  }

  // One head's softmax step over the tile: sc[nt][e0 + e] is its score for
  // token tok0 + 8 nt + 2t + e. Updates m and l, leaves the weights in p and
  // returns the factor that rescales the head's earlier output. (Heads 8 and
  // up; attend() spells out the same steps for heads 0 to 7.)
  KF_DEVICE static float softmax_step(const float (&sc)[2][4], int e0, int tok0, int len,
                                      float scale_log2, int t, float &m, float &l,
                                      float (&p)[2][2]) {
    float x[2][2];
    float tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = tok0 + 8 * nt + 2 * t + e;
        x[nt][e] = tok < len ? sc[nt][e0 + e] * scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, x[nt][e]);
      }
    }
    tmax = group_max<4>(tmax);
    const float m_new = fmaxf(m, tmax); // finite: token tok0 is always real
    const float corr = exp2f(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[nt][e] = exp2f(x[nt][e] - m_new);
        psum += p[nt][e];
      }
    }
    l = l * corr + psum;
    m = m_new;
    return corr;
  }

  // O^T columns are heads 2t and 2t+1 (of the set), whose factors live in
  // lanes 8t, 8t+4.
  KF_DEVICE static void rescale(float (&out)[MT][4], float corr, int t) {
    const float c0 = shfl(corr, 8 * t), c1 = shfl(corr, 8 * t + 4);
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      out[i][0] *= c0;
      out[i][1] *= c1;
      out[i][2] *= c0;
      out[i][3] *= c1;
    }
  }

  // The tile of tokens tok0 .. tok0 + 15 (those >= len masked).
  KF_DEVICE void attend(const kv_tile<D> &cur, int tok0, int len, float scale_log2, int lane) {
    const int t = lane & 3;
    const vec8(&kv)[2][KJ] = cur.k;
    const vec8(&vv)[4][VH] = cur.v;

    // Scores: sc[nt][e] is head g (e < 2; head g + 8 for e >= 2), token
    // tok0 + 8 nt + 2t + e % 2. Each is summed in two independent chains of
    // matrix instructions (hf: the first and the last four of a lane's
    // eight head dims of every 32), added at the end: half the dependent
    // latency.
    float sc[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float half[2][4] = {};
#pragma unroll
      for (int j = 0; j < KJ; ++j) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
          mma_bf16_16816(half[hf], qa[j][hf][0], q_hi(j, hf, 0), qa[j][hf][1], q_hi(j, hf, 1),
                         kv[nt][j].w[2 * hf], kv[nt][j].w[2 * hf + 1]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        sc[nt][e] = half[0][e] + half[1][e];
    }
    // Heads g: softmax_step's arithmetic, spelled out here because the call
    // changed the code ptxas made for G = 2 at widths 2 to 8 (the same
    // values, another schedule, on kernels that ship measured).
    float x[2][2];
    float tmax = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tok = tok0 + 8 * nt + 2 * t + e;
        x[nt][e] = tok < len ? sc[nt][e] * scale_log2 : -INFINITY;
        tmax = fmaxf(tmax, x[nt][e]);
      }
    }
    tmax = group_max<4>(tmax);
    const float m_new = fmaxf(m_run, tmax); // finite: token tok0 is always real
    const float corr = exp2f(m_run - m_new);
    float p[2][2], psum = 0.f, p_hi[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[nt][e] = exp2f(x[nt][e] - m_new);
        psum += p[nt][e];
      }
    }
    l_run = l_run * corr + psum;
    m_run = m_new;
    rescale(o, corr, t);
    if constexpr (kHi)
      rescale(this->o_hi,
              softmax_step(sc, 2, tok0, len, scale_log2, t, this->m_hi, this->l_hi, p_hi), t);
    const uint32_t b0 = pack_bf16x2(p[0][0], p[0][1]);
    const uint32_t b1 = pack_bf16x2(p[1][0], p[1][1]);
    [[maybe_unused]] uint32_t bh0 = 0, bh1 = 0;
    if constexpr (kHi) {
      bh0 = pack_bf16x2(p_hi[0][0], p_hi[0][1]);
      bh1 = pack_bf16x2(p_hi[1][0], p_hi[1][1]);
    }
#pragma unroll
    for (int hh = 0; hh < VH; ++hh) {
#pragma unroll
      for (int pp = 0; pp < 4; ++pp) {
        // m rows: g <-> head-dim 64 hh + 8 g + 2 pp, g + 8 <-> the next one.
        const uint32_t a0 = interleave_bf16(vv[0][hh].w[pp], vv[1][hh].w[pp], false);
        const uint32_t a1 = interleave_bf16(vv[0][hh].w[pp], vv[1][hh].w[pp], true);
        const uint32_t a2 = interleave_bf16(vv[2][hh].w[pp], vv[3][hh].w[pp], false);
        const uint32_t a3 = interleave_bf16(vv[2][hh].w[pp], vv[3][hh].w[pp], true);
        mma_bf16_16816(o[hh * 4 + pp], a0, a1, a2, a3, b0, b1);
        if constexpr (kHi)
          mma_bf16_16816(this->o_hi[hh * 4 + pp], a0, a1, a2, a3, bh0, bh1);
      }
    }
  }

  // Heads h0 + 2t, h0 + 2t + 1 of out (the lo or the hi set) into part.
  template <int NW>
  KF_DEVICE static void store_set(attn_partials<G, D, NW> &part, const float (&out)[MT][4], int h0,
                                  int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
    // The lane holds dims 64 hh + 8 g + 0..7 of heads 2t (c[0], c[2] of
    // each pp) and 2t + 1 (c[1], c[3]).
#pragma unroll
    for (int hh = 0; hh < VH; ++hh) {
      const int d = 64 * hh + 8 * g;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int h = h0 + 2 * t + e;
        if (h < G) {
          const float *c0 = out[hh * 4], *c1 = out[hh * 4 + 1], *c2 = out[hh * 4 + 2],
                      *c3 = out[hh * 4 + 3];
          float4 *dst = reinterpret_cast<float4 *>(&part.o[warp][h][d]);
          dst[0] = make_float4(c0[e], c0[e + 2], c1[e], c1[e + 2]);
          dst[1] = make_float4(c2[e], c2[e + 2], c3[e], c3[e + 2]);
        }
      }
    }
  }

  template <int NW> KF_DEVICE void store(attn_partials<G, D, NW> &part, int warp, int lane) const {
    const int g = lane >> 2, t = lane & 3;
    const float l_sum = group_sum<4>(l_run);
    if (t == 0 && g < G) {
      part.m[warp][g] = m_run;
      part.l[warp][g] = l_sum;
    }
    store_set(part, o, 0, warp, lane);
    if constexpr (kHi) {
      const float l_sum_hi = group_sum<4>(this->l_hi);
      if (t == 0 && g + 8 < G) {
        part.m[warp][g + 8] = this->m_hi;
        part.l[warp][g + 8] = l_sum_hi;
      }
      store_set(part, this->o_hi, 8, warp, lane);
    }
  }
};
#endif // KF_USE_MMA

// Warp building block (portable): attend tiles first, first + step, ... <
// end_tile of one row and kv head, one token at a time, lanes striding over
// the head dimension, and leave the state in part[warp] (as
// warp_softmax_mma's store does).
template <int D, int G, int HKV, int PAGE_SIZE, int NW>
KF_DEVICE void attend_tiles_generic(const kf_bf16 *q_head0, const kf_bf16 *k_cache,
                                    const kf_bf16 *v_cache, const int *page_row, int kv_head,
                                    int len, int first_tile, int end_tile, int step,
                                    float scale_log2, attn_partials<G, D, NW> &part, int warp,
                                    int lane) {
  static_assert(D % kWarpSize == 0, "HEAD_DIM must be a multiple of the warp size");
  constexpr int PER = D / kWarpSize;
  float q[G][PER], o[G][PER], m[G], l[G];
#pragma unroll
  for (int h = 0; h < G; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const uint16_t bits =
          reinterpret_cast<const uint16_t *>(q_head0)[h * D + lane + i * kWarpSize];
      q[h][i] = __uint_as_float((uint32_t)bits << 16);
      o[h][i] = 0.f;
    }
  }
  for (int tile = first_tile; tile < end_tile; tile += step) {
    for (int tok = tile * kAttnTile; tok < (tile + 1) * kAttnTile && tok < len; ++tok) {
      const long long off = kv_offset<PAGE_SIZE, HKV, D>(page_row, tok, kv_head);
      float kf[PER], vf[PER];
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        kf[i] = __uint_as_float(
            (uint32_t) reinterpret_cast<const uint16_t *>(k_cache)[off + lane + i * kWarpSize]
            << 16);
        vf[i] = __uint_as_float(
            (uint32_t) reinterpret_cast<const uint16_t *>(v_cache)[off + lane + i * kWarpSize]
            << 16);
      }
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i)
          s = fmaf(q[h][i], kf[i], s);
        s = warp_sum(s) * scale_log2;
        const float m_new = fmaxf(m[h], s);
        const float corr = exp2f(m[h] - m_new), p = exp2f(s - m_new);
        l[h] = l[h] * corr + p;
        m[h] = m_new;
#pragma unroll
        for (int i = 0; i < PER; ++i)
          o[h][i] = fmaf(p, vf[i], o[h][i] * corr);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < G; ++h) {
    if (lane == 0) {
      part.m[warp][h] = m[h];
      part.l[warp][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < PER; ++i)
      part.o[warp][h][lane + i * kWarpSize] = o[h][i];
  }
}

// Block building block: merge NW warp states (warp order) into one state per
// head, for each of n <= MAXN sets of them, slot(0) .. slot(n - 1); calls
// emit(j, h, d, value_sum, m, l) for every set j, head h < G and d < D, with
// value_sum the unnormalised output. Warps that saw no token have m = -inf.
// A thread's elements of all n sets are independent chains, unrolled side
// by side when n == MAXN (a merge at the end of a block is all latency).
// GUARDED weighs the warps with the guard that branches instead of
// exp2_weight (same values; see KF_ATTN_BRANCHY_FLUSH).
template <int N> struct int_tag { static constexpr int value = N; };

template <int G, int D, int NW, int THREADS, int MAXN, bool BATCH = true, bool GUARDED = false,
          class Slot, class Emit>
KF_DEVICE void merge_warps(int n, Slot slot, Emit emit, int tid = thread_idx()) {
  constexpr int kPer = (G * D + THREADS - 1) / THREADS; // elements per thread
  constexpr int KC = BATCH ? kPer : 1;                  // elements per batch
  // Sets j0 .. j0 + N - 1, KC elements at a time: every value first, then
  // every emit (the stores may alias the loads as far as the compiler knows).
  auto sets = [&](int j0, auto n_sets) {
    constexpr int N = decltype(n_sets)::value;
#pragma unroll
    for (int k0 = 0; k0 < kPer; k0 += KC) {
      float acc[N][KC], mx[N][KC], l[N][KC];
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const attn_partials<G, D, NW> &part = slot(j0 + j);
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          const int e = tid + (k0 + k) * THREADS;
          const int h = e < G * D ? e / D : 0, d = e % D;
          mx[j][k] = part.m[0][h];
#pragma unroll
          for (int w = 1; w < NW; ++w)
            mx[j][k] = fmaxf(mx[j][k], part.m[w][h]);
          acc[j][k] = l[j][k] = 0.f;
#pragma unroll
          for (int w = 0; w < NW; ++w) {
            const float f = GUARDED
                                ? (part.m[w][h] == -INFINITY ? 0.f : exp2f(part.m[w][h] - mx[j][k]))
                                : exp2_weight(part.m[w][h] - mx[j][k]);
            acc[j][k] = fmaf(part.o[w][h][d], f, acc[j][k]);
            l[j][k] = fmaf(part.l[w][h], f, l[j][k]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < N; ++j) {
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          const int e = tid + (k0 + k) * THREADS;
          if (e < G * D)
            emit(j0 + j, e / D, e % D, acc[j][k], mx[j][k], l[j][k]);
        }
      }
    }
  };
  if (n == MAXN) {
    sets(0, int_tag<MAXN>{});
  } else {
    for (int j = 0; j < n; ++j)
      sets(j, int_tag<1>{});
  }
}

// One range's record: o[G][D] unnormalised, then m[G] (log2 units) and
// l[G], padded to 16 bytes.
template <int G, int D> constexpr int kAttnRecordFloats = (G * D) + (2 * G + 3) / 4 * 4;

// Block building block: the running merge of records in order, for one
// (row, kv head). Thread t of THREADS owns the float4 outputs t, t + THREADS,
// ... of the G x D output, with a running maximum per head.
template <int G, int D, int THREADS> struct record_merge {
  static constexpr int kRec = kAttnRecordFloats<G, D>;
  static constexpr int kEl = (G * D / 4 + THREADS - 1) / THREADS;
  float4 acc[kEl];
  float l[kEl], mx[kEl];

  KF_DEVICE record_merge() {
#pragma unroll
    for (int q = 0; q < kEl; ++q) {
      acc[q] = make_float4(0.f, 0.f, 0.f, 0.f);
      l[q] = 0.f;
      mx[q] = -INFINITY;
    }
  }

  // Merges records in order, wherever they are: rec_m(u, q, h) and
  // rec_l(u, q, h) give record u's maximum and sum of head h, rec_o(u, q, h,
  // d) its float4 of head h at d, the thread's q-th. MAXN == 0: records 0 ..
  // n - 1. MAXN > 0: the loops unroll over records 0 .. MAXN - 1, and those
  // from n on must weigh 0 (maximum -inf) and hold finite values, which adds
  // 0 x 0 to every sum and leaves it as it is (the sums start at +0 and are
  // never -0). No branch in the loops (exp2_weight): the records' reads and
  // exponentials overlap, where a branch per record cost each its whole
  // latency, about 100 cycles (notes/perf/journal.md, v17).
  template <int MAXN, class FM, class FL, class FO>
  KF_DEVICE void absorb_from(int n, FM rec_m, FL rec_l, FO rec_o) {
    auto each_record = [&](auto body) {
      if constexpr (MAXN > 0) {
#pragma unroll
        for (int u = 0; u < MAXN; ++u)
          body(u);
      } else {
#pragma unroll 4
        for (int u = 0; u < n; ++u)
          body(u);
      }
    };
#pragma unroll
    for (int q = 0; q < kEl; ++q) {
      const int e = thread_idx() + q * THREADS;
      if (e < G * D / 4) {
        const int h = e / (D / 4), d = 4 * (e % (D / 4));
        float bmx = mx[q];
        each_record([&](int u) { bmx = fmaxf(bmx, rec_m(u, q, h)); });
        const float c = exp2_weight(mx[q] - bmx); // bmx >= mx, finite
        acc[q].x *= c;
        acc[q].y *= c;
        acc[q].z *= c;
        acc[q].w *= c;
        l[q] *= c;
        each_record([&](int u) {
          const float f = exp2_weight(rec_m(u, q, h) - bmx);
          const float4 v = rec_o(u, q, h, d);
          acc[q].x = fmaf(v.x, f, acc[q].x);
          acc[q].y = fmaf(v.y, f, acc[q].y);
          acc[q].z = fmaf(v.z, f, acc[q].z);
          acc[q].w = fmaf(v.w, f, acc[q].w);
          l[q] = fmaf(rec_l(u, q, h), f, l[q]);
        });
        mx[q] = bmx;
      }
    }
  }

  // Merges the n records at recs (kRec floats apart, this block's shared
  // memory). MAXN > 0 (n <= MAXN): unrolled over MAXN, the reads past n
  // going to record 0 with its maximum read at neg_inf (a shared -inf), so
  // that they weigh 0.
  template <int MAXN> KF_DEVICE void absorb(const float *recs, int n, const float *neg_inf) {
    auto at = [&](int u) { return MAXN == 0 || u < n ? u : 0; };
    absorb_from<MAXN>(
        n,
        [&](int u, int, int h) {
          return *(MAXN == 0 || u < n ? recs + u * kRec + G * D + h : neg_inf);
        },
        [&](int u, int, int h) { return recs[at(u) * kRec + G * D + G + h]; },
        [&](int u, int, int h, int d) {
          return *reinterpret_cast<const float4 *>(recs + at(u) * kRec + h * D + d);
        });
  }

  // The normalised output, heads D apart from out_head0.
  KF_DEVICE void store_out(kf_bf16 *out_head0) const {
#pragma unroll
    for (int q = 0; q < kEl; ++q) {
      const int e = thread_idx() + q * THREADS;
      if (e < G * D / 4) {
        const int h = e / (D / 4), d = 4 * (e % (D / 4));
        const float inv = l[q] > 0.f ? 1.f / l[q] : 0.f;
        kf_bf16 *o = out_head0 + h * D + d;
        store_bf16(o, acc[q].x * inv);
        store_bf16(o + 1, acc[q].y * inv);
        store_bf16(o + 2, acc[q].z * inv);
        store_bf16(o + 3, acc[q].w * inv);
      }
    }
  }
};

// Entry: grid [SPLITS, NUM_KV_HEADS, W], block [128].
template <class P>
KF_DEVICE void decode_attention_entry(const kf_bf16 *q, const kf_bf16 *k_cache,
                                      const kf_bf16 *v_cache, const int *block_tables,
                                      int block_table_stride, const int *seq_lens, kf_bf16 *out,
                                      float *workspace, int *semaphores, int rows) {
  constexpr int D = P::HEAD_DIM, HQ = P::NUM_Q_HEADS, HKV = P::NUM_KV_HEADS;
  constexpr int G = HQ / HKV, SPLITS = P::SPLITS, PS = P::PAGE_SIZE;
  constexpr int NW = kAttnThreads / kWarpSize;
  static_assert(HQ % HKV == 0, "NUM_Q_HEADS must be a multiple of NUM_KV_HEADS");
  static_assert(PS > 0 && (PS % kAttnTile == 0 || kAttnTile % PS == 0),
                "PAGE_SIZE must be a multiple of 16, or 1, 2, 4 or 8");
  constexpr int kPartFloats = kAttnRecordFloats<G, D>;
  using merge_t = record_merge<G, D, kAttnThreads>;

#if !KF_MONO
  __shared__ attn_partials<G, D, NW> part;
#endif // !KF_MONO
  // The merge's stage: as many whole records as fit beside the rest of the
  // block's static shared memory, below 48 KB (18 of 32 ranges for 4 heads).
  // Its size is part of the arithmetic (each stage rescales by its own
  // maximum), so it is the same at every width. When width 8 ran 3 blocks
  // per SM, every record in one 66.5 KB stage cost it 15 points, a smaller
  // stage gained nothing (notes/perf/journal.md, v9 runs 8-11).
  constexpr int kRecBytes = kPartFloats * 4;
  constexpr int kStageBytes = 46 * 1024 - (int)sizeof(attn_partials<G, D, NW>);
  constexpr int kStage = kStageBytes / kRecBytes < 1        ? 1
                         : kStageBytes / kRecBytes < SPLITS ? kStageBytes / kRecBytes
                                                            : SPLITS;
#if KF_MONO
  // In a layer kernel the two live in the item's share of its dynamic
  // shared memory (the schema's launch.layer_shared_bytes; two items side by
  // side in a block, launch.layer_pack), which the other phases reuse, and
  // so do the two words below.
  static_assert(sizeof(attn_partials<G, D, NW>) % 16 == 0, "stage alignment");
  unsigned char *smem = layer::slot_smem();
  attn_partials<G, D, NW> &part = *reinterpret_cast<attn_partials<G, D, NW> *>(smem);
  float *stage = reinterpret_cast<float *>(smem + sizeof(attn_partials<G, D, NW>));
  if (layer::slot_smem_bytes < (int)sizeof(attn_partials<G, D, NW>) + kStage * kPartFloats * 4 + 8)
    trap();
  int &is_last = *reinterpret_cast<int *>(stage + kStage * kPartFloats);
  float &neg_inf = *(stage + kStage * kPartFloats + 1);
#else
  __shared__ __align__(16) float stage[kStage * kPartFloats];
  __shared__ int is_last;   // block_arrives_last's answer
  __shared__ float neg_inf; // -inf, for the final merge's reads past its records
#endif // KF_MONO

  const int kv_head = block_idx_y(), row = block_idx_z();
  const int len = row < rows ? seq_lens[row] : 0;
  const int n_tiles = (len + kAttnTile - 1) / kAttnTile;
  // At most SPLITS ranges, and at least one tile per warp in each.
  const int per_range = max((n_tiles + SPLITS - 1) / SPLITS, NW);
  const int n_ranges = max((n_tiles + per_range - 1) / per_range, 1); // 1 when len == 0: zeros
  // The block attends ranges blockIdx.x, + gridDim.x, ... (one range per
  // block at width 1, several wider: the launch's grid), one after the
  // other; warp w takes tiles w, w + NW, ... of each.
  const int first_range = block_idx_x(), range_step = grid_dim_x();
  constexpr int kRangesPerBlock = P::W; // at most: gridDim.x = ceil(SPLITS / W)
  const bool active = row < rows && first_range < n_ranges;
  const int warp = warp_id(), lane = lane_id();
  const int *page_row = block_tables + (long long)row * block_table_stride;
  auto range_end = [&](int s) { return min((s + 1) * per_range, n_tiles); };

  // Ahead of grid_dep_wait (a programmatic launch: the kernel before may
  // still run), each warp loads its first tile of K and V (its first two at
  // widths up to KF_ATTN_TWO_TILES_MAX_W, and wider with KF_ATTN_PEEL when
  // both are in its first range), unless a tile holds the row's
  // newest token, seq_lens[row] - 1, which the kernel before
  // (rope_kv_write) writes. So the lookups and the first round trip to memory
  // overlap the kernel before. What is read here, block_tables, seq_lens and
  // older tokens' K and V, must be written before the layer's first kernel
  // starts (docs/contracts.md).
#if KF_USE_MMA
  // The warp's first tile of range s (none: -1), and its tile after tile t
  // of range s: the next of the range, or its first of the block's next
  // range. Only the row's last range can give a warp no tile (it may be
  // shorter than NW tiles), and no range follows it.
  auto first_of = [&](int s) { return s * per_range + warp < n_tiles ? s * per_range + warp : -1; };
  auto after = [&](int t, int s) {
    return t + NW < range_end(s) ? t + NW : kRangesPerBlock > 1 ? first_of(s + range_step) : -1;
  };
  auto page_of = [&](int t) { return tile_page<PS>(page_row, t, len, lane); };
  int t_cur = active ? first_of(first_range) : -1;
  constexpr bool kTwo = P::W <= KF_ATTN_TWO_TILES_MAX_W;
  const int older = n_tiles - 1; // tiles below it hold no newest token
  kv_tile<D> cur{}, nxt{};
  int t_next = t_cur >= 0 ? after(t_cur, first_range) : -1;
  const bool cur_ready = KF_ATTN_READ_AHEAD && t_cur >= 0 && t_cur < older;
  bool nxt_ready = kTwo && cur_ready && t_next >= 0 && t_next < older;
  // One-tile launches: the second tile read ahead too, when it is in the
  // first range, and attended before the loop (KF_ATTN_PEEL).
  constexpr bool kPeel = !kTwo && KF_ATTN_PEEL;
  const bool peel =
      kPeel && cur_ready && t_next >= 0 && t_next < older && t_next < range_end(first_range);
  if (cur_ready)
    load_kv_tile<D, HKV, PS, false>(cur, k_cache, v_cache, page_of(t_cur), kv_head, len, t_cur,
                                    lane);
  if (nxt_ready || peel)
    load_kv_tile<D, HKV, PS, false>(nxt, k_cache, v_cache, page_of(t_next), kv_head, len, t_next,
                                    lane);
  if constexpr (KF_ATTN_L2_AHEAD > 0) {
    // The warp's next KF_ATTN_L2_AHEAD tiles after those in registers into
    // L2: lane l < 16 asks for K row l of each, the others for V row l - 16
    // (HEAD_DIM * 2 bytes each). Their page lookups go out together first.
    int pt = nxt_ready || peel ? t_next : cur_ready ? t_cur : -1;
    constexpr int kAhead = KF_ATTN_L2_AHEAD > 0 ? KF_ATTN_L2_AHEAD : 1; // (no zero-size arrays)
    int pages[kAhead], tiles[kAhead];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      if (pt >= 0)
        pt = after(pt, pt / per_range);
      if (pt >= older)
        pt = -1;
      tiles[k] = pt;
      pages[k] = page_of(pt);
    }
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      if (tiles[k] >= 0) {
        const int tok0 = tiles[k] * kAttnTile, r = lane & 15;
        // (smaller pages: pages[k] is the page of this lane's token, r)
        const long long token_row = PS < kAttnTile ? (long long)pages[k] * PS + r % PS
                                                   : (long long)pages[k] * PS + tok0 % PS + r;
        const long long off = (token_row * HKV + kv_head) * (long long)D;
        prefetch_l2((lane < 16 ? k_cache : v_cache) + off, D * (int)sizeof(kf_bf16));
      }
    }
  }
#endif             // KF_USE_MMA
  grid_dep_wait(); // q and the newest token's K and V come from the kernel before
  if (!active)
    return; // (a block that exits releases the next kernel too)
  if (KF_ATTN_EARLY_RELEASE)
    grid_dep_launch(); // the next kernel may start its blocks as slots free

  const kf_bf16 *q_head0 = q + ((long long)row * HQ + (long long)kv_head * G) * D;
  kf_bf16 *out_head0 = out + ((long long)row * HQ + (long long)kv_head * G) * D;
  float *ws_pair = workspace + ((long long)row * HKV + kv_head) * SPLITS * kPartFloats;
  const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
#if KF_USE_MMA
  warp_softmax_mma<D, G> st;
  st.load_q(q_head0, lane);
  if (t_cur >= 0 && !cur_ready)
    load_kv_tile<D, HKV, PS>(cur, k_cache, v_cache, page_of(t_cur), kv_head, len, t_cur, lane);
  // Page numbers are read a tile ahead of the loads that need them.
  int page_next = page_of(t_next);
  bool peeled = false; // the first range's state holds its first two tiles
  if constexpr (kPeel) {
    if (peel) {
      // Both tiles are in registers: the third loads into `cur` while the
      // second is attended, and the loop goes on from the third.
      st.reset();
      const int t3 = after(t_next, first_range);
      const int page3 = page_of(t3);
      st.attend(cur, t_cur * kAttnTile, len, scale_log2, lane);
      if (t3 >= 0)
        load_kv_tile<D, HKV, PS>(cur, k_cache, v_cache, page3, kv_head, len, t3, lane);
      st.attend(nxt, t_next * kAttnTile, len, scale_log2, lane);
      t_cur = t3;
      t_next = t3 >= 0 ? after(t3, t3 / per_range) : -1;
      page_next = page_of(t_next);
      peeled = true;
    }
  }
#endif // KF_USE_MMA
  // Each range's warp states wait in a slot, `part` or one of those that fit
  // in `stage` (free until the final merge), and the block merges the
  // waiting ranges when the slots run out or its last range is done: one
  // barrier for up to kSlots ranges, not one per range.
  using part_t = attn_partials<G, D, NW>;
  constexpr int kSlotsFit = 1 + kStage * kRecBytes / (int)sizeof(part_t);
  // Named barriers 1..15; in a layer kernel, whose items two at a time
  // take barriers 14 and 15 for block_sync, 1..6 and 7..12 (the slots set
  // when the block merges, not what it computes: every range has its own
  // record either way).
  constexpr int kSlotsMax = KF_MONO ? 6 : 16;
  constexpr int kSlots = kSlotsFit < kSlotsMax ? kSlotsFit : kSlotsMax;
  [[maybe_unused]] const int bar0 = 1 + item_slot() * kSlotsMax;
  constexpr bool kSets = KF_ATTN_MERGE_SETS && G > 2;   // (see the knob)
  constexpr bool kGuard = KF_ATTN_BRANCHY_FLUSH == 2 || // (see the knob)
                          (KF_ATTN_BRANCHY_FLUSH == 1 && P::W == 2 && G > 2);
  constexpr int kMergeSets = !kSets ? 1 : kSlots < kRangesPerBlock ? kSlots : kRangesPerBlock;
  // Hand-off (named barriers, blocks of more than 2 ranges): warp j % NW
  // merges parked range j while the others stream on; they arrive at
  // barrier bar0 + j as they park it, and it syncs there once it has parked
  // the range after, so it seldom waits. The range that ends a flush is
  // merged by the whole block. Otherwise the block merges every parked
  // range at the flush, side by side (v15: with 2 ranges the hand-off only
  // makes the block wait for one warp's merge; merging the last two ranges
  // side by side at the flush instead cost 2% at 8K).
  constexpr bool kHandOff = KF_HAS_NAMED_BARRIERS && KF_ATTN_HAND_OFF && kRangesPerBlock > 2;
  // emit for merge_warps: range r's record
  auto record_of = [&](int r) {
    float *rec = ws_pair + (long long)r * kPartFloats;
    return [rec](int, int h, int d, float acc, float mx, float l) {
      rec[h * D + d] = acc;
      if (d == 0) {
        rec[G * D + h] = mx;
        rec[G * D + G + h] = l;
      }
    };
  };
  auto slot = [&](int j) -> part_t & {
    return j == 0 ? part : reinterpret_cast<part_t *>(stage)[j - 1];
  };
  int parked = 0;
  for (int i = 0; i < kRangesPerBlock; ++i) {
    const int s = first_range + i * range_step;
    if (s >= n_ranges)
      break;
#if KF_USE_MMA
    if (i > 0 || !peeled)
      st.reset();
    const int end_s = range_end(s);
    while (t_cur >= 0 && t_cur < end_s) {
      // t_next is in range s or the block's next one.
      const int t_after = t_next < 0                               ? -1
                          : kRangesPerBlock == 1 || t_next < end_s ? after(t_next, s)
                                                                   : after(t_next, s + range_step);
      const int page_after = page_of(t_after);
      if (kTwo && t_next >= 0 && !nxt_ready)
        load_kv_tile<D, HKV, PS>(nxt, k_cache, v_cache, page_next, kv_head, len, t_next, lane);
      st.attend(cur, t_cur * kAttnTile, len, scale_log2, lane);
      if (kTwo) {
        cur = nxt;
        nxt_ready = false;
      } else if (t_next >= 0) {
        load_kv_tile<D, HKV, PS>(cur, k_cache, v_cache, page_next, kv_head, len, t_next, lane);
      }
      t_cur = t_next;
      t_next = t_after;
      page_next = page_after;
    }
    nxt_ready = false; // (nxt holds nothing across the range's end)
    st.store(slot(parked), warp, lane);
#else
    attend_tiles_generic<D, G, HKV, PS, NW>(q_head0, k_cache, v_cache, page_row, kv_head, len,
                                            s * per_range + warp, range_end(s), NW, scale_log2,
                                            slot(parked), warp, lane);
#endif // KF_USE_MMA
    ++parked;
    const int j = parked - 1; // the slot this range filled
    const bool last_range = s + range_step >= n_ranges;
    const bool go_on = !last_range && parked < kSlots; // no block barrier yet
#if KF_HAS_NAMED_BARRIERS
    if constexpr (kHandOff) {
      if (go_on && warp != j % NW)
        bar_arrive(bar0 + j, kAttnThreads); // slot j is written; warp j % NW merges it
      // Warp (j - 1) % NW merges the range before, which its other warps
      // parked (and arrived at its barrier) a range ago.
      if (j >= 1 && warp == (j - 1) % NW) {
        bar_sync(bar0 + j - 1, kAttnThreads);
        merge_warps<G, D, NW, kWarpSize, 1, kSets, kGuard>(
            1, [&](int) -> part_t & { return slot(j - 1); }, record_of(s - range_step), lane);
      }
    }
#endif // KF_HAS_NAMED_BARRIERS
    if (go_on)
      continue; // the warps go on to the next range
    block_sync<kAttnThreads>();
    if (n_ranges == 1) {
      merge_warps<G, D, NW, kAttnThreads, 1, kSets, kGuard>(
          1, slot, [&](int, int h, int d, float acc, float, float l) {
            store_bf16(out_head0 + h * D + d, l > 0.f ? acc / l : 0.f);
          });
      return;
    }
    if constexpr (kHandOff) {
      merge_warps<G, D, NW, kAttnThreads, 1, kSets, kGuard>(
          1, [&](int) -> part_t & { return slot(j); }, record_of(s));
    } else {
      const int s0 = s - j * range_step; // the first parked range
      merge_warps<G, D, NW, kAttnThreads, kMergeSets, kSets, kGuard>(
          parked, slot, [&](int k, int h, int d, float acc, float mx, float l) {
            record_of(s0 + k * range_step)(k, h, d, acc, mx, l);
          });
    }
    parked = 0;
    if (!last_range)
      block_sync<kAttnThreads>(); // every thread is done with the slots before the warps refill
                                  // them
  }
  const int my_ranges = (n_ranges - first_range + range_step - 1) / range_step;
  if (!block_arrives_last<kAttnThreads>(semaphores, (long long)row * HKV + kv_head, n_ranges,
                                        my_ranges, is_last))
    return; // the block whose ranges arrive last merges them all

  // Merge the ranges in range order, a stage of kStage records at a time:
  // the block copies a stage's records (contiguous in workspace) into shared
  // memory with cp.async, every copy issued together, then merges from
  // there. Where the records past the first stage are few (at most 16
  // float4 per thread: 14 for 32 ranges of 4 heads), each thread loads its
  // share of them into registers while the first stage is in flight, so the
  // merge waits for one round trip to L2 instead of one per stage, and
  // merges them in the same order with the same arithmetic.
  auto copy_stage = [&](int s0, int nb) {
    const float *src = ws_pair + (long long)s0 * kPartFloats;
    for (int c = thread_idx(); c < nb * kPartFloats / 4; c += kAttnThreads)
      async_copy16(stage + 4 * c, src + 4 * c);
    async_commit();
  };
  // A stage of up to 20 records is merged unrolled (18 for 4 heads: 1.6-3.4%
  // faster at 8K tokens on the H200 than four at a time), a larger one four
  // records at a time (32 for 2 heads unrolled was 0.4-2% slower at 8K, and
  // 11% at 1K with one row: notes/perf/journal.md, v17).
  constexpr int kStageUnroll = kStage <= 20 ? kStage : 0;
  if (kStageUnroll > 0 && thread_idx() == 0)
    neg_inf = -INFINITY;                 // (read after the barrier that follows the copies)
  constexpr int kRest = SPLITS - kStage; // records past the first stage, at most
  merge_t all;
  if constexpr (kRest > 0 && kRest * merge_t::kEl <= 16) {
    const int nb = min(kStage, n_ranges), nr = n_ranges - nb;
    copy_stage(0, nb);
    float4 rest_o[kRest][merge_t::kEl];
    float rest_m[kRest][merge_t::kEl], rest_l[kRest][merge_t::kEl];
#pragma unroll
    for (int u = 0; u < kRest; ++u) {
#pragma unroll
      for (int q = 0; q < merge_t::kEl; ++q) {
        const int e = thread_idx() + q * kAttnThreads;
        rest_o[u][q] = make_float4(0.f, 0.f, 0.f, 0.f); // (u >= nr: weighs 0)
        rest_m[u][q] = -INFINITY;
        rest_l[u][q] = 0.f;
        if (u < nr && e < G * D / 4) {
          const int h = e / (D / 4), d = 4 * (e % (D / 4));
          const float *r = ws_pair + (long long)(kStage + u) * kPartFloats;
          rest_o[u][q] = load_coherent4(r + h * D + d);
          rest_m[u][q] = load_coherent(r + G * D + h);
          rest_l[u][q] = load_coherent(r + G * D + G + h);
        }
      }
    }
    async_wait<0>();
    block_sync<kAttnThreads>();
    all.template absorb<kStageUnroll>(stage, nb, &neg_inf);
    if (nr > 0)
      all.template absorb_from<kRest>(
          nr, [&](int u, int q, int) { return rest_m[u][q]; },
          [&](int u, int q, int) { return rest_l[u][q]; },
          [&](int u, int q, int, int) { return rest_o[u][q]; });
  } else {
    for (int s0 = 0; s0 < n_ranges; s0 += kStage) {
      const int nb = min(kStage, n_ranges - s0);
      copy_stage(s0, nb);
      async_wait<0>();
      block_sync<kAttnThreads>();
      all.template absorb<kStageUnroll>(stage, nb, &neg_inf);
      block_sync<kAttnThreads>(); // every thread is done with the stage before the next copy
    }
  }
  all.store_out(out_head0);
}

} // namespace kf

#endif // KF_DECODE_ATTENTION_CUH
