// skinny_gemm.cuh: y[R x N] = x[R x K] * W^T for decode widths R <= 8, W
// row-major [N x K] in bf16, fp32 accumulation (qkv_proj, o_proj, down_proj).
//
// Memory-bound: W is read once, in 16-byte pieces. One block (256 threads)
// owns 16 rows of W (or, split K, one slice of K of them: see
// skinny_gemm_block); each warp takes units of 64 k of all 16 rows (one
// 128-byte line per row), unit after unit, warp after warp, and streams them
// through its own cp.async ring in shared memory (2 units in flight; 4 from
// K = 8192), each copy instruction moving 4 whole lines; the unit's
// activations travel in the same ring. It runs m16n8k16 matrix instructions
// with W as A and the activations as B (one activation row per B column);
// the block sums the warps' partial tiles in warp order. None of that
// depends on R, the width or the other rows, so a row's output is bitwise
// the same alone, among others or padded (batch invariance); columns of pad
// rows are zero and never stored. Measured on the H200 (notes/perf/journal.md,
// v6): 87-91% of the read ceiling on the 8B gate_up and down shapes, 75-83%
// on qkv and o, where a plain read kernel of the same bytes per launch
// reaches 74-81%.
//
// skinny_gemm_block is the building block (any epilogue, several tiles per
// block, e.g. gate and up for gate_up_silu.cuh); skinny_gemm_entry is the
// thin entry for the schema in skinny_gemm.json.
#ifndef KF_SKINNY_GEMM_CUH
#define KF_SKINNY_GEMM_CUH

#include "kf_mma.cuh"
#include "kf_portability.cuh"
#include "kf_reduce.cuh"

