"""GPU tests (H200, sm_90a) of the dense decoder-layer kernels, for every
shipped model (Llama-3.1-8B, Qwen3-8B, Qwen3-0.6B), built by kforge and
loaded through the kforge Python binding, as a server loads them.

Needs a CUDA GPU; run by scripts/gpu-test, or one case with
`python3 tests/pyrun.py tests/gpu/test_kernels.py test_decoder_layer`.
Cache: KFORGE_TEST_CACHE, else built with KFORGE_BIN (build/gen/kforge).

Each check draws fresh random inputs (seed printed; KF_TEST_SEED replays),
poisons every output with NaN before the launch, and compares the real rows
with an fp32 torch reference on upcast inputs: relative error <= 1e-2, no NaN
(so every element was written). Pad rows must stay poisoned and their inputs
unread. Batch invariance: every row's outputs, and the KV entries it writes,
are bitwise what the row gives alone at width 1, among others at widths 2, 4
and 8 (row 0 second of 2, third of 4, and second of 5 rows in a width-8 kernel
with other companions).
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kf_layer as L  # noqa: E402

TOL = 1e-2
ROWS = range(1, 9)


def setUpModule():
    if not torch.cuda.is_available():
        raise RuntimeError("tests/gpu needs a CUDA GPU")
    seed = int(os.environ.get("KF_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"[test_kernels] seed {seed}, kforge cache {L.kforge_cache()}", flush=True)
    torch.manual_seed(seed)


class _Base(unittest.TestCase):
    runtimes = {}

    @classmethod
    def rt(cls, model):
        if model not in cls.runtimes:
            cls.runtimes[model] = L.open_runtime(model)
        return cls.runtimes[model]

    worst = {}

    def assertClose(self, out, ref, what, tol=TOL):
        self.assertFalse(torch.isnan(out.float()).any().item(), f"{what}: NaN or unwritten output")
        e = L.rel_err(out, ref)
        self.assertLessEqual(e, tol, f"{what}: relative error {e:.3e}")
        key = what.split(" R=")[0].split(" long")[0]
        _Base.worst[key] = max(_Base.worst.get(key, 0.0), e)
        return e

    @classmethod
    def tearDownClass(cls):
        for key in sorted(_Base.worst):
            print(f"[worst relative error] {key}: {_Base.worst[key]:.2e}", flush=True)
        _Base.worst.clear()

    def assertBitwise(self, a, b, what):
        self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)), f"{what}: not bitwise equal")

    def assertInvariant(self, run, what):
        """run(list of row ids) -> per-row outputs (tuple of tensors, row-major).
        Every row of every batch below gives bitwise what it gives alone
        (width 1). All rows are compared, not only row 0: a width-dependent
        order of fp32 sums shows in bf16 outputs only where it crosses a
        rounding boundary, so each row compared is one more chance to see it
        (notes/perf/journal.md, v18)."""
        configs = [[3, 0], [1, 2, 0, 3], [4, 0, 5, 6, 7]]  # widths 2, 4, 8
        alone = {r: run([r]) for r in sorted({r for ids in configs for r in ids})}
        for ids in configs:
            outs = run(ids)
            for at, r in enumerate(ids):
                for j, (a, b) in enumerate(zip(alone[r], outs)):
                    self.assertBitwise(a[0], b[at], f"{what}: output {j}, row {r} of {ids} vs alone")


# ---- residual add + RMSNorm ---------------------------------------------------------
class NormTests(_Base):
    def _run(self, model, kind, x_rows, res_rows, weight):
        s = L.Shape(model)
        rows = x_rows.shape[0]
        k = self.rt(model).kernel(kind, rows)
        w = k.width
        x, res = L.randn(w, s.hidden), L.randn(w, s.hidden)
        x[:rows], res[:rows] = x_rows, res_rows
        res_pad = res[rows:].clone()
        out = L.poisoned(w, s.hidden)
        L.call(k, x=x, residual=res, weight=weight, out=out)
        torch.cuda.synchronize()
        self.assertTrue(L.is_poison(out[rows:]), f"{model}/{kind}: pad rows written")
        self.assertBitwise(res[rows:], res_pad, f"{model}/{kind}: pad residual")
        return out[:rows], res[:rows]

    def _check(self, kind):
        for model in L.MODELS:
            s = L.Shape(model)
            for rows in ROWS:
                x, res = L.randn(rows, s.hidden), L.randn(rows, s.hidden)
                wt = (1 + 0.1 * torch.randn(s.hidden, device="cuda")).to(torch.bfloat16)
                out, res_out = self._run(model, kind, x, res, wt)
                ref, ref_res = L.ref_add_rmsnorm(x, res, wt, s.eps)
                self.assertClose(out, ref, f"{model}/{kind} R={rows} out")
                self.assertClose(res_out, ref_res, f"{model}/{kind} R={rows} residual")
            xs, rs = L.randn(8, s.hidden), L.randn(8, s.hidden)
            self.assertInvariant(lambda ids: self._run(model, kind, xs[ids], rs[ids], wt),
                                 f"{model}/{kind}")

    def test_input_norm(self):
        self._check("input_norm")

    def test_post_attn_norm(self):
        self._check("post_attn_norm")


# ---- projections ----------------------------------------------------------------------
class ProjectionTests(_Base):
    def _run(self, model, kind, x_rows, wt, bias=None):
        s = L.Shape(model)
        n, kdim = s.proj_shape(kind)
        out_n = s.inter if kind == "gate_up_proj" else n
        rows = x_rows.shape[0]
        k = self.rt(model).kernel(kind, rows)
        x = L.randn(k.width, kdim)
        x[:rows] = x_rows
        y = L.poisoned(k.width, out_n)
        L.call(k, x=x, w=wt, bias=bias, y=y, out=y)
        torch.cuda.synchronize()
        self.assertTrue(L.is_poison(y[rows:]), f"{model}/{kind}: pad rows written")
        return (y[:rows],)

    def _check(self, kind):
        for model in L.MODELS:
            s = L.Shape(model)
            n, kdim = s.proj_shape(kind)
            # qwen2's qkv_proj adds a bias (template skinny_gemm_bias)
            bias = L.randn(n, scale=0.5) if kind == "qkv_proj" and s.qkv_bias else None
            for rows in ROWS:
                wt = L.randn(n, kdim, scale=kdim ** -0.5)
                x = L.randn(rows, kdim)
                (y,) = self._run(model, kind, x, wt, bias)
                ref = L.ref_gate_up(x, wt, s.inter) if kind == "gate_up_proj" else L.ref_linear(x, wt)
                if bias is not None:
                    ref = ref + bias.float()
                self.assertClose(y, ref, f"{model}/{kind} R={rows}")
            xs = L.randn(8, kdim)
            self.assertInvariant(lambda ids: self._run(model, kind, xs[ids], wt, bias),
                                 f"{model}/{kind}")

    def test_qkv_proj(self):
        self._check("qkv_proj")

    def test_o_proj(self):
        self._check("o_proj")

    def test_gate_up_proj(self):
        self._check("gate_up_proj")

    def test_down_proj(self):
        self._check("down_proj")


# ---- QK-norm + RoPE + KV write ------------------------------------------------------
class RopeKvWriteTests(_Base):
    PAGES = 64

    def _run(self, model, qkv_rows, positions, slots, kc0, vc0, qn, kn):
        s = L.Shape(model)
        rows = qkv_rows.shape[0]
        k = self.rt(model).kernel("rope_kv_write", rows)
        w = k.width
        qkv = L.randn(w, s.qkv_n)
        qkv[:rows] = qkv_rows
        pos = torch.full((w,), 12345, dtype=torch.int32, device="cuda")
        sl = torch.full((w,), kc0.shape[0] * s.page_size - 1, dtype=torch.int32, device="cuda")
        pos[:rows], sl[:rows] = positions, slots
        kc, vc = kc0.clone(), vc0.clone()
        q_out = L.poisoned(w, s.hq * s.d)
        L.call(k, qkv=qkv, positions=pos, slots=sl, q_norm_w=qn, k_norm_w=kn, q_out=q_out,
               k_cache=kc, v_cache=vc)
        torch.cuda.synchronize()
        self.assertTrue(L.is_poison(q_out[rows:]), f"{model}: pad rows' q written")
        flat_k, flat_v = kc.view(-1, s.hkv, s.d), vc.view(-1, s.hkv, s.d)
        untouched = torch.ones(flat_k.shape[0], dtype=torch.bool, device="cuda")
        untouched[slots.long()] = False
        self.assertBitwise(flat_k[untouched], kc0.view(-1, s.hkv, s.d)[untouched], f"{model}: k cache beyond the rows' slots")
        self.assertBitwise(flat_v[untouched], vc0.view(-1, s.hkv, s.d)[untouched], f"{model}: v cache beyond the rows' slots")
        return q_out[:rows], flat_k[slots.long()], flat_v[slots.long()]

    def test_rope_kv_write(self):
        for model in L.MODELS:
            s = L.Shape(model)
            kc0 = L.randn(self.PAGES, s.page_size, s.hkv, s.d)
            vc0 = L.randn(self.PAGES, s.page_size, s.hkv, s.d)
            for rows in ROWS:
                qkv = L.randn(rows, s.qkv_n, scale=2.0)
                qn = (1 + 0.1 * torch.randn(s.d, device="cuda")).to(torch.bfloat16)
                kn = (1 + 0.1 * torch.randn(s.d, device="cuda")).to(torch.bfloat16)
                # positions from 0 to past 128K; distinct slots, never the pad sentinel
                positions = torch.randint(0, 140000, (rows,), dtype=torch.int32, device="cuda")
                positions[0] = [0, 131071, 7, 65536, 8191, 1, 100000, 2047][rows - 1]
                slots = torch.randperm(self.PAGES * s.page_size - 1, device="cuda")[:rows].int()
                q, kw, vw = self._run(model, qkv, positions, slots, kc0, vc0, qn, kn)
                rq, rk, rv = L.ref_rope_kv(qkv, positions, s, qn, kn)
                self.assertClose(q, rq.reshape(rows, -1), f"{model}/rope_kv_write R={rows} q")
                self.assertClose(kw, rk, f"{model}/rope_kv_write R={rows} k")
                self.assertBitwise(vw, qkv.view(rows, -1, s.d)[:, s.hq + s.hkv:],
                                   f"{model}/rope_kv_write R={rows} v copy")
                if s.rot < s.d and not s.qk_norm:
                    # partial RoPE: the values past the rotated part pass as they came
                    heads = qkv.view(rows, -1, s.d)
                    self.assertBitwise(q.view(rows, s.hq, s.d)[..., s.rot:],
                                       heads[:, :s.hq, s.rot:],
                                       f"{model}/rope_kv_write R={rows} q past ROTARY_DIM")
                    self.assertBitwise(kw[..., s.rot:], heads[:, s.hq:s.hq + s.hkv, s.rot:],
                                       f"{model}/rope_kv_write R={rows} k past ROTARY_DIM")
            qkv8 = L.randn(8, s.qkv_n)
            pos8 = torch.randint(0, 131072, (8,), dtype=torch.int32, device="cuda")
            slots8 = torch.randperm(self.PAGES * s.page_size - 1, device="cuda")[:8].int()
            self.assertInvariant(
                lambda ids: self._run(model, qkv8[ids], pos8[ids], slots8[ids], kc0, vc0, qn, kn),
                f"{model}/rope_kv_write")


# ---- paged decode attention ------------------------------------------------------------
class AttentionTests(_Base):
    def _run(self, model, q_rows, kv, row_ids):
        """Attention for the rows row_ids of kv (its lengths / page tables)."""
        s = L.Shape(model)
        rows = len(row_ids)
        k = self.rt(model).kernel("decode_attention", rows)
        w = k.width
        q = L.randn(w, s.hq * s.d)
        q[:rows] = q_rows
        bt = torch.full((w, kv.block_tables.shape[1]), -7, dtype=torch.int32, device="cuda")
        lens = torch.full((w,), 1 << 30, dtype=torch.int32, device="cuda")  # pad rows: never read
        idx = torch.tensor(row_ids, device="cuda")
        bt[:rows], lens[:rows] = kv.block_tables[idx], kv.seq_lens[idx]
        out = L.poisoned(w, s.hq * s.d)
        ws, sem = L.attention_scratch(s, w)
        ws.fill_(float("nan"))
        # the manifest declares what the header documents (Kernel.buffers)
        bufs = {b.arg: b for b in k.buffers}
        self.assertEqual(sorted(bufs), ["semaphores", "workspace"], f"{model}: buffers")
        self.assertEqual((bufs["workspace"].bytes, bufs["workspace"].zero_once),
                         (4 * s.workspace_floats(w), False), f"{model}: workspace")
        self.assertEqual((bufs["semaphores"].bytes, bufs["semaphores"].zero_once),
                         (4 * w * s.hkv, True), f"{model}: semaphores")
        L.call(k, q=q, k_cache=kv.k, v_cache=kv.v, block_tables=bt,
               block_table_stride=bt.shape[1], seq_lens=lens, out=out, workspace=ws,
               semaphores=sem)
        torch.cuda.synchronize()
        self.assertTrue(L.is_poison(out[rows:]), f"{model}: pad rows' attention written")
        self.assertEqual(int(sem.abs().sum().item()), 0, f"{model}: semaphores not left at zero")
        return (out[:rows],)

    def _check_rows(self, model, kv, row_ids, what):
        s = L.Shape(model)
        q = L.randn(len(row_ids), s.hq * s.d, scale=2.0)
        (out,) = self._run(model, q, kv, row_ids)
        for i, r in enumerate(row_ids):
            ln = kv.lengths[r]
            ref = L.ref_attention_row(q[i].view(s.hq, s.d), L.gather_kv(kv.k, kv.block_tables[r], ln, s),
                                      L.gather_kv(kv.v, kv.block_tables[r], ln, s), s)
            self.assertClose(out[i].view(s.hq, s.d), ref, f"{model}/decode_attention {what} row {i} L={ln}")

    def test_decode_attention(self):
        choices = [1, 2, 15, 16, 17, 63, 64, 65, 100, 513, 1000, 2049, 4096, 5001]
        for model in L.MODELS:
            for rows in ROWS:
                lens = [choices[int(i)] for i in torch.randint(0, len(choices), (rows,))]
                kv = L.PagedKV(L.Shape(model), lens)
                self._check_rows(model, kv, list(range(rows)), f"R={rows}")
            kv = L.PagedKV(L.Shape(model), [3000, 1, 17, 700, 4096, 33, 2500, 65])
            q8 = L.randn(8, L.Shape(model).hq * L.Shape(model).d)
            self.assertInvariant(lambda ids: self._run(model, q8[ids], kv, ids),
                                 f"{model}/decode_attention")

    def test_attention_keeps_one_waves_share_of_blocks_per_sm(self):
        """launch.one_wave: no more than ceil(blocks / SMs) blocks fit on an
        SM, and where the runtime padded the dynamic shared memory (the
        manifest gives none) exactly that many (width 1, 256 blocks on the
        H200's 132 SMs: 2). 1024 bytes are reserved per block."""
        props = torch.cuda.get_device_properties(0)
        for model in L.MODELS:
            for rows in (1, 2, 8):
                k = self.rt(model).kernel("decode_attention", rows)
                self._run(model, L.randn(rows, L.Shape(model).hq * L.Shape(model).d),
                          L.PagedKV(L.Shape(model), [1000] * rows), list(range(rows)))
                lc = k.launch_config
                blocks = lc["grid"][0] * lc["grid"][1] * lc["grid"][2]
                wave = -(-blocks // props.multi_processor_count)
                per_block = k.resources["shared_bytes"] + lc["shared_bytes"] + 1024
                fit = props.shared_memory_per_multiprocessor // per_block
                what = f"{model} width {k.width}: {per_block} bytes per block, {blocks} blocks"
                self.assertLessEqual(fit, wave, what)
                if lc["shared_bytes"] > 0 or rows == 1:
                    self.assertEqual(fit, wave, what)

    def test_decode_attention_long(self):
        """Sequence lengths up to 128K (131072) and one past it."""
        # page size 16 and 64 (KF_TEST_MODELS may leave them out: then the others)
        models = [m for m in ("llama-3.1-8b", "qwen3-8b") if m in L.MODELS] or L.MODELS
        for model in models:
            kv = L.PagedKV(L.Shape(model), [131072, 1, 32768 + 5, 8191, 140001])
            self._check_rows(model, kv, [0, 1, 2, 3, 4], "long")
            q5 = L.randn(5, L.Shape(model).hq * L.Shape(model).d)
            outs = []
            for ids in ([0], [2, 0], [1, 2, 0, 3], [4, 0, 3, 2, 1]):
                outs.append(self._run(model, q5[ids], kv, ids)[0][ids.index(0)])
            self.assertBitwise(outs[0], outs[1], f"{model}: 128K row alone vs among 2")
            self.assertBitwise(outs[0], outs[2], f"{model}: 128K row alone vs among 4")
            self.assertBitwise(outs[0], outs[3], f"{model}: 128K row alone vs padded width 8")


# ---- a whole decoder layer ---------------------------------------------------------------
class LayerTests(_Base):
    def test_decoder_layer(self):
        hist = [4096, 37, 1000, 1, 2500, 17, 777, 300]
        for model in L.MODELS:
            s = L.Shape(model)
            w = L.LayerWeights(s)
            rt = self.rt(model)
            for rows in ROWS:
                ks = L.layer_kernels(rt, rows)
                width = ks["qkv_proj"].width
                kv = L.PagedKV(s, [h + 1 for h in hist[:rows]], poison_tail=True)
                k0, v0 = kv.k.clone(), kv.v.clone()
                x, res = L.randn(width, s.hidden), L.randn(width, s.hidden)
                x0, res0 = x.clone(), res.clone()
                buf = L.LayerBuffers(s, width)
                pos = torch.zeros(width, dtype=torch.int32, device="cuda")
                slots = torch.zeros(width, dtype=torch.int32, device="cuda")
                pos[:rows], slots[:rows] = kv.positions(), kv.slots_for_last_token()
                kv.seq_lens = torch.cat([kv.seq_lens, torch.ones(width - rows, dtype=torch.int32, device="cuda")])
                kv.block_tables = torch.cat([kv.block_tables, torch.zeros(width - rows, kv.block_tables.shape[1], dtype=torch.int32, device="cuda")])
                # as a server runs it: the eight launches in one CUDA graph, back
                # to back, so that programmatic launches overlap (eager launches
                # from Python leave gaps that hide a kernel reading ahead of its wait)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="relaxed"):
                    mlp = L.run_layer(ks, s, w, buf, kv, x, res, pos, slots,
                                      stream=torch.cuda.current_stream())
                g.replay()
                torch.cuda.synchronize()
                kv.seq_lens, kv.block_tables = kv.seq_lens[:rows], kv.block_tables[:rows]
                rmlp, rres, rk, rv = L.ref_layer(s, w, k0, v0, kv, x0, res0, rows)
                what = f"{model} layer R={rows}"
                out = mlp[:rows].float() + res[:rows].float()
                ref = rmlp + rres
                c = L.cosine(out, ref)
                print(f"[layer] {what}: cosine {c:.6f}, relative error {L.rel_err(out, ref):.2e}, "
                      f"mlp {L.rel_err(mlp[:rows], rmlp):.2e}", flush=True)
                self.assertGreaterEqual(c, 0.999, f"{what}: cosine {c:.5f}")
                self.assertClose(out, ref, f"{what}: hidden out")
                self.assertClose(mlp[:rows], rmlp, f"{what}: mlp out")  # 4.6e-3 seen
                self.assertGreaterEqual(L.cosine(mlp[:rows], rmlp), 0.999, f"{what}: mlp cosine")
                # the KV cache after the step: the new token's entries match the
                # reference, everything else is unchanged
                sl = slots[:rows].long()
                fk, fv = kv.k.view(-1, s.hkv, s.d), kv.v.view(-1, s.hkv, s.d)
                self.assertClose(fk[sl], rk, f"{what}: k written")
                self.assertClose(fv[sl], rv, f"{what}: v written")
                keep = torch.ones(fk.shape[0], dtype=torch.bool, device="cuda")
                keep[sl] = False
                self.assertBitwise(fk[keep], k0.view(-1, s.hkv, s.d)[keep], f"{what}: k cache elsewhere")
                self.assertBitwise(fv[keep], v0.view(-1, s.hkv, s.d)[keep], f"{what}: v cache elsewhere")
                self.assertTrue(L.is_poison(mlp[rows:]), f"{what}: pad rows written")


class RuntimeSelectionTests(_Base):
    def test_width_selection(self):
        """rt.kernel(kind, rows) binds the smallest width >= rows; 9 rows has none."""
        err, no_kernel = L.errors()
        for model in L.MODELS:
            rt = self.rt(model)
            for kind in L.KINDS:
                for rows in ROWS:
                    self.assertEqual(rt.kernel(kind, rows).width, min(w for w in (1, 2, 4, 8) if w >= rows))
                with self.assertRaises(no_kernel):
                    rt.kernel(kind, 9)


if __name__ == "__main__":
    unittest.main()
