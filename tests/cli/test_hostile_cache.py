"""Hostile caches: a real cache of the fixture model, corrupted one way per
case, must be refused by `kforge verify` (exit 1) and by the runtime (the
Python binding against the fake CUDA driver), with the same reason
(docs/contracts.md, "Trust"; verify and the runtime share runtime/
rt_manifest.c and rt_trust.c). Each case names the place its reason must
point at."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from kfhelp import KFORGE, SRC, Work

MODEL = "fx-small"
KID = "fx-small/copy/w2/sm_90a"   # the kernel corrupted by object cases
FAKE = os.environ.get("KFORGE_TEST_FAKE_CUDA") or os.path.join(
    os.path.dirname(os.path.dirname(KFORGE)), "tests", "runtime", "libfake_cuda.so")
RT_LIBRARY = os.environ.get("KFORGE_RT_LIBRARY") or os.path.join(
    os.path.dirname(os.path.dirname(KFORGE)), "runtime", "libkforge_rt.so")

# Opens the cache lazily (the fixture's objects are real cubins, which the
# fake driver cannot load) and finds one kernel, which reads its object.
CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import kforge
cache, model, fake, kind, rows = sys.argv[2:7]
try:
    rt = kforge.Runtime(cache, model, driver_path=fake, lazy=True)
    if kind:
        rt.kernel(kind, int(rows))
    print(json.dumps({"status": 0, "reason": ""}))
except kforge.Error as e:
    print(json.dumps({"status": int(e.status), "reason": e.reason}))
"""

def child_env(**kw):
    """The environment of a Python that loads the runtime: the fake driver's
    device, the built library, and the sanitizer runtimes when the library
    was built with them (tests/CMakeLists.txt)."""
    env = dict(os.environ, FAKE_CUDA_CC="90", KFORGE_RT_LIBRARY=RT_LIBRARY, **kw)
    if os.environ.get("KFORGE_TEST_PRELOAD"):
        env.update(LD_PRELOAD=os.environ["KFORGE_TEST_PRELOAD"], ASAN_OPTIONS="detect_leaks=0")
    return env


UNTRUSTED, BAD_MANIFEST, FORMAT, IO, CHECKSUM = 17, 7, 8, 9, 10


