#!/usr/bin/env python3
"""How many thread-block clusters of each size run at once on this GPU.

A cluster's blocks must all sit in one GPC, and how many SMs each GPC has
is a property of the chip, so a grid of clusters can fail to run in one wave
where the same grid without clusters would (notes/perf/journal.md, v19). For
each cluster size and blocks-per-SM cap this prints the driver's answer
(cuOccupancyMaxActiveClusters) and a measured one: a grid of BLOCKS blocks
that each spin for 40 us, and how many of them started late (after another
block's spin had ended: they waited for a slot), on how many SMs.

Usage: python3 bench/probes/probe_clusters.py [--sizes 2,4,8,16] [--per-sm 1,2]
                                           [--blocks 256]
Blocks of 128 threads; the cap per SM is set, as the runtime sets it
(rt_cuda.c), by dynamic shared memory that leaves no room for one more.
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher  # noqa: E402

SPIN = r"""
extern "C" __global__ void spin(unsigned long long *out, long long ns) {
  extern __shared__ int pad[];
  unsigned long long t0, t;
  unsigned smid;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  asm("mov.u32 %0, %%smid;" : "=r"(smid));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while ((long long)(t - t0) < ns);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = t0;
    out[2 * blockIdx.x + 1] = smid;
    pad[0] = 0;
  }
}
"""
SPIN_NS = 40000
_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


def load_spin():
    """(module, the spin function), allowed clusters over 8 blocks."""
    mod, fns = launcher.load_probe(SPIN, ["spin"])
    fn = fns["spin"]
    drv = launcher.driver()
    launcher.check(drv.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                   "non-portable cluster sizes")
    return mod, fn


def probe(fn, out, size, per_sm, blocks):
    """(driver's max active clusters, blocks that started late, SMs used)."""
    import torch
    shared = launcher.capped_shared(fn, 0, per_sm)  # the runtime's cap
    drv = launcher.driver()
    launcher.check(drv.cuFuncSetAttribute(fn, launcher.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
                   "dynamic shared memory")
    attr = launcher.LaunchAttr(id=_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    attr.value[0], attr.value[1], attr.value[2] = size, 1, 1
    cfg = launcher.LaunchConfig(blocks, 1, 1, 128, 1, 1, shared, None, ctypes.pointer(attr), 1)
    n = ctypes.c_int()
    launcher.check(drv.cuOccupancyMaxActiveClusters(ctypes.byref(n), fn, ctypes.byref(cfg)),
                   "max active clusters")
    out.fill_(0)
    p, ns = ctypes.c_void_p(out.data_ptr()), ctypes.c_longlong(SPIN_NS)
    args = (ctypes.c_void_p * 2)(ctypes.addressof(p), ctypes.addressof(ns))
    launcher.check(drv.cuLaunchKernelEx(ctypes.byref(cfg), fn, args, None), "launch the probe")
    torch.cuda.synchronize()
    rec = out.view(-1, 2)[:blocks].cpu()
    start = rec[:, 0] - rec[:, 0].min()
    return n.value, int((start >= SPIN_NS).sum()), len(set(rec[:, 1].tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2,4,8,16")
    ap.add_argument("--per-sm", default="1,2")
    ap.add_argument("--blocks", type=int, default=256)
    a = ap.parse_args()
    import torch
    torch.zeros(1, device="cuda")
    cc = torch.cuda.get_device_capability()
    if cc[0] < 9:
        sys.exit(f"probe_clusters: clusters need sm_90 or later; this GPU is sm_{cc[0]}{cc[1]}")
    mod, fn = load_spin()  # noqa: F841 (the module must outlive the launches)
    sms = launcher.device_attr(_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    out = torch.zeros(2 * a.blocks, dtype=torch.int64, device="cuda")
    print(f"{torch.cuda.get_device_name()}: {sms} SMs; {a.blocks} blocks of 128 threads, "
          f"each spinning {SPIN_NS // 1000} us")
    print("cluster  blocks/SM  max clusters (driver)  blocks in them  started late  SMs used")
    for size in (int(s) for s in a.sizes.split(",")):
        for per_sm in (int(s) for s in a.per_sm.split(",")):
            blocks = a.blocks // size * size
            n, late, used = probe(fn, out, size, per_sm, blocks)
            print(f"{size:7d}  {per_sm:9d}  {n:21d}  {n * size:14d}  {late:12d}  {used:8d}")


if __name__ == "__main__":
    main()
