"""The tuning-variant workflow without a GPU: variants built by kforge
(bench/build-variant: --define, --override) into caches of their own, what
the runtime loads from them (the kforge binding over the fake CUDA driver),
and scripts/bench-ab's arguments, rotation and summary."""
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

from kfhelp import KFORGE, SRC, SUMMARY_RE, base_env

VARIANT = os.path.join(SRC, "bench", "build-variant")
FIXTURES = os.path.join(SRC, "tests", "fixtures")
FX = os.path.join(FIXTURES, "models", "fx-small.json")  # 3 kinds x widths 1, 2; include_dirs
QWEN = os.path.join(SRC, "models", "qwen3-0.6b.json")  # kernels from the qwen3 family
FAKE_CUDA = os.path.join(os.environ.get("KFORGE_BINARY_DIR") or os.path.join(SRC, "build"),
                         "tests", "runtime", "libfake_cuda.so")


def runtime_view(cache, model, kind, rows):
    """(kernel ids, error text of finding kind at rows) as the kforge binding
    sees the cache through the fake driver, in a child process: a runtime
    library built with the sanitizers needs their runtimes preloaded
    (KFORGE_TEST_PRELOAD, set by the build), which this process cannot do."""
    code = ("import json, sys, kforge\n"
            "rt = kforge.Runtime(sys.argv[1], sys.argv[2], lazy=True, driver_path=sys.argv[3])\n"
            "err = ''\n"
            "try:\n"
            "    rt.kernel(sys.argv[4], int(sys.argv[5]))\n"
            "except kforge.Error as e:\n"
            "    err = str(e)\n"
            "print(json.dumps([list(rt.kernels()), err]))\n"
            "rt.close()\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    if os.environ.get("KFORGE_TEST_PRELOAD"):
        env.update(LD_PRELOAD=os.environ["KFORGE_TEST_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
    p = subprocess.run([sys.executable, "-c", code, cache, model, FAKE_CUDA, kind, str(rows)],
                       capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"the binding failed on {cache}:\n{p.stderr}")
    ids, err = json.loads(p.stdout)
    return ids, err


def load_bench_ab():
    path = os.path.join(SRC, "scripts", "bench-ab")
    loader = importlib.machinery.SourceFileLoader("bench_ab", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


AB = load_bench_ab()


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True, env=base_env({"KFORGE_BIN": KFORGE}))


def variant(cache, *args):
    return run([sys.executable, VARIANT, cache, *args])


def manifest(cache, model):
    with open(os.path.join(cache, "v1", "manifests", model, "sm_90a.json")) as f:
        return {k["id"]: k for k in json.load(f)["kernels"]}


def meta(cache, entry):
    with open(os.path.join(cache, "v1", entry["meta"])) as f:
        return json.load(f)


def keys(r):
    return dict(line.split() for line in r.stdout.splitlines())


class Variants(unittest.TestCase):
    def test_a_define_and_an_override_build_variants_the_runtime_loads(self):
        fx = ["--arch", "sm_90a", "--templates", os.path.join(FIXTURES, "templates"), "-j", "2",
              "-I", os.path.join(FIXTURES, "third_party", "vendor_b")]
        with tempfile.TemporaryDirectory() as d:
            base, defd, over = (os.path.join(d, n) for n in ("base", "define", "override"))
            for cache, extra in ((base, []), (defd, ["--define", "FX_TUNE=3"]),
                                 (over, ["--override", "scale.ALPHA=0.25"])):
                r = variant(cache, *fx, *extra, FX)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertRegex(r.stdout.strip().splitlines()[-1], SUMMARY_RE)
            b, dm, om = manifest(base, "fx-small"), manifest(defd, "fx-small"), manifest(over, "fx-small")
            self.assertEqual(len(b), 6)
            self.assertEqual(set(b), set(dm))
            self.assertEqual(set(b), set(om))
            for kid in b:
                # the define enters every key, and reaches the compiler
                self.assertNotEqual(b[kid]["key"], dm[kid]["key"], kid)
                self.assertIn("-DFX_TUNE=3", meta(defd, dm[kid])["command"])
                self.assertNotIn("-DFX_TUNE=3", meta(base, b[kid])["command"])
                # the override changes the scale kernels only: their keys, their
                # parameter record and their code
                changed = kid.startswith("fx-small/scale/")
                self.assertEqual(b[kid]["key"] != om[kid]["key"], changed, kid)
                alpha = [r["value"] for r in meta(over, om[kid])["inputs"] if r["name"] == "ALPHA"]
                self.assertEqual(alpha, ["0.25"] if changed else [], kid)
                if changed:
                    self.assertNotEqual(b[kid]["checksum"], om[kid]["checksum"], kid)
            # the copy of the description the override built (its include_dirs
            # made absolute: the build above found the vendor headers)
            with open(os.path.join(over, "descriptions", "fx-small.json")) as f:
                desc = json.load(f)
            self.assertEqual([k["params"] for k in desc["kernels"] if k["kind"] == "scale"],
                             [{"N": "hidden_size", "ALPHA": 0.25}])
            self.assertTrue(all(os.path.isabs(p) for p in desc["include_dirs"]))
            # bench-ab reads the models and kinds of the manifests
            self.assertEqual(AB.models_in(over), ["fx-small"])
            self.assertEqual(AB.kinds_in(over, "fx-small"), {"add", "copy", "scale"})
            # and the runtime loads what the manifest names: the variant's objects
            for cache, m in ((base, b), (over, om)):
                ids, err = runtime_view(cache, "fx-small", "scale", 2)
                self.assertEqual(sorted(ids), sorted(m))
                # a real cubin: the fake driver refuses it, naming the object it read
                self.assertIn(os.path.join(cache, "v1", m["fx-small/scale/w2/sm_90a"]["object"]), err)

    def test_an_override_of_a_family_kernel_changes_only_its_keys(self):
        with tempfile.TemporaryDirectory() as d:
            shipped = run([KFORGE, "keys", "--arch", "sm_90a", "--cache", d, QWEN])
            self.assertEqual(shipped.returncode, 0, shipped.stderr)
            r = variant(os.path.join(d, "v"), "--keys", "--arch", "sm_90a", "--override",
                        "qkv_proj.LATE_SLOTS=0", QWEN)
            self.assertEqual(r.returncode, 0, r.stderr)
            a, b = keys(shipped), keys(r)
            self.assertEqual(len(a), 36)  # eight kinds and the layer kind, four widths
            self.assertEqual(set(a), set(b))
            # qkv_proj, and the layer kernels that run it as a phase
            self.assertEqual(sorted(k for k in a if a[k] != b[k]),
                             sorted(f"qwen3-0.6b/{kind}/w{w}/sm_90a" for w in (1, 2, 4, 8)
                                    for kind in ("qkv_proj", "layer")))
            with open(os.path.join(d, "v", "descriptions", "qwen3-0.6b.json")) as f:
                desc = json.load(f)
            self.assertEqual(desc["family"], "qwen3")
            (qkv,) = desc["kernels"]
            self.assertEqual((qkv["kind"], qkv["template"], qkv["params"]["LATE_SLOTS"]),
                             ("qkv_proj", "skinny_gemm", 0))
            self.assertEqual(qkv["params"]["K"], "hidden_size")  # the family's, copied

    def test_bad_variants_exit_2_and_build_nothing(self):
        cases = [(["--override", "qkv.LATE_SLOTS=0"], "no kernel of kind qkv to override"),
                 (["--override", "qkv_proj.LATE=0"], 'unknown parameter "LATE" of template skinny_gemm'),
                 (["--override", "qkv_proj=0"], "expected KIND.PARAM=VALUE"),
                 (["--cache", "x"], "the cache is the first argument"),
                 (["-DNOT AN IDENTIFIER"], "--define needs NAME or NAME=VALUE")]
        with tempfile.TemporaryDirectory() as d:
            for args, want in cases:
                cache = os.path.join(d, "c")
                r = variant(cache, "--arch", "sm_90a", *args, QWEN)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                self.assertIn(want, r.stderr, args)
                self.assertFalse(os.path.exists(os.path.join(cache, "v1", "manifests")), args)


class BenchAb(unittest.TestCase):
    def test_builds_are_label_equals_dir_with_unique_labels(self):
        self.assertEqual(AB.parse_builds(["a=/x", "b=/y"]), [("a", "/x"), ("b", "/y")])
        for bad in (["a=/x", "a=/y"], ["a", "b=/y"], ["=/x", "b=/y"], ["a=/x"]):
            with self.assertRaises(AB.UsageError):
                AB.parse_builds(bad)

    def test_every_build_leads_a_round_in_turn(self):
        orders = AB.rotations(3, 4)
        self.assertEqual([o[0] for o in orders], [0, 1, 2, 0])
        for o in orders:
            self.assertEqual(sorted(o), [0, 1, 2])

    def test_summary_medians_and_ratios_to_the_first_build(self):
        p, q = ("m", "qkv_proj", 1), ("m", "o_proj", 8)
        samples = {(p, "base"): [3.0, 1.0, 2.0], (p, "new"): [1.0, 1.5, 0.5], (q, "new"): [4.0]}
        rows = dict(AB.summarize(samples, ["base", "new"]))
        self.assertEqual([(lb, med, ratio) for lb, med, ratio, _ in rows[p]],
                         [("base", 2.0, 1.0), ("new", 1.0, 0.5)])
        self.assertEqual([(lb, med, ratio) for lb, med, ratio, _ in rows[q]], [("new", 4.0, None)])
        text = "\n".join(AB.format_rows(AB.summarize(samples, ["base", "new"])))
        self.assertIn("0.500", text)
        self.assertIn("3.00 1.00 2.00", text)

    def test_bad_arguments_exit_2_before_any_gpu_work(self):
        with tempfile.TemporaryDirectory() as d:
            for m in ("a", "b"):  # caches as kforge lays them out, with one kind
                mdir = os.path.join(d, m, "v1", "manifests", "qwen3-0.6b")
                os.makedirs(mdir)
                with open(os.path.join(mdir, "sm_90a.json"), "w") as f:
                    json.dump({"format": 1, "kernels": [{"id": "qwen3-0.6b/qkv_proj/w1/sm_90a",
                                                         "kind": "qkv_proj"}]}, f)
            os.makedirs(os.path.join(d, "old", "qwen3-0.6b", "sm_90a"))  # not a kforge cache
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            cases = [([f"x={a}", f"y={d}/missing"], "no such build directory"),
                     ([f"x={a}", f"y={d}/old"], "not a kforge cache"),
                     ([f"x={a}", f"y={b}", "--parts", "layer"], "needs every kind"),
                     ([f"x={a}", f"y={b}", "--parts", "speed"], "--parts"),
                     ([f"x={a}", f"y={b}", "--models", "llama-3.1-8b"], "not built in every build"),
                     ([f"x={a}", f"y={b}", "--kinds", "o_proj"], "o_proj not a projection every build has")]
            for args, want in cases:
                err = io.StringIO()
                with redirect_stderr(err):
                    rc = AB.main(["bench-ab", *args])
                self.assertEqual(rc, 2, args)
                self.assertIn(want, err.getvalue(), args)
        self.assertNotIn("torch", sys.modules)


if __name__ == "__main__":
    unittest.main()
