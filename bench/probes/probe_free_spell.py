#!/usr/bin/env python3
"""Whether reads run slow on this GPU right after the process frees many GB.

On the H200, every read ran about 10% slower for a spell around large frees,
whatever buffer it read (notes/perf/journal.md, v21 runs 7-10; v22 run 3
timed it: about 2 ms per GiB freed): a benchmark timed in that spell reads
low, and comes out bimodal. For each size this allocates that many GiB in
1 GiB pieces, frees them to the driver at once (torch's empty_cache),
allocates a new 1 GiB buffer, and then reads (a torch sum, in bursts of 10)
a buffer allocated at the start and then the new one. It prints the median
of 20 bursts of each, beside the same with nothing freed.

With --trace it times instead how long the spell lasts: after each free
(in a second pass followed by a new 1 GiB allocation) it reads the old
buffer back to back for about a second, one sum at a time, and reports when
the rate came back to within 3% of the rate before the free for 20 sums in
a row, and the GiB freed over that time; a third pass reads the new buffer
instead ("read new": does memory allocated during the spell stay slow?).
The open driver scrubs freed video memory with a copy engine in the
background (scrub on free, on for GH100); a spell that grows with the size
freed, at a steady rate, points there. No verdict: the figures are for
reading.

Usage: python3 bench/probes/probe_free_spell.py [--sizes 0,4,8,16,64] [--trace]
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


def free_gib(n):
    """Allocate n GiB in 1 GiB pieces and hand them back to the driver."""
    gib = 1 << 30
    big = [torch.empty(gib, dtype=torch.uint8, device="cuda") for _ in range(n)]
    torch.cuda.synchronize()
    del big
    torch.cuda.empty_cache()


def spell(t, n, alloc, seconds=1.0, tolerance=0.97, settled=20):
    """(ms until reads settle back, mean GB/s before that, GB/s before the
    free) after freeing n GiB. alloc: None, nothing more; "old", a 1 GiB
    allocation, then t is read; "new", the same, then the new buffer is."""
    size = t.numel() * t.element_size()
    before = read_gbs(t, bursts=5)
    free_gib(n)
    fresh = torch.empty(size // 2, dtype=torch.bfloat16, device="cuda").normal_() if alloc else None
    if alloc == "new":
        t = fresh
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    ends = []
    for _ in range(int(seconds * before * 1e9 / size)):  # queued back to back, no sync between
        t.sum(dtype=torch.float32)
        ends.append(torch.cuda.Event(enable_timing=True))
        ends[-1].record()
    ends[-1].synchronize()
    stamps = [0.0] + [start.elapsed_time(e) for e in ends]
    rates = [size / ((b - a) * 1e-3) / 1e9 for a, b in zip(stamps, stamps[1:])]
    ok = [r >= tolerance * before for r in rates]
    k = next((i for i in range(len(ok)) if all(ok[i:i + settled])), len(ok))
    slow = rates[:k]
    del fresh
    return stamps[k], (sum(slow) / len(slow) if slow else float("nan")), before


def trace(old, sizes):
    print(f"{'freed GiB':>9s} {'then':>9s} {'spell ms':>8s} {'GB/s in it':>10s} {'GB/s before':>11s} "
          f"{'GiB/s freed':>11s}")
    for alloc, what in ((None, "nothing"), ("old", "alloc 1G"), ("new", "read new")):
        for n in sizes:
            torch.cuda.empty_cache()
            time.sleep(1)
            ms, during, before = spell(old, n, alloc)
            rate = n / (ms * 1e-3) if ms > 0 else float("nan")
            print(f"{n:9d} {what:>9s} {ms:8.1f} {during:10.0f} {before:11.0f} {rate:11.0f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0,4,8,16,64", help="GiB freed before each reading (0: none)")
    ap.add_argument("--trace", action="store_true", help="time how long each spell lasts")
    a = ap.parse_args()
    gib = 1 << 30
    old = torch.empty(gib // 2, dtype=torch.bfloat16, device="cuda").normal_()
    read_gbs(old, bursts=3)  # warm up
    if a.trace:
        trace(old, [int(x) for x in a.sizes.split(",")])
        return
    print(f"{torch.cuda.get_device_name()}: GB/s reading 1 GiB, median of 20 bursts of 10 sums")
    print(f"{'freed GiB':>9s} {'old buffer':>10s} {'new buffer':>10s}")
    for n in (int(x) for x in a.sizes.split(",")):
        torch.cuda.empty_cache()
        time.sleep(1)
        if n:
            free_gib(n)
        new = torch.empty(gib // 2, dtype=torch.bfloat16, device="cuda").normal_()
        print(f"{n:9d} {read_gbs(old):10.0f} {read_gbs(new):10.0f}", flush=True)
        del new


if __name__ == "__main__":
    main()
