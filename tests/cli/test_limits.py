"""Resource limits (docs/contracts.md, "Resource limits"): a kernel over a
limit set in its template, description or kernel entry fails its build with
the figure and the limit while the other kernels build; the entry stays in the
cache, so raising the limit compiles nothing; `kforge lint` prints the
figures beside the limits; bad limits exit 2 with their place."""
import glob
import json
import os
import re
import shutil
import subprocess
import unittest

from kfhelp import Work, snapshot


def small(w, **changes):
    """fx-small restricted to sm_90a, with changes applied by a callback
    or merged at the top."""
    d = json.loads(w.read("models/fx-small.json"))
    d["arches"] = ["sm_90a"]
    for k, v in changes.items():
        d[k] = v
    return d


def kernel(d, kind):
    return next(k for k in d["kernels"] if k["kind"] == kind)


def stand_in_readelf(w, *kernels):
    """A stand-in llvm-readelf printing an AMDGPU metadata note with one
    entry per dict of kernels (members without their dot); returns its path."""
    lines = ["#!/bin/sh", "cat <<'EOF'", "---", "amdhsa.kernels:"]
    for k in kernels:
        members = [f"    .{name}: {value}" for name, value in sorted(k.items())]
        lines += ["  - " + members[0].lstrip()] + members[1:]
    lines += ["amdhsa.target:   amdgcn-amd-amdhsa--gfx90a", "EOF", ""]
    w.write("fake-readelf", "\n".join(lines))
    os.chmod(w.path("fake-readelf"), 0o755)
    return w.path("fake-readelf")


ERROR = re.compile(r"^kforge: error: (\S+): (\d+) (registers|spilled|blocks per SM|waves per SIMD), "
                   r"(over|under) the limit (\w+) (\d+) \(([^)]+)\)", re.M)


