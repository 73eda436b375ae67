#!/usr/bin/env python3
"""GPU tests of libkforge_rt and its Python binding. RUN ON A GPU MACHINE ONLY
(an H200, sm_90); they are not part of the CPU ctest suite.

Usage: python3 tests/gpu/test_runtime_gpu.py CACHE   (or KFORGE_GPU_CACHE=CACHE)
where CACHE was written by tests/gpu/make_gpu_cache.py, and the library is
found as kforge finds it (KFORGE_RT_LIBRARY, beside the package, ...).
Outputs are poisoned before every launch and inputs are random; pad rows
beyond the real row count must stay poisoned."""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__" and len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
    os.environ["KFORGE_GPU_CACHE"] = sys.argv.pop(1)
CACHE = os.environ.get("KFORGE_GPU_CACHE", os.path.join(HERE, "..", "..", ".gpu-bundle", "gpucache"))
try:
    import kforge
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import kforge
import torch

COLS = 1000


def poisoned(rows, cols, dtype=torch.float32):
    return torch.full((rows, cols), float("nan"), device="cuda", dtype=dtype)


class RuntimeGpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rt = kforge.Runtime(CACHE, "kfgpu")

    @classmethod
    def tearDownClass(cls):
        cls.rt.close()

    def test_device_is_sm_90_and_the_sm_90a_manifest_is_chosen(self):
        self.assertEqual(self.rt.device_arch, "sm_90")
        self.assertEqual(self.rt.arch, "sm_90a")
        self.assertIn("kfgpu/scale_add/w8/sm_90a", self.rt.kernels())

    def test_every_width_computes_the_rows_and_leaves_pad_rows_alone(self):
        for rows in range(1, 9):
            k = self.rt.kernel("scale_add", rows)
            self.assertEqual(k.width, {1: 1, 2: 2, 3: 4, 4: 4}.get(rows, 8))
            x = torch.randn(k.width, COLS, device="cuda")
            y = poisoned(k.width, COLS)
            alpha = float(torch.rand(1)) + 0.5
            k(x, y, alpha, COLS)
            torch.cuda.synchronize()
            ref = alpha * x[:rows] + torch.arange(rows, device="cuda", dtype=torch.float32)[:, None]
            torch.testing.assert_close(y[:rows], ref, rtol=1e-6, atol=1e-6)
            self.assertTrue(torch.isnan(y[rows:]).all(), f"pad rows written at rows={rows}")

    def test_launch_on_a_non_default_torch_stream(self):
        k = self.rt.kernel("scale_add", 3)
        s = torch.cuda.Stream()
        x = torch.randn(4, COLS, device="cuda")
        y = poisoned(4, COLS)
        torch.cuda.synchronize()
        with torch.cuda.stream(s):  # the binding takes torch's current stream
            k(x, y, 2.0, COLS)
        s.synchronize()
        torch.testing.assert_close(y[:3], 2.0 * x[:3] + torch.arange(3, device="cuda")[:, None].float())
        y2 = poisoned(4, COLS)
        k(x, y2, 3.0, COLS, stream=s)  # and an explicit one
        s.synchronize()
        torch.testing.assert_close(y2[:3], 3.0 * x[:3] + torch.arange(3, device="cuda")[:, None].float())

    def test_bf16_tensors(self):
        k = self.rt.kernel("bf16_scale", 2)
        x = torch.randn(2, COLS, device="cuda").to(torch.bfloat16)
        y = poisoned(2, COLS, torch.bfloat16)
        k(x, y, COLS)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(y, x * 2))  # doubling is exact in bf16

    def test_64_kib_dynamic_shared_memory_is_opted_into(self):
        k = self.rt.kernel("smem_reverse", 4)
        self.assertEqual(k.launch_config["shared_bytes"], 65536)
        cols = 16384  # 64 KiB of floats
        x = torch.randn(4, cols, device="cuda")
        y = poisoned(4, cols)
        k(x, y, cols)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(y[:4], torch.flip(x, dims=[1])))

    def test_argument_mismatches_are_refused_not_launched(self):
        k = self.rt.kernel("scale_add", 2)
        x = torch.randn(2, COLS, device="cuda")
        y = poisoned(2, COLS)
        for args in [(x, y, 1.0), (x, y, 1.0, COLS, 2), (x.double(), y, 1.0, COLS),
                     (x, y.to(torch.bfloat16), 1.0, COLS), (x.cpu(), y, 1.0, COLS)]:
            with self.assertRaises(kforge.Error) as cm:
                k(*args)
            self.assertEqual(cm.exception.status, kforge.Status.ARGS)
        # The C library's own check, below the binding: 4 arguments for 5.
        lib = kforge.runtime.lib
        vals = [ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                ctypes.c_float(1.0), ctypes.c_int(COLS)]
        argv = (kforge._lib.Arg * 4)(*[kforge._lib.Arg(ctypes.addressof(v), ctypes.sizeof(v))
                                        for v in vals])
        self.assertEqual(lib.kf_kernel_launch(k._h, None, argv, 4), kforge.Status.ARGS)
        argv[3].size = 8
        self.assertEqual(lib.kf_kernel_launch(k._h, None, argv, 4), kforge.Status.ARGS)
        torch.cuda.synchronize()
        self.assertTrue(torch.isnan(y).all(), "a refused launch wrote the output")

    def test_rows_above_the_largest_width_get_the_fallback_status(self):
        with self.assertRaises(kforge.NoKernelError) as cm:
            self.rt.kernel("scale_add", 9)
        self.assertEqual(cm.exception.status, kforge.Status.NO_WIDTH)

    def test_resources_come_from_meta_json(self):
        r = self.rt.kernel("scale_add", 1).resources
        self.assertGreater(r["registers"], 0)
        self.assertEqual(set(r), {"registers", "spill_stores", "spill_loads", "stack_bytes",
                                  "shared_bytes"})

    def test_many_threads_find_and_launch_at_once(self):
        errors = []

        def work(seed):
            try:
                g = torch.Generator(device="cuda").manual_seed(seed)
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for i in range(50):
                        rows = (seed + i) % 8 + 1
                        k = self.rt.kernel("scale_add", rows)
                        x = torch.randn(k.width, COLS, device="cuda", generator=g)
                        y = poisoned(k.width, COLS)
                        k(x, y, 1.5, COLS)
                        ref = 1.5 * x[:rows] + torch.arange(rows, device="cuda")[:, None].float()
                        s.synchronize()
                        # The kernel's FFMA rounds once, torch's mul+add twice:
                        # same tolerance as the single-threaded test.
                        if not torch.allclose(y[:rows], ref, rtol=1e-6, atol=1e-6) or \
                                not torch.isnan(y[rows:]).all():
                            errors.append(f"thread {seed} iteration {i} rows {rows}")
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


