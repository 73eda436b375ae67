"""Tests of the Python binding (python/kforge) against the fake CUDA driver
(tests/runtime/fake_cuda.c), with caches written by kf_rt_fixture. They run
without torch; the torch path (tensors, torch's current stream) is covered
here with stand-ins and on a GPU by tests/gpu/test_runtime_gpu.py."""
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import types
import unittest

SOURCE = os.environ.get("KFORGE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "python"))
import kforge  # noqa: E402

FAKE = os.environ["KFORGE_TEST_FAKE_CUDA"]
FIXTURE = os.environ["KFORGE_TEST_FIXTURE"]
NORM = "const float* x; float* y; float eps; int rows"
PROJ = "const kf_bf16* x; const kf_bf16* w; kf_bf16* y; long long n; int rows"


class Launch(ctypes.Structure):
    pass


fake = ctypes.CDLL(FAKE)
fake.fake_stat.restype = ctypes.c_long
fake.fake_stat.argtypes = [ctypes.c_char_p]


def last_launch():
    name = ctypes.create_string_buffer(128)
    grid, block = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)()
    shared, stream = ctypes.c_uint(), ctypes.c_void_p()
    params, nparams = (ctypes.c_longlong * 16)(), ctypes.c_int()
    fake.fake_last_launch(name, ctypes.c_size_t(128), grid, block, ctypes.byref(shared),
                          ctypes.byref(stream), params, ctypes.byref(nparams))
    return {"name": name.value.decode(), "grid": list(grid), "block": list(block),
            "shared": shared.value, "stream": stream.value or 0,
            "params": list(params)[: nparams.value]}


def launches():
    return fake.fake_stat(b"launches")


class FakeTensor:
    """What the binding reads of a torch tensor."""

    class device:
        index = 0
        type = "cuda"

    def __init__(self, ptr, dtype="torch.float32", is_cuda=True, contiguous=True):
        self.ptr, self.dtype, self.is_cuda, self.contiguous = ptr, dtype, is_cuda, contiguous

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return self.contiguous