class Limits(unittest.TestCase):

    def test_a_kernel_over_its_register_limit_fails_with_the_figure_and_the_rest_build(self):
        w = Work(self, "lim-regs")
        d = small(w)
        kernel(d, "scale")["limits"] = {"max_registers": 4}
        w.write("models/lim.json", json.dumps(d))
        r = w.build("models/lim.json", expect_rc=1)
        found = {m.group(1): m.groups()[1:] for m in ERROR.finditer(r.err)}
        self.assertEqual(set(found), {"fx-small/scale/w1/sm_90a", "fx-small/scale/w2/sm_90a"}, r)
        for regs, what, side, name, limit, where in found.values():
            self.assertGreater(int(regs), 4)
            self.assertEqual((what, side, name, limit, where),
                             ("registers", "over", "max_registers", "4", "models/lim.json"))
        self.assertEqual(r.summary, (6, 0, 4, 2), r)
        manifest = w.v1("manifests", "fx-small", "sm_90a.json")
        self.assertFalse(os.path.exists(manifest), "a manifest with a kernel over its limit")
        # the entries stay: a raised limit builds from the cache
        kernel(d, "scale")["limits"] = {"max_registers": 255}
        w.write("models/lim.json", json.dumps(d))
        r = w.build("models/lim.json")
        self.assertEqual(r.summary, (6, 6, 0, 0), r)
        self.assertTrue(os.path.exists(manifest))

    def test_a_kernel_that_spills_fails_a_spills_limit_and_builds_without_it(self):
        w = Work(self, "lim-spill")
        d = {"name": "fx-spill", "shape": {"hidden_size": 256}, "widths": [1],
             "arches": ["sm_90a"], "limits": {"spills": 0},
             "kernels": [{"kind": "spill", "template": "fx_spill", "params": {"N": "hidden_size"}},
                         {"kind": "add", "template": "fx_add", "params": {"N": "hidden_size"}}]}
        w.write("models/spill.json", json.dumps(d))
        r = w.build("models/spill.json", expect_rc=1)
        found = {m.group(1): m.groups()[1:] for m in ERROR.finditer(r.err)}
        self.assertEqual(list(found), ["fx-spill/spill/w1/sm_90a"], r)
        spilled, what, side, name, limit, where = found["fx-spill/spill/w1/sm_90a"]
        self.assertGreater(int(spilled), 0)
        self.assertEqual((what, name, limit, where), ("spilled", "spills", "0", "models/spill.json"))
        meta = w.meta(w.keys("models/spill.json")["fx-spill/spill/w1/sm_90a"])
        self.assertEqual(int(spilled), meta["resources"]["spill_stores"] + meta["resources"]["spill_loads"])
        del d["limits"]
        w.write("models/spill.json", json.dumps(d))
        self.assertEqual(w.build("models/spill.json").summary, (2, 2, 0, 0))

    def test_the_most_specific_limit_wins_and_backend_limits_apply_only_there(self):
        w = Work(self, "lim-levels")
        d = small(w, limits={"max_registers": 4, "hip": {"max_registers": 255}})
        for k in d["kernels"]:
            k["limits"] = {"cuda": {"max_registers": 255}}  # overrides the description's 4
        kernel(d, "add")["limits"] = {"cuda": {"min_blocks_per_sm": 64}}  # more than an SM holds
        w.write("models/lim.json", json.dumps(d))
        r = w.build("models/lim.json", expect_rc=1)
        found = {m.group(1): m.groups()[1:] for m in ERROR.finditer(r.err)}
        self.assertEqual(set(found), {"fx-small/add/w1/sm_90a", "fx-small/add/w2/sm_90a"}, r)
        for got in found.values():
            # add keeps the description's max_registers 4 too: both are reported
            self.assertEqual(got[1:5], ("registers", "over", "max_registers", "4"), r)
        self.assertRegex(r.err, r"fx-small/add/w1/sm_90a: .*; 32 blocks per SM, under the limit "
                                r"min_blocks_per_sm 64 \(models/lim.json\)")
        # a template's limits apply unless the description or the entry sets them
        schema = json.loads(w.read("templates/fx_copy.json"))
        schema["limits"] = {"cuda": {"max_registers": 1}}
        w.write("templates/fx_copy.json", json.dumps(schema))
        d = small(w)
        w.write("models/plain.json", json.dumps(d))
        r = w.build("models/plain.json", expect_rc=1)
        self.assertRegex(r.err, r"fx-small/copy/w1/sm_90a: \d+ registers, over the limit "
                                r"max_registers 1 \([^)]*/templates/fx_copy.json\)")
        kernel(d, "copy")["limits"] = {"max_registers": 255}
        w.write("models/plain.json", json.dumps(d))
        self.assertEqual(w.build("models/plain.json").summary[3], 0)

    def test_amd_kernels_are_held_to_their_vgprs_spills_and_waves(self):
        w = Work(self, "lim-amd")
        d = small(w, arches=["gfx90a"], kernels=[k for k in small(w)["kernels"] if k["kind"] == "add"],
                  widths=[1], limits={"spills": 0, "cuda": {"max_registers": 1},
                                      "hip": {"min_waves_per_eu": 9}})
        w.write("models/amd.json", json.dumps(d))
        r = w.build("models/amd.json", expect_rc=1)
        found = {m.group(1): m.groups()[1:] for m in ERROR.finditer(r.err)}
        self.assertEqual(list(found), ["fx-small/add/w1/gfx90a"], r)
        waves, what, side, name, limit, where = found["fx-small/add/w1/gfx90a"]
        self.assertEqual((what, side, name, limit), ("waves per SIMD", "under", "min_waves_per_eu", "9"))
        self.assertNotIn("max_registers", r.err, "a cuda limit applied to a gfx arch")
        res = w.meta(w.keys("models/amd.json")["fx-small/add/w1/gfx90a"])["resources"]
        self.assertEqual(res["waves_per_eu"], int(waves))
        self.assertEqual(res["spilled_registers"], 0)
        self.assertGreater(res["sgprs"], 0)
        self.assertGreaterEqual(res["agprs"], 0)
        d["limits"] = {"hip": {"max_registers": res["registers"] + res["agprs"] - 1}}
        w.write("models/amd.json", json.dumps(d))
        r = w.build("models/amd.json", expect_rc=1)
        self.assertEqual(r.summary, (1, 0, 0, 1), r)  # failed from the cache: no compile
        self.assertRegex(r.err, rf"{res['registers'] + res['agprs']} registers, over the limit "
                                rf"max_registers {res['registers'] + res['agprs'] - 1} ")

    def test_amd_figures_are_read_from_the_code_object(self):
        """meta.json's AMD figures are the metadata note's of the kernel's own
        symbol (llvm-readelf --notes on the ELF taken out of the bundle), the
        compiler's remarks only where no llvm-readelf is found."""
        w = Work(self, "lim-notes")
        d = small(w, arches=["gfx90a"], widths=[1],
                  kernels=[k for k in small(w)["kernels"] if k["kind"] == "add"])
        w.write("models/amd.json", json.dumps(d))
        w.build("models/amd.json")
        kid = "fx-small/add/w1/gfx90a"
        key = w.keys("models/amd.json")[kid]
        res = w.meta(key)["resources"]
        symbol = next(k["symbol"] for k in w.manifest("fx-small", "gfx90a")["kernels"]
                      if k["id"] == kid)
        # the note, read here with LLVM's own tools
        tools = sorted(glob.glob("/usr/lib/llvm-*/bin/clang-offload-bundler"))
        self.assertTrue(tools, "hipcc's LLVM has no clang-offload-bundler")
        bindir = os.path.dirname(tools[-1])
        elf = w.path("k.elf")
        subprocess.run([tools[-1], "--unbundle", "--type=o", "--input=" + w.object_path(key),
                        "--targets=hipv4-amdgcn-amd-amdhsa--gfx90a", "--output=" + elf], check=True)
        note = subprocess.run([os.path.join(bindir, "llvm-readelf"), "--notes", elf],
                              capture_output=True, text=True, check=True).stdout
        entry = note[note.rindex("\n  - ", 0, note.index(symbol)):]

        def fig(name):
            return int(re.search(rf"^    \.{name}:\s+(\d+)$", entry, re.M).group(1))
        self.assertEqual((res["registers"], res["sgprs"], res["spilled_registers"],
                          res["stack_bytes"], res["shared_bytes"]),
                         (fig("vgpr_count"), fig("sgpr_count"),
                          fig("vgpr_spill_count") + fig("sgpr_spill_count"),
                          fig("private_segment_fixed_size"), fig("group_segment_fixed_size")))
        # a stand-in llvm-readelf: its figures, for this symbol and not another's, reach the meta
        fake = stand_in_readelf(
            w, {"group_segment_fixed_size": 1, "name": "kf_other", "private_segment_fixed_size": 1,
                "sgpr_count": 1, "sgpr_spill_count": 1, "vgpr_count": 1, "vgpr_spill_count": 1},
            {"agpr_count": 4, "group_segment_fixed_size": 96, "name": symbol,
             "private_segment_fixed_size": 8, "sgpr_count": 33, "sgpr_spill_count": 2,
             "vgpr_count": 77, "vgpr_spill_count": 3})
        shutil.rmtree(w.path(w.cache))
        w.build("models/amd.json", env={"KFORGE_LLVM_READELF": fake})
        got = w.meta(key)["resources"]
        self.assertEqual((got["registers"], got["agprs"], got["sgprs"], got["spilled_registers"],
                          got["stack_bytes"], got["shared_bytes"]), (77, 4, 33, 5, 8, 96))
        # no llvm-readelf: the compiler's remarks, which agree with the note here
        shutil.rmtree(w.path(w.cache))
        w.build("models/amd.json", env={"KFORGE_LLVM_READELF": w.path("none")})
        got = w.meta(key)["resources"]
        self.assertEqual((got["registers"], got["sgprs"], got["spilled_registers"]),
                         (res["registers"], res["sgprs"], res["spilled_registers"]))

    def test_amd_spills_count_where_the_kernel_has_scratch(self):
        """SGPRs spilled into VGPR lanes (or VGPRs into AGPRs) move no memory:
        with no private segment the spills figure is 0 and spills: 0 holds;
        with one, every spilled register counts (stand-in notes)."""
        w = Work(self, "lim-scratch")
        d = small(w, arches=["gfx90a"], widths=[1], limits={"spills": 0},
                  kernels=[k for k in small(w)["kernels"] if k["kind"] == "add"])
        w.write("models/amd.json", json.dumps(d))
        w.build("models/amd.json")
        kid = "fx-small/add/w1/gfx90a"
        key = w.keys("models/amd.json")[kid]
        symbol = next(k["symbol"] for k in w.manifest("fx-small", "gfx90a")["kernels"]
                      if k["id"] == kid)
        for scratch, rc in ((0, 0), (16, 1)):
            fake = stand_in_readelf(
                w, {"group_segment_fixed_size": 0, "name": symbol,
                    "private_segment_fixed_size": scratch, "sgpr_count": 104,
                    "sgpr_spill_count": 14, "vgpr_count": 40, "vgpr_spill_count": 0})
            shutil.rmtree(w.path(w.cache))
            r = w.build("models/amd.json", env={"KFORGE_LLVM_READELF": fake}, expect_rc=rc)
            self.assertEqual(w.meta(key)["resources"]["spilled_registers"], 14)
            lint = w.kf("lint", "--json", "models/amd.json", env={"KFORGE_LLVM_READELF": fake})
            row = json.loads(lint.out)[0] if lint.out.lstrip().startswith("[") else None
            self.assertIsNotNone(row, lint)
            self.assertEqual((row["spills"], row["status"], lint.rc),
                             ((0, "OK", 0) if rc == 0 else (14, "OVER", 1)), lint)
            found = {m.group(1): m.groups()[1:3] for m in ERROR.finditer(r.err)}
            self.assertEqual(found, {} if rc == 0 else {kid: ("14", "spilled")}, r)

    def test_lint_prints_figures_limits_and_status(self):
        w = Work(self, "lim-lint")
        d = small(w)
        kernel(d, "scale")["limits"] = {"max_registers": 4}
        kernel(d, "add")["limits"] = {"spills": 0, "min_blocks_per_sm": 1}
        w.write("models/lim.json", json.dumps(d))
        r = w.kf("lint", "models/lim.json")
        self.assertEqual(r.rc, 1, r)
        rows = {l.split()[0]: l.split() for l in r.out.splitlines()[1:]}
        self.assertEqual(len(rows), 6, r)
        self.assertTrue(all(v[5] == "MISSING" for v in rows.values()), r)
        w.build("models/lim.json", expect_rc=1)
        before = snapshot(w.path(w.cache))
        r = w.kf("lint", "models/lim.json")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(snapshot(w.path(w.cache)), before, "lint wrote to the cache")
        rows = {l.split()[0]: l.split() for l in r.out.splitlines()[1:]}
        self.assertEqual(rows["fx-small/scale/w1/sm_90a"][5], "OVER", r)
        self.assertIn("over the limit max_registers 4", r.out)
        self.assertEqual(rows["fx-small/add/w1/sm_90a"][5], "OK", r)
        self.assertEqual(rows["fx-small/add/w1/sm_90a"][6], "spills=0,min_blocks_per_sm=1", r)
        key = w.keys("models/lim.json")["fx-small/add/w1/sm_90a"]
        res = w.meta(key)["resources"]
        self.assertEqual(int(rows["fx-small/add/w1/sm_90a"][1]), res["registers"])
        j = json.loads(w.kf("lint", "--json", "models/lim.json").out)
        by_id = {e["id"]: e for e in j}
        self.assertEqual(by_id["fx-small/add/w1/sm_90a"]["limits"],
                         {"spills": 0, "min_blocks_per_sm": 1})
        self.assertEqual(by_id["fx-small/add/w1/sm_90a"]["registers"], res["registers"])
        self.assertGreaterEqual(by_id["fx-small/add/w1/sm_90a"]["blocks_per_sm"], 1)
        self.assertEqual(by_id["fx-small/scale/w2/sm_90a"]["status"], "OVER")
        del kernel(d, "scale")["limits"]
        w.write("models/lim.json", json.dumps(d))
        self.assertEqual(w.kf("lint", "models/lim.json").rc, 0)

    def test_bad_limits_exit_2_with_their_place_and_write_nothing(self):
        w = Work(self, "lim-bad")
        cases = [
            ({"max_regs": 4}, r'models/bad.json: limits.max_regs: error: unknown field "max_regs"'),
            ({"spills": -1}, r"models/bad.json: limits.spills: error: must be an integer from 0"),
            ({"spills": 0.5}, r"models/bad.json: limits.spills: error: must be an integer from 0"),
            ({"spills": 7.7e30}, r"models/bad.json: limits.spills: error: must be an integer from 0 "
                                 r"to 65536, got a number out of range"),
            ({"max_registers": "255"}, r"models/bad.json: limits.max_registers: error: must be an "
                                       r"integer from 0 to 65536, got a string"),
            ({"cuda": {"hip": {}}}, r'models/bad.json: limits.cuda.hip: error: unknown field "hip"'),
            ({"cuda": 3}, r"models/bad.json: limits.cuda: error: must be an object of limits"),
            ([], r"models/bad.json: limits: error: must be an object of limits, got an array"),
        ]
        for limits, expected in cases:
            with self.subTest(limits=limits):
                w.write("models/bad.json", json.dumps(small(w, limits=limits)))
                r = w.kf("build", "models/bad.json")
                self.assertEqual(r.rc, 2, r)
                self.assertRegex(r.err, expected)
                self.assertFalse(w.entries(), "bad input wrote a cache entry")
        d = small(w)
        kernel(d, "add")["limits"] = {"min_waves_per_eu": 1e9}
        w.write("models/bad.json", json.dumps(d))
        r = w.kf("build", "models/bad.json")
        self.assertEqual(r.rc, 2, r)
        self.assertRegex(r.err, r"kernels\[1\]\.limits\.min_waves_per_eu: error: must be an integer")


if __name__ == "__main__":
    unittest.main()
