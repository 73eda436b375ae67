"""GPU tests (H200, sm_90a) of the mixture-of-experts kinds (templates/moe.cuh)
of the shipped MoE models (Qwen3-30B-A3B, Mixtral-8x7B), built by kforge and
loaded through the kforge Python binding.

Needs a CUDA GPU; run by scripts/gpu-test. Cache: KFORGE_TEST_CACHE, else
built with KFORGE_BIN (build/gen/kforge). Fresh random inputs per check
(seed printed; KF_TEST_SEED replays), every output and buffer poisoned
before a launch.

- router: ids equal to an fp32 reference's top-k wherever the reference's
  k-th and (k+1)-th probabilities differ by more than 1e-6 relative (the
  near-ties skipped are counted and printed), weights within 1e-4 relative;
  pad rows' outputs untouched.
- experts (moe_gate_up, moe_down, moe_combine): the MoE MLP against an fp32
  reference of the same math (activations rounded to bf16 where the kernels
  store them): relative error <= 1e-2, for random choices, for rows that all
  choose the same experts and for rows whose experts are disjoint.
- three whole MoE decoder layers in one CUDA graph against an fp32
  reference: every layer's MoE output at cosine >= 0.999.
- batch invariance: every row's router outputs and MLP output are bitwise
  what the row gives alone at width 1, at every width and row count,
  whether its experts are shared with the other rows or not.
"""
import json
import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kf_layer as L  # noqa: E402

TOL = 1e-2
MOE_MODELS = [m for m in os.environ.get("KF_TEST_MOE_MODELS", "qwen3-30b-a3b,mixtral-8x7b").split(",") if m]


