"""Mutation suite: which edits change which keys, and what `kforge build`
then recompiles.

The fixture (tests/fixtures, copied into a temp dir per test) has three
kinds: scale (fx_scale.cuh: fx_common.cuh -> fx_math.cuh, <fx_vendor_a.h>
from the description's include_dirs, a host-only, a device-only and a
per-arch include), add (fx_add.cuh: fx_common.cuh -> fx_math.cuh) and copy
(fx_copy.cuh: <fx_vendor_b.h> from `-I third_party/vendor_b`). A token edit
must change exactly the keys of the kernels whose device closure holds the
file; comment and whitespace edits, and edits outside the closure, none.
"""
import json
import os
import re
import unittest

from kfhelp import (FIXTURE_MODEL, VENDOR_B, Work, changed, fixture_ids, make_nvcc_wrapper,
                    parse_keys)

BOTH = ("sm_90a", "sm_100a")


def ids(kinds, widths=(1, 2), arches=BOTH):
    return fixture_ids(kinds=kinds, widths=widths, arches=arches)


def comment_edit(text, inline=True):
    """The same tokens with comments added and existing comments reworded.
    inline=False keeps to edits that are safe in any header (no comment is
    put inside a line of code); inline=True is for the fixtures."""
    out = ["// kforge mutation test: a comment-only edit", "/* and a block", "   comment */"]
    prev_cont = False
    for line in text.splitlines():
        s = line.rstrip()
        cont = s.endswith("\\")
        if not prev_cont and not cont:
            if s.lstrip().startswith("//"):
                line = s + " (reworded by a comment-only edit)"
            elif inline and s.startswith("#"):
                line = s + " // trailing comment on a directive"
            elif inline and s.endswith("{") and '"' not in s:
                line = s + " /* inline block comment */"
        prev_cont = cont
        out.append(line)
    out.append("// the end")
    return "\n".join(out) + "\n"


def whitespace_edit(text, inline=True):
    """The same tokens with indentation, blank lines and spacing changed.
    inline=False only indents lines and adds blank lines (never inside a
    macro continued with a backslash); inline=True also respaces inside the
    fixtures' lines."""
    out = ["", ""]
    prev_cont = False
    for line in text.splitlines():
        s = line.rstrip()
        cont = s.endswith("\\")
        if not prev_cont and s.strip():
            if s.startswith("#"):
                line = ("#  " + s[1:] + "   ") if inline and not cont else "  " + s
            else:
                if inline and '"' not in s and not cont:
                    s = re.sub(r"(?<=[;,{])", "  ", s) + "\t"
                line = "\t  " + s
        out.append(line)
        if not cont:
            out.append("")
        prev_cont = cont
    return "\n".join(out) + "\n\n"


# tests that need both arches (every libclang pass costs time on CI)
TWO_ARCH_TESTS = {"test_fixture_ids_and_distinct_keys",
                  "test_token_edit_in_arch_header_changes_only_that_arch",
                  "test_same_sources_at_two_paths_give_same_keys"}