class OpenGpuTest(unittest.TestCase):
    def test_lazy_runtime_loads_and_computes(self):
        with kforge.Runtime(CACHE, "kfgpu", lazy=True) as rt:
            k = rt.kernel("scale_add", 5)
            x = torch.randn(8, COLS, device="cuda")
            y = poisoned(8, COLS)
            k(x, y, 0.5, COLS)
            torch.cuda.synchronize()
            torch.testing.assert_close(y[:5], 0.5 * x[:5] + torch.arange(5, device="cuda")[:, None].float())
            self.assertTrue(torch.isnan(y[5:]).all())

    def test_an_sm_100a_only_manifest_is_refused_naming_sm_90a(self):
        with self.assertRaises(kforge.Error) as cm:
            kforge.Runtime(CACHE, "kfgpu-b100")
        self.assertEqual(cm.exception.status, kforge.Status.NO_MANIFEST)
        self.assertIn("sm_90a", cm.exception.reason)
        self.assertIn("the cache has sm_100a", cm.exception.reason)

    def _copy(self, models):
        tmp = tempfile.mkdtemp(prefix="kfgpu-")
        dst = os.path.join(tmp, "cache")
        shutil.copytree(CACHE, dst, ignore=lambda d, names: [
            n for n in names if d.endswith("manifests") and n not in models])
        return tmp, dst

    def test_a_damaged_object_is_refused_at_open(self):
        tmp, dst = self._copy(["kfgpu"])
        try:
            import json
            with open(os.path.join(dst, "v1", "manifests", "kfgpu", "sm_90a.json")) as f:
                entry = [k for k in json.load(f)["kernels"] if k["id"] == "kfgpu/scale_add/w4/sm_90a"][0]
            path = os.path.join(dst, "v1", entry["object"])
            with open(path, "r+b") as f:
                f.seek(entry["size"] // 2)
                b = f.read(1)
                f.seek(entry["size"] // 2)
                f.write(bytes([b[0] ^ 0xff]))
            with self.assertRaises(kforge.Error) as cm:
                kforge.Runtime(dst, "kfgpu")
            self.assertEqual(cm.exception.status, kforge.Status.CHECKSUM)
            self.assertIn("kfgpu/scale_add/w4/sm_90a", cm.exception.reason)
            self.assertIn(path, cm.exception.reason)
        finally:
            shutil.rmtree(tmp)

    def test_a_read_only_cache_serves(self):
        tmp, dst = self._copy(["kfgpu"])
        try:
            subprocess.run(["chmod", "-R", "a-w", dst], check=True)
            with kforge.Runtime(dst, "kfgpu") as rt:
                k = rt.kernel("scale_add", 1)
                x = torch.randn(1, COLS, device="cuda")
                y = poisoned(1, COLS)
                k(x, y, 1.0, COLS)
                torch.cuda.synchronize()
                torch.testing.assert_close(y, x)
        finally:
            subprocess.run(["chmod", "-R", "u+w", tmp], check=True)
            shutil.rmtree(tmp)

    def test_a_missing_driver_is_reported(self):
        with self.assertRaises(kforge.Error) as cm:
            kforge.Runtime(CACHE, "kfgpu", backend="cuda", driver_path="/nonexistent/libcuda.so.1")
        self.assertEqual(cm.exception.status, kforge.Status.NO_DRIVER)


if __name__ == "__main__":
    unittest.main(verbosity=2)
