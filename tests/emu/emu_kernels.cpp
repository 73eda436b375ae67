// emu_kernels.cpp: the templates' portable paths (the code HIP builds: no
// matrix instructions, KF_WARP_SIZE lanes) run on the host by emu.h, against
// double-precision references, with warps of KF_EMU_WARP lanes (32 as on
// NVIDIA, 64 as on AMD CDNA); built with KF_EMU_MMA, the NVIDIA paths with
// matrix instructions, emulated. No GPU, NVIDIA or AMD, is needed, so CI checks
// what no machine here can run. Outputs are poisoned (0xdead) before a run;
// pad rows must keep the poison.
//
// Usage: emu_kernels GROUP (norm, gemm (skinny_gemm and skinny_gemm_bias),
// gate_up, rope, attention, moe). Exit 0 when every check of the group holds
// and no shuffle read a missing lane.
#include "emu.h"

#include "add_rmsnorm.cuh"
#include "decode_attention.cuh"
#include "gate_up_silu.cuh"
#include "moe.cuh"
#include "rope_kv_write.cuh"
#include "skinny_gemm.cuh"

#include <algorithm>
#include <cstdarg>
#include <string>
#include <sys/mman.h>
#include <type_traits>
#include <unistd.h>

namespace {

using bf16 = std::vector<uint16_t>; // bf16 bits on the host
constexpr uint16_t kPoison = 0xdead;

uint16_t to_bf16(float f) { // round to nearest even, as the kernels do
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

double from_bf16(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint64_t rng = 0x9e3779b97f4a7c15ull;
float uniform() { // in [-1, 1)
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) / (double)(1 << 24)) * 2.f - 1.f;
}

bf16 random_bf16(size_t n, float scale = 1.f) {
  bf16 v(n);
  for (auto &x : v)
    x = to_bf16(uniform() * scale);
  return v;
}

kf_bf16 *dev(bf16 &v) { return reinterpret_cast<kf_bf16 *>(v.data()); }

// Counts the values outside their tolerance and prints one line per check.
struct Check {
  std::string name;
  double worst = 0;
  long bad = 0, n = 0;

