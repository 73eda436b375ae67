"""Broken descriptions: each gives exit 2 with a message that says where
(`FILE:LINE:COL: error:` for syntax, `FILE: json.path: error:` for meaning)
and leaves the cache and kernels-out/ byte-for-byte as they were.

Each test starts from a populated cache (a real build of a small good
description) and runs one table of cases through `kforge build` and
`kforge keys`."""
import json
import os
import re
import unittest

from kfhelp import Work, snapshot

BAD = "models/bad.json"


def good_description():
    return {
        "name": "fx-bad",
        "shape": {"hidden_size": 256, "intermediate_size": 512, "rms_norm_eps": 1e-6,
                  "dtype": "bf16"},
        "widths": [1],
        "arches": ["sm_90a"],
        "kernels": [
            {"kind": "add", "template": "fx_add", "params": {"N": "hidden_size"}},
            {"kind": "copy", "template": "fx_copy", "params": {"N": 64, "STRIDE": 2}},
            {"kind": "scale", "template": "fx_scale",
             "params": {"N": "hidden_size", "ALPHA": "rms_norm_eps"}},
        ],
        "include_dirs": ["third_party/vendor_a"],
    }


def mutate(fn):
    d = good_description()
    fn(d)
    return json.dumps(d, indent=2) + "\n"


def setp(path, value):
    """A mutation setting d[path...] = value (path: keys and indexes)."""
    def fn(d):
        o = d
        for p in path[:-1]:
            o = o[p]
        o[path[-1]] = value
    return fn


def delp(path):
    def fn(d):
        o = d
        for p in path[:-1]:
            o = o[p]
        del o[path[-1]]
    return fn