namespace kf {

// Tuning knobs.
// KF_GEMM_STEPS_IN_FLIGHT: 32-k steps x tiles of weights a warp has in flight
//   (each is two 16-byte loads per lane) when K < kGemmLongK.
// KF_GEMM_STEPS_IN_FLIGHT_LONG: the same on the long path (from K =
//   kGemmLongK on, or with the schemas' DEEP_RING at any K), in a ring in
//   dynamic shared memory (gemm_dyn_smem_bytes, the schemas' shared_bytes). Measured on the H200
//   (notes/perf/journal.md, v3): 8 steps took down_proj (K = 14336, 56 steps per warp) from 50% to
//   62-64% of the read ceiling; for K = 4096 (16 steps per warp) they gained nothing.
// KF_GEMM_ASYNC: 1 streams weights through a per-lane shared-memory ring
//   filled by cp.async (the copies hold no registers, so the compiler cannot
//   trade them for fewer registers and serialise the loads, as it does with
//   plain loads: seen on sm_90a, about 55% of the bandwidth ceiling); 0 uses
//   plain register loads (warp_gemm_tiles).
#ifndef KF_GEMM_STEPS_IN_FLIGHT
#define KF_GEMM_STEPS_IN_FLIGHT 4
#endif // KF_GEMM_STEPS_IN_FLIGHT
#ifndef KF_GEMM_STEPS_IN_FLIGHT_LONG
#define KF_GEMM_STEPS_IN_FLIGHT_LONG 8
#endif // KF_GEMM_STEPS_IN_FLIGHT_LONG
#ifndef KF_GEMM_ASYNC
#define KF_GEMM_ASYNC 1
#endif // KF_GEMM_ASYNC
// KF_GEMM_LINES: 1 (with KF_GEMM_ASYNC) copies whole 128-byte lines of each
//   weight row (a warp instruction reads 4 rows x 128 bytes) into a swizzled
//   per-warp ring and builds the fragments from there; 0 copies each lane's
//   own fragment (a warp instruction reads 8 rows x 64 bytes: half lines).
//   Needs K to be a multiple of 64 * warps; other K take the fragment path.
#ifndef KF_GEMM_LINES
#define KF_GEMM_LINES 1
#endif // KF_GEMM_LINES
// KF_GEMM_CHUNK: consecutive 64-k units a warp takes before the next warp's
//   (line path). Measured on the H200 (notes/perf/journal.md, v6): with the
//   activation ring, 1 beat 2 on every 8B shape by 1-4 points of the ceiling
//   (without it the two were mixed: the activation loads dominated).
#ifndef KF_GEMM_CHUNK
#define KF_GEMM_CHUNK 1
#endif // KF_GEMM_CHUNK
// KF_GEMM_EARLY_RELEASE_BYTES: blocks whose weights are at most this many
//   bytes release the next kernel (grid_dep_launch) at their start instead of
//   after their main loop: the 8B qkv and o blocks (128 KB) and every Qwen3-0.6B
//   one. It pays only with the schemas' launch.one_wave, which keeps a
//   one-wave grid at its own blocks per SM: uncapped, the next launch's
//   blocks took the spare slots early and unbalanced it (v6: 8B qkv / o back
//   to back 8-16 points lower); capped, 8B qkv went from 84 to 88-90% of the
//   ceiling and o from 78 to 81-83% (notes/perf/journal.md, v7).
#ifndef KF_GEMM_EARLY_RELEASE_BYTES
#define KF_GEMM_EARLY_RELEASE_BYTES 131072
#endif // KF_GEMM_EARLY_RELEASE_BYTES
// KF_GEMM_X_RING: 1 (line path) copies each unit's activations (W rows x 64
//   k) with cp.async into a per-warp ring beside the weights', issued as many
//   units ahead; 0 loads them from global memory when the unit starts.
//   Measured on the H200 (notes/perf/journal.md, v6): with the weight stream
//   saturating the memory system an L2 hit waits about as long as a DRAM
//   read, and a build without the activation loads ran down_proj at 90%
//   instead of 77% of the ceiling.
#ifndef KF_GEMM_X_RING
#define KF_GEMM_X_RING 1
#endif // KF_GEMM_X_RING
// KF_GEMM_ROTATE: 1 starts each block's sweep over K at a different unit (a
//   function of blockIdx.x alone), so that the blocks of a launch do not all
//   ask L2 for the same activation lines at the same moment; 0 starts all at
//   k = 0; unset (the default), gemm_rotate decides (line path only).

constexpr int kGemmThreads = 256; // == launch.block[0] of skinny_gemm.json, gate_up_silu.json
constexpr int kGemmTileRows = 16; // weight rows per tile
// From K = KF_GEMM_LONG_K on, or with DEEP_RING, the long path:
// KF_GEMM_STEPS_IN_FLIGHT_LONG in dynamic shared memory; the schemas'
// shared_bytes spell the same rule.
#ifndef KF_GEMM_LONG_K
#define KF_GEMM_LONG_K 8192
#endif // KF_GEMM_LONG_K
constexpr int kGemmLongK = KF_GEMM_LONG_K;

// Whether a sweep of K takes the long path (deep: the schemas' DEEP_RING).
__host__ __device__ constexpr bool gemm_long(int K, bool deep) { return deep || K >= kGemmLongK; }
// Whether blocks rotate their start in K (KF_GEMM_ROTATE): where the
// activation rows are a multiple of 8 KB apart, which is when the rows of x
// map alike in L2 (a guess the data fits, not a measured fact). Measured on
// the H200: rotation took Qwen3-8B's down_proj (K = 12288) at R = 8 from 57%
// to 75% of the read ceiling (notes/perf/journal.md, v5) and, with the one-wave
// cap, the K = 4096 shapes of the 8B models up by 1-3 points (v8), but cost
// Llama's down_proj (K = 14336, rows 28 KB apart) 4 points (v5).
// LD: elements from one activation row to the next. A function of the
// kernel's parameters alone, never of W: the rotation orders each warp's sum.
__host__ __device__ constexpr bool gemm_rotate(int LD) {
#ifdef KF_GEMM_ROTATE
  return KF_GEMM_ROTATE != 0 && LD > 0;
#else
  return (LD * 2) % 8192 == 0;
#endif // KF_GEMM_ROTATE
}

// Line-path slots (units of 2 KB) a warp keeps in flight (lng: the long path).
// long_slots > 0: the long path keeps that many instead, in a smaller ring
// (gemm_long_slots_within); the short path ignores it.
__host__ __device__ constexpr int gemm_line_slots(bool lng, int long_slots = 0) {
  return lng && long_slots > 0 ? long_slots
                               : (lng ? KF_GEMM_STEPS_IN_FLIGHT_LONG : KF_GEMM_STEPS_IN_FLIGHT) / 2;
}

// The activation ring (KF_GEMM_X_RING): per warp, one W x 128-byte slot per
// weight slot.
__host__ __device__ constexpr int gemm_x_ring_bytes(bool lng, int W, int long_slots = 0) {
  return KF_GEMM_X_RING ? kGemmThreads / 32 * gemm_line_slots(lng, long_slots) * W * 128 : 0;
}

// The long path's weight ring: 64 KB, or with long_slots > 0 every warp's
// long_slots slots of 16 rows x 128 bytes (16 KB a slot for the block).
__host__ __device__ constexpr int gemm_long_ring_bytes(int long_slots = 0) {
  return long_slots > 0 ? kGemmThreads / 32 * long_slots * 2048 : 65536;
}

// The long path's slots per warp when a block may ask for at most cap bytes
// of dynamic shared memory (moe_down.json's SMEM_CAP; 0: no cap, which
// returns 0, the default ring): the most, up to the default 4, whose weight
// ring (16 KB a slot) and activation ring (W x 1 KB a slot) fit in cap, and
// never fewer than 2 (one slot read while the next is in flight), whatever
// the cap. With sm_90's 228 KB an SM (~1 KB reserved a block), a cap of 72 KB
// keeps 4 slots at widths 1-2 and takes 3 at widths 4 and 8 (60 and 72 KB):
// three blocks an SM at every width instead of two from width 4.
__host__ __device__ constexpr int gemm_long_slots_within(int cap, int W) {
  const int per_slot = gemm_long_ring_bytes(1) + gemm_x_ring_bytes(true, W, 1);
  const int fit = cap / per_slot;
  return cap <= 0 ? 0 : fit > 4 ? 4 : fit < 2 ? 2 : fit;
}

// Dynamic shared memory of one block at width W, as launch.shared_bytes of
// skinny_gemm.json and gate_up_silu.json spells it (mma: the matrix-
// instruction path, KF_USE_MMA, the schemas' MMA; lng: the long path;
// long_slots: as gemm_line_slots'; moe_down.json spells the sizes it gives
// with its SMEM_CAP). The portable path uses none. On the short path the
// weight ring is static and only the activation ring is dynamic; on the long
// path the weight ring (64 KB by default) comes first (the warps' partial
// tiles reuse it), then the activation ring.
__host__ __device__ constexpr int gemm_dyn_smem_bytes(bool mma, bool lng, int W,
                                                      int long_slots = 0) {
  return mma ? gemm_long_ring_bytes(long_slots) * lng + gemm_x_ring_bytes(lng, W, long_slots) : 0;
}

// A layer kernel's dynamic shared memory for a projection phase: the
// dynamic part, then room for the short path's partial tiles and static
// ring (the schemas' launch.layer_shared_bytes spell the same).
constexpr int kGemmLayerRedBytes = 8192;
constexpr int kGemmLayerRingBytes = 32768;
__host__ __device__ constexpr int gemm_layer_smem_bytes(bool mma, bool lng, int W,
                                                        int long_slots = 0) {
  return mma ? gemm_dyn_smem_bytes(true, lng, W, long_slots) + kGemmLayerRedBytes +
                   kGemmLayerRingBytes
             : 0;
}

#if KF_USE_MMA
// Warp building block (cp.async ring): the warp's share of NT 16-row tiles
// times x over all of K. The block's 32-k steps are dealt to warps in chunks
// of C consecutive steps, warp after warp (so that at any time the block
// reads one contiguous span of C * warps * 64 bytes from each weight row,
// good for DRAM pages), and each warp keeps P steps in flight through its
// lanes' private slots of `ring` (P * NT * 2 * THREADS vectors). A warp sums
// its steps in its fixed order: the result does not depend on W or rows.
// XAHEAD: the activations of step j + 1 are loaded during step j (used from
// kGemmLongK on: down_proj at R = 8 has 229 KB of x, more than L1 keeps).
// K: the k swept (from w and x as given); LD: the row stride of w and x.
template <int K, int LD, int NT, int P, int NW, int THREADS, int W, bool XAHEAD = false,
          bool SPLIT = false>
KF_DEVICE void warp_gemm_tiles_async(float acc[NT][4], const kf_bf16 *w, const long long (&lo)[NT],
                                     const long long (&hi)[NT], const kf_bf16 *x, int rows,
                                     vec8 *ring, int warp, int lane) {
  constexpr int S = K / 32; // steps in all of K
  constexpr int n = S / NW; // steps per warp
  constexpr int C = S % (NW * 4) == 0 ? 4 : 1;
  static_assert(S % NW == 0, "K must be a multiple of 32 * warps");
  const int tid = warp * 32 + lane;
  const int g = lane >> 2, t = lane & 3;
  const kf_bf16 *wl[NT][2];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    wl[i][0] = w + lo[i] + (long long)g * LD + 8 * t;
    wl[i][1] = SPLIT ? w + hi[i] + (long long)g * LD + 8 * t : wl[i][0] + 8LL * LD;
  }
  auto kstep = [&](int j) { return ((j / C) * NW + warp) * C + (j % C); };
  auto issue = [&](int j) {
    if (j < n) {
      const int k = kstep(j) * 32;
      vec8 *slot = ring + (j % P) * NT * 2 * THREADS + tid;
#pragma unroll
      for (int i = 0; i < NT; ++i) {
        async_copy16(slot + (2 * i) * THREADS, wl[i][0] + k);
        async_copy16(slot + (2 * i + 1) * THREADS, wl[i][1] + k);
      }
    }
    async_commit(); // an empty group past the end keeps the wait count uniform
  };
#pragma unroll
  for (int j = 0; j < P; ++j)
    issue(j);
  grid_dep_wait(); // the weights are constant: only x waits for the previous kernel
  vec8 xnext;
  if constexpr (XAHEAD)
    xnext = load_x8<W>(x, LD, kstep(0) * 32, lane, rows);
  for (int j = 0; j < n; ++j) {
    vec8 xv;
    if constexpr (XAHEAD) {
      xv = xnext;
      xnext = load_x8<W>(x, LD, kstep(j + 1 < n ? j + 1 : j) * 32, lane, rows);
    } else {
      xv = load_x8<W>(x, LD, kstep(j) * 32, lane, rows);
    }
    async_wait<P - 1>(); // step j's group has landed
    const vec8 *slot = ring + (j % P) * NT * 2 * THREADS + tid;
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      wtile16 wt;
      wt.lo = slot[(2 * i) * THREADS];
      wt.hi = slot[(2 * i + 1) * THREADS];
      mma_k32(acc[i], wt, xv);
    }
    issue(j + P); // refills the slot just read (its values are consumed above)
  }
  async_wait<0>();
}