class HostileCache(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kf-hostile-")
        os.chmod(cls.tmp, 0o755)

        class Once(unittest.TestCase):
            def runTest(self):
                pass
        case = Once()
        cls.work = Work(case, "hostile")
        cls.case = case
        cls.keys = cls.work.keys()
        r = cls.work.build()
        if r.rc != 0:
            raise RuntimeError(f"the fixture build failed\n{r}")
        cls.built = os.path.join(cls.work.root, cls.work.cache)

    @classmethod
    def tearDownClass(cls):
        cls.case.doCleanups()
        for d, _, _ in os.walk(cls.tmp):
            os.chmod(d, 0o755)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.cache = tempfile.mkdtemp(dir=self.tmp)
        os.chmod(self.cache, 0o755)
        self.cache = os.path.join(self.cache, "cache")
        shutil.copytree(self.built, self.cache, symlinks=True)
        for d, _, files in os.walk(self.cache):  # as a 022 umask leaves them
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)

    # --- the cache ------------------------------------------------------------

    def v1(self, *rel):
        return os.path.join(self.cache, "v1", *rel)

    def manifest_path(self):
        return self.v1("manifests", MODEL, "sm_90a.json")

    def edit_manifest(self, fn):
        with open(self.manifest_path()) as f:
            m = json.load(f)
        fn(m)
        with open(self.manifest_path(), "w") as f:
            json.dump(m, f, indent=2)

    def entry_dir(self):
        key = self.keys[KID]
        return self.v1("objects", key[:2], key)

    def object(self):
        d = self.entry_dir()
        return os.path.join(d, [n for n in os.listdir(d) if n.startswith("object.")][0])

    # --- the two readers ------------------------------------------------------

    def verify(self):
        p = subprocess.run([KFORGE, "verify", "--cache", self.cache], capture_output=True,
                           text=True, timeout=120)
        return p.returncode, p.stdout + p.stderr

    def runtime(self, kind="copy", rows=2):
        env = child_env()
        env.pop("KFORGE_LAX_PERMISSIONS", None)
        p = subprocess.run([sys.executable, "-c", CHILD, os.path.join(SRC, "python"), self.cache,
                            MODEL, FAKE, kind or "", str(rows)], capture_output=True, text=True,
                           timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def refused(self, status, place, kind="copy", rows=2):
        """Both readers refuse; the runtime with status and a reason that
        names place; verify (exit 1) with the same reason."""
        rt = self.runtime(kind, rows)
        self.assertEqual(rt["status"], status, rt)
        self.assertIn(place, rt["reason"])
        rc, out = self.verify()
        self.assertEqual(rc, 1, f"verify must refuse what the runtime refuses\n{out}")
        reason = rt["reason"]
        # an object's reason starts "kernel <id>: "; verify's walk of entries
        # may give it without the prefix
        bare = reason.split(": ", 1)[1] if reason.startswith("kernel ") else reason
        lines = [l for l in out.splitlines() if l.startswith("damaged: ")]
        self.assertTrue(any(l.endswith(reason) or l.endswith(bare) for l in lines),
                        f"verify does not give the runtime's reason\n{reason}\n{out}")
        return rt, out

    # --- the cases ------------------------------------------------------------

    def test_intact_cache_is_accepted_by_both(self):
        self.assertEqual(self.runtime(kind=""), {"status": 0, "reason": ""})
        rc, out = self.verify()
        self.assertEqual(rc, 0, out)

    def test_object_replaced_by_a_directory(self):
        o = self.object()
        os.remove(o)
        os.mkdir(o, 0o755)
        self.refused(IO, f"{o}: not a regular file")

    def test_object_replaced_by_a_fifo_does_not_block(self):
        o = self.object()
        os.remove(o)
        os.mkfifo(o, 0o644)
        self.refused(IO, f"{o}: not a regular file")

    def test_object_is_a_symlink_loop(self):
        o = self.object()
        os.remove(o)
        os.symlink(os.path.basename(o), o)
        self.refused(UNTRUSTED, "symbolic link")

    def test_entry_directory_symlinked_outside_the_cache(self):
        d = self.entry_dir()
        outside = os.path.join(os.path.dirname(self.cache), "elsewhere")
        shutil.move(d, outside)
        os.symlink(outside, d)
        rt, _ = self.refused(UNTRUSTED, "symbolic link")
        self.assertIn(d, rt["reason"])

    def test_key_not_hex(self):
        self.edit_manifest(lambda m: m["kernels"][0].update(key="zz" * 16))
        self.refused(BAD_MANIFEST, "kernels[0].key: error: must be 32 hex digits", kind="")

    def test_key_with_dotdot(self):
        self.edit_manifest(lambda m: m["kernels"][1].update(key="../../../../etc/passwd"))
        self.refused(BAD_MANIFEST, "kernels[1].key: error", kind="")

    def test_manifest_fields_the_runtime_checks(self):
        def kernel0(**kw):
            return lambda m: m["kernels"][0].update(**kw)

        def first_param_type(m):
            sig = next(iter(m["signatures"].values()))
            sig["params"][0]["type"] = "double"

        def dup_id(m):
            m["kernels"][1] = dict(m["kernels"][0])

        cases = [
            ("object ..", kernel0(object="../../etc/passwd"), BAD_MANIFEST, "kernels[0].object"),
            ("object /", kernel0(object="/etc/passwd"), BAD_MANIFEST, "kernels[0].object"),
            ("meta ..", kernel0(meta="objects/../../x"), BAD_MANIFEST, "kernels[0].meta"),
            ("format", lambda m: m.update(format=99), FORMAT, "manifest format 99"),
            ("arch", lambda m: m.update(arch="sm_80"), BAD_MANIFEST, "arch: error"),
            ("model", lambda m: m.update(model="other"), BAD_MANIFEST, "model: error"),
            ("backend", lambda m: m.update(backend="rocm"), BAD_MANIFEST, "backend: error"),
            ("id", kernel0(id="fx-small/copy/w9/sm_90a"), BAD_MANIFEST, "kernels[0].id"),
            ("dup id", dup_id, BAD_MANIFEST, "kernels[1].id: error: 'fx-small/"),
            ("checksum", kernel0(checksum="x" * 32), BAD_MANIFEST, "kernels[0].checksum"),
            ("size type", kernel0(size="12"), BAD_MANIFEST, "kernels[0].size"),
            ("width", kernel0(width=0), BAD_MANIFEST, "kernels[0].width"),
            ("symbol", kernel0(symbol="a-b"), BAD_MANIFEST, "kernels[0].symbol"),
            ("launch", kernel0(launch={"grid": [0, 1, 1], "block": [1, 1, 1],
                                       "shared_bytes": 0}), BAD_MANIFEST,
             "kernels[0].launch.grid[0]"),
            ("params", first_param_type, BAD_MANIFEST, ".params[0].type: error: unknown type"),
        ]
        good = open(self.manifest_path()).read()
        for name, fn, status, place in cases:
            with self.subTest(name):
                with open(self.manifest_path(), "w") as f:
                    f.write(good)
                self.edit_manifest(fn)
                self.refused(status, place, kind="")

    def test_object_size_differs_from_the_manifest(self):
        def grow(m):
            k = next(k for k in m["kernels"] if k["id"] == KID)
            k["size"] += 1
        self.edit_manifest(grow)
        self.refused(CHECKSUM, "the manifest says")

    def test_group_writable_manifest_directory(self):
        d = os.path.dirname(self.manifest_path())
        os.chmod(d, 0o775)
        self.refused(UNTRUSTED, f"{d}: error: writable by group", kind="")

    def test_world_writable_object(self):
        os.chmod(self.object(), 0o666)
        self.refused(UNTRUSTED, f"{self.object()}: error: writable by others")

    def test_group_writable_manifest_and_cache_root(self):
        os.chmod(self.manifest_path(), 0o664)
        self.refused(UNTRUSTED, f"{self.manifest_path()}: error: writable by group", kind="")
        os.chmod(self.manifest_path(), 0o644)
        os.chmod(self.cache, 0o777)
        self.refused(UNTRUSTED, f"{self.cache}: error: writable by others", kind="")

    def test_object_owned_by_another_user(self):
        if os.geteuid() != 0:
            self.skipTest("giving a file to another user needs root")
        os.chown(self.object(), 65534, 65534)
        self.refused(UNTRUSTED, "owned by uid 65534")

    def test_lax_permissions_opts_out_of_owners_and_modes_not_links(self):
        os.chmod(self.object(), 0o666)
        p = subprocess.run([KFORGE, "verify", "--cache", self.cache, "--lax-permissions"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = subprocess.run([sys.executable, "-c", CHILD, os.path.join(SRC, "python"),
                            self.cache, MODEL, FAKE, "", "1"], capture_output=True,
                           text=True, timeout=120, env=child_env(KFORGE_LAX_PERMISSIONS="1"))
        self.assertEqual(json.loads(p.stdout)["status"], 0, p.stdout + p.stderr)
        o = self.object()
        os.remove(o)
        os.symlink("/etc/passwd", o)
        p = subprocess.run([KFORGE, "verify", "--cache", self.cache, "--lax-permissions"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("symbolic link", p.stdout)


if __name__ == "__main__":
    unittest.main()
