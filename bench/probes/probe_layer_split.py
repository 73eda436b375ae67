#!/usr/bin/env python3
"""probe_layer_split: a dense layer in three launches by register class,
against the chain of eight kinds and the one-launch layer kind.

Every phase of a dense layer but attention takes 30-62 registers; the layer
kind takes 255 (attention's), so it runs one 256-thread block per SM
(notes/monokernel-plan.md, "Registers"). This probe times the layer as
  pre_attn   (input_norm, qkv_proj, rope_kv_write: one persistent kernel),
  decode_attention (its own kernel), and
  post_attn  (o_proj, post_attn_norm, gate_up_proj, down_proj: one
             persistent kernel)
with programmatic launch between them, checks that it gives the chain's
bits (MLP output, residual, K/V cache), and times chain, layer kind and
split side by side (CUDA graphs, weights rotated through copies larger than
L2, best of two rounds) at 4K tokens, R = 1 and 8.

The two layer kinds come from a copy of the families with two more
"layers" entries, built beside copies of the descriptions (a description's
families/ directory comes before --families):
  mkdir -p D && cp models/qwen3-0.6b.json models/llama-3.1-8b.json D/
  cp -r models/families D/families, then add to D/families/{qwen3,llama}.json
  "layers": {"kind": "pre_attn", "phases": [...]}, {"kind": "post_attn", ...}
  build/gen/kforge build --cache CACHE --arch sm_90a D/qwen3-0.6b.json D/llama-3.1-8b.json

Usage: bench/probes/probe_layer_split.py CACHE [model,...]"""
import math
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
import kf_layer as L  # noqa: E402
from kf_timing import copies_for, release_memory, time_graph  # noqa: E402

PRE = ("input_norm", "qkv_proj", "rope_kv_write")
POST = ("o_proj", "post_attn_norm", "gate_up_proj", "down_proj")
LENGTH = 4096


def named(args, kinds, state):
    n = {f"{k}_{a}": v for k in kinds for a, v in args[k].items()}
    n.update(state.bufs)
    return n


def run_split(kp, ka, kq, s, w, buf, kv, x, res, pos, slots, stream=None):
    args = L.layer_phase_args(s, w, buf, kv, x, res, pos, slots)
    L.call(kp.k, stream, **named(args, PRE, kp))
    L.call(ka, stream, **args["decode_attention"])
    L.call(kq.k, stream, **named(args, POST, kq))
    return buf.mlp


def step_inputs(s, kv, width, r):
    pad = torch.zeros(width - r, dtype=torch.int32, device="cuda")
    return torch.cat([kv.positions(), pad]), torch.cat([kv.slots_for_last_token(), pad])


def same_bits(s, rt, ks, kp, kq, width, r):
    w = L.LayerWeights(s)
    kv = L.PagedKV(s, [LENGTH] * r, extra_pages=0, poison_tail=False)
    x, res0 = L.randn(width, s.hidden), L.randn(width, s.hidden)
    pos, slots = step_inputs(s, kv, width, r)
    k0, v0 = kv.k.clone(), kv.v.clone()
    outs = []
    for split in (False, True):
        kv.k.copy_(k0)
        kv.v.copy_(v0)
        buf, res = L.LayerBuffers(s, width), res0.clone()
        if split:
            run_split(kp, ks["decode_attention"], kq, s, w, buf, kv, x, res, pos, slots)
        else:
            L.run_layer(ks, s, w, buf, kv, x, res, pos, slots)
        torch.cuda.synchronize()
        outs.append([buf.mlp[:r].clone(), res[:r].clone(), kv.k.clone(), kv.v.clone()])
    return all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(*outs))


def main():
    cache = sys.argv[1]
    models = sys.argv[2].split(",") if len(sys.argv) > 2 else ["qwen3-0.6b", "llama-3.1-8b"]
    for model in models:
        s = L.Shape(model, cache)
        rt = L.open_runtime(model, cache)
        for r in (1, 8):
            ks = L.layer_kernels(rt, r)
            kp = L.LayerKernelState(rt.kernel("pre_attn", r))
            kq = L.LayerKernelState(rt.kernel("post_attn", r))
            lk = L.LayerKernelState(rt.kernel("layer", r))
            width = ks["qkv_proj"].width
            same = same_bits(s, rt, ks, kp, kq, width, r)
            kvbytes = r * LENGTH * s.hkv * s.d * 2 * 2
            weights = [L.LayerWeights(s)]
            c = copies_for(weights[0].nbytes() + kvbytes, cap=8)
            weights += [L.LayerWeights(s) for _ in range(c - 1)]
            kvs = [L.PagedKV(s, [LENGTH] * r, extra_pages=0, poison_tail=False) for _ in range(c)]
            steps = [step_inputs(s, kv, width, r) for kv in kvs]
            buf, x, res = L.LayerBuffers(s, width), L.randn(width, s.hidden), L.randn(width, s.hidden)

            def args(i):
                return (s, weights[i % c], buf, kvs[i % c], x, res, *steps[i % c])

            cur = torch.cuda.current_stream
            ways = {
                "chain": lambda i: L.run_layer(ks, *args(i), stream=cur()),
                "layer": lambda i: L.run_layer_kernel(lk, *args(i), stream=cur()),
                "split": lambda i: run_split(kp, ks["decode_attention"], kq, *args(i),
                                             stream=cur()),
            }
            reps = c * max(1, math.ceil(4 / c))
            best = {k: min(time_graph(f, reps, replays=10) for _ in range(2))
                    for k, f in ways.items()}
            print(f"{model} R={r} at {LENGTH}: split bitwise the chain: {same}; "
                  + "  ".join(f"{k} {t * 1e6:.2f} us" for k, t in best.items()), flush=True)
            del weights, kvs, buf, kp, kq, lk
            release_memory()


if __name__ == "__main__":
    main()