// Warp building block (line ring): as warp_gemm_tiles_async, but the unit of
// work is 64 k (one 128-byte line of each of the 16 rows of a tile) and the
// copies are row-contiguous: copy instruction q of a slot moves rows 4q..4q+3,
// eight lanes per row, so every request is a whole line. A slot is one tile's
// 16 rows x 128 bytes (2 KB); slots go tile after tile, unit after unit, and
// the ring keeps P of them in flight. In the slot, the 16-byte chunk c of row
// r sits at r * 8 + (c ^ 4 * (r & 1)): the copies (8 lanes, one row) and the
// fragment reads (lanes 4g + t read chunk 4h + t of rows g and g + 8) are both
// free of bank conflicts. A warp sums its units in a fixed order, so the
// result does not depend on W or rows. K and LD as in warp_gemm_tiles_async.
//
// With KF_GEMM_X_RING the activations of a unit (its W rows x 128 bytes,
// real rows only) travel in the slot group of the unit's first tile, into
// xring (P slots of W * 8 vectors per warp, swizzled like the weights), so
// that they are in flight as long as the weights; those of the first P slots
// are copied after grid_dep_wait, in P groups of their own, which keeps
// async_wait<P - 1> right for every slot.
//
// LATE (with the activation ring): the last LATE of the first P slots are
// copied after grid_dep_wait instead of ahead of it, each behind its unit's
// activations, in the same groups (the wait count is unchanged). The first
// unit's activations then do not queue behind every weight the warp asked for
// ahead of the wait: on the H200 that first round trip, which holds up the
// ring's refills, cost Llama's o_proj 0.05 us at R = 1 and 0.45 us at R = 8
// (notes/perf/journal.md v12). The schemas' LATE_SLOTS.
//
// ROT_AT: the sweep's rotation is a function of rot_at instead of
// blockIdx.x (the MoE kinds give the tile's index within its expert, since
// their block index depends on the other rows' choices).
template <int K, int LD, int NT, int P, int NW, int W, bool LONG, bool SPLIT = false, int LATE = 0,
          bool ROT_AT = false>
