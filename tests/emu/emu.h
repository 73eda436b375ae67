// emu.h: runs a kernel body on the host, one block at a time, each GPU
// thread a fiber (ucontext) of one OS thread, with warps (wavefronts) of
// KF_EMU_WARP lanes. A fiber runs until it waits at a barrier, then the next
// one runs: no OS scheduling, so a run costs the same on a busy machine as on
// an idle one, and the order is the same every run. A shuffle meets its warp
// at a barrier, and reading a lane that is past the block's end or has not
// reached the same shuffle is counted as an error: the kind of bug a 64-lane
// wavefront exposes in code written for 32. Threads that all wait and none
// can go on (a barrier some thread never reaches) end the run with a message.
#pragma once
#include "cuda_runtime.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <ucontext.h>
#include <vector>

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emu {

struct Fiber {
  ucontext_t ctx;
  unsigned tid;
  long shuffles;     // this thread's count of shuffles so far
  const long *phase; // waiting at a barrier until *phase != token, or NULL
  long token;
  bool done;
};

static ucontext_t scheduler;
static std::vector<Fiber> fibers;
static std::vector<std::unique_ptr<char[]>> stacks;
constexpr size_t kStackBytes = 512 * 1024;
static unsigned current; // the running fiber

inline void yield() { swapcontext(&fibers[current].ctx, &scheduler); }

// std::barrier's semantics for fibers: a phase completes when `expected`
// threads have arrived; arrive_and_drop also lowers `expected` for the
// phases after.
struct Barrier {
  int expected = 0, pending = 0;
  long phase = 0;
  void reset(int n) { expected = pending = n, phase = 0; }
  long arrive() {
    const long token = phase;
    if (--pending == 0)
      ++phase, pending = expected;
    return token;
  }
  void wait(long token) {
    if (phase == token) { // the scheduler resumes this thread once the phase is over
      fibers[current].phase = &phase;
      fibers[current].token = token;
      yield();
    }
  }
  void arrive_and_wait() { wait(arrive()); }
  void arrive_and_drop() {
    --expected;
    (void)arrive();
  }
};

struct Warp {
  Barrier bar;
  float value[KF_EMU_WARP];
  uint32_t frag[KF_EMU_WARP][6]; // each lane's A and B fragments (emulated mma)
  long round[KF_EMU_WARP];       // each lane's count of shuffles so far
  int lanes;                     // lanes that exist (the block's last warp may be short)
};

// The block's dynamic shared memory: as much as an H100 block may have,
// filled with 0xff bytes (NaN as floats) before each block.
constexpr size_t kDynamicSmemBytes = 227 * 1024;
alignas(128) static unsigned char dynamic_smem[kDynamicSmemBytes];
// After a launch: one past the highest byte of dynamic shared memory that any
// of its blocks left other than 0xff (what a launch must give the kernel, as
// far as the data written tells: a byte written as 0xff is not seen).
static size_t dynamic_smem_used = 0;

static Barrier block_bar;
static Barrier named_bar[16]; // 1..15, each for the whole block
static std::vector<Warp> warps;
static long errors = 0;

// A lane that does not meet the others at the same exchange: counted.
inline bool lane_ok(const Warp &w, int from, long round, const char *what) {
  if (from >= 0 && from < w.lanes && w.round[from] == round)
    return true;
  if (errors++ < 10)
    fprintf(stderr, "emu: block (%u,%u,%u) thread %u: %s with lane %d, which %s\n", blockIdx.x,
            blockIdx.y, blockIdx.z, threadIdx.x, what, from,
            from < 0 || from >= w.lanes ? "does not exist" : "is at another exchange");
  return false;
}

inline float shfl(float v, int src, bool is_xor) {
  const int lane = threadIdx.x % KF_EMU_WARP;
  Warp &w = warps[threadIdx.x / KF_EMU_WARP];
  const long round = ++fibers[current].shuffles;
  w.value[lane] = v;
  w.round[lane] = round;
  w.bar.arrive_and_wait();
  const int from = is_xor ? (lane ^ src) : src;
  const float r = lane_ok(w, from, round, "shuffle") ? w.value[from] : v;
  w.bar.arrive_and_wait();
  return r;
}

#if defined(KF_EMU_MMA)
// mma.sync.m16n8k16 (bf16 in, fp32 accumulation), the fragment layout of
// templates/kf_mma.cuh: every lane leaves its fragments, then computes its
// four accumulators from everyone's. Products of bf16 values are exact in
// float; they are summed in double and added to c once, which is at least as
// exact as the instruction (whose summation order PTX leaves open).
inline void mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  static_assert(KF_EMU_WARP == 32, "the matrix instruction's layout is that of 32-lane warps");
  const int lane = threadIdx.x % KF_EMU_WARP;
  Warp &w = warps[threadIdx.x / KF_EMU_WARP];
  const long round = ++fibers[current].shuffles;
  for (int i = 0; i < 4; ++i)
    w.frag[lane][i] = a[i];
  w.frag[lane][4] = b[0];
  w.frag[lane][5] = b[1];
  w.round[lane] = round;
  w.bar.arrive_and_wait();
  auto bf = [](uint32_t pair, int hi) {
    return (double)__uint_as_float(hi ? pair & 0xffff0000u : pair << 16);
  };
  const int g = lane >> 2, t = lane & 3;
  double sum[4] = {};
  bool ok = true;
  for (int q = 0; q < 4 && ok; ++q) { // k 2q, 2q+1 and 2q+8, 2q+9 live in lanes with t == q
    const int arow = 4 * g + q;
    ok = lane_ok(w, arow, round, "matrix instruction");
    for (int e = 0; e < 2 && ok; ++e) {
      const int bcol = 4 * (2 * t + e) + q; // n = 2t + e
      ok = lane_ok(w, bcol, round, "matrix instruction");
      for (int h = 0; h < 2 && ok; ++h)  // the two k of a word
        for (int kk = 0; kk < 2; ++kk) { // k 2q + h, then 2q + 8 + h
          const double bv = bf(w.frag[bcol][4 + kk], h);
          sum[e] += bf(w.frag[arow][2 * kk], h) * bv;         // m g
          sum[2 + e] += bf(w.frag[arow][2 * kk + 1], h) * bv; // m g + 8
        }
    }
  }
  w.bar.arrive_and_wait();
  if (!ok)
    return;
  for (int i = 0; i < 4; ++i)
    c[i] = (float)((double)c[i] + sum[i]);
}
#endif // KF_EMU_MMA

