"""docs/kinds.md against the schemas it is generated from.

scripts/gen-kinds-doc writes docs/kinds.md from templates/*.json, the
template headers' buffer notes and models/*.json. A schema changed without
rerunning it leaves the page describing kernels that no longer exist; these
tests fail then, and check that the page says what the schemas say. No GPU
and no compiler needed.
"""
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from kfhelp import SRC

GEN = os.path.join(SRC, "scripts", "gen-kinds-doc")
KINDS_MD = os.path.join(SRC, "docs", "kinds.md")


def generate(root=SRC, *extra):
    """(exit status, stdout, stderr) of the generator over `root`."""
    p = subprocess.run([sys.executable, GEN, "--root", root, "-o", "-", *extra],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, template):
    """The part of the page under `## template`, up to the next template."""
    m = re.search(r"^## " + re.escape(template) + r"\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return m.group(1) if m else None


class KindsDoc(unittest.TestCase):
    def copy_inputs(self):
        """A scratch checkout with the generator's inputs only."""
        tmp = tempfile.mkdtemp(prefix="kf-docs-")
        self.addCleanup(shutil.rmtree, tmp)
        for d in ("templates", "models"):
            shutil.copytree(os.path.join(SRC, d), os.path.join(tmp, d))
        os.mkdir(os.path.join(tmp, "docs"))
        return tmp

    def test_kinds_md_is_what_the_generator_writes_from_the_schemas(self):
        rc, out, err = generate()
        self.assertEqual(rc, 0, err)
        have = read(KINDS_MD)
        if have != out:
            diff = "".join(difflib.unified_diff(have.splitlines(True), out.splitlines(True),
                                                "docs/kinds.md", "generated", n=1))
            self.fail("docs/kinds.md is stale: run scripts/gen-kinds-doc\n" + diff[:4000])

    def test_check_fails_when_a_schema_changes_after_the_page_was_written(self):
        tmp = self.copy_inputs()
        shutil.copy(KINDS_MD, os.path.join(tmp, "docs", "kinds.md"))
        rc, _, err = generate(tmp, "--check", "-o", os.path.join(tmp, "docs", "kinds.md"))
        self.assertEqual(rc, 0, err)
        path = os.path.join(tmp, "templates", "skinny_gemm.json")
        schema = json.loads(read(path))
        schema["params"]["K"]["multiple_of"] = 512
        schema["args"].insert(3, {"name": "bias", "type": "const float*"})
        with open(path, "w", encoding="utf-8") as f:
            json.dump(schema, f)
        rc, _, err = generate(tmp, "--check", "-o", os.path.join(tmp, "docs", "kinds.md"))
        self.assertEqual(rc, 1)
        self.assertIn("run scripts/gen-kinds-doc", err)
        rc, out, err = generate(tmp)
        self.assertEqual(rc, 0, err)
        part = section(out, "skinny_gemm")
        self.assertIn("multiple of 512", part)
        self.assertIn("| 3 | `bias` | `const float*` | 8 |\n| 4 | `rows` | `int` | 4 |", part)

    def test_every_schema_argument_is_listed_in_order_with_its_c_type(self):
        page = read(KINDS_MD)
        names = sorted(n for n in os.listdir(os.path.join(SRC, "templates")) if n.endswith(".json"))
        self.assertTrue(names)
        for n in names:
            schema = json.loads(read(os.path.join(SRC, "templates", n)))
            part = section(page, schema["template"])
            self.assertIsNotNone(part, f"docs/kinds.md has no section for {n}")
            rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| `([^`]+)` \| (\d+) \|$", part, re.M)
            self.assertEqual([(a["name"], a["type"]) for a in schema["args"]],
                             [(r[1], r[2]) for r in rows], n)
            self.assertEqual([str(i) for i in range(len(rows))], [r[0] for r in rows], n)
            for p in schema["params"]:
                self.assertIn(f"| `{p}` |", part, f"{n}: parameter {p}")

    def test_decode_attention_buffers_are_on_the_page(self):
        part = section(read(KINDS_MD), "decode_attention")
        buffers = part.split("### Buffers", 1)[1].split("###", 1)[0]
        self.assertIn("- `workspace`: `4 * W * NUM_KV_HEADS * SPLITS * (NUM_Q_HEADS / NUM_KV_HEADS"
                      " * HEAD_DIM + (2 * (NUM_Q_HEADS / NUM_KV_HEADS) + 3) / 4 * 4)` bytes, init "
                      "`none`", buffers)
        self.assertIn("- `semaphores`: `4 * W * NUM_KV_HEADS` bytes, init `zero_once`", buffers)

    def test_a_malformed_schema_is_reported_with_its_place(self):
        tmp = self.copy_inputs()
        with open(os.path.join(tmp, "templates", "broken.json"), "w", encoding="utf-8") as f:
            f.write('{"template": "broken",\n  "params": }\n')
        rc, out, err = generate(tmp)
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")
        self.assertRegex(err, r"templates/broken\.json:2:\d+: error: ")