KF_DEVICE void warp_gemm_tiles_lines(float acc[NT][4], const kf_bf16 *w, const long long (&lo)[NT],
                                     const long long (&hi)[NT], const kf_bf16 *x, int rows,
                                     vec8 *ring, vec8 *xring, int warp, int lane, int rot_at) {
  constexpr int S = K / 64; // units in all of K
  constexpr int n = S / NW; // units per warp
  constexpr int C = S % (NW * KF_GEMM_CHUNK) == 0 ? KF_GEMM_CHUNK : 1;
  constexpr int kSlot = 16 * 8; // vec8 per slot
  static_assert(S % NW == 0, "K must be a multiple of 64 * warps");
  const int g = lane >> 2, t = lane & 3;
  const int crow = lane >> 3, cchunk = lane & 7; // this lane's copies: row 4q + crow
  vec8 *wring = ring + warp * P * kSlot;
  constexpr int kXSlot = W * 8; // vec8 per activation slot
  vec8 *xr = xring + warp * P * kXSlot;
  const kf_bf16 *src[NT][2]; // rows 0..7, rows 8..15 of tile i
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    src[i][0] = w + lo[i] + (long long)crow * LD + 8 * cchunk;
    src[i][1] = w + hi[i] + (long long)crow * LD + 8 * cchunk;
  }
  const int rot = gemm_rotate(LD) ? (int)((ROT_AT ? rot_at : block_idx_x()) % (n / C)) * C : 0;
  auto kunit = [&](int j) {
    j += rot;
    j -= j >= n ? n : 0;
    return ((j / C) * NW + warp) * C + (j % C);
  };
  // The activations of unit u (s % NT == 0 for its first slot s): rows
  // 4q + crow < min(W, rows), one line each.
  auto issue_x = [&](int s) {
    if (KF_GEMM_X_RING && s < n * NT && s % NT == 0) {
      const int k = kunit(s / NT) * 64;
      vec8 *slot = xr + (s / NT % P) * kXSlot;
#pragma unroll
      for (int q = 0; q < (W + 3) / 4; ++q) {
        const int r = 4 * q + crow;
        if (r < W && r < rows)
          async_copy16(slot + r * 8 + (cchunk ^ ((r & 1) << 2)),
                       x + (long long)r * LD + k + 8 * cchunk);
      }
    }
  };
  auto issue = [&](int s) { // slot s of this warp's sequence: unit s / NT, tile s % NT
    if (s < n * NT) {
      const int k = kunit(s / NT) * 64;
      const int i = s % NT;
      const kf_bf16 *p0 = src[0][0], *p1 = src[0][1];
#pragma unroll
      for (int q = 1; q < NT; ++q) { // no run-time array index
        p0 = i == q ? src[q][0] : p0;
        p1 = i == q ? src[q][1] : p1;
      }
      vec8 *slot = wring + (s % P) * kSlot;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = 4 * q + crow;
        const kf_bf16 *from = SPLIT ? (q < 2 ? p0 : p1) + 4LL * (q & 1) * LD : p0 + 4LL * q * LD;
        async_copy16(slot + r * 8 + (cchunk ^ ((r & 1) << 2)), from + k);
      }
    }
  };
  static_assert(LATE >= 0 && LATE < P, "LATE: fewer than the ring's slots");
  constexpr int PRE = KF_GEMM_X_RING ? P - LATE : P; // slots copied ahead of the wait