class KeyMutations(unittest.TestCase):
    """`kforge keys` before and after one edit (sm_90a, and sm_100a where the
    test is about arches)."""

    def setUp(self):
        self.w = Work(self, "mut")
        self.arches = BOTH if self._testMethodName in TWO_ARCH_TESTS else ("sm_90a",)
        self.base = self.keys()

    def keys(self, *extra, env=None, model=FIXTURE_MODEL):
        return self.w.keys(model, args=("--arch", ",".join(self.arches)) + extra, env=env)

    def ids(self, kinds, widths=(1, 2), arches=None):
        return ids(kinds, widths, arches or self.arches)

    def assertChanged(self, expect, why):
        after = self.keys()
        got = changed(self.base, after)
        self.assertEqual(sorted(got), sorted(expect), f"keys changed by {why}")
        self.base = after

    def test_fixture_ids_and_distinct_keys(self):
        # every kind x width x arch is listed, and no two share a key: width,
        # arch and kind all enter the key
        self.assertEqual(set(self.base), self.ids(("add", "copy", "scale")))
        self.assertEqual(len(set(self.base.values())), len(self.base))
        # keys are a function of the inputs: asking twice gives the same keys
        self.assertEqual(self.keys(), self.base)

    def test_token_edit_in_template_changes_only_its_kernels(self):
        self.w.replace("templates/fx_scale.cuh", "row_stride(P::N)", "row_stride(P::N + 0)")
        self.assertChanged(self.ids(("scale",)), "a token edit in fx_scale.cuh")

    def test_token_edit_two_includes_deep_changes_its_includers(self):
        # fx_scale.cuh / fx_add.cuh -> fx_common.cuh -> fx_math.cuh
        self.w.replace("templates/fx_math.cuh", "return a * b;", "return b * a;")
        self.assertChanged(self.ids(("scale", "add")), "a token edit in fx_math.cuh")

    def test_token_edit_in_shared_header_changes_every_kernel(self):
        self.w.replace("templates/fx_port.cuh", "#pragma once\n",
                       "#pragma once\n#define FX_PORT_REVISION 2\n")
        self.assertChanged(self.ids(("scale", "add", "copy")), "a new macro in fx_port.cuh")

    def test_token_edit_in_description_include_dir_header(self):
        # <fx_vendor_a.h> -> fx_vendor_a_impl.h, found through the
        # description's include_dirs
        self.w.replace("models/third_party/vendor_a/fx_vendor_a_impl.h",
                       "FX_VENDOR_A_BIAS 0.0f", "FX_VENDOR_A_BIAS 0.5f")
        self.assertChanged(self.ids(("scale",)), "a token edit in an include_dirs header")

    def test_token_edit_in_dash_i_header(self):
        self.w.replace(VENDOR_B + "/fx_vendor_b.h", "return p[i];", "return p[i] + 0;")
        self.assertChanged(self.ids(("copy",)), "a token edit in a -I header")

    def test_token_edit_in_device_only_header(self):
        self.w.replace("templates/fx_device_only.cuh", "return 0.0f;", "return 1.0f;")
        self.assertChanged(self.ids(("scale",)), "a token edit in a device-pass-only header")

    def test_token_edit_in_arch_header_changes_only_that_arch(self):
        self.w.replace("templates/fx_arch90.cuh", "1.0f", "1.5f")
        self.assertChanged(self.ids(("scale",), arches=("sm_90a",)),
                           "a token edit in the header only sm_90a includes")
        self.w.replace("templates/fx_arch100.cuh", "2.0f", "2.5f")
        self.assertChanged(self.ids(("scale",), arches=("sm_100a",)),
                           "a token edit in the header only sm_100a includes")

    def test_host_only_header_edit_changes_no_key(self):
        # included under #if !defined(__CUDA_ARCH__): the host pass only, and
        # kforge compiles device code only
        self.w.replace("templates/fx_host_only.cuh", "return 1;", "return 2;")
        self.assertChanged(set(), "a token edit in a host-pass-only header")

    def test_edit_outside_the_closure_changes_no_key(self):
        self.w.replace("templates/fx_unused.cuh", "return 7;", "return 8;")
        self.assertChanged(set(), "an edit of a header no template includes")
        self.w.replace("templates/fx_broken.cuh", "(float)P::N", "(float)(P::N + 1)")
        self.assertChanged(set(), "an edit of a template no kernel of the model uses")
        self.w.write("templates/fx_new.cuh", "#pragma once\nint fx_new_symbol = 3;\n")
        self.assertChanged(set(), "a new file in the template dir")

    def test_comment_only_edits_change_no_key(self):
        for rel in self.closure_files():
            self.w.write(rel, comment_edit(self.w.read(rel)))
        self.assertChanged(set(), "comment-only edits of every fixture header")

    def test_comment_after_the_last_directive_changes_no_key(self):
        # fx_port.cuh ends with "#endif // device pass"; a comment line after
        # it (a licence footer, a note) is still comment-only
        self.w.write("templates/fx_port.cuh",
                     self.w.read("templates/fx_port.cuh") + "// a note after the last #endif\n")
        self.w.write("templates/fx_arch90.cuh",
                     self.w.read("templates/fx_arch90.cuh") + "/* block comment at the end */\n")
        self.assertChanged(set(), "a comment after a header's last directive")

    def test_whitespace_only_edits_change_no_key(self):
        for rel in self.closure_files():
            self.w.write(rel, whitespace_edit(self.w.read(rel)))
        # and the JSON files re-indented
        for rel in ("models/fx-small.json", "templates/fx_scale.json", "templates/fx_add.json",
                    "templates/fx_copy.json"):
            self.w.write(rel, json.dumps(self.w.load_json(rel), indent=7) + "\n\n")
        self.assertChanged(set(), "whitespace-only edits of every fixture file")

    def closure_files(self):
        files = sorted("templates/" + n for n in os.listdir(self.w.path("templates"))
                       if n.endswith(".cuh"))
        return files + ["models/third_party/vendor_a/fx_vendor_a.h",
                        "models/third_party/vendor_a/fx_vendor_a_impl.h",
                        VENDOR_B + "/fx_vendor_b.h"]

    def test_parameter_changes_change_only_that_kind(self):
        d = self.w.load_json(FIXTURE_MODEL)
        d["kernels"][2]["params"]["STRIDE"] = 4
        self.w.dump_json(FIXTURE_MODEL, d)
        self.assertChanged(self.ids(("copy",)), "STRIDE 2 -> 4")
        d["shape"]["rms_norm_eps"] = 1e-5            # scale's ALPHA
        self.w.dump_json(FIXTURE_MODEL, d)
        self.assertChanged(self.ids(("scale",)), "the shape field behind ALPHA")
        d["shape"]["intermediate_size"] = 1024       # add's N = intermediate_size / 2
        self.w.dump_json(FIXTURE_MODEL, d)
        self.assertChanged(self.ids(("add",)), "the shape field behind add's N")

    def test_parameters_enter_the_key_by_value_not_by_spelling(self):
        d = self.w.load_json(FIXTURE_MODEL)
        d["kernels"][1]["params"]["N"] = "(intermediate_size - 256) * 2 / 2"   # still 256
        d["kernels"][2]["params"]["N"] = "32 * 2"                             # still 64
        d["shape"]["num_attention_heads"] = 4                                  # used by no kernel
        self.w.dump_json(FIXTURE_MODEL, d)
        self.assertChanged(set(), "rewriting expressions to the same values")

    def test_width_change(self):
        d = self.w.load_json(FIXTURE_MODEL)
        d["widths"] = [1, 2, 4]
        self.w.dump_json(FIXTURE_MODEL, d)
        after = self.keys()
        self.assertEqual(set(after), self.ids(("add", "copy", "scale"), widths=(1, 2, 4)))
        for i, k in self.base.items():
            self.assertEqual(after[i], k, f"{i}: adding width 4 changed another width's key")
        self.assertEqual(len(set(after.values())), len(after), "a w4 key equals another key")

    def test_arch_change(self):
        k90 = self.w.keys(FIXTURE_MODEL, args=("--arch", "sm_90a"))
        k100 = self.w.keys(FIXTURE_MODEL, args=("--arch", "sm_100a"))
        k90plain = self.w.keys(FIXTURE_MODEL, args=("--arch", "sm_90"))
        self.assertEqual(set(k90), self.ids(("add", "copy", "scale"), arches=("sm_90a",)))
        for i, k in k90.items():
            self.assertEqual(self.base[i], k, f"{i}: --arch subset changed the key")
            self.assertNotEqual(k100[i.replace("sm_90a", "sm_100a")], k, i)
            self.assertNotEqual(k90plain[i.replace("sm_90a", "sm_90")], k, i)

    def test_include_flag_changes_every_key(self):
        # one more -I entry: the compile argument vector differs
        os.makedirs(self.w.path("extra_include"))
        after = self.keys("-I", "extra_include")
        self.assertEqual(changed(self.base, after), set(self.base),
                         "an extra -I changes the compile arguments of every kernel")

    def test_define_changes_every_key_and_reaches_the_compiler(self):
        one = self.keys("--define", "KF_CLI_TEST=1")
        self.assertEqual(changed(self.base, one), set(self.base), "--define NAME=1")
        self.assertEqual(self.keys("-DKF_CLI_TEST=1"), one, "-DNAME=1 is --define NAME=1")
        two = self.keys("--define", "KF_CLI_TEST=2")
        self.assertEqual(changed(one, two), set(self.base), "another value, another key")
        for bad in ("1X=2", "X-Y", "X Y=1", ""):
            r = self.w.kf("keys", FIXTURE_MODEL, "--define", bad)
            self.assertEqual(r.rc, 2, f"--define {bad!r}: {r}")
            self.assertIn("--define needs NAME or NAME=VALUE", r.err)
        self.w.build(FIXTURE_MODEL, args=("--arch", "sm_90a", "--define", "KF_CLI_TEST=7"))
        metas = [self.w.meta(k) for k in self.w.entries()]
        self.assertTrue(metas)
        for m in metas:
            self.assertIn("-DKF_CLI_TEST=7", json.dumps(m), m.get("kernel_id"))

    def test_compiler_environment_variables_change_every_key(self):
        append = self.keys(env={"NVCC_APPEND_FLAGS": "-DKF_CLI_TEST=1"})
        prepend = self.keys(env={"NVCC_PREPEND_FLAGS": "-DKF_CLI_TEST=1"})
        self.assertEqual(changed(self.base, append), set(self.base), "NVCC_APPEND_FLAGS")
        self.assertEqual(changed(self.base, prepend), set(self.base), "NVCC_PREPEND_FLAGS")
        self.assertEqual(changed(append, prepend), set(self.base),
                         "NVCC_APPEND_FLAGS and NVCC_PREPEND_FLAGS with one value")
        self.assertEqual(self.keys(), self.base, "keys after unsetting them")

    def test_toolchain_identity_changes_every_key(self):
        # one wrapper path (KFORGE_NVCC), first passing `nvcc --version`
        # through, then reporting another version: only the identity differs
        root = self.w.path("cuda-wrap")
        nvcc = make_nvcc_wrapper(root)
        env = {"KFORGE_NVCC": nvcc}
        same = self.keys(env=env)
        self.assertEqual(self.keys(env=env), same)
        os.remove(nvcc)
        make_nvcc_wrapper(root, version_suffix="9")
        other = self.keys(env=env)
        self.assertEqual(changed(same, other), set(same),
                         "a compiler reporting another version must change every key")

    def test_same_sources_at_two_paths_give_same_keys(self):
        other = Work(self, "mut-other")
        self.assertNotEqual(other.root, self.w.root)
        self.assertEqual(other.keys(FIXTURE_MODEL, args=("--arch", ",".join(self.arches))),
                         self.base)
        # absolute paths everywhere, run from another directory, another out
        # and cache dir: still the same keys
        r = other.kf("keys", "--cache", other.path("c2"), "--out", other.path("o2"),
                     "--templates", other.path("templates"), "-I", other.path(VENDOR_B),
                     "--arch", ",".join(BOTH), other.path(FIXTURE_MODEL), common=False, cwd="/")
        self.assertEqual(r.rc, 0, str(r))
        self.assertEqual(parse_keys(self, r.out), self.base)


