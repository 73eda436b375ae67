// emu.h: runs a kernel body on the host, one std::thread per GPU thread and
// one block at a time, with warps (wavefronts) of KF_EMU_WARP lanes. A
// shuffle meets its warp at a barrier, and reading a lane that is past the
// block's end or has not reached the same shuffle is counted as an error:
// the kind of bug a 64-lane wavefront exposes in code written for 32.
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

static std::unique_ptr<std::barrier<>> block_bar;
static std::unique_ptr<std::barrier<>> named_bar[16]; // 1..15, each for the whole block
static std::vector<Warp> warps;
static thread_local long shuffles;
static std::atomic<long> errors{0};

inline float shfl(float v, int src, bool is_xor) {
  const int lane = threadIdx.x % KF_EMU_WARP;
  Warp &w = warps[threadIdx.x / KF_EMU_WARP];
  w.value[lane] = v;
  w.round[lane] = ++shuffles;
  w.bar->arrive_and_wait();
  const int from = is_xor ? (lane ^ src) : src;
  float r = v;
  if (from < 0 || from >= w.lanes || w.round[from] != shuffles) {
    if (errors++ < 10)
      fprintf(stderr, "emu: block (%u,%u,%u) thread %u: shuffle from lane %d, which %s\n",
              blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, from,
              from < 0 || from >= w.lanes ? "does not exist" : "is at another shuffle");
  } else {
    r = w.value[from];
  }
  w.bar->arrive_and_wait();
  return r;
}

// Runs body() for every thread of every block of the grid (x fastest).
inline void launch(dim3 grid, dim3 block, const std::function<void()> &body) {
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_bar = std::make_unique<std::barrier<>>(n);
        for (int id = 1; id < 16; ++id)
          named_bar[id] = std::make_unique<std::barrier<>>(n);
        warps = std::vector<Warp>((n + KF_EMU_WARP - 1) / KF_EMU_WARP);
        for (size_t i = 0; i < warps.size(); ++i) {
          warps[i].lanes = (int)std::min<unsigned>(KF_EMU_WARP, n - i * KF_EMU_WARP);
          warps[i].bar = std::make_unique<std::barrier<>>(warps[i].lanes);
          for (long &r : warps[i].round)
            r = -1;
        }
        std::vector<std::thread> threads;
        threads.reserve(n);
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([&, t, x, y, z] {
            threadIdx = dim3{t, 0, 0};
            blockIdx = dim3{x, y, z};
            shuffles = 0;
            body();
            // a thread that returns early must not hold the others' barriers
            warps[t / KF_EMU_WARP].bar->arrive_and_drop();
            block_bar->arrive_and_drop();
          });
        for (auto &t : threads)
          t.join();
      }
}

} // namespace emu

void __syncthreads() { emu::block_bar->arrive_and_wait(); }
// Named barriers as the kernels use them: the whole block takes part in each
// phase, some threads arriving without waiting and the rest waiting.
static std::barrier<> &emu_named(int id, int threads) {
  if (id < 1 || id > 15 || threads != (int)(blockDim.x * blockDim.y * blockDim.z)) {
    fprintf(stderr,
            "emu: named barrier %d for %d threads: the emulation has 1..15 for the whole block\n",
            id, threads);
    abort();
  }
  return *emu::named_bar[id];
}
void emu_bar_arrive(int id, int threads) { (void)emu_named(id, threads).arrive(); }
void emu_bar_sync(int id, int threads) { emu_named(id, threads).arrive_and_wait(); }
float emu_shfl(float v, int src, bool is_xor) { return emu::shfl(v, src, is_xor); }
