"""Closure ground truth: the files kforge hashes into a key, against what the
real compiler reads.

For each kernel, with kforge's own compile command (recorded by a wrapper
compiler given as KFORGE_NVCC / KFORGE_HIPCC that logs its argv and refuses
to compile, so no time goes into code generation):
- lower bound: the device pass's own include set. nvcc: `nvcc --dryrun`
  prints the device preprocessing command (`gcc -D__CUDA_ARCH__=… -E …`),
  which is rerun with -M. hipcc: `--cuda-device-only -M`.
- upper bound: every file the compiler reads for either pass: `nvcc -M`
  (host and device union); hipcc: the union of --cuda-device-only -M and
  --cuda-host-only -M.
kforge's closure (`kforge explain --json` inputs with tag "file", each named
relative to its include root, e.g. "@templates/fx_math.cuh") minus toolchain
files must hold every file of the lower bound and nothing outside the upper.
Toolchain files are the ones outside the test's work dir (CUDA, ROCm, libc).

Run on the fixture (whose includes differ between host and device passes and
between sm_90a and sm_100a) and on every shipped template, for sm_90a and
sm_100a, for gfx90a where hipcc is installed, and for gfx942 through clang-19's
HIP driver (KFORGE_HIPCC naming a clang: -nogpulib builds), a processor newer
than kforge's libclang, which parses it as gfx940 with clang-19's macros.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import unittest

from kfhelp import (FIXTURE_MODEL, WRAPPER, Work, compile_log, explain_files, make_nvcc_wrapper,
                    parse_make_deps, real_nvcc)

CUDA_ARCHES = ("sm_90a", "sm_100a")
HIP_ARCH = "gfx90a"
CLANG_ARCH = "gfx942"
HIPCC = shutil.which("hipcc") or ("/usr/bin/hipcc" if os.path.exists("/usr/bin/hipcc") else None)
CLANG19 = shutil.which("clang-19")
SOURCE_RE = re.compile(r"(?:^|/)([^/]+)/([^/]+)/([a-z0-9_-]+)_w(\d+)\.(cu|hip)$")


def make_hipcc_wrapper(root, real, name):
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    w = os.path.join(root, "bin", name)
    import sys
    text = (WRAPPER.replace("@REAL@", real).replace("@VSUFFIX@", "")
            .replace("@PY@", sys.executable))
    with open(w, "w") as f:
        f.write(text)
    os.chmod(w, 0o755)
    return w


def strip_output(argv):
    """argv without `-o FILE` / `-oFILE` / `--output-file …` and the source."""
    out, i, src = [], 0, None
    while i < len(argv):
        a = argv[i]
        if a in ("-o", "--output-file"):
            i += 2
            continue
        if a.startswith("--output-file=") or (a.startswith("-o") and len(a) > 2 and "=" not in a
                                              and not a.startswith("-opt")):
            i += 1
            continue
        if a.endswith((".cu", ".hip")) and not a.startswith("-"):
            src = a
        else:
            out.append(a)
        i += 1
    return out, src


def run(argv, cwd):
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace")
    return p


def nvcc_bounds(rec):
    """(device pass deps, host+device deps) for one recorded nvcc compile."""
    flags, src = strip_output(rec["argv"])
    cwd = rec["cwd"]
    nvcc = real_nvcc()
    dry = run([nvcc, "--dryrun"] + flags + [src, "-o", os.devnull], cwd)
    lines = [l[3:] for l in (dry.stdout + dry.stderr).splitlines()
             if l.startswith("#$ ") and " -E " in l and "-D__CUDA_ARCH__=" in l]
    assert len(lines) == 1, f"expected one device preprocessing line in nvcc --dryrun:\n{dry.stderr}"
    words = shlex.split(lines[0])
    cmd, i = [], 0
    while i < len(words):
        if words[i] == "-o":
            i += 2
            continue
        cmd.append(words[i])
        i += 1
    dev = run(cmd + ["-M"], cwd)
    assert dev.returncode == 0, f"{shlex.join(cmd)} -M failed:\n{dev.stderr}"
    full = run([nvcc, "-M"] + flags + [src], cwd)
    assert full.returncode == 0, f"nvcc -M failed:\n{full.stderr}"
    return src, parse_make_deps(dev.stdout), parse_make_deps(full.stdout)


def hip_bounds(rec, compiler):
    flags, src = strip_output(rec["argv"])
    flags = [f for f in flags if f not in ("--genco", "-c", "--offload-device-only",
                                           "--no-gpu-bundle-output")
             and not f.startswith("-Rpass")]
    cwd = rec["cwd"]
    dev = run([compiler] + flags + ["--cuda-device-only", "-M", src], cwd)
    assert dev.returncode == 0, f"{compiler} --cuda-device-only -M failed:\n{dev.stderr}"
    host = run([compiler] + flags + ["--cuda-host-only", "-M", src], cwd)
    assert host.returncode == 0, f"{compiler} --cuda-host-only -M failed:\n{host.stderr}"
    d = parse_make_deps(dev.stdout)
    return src, d, d + parse_make_deps(host.stdout)


def name_suffix(name):
    """A closure name as a path suffix: '@templates/x/y.cuh' -> '/x/y.cuh',
    '@abs/usr/include/x.h' -> '/usr/include/x.h', 'x/y.cuh' -> '/x/y.cuh'."""
    m = re.match(r"^@[A-Za-z0-9_.-]*(/.*)$", name)
    if m:
        return m.group(1)
    return "/" + name.lstrip("./")


class ClosureBounds:
    """Mixin: build with a logging, refusing wrapper; compare per kernel."""

    def collect(self, w, model, arch_list, extra_args, backend):
        log = w.path("compiles.jsonl")
        if os.path.exists(log):
            os.remove(log)
        if backend == "cuda":
            env = {"KFORGE_NVCC": make_nvcc_wrapper(w.path("cuda-wrap"))}
        elif backend == "hip":
            env = {"KFORGE_HIPCC": make_hipcc_wrapper(w.path("hip-wrap"), os.path.realpath(HIPCC),
                                                      "hipcc")}
        else:  # "hip-clang": clang-19 as the HIP driver
            env = {"KFORGE_HIPCC": make_hipcc_wrapper(w.path("clang-wrap"), CLANG19, "clang-19")}
        env.update({"KF_WRAP_LOG": log, "KF_WRAP_FAIL": "1"})
        r = w.kf("build", *extra_args, "--arch", ",".join(arch_list), model, env=env)
        recs = compile_log(log)
        self.assertEqual(r.rc, 1, f"every compile was refused, so build must exit 1\n{r}")
        self.assertTrue(recs, f"kforge ran no compile through the wrapper\n{r}")
        env.pop("KF_WRAP_FAIL")
        return recs, env

    def check(self, w, model, arch_list, extra_args=(), backend="cuda", expect=None):
        """expect: {(kind, arch): (must-have basenames, must-not-have basenames)}."""
        recs, env = self.collect(w, model, arch_list, extra_args, backend)
        root = os.path.realpath(w.root)
        mname = None
        checked = 0
        for rec in recs:
            if backend == "cuda":
                src, dev, full = nvcc_bounds(rec)
            else:
                src, dev, full = hip_bounds(rec, os.path.realpath(HIPCC) if backend == "hip"
                                            else CLANG19)
            m = SOURCE_RE.search(src)
            self.assertIsNotNone(m, f"compiled source {src} is not <out>/<model>/<arch>/<kind>_w<W>")
            mname, arch, kind, width = m.group(1), m.group(2), m.group(3), m.group(4)
            kid = f"{mname}/{kind}/w{width}/{arch}"
            src_real = os.path.realpath(os.path.join(rec["cwd"], src))
            dev = {os.path.realpath(os.path.join(rec["cwd"], p)) for p in dev}
            full = {os.path.realpath(os.path.join(rec["cwd"], p)) for p in full}
            lower = {p for p in dev if p.startswith(root + "/") and p != src_real}
            names = explain_files(w, model, kid, args=tuple(extra_args) + ("--arch", arch),
                                  env=env)
            where = f"{kid} ({backend})"
            # nothing outside what the compiler reads
            for n in names:
                suffix = name_suffix(n)
                hits = [p for p in full if p.endswith(suffix)]
                self.assertTrue(hits, f"{where}: closure file {n!r} is not among the files the "
                                      f"compiler reads for either pass:\n" + "\n".join(sorted(full)))
            # every file of the device pass (toolchain files aside)
            for p in sorted(lower):
                self.assertTrue(any(p.endswith(name_suffix(n)) for n in names),
                                f"{where}: the device pass reads {p} but the closure misses it; "
                                f"closure: {names}")
            if expect and (kind, arch) in expect:
                have, have_not = expect[(kind, arch)]
                bases = {os.path.basename(name_suffix(n)) for n in names}
                for b in have:
                    self.assertIn(b, bases, f"{where}: closure {names}")
                for b in have_not:
                    self.assertNotIn(b, bases, f"{where}: closure {names}")
            checked += 1
        return checked


# The fixture: what each kernel's device closure must and must not hold.
FIXTURE_EXPECT = {
    ("scale", "sm_90a"): ({"fx_scale.cuh", "fx_common.cuh", "fx_math.cuh", "fx_port.cuh",
                          "fx_vendor_a.h", "fx_vendor_a_impl.h", "fx_device_only.cuh",
                          "fx_arch90.cuh"},
                         {"fx_arch100.cuh", "fx_unused.cuh", "fx_vendor_b.h",
                          "fx_host_only.cuh"}),
    ("scale", "sm_100a"): ({"fx_arch100.cuh", "fx_device_only.cuh", "fx_math.cuh"},
                          {"fx_arch90.cuh"}),
    ("add", "sm_90a"): ({"fx_add.cuh", "fx_common.cuh", "fx_math.cuh", "fx_port.cuh"},
                        {"fx_vendor_a.h", "fx_vendor_b.h", "fx_scale.cuh", "fx_device_only.cuh"}),
    ("copy", "sm_100a"): ({"fx_copy.cuh", "fx_port.cuh", "fx_vendor_b.h"},
                          {"fx_math.cuh", "fx_common.cuh", "fx_vendor_a.h"}),
}


def one_width(w, rel):
    d = w.load_json(rel)
    d["widths"] = [1]
    w.dump_json(rel, d)


class FixtureClosure(ClosureBounds, unittest.TestCase):

    def test_cuda_fixture_closure_within_compiler_bounds(self):
        w = Work(self, "closure")
        one_width(w, FIXTURE_MODEL)
        n = self.check(w, FIXTURE_MODEL, CUDA_ARCHES, backend="cuda", expect=FIXTURE_EXPECT)
        self.assertEqual(n, 6, "3 kinds x 2 arches")

    @unittest.skipUnless(HIPCC, "hipcc is not installed (the CUDA closure tests still run)")
    def test_hip_fixture_closure_within_compiler_bounds(self):
        w = Work(self, "closure-hip")
        one_width(w, FIXTURE_MODEL)
        expect = {("scale", HIP_ARCH): ({"fx_scale.cuh", "fx_math.cuh", "fx_vendor_a_impl.h"},
                                        {"fx_host_only.cuh", "fx_arch90.cuh", "fx_arch100.cuh",
                                         "fx_gfx942.cuh"}),
                  ("copy", HIP_ARCH): ({"fx_vendor_b.h"}, {"fx_math.cuh"})}
        n = self.check(w, FIXTURE_MODEL, (HIP_ARCH,), backend="hip", expect=expect)
        self.assertEqual(n, 3)

    @unittest.skipUnless(CLANG19, "clang-19 is not installed (scripts/setup --test installs it)")
    def test_hip_clang19_fixture_closure_within_compiler_bounds(self):
        w = Work(self, "closure-clang")
        one_width(w, FIXTURE_MODEL)
        expect = {("scale", CLANG_ARCH): ({"fx_scale.cuh", "fx_math.cuh", "fx_vendor_a_impl.h",
                                           "fx_gfx942.cuh"},
                                          {"fx_host_only.cuh", "fx_arch90.cuh", "fx_arch100.cuh"}),
                  ("copy", CLANG_ARCH): ({"fx_vendor_b.h"}, {"fx_math.cuh"})}
        n = self.check(w, FIXTURE_MODEL, (CLANG_ARCH,), backend="hip-clang", expect=expect)
        self.assertEqual(n, 3)


def param_value(spec):
    """A value that meets a schema's constraints (docs/contracts.md)."""
    if "one_of" in spec:
        return spec["one_of"][0]
    if spec.get("type") == "float":
        lo, hi = spec.get("min", 0.0), spec.get("max", 1.0)
        return (lo + hi) / 2 if hi > lo else lo
    lo = spec.get("min", 1)
    hi = spec.get("max", 1 << 20)
    m = spec.get("multiple_of", 1)
    v = max(lo, 1024)
    v = -(-v // m) * m
    if v > hi:
        v = -(-lo // m) * m
    return v


def synthetic_description(tdir, mdir):
    """One kernel per shipped template, kind = template name, width 1."""
    kernels = []
    for n in sorted(os.listdir(tdir)):
        if not n.endswith(".json"):
            continue
        with open(os.path.join(tdir, n)) as f:
            schema = json.load(f)
        kernels.append({"kind": schema["template"], "template": schema["template"],
                        "params": {k: param_value(v) for k, v in schema["params"].items()}})
    include_dirs = []
    for n in sorted(os.listdir(mdir)):
        if n.endswith(".json"):
            with open(os.path.join(mdir, n)) as f:
                for d in json.load(f).get("include_dirs", []):
                    if d not in include_dirs:
                        include_dirs.append(d)
    desc = {"name": "closure-check",
            "shape": {"hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
                      "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
                      "rope_theta": 1000000, "dtype": "bf16"},
            "widths": [1], "kernels": kernels}
    if include_dirs:
        desc["include_dirs"] = include_dirs
    return desc, len(kernels)


class ShippedClosure(ClosureBounds, unittest.TestCase):

    def setUp(self):
        self.w = Work(self, "closure-shipped", copy_shipped=True)
        tdir, mdir = self.w.path("shipped", "templates"), self.w.path("shipped", "models")
        self.assertTrue(os.path.isdir(tdir) and any(n.endswith(".json") for n in os.listdir(tdir)),
                        "templates/ ships no template schema")
        desc, self.n = synthetic_description(tdir, mdir)
        self.model = "shipped/models/closure-check.json"
        self.w.dump_json(self.model, desc)
        self.args = ("--cache", "cache", "--out", "kernels-out", "--templates", "shipped/templates")

    def kf_check(self, arches, backend):
        self.w.use_common = False    # the shipped templates instead of the fixture's
        return self.check(self.w, self.model, arches, extra_args=self.args, backend=backend)

    def test_cuda_shipped_templates_closure_within_compiler_bounds(self):
        self.assertEqual(self.kf_check(CUDA_ARCHES, "cuda"), self.n * len(CUDA_ARCHES))

    @unittest.skipUnless(HIPCC, "hipcc is not installed (the CUDA closure tests still run)")
    def test_hip_shipped_templates_closure_within_compiler_bounds(self):
        self.assertEqual(self.kf_check((HIP_ARCH,), "hip"), self.n)

    @unittest.skipUnless(CLANG19, "clang-19 is not installed (scripts/setup --test installs it)")
    def test_hip_clang19_shipped_templates_closure_within_compiler_bounds(self):
        self.assertEqual(self.kf_check((CLANG_ARCH,), "hip-clang"), self.n)


if __name__ == "__main__":
    unittest.main()
