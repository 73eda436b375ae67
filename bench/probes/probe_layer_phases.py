#!/usr/bin/env python3
"""probe_layer_phases: where a layer kernel's time goes, phase by phase,
from the stamps a probe build writes (kf_layer.cuh, KF_LAYER_STAMPS): for
each phase, when blocks start it, when their first wait returns, when they
end it, against the end of the previous phase (its last block's arrival).

Usage: bench/probes/probe_layer_phases.py CACHE [model...]
CACHE: a build of the models with --define KF_LAYER_STAMPS=4194304 (the
stamps' float offset in the scratch buffer; this probe allocates the room).
R = 1 and 8 at KV length 4096, 4 weight copies in turn (more than L2), the
median of 8 launches after 20 unmeasured ones."""
import math
import os
import statistics
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import kf_layer as L  # noqa: E402

OFFSET = 4194304  # floats, KF_LAYER_STAMPS
MAX_BLOCKS = 1024
COPIES = 4
PHASES = 16


def layer_phases(model, r, cache):
    s = L.Shape(model, cache)
    rt = L.open_runtime(model, cache)
    lk = L.LayerKernelState(rt.kernel("layer", r))
    scratch = lk.bufs["layer_scratch"]
    assert scratch.numel() <= OFFSET, "the scratch is larger than the stamps' offset"
    stamps_n = MAX_BLOCKS * PHASES * 4 * 2 * 2  # floats
    big = torch.full((OFFSET + stamps_n,), float("nan"), dtype=torch.float32, device="cuda")
    lk.bufs["layer_scratch"] = big
    stamps = big[OFFSET:].view(torch.int64).view(MAX_BLOCKS, PHASES, 4, 2)
    length = 4096
    weights = [L.LayerWeights(s) for _ in range(COPIES)]
    width = rt.kernel("qkv_proj", r).width
    kvs = [L.PagedKV(s, [length] * r, extra_pages=0, poison_tail=False) for _ in range(COPIES)]
    bufs = L.LayerBuffers(s, width)
    x, res = L.randn(width, s.hidden), L.randn(width, s.hidden)
    pad = torch.zeros(width - r, dtype=torch.int32, device="cuda")
    pos = [torch.cat([kv.positions(), pad]) for kv in kvs]
    slots = [torch.cat([kv.slots_for_last_token(), pad]) for kv in kvs]

    def launch(i):
        L.run_layer_kernel(lk, s, weights[i % COPIES], bufs, kvs[i % COPIES], x, res, pos[i % COPIES],
                           slots[i % COPIES], stream=torch.cuda.current_stream())

    for i in range(20):
        launch(i)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for i in range(20):
        launch(i)
    ev[1].record()
    torch.cuda.synchronize()
    per_launch = ev[0].elapsed_time(ev[1]) / 20 * 1e3
    runs = []
    for i in range(8):
        stamps.zero_()
        launch(i)
        torch.cuda.synchronize()
        runs.append(stamps.cpu())
    assert lk.status()[0] == 0, f"a wait expired: {lk.status()}"
    return per_launch, runs


def analyse(runs):
    """Per phase: medians over launches of (first start, median start, first
    wait return, median wait return, median end, last end) relative to the
    launch's first stamp, in us; the median wait and work per block."""
    out = {}
    for st in runs:
        used = st[:, 0, 0, 0] != 0
        st = st[used]
        t0 = st[:, 0, 0, 0].min().item()
        for p in range(PHASES):
            if (st[:, p, 0, 0] == 0).all():
                continue
            start = (st[:, p, 0, 0] - t0).double() / 1e3
            end = (st[:, p, 3, 0] - t0).double() / 1e3
            waited = st[:, p, 2, 0] != 0
            wret = (st[waited, p, 2, 0] - t0).double() / 1e3
            wlen = (st[waited, p, 2, 1] - st[waited, p, 1, 1]).double()  # clocks
            work = (st[waited, p, 3, 1] - st[waited, p, 2, 1]).double()
            row = [start.min(), start.median(), wret.min() if len(wret) else math.nan,
                   wret.median() if len(wret) else math.nan, end.median(), end.max(),
                   wlen.median() if len(wlen) else math.nan, work.median() if len(work) else math.nan,
                   float(waited.sum())]
            out.setdefault(p, []).append([float(v) for v in row])
    return {p: [statistics.median(col) for col in zip(*rows)] for p, rows in out.items()}


def main():
    cache = sys.argv[1]
    models = sys.argv[2:] or ["qwen3-0.6b", "llama-3.1-8b"]
    torch.zeros(1, device="cuda")
    clock = torch.cuda.clock_rate() if hasattr(torch.cuda, "clock_rate") else None
    print(f"device {torch.cuda.get_device_name()} SM clock {clock} MHz")
    for model in models:
        for r in (1, 8):
            per_launch, runs = layer_phases(model, r, cache)
            a = analyse(runs)
            print(f"== {model} R={r}: {per_launch:.2f} us per launch (events, no graph)")
            print("phase  start0  startmed  wait0  waitmed  endmed  endmax  waitclk  workclk  waiters  "
                  "gap(wait0-prev endmax)")
            prev_end = None
            for p, v in sorted(a.items()):
                gap = v[2] - prev_end if prev_end is not None else math.nan
                print(f"{p:5d} {v[0]:7.2f} {v[1]:9.2f} {v[2]:6.2f} {v[3]:8.2f} {v[4]:7.2f} {v[5]:7.2f} "
                      f"{v[6]:8.0f} {v[7]:8.0f} {v[8]:8.0f}  {gap:6.2f}")
                prev_end = v[5]
            sys.stdout.flush()


if __name__ == "__main__":
    main()