class BadInput(unittest.TestCase):

    def setUp(self):
        self.w = Work(self, "bad")
        w = self.w
        w.dump_json("models/good.json", dict(good_description(), name="fx-good"))
        r = w.build("models/good.json")
        self.assertEqual(r.summary, (3, 0, 3, 0))
        self.cache0 = snapshot(w.path(w.cache))
        self.out0 = snapshot(w.path(w.out))
        self.assertTrue(self.cache0 and self.out0)

    def run_case(self, label, text, path_re, words=(), extra=(), models=(BAD,)):
        """text: the bad description; path_re: the message's place after
        'models/bad.json' (a regex), e.g. r': kernels\\[0\\]\\.params\\.N'."""
        w = self.w
        with self.subTest(label):
            w.write(BAD, text)
            for cmd in ("build", "keys"):
                r = w.kf(cmd, *extra, *models)
                self.assertEqual(r.rc, 2, f"{label}: `kforge {cmd}` must exit 2\n{r}")
                pat = re.compile("^" + re.escape(BAD) + path_re + r": error: (.+)$", re.M)
                m = pat.search(r.err)
                self.assertIsNotNone(m, f"{label}: no message matching {pat.pattern!r}\n{r}")
                for word in words:
                    self.assertIn(word, m.group(1), f"{label}: message lacks {word!r}\n{r}")
                self.assertEqual(r.out.strip(), "", f"{label}: `{cmd}` printed results\n{r}")
                self.assertEqual(snapshot(w.path(w.cache)), self.cache0,
                                 f"{label}: `{cmd}` changed the cache")
                self.assertEqual(snapshot(w.path(w.out)), self.out0,
                                 f"{label}: `{cmd}` changed kernels-out/")

    def test_syntax_errors_give_line_and_column(self):
        good = json.dumps(good_description(), indent=2)
        cases = [
            # '@@' marks where the parser must stop; it is removed from the text
            ("missing comma between members",
             good.replace('"name": "fx-bad",\n  "shape"', '"name": "fx-bad"\n  @@"shape"')),
            ("trailing comma in an array",
             good.replace('"widths": [\n    1\n  ]', '"widths": [\n    1,\n  @@]')),
            ("unquoted string", good.replace('"sm_90a"', '@@sm_90a')),
            ("single-quoted key", good.replace('"dtype"', "@@'dtype'")),
            ("a comment", good.replace('"widths"', '@@// widths\n  "widths"')),
            ("missing value", good.replace('"widths": [', '"widths": @@, "x": [')),
        ]
        for label, marked in cases:
            self.assertEqual(marked.count("@@"), 1, label)
            before = marked[:marked.index("@@")]
            line = before.count("\n") + 1
            col = len(before) - (before.rfind("\n") + 1) + 1
            self.run_case(label, marked.replace("@@", ""), f":{line}:{col}")

    def test_wrong_types(self):
        cases = [
            ("name is a number", setp(["name"], 5), r": name"),
            ("widths is a string", setp(["widths"], "4"), r": widths"),
            ("a width is a string", setp(["widths"], [1, "2"]), r": widths\[1\]"),
            ("arches is a string", setp(["arches"], "sm_90a"), r": arches"),
            ("kernels is an object", setp(["kernels"], {"kind": "add"}), r": kernels"),
            ("params is an array", setp(["kernels", 0, "params"], [256]),
             r": kernels\[0\]\.params"),
            ("a param is a boolean", setp(["kernels", 0, "params", "N"], True),
             r": kernels\[0\]\.params\.N"),
            ("include_dirs is a string", setp(["include_dirs"], "third_party/vendor_a"),
             r": include_dirs"),
            ("shape is an array", setp(["shape"], [256]), r": shape"),
        ]
        for label, fn, where in cases:
            self.run_case(label, mutate(fn), where)

    def test_unknown_fields(self):
        cases = [
            ("a typo'd top-level key", lambda d: d.update(widhts=d.pop("widths")), r": widhts",
             ("widhts", "widths")),
            ("a typo'd kernel key",
             lambda d: d["kernels"][0].update(templat=d["kernels"][0].pop("template")),
             r": kernels\[0\]\.templat", ("templat",)),
            ("an unknown top-level key", setp(["colour"], "blue"), r": colour", ("colour",)),
            ("an unknown template parameter", setp(["kernels", 1, "params", "STRIDEX"], 2),
             r": kernels\[1\]\.params\.STRIDEX", ("STRIDEX",)),
        ]
        for label, fn, where, words in cases:
            self.run_case(label, mutate(fn), where, words)

    def test_out_of_range_and_non_divisible_values(self):
        P = r": kernels\[0\]\.params\.N"
        cases = [
            ("below min", setp(["kernels", 0, "params", "N"], 16), P, ("32", "16")),
            ("above max", setp(["kernels", 0, "params", "N"], 131072), P, ("131072",)),
            ("not a multiple", setp(["kernels", 0, "params", "N"], 100), P,
             ("multiple of 32", "100")),
            ("expression not a multiple", setp(["kernels", 0, "params", "N"], "hidden_size + 8"),
             P, ("multiple of 32", "264")),
            ("not one of", setp(["kernels", 1, "params", "STRIDE"], 3),
             r": kernels\[1\]\.params\.STRIDE", ("3",)),
            ("float above max", setp(["kernels", 2, "params", "ALPHA"], 1.5),
             r": kernels\[2\]\.params\.ALPHA", ("1.5",)),
            ("int param gets a fraction", setp(["kernels", 0, "params", "N"], "hidden_size / 3.0"),
             P, ("integer",)),
            ("width 0", setp(["widths"], [0]), r": widths\[0\]", ("0",)),
            ("negative width", setp(["widths"], [1, -4]), r": widths\[1\]", ("-4",)),
            ("missing parameter", delp(["kernels", 1, "params", "STRIDE"]),
             r": kernels\[1\]\.params(\.STRIDE)?", ("STRIDE",)),
        ]
        for label, fn, where, words in cases:
            self.run_case(label, mutate(fn), where, words)

    def test_bad_names_templates_arches_families(self):
        cases = [
            ("missing template", setp(["kernels", 0, "template"], "fx_nope"),
             r": kernels\[0\]\.template", ("fx_nope",)),
            ("unknown arch", setp(["arches"], ["sm_90a", "sm_91z"]), r": arches\[1\]",
             ("sm_91z",)),
            ("name with a slash", setp(["name"], "fx/bad"), r": name", ("fx/bad",)),
            ("name with ..", setp(["name"], "..fx"), r": name", ("..fx",)),
            ("name that climbs", setp(["name"], "../../etc"), r": name", ()),
            ("kind with a slash", setp(["kernels", 0, "kind"], "a/b"), r": kernels\[0\]\.kind",
             ()),
            ("unknown family", setp(["family"], "nosuchfamily"), r": family",
             ("nosuchfamily",)),
            ("missing include dir", setp(["include_dirs"], ["third_party/nope"]),
             r": include_dirs\[0\]", ("third_party/nope",)),
        ]
        for label, fn, where, words in cases:
            self.run_case(label, mutate(fn), where, words)
        # an unknown arch on the command line
        w = self.w
        w.dump_json(BAD, good_description())
        for cmd in ("build", "keys"):
            r = w.kf(cmd, "--arch", "sm_42", BAD)
            self.assertEqual(r.rc, 2, str(r))
            self.assertIn("sm_42", r.err)
            self.assertEqual(snapshot(w.path(w.cache)), self.cache0)
            self.assertEqual(snapshot(w.path(w.out)), self.out0)

    def test_bad_expressions(self):
        P = r": kernels\[0\]\.params\.N"
        cases = [
            ("dangling operator", "hidden_size +", ()),
            ("unbalanced parenthesis", "(hidden_size * 2", ()),
            ("unknown operator", "hidden_size ** 2", ()),
            ("unknown shape field", "hiden_size", ("hiden_size",)),
            ("unknown field in a longer expression", "2 * intermediate + 32", ("intermediate",)),
            ("division by zero", "hidden_size / 0", ()),
            ("string shape field in arithmetic", "dtype * 2", ("dtype",)),
            ("nested 100000 levels deep", "(" * 100000 + "1" + ")" * 100000,
             ("nested deeper than 64 levels",)),
            ("unary minus 100000 deep", "-" * 100000 + "1", ("nested deeper than 64 levels",)),
        ]
        for label, expr, words in cases:
            self.run_case(label, mutate(setp(["kernels", 0, "params", "N"], expr)), P, words)

    def test_descriptions_that_are_not_regular_files_are_refused_at_once(self):
        w = self.w
        fifo = w.path("models/fifo.json")
        os.mkfifo(fifo)
        os.mkdir(w.path("models/dir.json"))
        for label, path, why in (("a FIFO", "models/fifo.json", "not a regular file"),
                                 ("/dev/zero", "/dev/zero", "not a regular file"),
                                 ("/dev/urandom", "/dev/urandom", "not a regular file"),
                                 ("a directory", "models/dir.json", "Is a directory")):
            with self.subTest(label):
                for cmd in ("build", "keys"):
                    r = w.kf(cmd, path, timeout=30)
                    self.assertEqual(r.rc, 2, f"{label}: {r}")
                    self.assertIn(f"{path}: error: cannot read: {why}", r.err, str(r))
                    self.assertEqual(snapshot(w.path(w.cache)), self.cache0, label)

    def test_one_bad_description_among_good_ones_writes_nothing(self):
        self.w.dump_json("models/good2.json", dict(good_description(), name="fx-good2"))
        self.run_case("good + bad", mutate(setp(["kernels", 0, "params", "N"], 100)),
                      r": kernels\[0\]\.params\.N", ("100",),
                      models=("models/good2.json", BAD))
        r = self.w.kf("build", "models/does-not-exist.json")
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("models/does-not-exist.json", r.err)
        self.assertEqual(snapshot(self.w.path(self.w.cache)), self.cache0)


if __name__ == "__main__":
    unittest.main()