class RebuildCounts(unittest.TestCase):
    """`kforge build` compiles exactly the kernels whose keys changed."""

    def test_build_recompiles_exactly_the_changed_kernels(self):
        w = Work(self, "rebuild")
        keys = w.keys()
        self.assertEqual(set(keys), fixture_ids())
        r = w.build()
        self.assertEqual(r.summary, (6, 0, 6, 0), "cold build")
        self.assertEqual(w.entries(), set(keys.values()))
        self.assertEqual(w.build().summary, (6, 6, 0, 0), "no-op build")

        def step(why, edit, expect_kinds, compiled_kinds=None):
            """compiled_kinds: the kinds whose new keys are not in the cache
            yet (default: every changed kind)."""
            nonlocal keys
            edit()
            after = w.keys()
            expect = fixture_ids(kinds=expect_kinds)
            self.assertEqual(changed(keys, after), expect, f"keys changed by {why}")
            r = w.build()
            n = len(fixture_ids(kinds=expect_kinds if compiled_kinds is None else compiled_kinds))
            self.assertEqual(r.summary, (6, 6 - n, n, 0), f"build after {why}\n{r}")
            man = {k["id"]: k["key"] for k in w.manifest("fx-small", "sm_90a")["kernels"]}
            self.assertEqual(man, after, f"manifest after {why}")
            self.assertTrue(set(after.values()) <= w.entries())
            keys = after

        step("a token edit two includes deep",
             lambda: w.replace("templates/fx_math.cuh", "return a + b;", "return b + a;"),
             ("scale", "add"))
        step("a token edit in a -I header",
             lambda: w.replace(VENDOR_B + "/fx_vendor_b.h", "return p[i];", "return p[i] + 0;"),
             ("copy",))
        step("comment and whitespace edits",
             lambda: (w.write("templates/fx_math.cuh", comment_edit(w.read("templates/fx_math.cuh"))),
                      w.write("templates/fx_scale.cuh",
                              whitespace_edit(w.read("templates/fx_scale.cuh")))),
             ())
        step("a host-only header edit",
             lambda: w.replace("templates/fx_host_only.cuh", "return 1;", "return 3;"), ())
        step("a token edit in the sm_90a-only header",
             lambda: w.replace("templates/fx_arch90.cuh", "1.0f", "1.25f"), ("scale",))

        def shadow():
            # <fx_vendor_a.h> is searched in the template dir before the
            # description's include_dirs: a new file there takes over
            text = w.read("models/third_party/vendor_a/fx_vendor_a.h")
            w.write("templates/fx_vendor_a.h",
                    text.replace("return FX_VENDOR_A_BIAS;", "return FX_VENDOR_A_BIAS + 1.0f;"))
        before_shadow = dict(keys)
        step("a new header shadowing one in a later include dir", shadow, ("scale",))
        step("removing the shadowing header again",
             lambda: os.remove(w.path("templates/fx_vendor_a.h")), ("scale",), ())
        self.assertEqual(keys, before_shadow, "the keys from before the shadowing header")

        def touch():
            for n in os.listdir(w.path("templates")):
                os.utime(w.path("templates", n))
        step("touching every template file (mtime only)", touch, ())

        def param():
            d = w.load_json(FIXTURE_MODEL)
            d["kernels"][2]["params"]["STRIDE"] = 1
            w.dump_json(FIXTURE_MODEL, d)
        step("a parameter change", param, ("copy",))