class BindingTest(unittest.TestCase):
    def setUp(self):
        os.environ["FAKE_CUDA_CC"] = "90"
        os.environ.pop("FAKE_CUDA_INIT_ERROR", None)
        self.cache = tempfile.mkdtemp(prefix="kfpy-")
        fake.fake_reset()

    def tearDown(self):
        shutil.rmtree(self.cache, ignore_errors=True)
        sys.modules.pop("torch", None) if getattr(sys.modules.get("torch"), "_kf_fake", False) else None

    def make(self, arch="sm_90a", model="m", fmt=1, specs=(("norm", "1,2,4,8", NORM),
                                                           ("proj", "4", PROJ))):
        args = [FIXTURE, self.cache, model, arch, str(fmt)]
        for kind, widths, params in specs:
            args += [kind, widths, params]
        subprocess.run(args, check=True)

    def open(self, **kw):
        kw.setdefault("driver_path", FAKE)
        return kforge.Runtime(self.cache, kw.pop("model", "m"), **kw)

    def object_path(self, kernel_id):
        with open(os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")) as f:
            import json
            for k in json.load(f)["kernels"]:
                if k["id"] == kernel_id:
                    return os.path.join(self.cache, "v1", k["object"])
        raise KeyError(kernel_id)

    def test_untrusted_cache_is_refused_unless_lax_permissions(self):
        self.make()
        os.environ.pop("KFORGE_LAX_PERMISSIONS", None)
        obj = self.object_path("m/norm/w2/sm_90a")
        os.chmod(obj, 0o666)
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertEqual(cm.exception.status, kforge.Status.UNTRUSTED)
        self.assertIn(f"{obj}: error: writable by others", cm.exception.reason)
        self.assertEqual(self.open(lax_permissions=True).model, "m")
        os.chmod(obj, 0o644)
        # a link out of the cache is refused whatever the option
        outside = tempfile.mkdtemp(prefix="kfpy-out-")
        self.addCleanup(shutil.rmtree, outside, True)
        entry = os.path.dirname(obj)
        shutil.move(entry, os.path.join(outside, "e"))
        os.symlink(os.path.join(outside, "e"), entry)
        with self.assertRaises(kforge.Error) as cm:
            self.open(lax_permissions=True)
        self.assertEqual(cm.exception.status, kforge.Status.UNTRUSTED)
        self.assertIn("symbolic link", cm.exception.reason)

    def test_status_enum_matches_the_c_header(self):
        import re
        header = os.path.join(os.path.dirname(__file__), "..", "..", "runtime", "include",
                              "kforge", "runtime.h")
        with open(header) as f:
            c = {m.group(1): int(m.group(2))
                 for m in re.finditer(r"^\s*KF_(OK|ERR_[A-Z_]+) = (\d+)", f.read(), re.M)}
        self.assertGreater(len(c), 15)
        py = {("OK" if n == "OK" else "ERR_" + n): int(v) for n, v in kforge.Status.__members__.items()}
        self.assertEqual(py, c)

    def test_kernel_buffers_come_from_the_manifest(self):
        import json
        self.make(specs=(("norm", "1,2", NORM),
                         ("attn", "4", "float* o; float* ws; int* sem; int rows")))
        path = os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")
        with open(path) as f:
            man = json.load(f)
        for k in man["kernels"]:
            if k["kind"] == "attn":
                k["buffers"] = [{"arg": "ws", "bytes": 4096, "init": "none"},
                                {"arg": "sem", "bytes": 64, "init": "zero_once"}]
        with open(path, "w") as f:
            json.dump(man, f)
        rt = self.open()
        attn = rt.kernel("attn", 3)
        self.assertEqual(attn.buffers, (kforge.Buffer("ws", 1, 4096, False),
                                        kforge.Buffer("sem", 2, 64, True)))
        self.assertEqual(attn.buffers[1].zero_once, True)
        self.assertEqual(rt.kernel("norm", 2).buffers, ())
        rt.close()

    def test_layer_types_say_which_kinds_each_layer_runs(self):
        import json
        self.make()
        self.assertEqual(self.open().layer_types, [])  # every layer alike
        self.assertIsNone(self.open().layer_kinds(7))
        path = os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")
        with open(path) as f:
            man = json.load(f)
        man["layer_types"] = [{"name": "dense", "count": 2, "kinds": ["norm", "proj"],
                               "layer": "proj"},
                              {"name": "moe", "count": 3, "kinds": ["norm"]}]
        with open(path, "w") as f:
            json.dump(man, f)
        rt = self.open()
        self.assertEqual(rt.layer_types, [kforge.LayerType("dense", 2, ("norm", "proj"), "proj"),
                                          kforge.LayerType("moe", 3, ("norm",))])
        self.assertIsNone(rt.layer_types[1].layer)
        self.assertEqual([rt.layer_kinds(i) for i in range(5)],
                         [("norm", "proj")] * 2 + [("norm",)] * 3)
        with self.assertRaises(IndexError):
            rt.layer_kinds(5)
        rt.close()
        man["layer_types"][1]["kinds"] = ["router"]
        with open(path, "w") as f:
            json.dump(man, f)
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertIn("layer_types[1].kinds[0]: error: 'router' has no kernel", cm.exception.reason)

    def test_kernel_for_a_page_size(self):
        """A kernel the manifest says was built for pages of 16 tokens serves
        page_size 16 (or None) and refuses another with NO_PAGE_SIZE; one
        that takes no page size serves any."""
        import json
        self.make()
        path = os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")
        with open(path) as f:
            man = json.load(f)
        for k in man["kernels"]:
            if k["kind"] == "proj":
                k["page_size"] = 16
        with open(path, "w") as f:
            json.dump(man, f)
        rt = self.open()
        self.assertEqual(rt.kernel("proj", 2).page_size, 16)
        self.assertEqual(rt.kernel("proj", 2, page_size=16).width, 4)
        with self.assertRaises(kforge.Error) as cm:
            rt.kernel("proj", 2, page_size=1)
        self.assertEqual(cm.exception.status, kforge.Status.NO_PAGE_SIZE)
        self.assertNotIsInstance(cm.exception, kforge.NoKernelError)
        self.assertIn("built for KV-cache pages of 16 tokens, not 1", cm.exception.reason)
        norm = rt.kernel("norm", 3, page_size=1)
        self.assertEqual((norm.width, norm.page_size), (4, None))
        with self.assertRaises(ValueError):
            rt.kernel("norm", 3, page_size=-2)
        rt.close()

    def paged_manifest(self, edit=None):
        """A cache whose kind proj is built for pages of 16 tokens at widths
        1 and 4 and for pages of 1 token at width 4, as kforge writes a
        description with "page_sizes": [16, 1]; edit(manifest) may change it
        before it is written."""
        import copy
        import json
        self.make(specs=(("norm", "1,2,4,8", NORM), ("proj", "1,4", PROJ)))
        path = os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")
        with open(path) as f:
            man = json.load(f)
        man["page_size"] = 16
        extra = []
        for k in man["kernels"]:
            if k["kind"] == "proj":
                k["page_size"] = 16
                k["id"] = f"m/proj/w{k['width']}p16/sm_90a"
                if k["width"] == 4:
                    p1 = copy.deepcopy(k)
                    p1["page_size"], p1["id"] = 1, "m/proj/w4p1/sm_90a"
                    extra.append(p1)
        man["kernels"] += extra
        if edit:
            edit(man)
        with open(path, "w") as f:
            json.dump(man, f)

    def test_kernels_of_several_page_sizes(self):
        """A manifest of several page sizes serves each kind's kernel of the
        page size asked, the manifest's default when none is, and names the
        sizes it has when another is asked."""
        self.paged_manifest()
        rt = self.open()
        self.assertEqual(rt.page_sizes, (16, 1))
        k = rt.kernel("proj", 1)
        self.assertEqual((k.id, k.width, k.page_size), ("m/proj/w1p16/sm_90a", 1, 16))
        self.assertEqual(rt.kernel("proj", 2).id, "m/proj/w4p16/sm_90a")  # not w4p1
        self.assertEqual(rt.kernel("proj", 2, page_size=16).id, "m/proj/w4p16/sm_90a")
        k = rt.kernel("proj", 1, page_size=1)  # no width 1 at this page size
        self.assertEqual((k.id, k.width, k.page_size), ("m/proj/w4p1/sm_90a", 4, 1))
        with self.assertRaises(kforge.NoKernelError) as cm:
            rt.kernel("proj", 5, page_size=1)
        self.assertIn("largest width of kind 'proj' (4)", cm.exception.reason)
        with self.assertRaises(kforge.Error) as cm:
            rt.kernel("proj", 1, page_size=32)
        self.assertEqual(cm.exception.status, kforge.Status.NO_PAGE_SIZE)
        self.assertIn("built for KV-cache pages of 16, 1 tokens, not 32", cm.exception.reason)
        self.assertIn("page_sizes", cm.exception.reason)
        norm = rt.kernel("norm", 1, page_size=1)
        self.assertEqual((norm.id, norm.page_size), ("m/norm/w1/sm_90a", None))
        rt.close()
        # one page size (no "page_size" of its own): the kernels as built
        self.make()
        rt = self.open()
        self.assertEqual(rt.page_sizes, ())
        rt.close()

    def test_page_size_ids_are_checked(self):
        """An id says its page size exactly when the manifest holds several;
        the runtime refuses one that does not match its entry."""
        def no_default(man):
            del man["page_size"]

        def wrong_size(man):
            man["kernels"][-1]["page_size"] = 64

        def plain_id(man):
            man["kernels"][-1]["id"] = "m/proj/w4/sm_90a"

        for edit, want in ((no_default, "'m/proj/w1p16/sm_90a' does not match"),
                           (wrong_size, "does not match model/kind/width/arch "
                                        "'m/proj/w4p64/sm_90a'"),
                           (plain_id, "'m/proj/w4/sm_90a' does not match")):
            self.paged_manifest(edit)
            with self.assertRaises(kforge.Error) as cm:
                self.open()
            self.assertEqual(cm.exception.status, kforge.Status.BAD_MANIFEST, edit.__name__)
            self.assertIn(want, cm.exception.reason)
            shutil.rmtree(self.cache)

    def test_layer_phases_come_from_the_parameter_names(self):
        """A layer kernel's parameters are its phases' as "<kind>_<name>":
        the phases are the kinds they name, in order, the longest kind
        winning; the layer's own parameters belong to none."""
        params = ["input_norm_x", "input_norm_out", "qkv_proj_x", "qkv_proj_w", "o_proj_y",
                  "qkv_proj_y", "layer_sync", "layer_scratch", "rows"]
        kinds = {"input_norm": ["x", "out"], "qkv_proj": ["x", "w", "y"], "o_proj": ["x", "y"],
                 "qkv": ["proj_x"], "layer": ["sync"]}
        self.assertEqual(kforge.layer_phases(params, {k: v for k, v in kinds.items()
                                                      if k != "layer"}),
                         [("input_norm", {"x": "input_norm_x", "out": "input_norm_out"}),
                          ("qkv_proj", {"x": "qkv_proj_x", "w": "qkv_proj_w", "y": "qkv_proj_y"}),
                          ("o_proj", {"y": "o_proj_y"})])
        self.assertEqual(kforge.layer_phases(["rows", "a_b"], {"c": ["b"]}), [])

    def test_check_layer_needs_torch_and_a_layer_kind(self):
        self.make(specs=(("norm", "4", NORM), ("proj", "4", PROJ),
                         ("layer", "4", "const float* norm_x; float* norm_y; float norm_eps; "
                                        "int* layer_sync; int rows")))
        rt = self.open()
        self.assertIsNone(sys.modules.get("torch"))
        with self.assertRaises(kforge.Error) as cm:
            rt.check_layer(2, {})
        self.assertEqual(cm.exception.status, kforge.Status.INVALID_ARGUMENT)
        self.assertIn("needs torch", cm.exception.reason)
        rt.close()

    def test_open_reports_arch_model_and_kernel_ids(self):
        self.make()
        self.make(arch="sm_90")
        rt = self.open()
        self.assertEqual(rt.arch, "sm_90a")
        self.assertEqual(rt.device_arch, "sm_90")
        self.assertEqual(rt.model, "m")
        self.assertEqual(rt.backend, "cuda")
        self.assertEqual(sorted(rt.kernels()), sorted(
            [f"m/norm/w{w}/sm_90a" for w in (1, 2, 4, 8)] + ["m/proj/w4/sm_90a"]))
        self.assertEqual(fake.fake_stat(b"loads"), 5)
        rt.close()
        self.assertEqual(fake.fake_stat(b"live_modules"), 0)

    def test_dropping_a_runtime_and_its_kernels_unloads_at_once(self):
        # no reference cycle between a runtime and its kernels: the modules go
        # when the last reference does, never later inside the cyclic garbage
        # collector (which may run during a CUDA-graph capture: an unload
        # then invalidates the capture)
        import gc
        import weakref
        self.make()
        gc.collect()
        gc.disable()
        try:
            rt = self.open()
            k = rt.kernel("norm", 3)
            self.assertIs(rt.kernel("norm", 3), k)  # cached while it is held
            loaded = fake.fake_stat(b"live_modules")
            self.assertGreater(loaded, 0)
            ref = weakref.ref(rt)
            del rt
            self.assertEqual(fake.fake_stat(b"live_modules"), loaded)  # the kernel holds it
            k(FakeTensor(0x1000), FakeTensor(0x2000), 1e-6)
            del k
            self.assertIsNone(ref())
            self.assertEqual(fake.fake_stat(b"live_modules"), 0)
        finally:
            gc.enable()

    def test_kernel_takes_params_but_rows_and_appends_rows(self):
        self.make()
        with self.open() as rt:
            k = rt.kernel("norm", 3)
            self.assertEqual((k.width, k.rows, k.id), (4, 3, "m/norm/w4/sm_90a"))
            self.assertEqual(k.params, [("x", "const float*"), ("y", "float*"),
                                        ("eps", "float"), ("rows", "int")])
            k(0x1000, FakeTensor(0x2000), 0.25, stream=7)
            got = last_launch()
            self.assertEqual(got["name"], k.symbol)
            self.assertEqual(got["grid"], [4, 1, 1])
            self.assertEqual(got["block"], [256, 1, 1])
            self.assertEqual(got["stream"], 7)
            self.assertEqual(got["params"][:2], [0x1000, 0x2000])
            self.assertEqual(struct.unpack("<f", struct.pack("<i", got["params"][2] & 0xffffffff))[0], 0.25)
            self.assertEqual(got["params"][3], 3)

    def test_long_long_and_bf16_tensor_arguments(self):
        self.make()
        with self.open() as rt:
            k = rt.kernel("proj", 2)
            bf = FakeTensor(0x10, dtype="torch.bfloat16")
            k(bf, bf, bf, 1 << 40)
            self.assertEqual(last_launch()["params"], [0x10, 0x10, 0x10, 1 << 40, 2])
            with self.assertRaises(kforge.Error) as cm:
                k(bf, FakeTensor(0x10, dtype="torch.float16"), bf, 1)
            self.assertIn("torch.bfloat16", str(cm.exception))
            self.assertEqual(cm.exception.status, kforge.Status.ARGS)

    def test_rows_above_the_largest_width_raise_no_kernel_error(self):
        self.make()
        with self.open() as rt:
            with self.assertRaises(kforge.NoKernelError) as cm:
                rt.kernel("norm", 9)
            self.assertIsInstance(cm.exception, kforge.Error)
            self.assertEqual(cm.exception.status, kforge.Status.NO_WIDTH)
            self.assertIn("largest width of kind 'norm' (8)", str(cm.exception))
            with self.assertRaises(kforge.Error) as cm:
                rt.kernel("qkv", 1)
            self.assertNotIsInstance(cm.exception, kforge.NoKernelError)
            self.assertEqual(cm.exception.status, kforge.Status.NO_KIND)

    def test_argument_mismatches_raise_without_launching(self):
        self.make()
        with self.open() as rt:
            k = rt.kernel("norm", 2)
            bad_calls = [
                ((0x1000, 0x2000), "takes 3 arguments"),
                ((0x1000, 0x2000, 1.0, 2), "takes 3 arguments"),
                (("x", 0x2000, 1.0), "argument 0 (const float* x) is str"),
                ((0x1000, 0x2000, "1.0"), "argument 2 (float eps)"),
                ((0x1000, FakeTensor(0x2, dtype="torch.bfloat16"), 1.0), "torch.float32"),
                ((0x1000, FakeTensor(0x2, is_cuda=False), 1.0), "not on the GPU"),
                ((0x1000, FakeTensor(0x2, contiguous=False), 1.0), "not contiguous"),
                ((0, 0x2000, 1.0), "expected a device pointer"),
            ]
            for args, needle in bad_calls:
                with self.assertRaises(kforge.Error) as cm:
                    k(*args)
                self.assertEqual(cm.exception.status, kforge.Status.ARGS)
                self.assertIn(needle, str(cm.exception))
            self.assertEqual(launches(), 0)
            k(0x1000, 0x2000, 1)  # an int is a fine float
            self.assertEqual(launches(), 1)

    def test_open_failures_carry_the_runtime_reason_and_status(self):
        self.make(arch="sm_100a")
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertEqual(cm.exception.status, kforge.Status.NO_MANIFEST)
        self.assertIn("which runs sm_90a, sm_90", cm.exception.reason)
        self.assertIn("the cache has sm_100a", cm.exception.reason)

    def test_damaged_object_is_refused_at_open(self):
        self.make()
        path = self.object_path("m/norm/w2/sm_90a")
        with open(path, "r+b") as f:
            f.seek(9)
            b = f.read(1)
            f.seek(9)
            f.write(bytes([b[0] ^ 1]))
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertEqual(cm.exception.status, kforge.Status.CHECKSUM)
        self.assertIn("m/norm/w2/sm_90a", str(cm.exception))
        self.assertIn(path, str(cm.exception))
        self.assertEqual(fake.fake_stat(b"live_modules"), 0)

    def test_newer_manifest_and_missing_driver(self):
        self.make(fmt=2)
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertEqual(cm.exception.status, kforge.Status.FORMAT)
        with self.assertRaises(kforge.Error) as cm:
            self.open(driver_path="/nonexistent/libcuda.so.1", backend="cuda")
        self.assertEqual(cm.exception.status, kforge.Status.NO_DRIVER)
        self.assertIn("/nonexistent/libcuda.so.1", str(cm.exception))

    def test_lazy_runtime_loads_at_first_kernel(self):
        self.make()
        with self.open(lazy=True) as rt:
            self.assertEqual(fake.fake_stat(b"loads"), 0)
            rt.kernel("norm", 1)
            self.assertEqual(fake.fake_stat(b"loads"), 1)

    def test_resources_and_launch_config_come_from_meta_and_manifest(self):
        self.make()
        with self.open() as rt:
            k = rt.kernel("norm", 8)
            self.assertEqual(k.resources, {"registers": 40, "spill_stores": 4, "spill_loads": 8,
                                           "stack_bytes": 16, "shared_bytes": 1024})
            self.assertEqual(k.launch_config, {"grid": [8, 1, 1], "block": [256, 1, 1],
                                               "shared_bytes": 0})

    def test_stream_defaults_to_torchs_current_stream_when_torch_is_loaded(self):
        self.make()
        with self.open() as rt:
            k = rt.kernel("norm", 1)
            k(0x1000, 0x2000, 1.0)
            self.assertEqual(last_launch()["stream"], 0)
            asked = []
            torch = types.ModuleType("torch")
            torch._kf_fake = True
            torch.cuda = types.SimpleNamespace(current_stream=lambda dev: (
                asked.append(dev), types.SimpleNamespace(cuda_stream=42))[1])
            sys.modules["torch"] = torch
            try:
                k(0x1000, 0x2000, 1.0)
                self.assertEqual(last_launch()["stream"], 42)
                self.assertEqual(asked, [0])
                k(0x1000, 0x2000, 1.0, stream=types.SimpleNamespace(cuda_stream=9))
                self.assertEqual(last_launch()["stream"], 9)
            finally:
                del sys.modules["torch"]

    def test_library_is_found_beside_the_package_without_the_env_var(self):
        pkg = tempfile.mkdtemp(prefix="kfpkg-")
        try:
            shutil.copytree(os.path.join(SOURCE, "python", "kforge"), os.path.join(pkg, "kforge"))
            shutil.copy(os.environ["KFORGE_RT_LIBRARY"], os.path.join(pkg, "kforge", "libkforge_rt.so"))
            env = dict(os.environ)
            del env["KFORGE_RT_LIBRARY"]
            out = subprocess.run([sys.executable, "-c", "import kforge; print(kforge.library_path)"],
                                 cwd=pkg, env=env, check=True, capture_output=True, text=True)
            self.assertEqual(out.stdout.strip(), os.path.join(pkg, "kforge", "libkforge_rt.so"))
        finally:
            shutil.rmtree(pkg)

    def test_setuptools_packages_the_binding_without_a_compiled_extension(self):
        """pyproject.toml builds with setuptools alone (an sdist needs no
        `wheel`); where `wheel` is installed (the GPU machine), pip installs it
        too and the installed package imports."""
        build = tempfile.mkdtemp(prefix="kfsrc-")
        try:
            src = os.path.join(build, "python")
            shutil.copytree(os.path.join(SOURCE, "python"), src,
                            ignore=shutil.ignore_patterns("*.so*", "build", "*.egg-info",
                                                          "__pycache__"))
            out = subprocess.run(
                [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                 "print(b.build_sdist(sys.argv[1]))", os.path.join(build, "dist")],
                cwd=src, check=True, capture_output=True, text=True)
            import tarfile
            sdist = os.path.join(build, "dist", out.stdout.strip().splitlines()[-1])
            with tarfile.open(sdist) as tar:
                names = sorted(os.path.relpath(n, os.path.commonpath(tar.getnames()))
                               for n in tar.getnames())
            for f in ("pyproject.toml", "kforge/__init__.py", "kforge/_lib.py",
                      "kforge/runtime.py"):
                self.assertIn(f, names)
            self.assertEqual([n for n in names if n.endswith((".c", ".so", ".pyx"))], [])
            try:
                import wheel  # noqa: F401
            except ImportError:
                return
            target = os.path.join(build, "site")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                            "--no-build-isolation", "--no-deps", "--target", target, src],
                           check=True, capture_output=True)
            out = subprocess.run([sys.executable, "-c", "import kforge; print(kforge.__file__)"],
                                 cwd=target, env=dict(os.environ, PYTHONPATH=target),
                                 check=True, capture_output=True, text=True)
            self.assertTrue(out.stdout.strip().startswith(target))
        finally:
            shutil.rmtree(build)


if __name__ == "__main__":
    unittest.main()
