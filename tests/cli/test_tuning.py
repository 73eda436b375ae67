"""Tuning files and `kforge tune` (docs/cli.md "kforge tune", docs/contracts.md
"Tuning files"): a build given --tuning FILE builds the kernels an entry
matches with the entry's values, as if the description had said them (same
keys), a layer kind with its phases' entries, and nothing else changes; a
bad tuning file is refused with its place before anything is written.
`kforge tune --build-only` builds each candidate of each tuning parameter as
a description of its own, so that a candidate its template refuses fails
alone; --time-only hands the directory to the Python timer. The choice rule
of the timer (python/kforge/tune.py) is checked here too; its timing runs on
the GPU (tests/gpu/test_tune.py)."""
import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
import unittest

from kfhelp import SRC, Work

# Qwen3-0.6B's o_proj: N = hidden 1024, K = 16 heads x 128; it ships KSPLIT 2
O_PROJ_SHAPE = {"N": 1024, "K": 2048}


def tuning_file(w, entries, device="Test GPU", name="tuning.json"):
    w.dump_json(name, {"kforge_tuning": 1, "device": device, "entries": entries})
    return name


def o_proj_entry(width=1, **params):
    p = {"KSPLIT": 1, "DEEP_RING": 1, "LATE_SLOTS": 1}
    p.update(params)
    return {"template": "skinny_gemm", "arch": "sm_90a", "W": width, "shape": dict(O_PROJ_SHAPE),
            "params": p}


def shipped_keys(w, desc, *args):
    r = w.kf("keys", "--arch", "sm_90a", "--templates", "shipped/templates", *args, desc,
             common=False)
    w.case.assertEqual(r.rc, 0, str(r))
    return dict(line.split() for line in r.out.splitlines()), r


