"""Hostile descriptions meet limits, not hangs or floods: each case of the
table runs `kforge keys` and `kforge build` on one description and asserts the
exit status, the place in the first error, how many error lines come out
(docs/cli.md: at most 20 per file, then one "and K more errors" line) and
that it finishes in seconds (the runner's --timeout stays the one hard limit;
the bound here only makes a quadratic check fail loudly)."""
import json
import os
import re
import time
import unittest

from kfhelp import Work, snapshot

MAX_ERRORS = 20  # gen/report.h KF_REPORT_MAX_ERRORS, docs/cli.md
SECONDS = 10     # today: well under a second each on a busy 2-core machine


def description(**changes):
    d = {
        "name": "fx-hostile",
        "shape": {"hidden_size": 256, "intermediate_size": 512, "rms_norm_eps": 1e-6,
                  "dtype": "bf16"},
        "widths": [1],
        "arches": ["sm_90a"],
        "kernels": [
            {"kind": "add", "template": "fx_add", "params": {"N": "hidden_size"}},
        ],
    }
    d.update(changes)
    return d


def many_shape_fields(n, repeat=None):
    """A description whose shape has n more fields; with repeat, that field
    written a second time at the end (JSON text: a dict cannot repeat)."""
    d = description()
    body = json.dumps(d["shape"])[:-1]
    body += "".join(f', "f{i}": {i}' for i in range(n))
    if repeat:
        body += f', "{repeat}": 1'
    d["shape"] = "@SHAPE@"
    return json.dumps(d).replace('"@SHAPE@"', body + "}")


class HostileLimits(unittest.TestCase):

    def setUp(self):
        self.w = Work(self, "hostile")
        os.mkfifo(self.w.path("models/fifo.json"))
        os.mkdir(self.w.path("models/dir.json"))

    def check(self, label, path, place, words=(), max_lines=MAX_ERRORS + 1, more=None):
        """place: regex of what follows the file name in the first error
        line; more: the K of the closing "and K more errors" line, or None
        when there must be none."""
        w = self.w
        cache0 = snapshot(w.path(w.cache))
        with self.subTest(label):
            for cmd in ("keys", "build"):
                t0 = time.monotonic()
                r = w.kf(cmd, path, timeout=120)
                took = time.monotonic() - t0
                self.assertEqual(r.rc, 2, f"{label}: `kforge {cmd}` must exit 2\n{r}")
                self.assertLess(took, SECONDS, f"{label}: `kforge {cmd}` took {took:.1f} s")
                errors = [l for l in r.err.splitlines() if ": error: " in l]
                self.assertTrue(errors, f"{label}: no error line\n{r}")
                self.assertRegex(errors[0], "^" + re.escape(path) + place + ": error: ",
                                 f"{label}: place\n{r}")
                for word in words:
                    self.assertIn(word, errors[0], f"{label}\n{r}")
                self.assertLessEqual(len(errors), max_lines, f"{label}: too many lines\n{r}")
                plural = "" if more == 1 else "s"
                tail = (f"{path}: error: and {more} more error{plural} "
                        f"(only the first {MAX_ERRORS} are shown)")
                if more is None:
                    self.assertNotIn(" more error", r.err, f"{label}\n{r}")
                else:
                    self.assertEqual(errors[-1], tail, f"{label}\n{r}")
                    self.assertEqual(len(errors), MAX_ERRORS + 1, f"{label}\n{r}")
            self.assertEqual(snapshot(w.path(w.cache)), cache0, f"{label}: the cache changed")

    def test_hostile_descriptions_exit_2_with_a_place_quickly_and_briefly(self):
        w = self.w
        deep = "(" * 100000 + "1" + ")" * 100000
        # label, description text (None: path given), path, place, words, more
        cases = [
            ("100k shape fields, one repeated", many_shape_fields(100000, repeat="hidden_size"),
             "models/shape.json", r": shape\.hidden_size", ('duplicate member "hidden_size"',),
             None),
            ("100k shape fields, the last one repeated", many_shape_fields(100000, repeat="f99999"),
             "models/shape-last.json", r": shape\.f99999", ('duplicate member "f99999"',), None),
            ("10^6 bad widths", json.dumps(description(widths=[0] * 1000000)),
             "models/widths.json", r": widths\[0\]", ("from 1 to 256, got 0",), 1000000 - MAX_ERRORS),
            ("21 bad widths: one held back", json.dumps(description(widths=[0] * 21)),
             "models/widths21.json", r": widths\[0\]", (), 1),
            ("20 bad widths: all shown", json.dumps(description(widths=[0] * 20)),
             "models/widths20.json", r": widths\[0\]", (), None),
            ("10^5 unknown top-level fields",
             json.dumps(dict(description(), **{f"x{i}": 1 for i in range(100000)})),
             "models/fields.json", r": x0", ('unknown field "x0"',), 100000 - MAX_ERRORS),
            ("parentheses 100000 deep",
             json.dumps(description(kernels=[{"kind": "add", "template": "fx_add",
                                              "params": {"N": deep}}])),
             "models/deep.json", r": kernels\[0\]\.params\.N", ("nested deeper than 64 levels",),
             None),
            ("JSON nested 100000 deep", '{"name": ' + "[" * 100000 + "]" * 100000 + "}",
             "models/deep-json.json", r":1:\d+", (), None),
            ("/dev/zero", None, "/dev/zero", "", ("cannot read: not a regular file",), None),
            ("a FIFO", None, "models/fifo.json", "", ("cannot read: not a regular file",), None),
            ("a directory", None, "models/dir.json", "", ("cannot read: Is a directory",), None),
        ]
        for label, text, path, place, words, more in cases:
            if text is not None:
                w.write(path, text)
            max_lines = MAX_ERRORS + 1 if more else MAX_ERRORS
            if more is None and "shape" in path:
                max_lines = 1  # only the repeat is wrong
            self.check(label, path, place, words, max_lines, more)


if __name__ == "__main__":
    unittest.main()
