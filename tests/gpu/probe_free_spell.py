#!/usr/bin/env python3
"""Whether reads run slow on this GPU right after the process frees many GB.

On the H200, every read ran about 10% slower for a spell around large frees,
whatever buffer it read (docs/perf-notes.md, v21 runs 7-10): a benchmark
timed in that spell reads low, and comes out bimodal. For each size this
allocates that many GiB in 1 GiB pieces, frees them to the driver at once
(torch's empty_cache), allocates a new 1 GiB buffer, and then reads (a torch
sum, in bursts of 10) a buffer allocated at the start and then the new one.
It prints the median of 20 bursts of each, beside the same with nothing
freed. No verdict: the figures are for reading.

Usage: python3 tests/gpu/probe_free_spell.py [--sizes 0,4,8,16,64]
"""
import argparse
import statistics
import time

import torch


def read_gbs(t, bursts=20, per_burst=10):
    """Median GB/s of `bursts` bursts of `per_burst` sums over t."""
    out = []
    for _ in range(bursts):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(per_burst):
            t.sum(dtype=torch.float32)
        b.record()
        b.synchronize()
        out.append(t.numel() * t.element_size() * per_burst / (a.elapsed_time(b) * 1e-3) / 1e9)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0,4,8,16,64", help="GiB freed before each reading (0: none)")
    a = ap.parse_args()
    gib = 1 << 30
    old = torch.empty(gib // 2, dtype=torch.bfloat16, device="cuda").normal_()
    read_gbs(old, bursts=3)  # warm up
    print(f"{torch.cuda.get_device_name()}: GB/s reading 1 GiB, median of 20 bursts of 10 sums")
    print(f"{'freed GiB':>9s} {'old buffer':>10s} {'new buffer':>10s}")
    for n in (int(x) for x in a.sizes.split(",")):
        torch.cuda.empty_cache()
        time.sleep(1)
        if n:
            big = [torch.empty(gib, dtype=torch.uint8, device="cuda") for _ in range(n)]
            torch.cuda.synchronize()
            del big
            torch.cuda.empty_cache()
        new = torch.empty(gib // 2, dtype=torch.bfloat16, device="cuda").normal_()
        print(f"{n:9d} {read_gbs(old):10.0f} {read_gbs(new):10.0f}", flush=True)
        del new


if __name__ == "__main__":
    main()