#pragma unroll
  for (int s = 0; s < PRE; ++s) {
    issue(s);
    async_commit();
  }
  grid_dep_wait(); // the weights are constant: only x waits for the previous kernel
  if constexpr (KF_GEMM_X_RING) {
#pragma unroll
    for (int s = 0; s < P; ++s) {
      issue_x(s);
      if (s >= PRE)
        issue(s);
      async_commit(); // one group per slot, empty or not: the wait count stays uniform
    }
  }
  const int sw = (g & 1) << 2;
  const bool xreal = g < W && g < rows; // pad and missing rows read zeros
  auto unit = [&](int j) {
    vec8 x0, x1;
    if constexpr (!KF_GEMM_X_RING) {
      const int k = kunit(j) * 64;
      x0 = load_x8<W>(x, LD, k, lane, rows);
      x1 = load_x8<W>(x, LD, k + 32, lane, rows);
    }
#pragma unroll
    for (int i = 0; i < NT; ++i) {
      const int s = j * NT + i;
      async_wait<P - 1>(); // slot s has landed (this lane's copies)
      warp_sync();         // ... and the other lanes'
      if (KF_GEMM_X_RING && i == 0) {
        const vec8 *xs = xr + (j % P) * kXSlot + (xreal ? g : 0) * 8;
        x0 = xreal ? xs[t ^ sw] : zero_vec();
        x1 = xreal ? xs[(4 + t) ^ sw] : zero_vec();
      }
      const vec8 *slot = wring + (s % P) * kSlot;
      wtile16 wt;
      wt.lo = slot[g * 8 + (t ^ sw)];
      wt.hi = slot[(g + 8) * 8 + (t ^ sw)];
      mma_k32(acc[i], wt, x0);
      wt.lo = slot[g * 8 + ((4 + t) ^ sw)];
      wt.hi = slot[(g + 8) * 8 + ((4 + t) ^ sw)];
      mma_k32(acc[i], wt, x1);
      warp_sync(); // every lane has read slot s before it is refilled
      issue(s + P);
      issue_x(s + P);
      async_commit(); // an empty group past the end keeps the wait count uniform
    }
  };
  if constexpr (LONG) {
    // Rolled: unrolled, ptxas spilled 4 bytes at 40 registers (sm_100a
    // down_proj, W = 8); the short-K loops keep the compiler's unrolling
    // (rolled cost them 1-8 points on the H200, notes/perf/journal.md v5).
#pragma unroll 1
    for (int j = 0; j < n; ++j)
      unit(j);
  } else {
    for (int j = 0; j < n; ++j)
      unit(j);
  }
  async_wait<0>();
}
#endif // KF_USE_MMA

// Block building block: NT tiles of 16 weight rows (tile i is the 16 x K
// row-major matrix at w + tile_off[i]) times the first `rows` rows of x
// [W x K]. Calls epi(wrow, xrow, v) once for each weight row wrow (0..15) and
// real activation row xrow (< rows), v[i] the fp32 dot product for tile i.
//
// KSPLIT > 1 (split K): the KSPLIT consecutive blocks along x that make one
// cluster (KSPLIT x 1 x 1) share the tiles. Block r sums slice r of K (k in
// [r K / KSPLIT, (r + 1) K / KSPLIT)); the partial tiles meet in block 0 in
// rank order, through distributed shared memory, and block 0 alone calls
// epi. The order is fixed, so batch invariance holds as for KSPLIT = 1. For
// tiles too few to fill the GPU: Qwen3-0.6B's o_proj and down_proj have 64.
// Without clusters block 0 sums the slices one after the other and the other
// blocks exit.
//
// DEEP: the long path (gemm_long) at any K: twice the weights in flight per
// warp, from a 64 KB ring in dynamic shared memory (the schemas' DEEP_RING;
// LONG_SLOTS below may make it smaller).
// LATE: weight slots copied after the first activations (warp_gemm_tiles_lines;
// the schemas' LATE_SLOTS).
//
// ROT_AT: the index the sweep's starting unit is a function of
// (gemm_rotate) is rot_at, not blockIdx.x: a row's sums depend on it, so a
// caller whose block index depends on anything but the tile passes the
// tile's own index.
//
// LONG_SLOTS: 0, or the slots per warp of the long path's weight ring
// (gemm_line_slots; the fragment path keeps twice as many 32-k steps), in
// LONG_SLOTS x 16 KB instead of 64 KB, the activation ring shrinking with
// it: fewer bytes in flight a block, more blocks an SM (moe_down.json's
// SMEM_CAP, through gemm_long_slots_within). A warp sums its units in the
// same order whatever the ring's size: the sums do not depend on it.
template <int K, int NTI, int W, int THREADS, bool HALVES = false, int KSPLIT = 1,
          bool DEEP = false, int LATE = 0, bool ROT_AT = false, int LONG_SLOTS = 0, class Epi>
KF_DEVICE void skinny_gemm_block(const kf_bf16 *x, const kf_bf16 *w,
                                 const long long (&tile_off)[NTI], int rows, Epi epi,
                                 [[maybe_unused]] int rot_at = 0) {
  static_assert(W >= 1 && W <= 8, "skinny_gemm serves widths 1..8");
  static_assert(K % 8 == 0, "K must be a multiple of 8");
  static_assert(!HALVES || NTI == 2, "halves: two 8-row halves of one 16-row tile");
  static_assert(KSPLIT == 1 || KSPLIT == 2 || KSPLIT == 4 || KSPLIT == 8,
                "KSPLIT: 1, 2, 4 or 8 blocks per cluster");
  static_assert(K % (8 * KSPLIT) == 0, "K must be a multiple of 8 * KSPLIT");
  constexpr int KL = K / KSPLIT; // one slice of K
  constexpr bool kCluster = KSPLIT > 1 && KF_HAS_CLUSTERS && !KF_MONO;
  // In a layer kernel the slices' blocks are work items that need not run
  // at once: they meet through global memory instead (layer::split_*), in
  // the same rank order as a cluster's, so the sums are the cluster's bits.
  // Without clusters (AMD, sm_80) a layer kernel sums as the separate
  // kernel does there (block 0 alone), so its bits are that kernel's.
  constexpr bool kGlobalSplit = KSPLIT > 1 && KF_MONO && KF_HAS_CLUSTERS;
  // The matrix-instruction path hands its sums to the epilogue straight
  // from the warps' partial tiles, unless a cluster's blocks share them.
  constexpr bool kDirect = KF_USE_MMA && !kCluster && !kGlobalSplit;
  // HALVES: each half is an 8-row tile to the epilogue (v[0] row wrow, v[1]
  // row 8 + wrow of the matrix tile).
  constexpr int kOutRows = HALVES ? kGemmTileRows / 2 : kGemmTileRows;
  const int rank = KSPLIT > 1 ? cluster_rank_x(KSPLIT) : 0;
  if (KSPLIT > 1 && !kCluster && !kGlobalSplit && rank != 0) {
    grid_dep_wait(); // a block exits only after the previous kernel has
    return;
  }
  const int slice0 = kCluster || kGlobalSplit ? rank : 0;
  const int slice1 = kCluster || kGlobalSplit ? rank + 1 : KSPLIT;
  constexpr bool kEarly = (long long)KL * kGemmTileRows * NTI * 2 <= KF_GEMM_EARLY_RELEASE_BYTES;
  if (kEarly)
    grid_dep_launch();
  // The matrix tiles: NTI of 16 rows, or (HALVES) one made of rows 0..7 at
  // tile_off[0] and rows 0..7 at tile_off[1]. lo / hi: where a tile's rows
  // 0..7 / 8..15 start.
  constexpr int NT = HALVES ? 1 : NTI;
  long long lo[NT], hi[NT];
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    lo[i] = tile_off[i];
    hi[i] = HALVES ? tile_off[NTI - 1] : tile_off[i] + 8LL * K;
  }
  __shared__ float res[NT][kGemmTileRows][8];
