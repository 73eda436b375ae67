#!/usr/bin/env python3
"""What one link of a chain of dependent launches costs on this GPU.

The Qwen3-0.6B projections take 2.8-3.7 us a launch in a CUDA graph however
few their weight bytes (notes/perf/journal.md, v13), which v13 read as the
chain from one launch to the next: the wait for the kernel before, one
activation round trip, the block's sum and the store. This times that chain
without a projection around it. Each launch of kf_chain holds --mb MB of a
rotated buffer (its share copied into shared memory with cp.async before
anything waits: the most a projection can do ahead of its input), then
waits for the launch before, reads the word it wrote, folds in what it held
and writes one word for the next launch. How it waits:
- graph: a plain launch; the graph's edge orders it after the one before;
- pdl: a programmatic launch that releases the next one first and waits in
  griddepcontrol.wait (for the whole launch before to finish), as the
  kforge kernels do;
- flag: a programmatic launch that releases the next one first and never
  calls griddepcontrol.wait: one thread spins (ld.acquire.gpu) on a
  counter that each block of the launch before raises (red.release.gpu)
  after its store. Safe from deadlock because a launch is released only
  once every block of the one before has started.
It prints us per launch: bench-kernels' time_graph (median of 15 replays
of a graph of many launches).
No verdict: the figures are for reading.

Usage: python3 bench/probes/probe_chain.py [--mb 0,4.2,8.4,12.6] [--blocks 132,264]
"""
import argparse
import ctypes
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher  # noqa: E402

SRC = r"""
template <int MODE>  // 0 graph, 1 pdl, 2 flag
__device__ void chain(const uint4 *w, long long per, const unsigned *din, unsigned *dout,
                      const unsigned *cnt_in, unsigned *cnt_out, unsigned need) {
  extern __shared__ uint4 held[];
  __shared__ unsigned warp_acc[32];
  if (MODE) asm volatile("griddepcontrol.launch_dependents;");
  const uint4 *p = w + blockIdx.x * per;
  for (long long i = threadIdx.x; i < per; i += blockDim.x) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(held + i);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(p + i) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  if (MODE == 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (MODE == 2) {
    if (threadIdx.x == 0) {
      unsigned v;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(cnt_in) : "memory");
      } while (v < need);
    }
    __syncthreads();
  }
  unsigned acc = *(volatile const unsigned *)(din + blockIdx.x);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  for (long long i = threadIdx.x; i < per; i += blockDim.x) {
    const uint4 a = held[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < (int)(blockDim.x >> 5); ++k) acc ^= warp_acc[k];
    dout[blockIdx.x] = acc;
    if (MODE == 2) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt_out) : "memory");
  }
}
#define ENTRY(name, mode)                                                                      \
  extern "C" __global__ void name(const uint4 *w, long long per, const unsigned *din,         \
                                  unsigned *dout, const unsigned *ci, unsigned *co, unsigned need) { \
    chain<mode>(w, per, din, dout, ci, co, need);                                              \
  }
ENTRY(kf_chain_graph, 0)
ENTRY(kf_chain_pdl, 1)
ENTRY(kf_chain_flag, 2)
"""

MODES = ("graph", "pdl", "flag")


def build():
    mod, fns = launcher.load_probe(SRC, [f"kf_chain_{m}" for m in MODES], 200 * 1024)
    return mod, {m: fns[f"kf_chain_{m}"] for m in MODES}


def time_chain(bk, fn, mode, bufs, per, blocks, threads, reps):
    """us per launch of `reps` chained launches (bench-kernels' time_graph)."""
    words = [torch.zeros(blocks, dtype=torch.int32, device="cuda") for _ in range(2)]
    cnt = torch.zeros(reps + 1, dtype=torch.int32, device="cuda")
    shared = per * 16

    def launch(k):
        if k == 0:
            cnt.zero_()  # a node of the graph: each replay's counters start at 0
        vals = [ctypes.c_void_p(bufs[k % len(bufs)].data_ptr()), ctypes.c_longlong(per),
                ctypes.c_void_p(words[k % 2].data_ptr()), ctypes.c_void_p(words[(k + 1) % 2].data_ptr()),
                ctypes.c_void_p(cnt.data_ptr() + 4 * k), ctypes.c_void_p(cnt.data_ptr() + 4 * (k + 1)),
                ctypes.c_uint(0 if k == 0 else blocks)]
        launcher.launch(fn, (blocks, 1, 1), (threads, 1, 1), shared, vals, programmatic=mode != "graph")

    t = bk.time_graph(launch, reps)
    if mode == "flag" and int(cnt[reps].item()) != blocks:
        raise SystemExit(f"flag chain: last counter {int(cnt[reps].item())}, expected {blocks}")
    return t * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", default="0,4.2,8.4,12.6", help="MB held per launch (weights of 0.6B o, qkv, gate_up)")
    ap.add_argument("--blocks", default="132,264")
    ap.add_argument("--threads", type=int, default=512)
    a = ap.parse_args()
    mod, fns = build()  # noqa: F841 (the module must outlive the launches)
    bk = launcher.timing
    print(f"{torch.cuda.get_device_name()}: us per launch in a graph of chained launches "
          f"(median of 15 replays; {a.threads} threads a block)")
    print(f"{'MB':>5s} {'blocks':>6s} " + " ".join(f"{m:>7s}" for m in MODES))
    for mb in (float(x) for x in a.mb.split(",")):
        for blocks in (int(x) for x in a.blocks.split(",")):
            per = math.ceil(mb * 1e6 / 16 / blocks)
            if per * 16 > 200 * 1024:
                continue
            nbytes = max(per * 16 * blocks, 16)
            c = max(2, min(64, math.ceil(180e6 / nbytes)))
            bufs = [torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_() for _ in range(c)]
            reps = c * max(1, math.ceil(48 / c))
            row = [time_chain(bk, fns[m], m, bufs, per, blocks, a.threads, reps) for m in MODES]
            print(f"{mb:5.1f} {blocks:6d} " + " ".join(f"{t:7.2f}" for t in row), flush=True)
            del bufs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
