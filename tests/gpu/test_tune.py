"""GPU test of `kforge tune`'s timer (python -m kforge.tune) on candidates
built elsewhere by `kforge tune --build-only` (scripts/gpu-prepare: Qwen3-0.6B
and Qwen3-8B into .gpu-bundle/tune): every candidate that built computes the
right result, every unit gets an entry whose values are among its
candidates, and a second run measures nothing again (resumable). It prints
per unit the chosen values against the description's and the first
candidates' (the families' defaults), the table of the closing note.

Environment: KF_TEST_TUNE_DIR (default .gpu-bundle/tune of the checkout).
Run: python3 tests/gpu/test_tune.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUNE_DIR = os.environ.get("KF_TEST_TUNE_DIR", os.path.join(ROOT, ".gpu-bundle", "tune"))
TOL = 1e-2


def run_timer(d, out, *extra):
    return subprocess.run([sys.executable, "-m", "kforge.tune", d, "--out", out, *extra],
                          capture_output=True, text=True, timeout=1200)


class TuneTimer(unittest.TestCase):
    def test_every_built_candidate_is_right_and_every_unit_chosen(self):
        with open(os.path.join(TUNE_DIR, "plan.json")) as f:
            plan = json.load(f)
        with tempfile.TemporaryDirectory(prefix="kf-tune-") as d:
            # the plan and the built cache, results written here (not into the bundle)
            with open(os.path.join(d, "plan.json"), "w") as f:
                json.dump(plan, f)
            os.symlink(os.path.join(os.path.abspath(TUNE_DIR), "cache"), os.path.join(d, "cache"))
            out = os.path.join(d, "tuning.json")
            r = run_timer(d, out)
            sys.stdout.write(r.stdout)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                tuning = json.load(f)
            with open(os.path.join(d, "results.json")) as f:
                results = json.load(f)
            dev = tuning["device"]
            units = plan["units"]
            self.assertEqual(len(tuning["entries"]), len(units), r.stderr)
            wrong = []
            for u in units:
                for c in u["candidates"]:
                    if c["built"]:
                        res = results[f"{dev}|{c['model']}"]
                        if not res["ok"]:
                            wrong.append((c["model"], c["params"], res.get("err")))
                        else:
                            self.assertGreater(res["us"], 0)
            self.assertEqual(wrong, [], "candidates that computed a wrong result")
            ratios_cur, ratios_first = [], []
            print(f"\n{'unit':44s} {'chosen':34s} {'us':>7s} {'desc us':>8s} {'first us':>8s}")
            for e, u in zip(tuning["entries"], units):
                self.assertEqual((e["template"], e["W"], e["shape"]),
                                 (u["template"], u["W"], u["shape"]))
                self.assertIn(e["params"], [c["params"] for c in u["candidates"] if c["built"]])
                m = e["measured"]
                label = " ".join(f"{k}={v}" for k, v in u["shape"].items())
                print(f"{u['template'] + ' ' + label + ' W=' + str(u['W']):44s} "
                      f"{','.join(f'{k}={v}' for k, v in e['params'].items()):34s} "
                      f"{m['us']:7.2f} {m['current_us'] or float('nan'):8.2f} "
                      f"{m['first_us'] or float('nan'):8.2f}")
                if m["current_us"]:
                    ratios_cur.append(m["current_us"] / m["us"])
                if m["first_us"]:
                    ratios_first.append(m["first_us"] / m["us"])
            if ratios_cur:
                print(f"description's values / chosen: mean {sum(ratios_cur) / len(ratios_cur):.3f}, "
                      f"max {max(ratios_cur):.3f}; first candidates / chosen: mean "
                      f"{sum(ratios_first) / max(len(ratios_first), 1):.3f}")
            # resumable: a second run times nothing and writes the same choices
            r2 = run_timer(d, os.path.join(d, "again.json"))
            self.assertEqual(r2.returncode, 0, r2.stderr)
            with open(os.path.join(d, "again.json")) as f:
                self.assertEqual(json.load(f)["entries"], tuning["entries"])


if __name__ == "__main__":
    unittest.main()
