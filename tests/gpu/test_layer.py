"""GPU tests of the layer kernels (kind "layer", templates/kf_layer.cuh): one
launch per dense decoder layer must give the same bits as the eight-kernel
chain on the same inputs, at every width and every row count it serves, in
every output (the MLP output, the residual, the K/V cache slots and each
phase's intermediate buffer), launch after launch on the same sync area.

Environment as tests/gpu/kf_layer.py (KFORGE_TEST_CACHE, KF_TEST_MODELS).
Run: python3 tests/gpu/test_layer.py
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kf_layer as L  # noqa: E402

LONG = int(os.environ.get("KF_LAYER_TEST_LONG", "1500"))  # one row's history, in tokens


def inputs(s, width, rows, gen):
    """Random step inputs for `rows` rows (pad rows up to the width poisoned),
    with histories of random lengths: short ones, one over many pages."""
    lengths = [int(torch.randint(1, 200, (1,), generator=gen).item()) for _ in range(rows)]
    lengths[0] = LONG
    kv = L.PagedKV(s, lengths, gen=torch.Generator(device="cuda").manual_seed(
        int(torch.randint(0, 1 << 30, (1,), generator=gen).item())))
    x = L.poisoned(width, s.hidden)
    residual = L.poisoned(width, s.hidden)
    x[:rows] = L.randn(rows, s.hidden)
    residual[:rows] = L.randn(rows, s.hidden)
    return kv, x, residual


def outputs(buf, kv, residual, rows):
    names = ["h", "qkv", "q", "attn", "o", "h2", "act", "mlp"]
    out = {n: getattr(buf, n)[:rows].clone() for n in names}
    out["residual"] = residual[:rows].clone()
    out["k_cache"] = kv.k.clone()
    out["v_cache"] = kv.v.clone()
    return out


def first_difference(a, b):
    """(flat index, a value, b value) of the first differing bits, or None."""
    ai, bi = a.view(torch.int16).flatten(), b.view(torch.int16).flatten()
    ne = (ai != bi).nonzero()
    if ne.numel() == 0:
        return None
    i = ne[0].item()
    return i, a.flatten()[i].item(), b.flatten()[i].item()


class LayerKernelTest(unittest.TestCase):
    def test_bitwise_equal_to_the_chain(self):
        gen = torch.Generator().manual_seed(7)
        checked = 0
        for model in L.MODELS:
            if "layer" not in L.built_params(L.kforge_cache(), model):
                print(f"[test_layer] {model}: no layer kernel in its description", flush=True)
                continue
            s = L.Shape(model)
            rt = L.open_runtime(model)
            w = L.LayerWeights(s, gen=torch.Generator(device="cuda").manual_seed(11))
            for width in s.widths:
                # one sync area for every launch of this width: epochs go on
                lk = L.LayerKernelState(rt.kernel("layer", width))
                lo = 1 if width == 1 else width // 2 + 1
                for rows in range(lo, width + 1):
                    with self.subTest(model=model, width=width, rows=rows):
                        lk.k = rt.kernel("layer", rows)
                        ks = {kind: rt.kernel(kind, rows) for kind in L.KINDS}
                        self.assertEqual(lk.k.width, width)
                        for kind, k in ks.items():
                            self.assertEqual(k.width, width, kind)
                        kv, x, residual = inputs(s, width, rows, gen)
                        pos, slots = kv.positions(), kv.slots_for_last_token()
                        k0, v0, r0 = kv.k.clone(), kv.v.clone(), residual.clone()
                        buf = L.LayerBuffers(s, width)
                        L.run_layer(ks, s, w, buf, kv, x, residual, pos, slots)
                        torch.cuda.synchronize()
                        want = outputs(buf, kv, residual, rows)
                        self.assertFalse(L.is_poison(want["mlp"]))
                        for launch in range(2):  # the sync area's epochs 2n, 2n + 1
                            kv.k.copy_(k0)
                            kv.v.copy_(v0)
                            residual.copy_(r0)
                            buf = L.LayerBuffers(s, width)
                            L.run_layer_kernel(lk, s, w, buf, kv, x, residual, pos, slots)
                            torch.cuda.synchronize()
                            self.assertEqual(lk.status()[0], 0, f"a wait expired: {lk.status()}")
                            got = outputs(buf, kv, residual, rows)
                            for name in want:
                                d = first_difference(got[name], want[name])
                                self.assertIsNone(
                                    d, f"{model} w{width} rows {rows} launch {launch}: {name} "
                                       f"differs first at {d} (layer, chain)")
                        checked += 1
            print(f"{model}: layer kernel bitwise equal to the chain at widths {s.widths}",
                  flush=True)
        self.assertGreater(checked, 0)

    def one_step(self, model="qwen3-0.6b", rows=3):
        s = L.Shape(model)
        rt = L.open_runtime(model)
        w = L.LayerWeights(s, gen=torch.Generator(device="cuda").manual_seed(5))
        k = rt.kernel("layer", rows)
        kv, x, residual = inputs(s, k.width, rows, torch.Generator().manual_seed(9))
        return s, rt, w, k, kv, x, residual

    def test_check_mode_finds_no_difference_and_names_a_planted_one(self):
        """Runtime.check_layer (the binding's check mode) on live inputs: the
        layer kernel and the chain agree, and the caller's tensors end as
        the layer kernel leaves them; a chain whose post_attn_norm is the
        caller's own code, one element off, is reported at that element."""
        import kforge
        s, rt, w, k, kv, x, residual = self.one_step()
        lk = L.LayerKernelState(k)
        pos, slots = kv.positions(), kv.slots_for_last_token()
        params = L.arg_names(k)

        def named_args(buf, res):
            named = {f"{kind}_{n}": v for kind, a in
                     L.layer_phase_args(s, w, buf, kv, x, res, pos, slots).items()
                     for n, v in a.items()}
            named.update(lk.bufs)
            return {n: v for n, v in named.items() if n in params}

        k0, v0 = kv.k.clone(), kv.v.clone()
        buf, res = L.LayerBuffers(s, k.width), residual.clone()
        self.assertIsNone(rt.check_layer(3, named_args(buf, res)))
        self.assertEqual(lk.status()[0], 0, lk.status())
        got = (buf.mlp[:3].clone(), res[:3].clone(), kv.k.clone())
        self.assertFalse(L.is_poison(got[0]))
        # the same inputs through the layer kernel alone: what check left
        kv.k.copy_(k0)
        kv.v.copy_(v0)
        buf2, res2 = L.LayerBuffers(s, k.width), residual.clone()
        L.run_layer_kernel(lk, s, w, buf2, kv, x, res2, pos, slots)
        torch.cuda.synchronize()
        for a, b in zip(got, (buf2.mlp[:3], res2[:3], kv.k)):
            self.assertIsNone(first_difference(a, b))

        norm = rt.kernel("post_attn_norm", 3)

        def own_norm(named, stream):  # a server's own post_attn_norm, wrong at (1, 5)
            norm(*[named[n] for n in L.arg_names(norm)], stream=stream)
            named["out"][1, 5] = named["out"][1, 5] * 2 + 1

        kv.k.copy_(k0)
        kv.v.copy_(v0)
        buf, res = L.LayerBuffers(s, k.width), residual.clone()
        d = rt.check_layer(3, named_args(buf, res), chain={"post_attn_norm": own_norm})
        self.assertIsInstance(d, kforge.Difference)
        self.assertEqual((d.kind, d.arg, d.row, d.index), ("post_attn_norm", "out", 1, (1, 5)), d)
        self.assertEqual(d.layer, buf.h2[1, 5].item())
        self.assertEqual(d.chain, (torch.tensor(d.layer, dtype=torch.bfloat16) * 2 + 1).item(), d)
        print(f"check mode: {d}", flush=True)
        with self.assertRaises(kforge.Error) as cm:
            rt.check_layer(3, dict(named_args(buf, res), stray=1))
        self.assertIn("unknown ['stray']", cm.exception.reason)

    def test_an_expired_wait_is_reported_and_the_launch_returns(self):
        """A sync area whose entry count says epoch 5 while its counters say 0:
        the second phase's wait can never be met; the launch must return, the
        status line name the counter, and later launches do nothing until the
        area is zeroed, after which the kernel is right again."""
        s, rt, w, k, kv, x, residual = self.one_step()
        lk = L.LayerKernelState(k)
        blocks = k.launch_config["grid"][0]
        self.assertGreater(blocks, 0)
        sync64 = lk.bufs["layer_sync"].view(torch.int64)
        sync64[2 * 16] = 5 * blocks  # counter 0 (line 2): the blocks that entered
        pos, slots = kv.positions(), kv.slots_for_last_token()
        buf = L.LayerBuffers(s, k.width)
        L.run_layer_kernel(lk, s, w, buf, kv, x, residual.clone(), pos, slots)
        torch.cuda.synchronize()
        state, counter, block, target, seen, epoch = lk.status()
        self.assertEqual((state, counter, epoch), (1, 1, 5), lk.status())
        self.assertLess(seen, target)
        print(f"watchdog: counter {counter} reached {seen} of {target} (block {block}, epoch "
              f"{epoch}); the launch returned", flush=True)
        # a later launch leaves at once: nothing is written
        buf = L.LayerBuffers(s, k.width)
        L.run_layer_kernel(lk, s, w, buf, kv, x, residual.clone(), pos, slots)
        torch.cuda.synchronize()
        self.assertTrue(L.is_poison(buf.h) and L.is_poison(buf.mlp))
        # zeroed again, it serves
        lk.bufs["layer_sync"].zero_()
        lk.bufs["decode_attention_semaphores"].zero_()
        buf = L.LayerBuffers(s, k.width)
        L.run_layer_kernel(lk, s, w, buf, kv, x, residual.clone(), pos, slots)
        torch.cuda.synchronize()
        self.assertEqual(lk.status()[0], 0)
        self.assertFalse(L.is_poison(buf.mlp[:3]))

    def test_completes_beside_a_kernel_that_occupies_the_gpu(self):
        """A cooperative launch while another stream runs long matrix products:
        the layer kernel completes (the driver makes its blocks co-resident)
        and matches the chain run alone."""
        s, rt, w, k, kv, x, residual = self.one_step()
        lk = L.LayerKernelState(k)
        ks = {kind: rt.kernel(kind, 3) for kind in L.KINDS}
        pos, slots = kv.positions(), kv.slots_for_last_token()
        k0, v0 = kv.k.clone(), kv.v.clone()
        want_buf = L.LayerBuffers(s, k.width)
        L.run_layer(ks, s, w, want_buf, kv, x, residual.clone(), pos, slots)
        kv.k.copy_(k0)
        kv.v.copy_(v0)
        other = torch.cuda.Stream()
        a = torch.randn(4096, 4096, device="cuda")
        mine = torch.cuda.Stream()
        buf = L.LayerBuffers(s, k.width)  # (poisoned here, before the streams part)
        res = residual.clone()
        torch.cuda.synchronize()
        with torch.cuda.stream(other):
            for _ in range(20):
                a = torch.tanh(a @ a * 1e-3)
        with torch.cuda.stream(mine):
            L.run_layer_kernel(lk, s, w, buf, kv, x, res, pos, slots, stream=mine)
        done = torch.cuda.Event()
        done.record(mine)
        done.synchronize()
        torch.cuda.synchronize()
        self.assertEqual(lk.status()[0], 0, lk.status())
        self.assertIsNone(first_difference(buf.mlp[:3], want_buf.mlp[:3]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
