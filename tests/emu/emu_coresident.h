// emu_coresident.h: runs a kernel body on the host with every block of a
// small grid resident at once (one std::thread per GPU thread of the whole
// grid), as a cooperative launch guarantees on a GPU, so that blocks may wait
// for each other (templates/kf_sync.cuh). Warps have KF_EMU_WARP lanes and
// shuffle as in emu.h. A program includes either this header or emu.h, not
// both (each defines threadIdx and __syncthreads).
//
// Each block has its own barrier, warps and dynamic shared memory
// (emu::dynamic_shared()); the stand-in's __shared__ is a static, one for
// the whole process, so kernels run here keep block-local data in
// dynamic_shared(), never in __shared__ variables.
#pragma once
#include "cuda_runtime.h"

#include <barrier>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emu {

struct Warp {
  std::unique_ptr<std::barrier<>> bar;
  float value[KF_EMU_WARP];
  long round[KF_EMU_WARP]; // each lane's count of shuffles so far
  int lanes;               // lanes that exist (the block's last warp may be short)
};

struct Block {
  // __syncthreads_or: threads add their predicate to `acc`; the barrier's
  // completion step (run once all have arrived, before any leaves) moves it
  // to `result` and clears it, so a plain __syncthreads leaves both at 0
  struct Complete {
    Block *b;
    void operator()() noexcept { b->result = b->acc.exchange(0, std::memory_order_relaxed); }
  };
  std::unique_ptr<std::barrier<Complete>> bar;
  std::atomic<int> acc{0};
  int result = 0;
  std::vector<Warp> warps;
  std::vector<unsigned char> shared; // dynamic shared memory
};

static std::vector<std::unique_ptr<Block>> blocks;
static thread_local Block *self;
static thread_local long shuffles;
static std::atomic<long> errors{0};

inline unsigned char *dynamic_shared() { return self->shared.data(); }

inline float shfl(float v, int src, bool is_xor) {
  const int lane = threadIdx.x % KF_EMU_WARP;
  Warp &w = self->warps[threadIdx.x / KF_EMU_WARP];
  w.value[lane] = v;
  w.round[lane] = ++shuffles;
  w.bar->arrive_and_wait();
  const int from = is_xor ? (lane ^ src) : src;
  float r = v;
  if (from < 0 || from >= w.lanes || w.round[from] != shuffles) {
    if (errors++ < 10)
      fprintf(stderr, "emu: block %u thread %u: shuffle from lane %d, which %s\n", blockIdx.x,
              threadIdx.x, from,
              from < 0 || from >= w.lanes ? "does not exist" : "is at another shuffle");
  } else {
    r = w.value[from];
  }
  w.bar->arrive_and_wait();
  return r;
}

// Runs body() for every thread of every block of a one-dimensional grid, all
// of them at once; returns when every thread has returned.
inline void launch_coresident(unsigned grid, unsigned block, size_t shared_bytes,
                              const std::function<void()> &body) {
  gridDim = dim3{grid, 1, 1};
  blockDim = dim3{block, 1, 1};
  blocks.clear();
  for (unsigned b = 0; b < grid; ++b) {
    auto blk = std::make_unique<Block>();
    blk->bar = std::make_unique<std::barrier<Block::Complete>>(block, Block::Complete{blk.get()});
    blk->warps = std::vector<Warp>((block + KF_EMU_WARP - 1) / KF_EMU_WARP);
    for (size_t i = 0; i < blk->warps.size(); ++i) {
      Warp &w = blk->warps[i];
      w.lanes = (int)std::min<unsigned>(KF_EMU_WARP, block - (unsigned)i * KF_EMU_WARP);
      w.bar = std::make_unique<std::barrier<>>(w.lanes);
      for (long &r : w.round)
        r = -1;
    }
    blk->shared.assign(shared_bytes, 0);
    blocks.push_back(std::move(blk));
  }
  std::vector<std::thread> threads;
  threads.reserve((size_t)grid * block);
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, b, t] {
        threadIdx = dim3{t, 0, 0};
        blockIdx = dim3{b, 0, 0};
        self = blocks[b].get();
        shuffles = 0;
        body();
        // a thread that returns early must not hold the others' barriers
        self->warps[t / KF_EMU_WARP].bar->arrive_and_drop();
        self->bar->arrive_and_drop();
      });
  for (auto &t : threads)
    t.join();
}

} // namespace emu

void __syncthreads() { emu::self->bar->arrive_and_wait(); }
int __syncthreads_or(int predicate) {
  if (predicate)
    emu::self->acc.fetch_or(1, std::memory_order_relaxed);
  emu::self->bar->arrive_and_wait();
  return emu::self->result;
}
void emu_bar_arrive(int, int) { abort(); } // named barriers: not in this mode
void emu_bar_sync(int, int) { abort(); }
float emu_shfl(float v, int src, bool is_xor) { return emu::shfl(v, src, is_xor); }
void emu_warp_sync() { emu::self->warps[threadIdx.x / KF_EMU_WARP].bar->arrive_and_wait(); }
// kf::bar_sync without hardware (KF_EMU_SOFT_BARRIERS) polls: let the others run.
void emu_spin() { std::this_thread::yield(); }
// kf_sync.cuh's back-off between polls: let the producers run.
void emu_back_off() { std::this_thread::yield(); }
