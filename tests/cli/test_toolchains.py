"""Which compiler builds each AMD arch (docs/install.md, "AMD"): hipcc first,
then the newest clang-N on PATH as a plain HIP driver; `kforge toolchains`
says, per arch, which one a build uses with its flags, or every compiler
tried and why none can. Keys carry the compiler's identity, so the same
kernel built by hipcc and by clang-19 for one arch gets two keys.

gfx950 has no compiler here (it needs LLVM 20 / ROCm 6.4): a stand-in hipcc
that answers like ROCm 6.4's and preprocesses through clang-19 shows the
compiler, flags and keys kforge would use where one is installed.
"""
import json
import os
import shutil
import unittest

from kfhelp import FIXTURE_MODEL, Work, explain_files

HIPCC = shutil.which("hipcc") or ("/usr/bin/hipcc" if os.path.exists("/usr/bin/hipcc") else None)
CLANG19 = shutil.which("clang-19")

# Answers --version like ROCm 6.4's hipcc; runs everything else through
# clang-19 for gfx942 without device libraries, and reports gfx950 back
# (the target macros of its device pass: __gfx950__).
STAND_IN = r"""#!/usr/bin/env python3
import subprocess, sys
if "--version" in sys.argv:
    print("HIP version: 6.4.43482-0")
    print("AMD clang version 19.0.0git (roc-6.4.0 25133)")
    print("Target: x86_64-unknown-linux-gnu")
    sys.exit(0)
args = ["@CLANG@", "-nogpulib"] + [a.replace("gfx950", "gfx942") for a in sys.argv[1:]
                                   if a != "--genco"]
p = subprocess.run(args, capture_output=True, text=True)
sys.stdout.write(p.stdout.replace("gfx942", "gfx950"))
sys.stderr.write(p.stderr.replace("gfx942", "gfx950"))
sys.exit(p.returncode)
"""