#if !(KF_USE_MMA && KF_GEMM_ASYNC)
  grid_dep_wait(); // the register-load and portable paths fetch nothing ahead
#endif
  const int tid = (int)threadIdx.x;
  // The thread of each real output (weight row wrow, activation row xrow)
  // hands it to the epilogue; value(wrow, xrow, i) is tile i's sum.
  [[maybe_unused]] auto emit_outputs = [&](auto value) {
    if (tid < kOutRows * 8) {
      const int wrow = tid % kOutRows, xrow = tid / kOutRows;
      if (xrow < W && xrow < rows) {
        float v[NTI];
#pragma unroll
        for (int i = 0; i < NTI; ++i)
          v[i] = value(wrow, xrow, i);
        epi(wrow, xrow, v);
      }
    }
  };
  const int lane = lane_id(), warp = warp_id();
#if KF_USE_MMA
  constexpr int kWarps = THREADS / 32;
  // The warps sweep the first KM of each slice (a multiple of 32 * warps);
  // the tail past it, KT < 32 * warps, is one 32-k step each for its first
  // KT / 32 warps, after their sweep (gemm_tail). GLM-4.5's 1408 and 10944
  // have tails; the shipped models' K have none.
  static_assert(KL % 32 == 0, "K / KSPLIT must be a multiple of 32");
  constexpr int KM = KL / (32 * kWarps) * (32 * kWarps), KT = KL - KM;
  static_assert(KM > 0, "K / KSPLIT must be at least 32 * warps per block");
  constexpr bool kLong = gemm_long(KL, DEEP);
  static_assert(LONG_SLOTS >= 0, "LONG_SLOTS: 0 (the default ring) or the slots a warp keeps");
  constexpr int kInFlightLong = LONG_SLOTS ? 2 * LONG_SLOTS : KF_GEMM_STEPS_IN_FLIGHT_LONG;
  constexpr int kInFlight = kLong ? kInFlightLong : KF_GEMM_STEPS_IN_FLIGHT;
  constexpr int kUnroll = kInFlight / NT > 0 ? kInFlight / NT : 1;
  // The line ring holds the same bytes as the fragment ring: slots of 2 KB
  // per warp, half as many as 1 KB fragment steps.
  constexpr bool kLines = KF_GEMM_LINES && KF_GEMM_ASYNC && KM % (64 * kWarps) == 0;
  constexpr int kLineSlots = gemm_line_slots(kLong, LONG_SLOTS); // also sizes the activation ring
  [[maybe_unused]] constexpr int kSteps = KM / 32 / kWarps;      // register path (KF_GEMM_ASYNC 0)
  float acc[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i)
    acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  // The tail's step for this warp (none past KT / 32) into acc, in the same
  // order whatever W and rows are.
  auto gemm_tail = [&](const kf_bf16 *ws, const kf_bf16 *xs) {
    if constexpr (KT > 0)
      warp_gemm_tiles<NT, 1, W>(acc, ws, lo, hi, K, xs, K, rows, KM + 32 * warp,
                                warp < KT / 32 ? 1 : 0, lane);
  };
  float(*red)[NT][128];
  // launch.shared_bytes == kDynBytes; a launch with less would write past it
  constexpr int kDynBytes = gemm_dyn_smem_bytes(true, kLong, W, LONG_SLOTS);
  constexpr int kRingBytes = gemm_long_ring_bytes(LONG_SLOTS); // the long path's weight ring
  KF_DYNAMIC_SMEM(kf_gemm_smem);
  if (dynamic_smem_bytes() < (unsigned)kDynBytes)
    trap();
  // The activation ring, after the long path's weight ring.
  constexpr int kXRingAt = kLong ? kRingBytes : 0;
  vec8 *xring = reinterpret_cast<vec8 *>(kf_gemm_smem + kXRingAt);
  static_assert(kXRingAt + gemm_x_ring_bytes(kLong, W, LONG_SLOTS) <= kDynBytes,
                "activation ring exceeds shared_bytes");
#if KF_MONO
  // In a layer kernel the short path's static ring and partial tiles follow
  // the dynamic part (gemm_layer_smem_bytes), reused by the other phases.
  constexpr int kStaticAt = kDynBytes;
  if (dynamic_smem_bytes() < (unsigned)gemm_layer_smem_bytes(true, kLong, W, LONG_SLOTS))
    trap();
