"""GPU tests (H200, sm_90a) of the mixture-of-experts kinds (templates/moe.cuh)
of the shipped MoE models (Qwen3-30B-A3B, Mixtral-8x7B, GLM-4.5-Air: softmax
and sigmoid routers, with and without a shared expert), built by kforge and
loaded through the kforge Python binding.

Needs a CUDA GPU; run by scripts/gpu-test. Cache: KFORGE_TEST_CACHE, else
built with KFORGE_BIN (build/gen/kforge). Fresh random inputs per check
(seed printed; KF_TEST_SEED replays), every output and buffer poisoned
before a launch.

- router: ids equal to an fp32 reference's top-k wherever the reference's
  k-th and (k+1)-th choice keys (softmax probabilities, or sigmoid scores
  plus the correction bias) differ by more than 1e-6 relative (the
  near-ties skipped are counted and printed), weights within 1e-4 relative;
  pad rows' outputs untouched.
- experts (moe_gate_up, moe_down, the shared expert's shared_gate_up and
  shared_down where the model has one, moe_combine): the MoE MLP against an fp32
  reference of the same math (activations rounded to bf16 where the kernels
  store them): relative error <= 1e-2, for random choices, for rows that all
  choose the same experts and for rows whose experts are disjoint.
- three whole decoder layers (the kinds the manifest's layer types name for
  layers 0, 1 and 2: GLM-4.5-Air's dense first layer, then MoE layers) in
  one CUDA graph against an fp32 reference: every layer's MLP output at
  cosine >= 0.999.
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
MOE_MODELS = [m for m in os.environ.get(
    "KF_TEST_MOE_MODELS", "qwen3-30b-a3b,mixtral-8x7b,glm-4.5-air").split(",") if m]


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
        self.sigmoid = built["router"][0] == "moe_router_sigmoid"
        # the shared expert's intermediate size; 0: none
        self.shared = (int(built["shared_gate_up"][1]["INTERMEDIATE"])
                       if "shared_gate_up" in built else 0)
        self.widths = sorted(built["router"][2])


class MoeWeights:
    def __init__(self, s):
        h, i, e = s.hidden, s.inter, s.experts
        self.router = L.randn(e, h, scale=h ** -0.5)
        # the sigmoid router's correction bias: large enough to change choices
        self.router_bias = 0.1 * torch.randn(e, device="cuda") if s.sigmoid else None
        self.gate_up = L.randn(e, 2 * i, h, scale=h ** -0.5)
        self.down = L.randn(e, h, i, scale=i ** -0.5)
        j = s.shared
        self.shared_gate_up = L.randn(2 * j, h, scale=h ** -0.5) if j else None
        self.shared_down = L.randn(h, j, scale=j ** -0.5) if j else None


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


MOE_KINDS = ("router", "moe_gate_up", "moe_down", "shared_gate_up", "shared_down", "moe_combine")


class Moe:
    """The MoE kinds of a model at the width serving `rows` (the shared
    expert's where it has one), with their buffers (allocated once per
    width: zero_once ones stay valid) and the shared expert's activations."""
    _kernels = {}

    def __init__(self, rt, model, rows, s):
        key = (id(rt), model, rows)
        if key not in Moe._kernels:
            kinds = [k for k in MOE_KINDS if s.shared or not k.startswith("shared_")]
            ks = {kind: rt.kernel(kind, rows) for kind in kinds}
            bufs = {kind: buffers_of(k) for kind, k in ks.items()}
            scratch = [bufs[kind][b.arg] for kind, k in ks.items() for b in k.buffers
                       if not b.zero_once]
            width = ks["router"].width
            if s.shared:
                bufs["shared"] = {"act": L.poisoned(width, s.shared),
                                  "y": L.poisoned(width, s.hidden)}
                scratch += list(bufs["shared"].values())
            Moe._kernels[key] = (ks, bufs, scratch)
        self.ks, self.bufs, self.scratch = Moe._kernels[key]
        self.kinds = tuple(self.ks)
        self.width = self.ks["router"].width

    def poison(self):
        """Every intermediate buffer but the zero_once ones poisoned (all bits set)."""
        for t in self.scratch:
            t.view(torch.uint8).fill_(0xFF)

    def launch_route(self, w, x, ids, wts, stream=None):
        b = self.bufs["router"]
        L.call(self.ks["router"], stream, x=x, w=w.router, bias=w.router_bias, ids=ids,
               weights=wts, logits=b["logits"], semaphores=b["semaphores"])

    def launch_mlp(self, w, x, ids, wts, out, stream=None):
        """The MoE kinds after the router, in the layer type's order."""
        act, y = self.bufs["moe_gate_up"]["act"], self.bufs["moe_down"]["y"]
        sh = self.bufs.get("shared")
        L.call(self.ks["moe_gate_up"], stream, x=x, w=w.gate_up, ids=ids, act=act)
        L.call(self.ks["moe_down"], stream, act=act, w=w.down, ids=ids, y=y)
        if sh:
            L.call(self.ks["shared_gate_up"], stream, x=x, w=w.shared_gate_up, out=sh["act"])
            L.call(self.ks["shared_down"], stream, x=sh["act"], w=w.shared_down, y=sh["y"])
        L.call(self.ks["moe_combine"], stream, y=y, weights=wts,
               shared=sh["y"] if sh else None, out=out)

    def route(self, s, w, x, rows):
        """ids [width x topk] int32 and weights fp32 (pad rows poisoned)."""
        ids = torch.full((self.width, s.topk), -7, dtype=torch.int32, device="cuda")
        wts = torch.full((self.width, s.topk), float("nan"), device="cuda")
        self.poison()
        self.launch_route(w, x, ids, wts)
        return ids, wts

    def mlp(self, s, w, x, ids, wts):
        """The MoE MLP's output [width x hidden] (pad rows poisoned)."""
        self.poison()
        out = L.poisoned(self.width, s.hidden)
        self.launch_mlp(w, x, ids, wts, out)
        return out


