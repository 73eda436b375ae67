#!/usr/bin/env python3
"""What one link of a chain of dependent launches costs on this GPU.

The Qwen3-0.6B projections take 2.8-3.7 us a launch in a CUDA graph however
few their weight bytes (docs/perf-notes.md, v13): the chain of the wait for
the kernel before, one activation round trip, the block's sum and the store.
This times that chain without a projection around it. Each launch of
kf_chain holds `bytes` of a rotated buffer (its share copied into shared
memory with cp.async before anything waits: the most a projection can do
ahead of its input), then waits for the launch before, reads the word it
wrote, folds in what it held and writes one word for the next launch. How
it waits:
- graph: a plain launch; the graph's edge orders it after the one before;
- pdl: a programmatic launch that releases the next one first and waits in
  griddepcontrol.wait (for the whole launch before to finish), as the
  kforge kernels do;
- flag: a programmatic launch that releases the next one first and never
  calls griddepcontrol.wait: one thread spins (ld.acquire.gpu) on a
  counter that each block of the launch before raises (red.release.gpu)
  after its store. Safe from deadlock because a launch is released only
  once every block of the one before has started.
It prints us per launch, median of 15 replays of a graph of many launches.

Then the same for attention's shape without its arithmetic (kf_split_merge):
width 1's launch of decode_attention (32 ranges x 8 kv heads, 128 threads)
streams --kv-mb a launch, each block holding some of its share ahead of the
wait, writes a 2 KB record, and the last block of each head to finish sums
the head's records, as decode_attention's final merge does; with and
without that merge, and with or without room on the SM for the next
launch's blocks (decode_attention's registers leave none at width 1).
No verdict: the figures are for reading.

Usage: python3 tests/gpu/probe_chain.py [--mb 0,4.2,8.4,12.6] [--blocks 132,264]
                                        [--kv-mb 33.5]
"""
import argparse
import ctypes
import math
import os
import statistics
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kf_direct  # noqa: E402

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