#endif // KF_MONO
  if constexpr (kLong) {
    // The weight ring lives in dynamic shared memory; once every copy has
    // landed, the warps' partial tiles reuse it.
    static_assert(kUnroll * NT * 2 * THREADS * 16 <= kRingBytes, "ring exceeds shared_bytes");
    static_assert(kWarps * NT * 128 * 4 <= kRingBytes, "reduction exceeds shared_bytes");
    for (int sl = slice0; sl < slice1; ++sl) {
      const kf_bf16 *ws = w + (long long)sl * KL, *xs = x + (long long)sl * KL;
#if KF_GEMM_ASYNC
      vec8 *ring = reinterpret_cast<vec8 *>(kf_gemm_smem);
      if constexpr (kLines) {
        static_assert(kWarps * kLineSlots * 128 * 16 <= kRingBytes,
                      "line ring exceeds shared_bytes");
        warp_gemm_tiles_lines<KM, K, NT, kLineSlots, kWarps, W, kLong, HALVES, LATE, ROT_AT>(
            acc, ws, lo, hi, xs, rows, ring, xring, warp, lane, rot_at);
      } else {
        warp_gemm_tiles_async<KM, K, NT, kUnroll, kWarps, THREADS, W, true, HALVES>(
            acc, ws, lo, hi, xs, rows, ring, warp, lane);
      }
#else
      warp_gemm_tiles<NT, kUnroll, W>(acc, ws, lo, hi, K, xs, K, rows, warp * kSteps * 32, kSteps,
                                      lane);
#endif // KF_GEMM_ASYNC
      gemm_tail(ws, xs);
    }
    __syncthreads(); // every warp is done with the ring before it is reused
    red = reinterpret_cast<float(*)[NT][128]>(kf_gemm_smem);
  } else {
#if KF_MONO
    static_assert(kWarps * NT * 128 * 4 <= kGemmLayerRedBytes, "partials exceed the layer's room");
    auto red_short = reinterpret_cast<float(*)[NT][128]>(kf_gemm_smem + kStaticAt);
#else
    __shared__ float red_short[kWarps][NT][128];
#endif // KF_MONO
    for (int sl = slice0; sl < slice1; ++sl) {
      const kf_bf16 *ws = w + (long long)sl * KL, *xs = x + (long long)sl * KL;
#if KF_GEMM_ASYNC
      if constexpr (kLines) {
#if KF_MONO
        static_assert(kWarps * kLineSlots * 128 * 16 <= kGemmLayerRingBytes, "ring exceeds room");
        vec8 *ring = reinterpret_cast<vec8 *>(kf_gemm_smem + kStaticAt + kGemmLayerRedBytes);
#else
        __shared__ vec8 ring[kWarps * kLineSlots * 128];
#endif // KF_MONO
        warp_gemm_tiles_lines<KM, K, NT, kLineSlots, kWarps, W, kLong, HALVES, LATE, ROT_AT>(
            acc, ws, lo, hi, xs, rows, ring, xring, warp, lane, rot_at);
      } else {
#if KF_MONO
        static_assert(kUnroll * NT * 2 * THREADS * 16 <= kGemmLayerRingBytes, "ring exceeds room");
        vec8 *ring = reinterpret_cast<vec8 *>(kf_gemm_smem + kStaticAt + kGemmLayerRedBytes);
#else
        __shared__ vec8 ring[kUnroll * NT * 2 * THREADS];
#endif // KF_MONO
        warp_gemm_tiles_async<KM, K, NT, kUnroll, kWarps, THREADS, W, false, HALVES>(
            acc, ws, lo, hi, xs, rows, ring, warp, lane);
      }
#else
      warp_gemm_tiles<NT, kUnroll, W>(acc, ws, lo, hi, K, xs, K, rows, warp * kSteps * 32, kSteps,
                                      lane);
#endif // KF_GEMM_ASYNC
      gemm_tail(ws, xs);
    }
    red = red_short;
  }
  if (!kEarly)
    grid_dep_launch(); // the weights are read: the next kernel may start its blocks
#pragma unroll
  for (int i = 0; i < NT; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      red[warp][i][lane * 4 + j] = acc[i][j];
  }
  __syncthreads();
  if constexpr (kDirect) {
    // The whole tile is this block's: the thread of each output sums the
    // warps' partials for it in warp order and hands it to the epilogue
    // (threads of missing rows sum nothing), one block barrier fewer than
    // the path through res below.
    emit_outputs([&](int wrow, int xrow, int i) {
      const int t = HALVES ? 0 : i, idx = acc_index(HALVES ? wrow + 8 * i : wrow, xrow);
      float s = red[0][t][idx];
#pragma unroll
      for (int u = 1; u < kWarps; ++u)
        s += red[u][t][idx];
      return s;
    });
  } else {
    for (int e = tid; e < NT * 128; e += THREADS) {
      const int i = e / 128, idx = e % 128;
      float s = red[0][i][idx];
#pragma unroll
      for (int v = 1; v < kWarps; ++v)
        s += red[v][i][idx];
      res[i][acc_wrow(idx >> 2, idx & 3)][acc_xrow(idx >> 2, idx & 3)] = s;
    }
  }