@unittest.skipUnless(HIPCC and CLANG19, "needs hipcc and clang-19 (scripts/setup --test)")
class Toolchains(unittest.TestCase):

    def toolchains(self, w, *arches, env=None, rc=0):
        r = w.kf("toolchains", "--json", "--arch", ",".join(arches), env=env, common=False)
        self.assertEqual(r.rc, rc, r)
        return {row["arch"]: row for row in json.loads(r.out)}

    def test_each_amd_arch_names_the_compiler_that_builds_it(self):
        w = Work(self, "tc-arches")
        rows = self.toolchains(w, "gfx90a", "gfx942")
        self.assertEqual(os.path.realpath(rows["gfx90a"]["compiler"]), os.path.realpath(HIPCC))
        self.assertIn("--genco", rows["gfx90a"]["flags"])
        self.assertEqual(rows["gfx942"]["compiler"], CLANG19)
        self.assertTrue({"--offload-arch=gfx942", "-nogpulib", "-DKF_NO_DEVICE_LIBS",
                         "--offload-device-only"} <= set(rows["gfx942"]["flags"]), rows["gfx942"])
        r = w.kf("toolchains", "--arch", "gfx942", common=False)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"gfx942: {CLANG19} (clang 19.", r.out)

    def test_an_arch_no_compiler_targets_fails_naming_every_compiler_tried_and_others_build(self):
        w = Work(self, "tc-none")
        rows = self.toolchains(w, "gfx950", "gfx942", rc=1)
        why = rows["gfx950"]["reason"]
        self.assertIsNone(rows["gfx950"]["compiler"])
        for word in (HIPCC, CLANG19, "invalid target ID 'gfx950'", "LLVM 20", "ROCm 6.4"):
            self.assertIn(word, why)
        self.assertIsNotNone(rows["gfx942"]["compiler"])
        # the fixture's templates call the device library: hipcc's gfx90a
        r = w.build(FIXTURE_MODEL, args=("--arch", "gfx950,gfx90a"), expect_rc=1)
        self.assertIn("fx-small/", r.err)
        self.assertIn(why, r.err)
        self.assertEqual(r.summary, (12, 0, 6, 6), r)
        self.assertTrue(os.path.exists(w.v1("manifests", "fx-small", "gfx90a.json")))
        self.assertFalse(os.path.exists(w.v1("manifests", "fx-small", "gfx950.json")))

    def test_hipcc_and_clang19_give_the_same_kernel_different_keys(self):
        w = Work(self, "tc-keys")
        args = ("--arch", "gfx90a,gfx942")
        default = w.keys(FIXTURE_MODEL, args=args)
        by_hipcc = w.keys(FIXTURE_MODEL, args=("--arch", "gfx90a"), env={"KFORGE_HIPCC": HIPCC})
        by_clang = w.keys(FIXTURE_MODEL, args=args, env={"KFORGE_HIPCC": CLANG19})
        self.assertEqual(len(by_hipcc), 6)
        for kid, key in by_hipcc.items():
            self.assertNotEqual(key, by_clang[kid], kid)      # same arch, other compiler
            self.assertEqual(key, default[kid], kid)          # hipcc comes first for gfx90a
        for kid in default:
            if kid.endswith("/gfx942"):
                self.assertEqual(default[kid], by_clang[kid], kid)  # only clang-19 targets it
        # the identity record says which compiler
        kid = "fx-small/scale/w1/gfx90a"
        for env, word in (({"KFORGE_HIPCC": HIPCC}, "HIP version"),
                          ({"KFORGE_HIPCC": CLANG19}, "clang version 19")):
            r = w.kf("explain", "--json", "--arch", "gfx90a", FIXTURE_MODEL, kid, env=env)
            self.assertEqual(r.rc, 0, r)
            self.assertIn(word, r.out)

    def test_a_gfx950_compiler_is_used_where_one_is_installed(self):
        w = Work(self, "tc-gfx950")
        os.makedirs(w.path("rocm", "bin"))
        stand_in = w.path("rocm", "bin", "hipcc")
        with open(stand_in, "w") as f:
            f.write(STAND_IN.replace("@CLANG@", CLANG19))
        os.chmod(stand_in, 0o755)
        env = {"KFORGE_HIPCC": stand_in}
        rows = self.toolchains(w, "gfx950", env=env)
        row = rows["gfx950"]
        self.assertEqual(row["compiler"], stand_in)
        self.assertIn("HIP 6.4.43482-0", row["version"])
        self.assertEqual(row["flags"], ["-std=c++17", "-O3", "--offload-arch=gfx950", "--genco",
                                        "-Rpass-analysis=kernel-resource-usage"])
        keys = w.keys(FIXTURE_MODEL, args=("--arch", "gfx950"), env=env)
        self.assertEqual(sorted(keys), sorted(f"fx-small/{k}/w{n}/gfx950" for k in
                                              ("add", "copy", "scale") for n in (1, 2)))
        self.assertEqual(keys, w.keys(FIXTURE_MODEL, args=("--arch", "gfx950"), env=env))
        r = w.kf("explain", "--json", "--arch", "gfx950", FIXTURE_MODEL,
                 "fx-small/scale/w1/gfx950", env=env)
        self.assertIn("HIP version: 6.4.43482-0", r.out)
        self.assertIn("--offload-arch=gfx950", r.out)
        # its device pass is parsed with the compiler's macros for gfx950
        # (kforge's libclang 16 knows no gfx950): not gfx942's, nor none
        files = explain_files(w, FIXTURE_MODEL, "fx-small/scale/w1/gfx950",
                              args=("--arch", "gfx950"), env=env)
        self.assertIn("@templates/fx_scale.cuh", files)
        self.assertIn("@templates/fx_gfx950.cuh", files)
        self.assertNotIn("@templates/fx_gfx942.cuh", files)


if __name__ == "__main__":
    unittest.main()
