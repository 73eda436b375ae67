#!/usr/bin/env python3
"""How fast a split decode attention launch could be at most: the same bytes
and the same dependence as decode attention at one or two rows, and none of
its arithmetic.

Decode attention at 8K tokens with one row reaches less than 75% of the read
ceiling (notes/perf/journal.md, v17-v23). Any kernel for it must, per launch:
read each kv head's K and V rows of the row's tokens (256-byte rows, the
heads of a token side by side, as in the paged cache), of which only the
older tokens may be read before griddepcontrol.wait (q comes from the kernel
before); split each head's tokens over several SMs (8 heads, 132 SMs); and
merge each head's ranges through global memory. kf_split_* does the first
two and nothing else: each block of a grid (S ranges, kv heads, rows)
copies up to --hold-kb of its range into shared memory with cp.async ahead
of the wait, reads the dependent word after it, streams the rest of its
range through a ring of --stages 16-byte cp.async copies a thread, folds
everything into one word and writes a record of --record bytes (a range's
softmax state at 4 query heads: 4 x 130 floats). kf_arrive_* then also
arrives on its head's counter as the shipped kernel does, one
acquire-release atomic between two barriers, and the last block resets it:
the cost of the merge up to the final one. The final merge (the last block
reading the others' records) is left out: written here without arithmetic
it took 2-8 us a launch more than the arrival alone, where the shipped
kernel's takes about 1 us (notes/perf/journal.md, v23), so it bounded nothing.

Every shape is timed programmatically back to back in a CUDA graph (K and
V rotated among copies), as bench-kernels times attention; the best shape
of each kind is reported, as a fraction of the read ceiling, beside
bench-kernels' read% and dep% for the same bytes. A bound found by search,
not a proof: a real kernel does all this, its arithmetic and its final
merge.

No verdict: the figures are for reading. It fails if the counters are not
left at zero or the launches wrote nothing.

Usage: python3 bench/probes/probe_attention_bound.py [--length 8192] [--rows 1,2]
"""
import argparse
import ctypes
import itertools
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher  # noqa: E402

SRC = r"""
// Stream a block's pieces i = first + threadIdx.x, + blockDim.x, ... through a
// ring of STAGES cp.async copies a thread: each thread reads back only what it
// copied itself, so no barrier is needed, and the bytes in flight do not
// depend on how the compiler schedules register loads.
template <int ARRIVE, int STAGES>
__device__ void split_arrive(const uint4 *k, const uint4 *v, int length, int hold, const unsigned *din,
                             unsigned *dout, uint4 *ws, unsigned *sem, int rec) {
  extern __shared__ uint4 smem[];
  __shared__ unsigned warp_acc[32];
  const int S = gridDim.x, H = gridDim.y, h = blockIdx.y, T = blockDim.x, tid = threadIdx.x;
  const int per = (length + S - 1) / S;
  const int t0 = blockIdx.x * per, t1 = min(t0 + per, length);
  const int n = t1 > t0 ? (t1 - t0) * 16 : 0;  // 16-byte pieces of K (and as many of V)
  const long long base = (long long)blockIdx.z * length;
  auto piece = [&](int i) -> const uint4 * {
    const int kv = i >= n, j = kv ? i - n : i;
    return (kv ? v : k) + ((base + t0 + (j >> 4)) * H + h) * 16 + (j & 15);
  };
  auto copy = [&](uint4 *dst, int i) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(piece(i)) : "memory");
  };
  asm volatile("griddepcontrol.launch_dependents;");
  const int nh = min(hold, 2 * n);
  for (int i = tid; i < nh; i += T) copy(smem + i, i);
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int bid = (blockIdx.z * H + blockIdx.y) * S + blockIdx.x;
  unsigned acc = *(volatile const unsigned *)(din + bid);
  uint4 *ring = smem + hold;
  int next = nh + tid;
  for (int s = 0; s < STAGES; ++s, next += T) {
    if (next < 2 * n) copy(ring + s * T + tid, next);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  int slot = 0;
  for (int i = nh + tid; i < 2 * n; i += T, next += T) {
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
    const uint4 a = ring[slot * T + tid];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
    if (next < 2 * n) copy(ring + slot * T + tid, next);
    asm volatile("cp.async.commit_group;" ::: "memory");
    slot = slot + 1 == STAGES ? 0 : slot + 1;
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  for (int j = tid; j < nh; j += T) {  // this thread's own copies
    const uint4 a = smem[j];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((tid & 31) == 0) warp_acc[tid >> 5] = acc;
  __syncthreads();
  acc = 0;
  for (int w = 0; w < T >> 5; ++w) acc ^= warp_acc[w];
  uint4 *head_ws = ws + (long long)(blockIdx.z * H + h) * S * rec;
  for (int j = tid; j < rec; j += T) head_ws[blockIdx.x * rec + j] = make_uint4(acc, acc ^ j, acc + j, acc - j);
  if (tid == 0) dout[bid] = acc;
  if (!ARRIVE) return;
  // The arrival as the shipped kernel makes it (kf_portability.cuh's
  // block_arrives_last): one acquire-release atomic between two barriers.
  __syncthreads();
  if (tid == 0) {
    unsigned *counter = sem + blockIdx.z * H + h, before;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
    if (before == (unsigned)(S - 1)) *counter = 0;  // the last: ready for the next launch
  }
  __syncthreads();
}
#define ENTRY(name, arrive, stages)                                                                   \
  extern "C" __global__ void name(const uint4 *k, const uint4 *v, int length, int hold,              \
                                  const unsigned *din, unsigned *dout, uint4 *ws, unsigned *sem,     \
                                  int rec) {                                                         \
    split_arrive<arrive, stages>(k, v, length, hold, din, dout, ws, sem, rec);                       \
  }
ENTRY(kf_split_s4, 0, 4)
ENTRY(kf_split_s8, 0, 8)
ENTRY(kf_arrive_s4, 1, 4)
ENTRY(kf_arrive_s8, 1, 8)
"""