#else
  // Portable path: one warp per weight row, lanes stride over K in 16-byte
  // chunks, one fixed butterfly per activation row.
  constexpr int kWarps = THREADS / kWarpSize;
  for (int p = warp; p < NT * kGemmTileRows; p += kWarps) {
    const int i = p / kGemmTileRows, m = p % kGemmTileRows;
    long long off = m < 8 ? lo[0] : hi[0];
#pragma unroll
    for (int q = 1; q < NT; ++q)
      off = i == q ? (m < 8 ? lo[q] : hi[q]) : off; // no run-time array index
    const kf_bf16 *wr = w + off + (long long)(m & 7) * K;
    float acc[W];
#pragma unroll
    for (int r = 0; r < W; ++r)
      acc[r] = 0.f;
    for (int c = slice0 * (KL / 8) + lane; c < slice1 * (KL / 8); c += kWarpSize) {
      float wf[8];
      unpack8(load_stream(wr + c * 8), wf);
#pragma unroll
      for (int r = 0; r < W; ++r) {
        if (r < rows) {
          float xf[8];
          unpack8(load_vec(x + (long long)r * K + c * 8), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e)
            acc[r] = fmaf(wf[e], xf[e], acc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < W; ++r) {
      const float s = warp_sum(acc[r]);
      if (lane == 0)
        res[i][m][r] = s;
    }
  }
#endif // KF_USE_MMA
  if constexpr (!kDirect) {
    __syncthreads();
    if constexpr (kCluster) {
      // Split K: the slices' partial tiles meet in block 0, in rank order.
      cluster_sync(); // every block's res is written
      if (rank == 0) {
        float *mine = &res[0][0][0];
        for (int e = tid; e < NT * kGemmTileRows * 8; e += THREADS) {
          float s = mine[e];
          for (int q = 1; q < KSPLIT; ++q)
            s += cluster_shared(mine, q)[e];
          mine[e] = s;
        }
      }
      cluster_sync(); // block 0 is done with the others' res (they may exit)
      if (rank != 0)
        return;
    }
#if KF_MONO
    if constexpr (kGlobalSplit) {
      // Ranks 1.. leave their partial tiles in the layer's split scratch and
      // count themselves on the tile's counter; rank 0 waits for them and
      // sums in rank order, as the cluster path does.
      constexpr int kTileFloats = NT * kGemmTileRows * 8;
      static_assert(kTileFloats * 4 <= layer::kSplitRecordBytes, "split record too small");
      const int tile = block_idx_x() / KSPLIT;
      float *mine = &res[0][0][0];
      if (rank != 0) {
        float *rec = layer::split_record(tile, KSPLIT, rank);
        for (int e = tid; e < kTileFloats; e += THREADS)
          rec[e] = mine[e];
        layer::split_arrive(tile);
        return;
      }
      layer::split_wait(tile, KSPLIT - 1);
      for (int e = tid; e < kTileFloats; e += THREADS) {
        float s = mine[e];
        for (int q = 1; q < KSPLIT; ++q)
          s += load_coherent(layer::split_record(tile, KSPLIT, q) + e);
        mine[e] = s;
      }
      __syncthreads();
    }
#endif // KF_MONO
    emit_outputs([&](int wrow, int xrow, int i) {
      return HALVES ? res[0][wrow + 8 * i][xrow] : res[i][wrow][xrow];
    });
  }
}

// The tile of this block (grid [N / 16 * KSPLIT] in clusters of [KSPLIT, 1,
// 1], block [256], shared_bytes gemm_dyn_smem_bytes(KF_USE_MMA,
// gemm_long(K / KSPLIT, DEEP_RING), W)): rows n0 .. n0 + 15 of w [N x K]
// times x [rows x K]; epi(n, xrow, v) stores output column n of row xrow,
// v its fp32 sum.
template <class P, class Epi>
KF_DEVICE void skinny_gemm_tile(const kf_bf16 *x, const kf_bf16 *w, int rows, Epi epi) {
  static_assert(P::N % kGemmTileRows == 0, "N must be a multiple of 16");
  const int n0 = (int)(block_idx_x() / P::KSPLIT) * kGemmTileRows;
  const long long off[1] = {(long long)n0 * P::K};
  skinny_gemm_block<P::K, 1, P::W, kGemmThreads, false, P::KSPLIT, P::DEEP_RING != 0,
                    P::LATE_SLOTS>(
      x, w, off, rows, [&](int wrow, int xrow, const float *v) { epi(n0 + wrow, xrow, v[0]); });
}

// Entry: y [rows x N] = x [rows x K] w^T (skinny_gemm.json).
template <class P>
KF_DEVICE void skinny_gemm_entry(const kf_bf16 *x, const kf_bf16 *w, kf_bf16 *y, int rows) {
  skinny_gemm_tile<P>(
      x, w, rows, [&](int n, int xrow, float v) { store_bf16(y + (long long)xrow * P::N + n, v); });
}

// Entry with a bias (skinny_gemm_bias.json; Qwen2's qkv_proj): y = x w^T +
// bias, bias [N] added to the fp32 sum before its one rounding to bf16, as
// a fused linear with bias rounds. The bias is a weight: nothing before the
// kernel writes it.
template <class P>
KF_DEVICE void skinny_gemm_bias_entry(const kf_bf16 *x, const kf_bf16 *w, const kf_bf16 *bias,
                                      kf_bf16 *y, int rows) {
  skinny_gemm_tile<P>(x, w, rows, [&](int n, int xrow, float v) {
    store_bf16(y + (long long)xrow * P::N + n, v + load_bf16(bias + n));
  });
}

} // namespace kf

#endif // KF_SKINNY_GEMM_CUH
