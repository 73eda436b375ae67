"""The shipped descriptions (models/*.json), built by kforge for every arch
each one names, for gfx90a (hipcc) and for gfx942 (clang-19's HIP driver):
every kernel compiles, ptxas (the code object's notes) reports no spill
stores, no spill loads and no stack frame (scratch) for any of them, and
`kforge lint` on the cache just built shows every kernel OK under the
limits the descriptions set.

The GPU tests run sm_90a only; a template change that keeps sm_90a clean can
still spill for sm_100a, which no machine here runs, so the check lives in the
CPU suite. Needs nvcc; on two cores the NVIDIA arches take minutes and
gfx90a (hipcc) about twelve.
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


def expected_kernels(path, arch=None):
    """(kinds x widths x arches) of one description, through its family; one
    arch when the build names it."""
    with open(path) as f:
        desc = json.load(f)
    with open(os.path.join(SRC, "models", "families", desc["family"] + ".json")) as f:
        fam = json.load(f)
    kinds = {k["kind"] for k in fam["kernels"]}
    kinds |= {k["kind"] for k in desc.get("kernels", [])}
    kinds |= {k["kind"] for k in fam.get("layers", [])}  # layer kinds, on every arch
    arches = [arch] if arch else desc["arches"]
    return len(desc["widths"]) * len(kinds) * len(arches)


def layer_kernels(path):
    """The layer kinds' kernels of a description for one arch."""
    with open(path) as f:
        desc = json.load(f)
    with open(os.path.join(SRC, "models", "families", desc["family"] + ".json")) as f:
        return len(desc["widths"]) * len(json.load(f).get("layers", []))


HIPCC = shutil.which("hipcc") or ("/usr/bin/hipcc" if os.path.exists("/usr/bin/hipcc") else None)
CLANG19 = shutil.which("clang-19")


def shipped_limits(path):
    """The limits a description sets for all its kernels."""
    with open(path) as f:
        return json.load(f).get("limits", {})


