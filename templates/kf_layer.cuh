// kf_layer.cuh: the runtime of a layer kernel, one persistent launch that
// runs a decoder layer's kernels as phases (the generator's "layer" kinds,
// docs/contracts.md). The generated entry defines KF_MONO 1 and
// KF_MONO_THREADS before it includes the templates, then calls
//   begin(area, scratch), phase(...) once per kind in the chain's order,
//   end()
// and every template runs as it does in its own kernel, except that:
// - each of its blocks is a work item (layer::item holds the item's block
//   index; kf_portability.cuh's block_idx_* read it), taken by the layer's
//   blocks in turn: block b runs items b, b + gridDim.x, ... of each phase;
// - its grid_dep_wait waits until every item of the previous phase has
//   arrived (a counter in the sync area, kf_sync.cuh), so what it fetches
//   ahead of that wait (the weights) streams while the previous phase ends;
// - a projection split along K (KSPLIT > 1) meets through global memory
//   (split_*) in the cluster's rank order, so it sums the same bits. Its
//   items run rank KSPLIT - 1 first and rank 0 last: rank 0 waits for the
//   others of its tile, which no block holds behind an item that waits.
//
// Sync area counters: 0 counts the blocks that entered (the launch's epoch
// is the count a block finds divided by the grid's blocks, so the host
// passes no launch number and a captured graph replays correctly), 1 + p
// counts the items of phase p done, then one per split tile of each split
// phase. All only grow; the area is zeroed once (manifest "buffers").
//
// Waits are bounded (kBudget polls): an expired wait marks the status line
// (kf_sync.cuh), every other wait then returns at once, the grid drains and
// leaves (its outputs are garbage), and later launches on the area do
// nothing until the host zeroes it. Every thread polls for itself, so a
// template may call grid_dep_wait from any subset of its threads.
#ifndef KF_LAYER_CUH
#define KF_LAYER_CUH

#if !KF_MONO
#error "kf_layer.cuh is for layer kernels (KF_MONO 1)"
#endif // !KF_MONO

#include "kf_portability.cuh"
#include "kf_sync.cuh"