// __syncwarp: the warp's lanes meet.
inline void warp_sync() { warps[threadIdx.x / KF_EMU_WARP].bar.arrive_and_wait(); }

static const std::function<void()> *body_fn;

static void fiber_main() {
  (*body_fn)();
  // a thread that returns early must not hold the others' barriers
  warps[threadIdx.x / KF_EMU_WARP].bar.arrive_and_drop();
  block_bar.arrive_and_drop();
  fibers[current].done = true;
} // returns to the scheduler (uc_link)

// Thread t of the block, ready to start. (Its own function: getcontext
// returns twice, which would make the caller's loop variables suspect.)
__attribute__((noinline)) static void make_fiber(unsigned t) {
  Fiber &f = fibers[t];
  f.tid = t;
  f.shuffles = 0;
  f.phase = nullptr;
  f.done = false;
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = stacks[t].get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = &scheduler;
  makecontext(&f.ctx, fiber_main, 0);
}

// Runs body() for every thread of every block of the grid (x fastest).
inline void launch(dim3 grid, dim3 block, const std::function<void()> &body) {
  gridDim = grid;
  blockDim = block;
  body_fn = &body;
  const unsigned n = block.x * block.y * block.z;
  while (stacks.size() < n)
    stacks.push_back(std::make_unique<char[]>(kStackBytes));
  fibers.resize(n);
  dynamic_smem_used = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3{x, y, z};
        memset(dynamic_smem, 0xff, sizeof dynamic_smem);
        block_bar.reset((int)n);
        for (int id = 1; id < 16; ++id)
          named_bar[id].reset((int)n);
        warps = std::vector<Warp>((n + KF_EMU_WARP - 1) / KF_EMU_WARP);
        for (size_t i = 0; i < warps.size(); ++i) {
          warps[i].lanes = (int)std::min<unsigned>(KF_EMU_WARP, n - i * KF_EMU_WARP);
          warps[i].bar.reset(warps[i].lanes);
          for (long &r : warps[i].round)
            r = -1;
        }
        for (unsigned t = 0; t < n; ++t)
          make_fiber(t);
        // round robin over the threads that can go on until every thread
        // has returned; a pass that resumes none is a deadlock
        for (unsigned left = n; left;) {
          bool resumed = false;
          for (current = 0; current < n; ++current) {
            Fiber &f = fibers[current];
            if (f.done || (f.phase && *f.phase == f.token))
              continue;
            f.phase = nullptr;
            resumed = true;
            threadIdx = dim3{f.tid, 0, 0};
            swapcontext(&scheduler, &f.ctx);
            left -= f.done;
          }
          if (!resumed) {
            fprintf(stderr, "emu: block (%u,%u,%u): %u threads wait at barriers none can pass\n", x,
                    y, z, left);
            abort();
          }
        }
        size_t used = kDynamicSmemBytes;
        while (used > dynamic_smem_used && dynamic_smem[used - 1] == 0xff)
          --used;
        dynamic_smem_used = std::max(dynamic_smem_used, used);
      }
}

} // namespace emu