  void near(double got, double want, double tol) {
    ++n;
    const double e = fabs(got - want);
    worst = std::max(worst, e);
    if (!(e <= tol) && bad++ < 5)
      fprintf(stderr, "  %s: got %g, want %g\n", name.c_str(), got, want);
  }
  void same(long got, long want) { near((double)got, (double)want, 0); }
  // |got - want| <= 0.01 + 0.01 |want|: bf16 output of an fp32 sum
  void close(uint16_t got, double want) { near(from_bf16(got), want, 0.01 + 0.01 * fabs(want)); }
};

bool all_ok = true;

void report(const Check &c) {
  printf("%-64s %8ld values, worst error %-9.3g %s\n", c.name.c_str(), c.n, c.worst,
         c.bad ? "FAILED" : "ok");
  all_ok &= c.bad == 0 && c.n > 0;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// ---- add_rmsnorm -----------------------------------------------------------
template <int HIDDEN_, int W_> struct NormP {
  static constexpr int HIDDEN = HIDDEN_, W = W_;
  static constexpr float EPS = 1e-6f;
};

template <int HIDDEN, int W> void check_norm(int rows) {
  bf16 x = random_bf16(W * HIDDEN), res = random_bf16(W * HIDDEN), w = random_bf16(HIDDEN);
  bf16 out(W * HIDDEN, kPoison), res0 = res;
  emu::launch({W, 1, 1}, {256, 1, 1}, [&] {
    kf::add_rmsnorm_entry<NormP<HIDDEN, W>>(dev(x), dev(res), dev(w), dev(out), rows);
  });
  Check c{format("add_rmsnorm HIDDEN=%d W=%d rows=%d", HIDDEN, W, rows)};
  for (int r = 0; r < W; ++r) {
    std::vector<double> z(HIDDEN);
    double ss = 0;
    for (int i = 0; i < HIDDEN; ++i) {
      z[i] = from_bf16(x[r * HIDDEN + i]) + from_bf16(res0[r * HIDDEN + i]);
      ss += z[i] * z[i];
    }
    const double inv = 1.0 / sqrt(ss / HIDDEN + 1e-6);
    for (int i = 0; i < HIDDEN; ++i) {
      const int at = r * HIDDEN + i;
      if (r < rows) {
        c.same(res[at], to_bf16((float)z[i])); // the residual is stored rounded
        c.close(out[at], z[i] * inv * from_bf16(w[i]));
      } else {
        c.same(out[at], kPoison);
        c.same(res[at], res0[at]);
      }
    }
  }
  report(c);
}

// ---- skinny_gemm and gate_up_silu ------------------------------------------
double dot(const bf16 &x, int xrow, const bf16 &w, long long wrow, int k) {
  double s = 0;
  for (int i = 0; i < k; ++i)
    s += from_bf16(x[(size_t)xrow * k + i]) * from_bf16(w[(size_t)wrow * k + i]);
  return s;
}

template <int N_, int K_, int W_, int KSPLIT_, int DEEP_RING_> struct GemmP {
  static constexpr int N = N_, K = K_, W = W_, KSPLIT = KSPLIT_, DEEP_RING = DEEP_RING_;
  static constexpr int LATE_SLOTS = 1; // the ring's copy order: no effect on the portable path
};

template <int N, int K, int W, int KSPLIT, int DEEP_RING> void check_gemm(int rows) {
  bf16 x = random_bf16(W * K), w = random_bf16((size_t)N * K, 0.1f), y(W * N, kPoison);
  emu::launch({N / 16 * KSPLIT, 1, 1}, {256, 1, 1}, [&] {
    kf::skinny_gemm_entry<GemmP<N, K, W, KSPLIT, DEEP_RING>>(dev(x), dev(w), dev(y), rows);
  });
  Check c{format("skinny_gemm N=%d K=%d W=%d KSPLIT=%d DEEP_RING=%d rows=%d", N, K, W, KSPLIT,
                 DEEP_RING, rows)};
  for (int r = 0; r < W; ++r)
    for (int n = 0; n < N; ++n) {
      if (r < rows)
        c.close(y[r * N + n], dot(x, r, w, n, K));
      else
        c.same(y[r * N + n], kPoison);
    }
  report(c);
}

// skinny_gemm_bias (Qwen2's qkv_proj): the bias joins the fp32 sum before
// its one rounding; a split K adds it once, in rank 0.
template <int N, int K, int W, int KSPLIT> void check_gemm_bias(int rows) {
  bf16 x = random_bf16(W * K), w = random_bf16((size_t)N * K, 0.1f), bias = random_bf16(N, 4.f);
  bf16 y(W * N, kPoison);
  emu::launch({N / 16 * KSPLIT, 1, 1}, {256, 1, 1}, [&] {
    kf::skinny_gemm_bias_entry<GemmP<N, K, W, KSPLIT, 0>>(dev(x), dev(w), dev(bias), dev(y), rows);
  });
  Check c{format("skinny_gemm_bias N=%d K=%d W=%d KSPLIT=%d rows=%d", N, K, W, KSPLIT, rows)};
  for (int r = 0; r < W; ++r)
    for (int n = 0; n < N; ++n) {
      if (r < rows)
        c.close(y[r * N + n], dot(x, r, w, n, K) + from_bf16(bias[n]));
      else
        c.same(y[r * N + n], kPoison);
    }
  report(c);
}

template <int I_, int K_, int W_, int HALF_TILES_, int KSPLIT_, int DEEP_RING_> struct GateUpP {
  static constexpr int INTERMEDIATE = I_, K = K_, W = W_, HALF_TILES = HALF_TILES_,
                       KSPLIT = KSPLIT_, DEEP_RING = DEEP_RING_;
  static constexpr int LATE_SLOTS = 1; // the ring's copy order: no effect on the portable path
};

template <int I, int K, int W, int HALF_TILES, int KSPLIT, int DEEP_RING>
void check_gate_up(int rows) {
  bf16 x = random_bf16(W * K), w = random_bf16((size_t)2 * I * K, 0.1f), y(W * I, kPoison);
  emu::launch({I / (16 - 8 * HALF_TILES) * KSPLIT, 1, 1}, {256, 1, 1}, [&] {
    kf::gate_up_silu_entry<GateUpP<I, K, W, HALF_TILES, KSPLIT, DEEP_RING>>(dev(x), dev(w), dev(y),
                                                                            rows);
  });
  Check c{format("gate_up_silu I=%d K=%d W=%d HALF_TILES=%d KSPLIT=%d rows=%d", I, K, W, HALF_TILES,
                 KSPLIT, rows)};
  for (int r = 0; r < W; ++r)
    for (int n = 0; n < I; ++n) {
      const double g = dot(x, r, w, n, K), u = dot(x, r, w, I + n, K);
      if (r < rows)
        c.close(y[r * I + n], g / (1 + exp(-g)) * u);
      else
        c.same(y[r * I + n], kPoison);
    }
  report(c);
}

// ---- rope_kv_write and qknorm_rope_kv_write ----------------------------------
template <int D, int HQ, int HKV, int W_> struct RopeP {
  static constexpr int HEAD_DIM = D, NUM_Q_HEADS = HQ, NUM_KV_HEADS = HKV, PAGE_SIZE = 16, W = W_,
                       ROPE_ORIGINAL_MAX_POS = 8192;
  static constexpr double ROPE_THETA = 1e6, ROPE_SCALING_FACTOR = 1, ROPE_LOW_FREQ_FACTOR = 1,
                          ROPE_HIGH_FREQ_FACTOR = 4;
  static constexpr float EPS = 1e-6f;
};

// partial_rope_kv_write's parameters: the first ROT values of a head rotate.
template <int D, int HQ, int HKV, int W_, int ROT> struct PartialRopeP : RopeP<D, HQ, HKV, W_> {
  static constexpr int ROTARY_DIM = ROT;
};

// A row's (HQ + 2 HKV) * D / 8 threads go to blocks of 256: 24, 40 or 112
// leave the last warp short, at 32 lanes or 64; 512 and 1792 take 2 and 7
// blocks. ROT < D: partial rotary embedding (the rest of a head passes).
template <bool QK_NORM, int D, int HQ, int HKV, int W, int ROT = D> void check_rope(int rows) {
  using P = std::conditional_t<ROT == D, RopeP<D, HQ, HKV, W>, PartialRopeP<D, HQ, HKV, W, ROT>>;
  constexpr int S = (HQ + 2 * HKV) * D, kPages = 8;
  bf16 qkv = random_bf16(W * S), qn = random_bf16(D), kn = random_bf16(D);
  bf16 q_out(W * HQ * D, kPoison), kc((size_t)kPages * 16 * HKV * D, kPoison), vc = kc;
  std::vector<int> pos(W), slots(W);
  for (int r = 0; r < W; ++r) {
    pos[r] = 37 + 1000 * r;
    slots[r] = 16 * (r + 1) + 3 * r;
  }
  emu::launch({W, (unsigned)(S / 8 + 255) / 256, 1}, {256, 1, 1}, [&] {
    if constexpr (QK_NORM)
      kf::qknorm_rope_kv_write_entry<P>(dev(qkv), pos.data(), slots.data(), dev(qn), dev(kn),
                                        dev(q_out), dev(kc), dev(vc), rows);
    else
      kf::rope_kv_write_entry<P>(dev(qkv), pos.data(), slots.data(), dev(q_out), dev(kc), dev(vc),
                                 rows);
  });
  Check c{format("%s D=%d ROT=%d HQ=%d HKV=%d (%d threads) rows=%d",
                 QK_NORM ? "qknorm_rope_kv_write" : "rope_kv_write", D, ROT, HQ, HKV, S / 8, rows)};
  std::vector<bool> written(kc.size() * 2);
  for (int r = 0; r < W; ++r)
    for (int h = 0; h < HQ + 2 * HKV; ++h) {
      const bool is_v = h >= HQ + HKV;
      std::vector<double> v(D), o(D);
      for (int i = 0; i < D; ++i)
        v[i] = from_bf16(qkv[r * S + h * D + i]);
      if (QK_NORM && !is_v) {
        double ss = 0;
        for (double a : v)
          ss += a * a;
        const double inv = 1 / sqrt(ss / D + 1e-6);
        for (int i = 0; i < D; ++i)
          v[i] = (float)((float)v[i] * inv) * from_bf16((h < HQ ? qn : kn)[i]);
      }
      o = v;
      if (!is_v)
        for (int i = 0; i < ROT / 2; ++i) { // neox: rotate (i, i + ROT/2)
          const float ang = (float)pos[r] * (float)pow(1e6, -2.0 * i / ROT);
          const double cs = cos((double)ang), sn = sin((double)ang);
          o[i] = v[i] * cs - v[i + ROT / 2] * sn;
          o[i + ROT / 2] = v[i + ROT / 2] * cs + v[i] * sn;
        }
      for (int i = 0; i < D; ++i) {
        if (h < HQ) {
          const size_t at = (size_t)(r * HQ + h) * D + i;
          if (r < rows)
            c.close(q_out[at], o[i]);
          else
            c.same(q_out[at], kPoison);
        } else if (r < rows) {
          const int kvh = is_v ? h - HQ - HKV : h - HQ;
          const size_t at = ((size_t)slots[r] * HKV + kvh) * D + i;
          c.close((is_v ? vc : kc)[at], o[i]);
          written[at + (is_v ? kc.size() : 0)] = true;
        }
      }
    }
  for (size_t i = 0; i < kc.size(); ++i) { // pad rows and other slots stay poisoned
    if (!written[i])
      c.same(kc[i], kPoison);
    if (!written[kc.size() + i])
      c.same(vc[i], kPoison);
  }
  report(c);
}

// ---- decode_attention --------------------------------------------------------
template <int D, int HQ, int HKV, int SPLITS_, int W_, int PS = 16> struct AttnP {
  static constexpr int HEAD_DIM = D, NUM_Q_HEADS = HQ, NUM_KV_HEADS = HKV, PAGE_SIZE = PS,
                       SPLITS = SPLITS_, W = W_;
};

// A page table of `rows` rows of per_row entries: each row's first
// ceil(lens[r] / PS) entries scattered pages below `pages` (mul and add
// pick the scatter), the rest a page far past the caches, which a kernel
// that looked one up and read it would fault on.
template <int PS>
std::vector<int> page_table(const std::vector<int> &lens, int rows, int per_row, int pages, int mul,
                            int add) {
  std::vector<int> table((size_t)rows * per_row, 1 << 28);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < per_row; ++i)
      if (r < (int)lens.size() && i < (lens[r] + PS - 1) / PS)
        table[r * per_row + i] = ((r * per_row + i) * mul + add) % pages;
  return table;
}

// `launches` launches of decode_attention at width W on one workspace
// (poisoned with NaN) and one set of semaphores (zero before the first),
// the grid shaped as decode_attention.json shapes it; q, table (per_row
// pages a row) and lens hold W rows, of which the first `rows` are real.
// Returns the semaphores as the last launch left them.
// A copy of `v` that ends where an inaccessible page begins: a kernel that
// reads past its end faults (the page tables' last entries).
class GuardedInts {
public:
  explicit GuardedInts(const std::vector<int> &v) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = v.size() * sizeof(int), data = (bytes + page - 1) / page * page;
    size_ = data + page;
    base_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED || mprotect((char *)base_ + data, page, PROT_NONE) != 0) {
      perror("GuardedInts");
      exit(2);
    }
    at_ = reinterpret_cast<int *>((char *)base_ + data - bytes);
    std::copy(v.begin(), v.end(), at_);
  }
  GuardedInts(const GuardedInts &) = delete;
  GuardedInts &operator=(const GuardedInts &) = delete;
  ~GuardedInts() { munmap(base_, size_); }
  int *data() { return at_; }