def setUpModule():
    if not torch.cuda.is_available():
        raise RuntimeError("tests/gpu needs a CUDA GPU")
    seed = int(os.environ.get("KF_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"[test_moe] seed {seed}, kforge cache {L.kforge_cache()}", flush=True)
    torch.manual_seed(seed)


class MoeShape:
    """What the MoE kinds of a model were built with (its manifest's
    kernels' template parameters, as kforge built them)."""

    def __init__(self, model):
        built = L.built_params(L.kforge_cache(), model)
        gu = built["moe_gate_up"][1]
        rt = built["router"][1]
        self.hidden = int(gu["HIDDEN"])
        self.inter = int(gu["INTERMEDIATE"])
        self.experts = int(gu["EXPERTS"])
        self.topk = int(gu["TOPK"])
        self.renorm = int(rt["RENORM"])
        self.scale = float(rt["SCALE"])
        self.widths = sorted(built["router"][2])


class MoeWeights:
    def __init__(self, s):
        h, i, e = s.hidden, s.inter, s.experts
        self.router = L.randn(e, h, scale=h ** -0.5)
        self.gate_up = L.randn(e, 2 * i, h, scale=h ** -0.5)
        self.down = L.randn(e, h, i, scale=i ** -0.5)


DTYPES = {"float*": torch.float32, "int*": torch.int32, "kf_bf16*": torch.bfloat16}


def buffers_of(k):
    """Device allocations for a kernel's declared buffers (Kernel.buffers),
    typed as their parameters, poisoned (all bits set: NaN as fp32 and
    bf16, -1 as int) unless zero_once."""
    out = {}
    for b in k.buffers:
        dtype = DTYPES[k.params[b.param][1]]
        n = b.bytes // torch.tensor([], dtype=dtype).element_size()
        t = torch.zeros(n, dtype=dtype, device="cuda")
        if not b.zero_once:
            t.view(torch.uint8).fill_(0xFF)
        out[b.arg] = t
    return out


class Moe:
    """The MoE kinds of a model at the width serving `rows`, with their
    buffers (allocated once per width: zero_once ones stay valid)."""
    _kernels = {}

    def __init__(self, rt, model, rows):
        key = (id(rt), model, rows)
        if key not in Moe._kernels:
            ks = {kind: rt.kernel(kind, rows) for kind in ("router", "moe_gate_up", "moe_down",
                                                           "moe_combine")}
            bufs = {kind: buffers_of(k) for kind, k in ks.items()}
            Moe._kernels[key] = (ks, bufs)
        self.ks, self.bufs = Moe._kernels[key]
        self.width = self.ks["router"].width

    def route(self, s, w, x, rows):
        """ids [width x topk] int32 and weights fp32 (pad rows poisoned)."""
        ids = torch.full((self.width, s.topk), -7, dtype=torch.int32, device="cuda")
        wts = torch.full((self.width, s.topk), float("nan"), device="cuda")
        b = self.bufs["router"]
        b["logits"].view(torch.uint8).fill_(0xFF)
        L.call(self.ks["router"], x=x, w=w.router, ids=ids, weights=wts, logits=b["logits"],
               semaphores=b["semaphores"])
        return ids, wts

    def mlp(self, s, w, x, ids, wts):
        """The MoE MLP's output [width x hidden] (pad rows poisoned)."""
        act, y = self.bufs["moe_gate_up"]["act"], self.bufs["moe_down"]["y"]
        act.view(torch.uint8).fill_(0xFF)
        y.view(torch.uint8).fill_(0xFF)
        out = L.poisoned(self.width, s.hidden)
        L.call(self.ks["moe_gate_up"], x=x, w=w.gate_up, ids=ids, act=act)
        L.call(self.ks["moe_down"], act=act, w=w.down, ids=ids, y=y)
        L.call(self.ks["moe_combine"], y=y, weights=wts, out=out)
        return out


def ref_route(s, w, x):
    """fp32 probabilities [rows x experts] and the reference's ranking."""
    logits = x.float() @ w.router.float().t()
    p = torch.softmax(logits, dim=-1)
    # descending probability, ties to the lower index: a stable sort
    order = torch.sort(p, dim=-1, descending=True, stable=True).indices
    return p, order


def ref_mlp(s, w, x, ids, wts):
    out = torch.zeros(x.shape[0], s.hidden, device="cuda", dtype=torch.float64)
    for r in range(x.shape[0]):
        xr = x[r].float()
        for k in range(s.topk):
            e = int(ids[r, k])
            gu = w.gate_up[e].float() @ xr
            act = (F.silu(gu[:s.inter]) * gu[s.inter:]).to(torch.bfloat16).float()
            y = w.down[e].float() @ act
            out[r] += float(wts[r, k]) * y.double()
    return out


def choices(s, rows, how):
    """ids [rows x topk]: "same" (every row the same experts), "disjoint"
    (as few shared as the experts allow), "random" (distinct per row)."""
    if how == "same":
        one = torch.randperm(s.experts, device="cuda")[:s.topk]
        return one.repeat(rows, 1).int()
    if how == "disjoint":
        perm = torch.randperm(s.experts, device="cuda")
        idx = torch.arange(rows * s.topk, device="cuda") % s.experts
        return perm[idx].view(rows, s.topk).int()
    return torch.stack([torch.randperm(s.experts, device="cuda")[:s.topk] for _ in range(rows)]).int()


class MoeTests(unittest.TestCase):
    runtimes = {}
    data = {}

    @classmethod
    def rt(cls, model):
        if model not in cls.runtimes:
            cls.runtimes[model] = L.open_runtime(model)
        return cls.runtimes[model]

    @classmethod
    def model_data(cls, model):
        if model not in cls.data:
            s = MoeShape(model)
            cls.data[model] = (s, MoeWeights(s))
        return cls.data[model]

    def test_router_matches_the_reference_and_is_batch_invariant(self):
        for model in MOE_MODELS:
            s, w = self.model_data(model)
            x8 = L.randn(8, s.hidden)
            alone = {}
            for r in range(8):
                m = Moe(self.rt(model), model, 1)
                ids, wts = m.route(s, w, x8[r:r + 1].contiguous(), 1)
                alone[r] = (ids[0].clone(), wts[0].clone())
            p, order = ref_route(s, w, x8)
            skipped = 0
            for r in range(8):
                ids, wts = alone[r]
                pr = p[r]
                for k in range(s.topk):
                    nxt = pr[order[r, k + 1]] if k + 1 < s.experts else torch.tensor(-1.0)
                    if (pr[order[r, k]] - nxt) <= 1e-6 * pr[order[r, k]]:
                        skipped += 1
                        continue
                    self.assertEqual(int(ids[k]), int(order[r, k]), f"{model} row {r} rank {k}")
                sel = pr[ids.long()]
                ref_w = sel / sel.sum() if s.renorm else sel
                ref_w = ref_w * s.scale
                self.assertLess(L.rel_err(wts, ref_w), 1e-4, f"{model} row {r} weights")
                self.assertEqual(len(set(ids.tolist())), s.topk,
                                 f"{model} row {r}: repeated experts {ids.tolist()}")
            print(f"[test_moe] {model} router: {skipped} near-ties skipped of {8 * s.topk}",
                  flush=True)
            for rows in range(1, 9):
                m = Moe(self.rt(model), model, rows)
                x = L.poisoned(m.width, s.hidden)
                x[:rows] = x8[:rows]
                ids, wts = m.route(s, w, x, rows)
                torch.cuda.synchronize()
                for r in range(rows):
                    self.assertTrue(torch.equal(ids[r], alone[r][0]) and
                                    torch.equal(wts[r], alone[r][1]),
                                    f"{model}: row {r} of {rows} (width {m.width}) differs from alone")
                self.assertTrue((ids[rows:] == -7).all().item(), f"{model}: pad rows' ids written")

    def test_experts_match_the_reference_and_are_batch_invariant(self):
        for model in MOE_MODELS:
            s, w = self.model_data(model)
            for how in ("random", "same", "disjoint"):
                x8 = L.randn(8, s.hidden)
                ids8 = choices(s, 8, how)
                wts8 = torch.rand(8, s.topk, device="cuda") + 0.05
                wts8 = wts8 / wts8.sum(-1, keepdim=True)
                alone = []
                for r in range(8):
                    m = Moe(self.rt(model), model, 1)
                    out = m.mlp(s, w, x8[r:r + 1].contiguous(), ids8[r:r + 1].contiguous(),
                                wts8[r:r + 1].contiguous())
                    alone.append(out[0].clone())
                ref = ref_mlp(s, w, x8, ids8, wts8)
                got = torch.stack(alone)
                self.assertFalse(torch.isnan(got.float()).any().item(), f"{model} {how}: NaN")
                err = L.rel_err(got, ref)
                self.assertLess(err, TOL, f"{model} {how}: relative error {err:.2e}")
                print(f"[test_moe] {model} experts ({how}): rel err {err:.2e}", flush=True)
                for rows in range(1, 9):
                    m = Moe(self.rt(model), model, rows)
                    x = L.poisoned(m.width, s.hidden)
                    x[:rows] = x8[:rows]
                    ids = torch.full((m.width, s.topk), -7, dtype=torch.int32, device="cuda")
                    ids[:rows] = ids8[:rows]
                    wts = torch.full((m.width, s.topk), float("nan"), device="cuda")
                    wts[:rows] = wts8[:rows]
                    out = m.mlp(s, w, x, ids, wts)
                    torch.cuda.synchronize()
                    for r in range(rows):
                        self.assertTrue(torch.equal(out[r], alone[r]),
                                        f"{model} {how}: row {r} of {rows} (width {m.width}) "
                                        f"differs from alone")
                    self.assertTrue(L.is_poison(out[rows:]), f"{model} {how}: pad rows written")

    def test_a_whole_moe_mlp_from_the_router_matches_the_reference(self):
        for model in MOE_MODELS:
            s, w = self.model_data(model)
            for rows in (1, 3, 8):
                m = Moe(self.rt(model), model, rows)
                x = L.randn(m.width, s.hidden)
                ids, wts = m.route(s, w, x, rows)
                out = m.mlp(s, w, x, ids, wts)
                torch.cuda.synchronize()
                ref = ref_mlp(s, w, x[:rows], ids[:rows], wts[:rows])
                cos = L.cosine(out[:rows], ref)
                self.assertGreater(cos, 0.999, f"{model} rows {rows}: cosine {cos:.5f}")

    def test_moe_decoder_layers_match_the_reference(self):
        """Three whole MoE decoder layers (attention through the dense kinds,
        then router, moe_gate_up, moe_down, moe_combine), each with its own
        random weights and paged KV cache, captured in one CUDA graph as a
        server runs a step, against an fp32 reference of the same layers.
        The reference routes with its own probabilities, except that where
        its choice and the kernels' differ only by a near-tie (the expert the
        kernels took is within 1e-2 relative of the reference's k-th
        probability) it follows the kernels (counted and printed): a near-tie
        flipped by bf16 rounding upstream is not an error of the MoE kinds."""
        n_layers = 3
        hist = [300, 37, 1000, 1, 250, 17, 77, 30]
        for model in MOE_MODELS:
            ms, _ = self.model_data(model)
            s = L.Shape(model)
            rt = self.rt(model)
            layers = [(L.LayerWeights(s), MoeWeights(ms)) for _ in range(n_layers)]
            for rows in (1, 5, 8):
                ks = {kind: rt.kernel(kind, rows) for kind in L.KINDS[:6]}
                moe = Moe(rt, model, rows)
                width = moe.width
                kvs, states = [], []
                for _ in range(n_layers):
                    kv = L.PagedKV(s, [h + 1 for h in hist[:rows]], poison_tail=True)
                    states.append((kv.k.clone(), kv.v.clone()))
                    pad = width - rows
                    kv.seq_lens = torch.cat([kv.seq_lens, torch.ones(pad, dtype=torch.int32,
                                                                      device="cuda")])
                    kv.block_tables = torch.cat([kv.block_tables, torch.zeros(
                        pad, kv.block_tables.shape[1], dtype=torch.int32, device="cuda")])
                    kvs.append(kv)
                x, res = L.randn(width, s.hidden), L.randn(width, s.hidden)
                x0, res0 = x[:rows].clone(), res[:rows].clone()
                pos = torch.zeros(width, dtype=torch.int32, device="cuda")
                slots = [torch.zeros(width, dtype=torch.int32, device="cuda") for _ in kvs]
                pos[:rows] = kvs[0].positions()
                for sl, kv in zip(slots, kvs):
                    sl[:rows] = kv.slots_for_last_token()
                bufs = [L.LayerBuffers(s, width) for _ in range(n_layers)]
                ids = [torch.full((width, ms.topk), -7, dtype=torch.int32, device="cuda")
                       for _ in range(n_layers)]
                wts = [torch.full((width, ms.topk), float("nan"), device="cuda")
                       for _ in range(n_layers)]
                outs = [L.poisoned(width, s.hidden) for _ in range(n_layers)]
                for b in (moe.bufs["router"]["logits"], moe.bufs["moe_gate_up"]["act"],
                          moe.bufs["moe_down"]["y"]):
                    b.view(torch.uint8).fill_(0xFF)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                stream = torch.cuda.current_stream()
                with torch.cuda.graph(g, capture_error_mode="relaxed"):
                    h = x
                    for i, (aw, mw) in enumerate(layers):
                        h2 = L.run_attention(ks, s, aw, bufs[i], kvs[i], h, res, pos, slots[i],
                                             stream=stream)
                        b = moe.bufs
                        L.call(moe.ks["router"], stream, x=h2, w=mw.router, ids=ids[i],
                               weights=wts[i], logits=b["router"]["logits"],
                               semaphores=b["router"]["semaphores"])
                        L.call(moe.ks["moe_gate_up"], stream, x=h2, w=mw.gate_up, ids=ids[i],
                               act=b["moe_gate_up"]["act"])
                        L.call(moe.ks["moe_down"], stream, act=b["moe_gate_up"]["act"],
                               w=mw.down, ids=ids[i], y=b["moe_down"]["y"])
                        L.call(moe.ks["moe_combine"], stream, y=b["moe_down"]["y"],
                               weights=wts[i], out=outs[i])
                        h = outs[i]
                g.replay()
                torch.cuda.synchronize()
                rx, rres, followed = x0.float(), res0.float(), 0
                for i, (aw, mw) in enumerate(layers):
                    kv = kvs[i]
                    kv.seq_lens, kv.block_tables = kv.seq_lens[:rows], kv.block_tables[:rows]
                    k0, v0 = states[i]
                    h2, rres, _, _ = L.ref_attention(s, aw, k0, v0, kv, rx, rres, rows)
                    p = torch.softmax(h2 @ mw.router.float().t(), dim=-1)
                    top = torch.sort(p, dim=-1, descending=True, stable=True)
                    got = ids[i][:rows].long()
                    for r in range(rows):
                        kth = top.values[r, ms.topk - 1]
                        theirs = set(got[r].tolist())
                        mine = set(top.indices[r, :ms.topk].tolist())
                        self.assertEqual(len(theirs), ms.topk, f"{model}: repeated experts")
                        for e in theirs - mine:
                            self.assertGreaterEqual(
                                float(p[r, e]), float(kth) * (1 - 1e-2),
                                f"{model} R={rows} layer {i} row {r}: expert {e} is no near-tie")
                            followed += 1
                    sel = torch.gather(p, 1, got)
                    rw = (sel / sel.sum(-1, keepdim=True) if ms.renorm else sel) * ms.scale
                    rx = ref_mlp(ms, mw, h2, got, rw).float()
                    # the layer's MoE output alone (stricter than with the residual added)
                    out, ref = outs[i][:rows].float(), rx
                    c = L.cosine(out, ref)
                    what = f"{model} R={rows} layer {i} MoE output"
                    print(f"[test_moe] {what}: cosine {c:.6f}, relative error "
                          f"{L.rel_err(out, ref):.2e}", flush=True)
                    self.assertGreaterEqual(c, 0.999, f"{what}: cosine {c:.5f}")
                    self.assertTrue(L.is_poison(outs[i][rows:]), f"{what}: pad rows written")
                print(f"[test_moe] {model} R={rows}: {followed} near-tie choices followed",
                      flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