// Attention's shape without its arithmetic: block (s, g) of S x G streams its
// share of kv (holding `hold` words of it in shared memory from before the
// wait), writes a 2 KB record, and with `merge` the last block of group g to
// finish (a counter, as decode_attention's semaphores) sums the group's S
// records into out[g] and zeroes the counter.
extern "C" __global__ void kf_split_merge(const uint4 *kv, long long per, int hold, const unsigned *din,
                                          unsigned *dout, float4 *rec, unsigned *sem, float4 *out,
                                          int merge) {
  extern __shared__ uint4 held[];
  __shared__ unsigned last;
  const int S = gridDim.x, g = blockIdx.y, b = g * S + blockIdx.x;
  asm volatile("griddepcontrol.launch_dependents;");
  const uint4 *p = kv + b * per;
  for (int i = threadIdx.x; i < hold; i += blockDim.x) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(held + i);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(p + i) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned acc = *(volatile const unsigned *)(din + b);
  for (long long i = hold + threadIdx.x; i < per; i += 4 * blockDim.x) {
    uint4 a = __ldcs(p + i), c = make_uint4(0, 0, 0, 0), d = c, e = c;
    if (i + blockDim.x < per) c = __ldcs(p + i + blockDim.x);
    if (i + 2 * blockDim.x < per) d = __ldcs(p + i + 2 * blockDim.x);
    if (i + 3 * blockDim.x < per) e = __ldcs(p + i + 3 * blockDim.x);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w ^ e.x ^ e.y ^ e.z ^ e.w;
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  for (int i = threadIdx.x; i < hold; i += blockDim.x) {
    const uint4 a = held[i];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  rec[b * blockDim.x + threadIdx.x] = make_float4(__uint_as_float(acc & 0x3fffffffu), 1.f, 2.f, 3.f);
  dout[b] = acc;
  if (!merge) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(sem + g, 1u) == (unsigned)S - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < S; s0 += 8) {
    float4 r[8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      r[k] = s0 + k < S ? __ldcg(rec + (g * S + s0 + k) * blockDim.x + threadIdx.x) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      sum.x += r[k].x; sum.y += r[k].y; sum.z += r[k].z; sum.w += r[k].w;
    }
  }
  out[g * blockDim.x + threadIdx.x] = sum;
  if (threadIdx.x == 0) sem[g] = 0;
}
"""

MODES = ("graph", "pdl", "flag")


def build():
    torch.zeros(1, device="cuda")  # the primary context, current, before the driver calls
    d = tempfile.mkdtemp(prefix="kf-chain-")
    cu, cubin = os.path.join(d, "chain.cu"), os.path.join(d, "chain.cubin")
    open(cu, "w").write(SRC)
    cc = torch.cuda.get_device_capability()
    subprocess.run([kf_direct.NVCC, "-O3", f"-gencode=arch=compute_{cc[0]}{cc[1]},code=sm_{cc[0]}{cc[1]}",
                    "-cubin", "-o", cubin, cu], check=True)
    drv = kf_direct._driver()
    mod = ctypes.c_void_p()
    kf_direct._check(drv.cuModuleLoadData(ctypes.byref(mod), open(cubin, "rb").read()), "chain module")
    fns = {}
    for m in MODES + ("split_merge",):
        f = ctypes.c_void_p()
        name = "kf_split_merge" if m == "split_merge" else f"kf_chain_{m}"
        kf_direct._check(drv.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), m)
        kf_direct._check(drv.cuFuncSetAttribute(f, kf_direct._CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                200 * 1024), f"{m} smem")
        fns[m] = f
    return mod, fns


def replay_us(g, launches, replays):
    """us per launch of graph g of `launches` launches, median of replays."""
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / launches)
    return statistics.median(times)


def time_chain(fn, mode, bufs, per, blocks, threads, reps, replays=15):
    """us per launch of `reps` chained launches in one graph (median of replays)."""
    words = [torch.zeros(blocks, dtype=torch.int32, device="cuda") for _ in range(2)]
    cnt = torch.zeros(reps + 1, dtype=torch.int32, device="cuda")
    st = torch.cuda.Stream()
    handle = ctypes.c_void_p(st.cuda_stream)
    shared = per * 16

    def launch(k):
        vals = [ctypes.c_void_p(bufs[k % len(bufs)].data_ptr()), ctypes.c_longlong(per),
                ctypes.c_void_p(words[k % 2].data_ptr()), ctypes.c_void_p(words[(k + 1) % 2].data_ptr()),
                ctypes.c_void_p(cnt.data_ptr() + 4 * k), ctypes.c_void_p(cnt.data_ptr() + 4 * (k + 1)),
                ctypes.c_uint(0 if k == 0 else blocks)]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        if mode == "graph":
            kf_direct._check(kf_direct._driver().cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, shared, handle,
                                                                ptrs, None), "launch")
        else:
            kf_direct.launch_programmatic(fn, (blocks, 1, 1), (threads, 1, 1), shared, handle, ptrs, "launch")

    g = torch.cuda.CUDAGraph()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(g, stream=st):
        cnt.zero_()
        for k in range(reps):
            launch(k)
    g.replay()
    torch.cuda.synchronize()
    if mode == "flag" and int(cnt[reps].item()) != blocks:
        raise SystemExit(f"flag chain: last counter {int(cnt[reps].item())}, expected {blocks}")
    return replay_us(g, reps, replays)


def time_split_merge(fn, bufs, per, hold, reserve, merge, splits=32, groups=8, threads=128, replays=15):
    """us per launch of kf_split_merge chained programmatically in one graph,
    as bench-kernels chains decode_attention; checks the merges ran."""
    blocks = splits * groups
    words = [torch.zeros(blocks, dtype=torch.int32, device="cuda") for _ in range(2)]
    rec = torch.empty(blocks * threads * 4, dtype=torch.float32, device="cuda")
    sem = torch.zeros(groups, dtype=torch.int32, device="cuda")
    out = torch.full((groups * threads * 4,), float("nan"), dtype=torch.float32, device="cuda")
    st = torch.cuda.Stream()
    handle = ctypes.c_void_p(st.cuda_stream)
    shared = max(hold * 16, reserve)
    reps = len(bufs) * max(1, math.ceil(24 / len(bufs)))

    def launch(k):
        vals = [ctypes.c_void_p(bufs[k % len(bufs)].data_ptr()), ctypes.c_longlong(per), ctypes.c_int(hold),
                ctypes.c_void_p(words[k % 2].data_ptr()), ctypes.c_void_p(words[(k + 1) % 2].data_ptr()),
                ctypes.c_void_p(rec.data_ptr()), ctypes.c_void_p(sem.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                ctypes.c_int(merge)]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        kf_direct.launch_programmatic(fn, (splits, groups, 1), (threads, 1, 1), shared, handle, ptrs, "launch")

    g = torch.cuda.CUDAGraph()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.graph(g, stream=st):
        for k in range(reps):
            launch(k)
    g.replay()
    torch.cuda.synchronize()
    if merge and (int(sem.abs().sum().item()) != 0 or
                  not torch.all(out.view(-1, 4)[:, 1] == float(splits)).item()):
        raise SystemExit("split_merge: a merge did not run or left its counter raised")
    return replay_us(g, reps, replays)


def merge_table(fns, kv_mb):
    """Attention's split and last-block merge at decode_attention's width-1
    launch (32 ranges x 8 kv heads, 128 threads), no arithmetic."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench-kernels")
    loader = importlib.machinery.SourceFileLoader("kf_bench_kernels", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    bk = importlib.util.module_from_spec(spec)
    loader.exec_module(bk)
    ceiling = bk.measure_ceilings(bk.Probe())["read_bw"]
    blocks = 256
    per = math.ceil(kv_mb * 1e6 / 16 / blocks)
    nbytes = per * 16 * blocks
    c = max(2, min(32, math.ceil(180e6 / nbytes)))
    bufs = [torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_() for _ in range(c)]
    print(f"split and merge, {nbytes / 1e6:.1f} MB a launch over 32 x 8 blocks of 128 threads "
          f"(read ceiling {ceiling / 1e12:.2f} TB/s): us per launch, % of the ceiling")
    print(f"{'held KB':>7s} {'2 a SM':>6s} {'no merge':>15s} {'last-block merge':>17s}")
    for hold_kb in (0, 16, 32, 64):
        for reserve in (0, 100 * 1024):
            row = []
            for merge in (0, 1):
                t = time_split_merge(fns["split_merge"], bufs, per, hold_kb * 1024 // 16, reserve, merge)
                row.append(f"{t:7.2f} {nbytes / (t * 1e-6) / ceiling * 100:5.1f}%")
            print(f"{hold_kb:7d} {'yes' if reserve else 'no':>6s} {row[0]:>15s} {row[1]:>17s}", flush=True)
    del bufs
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", default="0,4.2,8.4,12.6", help="MB held per launch (weights of 0.6B o, qkv, gate_up)")
    ap.add_argument("--blocks", default="132,264")
    ap.add_argument("--threads", type=int, default=512)
    ap.add_argument("--kv-mb", type=float, default=33.5,
                    help="then the split-and-merge table at this many MB a launch (0: none)")
    a = ap.parse_args()
    mod, fns = build()  # noqa: F841 (the module must outlive the launches)
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
            row = [time_chain(fns[m], m, bufs, per, blocks, a.threads, reps) for m in MODES]
            print(f"{mb:5.1f} {blocks:6d} " + " ".join(f"{t:7.2f}" for t in row), flush=True)
            del bufs
            torch.cuda.empty_cache()
    if a.kv_mb:
        merge_table(fns, a.kv_mb)


if __name__ == "__main__":
    main()