private:
  void *base_ = nullptr;
  size_t size_ = 0;
  int *at_ = nullptr;
};

template <int D, int HQ, int HKV, int SPLITS, int W, int PS = 16>
std::vector<int> launch_attention(bf16 &q, bf16 &kc, bf16 &vc, const std::vector<int> &table,
                                  int per_row, std::vector<int> &lens, bf16 &out, int rows,
                                  int launches) {
  constexpr int G = HQ / HKV;
  const int rec = G * D + 4 * ((G + 1) / 2);
  std::vector<float> ws((size_t)W * HKV * SPLITS * rec, NAN);
  std::vector<int> sem(W * HKV, 0);
  GuardedInts guarded(table); // the last row's table row ends at a fault
  for (int launch = 0; launch < launches; ++launch)
    emu::launch({(SPLITS + W - 1) / W, HKV, W}, {128, 1, 1}, [&] {
      kf::decode_attention_entry<AttnP<D, HQ, HKV, SPLITS, W, PS>>(
          dev(q), dev(kc), dev(vc), guarded.data(), per_row, lens.data(), dev(out), ws.data(),
          sem.data(), rows);
    });
  return sem;
}

// Two launches on the same workspace and semaphores: the first must leave
// the counters at zero for the second. PS: tokens per page; each row's
// page-table row holds exactly the pages its longest row needs.
template <int D, int HQ, int HKV, int SPLITS, int W, int PS = 16>
void check_attention(int rows, std::vector<int> lens) {
  constexpr int G = HQ / HKV;
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const int per_row = std::max((max_len + PS - 1) / PS, 1), pages = W * per_row + 1;
  bf16 q = random_bf16(W * HQ * D), kc = random_bf16((size_t)pages * PS * HKV * D),
       vc = random_bf16((size_t)pages * PS * HKV * D), out(W * HQ * D, kPoison);
  std::vector<int> table = page_table<PS>(lens, W, per_row, pages, 7, 3);
  const std::vector<int> sem =
      launch_attention<D, HQ, HKV, SPLITS, W, PS>(q, kc, vc, table, per_row, lens, out, rows, 2);
  Check c{
      format("decode_attention D=%d G=%d HKV=%d SPLITS=%d W=%d PAGE_SIZE=%d rows=%d (longest %d)",
             D, G, HKV, SPLITS, W, PS, rows, max_len)};
  for (int s : sem)
    c.same(s, 0);
  for (int r = 0; r < W; ++r)
    for (int hq = 0; hq < HQ; ++hq) {
      const int kvh = hq / G, len = lens[r];
      auto row_at = [&](int t) {
        return (((size_t)table[r * per_row + t / PS] * PS + t % PS) * HKV + kvh) * D;
      };
      std::vector<double> p(len);
      double mx = -1e300, l = 0;
      for (int t = 0; t < len; ++t) {
        double s = 0;
        for (int i = 0; i < D; ++i)
          s += from_bf16(q[(r * HQ + hq) * D + i]) * from_bf16(kc[row_at(t) + i]);
        p[t] = s / sqrt((double)D);
        mx = std::max(mx, p[t]);
      }
      for (auto &s : p) {
        s = exp(s - mx);
        l += s;
      }
      for (int i = 0; i < D; ++i) {
        double o = 0;
        for (int t = 0; t < len; ++t)
          o += p[t] * from_bf16(vc[row_at(t) + i]);
        const size_t at = (size_t)(r * HQ + hq) * D + i;
        if (r < rows)
          c.close(out[at], len ? o / l : 0);
        else
          c.same(out[at], kPoison);
      }
    }
  report(c);
}

