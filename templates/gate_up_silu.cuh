// gate_up_silu.cuh: the MLP's gate and up projections with the SiLU-and-
// multiply epilogue fused: out[R x I] = silu(x W_gate^T) * (x W_up^T), where
// w is the merged [2I x K] matrix (rows 0..I-1 gate, rows I..2I-1 up, the
// layout of vLLM's merged gate_up_proj). Built on skinny_gemm_block: one
// block owns 16 gate rows and the matching 16 up rows, so the epilogue has
// both dot products in one thread and the [R x 2I] intermediate never
// reaches memory. Batch invariance as in skinny_gemm.cuh.
#ifndef KF_GATE_UP_SILU_CUH
#define KF_GATE_UP_SILU_CUH

#include "kf_portability.cuh"
#include "skinny_gemm.cuh"

namespace kf {

KF_DEVICE float silu_mul(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// Entry: grid [INTERMEDIATE / (16 - 8 HALF_TILES) * KSPLIT] in clusters of
// [KSPLIT, 1, 1], block [256], shared_bytes
// gemm_dyn_smem_bytes(KF_USE_MMA, gemm_long(K / KSPLIT, DEEP_RING), W).
// x [rows x K], w [2*INTERMEDIATE x K], out [rows x INTERMEDIATE].
template <class P>
KF_DEVICE void gate_up_silu_entry(const kf_bf16 *x, const kf_bf16 *w, kf_bf16 *out, int rows) {
  static_assert(P::INTERMEDIATE % kGemmTileRows == 0, "INTERMEDIATE must be a multiple of 16");
  // HALF_TILES: 8 gate rows and the matching 8 up rows make one 16-row
  // matrix tile (measured on the H200, notes/perf/journal.md v5c: Qwen3-8B's
  // 768 blocks of 16 + 16 rows leave the second wave of 5-per-SM blocks
  // mostly empty; 1536 of 8 + 8 went from 84% to 91% of the read ceiling,
  // while Llama's and Qwen3-0.6B's lost at R = 8).
  constexpr int kRows = P::HALF_TILES ? kGemmTileRows / 2 : kGemmTileRows;
  const int n0 = block_idx_x() / P::KSPLIT * kRows;
  const long long off[2] = {(long long)n0 * P::K, (long long)(P::INTERMEDIATE + n0) * P::K};
  skinny_gemm_block<P::K, 2, P::W, kGemmThreads, P::HALF_TILES != 0, P::KSPLIT, P::DEEP_RING != 0,
                    P::LATE_SLOTS>(x, w, off, rows, [&](int wrow, int xrow, const float *v) {
    store_bf16(out + (long long)xrow * P::INTERMEDIATE + n0 + wrow, silu_mul(v[0], v[1]));
  });
}

} // namespace kf

#endif // KF_GATE_UP_SILU_CUH