def load_tune_module():
    spec = importlib.util.spec_from_file_location(
        "kforge_tune", os.path.join(SRC, "python", "kforge", "tune.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # imports no torch until it times
    return mod


class TuningFiles(unittest.TestCase):
    def test_shipped_tuning_files_apply_to_the_shipped_descriptions(self):
        """Each file of models/tuning/ (kforge tune's choices on a device) is
        read, checked against the shipped templates and matches kernels of
        the shipped descriptions."""
        tdir = os.path.join(SRC, "models", "tuning")
        files = sorted(f for f in os.listdir(tdir) if f.endswith(".json"))
        self.assertTrue(files)
        models = sorted(os.path.join(SRC, "models", f) for f in os.listdir(
            os.path.join(SRC, "models")) if f.endswith(".json"))
        w = Work(self, "tuning-shipped")
        for f in files:
            with self.subTest(f=f):
                r = w.kf("keys", "--arch", "sm_90a", "--tuning", os.path.join(tdir, f), *models,
                         common=False)
                self.assertEqual(r.rc, 0, str(r))
                m = re.search(r"tuning: (\d+) of (\d+) entries match kernels of this build; "
                              r"(\d+) kernels take other values", r.err)
                self.assertTrue(m and int(m.group(1)) > 0 and int(m.group(3)) > 0, r.err)

    def test_an_entry_builds_what_the_description_would_with_its_values(self):
        w = Work(self, "tuning", copy_shipped=True)
        desc = "shipped/models/qwen3-0.6b.json"
        before, _ = shipped_keys(w, desc)
        after, r = shipped_keys(w, desc, "--tuning", tuning_file(w, [o_proj_entry(width=1)]))
        self.assertIn("tuning: 1 of 1 entries match kernels of this build; 2 kernels take other "
                      "values than their description's", r.err)
        # the same values written into the description
        d = w.load_json(desc)
        d["shape"].update({"o_proj_k_split": 1, "o_proj_deep_ring": 1, "o_proj_late_slots": 1})
        w.dump_json("shipped/models/qwen3-0.6b-x.json", d)
        direct, _ = shipped_keys(w, "shipped/models/qwen3-0.6b-x.json")
        changed = sorted(i for i in before if before[i] != after[i])
        self.assertEqual(changed, ["qwen3-0.6b/layer/w1/sm_90a", "qwen3-0.6b/o_proj/w1/sm_90a"])
        for i in changed:
            self.assertEqual(after[i], direct[i], i)
        self.assertNotEqual(before["qwen3-0.6b/o_proj/w2/sm_90a"],
                            direct["qwen3-0.6b/o_proj/w2/sm_90a"])  # the description: every width

    def test_an_entry_that_repeats_the_values_changes_nothing(self):
        w = Work(self, "tuning-same", copy_shipped=True)
        desc = "shipped/models/qwen3-0.6b.json"
        before, _ = shipped_keys(w, desc)
        same = o_proj_entry(width=2, KSPLIT=2, DEEP_RING=0, LATE_SLOTS=0)
        other_arch = dict(o_proj_entry(width=1), arch="sm_100a")
        other_shape = o_proj_entry(width=1)
        other_shape["shape"]["K"] = 4096
        after, r = shipped_keys(w, desc, "--tuning",
                                tuning_file(w, [same, other_arch, other_shape]))
        self.assertEqual(before, after)
        self.assertIn("tuning: 1 of 3 entries match kernels of this build; 0 kernels take", r.err)

    def test_bad_tuning_files_are_refused_with_their_place(self):
        w = Work(self, "tuning-bad", copy_shipped=True)
        desc = "shipped/models/qwen3-0.6b.json"
        no_shape = o_proj_entry()
        del no_shape["shape"]["K"]
        cases = [
            ({"kforge_tuning": 2, "device": "x", "entries": []}, "kforge_tuning: error: must be 1"),
            ({"kforge_tuning": 1, "entries": []}, "device: error: must name the device"),
            ({"kforge_tuning": 1, "device": "x", "entries": [], "extra": 1}, "extra"),
            ([o_proj_entry(KSPLIT=3)], "entries[0].params.KSPLIT: error: must be one of its "
                                       "tuning candidates 1, 2, 4, 8, got 3"),
            ([o_proj_entry(N=16)], "entries[0].params.N: error: is not a tuning parameter"),
            ([o_proj_entry(FOO=1)], "entries[0].params.FOO: error: is not a parameter"),
            ([no_shape], "entries[0].shape: error: lacks K"),
            ([dict(o_proj_entry(), arch="sm_77")], "entries[0].arch: error:"),
            ([dict(o_proj_entry(), W=0)], "entries[0].W: error: must be a width"),
            ([o_proj_entry(), o_proj_entry(KSPLIT=2)],
             "entries[1]: error: repeats entries[0]: one entry per template, arch, W and shape"),
        ]
        for body, want in cases:
            with self.subTest(want=want):
                if isinstance(body, list):
                    tuning_file(w, body, name="bad.json")
                else:
                    w.dump_json("bad.json", body)
                r = w.kf("build", "--arch", "sm_90a", "--templates", "shipped/templates",
                         "--cache", "cache", "--out", "out", "--tuning", "bad.json", desc,
                         common=False)
                self.assertEqual(r.rc, 2, str(r))
                self.assertIn("bad.json: ", r.err)
                self.assertIn(want, r.err)
                self.assertFalse(os.path.exists(w.path("cache")), "a refused build wrote")
                self.assertFalse(os.path.exists(w.path("out")), "a refused build wrote")
        w.write("broken.json", '{"kforge_tuning": 1,')
        r = w.kf("keys", "--arch", "sm_90a", "--templates", "shipped/templates", "--tuning",
                 "broken.json", desc, common=False)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("broken.json:1:", r.err)

    def test_two_devices_tuning_the_same_kernels_are_refused(self):
        w = Work(self, "tuning-two", copy_shipped=True)
        a = tuning_file(w, [o_proj_entry()], device="GPU A", name="a.json")
        b = tuning_file(w, [o_proj_entry(KSPLIT=2)], device="GPU B", name="b.json")
        r = w.kf("keys", "--arch", "sm_90a", "--templates", "shipped/templates", "--tuning", a,
                 "--tuning", b, "shipped/models/qwen3-0.6b.json", common=False)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("b.json: entries[0]: error: entries[0] of a.json (GPU A) is for the same "
                      "kernels", r.err)


# one skinny GEMM at widths 1 and 2: K = 512 leaves KSPLIT 1 and 2 (K / KSPLIT at least 256)
SMALL = {"name": "small-gemm", "shape": {}, "widths": [1, 2], "arches": ["sm_90a"],
         "kernels": [{"kind": "proj", "template": "skinny_gemm",
                      "params": {"N": 64, "K": 512, "KSPLIT": 2, "DEEP_RING": 0,
                                 "LATE_SLOTS": 0}}]}


class Tune(unittest.TestCase):
    def test_build_only_builds_each_candidate_alone(self):
        w = Work(self, "tune", copy_shipped=True)
        w.dump_json("small.json", SMALL)
        r = w.kf("tune", "--build-only", "--dir", "t", "--templates", "shipped/templates",
                 "small.json", common=False, timeout=900)
        self.assertEqual(r.rc, 0, str(r))
        self.assertIn("16 of 32 candidates built (the others' templates refused them", r.err)
        self.assertIn("kforge tune --time-only --dir t", r.err)
        plan = w.load_json("t/plan.json")
        self.assertEqual(plan["kforge_tune_plan"], 1)
        units = plan["units"]
        self.assertEqual([(u["template"], u["W"], u["arch"]) for u in units],
                         [("skinny_gemm", 1, "sm_90a"), ("skinny_gemm", 2, "sm_90a")])
        for u in units:
            self.assertEqual(u["shape"], {"N": 64, "K": 512})
            self.assertEqual(u["current"], {"KSPLIT": 2, "DEEP_RING": 0, "LATE_SLOTS": 0})
            self.assertEqual(u["kernels"], [f"small-gemm/proj/w{u['W']}/sm_90a"])
            cands = u["candidates"]
            self.assertEqual(len(cands), 16)
            seen = set()
            for c in cands:
                p = c["params"]
                seen.add((p["KSPLIT"], p["DEEP_RING"], p["LATE_SLOTS"]))
                self.assertEqual(c["built"], p["KSPLIT"] <= 2, c)
                man = w.path("t", "cache", "v1", "manifests", c["model"], "sm_90a.json")
                self.assertEqual(os.path.exists(man), c["built"], c)
                d = w.load_json(f"t/descriptions/{c['model']}.json")
                self.assertEqual(d["widths"], [u["W"]])
                self.assertEqual(d["kernels"][0]["params"], dict(p, N=64, K=512))
            self.assertEqual(len(seen), 16)
        # the build's own words for the refusals are in the log
        self.assertIn("K / KSPLIT", w.read("t/build.log"))
        # a rerun compiles nothing that built; --widths keeps those widths' units
        r = w.kf("tune", "--build-only", "--widths", "2", "--dir", "t", "--templates",
                 "shipped/templates", "small.json", common=False, timeout=900)
        self.assertEqual(r.rc, 0, str(r))
        self.assertIn("16 kernels: 8 cached, 0 compiled, 8 failed", w.read("t/build.log"))
        self.assertEqual([u["W"] for u in w.load_json("t/plan.json")["units"]], [2])

    def test_time_only_runs_the_timer_with_the_directory(self):
        w = Work(self, "tune-time")
        w.write("py", "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$(dirname \"$0\")/argv\"\n")
        os.chmod(w.path("py"), stat.S_IRWXU)
        r = w.kf("tune", "--time-only", "--dir", "t", "--budget", "60", common=False,
                 env={"KFORGE_PYTHON": w.path("py")})
        self.assertEqual(r.rc, 0, str(r))
        self.assertEqual(w.read("argv").split("\n")[:-1],
                         ["-m", "kforge.tune", "t", "--out", "t/tuning.json", "--budget", "60"])
        r = w.kf("tune", "--time-only", "--dir", "t", common=False,
                 env={"KFORGE_PYTHON": w.path("nothing-here")})
        self.assertEqual(r.rc, 1, str(r))
        self.assertIn("the timing needs Python with the kforge binding and torch", r.err)

    def test_the_timer_without_a_gpu_says_so(self):
        """python -m kforge.tune on a machine without torch or a GPU (CI) stops
        with exit 1 and says what it needs, leaving the directory alone."""
        w = Work(self, "tune-nogpu")
        w.dump_json("t/plan.json", {"kforge_tune_plan": 1, "units": []})
        env = dict(w.env, PYTHONPATH=os.path.join(SRC, "python"))
        lib = os.environ.get("KFORGE_RT_LIBRARY")
        if lib:
            env["KFORGE_RT_LIBRARY"] = lib
        if os.environ.get("KFORGE_TEST_PRELOAD"):
            env.update(LD_PRELOAD=os.environ["KFORGE_TEST_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
        r = subprocess.run([sys.executable, "-m", "kforge.tune", "t"], cwd=w.root, env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"kforge tune: (the timer needs torch|no GPU that torch)")
        self.assertEqual(sorted(os.listdir(w.path("t"))), ["plan.json"])
        w.dump_json("t/plan.json", {"units": []})
        r = subprocess.run([sys.executable, "-m", "kforge.tune", "t"], cwd=w.root, env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("not a plan of this kforge tune", r.stderr)

    def test_usage_errors(self):
        w = Work(self, "tune-usage")
        for args, want in ((["--build-only", "--time-only"], "exclude each other"),
                           (["--budget", "0", "x.json"], "--budget needs a number"),
                           (["--widths", "1,0", "x.json"], "--widths needs widths from 1"),
                           ([], "no description given")):
            r = w.kf("tune", *args, common=False)
            self.assertEqual(r.rc, 2, str(r))
            self.assertIn(want, r.err)
        w.dump_json("plain.json", dict(SMALL, kernels=[
            {"kind": "n", "template": "add_rmsnorm", "params": {"HIDDEN": 1024, "EPS": 1e-6}}]))
        r = w.kf("tune", "--build-only", "--templates", os.path.join(SRC, "templates"),
                 "plain.json", common=False)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("no kernel of these descriptions has a tuning parameter", r.err)


class Choice(unittest.TestCase):
    """python/kforge/tune.py's rule: the fastest correct candidate, unless the
    description's values are within 1% of it."""

    def test_choice(self):
        tune = load_tune_module()
        cur = {"KSPLIT": 2}
        unit = {"current": cur}

        def res(**by_split):
            return {f"c{k}": {"params": {"KSPLIT": int(k[1:])}, "ok": ok, "us": us}
                    for k, (us, ok) in by_split.items()}
        self.assertEqual(tune.choose(unit, res(s1=(10.0, True), s2=(12.0, True))),
                         ({"KSPLIT": 1}, 10.0, 12.0))
        self.assertEqual(tune.choose(unit, res(s1=(10.0, True), s2=(10.05, True))),
                         (cur, 10.05, 10.05))
        self.assertEqual(tune.choose(unit, res(s1=(9.0, False), s2=(12.0, True))),
                         (cur, 12.0, 12.0))
        self.assertEqual(tune.choose(unit, res(s1=(9.0, False))), None)
        self.assertEqual(tune.choose({"current": {"KSPLIT": 8}}, res(s1=(10.0, True))),
                         ({"KSPLIT": 1}, 10.0, None))

    def test_recipes_cover_every_template_with_tuning_knobs(self):
        tune = load_tune_module()
        for name in sorted(os.listdir(os.path.join(SRC, "templates"))):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(SRC, "templates", name)) as f:
                schema = json.load(f)
            tuned = [p for p, s in schema.get("params", {}).items() if "tuning" in s]
            if tuned:
                self.assertIn(schema["template"], tune.RECIPES, name)


if __name__ == "__main__":
    unittest.main()