void __syncthreads() { emu::block_bar.arrive_and_wait(); }
// The block's OR of a predicate: threads meet at the block's barrier, whose
// phase picks one of three words; the one two calls ahead is cleared before
// the barrier (its readers all passed the barrier in between).
int __syncthreads_or(int predicate) {
  static int any[3];
  const long phase = emu::block_bar.phase;
  any[(phase + 1) % 3] = 0;
  if (predicate)
    any[phase % 3] = 1;
  emu::block_bar.arrive_and_wait();
  return any[phase % 3];
}
// Named barriers as the kernels use them: the whole block takes part in each
// phase, some threads arriving without waiting and the rest waiting.
static emu::Barrier &emu_named(int id, int threads) {
  if (id < 1 || id > 15 || threads != (int)(blockDim.x * blockDim.y * blockDim.z)) {
    fprintf(stderr,
            "emu: named barrier %d for %d threads: the emulation has 1..15 for the whole block\n",
            id, threads);
    abort();
  }
  return emu::named_bar[id];
}
void emu_bar_arrive(int id, int threads) { (void)emu_named(id, threads).arrive(); }
void emu_bar_sync(int id, int threads) { emu_named(id, threads).arrive_and_wait(); }
float emu_shfl(float v, int src, bool is_xor) { return emu::shfl(v, src, is_xor); }
void emu_warp_sync() { emu::warp_sync(); }
// kf_sync.cuh's back-off between polls (a layer kernel's waits, which one
// block run here always finds met): let the other threads run.
void emu_back_off() { emu::yield(); }
// A polling thread (kf::bar_sync without hardware) lets the others run; a
// poll that never ends is a barrier some thread never reaches.
void emu_spin() {
  static long spins = 0;
  if (++spins > (1l << 30)) {
    fprintf(stderr, "emu: a thread polls without end (a barrier some thread never reaches)\n");
    abort();
  }
  emu::yield();
}
unsigned char *emu_dynamic_smem() { return emu::dynamic_smem; }
#if defined(KF_EMU_MMA)
void emu_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  emu::mma_16816(c, a, b);
}
#endif // KF_EMU_MMA