// Batch invariance of decode_attention: each of `lens.size()` rows is run
// alone at width 1, then in batches at widths 2, 4 and 8 beside other rows
// (every row of every batch compared, pad rows left poisoned), and must give
// the same bits, though each width has its blocks attend other sets of
// ranges (one, two, four, eight) and merge them at other points.
template <int D, int HQ, int HKV, int SPLITS, int PS = 16>
void check_attention_invariance(std::vector<int> lens) {
  constexpr int G = HQ / HKV;
  const int n = (int)lens.size();
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const int per_row = std::max((max_len + PS - 1) / PS, 1), pages = n * per_row + 1;
  bf16 q = random_bf16(n * HQ * D), kc = random_bf16((size_t)pages * PS * HKV * D),
       vc = random_bf16((size_t)pages * PS * HKV * D);
  std::vector<int> table = page_table<PS>(lens, n, per_row, pages, 11, 5);
  // Rows `ids` at width W; returns the W rows' outputs.
  auto run = [&](auto width, const std::vector<int> &ids) {
    constexpr int W = decltype(width)::value;
    bf16 qb(W * HQ * D, 0), out(W * HQ * D, kPoison);
    std::vector<int> tb(W * per_row, 0), lb(W, 0);
    for (int r = 0; r < (int)ids.size(); ++r) {
      std::copy_n(q.begin() + ids[r] * HQ * D, HQ * D, qb.begin() + r * HQ * D);
      std::copy_n(table.begin() + ids[r] * per_row, per_row, tb.begin() + r * per_row);
      lb[r] = lens[ids[r]];
    }
    launch_attention<D, HQ, HKV, SPLITS, W, PS>(qb, kc, vc, tb, per_row, lb, out, (int)ids.size(),
                                                1);
    return out;
  };
  std::vector<bf16> alone(n);
  for (int r = 0; r < n; ++r)
    alone[r] = run(kf::int_tag<1>{}, {r});
  Check c{format("decode_attention invariance D=%d G=%d SPLITS=%d PAGE_SIZE=%d (longest %d)", D, G,
                 SPLITS, PS, max_len)};
  auto compare = [&](const bf16 &out, const std::vector<int> &ids, int w) {
    for (int r = 0; r < w; ++r)
      for (int i = 0; i < HQ * D; ++i)
        c.same(out[r * HQ * D + i], r < (int)ids.size() ? alone[ids[r]][i] : kPoison);
  };
  // every row at widths 2 and 4, in other places and beside other rows
  for (int r = 0; r + 1 < n; r += 2)
    compare(run(kf::int_tag<2>{}, {r + 1, r}), {r + 1, r}, 2);
  for (int r = 0; r + 1 < n; r += 2) {
    const std::vector<int> four = {(r + 2) % n, r + 1, r};
    compare(run(kf::int_tag<4>{}, four), four, 4);
  }
  std::vector<int> eight;
  for (int r = n - 1; r >= 0; --r)
    eight.push_back(r);
  compare(run(kf::int_tag<8>{}, eight), eight, 8);
  report(c);
}

// ---- mixture of experts: router, moe_gate_up, moe_down, moe_combine ----------
template <int H, int I, int E, int K, int W_, int RENORM_, int HALF_TILES_ = 0, int DEEP_RING_ = 0,
          int SMEM_CAP_ = 0>