def shipped_kind_templates(models_dir, desc):
    """{kind: set of templates} of a shipped description: its kernels' (family
    kernels first and the description's replacing them by kind,
    docs/contracts.md), and for each of the family's layer kinds the
    templates of its phases."""
    kinds, layers = {}, []
    if "family" in desc:
        with open(os.path.join(models_dir, "families", desc["family"] + ".json")) as f:
            fam = json.load(f)
        for k in fam.get("kernels", []):
            kinds[k["kind"]] = {k["template"]}
        layers = fam.get("layers", [])
    for k in desc.get("kernels", []):
        kinds[k["kind"]] = {k["template"]}
    for layer in layers:
        kinds[layer["kind"]] = set().union(*(kinds[p] for p in layer["phases"]))
    return kinds


INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


class ShippedTemplates(unittest.TestCase):
    """The same rules on the shipped templates/ and models/ (keys only)."""

    def test_shipped_template_edits(self):
        w = Work(self, "shipped", copy_shipped=True)
        tdir = w.path("shipped", "templates")
        mdir = w.path("shipped", "models")
        schemas = sorted(n for n in os.listdir(tdir) if n.endswith(".json")) \
            if os.path.isdir(tdir) else []
        models = sorted(n for n in os.listdir(mdir) if n.endswith(".json")) \
            if os.path.isdir(mdir) else []
        self.assertTrue(schemas, "templates/ ships no template schema (*.json)")
        self.assertTrue(models, "models/ ships no description (*.json)")
        headers = {n[:-5]: json.load(open(os.path.join(tdir, n)))["header"] for n in schemas}
        # which template dir files include which (a superset: #if is ignored)
        incl = {}
        for n in os.listdir(tdir):
            if n.endswith((".cuh", ".h", ".hpp")):
                incl[n] = set(INCLUDE_RE.findall(open(os.path.join(tdir, n)).read()))
        included_by_others = set().union(*incl.values()) if incl else set()

        # the description using the most templates
        best = None
        for m in models:
            desc = json.load(open(os.path.join(mdir, m)))
            kt = shipped_kind_templates(mdir, desc)
            if best is None or len(set().union(*kt.values())) > len(set().union(*best[1].values())):
                best = (m, kt)
        model, kind_t = best
        # one width and one arch: the closure does not depend on them, and
        # every kernel costs a libclang pass
        desc = json.load(open(os.path.join(mdir, model)))
        desc["widths"] = [1]
        with open(os.path.join(mdir, model), "w") as f:
            json.dump(desc, f, indent=2)
        rel_model = os.path.join("shipped", "models", model)
        args = ("--templates", "shipped/templates", "--arch", "sm_90a")

        def keys():
            r = w.kf("keys", "--cache", "cache", *args, rel_model, common=False)
            self.assertEqual(r.rc, 0, str(r))
            return parse_keys(self, r.out)

        base = keys()
        self.assertTrue(base)
        kinds_seen = {i.split("/")[1] for i in base}
        self.assertEqual(kinds_seen, set(kind_t), "keys lists other kinds than the description")
        leaves = [t for t in sorted(set().union(*kind_t.values()))
                  if headers.get(t) and headers[t] not in included_by_others]
        self.assertTrue(leaves, f"no template header of {model} is a leaf: {kind_t}")
        # prefer a template that not every kind uses, so some keys must stay
        leaves.sort(key=lambda t: sum(1 for v in kind_t.values() if t in v))
        target = leaves[0]
        hdr = os.path.join(tdir, headers[target])

        # 1. a real token edit of one template's header
        with open(hdr, "a") as f:
            f.write("\nnamespace kf_cli_mutation_test { constexpr int token_edit = 1; }\n")
        after = keys()
        # every kind one of whose templates has that header (moe.cuh serves four)
        expect = {i for i in base
                  if headers[target] in {headers.get(t) for t in kind_t[i.split("/")[1]]}}
        self.assertEqual(changed(base, after), expect, f"keys changed by editing {headers[target]}")
        base = after

        # 2. comment-only and whitespace-only edits of every shipped header
        for n in sorted(incl):
            p = os.path.join(tdir, n)
            text = open(p).read()
            open(p, "w").write(comment_edit(text, inline=False) if len(n) % 2
                               else whitespace_edit(text, inline=False))
        self.assertEqual(changed(base, keys()), set(),
                         "comment/whitespace-only edits of the shipped headers changed keys")


if __name__ == "__main__":
    unittest.main()
