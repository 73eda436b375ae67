"""The shipped descriptions (models/*.json), built by kforge for every arch
each one names: every kernel compiles, and ptxas reports no spill stores, no
spill loads and no stack frame for any of them.

The GPU tests run sm_90a only; a template change that keeps sm_90a clean can
still spill for sm_100a, which no machine here runs, so the check lives in the
CPU suite. Needs nvcc; about a minute on two cores.
"""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from kfhelp import KFORGE, SRC, base_env

MODELS = sorted(glob.glob(os.path.join(SRC, "models", "*.json")))


def expected_kernels(path):
    """(kinds x widths x arches) of one description, through its family."""
    with open(path) as f:
        desc = json.load(f)
    with open(os.path.join(SRC, "models", "families", desc["family"] + ".json")) as f:
        kinds = {k["kind"] for k in json.load(f)["kernels"]}
    kinds |= {k["kind"] for k in desc.get("kernels", [])}
    return len(kinds) * len(desc["widths"]) * len(desc["arches"])


class ShippedKernels(unittest.TestCase):
    """One test (ctest runs each method in its own process, and the build is
    the expensive part)."""

    def test_every_shipped_kernel_builds_for_its_arches_without_spills(self):
        work = tempfile.mkdtemp(prefix="kf-shipped-")
        self.addCleanup(shutil.rmtree, work, True)
        cache = os.path.join(work, "cache")
        argv = [KFORGE, "build", "--template-dir", os.path.join(SRC, "templates"), "--cache", cache,
                "--out", os.path.join(work, "out"), "-j", str(os.cpu_count() or 2), "--json",
                *MODELS]
        proc = subprocess.run(argv, cwd=work, env=base_env(), capture_output=True, text=True,
                              timeout=1200)
        self.assertEqual(proc.returncode, 0, proc.stderr[-4000:])
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        want = sum(expected_kernels(p) for p in MODELS)
        self.assertGreaterEqual(len(MODELS), 3)
        self.assertEqual((summary["kernels"], summary["failed"]), (want, 0))

        metas = []
        for p in glob.glob(os.path.join(cache, "v1", "objects", "*", "*", "meta.json")):
            with open(p) as f:
                metas.append(json.load(f))
        self.assertEqual(len(metas), want)
        arches = {m["kernel_id"].rsplit("/", 1)[1] for m in metas}
        self.assertTrue({"sm_90a", "sm_100a"} <= arches, arches)
        bad = []
        for m in metas:
            r = m["resources"]
            self.assertIn("spill_stores", r, m["kernel_id"])
            if r["spill_stores"] or r["spill_loads"] or r.get("stack_bytes", 0):
                bad.append(f"{m['kernel_id']}: {r['registers']} registers, stack "
                           f"{r.get('stack_bytes', 0)} B, spill stores {r['spill_stores']} B, "
                           f"spill loads {r['spill_loads']} B")
        self.assertEqual(bad, [], "ptxas spilled:\n" + "\n".join(sorted(bad)))


if __name__ == "__main__":
    unittest.main()