struct MoeP {
  static constexpr int HIDDEN = H, INTERMEDIATE = I, EXPERTS = E, TOPK = K, W = W_,
                       RENORM = RENORM_, DEEP_RING = DEEP_RING_, HALF_TILES = HALF_TILES_,
                       SMEM_CAP = SMEM_CAP_;
  static constexpr float SCALE = 1.0f;
};

// A MoE layer's buffers at width W: the inputs, the kernels' outputs
// (poisoned) and the router's logits and semaphore.
template <int H, int I, int E, int K, int W> struct MoeRun {
  bf16 x, wr, wgu, wd, act, out;
  std::vector<int> ids;
  std::vector<float> weights, logits, y;
  std::vector<int> sem;
  MoeRun(const bf16 &x_, const bf16 &wr_, const bf16 &wgu_, const bf16 &wd_)
      : x(x_), wr(wr_), wgu(wgu_), wd(wd_), act((size_t)W * K * W * I, kPoison),
        out((size_t)W * H, kPoison), ids(W * K, -7), weights(W * K, NAN),
        logits((size_t)W * E, NAN), y((size_t)W * K * H, NAN), sem(1, 0) {}

  // The four launches, shaped as the moe_*.json schemas shape them.
  template <int RENORM, int HALF> void run(int rows) {
    using P = MoeP<H, I, E, K, W, RENORM, HALF>;
    constexpr int kTiles = I / (16 - 8 * HALF); // moe_gate_up's items per slot
    const int slots = std::min({W * K, E, (1024 + kTiles - 1) / kTiles});
    const int down_slots = std::min({W * K, E, (1024 + H / 16 - 1) / (H / 16)});
    emu::launch({(E + 7) / 8, 1, 1}, {256, 1, 1}, [&] {
      kf::moe_router_entry<P>(dev(x), dev(wr), ids.data(), weights.data(), logits.data(),
                              sem.data(), rows);
    });
    emu::launch({(unsigned)(slots * kTiles), 1, 1}, {256, 1, 1},
                [&] { kf::moe_gate_up_entry<P>(dev(x), dev(wgu), ids.data(), dev(act), rows); });
    emu::launch({(unsigned)(down_slots * (H / 16)), 1, 1}, {256, 1, 1},
                [&] { kf::moe_down_entry<P>(dev(act), dev(wd), ids.data(), y.data(), rows); });
    emu::launch({W, 1, 1}, {256, 1, 1},
                [&] { kf::moe_combine_entry<P>(y.data(), weights.data(), dev(out), rows); });
  }
};

