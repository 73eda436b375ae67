// kf_rope.cuh: rotary position embedding pieces: inverse frequencies (with
// Llama 3 frequency scaling), the angle's cosine and sine, and the per-head
// RMSNorm Qwen3 applies to q and k before rotating them.
//
// Angles follow Hugging Face's arithmetic: inverse frequency rounded to fp32,
// angle = fp32(position) * inv_freq in fp32; the cosine and sine of that fp32
// angle are then taken accurately (range reduction in double), so that
// positions up to 128K and beyond keep their precision.
#ifndef KF_ROPE_CUH
#define KF_ROPE_CUH

#include "kf_portability.cuh"
#include "kf_reduce.cuh"

namespace kf {

// ROTARY_DIM of P where P has one (partial rotary embedding: the first
// ROTARY_DIM values of each head rotate, the rest pass, as GLM-4.5's
// partial_rotary_factor), else D: the whole head.
template <class P, int D, class = void> struct rotary_dim_of { static constexpr int value = D; };
template <class P, int D> struct rotary_dim_of<P, D, decltype((void)P::ROTARY_DIM)> {
  static constexpr int value = P::ROTARY_DIM;
};

// Rotary parameters as a type, so building blocks take them as one argument.
// SCALING_FACTOR <= 1 means no frequency scaling (plain RoPE); otherwise the
// Llama 3 rule (rope_type "llama3") with the other three fields.
template <int HEAD_DIM_, class P> struct rope_config {
  static constexpr int HEAD_DIM = HEAD_DIM_;
  static constexpr int ROTARY_DIM = rotary_dim_of<P, HEAD_DIM_>::value;
  static_assert(ROTARY_DIM >= 16 && ROTARY_DIM <= HEAD_DIM && (ROTARY_DIM & (ROTARY_DIM - 1)) == 0,
                "ROTARY_DIM must be a power of two, 16 to HEAD_DIM");
  static KF_DEVICE double theta() { return (double)P::ROPE_THETA; }
  static KF_DEVICE double factor() { return (double)P::ROPE_SCALING_FACTOR; }
  static KF_DEVICE double low_freq_factor() { return (double)P::ROPE_LOW_FREQ_FACTOR; }
  static KF_DEVICE double high_freq_factor() { return (double)P::ROPE_HIGH_FREQ_FACTOR; }
  static KF_DEVICE double original_max_pos() { return (double)P::ROPE_ORIGINAL_MAX_POS; }
};

// Inverse frequency of rotary pair i (0 <= i < ROTARY_DIM / 2), rounded to
// fp32.
template <class R> KF_DEVICE float rope_inv_freq(int i) {
  const double kTwoPi = 6.283185307179586476925;
  double inv = exp2(-(2.0 * i / R::ROTARY_DIM) * log2(R::theta()));
  if (R::factor() > 1.0) {
    const double low_wavelen = R::original_max_pos() / R::low_freq_factor();
    const double high_wavelen = R::original_max_pos() / R::high_freq_factor();
    const double wavelen = kTwoPi / inv;
    double f = wavelen > low_wavelen ? inv / R::factor() : inv;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const double smooth = (R::original_max_pos() / wavelen - R::low_freq_factor()) /
                            (R::high_freq_factor() - R::low_freq_factor());
      f = (1.0 - smooth) * f / R::factor() + smooth * f;
    }
    inv = f;
  }
  return (float)inv;
}

// cos and sin of the fp32 angle position * inv_freq.
KF_DEVICE void rope_cos_sin(int position, float inv_freq, float *c, float *s) {
  const float angle = (float)position * inv_freq;
  const double kTwoPi = 6.283185307179586476925;
  const double a = (double)angle;
  const float reduced = (float)(a - rint(a * (1.0 / kTwoPi)) * kTwoPi); // in [-pi, pi]
  __sincosf(reduced, s, c);
}

// RMSNorm of one head held by GROUP consecutive lanes, 8 values each:
// v *= rsqrt(mean(v^2) + eps) * weight. Every lane of the warp must call it
// (it shuffles), whatever kind of head it holds.
template <int GROUP> KF_DEVICE void head_rmsnorm8(float v[8], const float w[8], float eps) {
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    ss = fmaf(v[e], v[e], ss);
  ss = group_sum<GROUP>(ss);
  const float inv = rsqrtf(ss * (1.0f / (float)(GROUP * 8)) + eps);
#pragma unroll
  for (int e = 0; e < 8; ++e)
    v[e] = v[e] * inv * w[e];
}

// Block building block: the cos and sin of every rotary pair at `position`,
// into shared tables of ROTARY_DIM / 2 floats, computed once per row rather
// than once per head. Ends with the block synchronised.
template <class R> KF_DEVICE void rope_table(int position, float *cos_t, float *sin_t) {
  for (int i = (int)threadIdx.x; i < R::ROTARY_DIM / 2; i += (int)blockDim.x)
    rope_cos_sin(position, rope_inv_freq<R>(i), &cos_t[i], &sin_t[i]);
  __syncthreads();
}

// Rotate one head in the neox layout (element i < ROTARY_DIM / 2 pairs with
// i + ROTARY_DIM / 2; values from ROTARY_DIM on pass), held by GROUP =
// HEAD_DIM / 8 consecutive lanes, 8 values each, with the tables from
// rope_table. Every lane of the warp must call it; `rotate` false leaves v
// unchanged (a v head).
template <class R>
KF_DEVICE void rope_neox8(float v[8], const float *cos_t, const float *sin_t, bool rotate) {
  constexpr int kGroup = R::HEAD_DIM / 8;
  constexpr int kRotLanes = R::ROTARY_DIM / 8;
  constexpr int kHalfLanes = kRotLanes / 2;
  const int j = lane_id() % kGroup; // this lane's 8-value slot in the head
  float other[8];
#pragma unroll
  for (int e = 0; e < 8; ++e)
    other[e] = shfl_xor(v[e], kHalfLanes);
  if (!rotate)
    return;
  if constexpr (kRotLanes < kGroup) {
    if (j >= kRotLanes)
      return; // past the rotary part
  }
  const bool first_half = j < kHalfLanes;
  const int i0 = (8 * j) % (R::ROTARY_DIM / 2);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float c = cos_t[i0 + e], s = sin_t[i0 + e];
    v[e] = first_half ? v[e] * c - other[e] * s : v[e] * c + other[e] * s;
  }
}

} // namespace kf

#endif // KF_ROPE_CUH