class ShippedKernels(unittest.TestCase):
    """ctest runs each method in its own process; the builds are the
    expensive part."""

    def build_all(self, arch=None):
        """Builds every shipped description (for arch instead of the arches
        each names, when given); returns the metas and the manifests of what
        the cache holds."""
        work = tempfile.mkdtemp(prefix="kf-shipped-")
        self.addCleanup(shutil.rmtree, work, True)
        cache = self.cache = os.path.join(work, "cache")
        argv = [KFORGE, "build", "--template-dir", os.path.join(SRC, "templates"), "--cache", cache,
                "--out", os.path.join(work, "out"), "-j", str(os.cpu_count() or 2), "--json",
                *(["--arch", arch] if arch else []), *MODELS]
        # (no time limit of its own: the runner's --timeout is the one limit)
        proc = subprocess.run(argv, cwd=work, env=base_env(), capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr[-4000:])
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        want = sum(expected_kernels(p, arch) for p in MODELS)
        self.assertGreaterEqual(len(MODELS), 3)
        self.assertEqual((summary["kernels"], summary["failed"]), (want, 0))
        metas = []
        for p in glob.glob(os.path.join(cache, "v1", "objects", "*", "*", "meta.json")):
            with open(p) as f:
                metas.append(json.load(f))
        self.assertEqual(len(metas), want)
        manifests = []
        for p in glob.glob(os.path.join(cache, "v1", "manifests", "*", "*.json")):
            with open(p) as f:
                manifests.append(json.load(f))
        self.assert_lint_table(work, cache, arch, len(metas))
        return metas, manifests

    def assert_lint_table(self, work, cache, arch, want):
        """`kforge lint` on the cache just built: a row per kernel, each
        with the limits its description sets (spills 0 for every shipped
        one) and status OK with its figures within them."""
        argv = [KFORGE, "lint", "--template-dir", os.path.join(SRC, "templates"), "--cache", cache,
                "--out", os.path.join(work, "out"), "--json", *(["--arch", arch] if arch else []),
                *MODELS]
        proc = subprocess.run(argv, cwd=work, env=base_env(), capture_output=True, text=True,
                              timeout=1200)
        self.assertEqual(proc.returncode, 0, proc.stdout[-2000:] + proc.stderr[-2000:])
        rows = json.loads(proc.stdout)
        self.assertEqual(len(rows), want)
        limits = {}
        for p in MODELS:
            with open(p) as f:
                limits[json.load(f)["name"]] = shipped_limits(p)
        self.assertTrue(all(l.get("spills") == 0 for l in limits.values()), limits)
        bad = [r for r in rows if r["status"] != "OK" or r["spills"] != 0
               or r["limits"] != limits[r["id"].split("/", 1)[0]]]
        self.assertEqual(bad, [], "lint rows not OK under the shipped limits")

    def assert_no_spills(self, metas, compiler):
        bad = []
        for m in metas:
            r = m["resources"]
            self.assertIn("spill_stores", r, m["kernel_id"])
            if r["spill_stores"] or r["spill_loads"] or r.get("stack_bytes", 0):
                bad.append(f"{m['kernel_id']}: {r['registers']} registers, stack "
                           f"{r.get('stack_bytes', 0)} B, spill stores {r['spill_stores']} B, "
                           f"spill loads {r['spill_loads']} B")
        self.assertEqual(bad, [], compiler + " spilled:\n" + "\n".join(sorted(bad)))

    def test_every_shipped_kernel_builds_for_its_arches_without_spills(self):
        metas, _ = self.build_all()
        arches = {m["kernel_id"].rsplit("/", 1)[1] for m in metas}
        self.assertTrue({"sm_90a", "sm_100a"} <= arches, arches)
        self.assert_no_spills(metas, "ptxas")

    @unittest.skipUnless(HIPCC, "hipcc is not installed (scripts/setup --test installs it)")
    def test_every_shipped_kernel_builds_for_gfx90a_without_spills(self):
        """The HIP paths of the templates (no matrix instructions, 64-wide
        wavefronts) with the ROCm that Debian 12 ships (5.2, which has
        hip/hip_bfloat16.h but not hip/hip_bf16.h). Nothing runs them here."""
        metas, manifests = self.build_all("gfx90a")
        self.assertEqual({m["kernel_id"].rsplit("/", 1)[1] for m in metas}, {"gfx90a"})
        self.assertTrue(all(m["object"].endswith(".hsaco") for m in metas))
        self.assert_no_spills(metas, "hipcc")
        # a workgroup gets at most 64 KB of LDS, static and dynamic together
        # (the runtime refuses more); the portable paths ask for no dynamic
        static = {m["kernel_id"]: m["resources"]["shared_bytes"] for m in metas}
        # clang's "LDS Size" remark is read: attention stages its merge there
        self.assertGreater(static["qwen3-0.6b/decode_attention/w1/gfx90a"], 16384)
        kernels = [k for man in manifests for k in man["kernels"]]
        self.assertEqual(len(kernels), len(metas))
        over = [f"{k['id']}: {static[k['id']]} + {k['launch']['shared_bytes']} B" for k in kernels
                if static[k["id"]] + k["launch"]["shared_bytes"] > 65536]
        self.assertEqual(over, [], "more LDS than a gfx90a workgroup has")
        # the layer kinds' phases keep their items' data in dynamic LDS
        # (one attention item at a time here: two would not fit)
        layers = {k["id"] for k in kernels if k["launch"].get("persistent")}
        self.assertEqual(len(layers), sum(layer_kernels(p) for p in MODELS))
        self.assertEqual({k["launch"]["shared_bytes"] for k in kernels if k["id"] not in layers},
                         {0})

    @unittest.skipUnless(CLANG19, "clang-19 is not installed (scripts/setup --test installs it)")
    def test_every_shipped_kernel_builds_for_gfx942_with_clang19_without_spills(self):
        """gfx942, which Debian's ROCm 5.2 hipcc cannot target, through
        clang-19's HIP driver without device libraries (kf_portability.cuh
        defines the few functions of theirs that the HIP headers call)."""
        metas, manifests = self.build_all("gfx942")
        self.assertEqual({m["kernel_id"].rsplit("/", 1)[1] for m in metas}, {"gfx942"})
        self.assertTrue(all(os.path.basename(m["command"][0]).startswith("clang-19")
                            and "-nogpulib" in m["command"] for m in metas))
        self.assert_no_spills(metas, "clang-19")
        kernels = [k for man in manifests for k in man["kernels"]]
        self.assertEqual(len(kernels), len(metas))
        # each object is the device ELF itself, with a 64-lane kernel of the
        # manifest's symbol in its metadata note
        readelf = shutil.which("llvm-readelf-19") or "/usr/lib/llvm-19/bin/llvm-readelf"
        objdump = shutil.which("llvm-objdump-19") or "/usr/lib/llvm-19/bin/llvm-objdump"
        for k in kernels:
            obj = os.path.join(self.cache, "v1", "objects", k["key"][:2], k["key"], "object.hsaco")
            with open(obj, "rb") as f:
                self.assertEqual(f.read(4), b"\x7fELF", k["id"])
            notes = subprocess.run([readelf, "--notes", obj], capture_output=True, text=True,
                                   check=True).stdout
            self.assertRegex(notes, rf"\.name:\s+{k['symbol']}\n", k["id"])
            self.assertIn(".wavefront_size: 64", notes, k["id"])
            # kf_portability.cuh's device-library subset: inlined, on the
            # hardware's instructions, nothing left to call
            asm = subprocess.run([objdump, "-d", obj], capture_output=True, text=True,
                                 check=True).stdout
            self.assertNotIn("s_swappc", asm, k["id"])
            if k["kind"].endswith("_norm"):  # rsqrtf
                self.assertIn("v_rsq_f32", asm, k["id"])
            if k["kind"] == "rope_kv_write":  # __sincosf, double exp2 (log2 of a constant folds)
                for insn in ("v_sin_f32", "v_cos_f32", "v_ldexp_f64"):
                    self.assertIn(insn, asm, k["id"])


if __name__ == "__main__":
    unittest.main()