def ref_route(s, w, x):
    """fp32 (scores, keys) [rows x experts] and the reference's ranking:
    scores are the softmax probabilities or the sigmoids, keys what the
    choice ranks (the scores, plus the correction bias for sigmoid)."""
    logits = x.float() @ w.router.float().t()
    if s.sigmoid:
        score = torch.sigmoid(logits)
        key = score + w.router_bias
    else:
        score = key = torch.softmax(logits, dim=-1)
    # descending key, ties to the lower index: a stable sort
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    return score, key, order


def ref_weights(s, score, ids):
    """The routing weights of the chosen experts ids [rows x topk]."""
    sel = torch.gather(score, 1, ids.long())
    return (sel / sel.sum(-1, keepdim=True) if s.renorm else sel) * s.scale


def ref_expert(gate_up, down, xr, inter):
    """One SiLU MLP in fp32 with its activation rounded to bf16 (as stored)."""
    gu = gate_up.float() @ xr
    act = (F.silu(gu[:inter]) * gu[inter:]).to(torch.bfloat16).float()
    return down.float() @ act


def ref_mlp(s, w, x, ids, wts):
    out = torch.zeros(x.shape[0], s.hidden, device="cuda", dtype=torch.float64)
    for r in range(x.shape[0]):
        xr = x[r].float()
        for k in range(s.topk):
            e = int(ids[r, k])
            out[r] += float(wts[r, k]) * ref_expert(w.gate_up[e], w.down[e], xr, s.inter).double()
        if s.shared:
            # the shared expert's output is stored as bf16 before the combine
            y = ref_expert(w.shared_gate_up, w.shared_down, xr, s.shared)
            out[r] += y.to(torch.bfloat16).double()
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


