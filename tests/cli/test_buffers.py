"""Buffers declared in template schemas ("buffers", docs/contracts.md): the
generator checks them with the schema, sizes them for every width and writes
them to the manifest; a bad declaration refuses the model before anything is
written. (The runtime's side: tests/runtime/test_runtime.c, "buffers".)"""
import json
import os
import unittest

from kfhelp import FIXTURE_MODEL, Work


def declare(work, buffers):
    """Gives the fixture template fx_scale (x: const float*, y: float*,
    rows: int; N = 256 in fx-small) the "buffers" member `buffers`."""
    path = work.path("templates", "fx_scale.json")
    with open(path) as f:
        schema = json.load(f)
    schema["buffers"] = buffers
    with open(path, "w") as f:
        json.dump(schema, f, indent=2)


class Buffers(unittest.TestCase):
    def test_sizes_per_width_reach_the_manifest(self):
        w = Work(self)
        declare(w, [{"arg": "y", "bytes": "4 * W * N + 3", "init": "zero_once",
                     "description": "the output, and three bytes more"}])
        w.build(FIXTURE_MODEL)
        with open(w.v1("manifests", "fx-small", "sm_90a.json")) as f:
            man = json.load(f)
        got = {k["id"]: k.get("buffers") for k in man["kernels"]}
        self.assertEqual(got["fx-small/scale/w1/sm_90a"],
                         [{"arg": "y", "bytes": 4 * 256 + 3, "init": "zero_once"}])
        self.assertEqual(got["fx-small/scale/w2/sm_90a"],
                         [{"arg": "y", "bytes": 8 * 256 + 3, "init": "zero_once"}])
        # kinds without buffers carry no member
        self.assertIsNone(got["fx-small/add/w1/sm_90a"])
        # the code is the same: the keys do not depend on the declaration
        keys = w.keys(FIXTURE_MODEL)
        declare(w, [{"arg": "y", "bytes": 1, "init": "none"}])
        self.assertEqual(w.keys(FIXTURE_MODEL), keys)

    def test_bad_declarations_are_refused_with_their_place_and_nothing_is_written(self):
        at = "templates/fx_scale.json: "
        cases = [
            ({"bytes": 4, "init": "none"}, at + "buffers[0].arg: error: must name a pointer"),
            ({"arg": "z", "bytes": 4, "init": "none"},
             at + 'buffers[0].arg: error: "z" is not an argument of the template'),
            ({"arg": "x", "bytes": 4, "init": "none"},
             at + 'buffers[0].arg: error: "x" is "const float*"; a buffer is a non-const pointer'),
            ({"arg": "rows", "bytes": 4, "init": "none"},
             at + 'buffers[0].arg: error: "rows" is "int"'),
            ({"arg": "y", "init": "none"}, at + "buffers[0].bytes: error: missing"),
            ({"arg": "y", "bytes": 1.5, "init": "none"},
             at + "buffers[0].bytes: error: must be an integer or an expression"),
            ({"arg": "y", "bytes": 4}, at + "buffers[0].init: error: must be \"none\""),
            ({"arg": "y", "bytes": 4, "init": "zeroed"}, at + "buffers[0].init: error"),
            ({"arg": "y", "bytes": 4, "init": "none", "size": 4},
             at + "buffers[0].size: error: unknown"),
            ({"arg": "y", "bytes": "N * (W - 1)", "init": "none"},
             'fx_scale.json: launch: error: buffer "y": "N * (W - 1)" gives 0 bytes for width 1'),
            ({"arg": "y", "bytes": "Q", "init": "none"}, "Q"),
        ]
        for buf, want in cases:
            with self.subTest(buf=buf):
                w = Work(self)
                declare(w, [buf])
                r = w.build(FIXTURE_MODEL, expect_rc=2)
                self.assertIn(want, r.err)
                self.assertFalse(os.path.exists(w.path(w.cache)), "a refused model wrote the cache")
        w = Work(self)
        declare(w, [{"arg": "y", "bytes": 4, "init": "none"}, {"arg": "y", "bytes": 8, "init": "none"}])
        r = w.build(FIXTURE_MODEL, expect_rc=2)
        self.assertIn(at + 'buffers[1].arg: error: "y" is declared twice', r.err)
        w = Work(self)
        declare(w, {"arg": "y"})
        r = w.build(FIXTURE_MODEL, expect_rc=2)
        self.assertIn(at + "buffers: error: must be an array", r.err)


if __name__ == "__main__":
    unittest.main()
