// kf_mma.cuh: the warp-level bf16 matrix instruction (mma.sync.m16n8k16,
// fp32 accumulation) and the fragment loaders kforge's skinny GEMMs use.
//
// Fragment layout of m16n8k16 (PTX ISA), lane = 4*g + t (g = 0..7, t = 0..3):
//   A (16x16, m x k): a[0] = (m g,   k 2t..2t+1)   a[1] = (m g+8, k 2t..2t+1)
//                     a[2] = (m g,   k 2t+8..+9)   a[3] = (m g+8, k 2t+8..+9)
//   B (16x8,  k x n): b[0] = (k 2t..2t+1, n g)     b[1] = (k 2t+8..+9, n g)
//   C (16x8,  m x n): c[0..1] = (m g, n 2t..2t+1)  c[2..3] = (m g+8, n 2t..2t+1)
// The k order inside one instruction is free as long as A and B agree, so a
// lane that loads 8 consecutive k values (16 bytes) of one matrix row can feed
// two instructions without any shuffle: see load_w16 and mma_k32 below.
//
// Everything here is NVIDIA-only (KF_USE_MMA); templates keep a portable path
// beside each use. The lane layout above is that of 32-lane warps, so HIP
// builds (64-lane wavefronts on CDNA) do not get these at all: a use outside
// KF_USE_MMA is a compile error there, not a wrong result.
#ifndef KF_MMA_CUH
#define KF_MMA_CUH

#include "kf_portability.cuh"

#if !KF_VENDOR_HIP
namespace kf {

// c += A * B for one m16n8k16 tile.
KF_DEVICE void mma_bf16_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                              uint32_t b0, uint32_t b1) {
#if KF_USE_MMA && defined(KF_EMU_MMA)
  const uint32_t a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1};
  emu_mma_16816(c, a, b); // tests/emu
#elif KF_USE_MMA
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  (void)c;
  (void)a0;
  (void)a1;
  (void)a2;
  (void)a3;
  (void)b0;
  (void)b1;
#endif // KF_USE_MMA
}

// A 16-row x 32-k tile of a row-major matrix, as this lane holds it: 16 bytes
// of row g and 16 bytes of row g + 8, both at k offset 8t.
struct wtile16 {
  vec8 lo, hi;
};

// lo, hi: where the tile's rows 0..7 and 8..15 start.
KF_DEVICE wtile16 load_w16(const kf_bf16 *lo, const kf_bf16 *hi, long long ld, int k, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const long long off = (long long)g * ld + k + 8 * t;
  wtile16 r;
  r.lo = load_stream(lo + off);
  r.hi = load_stream(hi + off);
  return r;
}

// The activation fragment for the same 32 k: 16 bytes of activation row g at
// k offset 8t, zeros for rows that do not exist (pad rows are never read).
// Branch-free, so that the loads of several steps stay in one basic block
// and are all issued before the first use: lanes of missing rows read row 0
// (a real row; pad rows are never read) and keep zeros.
template <int W> KF_DEVICE vec8 load_x8(const kf_bf16 *x, long long ld, int k, int lane, int rows) {
  const int g = lane >> 2, t = lane & 3;
  const bool real = g < W && g < rows;
  vec8 v = load_vec(x + (real ? (long long)g * ld : 0) + k + 8 * t);
  if (!real)
    v = zero_vec();
  return v;
}

// acc(16 weight rows x 8 activation rows) += W_tile(16 x 32) * X(8 x 32)^T,
// as two instructions over the lane's 8 k values (first 4, then last 4).
KF_DEVICE void mma_k32(float acc[4], const wtile16 &w, const vec8 &x) {
  mma_bf16_16816(acc, w.lo.w[0], w.hi.w[0], w.lo.w[1], w.hi.w[1], x.w[0], x.w[1]);
  mma_bf16_16816(acc, w.lo.w[2], w.hi.w[2], w.lo.w[3], w.hi.w[3], x.w[2], x.w[3]);
}

// Where accumulator element j (0..3) of a lane lands: weight row (0..15) and
// activation row (0..7) of the 16x8 tile.
KF_DEVICE int acc_wrow(int lane, int j) { return (lane >> 2) + ((j & 2) ? 8 : 0); }
KF_DEVICE int acc_xrow(int lane, int j) { return 2 * (lane & 3) + (j & 1); }
// The inverse: where weight row wrow, activation row xrow sits, as lane * 4 + j.
KF_DEVICE int acc_index(int wrow, int xrow) {
  return (((wrow & 7) << 2) | (xrow >> 1)) * 4 + ((wrow & 8) >> 2) + (xrow & 1);
}

// Warp building block: NT tiles of 16 weight rows (tile i starts at
// w + tile_off[i]) times up to 8 activation rows, over k in [k0, k0 + 32*steps),
// accumulated in a fixed order (32-k steps in increasing k). U steps of loads
// are issued before their first use to keep enough bytes in flight.
template <int NT, int U, int W>
KF_DEVICE void warp_gemm_tiles(float acc[NT][4], const kf_bf16 *w, const long long lo[NT],
                               const long long hi[NT], long long ldw, const kf_bf16 *x,
                               long long ldx, int rows, int k0, int steps, int lane) {
  int s = 0;
  for (; s + U <= steps; s += U) {
    wtile16 wt[U][NT];
    vec8 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < NT; ++i)
        wt[u][i] = load_w16(w + lo[i], w + hi[i], ldw, k0 + 32 * (s + u), lane);
      xv[u] = load_x8<W>(x, ldx, k0 + 32 * (s + u), lane, rows);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < NT; ++i)
        mma_k32(acc[i], wt[u][i], xv[u]);
    }
  }
  for (; s < steps; ++s) {
    wtile16 wt[NT];
#pragma unroll
    for (int i = 0; i < NT; ++i)
      wt[i] = load_w16(w + lo[i], w + hi[i], ldw, k0 + 32 * s, lane);
    const vec8 xv = load_x8<W>(x, ldx, k0 + 32 * s, lane, rows);
#pragma unroll
    for (int i = 0; i < NT; ++i)
      mma_k32(acc[i], wt[i], xv);
  }
}

} // namespace kf
#endif // !KF_VENDOR_HIP

#endif // KF_MMA_CUH
