"""Input that parses but means something kforge does not implement: each row
is refused with exit 2, a message at the place (`FILE: json.path: error:`)
with the words expected, and the cache, kernels-out/ and any output file
left as they were (nothing is written before every check has passed).

Rows: descriptions through the shipped llama family (heads, head_dim, dtype,
widths, arch target features, duplicate params), template schemas
(constraints, launch dims, names pasted into the generated source),
`import-hf` configs (fields that change the math), and `gc` (what a manifest
references stays unless that manifest is dropped)."""
import json
import os
import re
import unittest

from kfhelp import FIXTURES, SRC, Work, snapshot

LLAMA = "shipped/models/llama-3.1-8b.json"
BAD = "shipped/models/bad.json"
SHIPPED_ARGS = ("--templates", "shipped/templates")


def llama(**shape):
    with open(os.path.join(SRC, "models", "llama-3.1-8b.json")) as f:
        d = json.load(f)
    d["name"] = "bad"
    d["shape"].update(shape)
    return d


def schema(**over):
    """A valid schema for template fx_evil (header fx_evil.cuh), with
    members replaced by over."""
    s = {
        "template": "fx_evil", "header": "fx_evil.cuh", "entry": "fx::evil_entry",
        "params": {"N": {"type": "int", "min": 1, "max": 4096}},
        "args": [{"name": "dst", "type": "int*"}, {"name": "rows", "type": "int"}],
        "launch": {"grid": ["W", 1, 1], "block": [32, 1, 1]},
    }
    s.update(over)
    return s