KV_HEADS, HEAD_DIM = 8, 128
STAGES = (4, 8)  # the ring depths built
KINDS = ("split", "arrive")
MAX_SHARED = 200 * 1024


def build():
    return launcher.load_probe(SRC, [f"kf_{m}_s{st}" for m in KINDS for st in STAGES], MAX_SHARED)


def time_shape(bk, fn, kv, length, rows, splits, threads, hold, stages, rec):
    """us per launch, programmatic launches back to back in a graph."""
    blocks = splits * KV_HEADS * rows
    words = [torch.zeros(blocks, dtype=torch.int32, device="cuda") for _ in range(2)]
    ws = torch.zeros(blocks * rec * 4, dtype=torch.int32, device="cuda")
    sem = torch.zeros(KV_HEADS * rows, dtype=torch.int32, device="cuda")

    def launch(i):
        kc, vc = kv[i % len(kv)]
        vals = [ctypes.c_void_p(kc.data_ptr()), ctypes.c_void_p(vc.data_ptr()), ctypes.c_int(length),
                ctypes.c_int(hold // 16), ctypes.c_void_p(words[i % 2].data_ptr()),
                ctypes.c_void_p(words[(i + 1) % 2].data_ptr()), ctypes.c_void_p(ws.data_ptr()),
                ctypes.c_void_p(sem.data_ptr()), ctypes.c_int(rec)]
        launcher.launch(fn, (splits, KV_HEADS, rows), (threads, 1, 1), hold + stages * threads * 16, vals,
                        programmatic=True)  # on torch's current stream: the capturing one

    reps = len(kv) * max(1, math.ceil(48 / len(kv)))
    t = bk.time_graph(launch, reps)
    if int(sem.abs().sum().item()) != 0:
        raise SystemExit(f"attention bound: counters not reset (S={splits}, {threads} threads)")
    if int(torch.count_nonzero(words[reps % 2])) < blocks // 2:  # xors of random bytes
        raise SystemExit(f"attention bound: the launches wrote nothing (S={splits}, {threads} threads)")
    return t * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, default=8192)
    ap.add_argument("--rows", default="1,2")
    ap.add_argument("--splits", default="16,24,32,33,48,64,66",
                    help="ranges per kv head at one row; at R rows S // R a row (the same blocks a launch)")
    ap.add_argument("--threads", default="128,256,512")
    ap.add_argument("--hold-kb", default="0,16,32,64")
    ap.add_argument("--stages", default="4,8")
    ap.add_argument("--record", type=int, default=4 * (HEAD_DIM + 2) * 4, help="bytes of a range's record")
    a = ap.parse_args()
    if any(int(x) not in STAGES for x in a.stages.split(",")):
        ap.error(f"--stages: built for {', '.join(map(str, STAGES))}")
    mod, fns = build()  # noqa: F841 (the module must outlive the launches)
    bk = launcher.timing
    probe = bk.Probe()
    ceiling = bk.measure_ceilings(probe)["read_bw"]
    rec = a.record // 16
    print(f"{torch.cuda.get_device_name()}: read ceiling {ceiling / 1e12:.2f} TB/s; "
          f"us per launch (median of 15 replays of chained programmatic launches)")
    for rows in (int(x) for x in a.rows.split(",")):
        kvbytes = 2 * rows * a.length * KV_HEADS * HEAD_DIM * 2
        read_frac, dep_frac = bk.read_fractions(probe, kvbytes, ceiling)
        c = bk.copies_for(kvbytes)
        n = rows * a.length * KV_HEADS * HEAD_DIM
        kv = [(torch.randn(n, device="cuda").to(torch.bfloat16), torch.randn(n, device="cuda").to(torch.bfloat16))
              for _ in range(c)]
        print(f"\nL = {a.length}, R = {rows}: {kvbytes / 1e6:.1f} MB a launch; read% {read_frac * 100:.1f}, "
              f"dep% {dep_frac * 100:.1f}")
        print(f"{'S':>3s} {'threads':>7s} {'stages':>6s} {'hold KB':>7s} "
              + " ".join(f"{k + ' us':>9s} {'%':>5s}" for k in KINDS))
        best = {}
        for s1, threads, stages, hold_kb in itertools.product(
                *[[int(x) for x in arg.split(",")] for arg in (a.splits, a.threads, a.stages, a.hold_kb)]):
            splits, hold = max(1, s1 // rows), hold_kb * 1024
            if hold + stages * threads * 16 > MAX_SHARED:
                continue
            row = []
            for kind in KINDS:
                t = time_shape(bk, fns[f"kf_{kind}_s{stages}"], kv, a.length, rows, splits, threads, hold, stages,
                               rec)
                row.append(t)
                if t < best.get(kind, (math.inf,))[0]:
                    best[kind] = (t, splits, threads, stages, hold_kb)
            pct = [kvbytes / (t * 1e-6) / ceiling * 100 for t in row]
            print(f"{splits:3d} {threads:7d} {stages:6d} {hold_kb:7d} "
                  + " ".join(f"{t:9.2f} {p:5.1f}" for t, p in zip(row, pct)), flush=True)
        for kind, (t, splits, threads, stages, hold_kb) in best.items():
            print(f"best {kind}: {t:.2f} us, {kvbytes / (t * 1e-6) / ceiling * 100:.1f}% "
                  f"(S={splits}, {threads} threads, {stages} stages, {hold_kb} KB held)")
        del kv
        bk.release_memory()


if __name__ == "__main__":
    main()