// The router's choice in double precision: softmax, the K largest (ties to
// the lower index), renormalised when RENORM. Returns the gap between the
// K-th and the (K+1)-th probability relative to the K-th (infinite when
// K == E): a choice closer than fp32 can tell is not checked.
template <int E, int K>
double reference_route(const std::vector<double> &logit, int renorm, int *ids, double *w) {
  const double mx = *std::max_element(logit.begin(), logit.end());
  std::vector<double> p(E);
  double sum = 0;
  for (int e = 0; e < E; ++e)
    sum += p[e] = exp(logit[e] - mx);
  std::vector<int> order(E);
  for (int e = 0; e < E; ++e) {
    p[e] /= sum;
    order[e] = e;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double picked = 0;
  for (int k = 0; k < K; ++k) {
    ids[k] = order[k];
    picked += p[order[k]];
  }
  for (int k = 0; k < K; ++k)
    w[k] = p[order[k]] / (renorm ? picked : 1.0);
  return K < E ? (p[order[K - 1]] - p[order[K]]) / p[order[K - 1]] : INFINITY;
}

// The router alone, twice on the same semaphore (it must come back to
// zero): ids and weights against the double-precision router where the
// choice is clear, pad rows without a choice. Cheap at any expert count.
template <int H, int E, int K, int W, int RENORM> void check_moe_router(int rows) {
  using P = MoeP<H, 16, E, K, W, RENORM>;
  bf16 x = random_bf16(W * H), wr = random_bf16((size_t)E * H, 0.25f);
  std::vector<int> ids(W * K, -7), sem(1, 0);
  std::vector<float> weights(W * K, NAN), logits((size_t)W * E, NAN);
  for (int step = 0; step < 2; ++step)
    emu::launch({(E + 7) / 8, 1, 1}, {256, 1, 1}, [&] {
      kf::moe_router_entry<P>(dev(x), dev(wr), ids.data(), weights.data(), logits.data(),
                              sem.data(), rows);
    });
  Check c{format("moe_router H=%d E=%d K=%d W=%d RENORM=%d rows=%d", H, E, K, W, RENORM, rows)};
  c.same(sem[0], 0);
  int near_ties = 0;
  for (int r = 0; r < W; ++r) {
    if (r >= rows) {
      for (int k = 0; k < K; ++k)
        c.same(ids[r * K + k], -7);
      continue;
    }
    std::vector<double> logit(E);
    for (int e = 0; e < E; ++e)
      logit[e] = dot(x, r, wr, e, H);
    int ref_ids[K];
    double ref_w[K];
    if (reference_route<E, K>(logit, RENORM, ref_ids, ref_w) <= 1e-3) {
      ++near_ties;
      continue;
    }
    for (int k = 0; k < K; ++k) {
      c.same(ids[r * K + k], ref_ids[k]);
      c.near(weights[r * K + k], ref_w[k], 1e-5);
    }
  }
  if (near_ties)
    printf("  (%d rows with a near-tie at rank %d: not checked)\n", near_ties, K);
  report(c);
}

// The sigmoid router (moe_router_sigmoid) against a double-precision one:
// scores sigmoid(logit), the choice on score + bias (a bias of the scores'
// spread, so that it changes choices), weights the chosen scores,
// renormalised when RENORM, times SCALE. Rows whose K-th and (K+1)-th keys
// are within 1e-3 (relative) are counted, not checked.
template <int H, int E, int K, int W_, int RENORM_>
struct MoeSigmoidP : MoeP<H, 16, E, K, W_, RENORM_> {
  static constexpr float SCALE = 2.5f; // GLM-4.5's routed_scaling_factor
};

template <int H, int E, int K, int W, int RENORM> void check_moe_router_sigmoid(int rows) {
  using P = MoeSigmoidP<H, E, K, W, RENORM>;
  bf16 x = random_bf16(W * H), wr = random_bf16((size_t)E * H, 0.25f);
  std::vector<float> bias(E);
  for (auto &b : bias)
    b = uniform() * 0.2f;
  std::vector<int> ids(W * K, -7), sem(1, 0);
  std::vector<float> weights(W * K, NAN), logits((size_t)W * E, NAN);
  for (int step = 0; step < 2; ++step)
    emu::launch({(E + 7) / 8, 1, 1}, {256, 1, 1}, [&] {
      kf::moe_router_sigmoid_entry<P>(dev(x), dev(wr), bias.data(), ids.data(), weights.data(),
                                      logits.data(), sem.data(), rows);
    });
  Check c{
      format("moe_router_sigmoid H=%d E=%d K=%d W=%d RENORM=%d rows=%d", H, E, K, W, RENORM, rows)};
  c.same(sem[0], 0);
  int near_ties = 0, bias_moved = 0;
  for (int r = 0; r < W; ++r) {
    if (r >= rows) {
      for (int k = 0; k < K; ++k)
        c.same(ids[r * K + k], -7);
      continue;
    }
    std::vector<double> score(E), key(E);
    std::vector<int> order(E), by_score(E);
    for (int e = 0; e < E; ++e) {
      score[e] = 1 / (1 + exp(-dot(x, r, wr, e, H)));
      key[e] = score[e] + bias[e];
      order[e] = by_score[e] = e;
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
    std::stable_sort(by_score.begin(), by_score.end(),
                     [&](int a, int b) { return score[a] > score[b]; });
    if (K < E && (key[order[K - 1]] - key[order[K]]) / fabs(key[order[K - 1]]) <= 1e-3) {
      ++near_ties;
      continue;
    }
    bias_moved += !std::equal(order.begin(), order.begin() + K, by_score.begin());
    double picked = 0;
    for (int k = 0; k < K; ++k)
      picked += score[order[k]];
    for (int k = 0; k < K; ++k) {
      c.same(ids[r * K + k], order[k]);
      c.near(weights[r * K + k], score[order[k]] / (RENORM ? picked : 1.0) * 2.5, 1e-5);
    }
  }
  // the bias must have changed some choice, or this checks no more than a
  // router without it
  c.same(bias_moved > 0, true);
  if (near_ties)
    printf("  (%d rows with a near-tie at rank %d: not checked)\n", near_ties, K);
  report(c);
}

// moe_combine_shared alone: random fp32 expert outputs, weights and a bf16
// shared-expert output against the double-precision sum (rank order, then
// the shared output, one rounding); pad rows keep the poison.
template <int H, int K, int W> void check_moe_combine_shared(int rows) {
  using P = MoeP<H, 16, 8, K, W, 1>;
  std::vector<float> y((size_t)W * K * H), weights(W * K);
  for (auto &v : y)
    v = uniform() * 4.f;
  for (auto &v : weights)
    v = uniform() * 0.5f + 0.5f;
  bf16 shared = random_bf16((size_t)W * H, 2.f), out((size_t)W * H, kPoison);
  emu::launch({W, 1, 1}, {256, 1, 1}, [&] {
    kf::moe_combine_shared_entry<P>(y.data(), weights.data(), dev(shared), dev(out), rows);
  });
  Check c{format("moe_combine_shared H=%d K=%d W=%d rows=%d", H, K, W, rows)};
  for (int r = 0; r < W; ++r)
    for (int i = 0; i < H; ++i) {
      if (r >= rows) {
        c.same(out[r * H + i], kPoison);
        continue;
      }
      double want = 0;
      for (int k = 0; k < K; ++k)
        want += (double)weights[r * K + k] * y[((size_t)r * K + k) * H + i];
      want += from_bf16(shared[r * H + i]);
      c.close(out[r * H + i], want);
    }
  report(c);
}

// moe_down alone with a cap on its dynamic shared memory (SMEM_CAP, the long
// path's smaller rings): random choices of E experts for the real rows, y
// against a double-precision sum over the slot's activations (tolerance
// relative to the sum of the terms' magnitudes), pad rows untouched (NaN),
// and the same bits as with the default ring (SMEM_CAP 0: a warp sums its
// units in the same order whatever the ring holds). The blocks write no
// dynamic shared memory past want_smem, moe_down.json's shared_bytes for
// these parameters at MMA 1 (the portable path uses none).
template <int H, int I, int E, int K, int W, int DEEP, int CAP>
void check_moe_down(int rows, int want_smem) {
  bf16 wd = random_bf16((size_t)E * H * I, 0.1f);
  std::vector<int> ids(W * K, -7);
  std::vector<int> chosen;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) {
      int e;
      do
        e = (int)((uniform() + 1.f) * 0.5f * E) % E;
      while (std::find(ids.begin() + r * K, ids.begin() + r * K + k, e) != ids.begin() + r * K + k);
      ids[r * K + k] = e;
      chosen.push_back(e);
    }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end()); // the slots' experts
  const int slots = (int)chosen.size();
  bf16 act = random_bf16((size_t)slots * W * I);
  const int grid = std::min({W * K, E, (1024 + H / 16 - 1) / (H / 16)}) * (H / 16);
  auto run = [&](auto params, size_t *smem) {
    using P = decltype(params);
    std::vector<float> y((size_t)W * K * H, NAN);
    emu::launch({(unsigned)grid, 1, 1}, {256, 1, 1},
                [&] { kf::moe_down_entry<P>(dev(act), dev(wd), ids.data(), y.data(), rows); });
    *smem = emu::dynamic_smem_used;
    return y;
  };
  size_t used = 0, used_default = 0;
  const std::vector<float> y = run(MoeP<H, I, E, K, W, 1, 0, DEEP, CAP>{}, &used);
  const std::vector<float> y0 = run(MoeP<H, I, E, K, W, 1, 0, DEEP, 0>{}, &used_default);
  Check c{format("moe_down H=%d I=%d E=%d K=%d W=%d DEEP_RING=%d SMEM_CAP=%d rows=%d", H, I, E, K,
                 W, DEEP, CAP, rows)};
  for (int r = 0; r < W; ++r)
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < H; ++i) {
        const size_t at = ((size_t)r * K + k) * H + i;
        if (r >= rows) {
          c.same(std::isnan(y[at]), true);
          continue;
        }
        const int e = ids[r * K + k];
        const int slot = (int)(std::find(chosen.begin(), chosen.end(), e) - chosen.begin());
        double want = 0, mag = 0;
        for (int n = 0; n < I; ++n) {
          const double t = from_bf16(act[((size_t)slot * W + r) * I + n]) *
                           from_bf16(wd[((size_t)e * H + i) * I + n]);
          want += t;
          mag += fabs(t);
        }
        c.near(y[at], want, 2e-5 * mag);
        uint32_t got_bits, default_bits;
        memcpy(&got_bits, &y[at], 4);
        memcpy(&default_bits, &y0[at], 4);
        c.same(got_bits, default_bits);
      }
  if (used > (size_t)want_smem)
    fprintf(stderr, "  %s: wrote %zu bytes of dynamic shared memory, the schema gives %d\n",
            c.name.c_str(), used, want_smem);
  c.same(used <= (size_t)want_smem, true);
  printf("  (dynamic shared memory written: %zu bytes, %zu with the default ring)\n", used,
         used_default);
  report(c);
}