class HostileMeaning(unittest.TestCase):

    def setUp(self):
        self.w = w = Work(self, "meaning", copy_shipped=True)
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        os.makedirs(w.path("evil"))
        w.write("evil/fx_evil.cuh", "#pragma once\nnamespace fx {\n"
                "template <class P> __device__ void evil_entry(int *dst, int rows) {}\n}\n")
        self.snap()

    def snap(self):
        w = self.w
        self.cache0 = snapshot(w.path(w.cache))
        self.out0 = snapshot(w.path(w.out))

    def untouched(self, label):
        w = self.w
        self.assertEqual(snapshot(w.path(w.cache)), self.cache0, f"{label}: cache changed")
        self.assertEqual(snapshot(w.path(w.out)), self.out0, f"{label}: kernels-out/ changed")

    def refused(self, label, r, file, place, words):
        """r exited 2 with `<file>: <place>: error: ...` holding words."""
        self.assertEqual(r.rc, 2, f"{label}: must exit 2\n{r}")
        pat = re.compile("^" + re.escape(file) + ": " + place + r": error: (.+)$", re.M)
        m = pat.search(r.err)
        self.assertIsNotNone(m, f"{label}: no message matching {pat.pattern!r}\n{r}")
        for word in words:
            self.assertIn(word, m.group(1), f"{label}: message lacks {word!r}\n{r}")
        self.untouched(label)

    def description_rows(self, rows, extra=SHIPPED_ARGS):
        w = self.w
        for label, text, place, words in rows:
            with self.subTest(label):
                w.write(BAD, text if isinstance(text, str) else json.dumps(text, indent=2))
                for cmd in ("build", "keys"):
                    r = w.kf(cmd, *extra, BAD)
                    self.refused(f"{label} ({cmd})", r, BAD, place, words)
                    self.assertEqual(r.out.strip(), "", f"{label}: {cmd} printed results\n{r}")

    def test_descriptions_whose_meaning_the_templates_do_not_implement(self):
        rows = [
            ("kv heads do not divide the heads", llama(num_key_value_heads=3),
             r"shape\.num_key_value_heads", ("divide num_attention_heads (32)", "got 3")),
            ("zero kv heads", llama(num_key_value_heads=0), r"shape\.num_key_value_heads",
             ("got 0",)),
            # a family expression's error names the description's field and
            # the family file's place
            ("head_dim no template takes", llama(head_dim=96), r"shape\.head_dim",
             ("families/llama.json: kernels[", "].params.HEAD_DIM:", "must be one of",
              "got 96", "family llama")),
            ("dtype fp16", llama(dtype="fp16"), r"shape\.dtype", ('only "bf16"', '"fp16"')),
            ("dtype fp32", llama(dtype="fp32"), r"shape\.dtype", ('"fp32"',)),
            ("dtype int4", llama(dtype="int4"), r"shape\.dtype", ('"int4"',)),
            ("a width the GEMMs do not serve", dict(llama(), widths=[1, 16]), r"widths",
             ("width 16 is above 8", "skinny_gemm", "max_width")),
            ("width 9", dict(llama(), widths=[9]), r"widths", ("width 9 is above 8",)),
            ("width 300", dict(llama(), widths=[300]), r"widths\[0\]", ("300",)),
            ("a target feature set twice", dict(llama(), arches=["gfx942:xnack-:xnack+"]),
             r"arches\[0\]", ("target feature xnack is set more than once",)),
            ("the same feature twice", dict(llama(), arches=["gfx942:xnack+:xnack+"]),
             r"arches\[0\]", ("more than once",)),
            ("a feature RDNA does not take", dict(llama(), arches=["sm_90a", "gfx1100:xnack+"]),
             r"arches\[1\]", ("gfx1100 has no target feature xnack",)),
            ("sramecc on gfx900", dict(llama(), arches=["gfx900:sramecc-"]), r"arches\[0\]",
             ("gfx900 has no target feature sramecc",)),
            ("duplicate key in kernels[].params",
             json.dumps(llama(), indent=2)[:-2] + ',\n  "kernels": [{"kind": "extra", '
             '"template": "add_rmsnorm", "params": {"HIDDEN": 4096, "EPS": 1e-5, '
             '"HIDDEN": 64}}]\n}\n',
             r"kernels\[0\]\.params\.HIDDEN", ('duplicate member "HIDDEN"',)),
        ]
        self.description_rows(rows)
        # the same arch on the command line
        r = self.w.kf("keys", *SHIPPED_ARGS, "--arch", "gfx942:sramecc+:sramecc-", LLAMA)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("target feature sramecc is set more than once", r.err)
        self.untouched("--arch")

    def test_template_schemas_that_mean_nothing_or_inject_code(self):
        w = self.w
        desc = {"name": "fx-evil", "shape": {"n": 64}, "widths": [1], "arches": ["sm_90a"],
                "template_dirs": ["../evil"],
                "kernels": [{"kind": "evil", "template": "fx_evil", "params": {"N": "n"}}]}
        w.dump_json("models/evil.json", desc)
        N = {"type": "int", "min": 1, "max": 4096}
        rows = [
            ("multiple_of 0", schema(params={"N": dict(N, multiple_of=0)}),
             r"params\.N\.multiple_of", ("positive integer", "got 0")),
            ("one_of []", schema(params={"N": dict(N, one_of=[])}), r"params\.N\.one_of",
             ("non-empty",)),
            ("min above max", schema(params={"N": {"type": "int", "min": 64, "max": 8}}),
             r"params\.N", ("min 64 is above max 8",)),
            ("block of 1e9 threads", schema(launch={"grid": ["W", 1, 1], "block": [1e9, 1, 1]}),
             r"launch\.block\[0\]", ("1000000000", "1 to 1024")),
            ("block of 2048 threads", schema(launch={"grid": ["W", 1, 1], "block": [64, 32, 1]}),
             r"launch\.block", ("2048 threads", "at most 1024")),
            ("block over 1024 by expression",
             schema(launch={"grid": ["W", 1, 1], "block": ["N * 32", 1, 1]}),
             r"launch", ("block[0] = 2048", "width 1", "kernel evil of models/evil.json")),
            ("grid 0", schema(launch={"grid": [0, 1, 1], "block": [32, 1, 1]}),
             r"launch\.grid\[0\]", ("grid[0] = 0",)),
            ("block -1", schema(launch={"grid": ["W", 1, 1], "block": [32, -1, 1]}),
             r"launch\.block\[1\]", ("block[1] = -1",)),
            ("code in entry", schema(entry='fx::evil_entry<P>(); system("id"); fx::x'),
             r"entry", ("C++ name",)),
            ("code in an arg name",
             schema(args=[{"name": "dst) { system(\"id\"); } void f(int* x", "type": "int*"},
                          {"name": "rows", "type": "int"}]),
             r"args\[0\]\.name", ("C identifier",)),
            ("keyword as an arg name",
             schema(args=[{"name": "class", "type": "int*"}, {"name": "rows", "type": "int"}]),
             r"args\[0\]\.name", ("not a keyword",)),
            ("arg named twice",
             schema(args=[{"name": "rows", "type": "int*"}, {"name": "rows", "type": "int"}]),
             r"args\[1\]\.name", ('"rows" is also the name of args[0]',)),
            ("code in an arg type",
             schema(args=[{"name": "dst", "type": "int*); system(\"id\"); (int*"},
                          {"name": "rows", "type": "int"}]),
             r"args\[0\]", ("unknown argument type",)),
            ("code in a param name", schema(params={"N = 1; int x": N}),
             r"params\.N = 1; int x", ("upper-case identifiers",)),
            ("max_width 0", schema(max_width=0), r"max_width", ("from 1 to 256",)),
        ]
        for label, s, place, words in rows:
            with self.subTest(label):
                w.dump_json("evil/fx_evil.json", s)
                for cmd in ("build", "keys"):
                    r = w.kf(cmd, "models/evil.json")
                    # the schema's path as the generator found it (absolute)
                    self.refused(f"{label} ({cmd})", r, w.path("evil", "fx_evil.json"), place,
                                 words)
        # the valid schema builds: the rows above fail for their one reason
        w.dump_json("evil/fx_evil.json", schema())
        self.assertEqual(w.build("models/evil.json").summary, (1, 0, 1, 0))

    def test_import_hf_refuses_what_the_family_does_not_compute(self):
        w = self.w
        with open(os.path.join(FIXTURES, "hf", "llama-3.2-1b.config.json")) as f:
            base = json.load(f)
        with open(os.path.join(FIXTURES, "hf", "qwen3-0.6b.config.json")) as f:
            qwen = json.load(f)
        with open(os.path.join(FIXTURES, "hf", "qwen3-30b-a3b.config.json")) as f:
            qmoe = json.load(f)
        with open(os.path.join(FIXTURES, "hf", "mixtral-8x7b.config.json")) as f:
            mixtral = json.load(f)
        rows = [
            ("attention_bias", base, {"attention_bias": True}, "attention_bias", ("biases",)),
            ("mlp_bias", base, {"mlp_bias": True}, "mlp_bias", ("biases",)),
            ("gelu", base, {"hidden_act": "gelu"}, "hidden_act", ('"gelu"',)),
            ("yarn", base, {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32768}},
             r"rope_scaling\.rope_type", ('"yarn"',)),
            ("linear", base, {"rope_scaling": {"type": "linear", "factor": 2.0}},
             r"rope_scaling\.type", ('"linear"',)),
            ("dynamic", base, {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
             r"rope_scaling\.rope_type", ('"dynamic"',)),
            ("llama3 with an extra member", base,
             {"rope_scaling": dict(base["rope_scaling"], mrope_section=[16, 24, 24])},
             r"rope_scaling\.mrope_section", ("no such rotary setting",)),
            ("Mistral-style sliding window", base, {"sliding_window": 4096}, "sliding_window",
             ("sliding-window",)),
            ("Qwen window turned on", qwen, {"sliding_window": 4096, "use_sliding_window": True},
             "sliding_window", ("use_sliding_window true",)),
            ("sliding layers", qwen, {"layer_types": ["full_attention", "sliding_attention"]},
             r"layer_types\[1\]", ('"sliding_attention"',)),
            ("float16", base, {"torch_dtype": "float16"}, "torch_dtype", ('"float16"',)),
            ("float32", base, {"torch_dtype": "float32"}, "torch_dtype", ('"float32"',)),
            ("quantized", base, {"quantization_config": {"quant_method": "awq", "bits": 4}},
             "quantization_config", ("quantized",)),
            ("experts", base, {"num_local_experts": 8, "num_experts_per_tok": 2},
             "num_local_experts", ("mixture of experts",)),
            ("routed experts", qwen, {"n_routed_experts": 64}, "n_routed_experts", ("experts",)),
            ("moe_intermediate_size", qwen, {"moe_intermediate_size": 768},
             "moe_intermediate_size", ("experts",)),
            # the MoE families implement routed experts, not a shared one or biases
            ("shared expert", qmoe, {"shared_expert_intermediate_size": 5632},
             "shared_expert_intermediate_size", ("shared expert",)),
            ("n_shared_experts", mixtral, {"n_shared_experts": 1}, "n_shared_experts",
             ("shared expert",)),
            ("MoE with biases", mixtral, {"attention_bias": True}, "attention_bias", ("biases",)),
            ("MoE gelu", qmoe, {"hidden_act": "gelu"}, "hidden_act", ('"gelu"',)),
        ]
        for label, cfg, change, place, words in rows:
            with self.subTest(label):
                w.dump_json("cfg/config.json", dict(cfg, **change))
                r = w.kf("import-hf", "cfg/config.json", "-o", "out.json", "--families",
                         "shipped/models/families", common=False)
                self.refused(label, r, "cfg/config.json", place, words)
                self.assertFalse(os.path.exists(w.path("out.json")), f"{label}: wrote out.json")
        # a duplicate key is refused (json.loads keeps the last, cJSON the first)
        w.write("cfg/config.json", json.dumps(base)[:-1] + ', "hidden_size": 4096}')
        r = w.kf("import-hf", "cfg/config.json", "-o", "out.json", "--families",
                 "shipped/models/families", common=False)
        self.refused("duplicate key", r, "cfg/config.json", "hidden_size", ("duplicate",))
        # what the family implements passes: Qwen's window turned off, tied
        # embeddings (no kernel reads them), the Llama 3 rule
        for cfg in (dict(qwen, sliding_window=4096), dict(base, tie_word_embeddings=False)):
            w.dump_json("cfg/config.json", cfg)
            r = w.kf("import-hf", "cfg/config.json", "--families", "shipped/models/families",
                     common=False)
            self.assertEqual(r.rc, 0, str(r))

    def test_gc_keeps_what_a_manifest_references_unless_told_to_drop_it(self):
        w = self.w
        for label, spec, words in (("bad model name", "../x", "is not MODEL"),
                                   ("bad arch", "fx-small/sm_9", "is not MODEL"),
                                   ("no such manifest", "fx-small/sm_100a", "no manifest"),
                                   ("no such model", "fx-none", "no manifest")):
            r = w.kf("gc", "--max-size", "0", "--drop-manifest", spec)
            self.refused(label, r, "kforge", "--drop-manifest", (words,))
        r = w.ok("gc", "--max-size", "0")
        self.assertIn("kept 6 entries", r.out, str(r))
        self.untouched("gc without --drop-manifest")
        self.assertIn("6 entries ok", w.ok("verify").out)
        r = w.ok("gc", "--max-size", "0", "--drop-manifest", "fx-small/sm_90a")
        self.assertFalse(os.path.exists(w.v1("manifests", "fx-small", "sm_90a.json")), str(r))
        self.assertEqual(w.entries(), set(), str(r))


if __name__ == "__main__":
    unittest.main()
