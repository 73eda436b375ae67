"""Golden files for emitted sources: kernels-out/fx-golden/<arch>/<kind>_w4.cu
must equal tests/fixtures/golden/fx-golden/<arch>/<kind>_w4.cu byte for byte,
and a build that changes nothing must not rewrite them (mtime unchanged).

To regenerate after an intended change of the emitter:
  KFORGE_UPDATE_GOLDEN=1 ctest --test-dir build -R cli.test_golden
and review the diff of tests/fixtures/golden/ like code.
"""
import ctypes
import ctypes.util
import os
import re
import time
import unittest

from kfhelp import FIXTURES, Work

MODEL = "models/fx-golden.json"
GOLDEN = os.path.join(FIXTURES, "golden")


def load_xxh3_64():
    """XXH3_64bits from the system's libxxhash (kforge links it), or None."""
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        f = lib.XXH3_64bits
        f.restype = ctypes.c_uint64
        f.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return f
    return None


def tree(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            files[os.path.relpath(p, root)] = p
    return files


class Golden(unittest.TestCase):

    def test_emitted_sources_match_golden_files_and_are_not_rewritten(self):
        w = Work(self, "golden")
        r = w.build(MODEL)
        self.assertEqual(r.summary, (4, 0, 4, 0))
        out = tree(w.path(w.out))
        expect = {os.path.join("fx-golden", a, f"{k}_w4.cu")
                  for a in ("sm_90a", "sm_100a") for k in ("copy", "scale")}
        self.assertEqual(set(out), expect, "kernels-out/ holds other files than the plan's sources")
        if os.environ.get("KFORGE_UPDATE_GOLDEN") == "1":
            for rel, p in out.items():
                dst = os.path.join(GOLDEN, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(p, "rb") as s, open(dst, "wb") as d:
                    d.write(s.read())
        golden = tree(GOLDEN)
        self.assertEqual(set(golden), expect, f"golden files in {GOLDEN}")
        for rel in sorted(expect):
            got = open(out[rel], "rb").read()
            want = open(golden[rel], "rb").read()
            self.assertEqual(got.decode(), want.decode(), f"{rel} differs from its golden file")

        # the symbol: kf_ + id (non-alphanumerics as _) + _ + XXH3-64(id)[:8]
        xxh3 = load_xxh3_64()
        for rel, p in out.items():
            text = open(p).read()
            m = re.search(r"^// kernel (\S+), template", text, re.M)
            self.assertIsNotNone(m, f"{rel}: no '// kernel <id>' line")
            kid = m.group(1)
            sym = "kf_" + re.sub(r"[^A-Za-z0-9]", "_", kid) + "_"
            if xxh3:
                sym += "%016x" % xxh3(kid.encode(), len(kid.encode()))
                sym = sym[:len(sym) - 8]
                self.assertIn(f"\n{sym}(", text, f"{rel}: symbol of {kid}")
            else:
                self.assertRegex(text, "\n" + re.escape(sym) + r"[0-9a-f]{8}\(")

        mtimes = {rel: os.stat(p).st_mtime_ns for rel, p in out.items()}
        time.sleep(0.05)
        self.assertEqual(w.build(MODEL).summary, (4, 4, 0, 0))
        self.assertEqual({rel: os.stat(p).st_mtime_ns for rel, p in out.items()}, mtimes,
                         "a no-op build rewrote generated sources")

        # a change of one kind's parameter rewrites that kind's sources only
        d = w.load_json(MODEL)
        d["kernels"][1]["params"]["STRIDE"] = 2
        w.dump_json(MODEL, d)
        time.sleep(0.05)
        self.assertEqual(w.build(MODEL).summary, (4, 2, 2, 0))
        for rel, p in out.items():
            now = os.stat(p).st_mtime_ns
            if "/copy_" in rel:
                self.assertNotEqual(now, mtimes[rel], f"{rel} was not rewritten")
                self.assertIn("STRIDE = 2;", open(p).read())
            else:
                self.assertEqual(now, mtimes[rel], f"{rel} was rewritten without a change")


if __name__ == "__main__":
    unittest.main()