// A whole layer, router to combine: the output against a double-precision
// layer over the kernel's own choice (act rounded to bf16 as the kernel
// stores it), pad rows poisoned; then every real row alone at width 1 gives
// the same bits (rows here share experts: E is small). HALF: moe_gate_up's
// HALF_TILES.
template <int H, int I, int E, int K, int W, int RENORM, int HALF = 0> void check_moe(int rows) {
  bf16 x = random_bf16(W * H), wr = random_bf16((size_t)E * H, 0.25f),
       wgu = random_bf16((size_t)E * 2 * I * H, 0.1f), wd = random_bf16((size_t)E * H * I, 0.1f);
  MoeRun<H, I, E, K, W> m(x, wr, wgu, wd);
  m.template run<RENORM, HALF>(rows);
  Check c{format("moe layer H=%d I=%d E=%d K=%d W=%d RENORM=%d HALF_TILES=%d rows=%d", H, I, E, K,
                 W, RENORM, HALF, rows)};
  for (int r = 0; r < W; ++r) {
    if (r >= rows) {
      for (int i = 0; i < H; ++i)
        c.same(m.out[r * H + i], kPoison);
      continue;
    }
    std::vector<double> o(H, 0.0);
    for (int k = 0; k < K; ++k) {
      const int e = m.ids[r * K + k];
      std::vector<double> a(I);
      for (int n = 0; n < I; ++n) {
        double g = 0, u = 0;
        for (int i = 0; i < H; ++i) {
          g += from_bf16(x[r * H + i]) * from_bf16(wgu[((size_t)e * 2 * I + n) * H + i]);
          u += from_bf16(x[r * H + i]) * from_bf16(wgu[((size_t)e * 2 * I + I + n) * H + i]);
        }
        a[n] = from_bf16(to_bf16((float)(g / (1 + exp(-g)) * u)));
      }
      for (int i = 0; i < H; ++i) {
        double d = 0;
        for (int n = 0; n < I; ++n)
          d += a[n] * from_bf16(wd[((size_t)e * H + i) * I + n]);
        o[i] += m.weights[r * K + k] * d;
      }
    }
    for (int i = 0; i < H; ++i)
      c.close(m.out[r * H + i], o[i]);
  }
  for (int r = 0; r < rows; ++r) { // batch invariance: the row alone, at width 1
    bf16 x1(x.begin() + r * H, x.begin() + (r + 1) * H);
    MoeRun<H, I, E, K, 1> one(x1, wr, wgu, wd);
    one.template run<RENORM, HALF>(1);
    for (int i = 0; i < H; ++i)
      c.same(one.out[i], m.out[r * H + i]);
  }
  report(c);
}

} // namespace

