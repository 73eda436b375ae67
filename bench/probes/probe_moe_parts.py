#!/usr/bin/env python3
"""probe_moe_parts: where the MoE expert path's time goes: moe_gate_up,
moe_down and moe_combine timed alone (CUDA-graph replays over 8 sets of
random choices), against each part's bytes, for the shipped cache and any
variants (KF_BENCH_VARIANTS="label=cache,...").

Usage: bench/probes/probe_moe_parts.py [models...]"""
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import kf_layer as L  # noqa: E402
import test_moe as M  # noqa: E402
from kf_timing import Probe, measure_ceilings, time_graph  # noqa: E402

SETS = 8


def parts(label, rt, model, s, w, ceiling, widths):
    for r in widths:
        m = M.Moe(rt, model, r, s)
        xs = [L.randn(m.width, s.hidden) for _ in range(SETS)]
        ids = []
        for _ in range(SETS):
            t = torch.zeros(m.width, s.topk, dtype=torch.int32, device="cuda")
            t[:r] = M.choices(s, r, "random")
            ids.append(t)
        wts = [torch.full((m.width, s.topk), 1.0 / s.topk, device="cuda") for _ in range(SETS)]
        distinct = sum(len(set(t[:r].flatten().tolist())) for t in ids) / SETS
        act, y = m.bufs["moe_gate_up"]["act"], m.bufs["moe_down"]["y"]
        out = L.poisoned(m.width, s.hidden)
        gu = lambda i: L.call(m.ks["moe_gate_up"], x=xs[i % SETS], w=w.gate_up, ids=ids[i % SETS], act=act)
        dn = lambda i: L.call(m.ks["moe_down"], act=act, w=w.down, ids=ids[i % SETS], y=y)
        shared = m.bufs["shared"]["y"] if s.shared else None
        cb = lambda i: L.call(m.ks["moe_combine"], y=y, weights=wts[i % SETS], shared=shared,
                              out=out)
        gu(0)
        t_gu, t_dn, t_cb = (time_graph(f, SETS, replays=10) for f in (gu, dn, cb))
        b_gu = distinct * 2 * s.inter * s.hidden * 2
        b_dn = distinct * s.inter * s.hidden * 2
        print(f"{label:8s} {model:14s} R={r} experts {distinct:4.1f}  gate_up {t_gu*1e6:7.1f} us "
              f"{b_gu/t_gu/ceiling*100:5.1f}%  down {t_dn*1e6:7.1f} us {b_dn/t_dn/ceiling*100:5.1f}%  "
              f"combine {t_cb*1e6:5.1f} us", flush=True)


def main():
    models = sys.argv[1:] or M.MOE_MODELS
    torch.zeros(1, device="cuda")
    ceiling = measure_ceilings(Probe())["read_bw"]
    print(f"read ceiling {ceiling/1e12:.3f} TB/s")
    caches = [("shipped", L.kforge_cache())]
    for spec in filter(None, os.environ.get("KF_BENCH_VARIANTS", "").split(",")):
        caches.append(tuple(spec.split("=", 1)))
    for model in models:
        s = M.MoeShape(model)
        w = M.MoeWeights(s)
        for label, cache in caches:
            rt = L.kforge().Runtime(cache, model, device=0)
            parts(label, rt, model, s, w, ceiling, [1, 2, 4, 8])
        del w


if __name__ == "__main__":
    main()