namespace kf {
namespace layer {

constexpr unsigned kBudget = 1u << 22; // polls, about 2 s at the back-off's cap

struct State {
  void *area;     // the sync area
  float *scratch; // split records
  unsigned long long epoch;
  int wait_counter; // the previous phase's counter; -1: none (the first phase)
  unsigned long long wait_target;
  int split_base; // the current phase's first split counter
#ifdef KF_LAYER_STAMPS
  int phase;  // the phase running
  int waited; // waits stamped in this phase
#endif        // KF_LAYER_STAMPS
};
__shared__ State state;

#ifdef KF_LAYER_STAMPS
// Probe builds only (bench/probes/probe_layer_phases.py builds them with
// --define KF_LAYER_STAMPS=OFFSET): thread 0 of each block writes
// %globaltimer and clock64 at four points of each phase (its start, the
// start and end of its first wait, its end) to the scratch buffer, from
// float OFFSET on: [block][phase 0..15][point 0..3][timer, clock].
KF_DEVICE void stamp(int point) {
  if (threadIdx.x == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    unsigned long long *p =
        reinterpret_cast<unsigned long long *>(state.scratch + KF_LAYER_STAMPS) +
        ((blockIdx.x * 16 + state.phase) * 4 + point) * 2;
    p[0] = t;
    p[1] = (unsigned long long)clock64();
  }
}
#endif // KF_LAYER_STAMPS

KF_DEVICE sync::Sync sync_of() { return sync::Sync{state.area, state.epoch}; }

// One thread's bounded wait (kf_sync.cuh's poll_at_least, kBudget polls).
KF_DEVICE bool poll(int i, unsigned long long target) {
  return sync::poll_at_least(sync_of(), i, target, kBudget);
}

KF_DEVICE void wait_previous_phase() {
  if (state.wait_counter < 0) {
#if KF_HAS_GRID_DEP
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif // KF_HAS_GRID_DEP
    return;
  }
#ifdef KF_LAYER_STAMPS
  const bool first = state.waited == 0;
  if (first)
    stamp(1);
#endif // KF_LAYER_STAMPS
  poll(state.wait_counter, state.wait_target);
#ifdef KF_LAYER_STAMPS
  if (first) {
    stamp(2);
    if (threadIdx.x == 0)
      state.waited = 1;
  }
#endif // KF_LAYER_STAMPS
}

KF_DEVICE float *split_record(int tile, int ksplit, int rank) {
  return state.scratch +
         ((long long)tile * (ksplit - 1) + (rank - 1)) * (kSplitRecordBytes / (int)sizeof(float));
}

KF_DEVICE void split_arrive(int tile) { sync::arrive(sync_of(), state.split_base + tile); }

KF_DEVICE void split_wait(int tile, int arrivals) {
  poll(state.split_base + tile, sync::target(state.epoch, arrivals, arrivals));
}

// The launch's start: false when an earlier launch's wait expired (the
// block must then call end() and return).
KF_DEVICE bool begin(void *area, float *scratch) {
  if (threadIdx.x == 0) {
    state.area = area;
    state.scratch = scratch;
    const sync::Sync s{area, 0};
    unsigned long long before = atomicAdd(sync::counter(s, 0), 1ull);
    state.epoch = before / gridDim.x;
  }
  bar_init();
  __syncthreads();
  return sync::enter(sync_of());
}

KF_DEVICE void end() { sync::leave(sync_of()); }

// Item i of a phase of grid [gx, gy, *] split ksplit ways along x: a split
// tile's ranks run KSPLIT - 1 first and 0 last (see the top).
KF_DEVICE Item item_at(int i, int gx, int gy, int ksplit) {
  Item it;
  if (ksplit > 1) {
    const int tiles = gx / ksplit;
    it.x = i % tiles * ksplit + (ksplit - 1 - i / tiles);
    it.y = it.z = 0;
  } else {
    it.x = i % gx;
    it.y = i / gx % gy;
    it.z = i / (gx * gy);
  }
  it.grid_x = gx;
  return it;
}

// One item, in a function of its own: ptxas then allocates each phase's
// registers alone (inlined into one body, Qwen2.5-7B's layer at width 2
// spilled 28 bytes at the 255-register cap, though no phase does alone).
template <class Run> KF_NOINLINE KF_DEVICE void run_item(const Run &run) { run(); }

__host__ __device__ constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

// Phase `index` (counter 1 + index): `items` work items of a grid [gx, gy,
// gz] of THREADS-thread blocks; prev_items: the previous phase's items (0:
// the first phase); ksplit: the blocks that share a tile along x;
// split_base: its tiles' counters. run() runs the template's entry.
// PACK > 1 (the schema's launch.layer_pack): the block runs PACK items of
// THREADS threads side by side, slot s taking the block's items b * PACK +
// s, + gridDim.x * PACK, ..., each in its own smem_bytes of the dynamic
// shared memory; the slots meet only at the phase's end.
template <int THREADS, int PACK, class Run>
KF_DEVICE void phase(int index, int prev_items, int gx, int gy, int gz, int ksplit, int split_base,
                     int smem_bytes, Run run) {
  static_assert(THREADS % kWarpSize == 0, "whole warps");
  static_assert(PACK == 1 || (PACK <= kMaxPack && PACK * THREADS == KF_MONO_THREADS &&
                              (THREADS & (THREADS - 1)) == 0),
                "a packed phase fills the block with items of a power-of-two size");
  const int items = gx * gy * gz;
  if (threadIdx.x == 0) {
    state.wait_counter = prev_items > 0 ? index : -1; // counter 1 + (index - 1)
    state.wait_target = sync::target(state.epoch, prev_items, prev_items);
    state.split_base = split_base;
    constexpr int kShift = log2_of(PACK > 1 ? THREADS : KF_MONO_THREADS);
    slot_shift = kShift;
    slot_smem_bytes = smem_bytes;
#ifdef KF_LAYER_STAMPS
    state.phase = index;
    state.waited = 0;
#endif // KF_LAYER_STAMPS
  }
#ifdef KF_LAYER_STAMPS
  __syncthreads();
  stamp(0);
#endif // KF_LAYER_STAMPS
  unsigned done = 0;
  if constexpr (PACK == 1) {
    for (int i = (int)blockIdx.x; i < items; i += (int)gridDim.x) {
      __syncthreads(); // the last item is done with shared memory and layer::item
      if (threadIdx.x == 0)
        item[0] = item_at(i, gx, gy, ksplit);
      __syncthreads();
      if (THREADS >= KF_MONO_THREADS || (int)threadIdx.x < THREADS)
        run_item(run);
      ++done;
    }
  } else {
    __syncthreads(); // slot_shift and the phase's state
    const int s = (int)threadIdx.x / THREADS, step = (int)gridDim.x * PACK;
    for (int i = (int)blockIdx.x * PACK + s; i < items; i += step) {
      bar_sync(15 - s, THREADS); // the slot's last item is done with its memory
      if ((int)threadIdx.x % THREADS == 0)
        item[s] = item_at(i, gx, gy, ksplit);
      bar_sync(15 - s, THREADS);
      run_item(run);
    }
    for (int q = 0; q < PACK; ++q) { // the block's items, every slot's
      const int first = (int)blockIdx.x * PACK + q;
      done += first < items ? (items - first + step - 1) / step : 0;
    }
  }
#ifdef KF_LAYER_STAMPS
  __syncthreads();
  stamp(3);
#endif // KF_LAYER_STAMPS
  if (done > 0)
    sync::arrive(sync_of(), 1 + index, done);
}

} // namespace layer
} // namespace kf

#endif // KF_LAYER_CUH
