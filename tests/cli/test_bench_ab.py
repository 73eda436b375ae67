"""The tuning-variant workflow without a GPU: tests/gpu/kf_direct.py's build
options (kinds, overrides, checked against the template schemas) and
scripts/bench-ab's arguments, rotation and summary."""
import importlib.machinery
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

from kfhelp import SRC

sys.path.insert(0, os.path.join(SRC, "tests", "gpu"))
import kf_direct  # noqa: E402


def load_bench_ab():
    path = os.path.join(SRC, "scripts", "bench-ab")
    loader = importlib.machinery.SourceFileLoader("bench_ab", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


AB = load_bench_ab()
QWEN = os.path.join(SRC, "models", "qwen3-0.6b.json")


class Overrides(unittest.TestCase):
    def test_an_override_replaces_the_parameter(self):
        _, kernels = kf_direct.load_model(QWEN, {"qkv_proj": {"LATE_SLOTS": 0}})
        params = {k: p for k, _, p in kernels}
        self.assertEqual(params["qkv_proj"]["LATE_SLOTS"], 0)
        _, shipped = kf_direct.load_model(QWEN)
        self.assertEqual({k: p for k, _, p in shipped}["qkv_proj"]["LATE_SLOTS"], 1)

    def test_a_parameter_the_template_lacks_is_an_error(self):
        with self.assertRaisesRegex(kf_direct.Error, r"qkv_proj: override of 'LATE'.*LATE_SLOTS"):
            kf_direct.load_model(QWEN, {"qkv_proj": {"LATE": 0}})

    def test_a_kind_the_model_lacks_is_an_error(self):
        with self.assertRaisesRegex(kf_direct.Error, "kinds the model does not have: qkv"):
            kf_direct.load_model(QWEN, {"qkv": {"LATE_SLOTS": 0}})

    def test_the_command_line_names_a_bad_override_and_exits_2(self):
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as d, redirect_stderr(err):
            rc = kf_direct.main(["kf_direct.py", "build", d, QWEN, "--arch", "sm_90a",
                                 "--overrides", '{"o_proj": {"KSPLITS": 4}}'])
            self.assertEqual(os.listdir(d), [])  # nothing compiled
        self.assertEqual(rc, 2)
        self.assertIn("override of 'KSPLITS'", err.getvalue())

    def test_build_compiles_only_the_kinds_asked_for(self):
        with tempfile.TemporaryDirectory() as d:
            res = kf_direct.build([QWEN], ["sm_90a"], d, kinds=["input_norm"],
                                  overrides={"input_norm": {"EPS": 1e-3}})
            self.assertEqual(sorted(kid for kid, _ in res),
                             [f"qwen3-0.6b/input_norm/w{w}/sm_90a" for w in (1, 2, 4, 8)])
            with open(os.path.join(d, "qwen3-0.6b", "sm_90a", "index.json")) as f:
                index = json.load(f)
            self.assertEqual({k["kind"] for k in index["kernels"]}, {"input_norm"})
            self.assertEqual(index["kernels"][0]["template_params"]["EPS"], 1e-3)
            with self.assertRaisesRegex(kf_direct.Error, "no kernel of kind qkv"):
                kf_direct.build([QWEN], ["sm_90a"], d, kinds=["qkv"])


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
            for m in ("a", "b"):
                os.makedirs(os.path.join(d, m, "qwen3-0.6b", "sm_90a"))
                with open(os.path.join(d, m, "qwen3-0.6b", "sm_90a", "index.json"), "w") as f:
                    json.dump({"kernels": [{"kind": "qkv_proj"}]}, f)
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            cases = [([f"x={a}", f"y={d}/missing"], "no such build directory"),
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