class LayerStep:
    """The arguments of a layer kernel lk (a kind of the family's "layers")
    for one step, by name: the dense kinds' as kf_layer gives them, the MoE
    kinds' over fresh poisoned outputs, and the layer's buffers lb
    (buffers_of(lk), kept per width: their zero_once parts stay valid)."""

    def __init__(self, s, ms, aw, mw, lk, lb, kv, x, res, pos, slots):
        width = lk.width
        self.buf = buf = L.LayerBuffers(s, width)
        named = {f"{k}_{n}": v for k, a in L.layer_phase_args(
            s, aw, buf, kv, x, res, pos, slots).items() for n, v in a.items()}
        self.ids = torch.full((width, ms.topk), -7, dtype=torch.int32, device="cuda")
        self.wts = torch.full((width, ms.topk), float("nan"), device="cuda")
        self.out = L.poisoned(width, s.hidden)
        sh_act = L.poisoned(width, ms.shared) if ms.shared else None
        sh_y = L.poisoned(width, s.hidden)
        act, y = lb.get("moe_gate_up_act"), lb.get("moe_down_y")
        moe = {"router": dict(x=buf.h2, w=mw.router, bias=mw.router_bias, ids=self.ids,
                              weights=self.wts),
               "moe_gate_up": dict(x=buf.h2, w=mw.gate_up, ids=self.ids, act=act),
               "moe_down": dict(act=act, w=mw.down, ids=self.ids, y=y),
               "shared_gate_up": dict(x=buf.h2, w=mw.shared_gate_up, out=sh_act),
               "shared_down": dict(x=sh_act, w=mw.shared_down, y=sh_y),
               "moe_combine": dict(y=y, weights=self.wts, shared=sh_y, out=self.out)}
        named.update({f"{k}_{n}": v for k, a in moe.items() for n, v in a.items()})
        named.update(lb)
        params = L.arg_names(lk)
        self.named = {n: v for n, v in named.items() if n in params}


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
                m = Moe(self.rt(model), model, 1, s)
                ids, wts = m.route(s, w, x8[r:r + 1].contiguous(), 1)
                alone[r] = (ids[0].clone(), wts[0].clone())
            score, key, order = ref_route(s, w, x8)
            skipped = 0
            for r in range(8):
                ids, wts = alone[r]
                kr = key[r]
                for k in range(s.topk):
                    nxt = kr[order[r, k + 1]] if k + 1 < s.experts else torch.tensor(-1e30)
                    if (kr[order[r, k]] - nxt) <= 1e-6 * kr[order[r, k]].abs():
                        skipped += 1
                        continue
                    self.assertEqual(int(ids[k]), int(order[r, k]), f"{model} row {r} rank {k}")
                ref_w = ref_weights(s, score[r:r + 1], ids[None])[0]
                self.assertLess(L.rel_err(wts, ref_w), 1e-4, f"{model} row {r} weights")
                self.assertEqual(len(set(ids.tolist())), s.topk,
                                 f"{model} row {r}: repeated experts {ids.tolist()}")
            print(f"[test_moe] {model} router: {skipped} near-ties skipped of {8 * s.topk}",
                  flush=True)
            if s.sigmoid:
                # the bias must have mattered, or a router ignoring it would pass
                by_score = torch.sort(score, dim=-1, descending=True, stable=True).indices
                moved = sum(set(by_score[r, :s.topk].tolist()) != set(order[r, :s.topk].tolist())
                            for r in range(8))
                print(f"[test_moe] {model} router: the correction bias changed the choice of "
                      f"{moved} of 8 rows", flush=True)
                self.assertGreater(moved, 0, f"{model}: the test's bias changed no choice")
            for rows in range(1, 9):
                m = Moe(self.rt(model), model, rows, s)
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
                    m = Moe(self.rt(model), model, 1, s)
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
                    m = Moe(self.rt(model), model, rows, s)
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
                m = Moe(self.rt(model), model, rows, s)
                x = L.randn(m.width, s.hidden)
                ids, wts = m.route(s, w, x, rows)
                out = m.mlp(s, w, x, ids, wts)
                torch.cuda.synchronize()
                ref = ref_mlp(s, w, x[:rows], ids[:rows], wts[:rows])
                cos = L.cosine(out[:rows], ref)
                self.assertGreater(cos, 0.999, f"{model} rows {rows}: cosine {cos:.5f}")

    def test_layer_kernels_are_bitwise_the_chain(self):
        """Every layer kind of the MoE models (one launch per decoder layer:
        attention, router and experts as phases; GLM-4.5-Air's dense_layer
        and moe_layer) gives the bits of the chain of its kinds on the same
        inputs, by the binding's check mode (Runtime.check_layer), at rows
        1, 3 and 8, twice on one sync area; the outputs are written."""
        checked = 0
        for model in MOE_MODELS:
            ms, mw = self.model_data(model)
            s = L.Shape(model)
            rt = self.rt(model)
            built = L.built_params(L.kforge_cache(), model)
            layer_kinds = [k for k in built if k == "layer" or k.endswith("_layer")]
            if not layer_kinds:
                print(f"[test_moe] {model}: no layer kind in its description", flush=True)
                continue
            aw = L.LayerWeights(s)
            for kind in layer_kinds:
                state = {}  # per width: the layer's buffers, its sync area zeroed once
                for rows in (1, 3, 8):
                    lk = rt.kernel(kind, rows)
                    if lk.width not in state:
                        state[lk.width] = buffers_of(lk)
                    lb = state[lk.width]
                    width = lk.width
                    for launch in range(2):
                        kv = L.PagedKV(s, [40 + 97 * r for r in range(rows)])
                        pad = width - rows
                        kv.seq_lens = torch.cat([kv.seq_lens, torch.ones(
                            pad, dtype=torch.int32, device="cuda")])
                        kv.block_tables = torch.cat([kv.block_tables, torch.zeros(
                            pad, kv.block_tables.shape[1], dtype=torch.int32, device="cuda")])
                        pos = torch.zeros(width, dtype=torch.int32, device="cuda")
                        slots = torch.zeros(width, dtype=torch.int32, device="cuda")
                        pos[:rows], slots[:rows] = kv.positions(), kv.slots_for_last_token()
                        x, res = L.poisoned(width, s.hidden), L.poisoned(width, s.hidden)
                        x[:rows], res[:rows] = L.randn(rows, s.hidden), L.randn(rows, s.hidden)
                        step = LayerStep(s, ms, aw, mw, lk, lb, kv, x, res, pos, slots)
                        params = L.arg_names(lk)
                        d = rt.check_layer(rows, step.named, kind=kind)
                        self.assertIsNone(d, f"{model} {kind} R={rows} launch {launch}")
                        final = step.out if "moe_combine_out" in params else step.buf.mlp
                        self.assertFalse(L.is_poison(final[:rows]), f"{model} {kind} R={rows}")
                        sync = lb["layer_sync"][:32].cpu()
                        self.assertEqual(int(sync[0]), 0, f"{model} {kind}: a wait expired")
                        checked += 1
                print(f"[test_moe] {model} {kind}: bitwise the chain at rows 1, 3, 8 "
                      f"(widths {sorted(state)})", flush=True)
        self.assertGreater(checked, 0)

    def test_moe_decoder_layers_match_the_reference(self):
        """Three whole decoder layers, each running the kinds the manifest's
        layer types name for it (Runtime.layer_kinds: GLM-4.5-Air's layer 0
        is dense, its others and every layer of the other models are MoE;
        attention through the dense kinds, then the dense MLP or the router
        and the MoE kinds), each with its own random weights and paged KV
        cache, captured in one CUDA graph as a server runs a step, against an
        fp32 reference of the same layers. The reference routes with its own
        scores, except that where its choice and the kernels' differ only by
        a near-tie (the expert the kernels took is within 1e-2 relative of
        the reference's k-th key) it follows the kernels (counted and
        printed): a near-tie flipped by bf16 rounding upstream is not an
        error of the MoE kinds."""
        n_layers = 3
        hist = [300, 37, 1000, 1, 250, 17, 77, 30]
        dense_mlp = ("gate_up_proj", "down_proj")
        for model in MOE_MODELS:
            ms, _ = self.model_data(model)
            s = L.Shape(model)
            rt = self.rt(model)
            moe_kinds = tuple(k for k in MOE_KINDS if ms.shared or not k.startswith("shared_"))
            kinds = [tuple(rt.layer_kinds(i) or tuple(L.KINDS[:6]) + moe_kinds)
                     for i in range(n_layers)]
            for i, kl in enumerate(kinds):
                dense = kl[6:] == dense_mlp
                self.assertEqual(kl[:6], tuple(L.KINDS[:6]), f"{model} layer {i}: {kl}")
                self.assertTrue(dense or set(kl[6:]) <= set(MOE_KINDS), f"{model} layer {i}: {kl}")
            print(f"[test_moe] {model} layers 0..{n_layers - 1}: "
                  f"{['dense' if k[6:] == dense_mlp else 'moe' for k in kinds]}", flush=True)
            layers = [(L.LayerWeights(s), None if kl[6:] == dense_mlp else MoeWeights(ms))
                      for kl in kinds]
            for rows in (1, 5, 8):
                ks = {kind: rt.kernel(kind, rows) for kind in L.KINDS[:6]}
                if any(mw is None for _, mw in layers):
                    ks.update({kind: rt.kernel(kind, rows) for kind in dense_mlp})
                moe = Moe(rt, model, rows, ms)
                self.assertEqual(set(moe.kinds),
                                 {k for kl in kinds for k in kl[6:]} - set(dense_mlp),
                                 f"{model}: the MoE kinds run are the layer types'")
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
                moe.poison()
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="relaxed"):
                    stream = torch.cuda.current_stream()  # the capturing stream
                    h = x
                    for i, (aw, mw) in enumerate(layers):
                        h2 = L.run_attention(ks, s, aw, bufs[i], kvs[i], h, res, pos, slots[i],
                                             stream=stream)
                        if mw is None:
                            L.call(ks["gate_up_proj"], stream, x=h2, w=aw.gate_up, out=bufs[i].act)
                            L.call(ks["down_proj"], stream, x=bufs[i].act, w=aw.down, y=outs[i])
                        else:
                            moe.launch_route(mw, h2, ids[i], wts[i], stream)
                            moe.launch_mlp(mw, h2, ids[i], wts[i], outs[i], stream)
                        h = outs[i]
                torch.cuda.synchronize()
                self.assertTrue(all(L.is_poison(o) for o in outs),
                                f"{model}: a launch ran during the capture, not in the graph")
                g.replay()
                torch.cuda.synchronize()
                rx, rres, followed = x0.float(), res0.float(), 0
                for i, (aw, mw) in enumerate(layers):
                    kv = kvs[i]
                    kv.seq_lens, kv.block_tables = kv.seq_lens[:rows], kv.block_tables[:rows]
                    k0, v0 = states[i]
                    h2, rres, _, _ = L.ref_attention(s, aw, k0, v0, kv, rx, rres, rows)
                    if mw is None:
                        rx = L.ref_gate_up(h2, aw.gate_up, s.inter) @ aw.down.float().t()
                    else:
                        score, key, order = ref_route(ms, mw, h2)
                        got = ids[i][:rows].long()
                        for r in range(rows):
                            kth = key[r, order[r, ms.topk - 1]]
                            theirs = set(got[r].tolist())
                            mine = set(order[r, :ms.topk].tolist())
                            self.assertEqual(len(theirs), ms.topk, f"{model}: repeated experts")
                            for e in theirs - mine:
                                self.assertGreaterEqual(
                                    float(key[r, e]), float(kth) - 1e-2 * abs(float(kth)),
                                    f"{model} R={rows} layer {i} row {r}: "
                                    f"expert {e} is no near-tie")
                                followed += 1
                        rx = ref_mlp(ms, mw, h2, got, ref_weights(ms, score, got)).float()
                    # the layer's MLP output alone (stricter than with the residual added)
                    out, ref = outs[i][:rows].float(), rx
                    c = L.cosine(out, ref)
                    what = f"{model} R={rows} layer {i} {'dense' if mw is None else 'MoE'} output"
                    print(f"[test_moe] {what}: cosine {c:.6f}, relative error "
                          f"{L.rel_err(out, ref):.2e}", flush=True)
                    self.assertGreaterEqual(c, 0.999, f"{what}: cosine {c:.5f}")
                    self.assertTrue(L.is_poison(outs[i][rows:]), f"{what}: pad rows written")
                print(f"[test_moe] {model} R={rows}: {followed} near-tie choices followed",
                      flush=True)

if __name__ == "__main__":
    unittest.main(verbosity=2)