int main(int argc, char **argv) {
  const std::string group = argc > 1 ? argv[1] : "";
  printf("warps of %d lanes (kf::kWarpSize %d)\n", KF_EMU_WARP, kf::kWarpSize);
  if (kf::kWarpSize != KF_EMU_WARP)
    return 2;
  if (group == "norm") {
    check_norm<1024, 4>(3);
    check_norm<4096, 2>(2);
    check_norm<2056, 2>(2); // HIDDEN not a multiple of 8 x 256
    check_norm<8, 1>(1);
  } else if (group == "gemm") {
    check_gemm<32, 1024, 8, 1, 0>(5);
    check_gemm<16, 256, 1, 1, 0>(1);
    check_gemm<32, 512, 4, 2, 0>(4);
    check_gemm<16, 1024, 3, 4, 1>(2);
    check_gemm<16, 1024, 3, 1, 1>(3);  // deep ring, whole lines (the MMA path's long form)
    check_gemm<16, 8192, 2, 1, 0>(2);  // long by K
    check_gemm<16, 1408, 3, 1, 0>(3);  // GLM-4.5's expert K: a tail past 5 x 256
    check_gemm<32, 1408, 2, 2, 0>(2);  // the tail of each slice
    check_gemm<16, 10944, 2, 1, 0>(1); // GLM-4.5's dense down_proj: long, with a tail
    check_gemm_bias<32, 512, 4, 1>(3);
    check_gemm_bias<32, 512, 2, 2>(2);
  } else if (group == "gate_up") {
    check_gate_up<32, 512, 4, 0, 1, 1>(3);
    check_gate_up<32, 512, 2, 1, 2, 0>(2);
  } else if (group == "rope") {
    check_rope<false, 128, 16, 8, 2>(2);
    check_rope<true, 128, 16, 8, 2>(1);
    check_rope<false, 128, 96, 8, 2>(2);
    check_rope<true, 64, 1, 1, 1>(1);
    check_rope<true, 128, 5, 1, 1>(1);
    check_rope<true, 256, 2, 1, 1>(1);
    check_rope<false, 64, 3, 1, 1>(1);
    check_rope<false, 128, 96, 8, 2, 64>(2); // GLM-4.5-Air: half of each head rotates
    check_rope<true, 64, 3, 1, 1, 16>(1);
  } else if (group == "attention") {
    check_attention<128, 4, 2, 4, 4>(3, {1, 17, 200, 33});
    check_attention<64, 6, 2, 8, 2>(2, {300, 16});
    check_attention<128, 8, 1, 16, 1>(1, {1100}); // records past the merge's first stage
    check_attention<128, 8, 1, 32, 1>(1, {1100});
    check_attention<64, 3, 1, 4, 2>(2, {0, 64});
    // blocks of several ranges, and more ranges than their slots (G = 8: 2)
    check_attention<128, 8, 1, 16, 8>(6, {400, 17, 330, 1, 350, 0, 50, 70});
    // 9-16 ranges of 4 tiles (513-1024 tokens), the last one short of a tile
    // for some warps (530), blocks that flush their 4 slots twice (width 8,
    // 32 lanes)
    check_attention_invariance<64, 2, 1, 16>({1000, 530, 700, 1});
    // 12 query heads per kv head (GLM-4.5-Air): the matrix path's second
    // set of heads
    check_attention<128, 24, 2, 8, 2>(2, {500, 21});
    // pages smaller than a tile (1: a token-granular pool), every row's
    // page-table row cut at its own last page
    check_attention<128, 4, 2, 4, 4, 1>(3, {1, 17, 200, 33});
    check_attention<128, 4, 2, 4, 4, 1>(4, {1, 17, 200, 201}); // the last tile past the table
    check_attention<64, 6, 2, 8, 2, 8>(2, {300, 13});
    check_attention<128, 24, 2, 8, 2, 2>(2, {500, 21});
    check_attention<128, 8, 1, 16, 8, 4>(6, {400, 17, 330, 1, 350, 0, 50, 70});
    check_attention<64, 2, 1, 4, 1, 32>(1, {77});
    check_attention_invariance<64, 2, 1, 16, 1>({1000, 530, 700, 1});
  } else if (group == "moe") {
    check_moe_router<256, 8, 2, 4, 1>(3);           // Mixtral's routing
    check_moe_router<512, 128, 8, 8, 1>(5);         // Qwen3-MoE's: more experts than lanes
    check_moe_router<256, 200, 4, 2, 0>(2);         // no renormalisation, a part-filled block
    check_moe_router_sigmoid<512, 128, 8, 8, 1>(7); // GLM-4.5's routing
    check_moe_router_sigmoid<256, 200, 4, 2, 0>(2); // no renormalisation, a part-filled block
    check_moe_combine_shared<2056, 8, 4>(3);        // 2056: a part-filled last pass
    check_moe<256, 256, 3, 2, 2, 1>(2);             // the whole layer; rows share experts
    check_moe<256, 256, 3, 2, 4, 1, 1>(3);          // moe_gate_up's half tiles
#if KF_USE_MMA
    // SMEM_CAP: Mixtral's K on the long path; 72 KB keeps 3 ring slots a
    // warp at widths 4 and 8 (60 and 72 KB, 3 blocks an SM), 56 KB 2 (40
    // and 48 KB); GLM-4.5's and Qwen3-MoE's K with DEEP_RING take the
    // fragment ring (not a multiple of 64 x 8 warps; 1408 has a tail), and
    // 2944, a tail past 11 x 256, goes round that ring (11 steps a warp)
    check_moe_down<32, 14336, 4, 2, 4, 0, 73728>(3, 61440);
    check_moe_down<32, 14336, 4, 2, 8, 0, 73728>(8, 73728);
    check_moe_down<32, 14336, 4, 2, 4, 0, 57344>(4, 40960);
    check_moe_down<32, 14336, 4, 2, 8, 0, 57344>(6, 49152);
    check_moe_down<32, 1408, 8, 2, 8, 1, 73728>(7, 73728);
    check_moe_down<32, 768, 8, 2, 4, 1, 57344>(4, 40960);
    check_moe_down<32, 2944, 8, 2, 2, 1, 57344>(2, 55296);
#endif // KF_USE_MMA
  } else {
    fprintf(stderr, "usage: emu_kernels norm|gemm|gate_up|rope|attention|moe\n");
    return 2;
  }
  const long shuffle_errors = emu::errors;
  printf("%s (%ld shuffle errors)\n", all_ok && !shuffle_errors ? "ok" : "FAILED", shuffle_errors);
  return all_ok && !shuffle_errors ? 0 : 1;
}