def family_templates():
    """kind -> the templates the shipped families build it from (qkv_proj:
    skinny_gemm, or skinny_gemm_bias where the family has q/k/v biases)."""
    out = {}
    fam_dir = os.path.join(SRC, "models", "families")
    for name in sorted(os.listdir(fam_dir)):
        with open(os.path.join(fam_dir, name)) as f:
            for k in json.load(f).get("kernels", []):
                out.setdefault(k["kind"], set()).add(k["template"])
    return out


class UserDocs(unittest.TestCase):
    """What a newcomer reads first: the README, the binding's README and
    docs/. Their examples must call kernels as the schemas declare them, and
    they speak of the project only."""

    PAGES = ["README.md", os.path.join("python", "README.md")] + [
        os.path.join("docs", n) for n in sorted(os.listdir(os.path.join(SRC, "docs")))
        if n.endswith(".md")]

    def test_binding_examples_pass_the_schemas_arguments_but_rows(self):
        kinds = family_templates()
        calls = 0
        for page in self.PAGES:
            text = read(os.path.join(SRC, page))
            found = [(m.group(0), m.group(1), m.group(2)) for m in
                     re.finditer(r'kernel\("([a-z_]+)",[^)]*\)\(([^)]*)\)', text)]
            # k = rt.kernel("kind", ...) and then k(...)
            for m in re.finditer(r'(\w+) = \w+\.kernel\("([a-z_]+)"[^)]*\)', text):
                c = re.compile(r"^" + m.group(1) + r"\(([^)]*)\)", re.M).search(text, m.end())
                if c:
                    found.append((c.group(0), m.group(2), c.group(1)))
            for call, kind, arglist in found:
                args = [a for a in arglist.split(",") if a.strip()]
                args = [a for a in args if "=" not in a]  # stream= and the like
                schemas = []
                for template in sorted(kinds[kind]):
                    with open(os.path.join(SRC, "templates", template + ".json")) as f:
                        schemas.append([a["name"] for a in json.load(f)["args"]][:-1])
                # the examples name each argument as the schema of one of
                # the kind's templates does (rows is appended)
                self.assertIn([a.strip() for a in args], schemas,
                              f"{page}: {call}: {kind} takes one of {schemas}")
                calls += 1
        self.assertGreaterEqual(calls, 2, "the READMEs show how a kernel is called")

    def test_pages_name_no_internal_places(self):
        bad = re.compile(r"\bissue \d+|\.\./shared/|steering repo", re.I)
        for page in self.PAGES + [os.path.join("scripts", n) for n in
                                  sorted(os.listdir(os.path.join(SRC, "scripts")))
                                  if os.path.isfile(os.path.join(SRC, "scripts", n))]:
            for i, line in enumerate(read(os.path.join(SRC, page)).splitlines(), 1):
                self.assertIsNone(bad.search(line), f"{page}:{i}: {line.strip()}")


if __name__ == "__main__":
    unittest.main()
