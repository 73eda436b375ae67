"""CLI basics (docs/cli.md): help, the keys format, warm, compile failures,
explain, and import-hf on real Hugging Face configs."""
import json
import os
import re
import unittest

from kfhelp import FIXTURE_MODEL, FIXTURES, Work, fixture_ids, parse_keys

COMMANDS = ("build", "warm", "keys", "explain", "ls", "verify", "gc", "import-hf")
BROKEN = "models/fx-broken.json"   # fx_broken fails to compile for width 2 only
# `<tag> <name> <16-hex>` (cli.md); indentation and column padding allowed,
# the name is empty for the scheme record
INPUT_LINE = re.compile(r"^\s*(\S+)\s+(?:(\S+)\s+)?([0-9a-f]{16})$")
UNCHANGED = "unchanged since last build"


class Help(unittest.TestCase):

    def test_help_on_every_subcommand(self):
        w = Work(self, "help")
        for cmd in COMMANDS:
            with self.subTest(cmd):
                for argv in ((cmd, "--help"), ("help", cmd)):
                    r = w.kf(argv[0], *argv[1:], common=False)
                    self.assertEqual(r.rc, 0, str(r))
                    text = r.out + r.err
                    self.assertRegex(text.lower(), r"usage", str(r))
                    self.assertIn(f"kforge {cmd}", text, f"usage must name `kforge {cmd}`\n{r}")
        r = w.kf("--help", common=False)
        self.assertEqual(r.rc, 0, str(r))
        for cmd in COMMANDS:
            self.assertIn(cmd, r.out + r.err, "top-level help lists every command")

    def test_bad_usage_exits_2(self):
        w = Work(self, "usage")
        for argv in (("frobnicate",), ("build", "--no-such-option", FIXTURE_MODEL),
                     ("build",), ("explain", FIXTURE_MODEL), ("gc",),
                     ("gc", "--max-size", "lots"), ("build", "-j", "zero", FIXTURE_MODEL)):
            with self.subTest(" ".join(argv)):
                r = w.kf(argv[0], *argv[1:], common=False)
                self.assertEqual(r.rc, 2, str(r))
                self.assertIn("kforge: error:", r.err, str(r))
        self.assertFalse(os.path.exists(w.path("cache")), "bad usage wrote a cache")


class Keys(unittest.TestCase):

    def test_keys_format_and_writes_nothing(self):
        w = Work(self, "keys")
        w.cache, w.out = "no-cache-here", "no-out-here"
        r = w.kf("keys", "--arch", "sm_90a,sm_100a", FIXTURE_MODEL)
        self.assertEqual(r.rc, 0, str(r))
        keys = parse_keys(self, r.out)   # '<id> <32 hex>', sorted by id
        self.assertEqual(set(keys), fixture_ids(arches=("sm_90a", "sm_100a")))
        self.assertEqual(len(set(keys.values())), len(keys))
        for kid in keys:
            self.assertRegex(kid, r"^fx-small/(add|copy|scale)/w[12]/sm_(90a|100a)$")
        self.assertFalse(os.path.exists(w.path("no-cache-here")), "keys wrote a cache")
        self.assertFalse(os.path.exists(w.path("no-out-here")), "keys wrote sources")

    def test_keys_of_several_descriptions_sorted_by_id(self):
        # cli.md: one line per kernel "sorted by id", across all descriptions
        w = Work(self, "keys2")
        r = w.kf("keys", FIXTURE_MODEL, "models/fx-golden.json")
        self.assertEqual(r.rc, 0, str(r))
        both = parse_keys(self, r.out)
        self.assertEqual({i.split("/")[0] for i in both}, {"fx-small", "fx-golden"})
        self.assertEqual(len(both), 6 + 4)


class Warm(unittest.TestCase):

    def test_warm_prints_cache_and_fails_when_a_kernel_cannot_be_built(self):
        w = Work(self, "warm")
        cache_abs = os.path.realpath(w.path(w.cache))
        r = w.kf("warm", BROKEN)
        self.assertEqual(r.rc, 1, f"warm must exit 1 when a kernel is missing\n{r}")
        self.assertIn(f"cache: {cache_abs}", (r.out + r.err).splitlines(), str(r))
        r = w.kf("warm", FIXTURE_MODEL)
        self.assertEqual(r.rc, 0, str(r))
        self.assertIn(f"cache: {cache_abs}", (r.out + r.err).splitlines(), str(r))
        self.assertEqual(len(w.entries()), 6 + 3)
        # warm again: all there, nothing compiled, still 0
        r = w.kf("warm", FIXTURE_MODEL)
        self.assertEqual(r.rc, 0, str(r))


class JsonResults(unittest.TestCase):

    def test_build_and_warm_json_name_the_failed_and_missing_kernels(self):
        w = Work(self, "jsonfail")
        bad = "fx-broken/broken/w2/sm_90a"
        for cmd in ("build", "warm"):
            r = w.kf(cmd, "--json", BROKEN)
            self.assertEqual(r.rc, 1, str(r))
            doc = json.loads(r.out.strip().splitlines()[-1])
            self.assertEqual((doc["kernels"], doc["failed"]), (4, 1), str(r))
            self.assertEqual(doc["failed_ids"], [bad], f"{cmd} --json lists the failed ids\n{r}")
            self.assertEqual(doc["missing_ids"], [bad], f"{cmd} --json lists the missing ids\n{r}")
        doc = json.loads(w.ok("warm", "--json", FIXTURE_MODEL).out.strip().splitlines()[-1])
        self.assertEqual((doc["failed_ids"], doc["missing_ids"]), ([], []))


class Progress(unittest.TestCase):

    def test_build_without_a_terminal_prints_a_line_per_compiled_kernel(self):
        w = Work(self, "lines")
        r = w.build()
        lines = [l for l in r.err.splitlines() if re.match(r"^\[\d+/\d+\] ", l)]
        done = re.compile(r"^\[(\d+)/6\] compiled (\S+) \(\d+\.\d s\)$")
        self.assertEqual(len(lines), 6, f"one progress line per compiled kernel\n{r}")
        self.assertTrue(all(done.match(l) for l in lines), lines)
        self.assertEqual({done.match(l).group(2) for l in lines}, fixture_ids())
        self.assertEqual(sorted(int(done.match(l).group(1)) for l in lines), list(range(1, 7)))
        r = w.build()          # all cached: nothing compiled, nothing said
        self.assertFalse([l for l in r.err.splitlines() if "compiled" in l], str(r))

    def test_terminal_counter_counts_every_kernel_from_the_start(self):
        import pty
        import subprocess
        w = Work(self, "tty")
        master, slave = pty.openpty()
        argv = w.argv("build", "-j", "1", FIXTURE_MODEL)
        p = subprocess.run(argv, cwd=w.root, env=w.env, stdout=subprocess.PIPE,
                           stderr=slave, timeout=300)
        os.close(slave)
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
        os.close(master)
        self.assertEqual(p.returncode, 0, err.decode(errors="replace"))
        counters = re.findall(rb"\[(\d+)/(\d+)\] compiling", err)
        self.assertTrue(counters, err)
        self.assertEqual({int(n) for _, n in counters}, {6},
                         f"the counter's total is every kernel from the first line: {counters}")


class Clusters(unittest.TestCase):

    def test_launch_cluster_reaches_the_sm90_source_and_manifest(self):
        w = Work(self, "cluster")
        tpl = w.load_json("templates/fx_copy.json")
        tpl["launch"]["cluster"] = ["W", 1, 1]
        w.dump_json("templates/fx_copy.json", tpl)
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        launch = {k["id"]: k["launch"] for k in w.manifest("fx-small", "sm_90a")["kernels"]}
        self.assertEqual(launch["fx-small/copy/w2/sm_90a"].get("cluster"), [2, 1, 1])
        # a cluster of one block is no cluster; other templates have none
        self.assertNotIn("cluster", launch["fx-small/copy/w1/sm_90a"])
        self.assertNotIn("cluster", launch["fx-small/add/w2/sm_90a"])
        src = w.read(os.path.join(w.out, "fx-small", "sm_90a", "copy_w2.cu"))
        self.assertIn(" __cluster_dims__(2, 1, 1)\n", src)
        self.assertNotIn("__cluster_dims__", w.read(os.path.join(w.out, "fx-small", "sm_90a",
                                                                 "copy_w1.cu")))

    def test_cluster_that_does_not_tile_the_grid_is_refused_before_compiling(self):
        w = Work(self, "cluster-bad")
        tpl = w.load_json("templates/fx_copy.json")
        tpl["launch"]["cluster"] = [3, 1, 1]
        w.dump_json("templates/fx_copy.json", tpl)
        r = w.kf("build", FIXTURE_MODEL)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("grid[0] = 1 is not a multiple of cluster[0] = 3 for width 1 "
                      "(kernel copy of models/fx-small.json)", r.err)
        self.assertEqual(w.entries(), set())


class MaxBlocksPerSm(unittest.TestCase):

    def test_launch_max_blocks_per_sm_reaches_the_manifest_where_above_zero(self):
        w = Work(self, "max-blocks")
        tpl = w.load_json("templates/fx_copy.json")
        tpl["launch"]["max_blocks_per_sm"] = "2 * (2 / (W + 1))"
        w.dump_json("templates/fx_copy.json", tpl)
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        launch = {k["id"]: k["launch"] for k in w.manifest("fx-small", "sm_90a")["kernels"]}
        self.assertEqual(launch["fx-small/copy/w1/sm_90a"].get("max_blocks_per_sm"), 2)
        self.assertNotIn("max_blocks_per_sm", launch["fx-small/copy/w2/sm_90a"])
        self.assertNotIn("max_blocks_per_sm", launch["fx-small/add/w1/sm_90a"])

    def test_launch_one_wave_reaches_the_manifest(self):
        w = Work(self, "one-wave")
        tpl = w.load_json("templates/fx_copy.json")
        tpl["launch"]["one_wave"] = True
        w.dump_json("templates/fx_copy.json", tpl)
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        launch = {k["id"]: k["launch"] for k in w.manifest("fx-small", "sm_90a")["kernels"]}
        self.assertIs(launch["fx-small/copy/w2/sm_90a"].get("one_wave"), True)
        self.assertNotIn("one_wave", launch["fx-small/add/w2/sm_90a"])


    def test_manifest_records_the_description_the_runtime_names_in_a_refusal(self):
        """The absolute path, whatever the command line gave, so the runtime
        can name the build command for a kernel the cache lacks."""
        w = Work(self, "described")
        w.build("models/../models/fx-small.json")
        self.assertEqual(w.manifest("fx-small", "sm_90a")["description"],
                         os.path.join(w.root, "models", "fx-small.json"))

class CompileFailure(unittest.TestCase):

    def test_compile_failure_shows_diagnostics_and_other_kernels_build(self):
        w = Work(self, "fail")
        keys = w.keys(BROKEN)
        r = w.build(BROKEN, expect_rc=1)
        self.assertEqual(r.summary, (4, 0, 3, 1), str(r))
        text = r.out + r.err
        self.assertIn("fx_broken_refuses_width_2", text, "the compiler's diagnostic is shown")
        src = os.path.join("fx-broken", "sm_90a", "broken_w2.cu")
        self.assertIn(src, text, "the diagnostic names the generated file")
        self.assertIn("fx-broken/broken/w2/sm_90a", text, "the failing kernel id is named")
        bad = keys["fx-broken/broken/w2/sm_90a"]
        self.assertNotIn(bad, w.entries(), "a failed compile left a cache entry")
        self.assertFalse(os.path.exists(w.entry_dir(bad)))
        self.assertEqual(w.entries(), set(keys.values()) - {bad})
        self.assertTrue(os.path.exists(w.path(w.out, src)), "the failing source is kept to look at")
        r = w.ok("verify")
        self.assertIn("3 entries ok", r.out + r.err)
        # the failure is not cached: the next build tries again
        r = w.build(BROKEN, expect_rc=1)
        self.assertEqual(r.summary, (4, 3, 0, 1), str(r))


class Explain(unittest.TestCase):

    def explain(self, w, kid):
        r = w.kf("explain", FIXTURE_MODEL, kid)
        self.assertEqual(r.rc, 0, str(r))
        lines = r.out.splitlines()
        inputs = [INPUT_LINE.match(l) for l in lines]
        inputs = [(m.group(1), m.group(2) or "", m.group(3)) for m in inputs if m]
        tags = {t for t, _, _ in inputs}
        self.assertTrue({"file", "param"} <= tags, f"explain lists the key's inputs\n{r}")
        verdict = [l.strip() for l in lines
                   if l.strip().startswith(("changed: ", "added: ", "removed: ", UNCHANGED))]
        # "unchanged since last build (key …)": the verdict, details aside
        verdict = [UNCHANGED if v.startswith(UNCHANGED) else v for v in verdict]
        return inputs, verdict, r

    def test_explain_names_the_changed_input(self):
        w = Work(self, "explain")
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        scale, copy = "fx-small/scale/w1/sm_90a", "fx-small/copy/w1/sm_90a"
        inputs, verdict, r = self.explain(w, scale)
        self.assertEqual(verdict, [UNCHANGED], str(r))
        files = [n for t, n, _ in inputs if t == "file"]
        self.assertTrue(any(n.endswith("fx_math.cuh") for n in files), files)
        self.assertFalse(any("fx_host_only" in n for n in files), files)

        w.replace("templates/fx_math.cuh", "return a * b;", "return b * a;")
        w.write("templates/fx_scale.cuh", "// a comment-only edit\n" + w.read("templates/fx_scale.cuh"))
        inputs2, verdict, r = self.explain(w, scale)
        self.assertEqual(len(verdict), 1, f"exactly one input changed\n{r}")
        self.assertRegex(verdict[0], r"^changed: file \S*fx_math\.cuh(\W.*)?$", str(r))
        before = dict(((t, n), h) for t, n, h in inputs)
        after = dict(((t, n), h) for t, n, h in inputs2)
        diff = [k for k in after if before.get(k) != after[k]]
        self.assertEqual(len(diff), 1, f"the listed hashes differ in one input: {diff}")
        _, verdict, r = self.explain(w, copy)
        self.assertEqual(verdict, [UNCHANGED], str(r))

        d = w.load_json(FIXTURE_MODEL)
        d["kernels"][2]["params"]["STRIDE"] = 4
        w.dump_json(FIXTURE_MODEL, d)
        _, verdict, r = self.explain(w, copy)
        self.assertTrue([v for v in verdict if re.match(r"^changed: param STRIDE\b", v)], str(r))
        self.assertFalse([v for v in verdict if v.startswith("changed: file")], str(r))


class ImportHF(unittest.TestCase):

    def imported(self, config, name, family, expect_shape, check_keys=True):
        w = Work(self, "hf", copy_shipped=True)
        cfg = os.path.join(FIXTURES, "hf", config)
        out = f"shipped/models/{name}.json"
        r = w.kf("import-hf", cfg, "-o", out, "--name", name, common=False)
        self.assertEqual(r.rc, 0, str(r))
        desc = w.load_json(out)
        self.assertEqual(desc.get("name"), name)
        self.assertEqual(desc.get("family"), family)
        shape = desc.get("shape", {})
        for k, v in expect_shape.items():
            self.assertIn(k, shape, f"shape lacks {k}: {shape}")
            self.assertEqual(shape[k], v, f"shape.{k}")
        # stdout mode gives the same description
        r2 = w.kf("import-hf", cfg, "--name", name, common=False)
        self.assertEqual(r2.rc, 0, str(r2))
        self.assertEqual(json.loads(r2.out), desc)
        if not check_keys:
            return desc
        # and kforge accepts what it wrote
        r = w.kf("keys", "--templates", "shipped/templates", "--arch", "sm_90a", out,
                 common=False)
        self.assertEqual(r.rc, 0, f"kforge keys rejects the imported description\n{r}")
        keys = parse_keys(self, r.out)
        self.assertTrue(keys)
        for kid in keys:
            self.assertTrue(kid.startswith(name + "/"), kid)
        return desc

    def test_import_hf_qwen3(self):
        self.imported("qwen3-0.6b.config.json", "qwen3-0.6b", "qwen3",
                      {"hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
                       "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
                       "rope_theta": 1000000})

    def test_import_hf_moe_gives_the_shipped_descriptions_kernels(self):
        """Qwen3-30B-A3B (num_experts, moe_intermediate_size, norm_topk_prob:
        true) and Mixtral-8x7B (num_local_experts, intermediate_size as the
        experts' size): the imported description has the shipped one's keys."""
        for config, name, family, shape in (
                ("qwen3-30b-a3b.config.json", "qwen3-30b-a3b", "qwen3_moe",
                 {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "norm_topk_prob": 1, "head_dim": 128, "num_key_value_heads": 4}),
                ("mixtral-8x7b.config.json", "mixtral-8x7b", "mixtral",
                 {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 14336,
                  "head_dim": 128, "num_key_value_heads": 8}),
                # n_routed_experts, a shared expert, one dense layer first, q/k/v
                # biases (attention_bias), half of each head rotated
                ("glm-4.5-air.config.json", "glm-4.5-air", "glm4_moe",
                 {"num_experts": 128, "n_shared_experts": 1, "first_k_dense_replace": 1,
                  "num_hidden_layers": 46, "partial_rotary_factor": 0.5,
                  "intermediate_size": 10944, "moe_intermediate_size": 1408})):
            with self.subTest(name=name):
                self.same_keys_as_shipped(config, name, family, shape)

    def same_keys_as_shipped(self, config, name, family, shape):
        """The description import-hf writes from config has family and shape,
        and exactly the keys of the shipped models/<name>.json."""
        self.imported(config, name, family, shape, check_keys=False)
        w = Work(self, "hf", copy_shipped=True)
        out = f"{name}.json"
        w.ok("import-hf", os.path.join(FIXTURES, "hf", config), "-o", out, "--name", name,
             common=False)
        got = [w.kf("keys", "--templates", "shipped/templates", "--arch", "sm_90a", d,
                    common=False) for d in (out, f"shipped/models/{name}.json")]
        for r in got:
            self.assertEqual(r.rc, 0, str(r))
        self.assertEqual(parse_keys(self, got[0].out), parse_keys(self, got[1].out))

    def test_import_hf_qwen2_and_mistral_give_the_shipped_descriptions_kernels(self):
        """Qwen2.5-7B (model_type qwen2: biases on q, k and v, a sliding
        window that use_sliding_window turns off) and Mistral-7B-v0.3 (model_type
        mistral: the Llama layer, no window; Llama-3.1-8B's tuning copied,
        the same sizes with another rope_theta)."""
        self.same_keys_as_shipped("qwen2.5-7b.config.json", "qwen2.5-7b", "qwen2",
                                  {"num_attention_heads": 28, "num_key_value_heads": 4,
                                   "head_dim": 128, "intermediate_size": 18944})
        self.same_keys_as_shipped("mistral-7b-v0.3.config.json", "mistral-7b-v0.3", "llama",
                                  {"rope_theta": 1000000, "o_proj_deep_ring": 1,
                                   "gate_up_proj_deep_ring": 1, "o_proj_late_slots": 1})

    def test_import_hf_refuses_a_sliding_window_that_binds(self):
        w = Work(self, "hf")
        with open(os.path.join(FIXTURES, "hf", "mistral-7b-v0.3.config.json")) as f:
            cfg = json.load(f)
        for window, refused in ((4096, True), (32767, True), (32768, False), (None, False)):
            with self.subTest(window=window):
                w.dump_json("config.json", dict(cfg, sliding_window=window))
                r = w.kf("import-hf", "config.json", "--name", "m", common=False)
                if refused:
                    self.assertEqual(r.rc, 2, str(r))
                    self.assertIn("config.json: sliding_window: error: family llama does not "
                                  f"implement sliding-window attention, got {window}", r.err)
                else:
                    self.assertEqual(r.rc, 0, str(r))
                    self.assertEqual(json.loads(r.out)["family"], "llama")

    def test_import_hf_glm_refuses_grouped_routing_and_qk_norm(self):
        """GLM-4.5 configs the glm4_moe family does not implement: experts
        routed within groups (n_group, topk_group above 1), an RMSNorm on q
        and k (use_qk_norm, GLM-4.5's larger model)."""
        w = Work(self, "hf")
        with open(os.path.join(FIXTURES, "hf", "glm-4.5-air.config.json")) as f:
            cfg = json.load(f)
        for field, value, reason in (
                ("n_group", 8, "n_group: error: family glm4_moe routes over all experts (one "
                               "group), got 8: group-limited routing is not implemented"),
                ("topk_group", 4, "topk_group: error: family glm4_moe routes over all experts"),
                ("use_qk_norm", True, "use_qk_norm: error: family glm4_moe does not implement "
                                      "an RMSNorm on q and k, got true")):
            with self.subTest(field=field):
                w.dump_json("config.json", dict(cfg, **{field: value}))
                r = w.kf("import-hf", "config.json", "--name", "m", common=False)
                self.assertEqual(r.rc, 2, str(r))
                self.assertIn("config.json: " + reason, r.err)
        # and the same config with them as shipped imports
        w.dump_json("config.json", cfg)
        r = w.kf("import-hf", "config.json", "--name", "m", common=False)
        self.assertEqual(r.rc, 0, str(r))

    def test_import_hf_moe_refuses_dense_layers_among_the_experts(self):
        w = Work(self, "hf")
        with open(os.path.join(FIXTURES, "hf", "qwen3-30b-a3b.config.json")) as f:
            cfg = json.load(f)
        for field, value in (("mlp_only_layers", [0, 1]), ("decoder_sparse_step", 2)):
            with self.subTest(field=field):
                bad = dict(cfg, **{field: value})
                with open(w.path("config.json"), "w") as f:
                    json.dump(bad, f)
                r = w.kf("import-hf", "config.json", "-o", "x.json", common=False)
                self.assertEqual(r.rc, 2, str(r))
                self.assertIn(f"config.json: {field}: error:", r.err)
                self.assertFalse(os.path.exists(w.path("x.json")))

    def test_import_hf_llama(self):
        self.imported("llama-3.2-1b.config.json", "llama-3.2-1b", "llama",
                      {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "head_dim": 64, "rms_norm_eps": 1e-5,
                       "rope_theta": 500000})
        # no head_dim in the config: hidden_size / num_attention_heads
        self.imported("llama-3.1-8b.config.json", "llama-3.1-8b", "llama",
                      {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                       "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-5,
                       "rope_theta": 500000}, check_keys=False)

    def test_import_hf_takes_the_tuning_of_a_shipped_description_of_the_same_shape(self):
        w = Work(self, "hf-tuned", copy_shipped=True)
        fams = ["--families", "shipped/models/families/"]  # a trailing slash too
        shipped = w.load_json("shipped/models/qwen3-0.6b.json")
        keys = ("keys", "--templates", "shipped/templates", "--arch", "sm_90a")
        before = parse_keys(self, w.ok(*keys, "shipped/models/qwen3-0.6b.json", common=False).out)
        r = w.ok("import-hf", os.path.join(FIXTURES, "hf", "qwen3-0.6b.config.json"), "-o",
                 "shipped/models/imported.json", "--name", "qwen3-0.6b", *fams, common=False)
        self.assertIn("tuning fields from", r.err)
        self.assertIn("qwen3-0.6b.json", r.err)
        shape = w.load_json("shipped/models/imported.json")["shape"]
        for field in ("o_proj_k_split", "down_proj_k_split", "gate_up_proj_deep_ring"):
            self.assertEqual(shape.get(field), shipped["shape"][field], field)
        self.assertNotIn("page_size", shape)  # a serving choice, not tuning
        # so the imported description builds exactly the shipped kernels
        after = parse_keys(self, w.ok(*keys, "shipped/models/imported.json", common=False).out)
        self.assertEqual(after, before)
        # another shape takes nothing
        r = w.ok("import-hf", os.path.join(FIXTURES, "hf", "llama-3.2-1b.config.json"), *fams,
                 common=False)
        self.assertNotIn("tuning fields", r.err)
        self.assertFalse([f for f in json.loads(r.out)["shape"] if "split" in f or "ring" in f])

    def test_import_hf_takes_the_serving_engines_page_size(self):
        """--page-size sets the shape's page_size: pages of one token (a
        token-granular pool) change only the attention kinds' keys; a size
        the templates do not take is refused by the build, naming it."""
        w = Work(self, "hf-pages", copy_shipped=True)
        cfg = os.path.join(FIXTURES, "hf", "qwen3-0.6b.config.json")
        keys = ("keys", "--templates", "shipped/templates", "--arch", "sm_90a")
        w.ok("import-hf", cfg, "-o", "shipped/models/p16.json", "--name", "q", common=False)
        w.ok("import-hf", cfg, "-o", "shipped/models/p1.json", "--name", "q", "--page-size", "1",
             common=False)
        self.assertEqual(w.load_json("shipped/models/p1.json")["shape"]["page_size"], 1)
        k16 = parse_keys(self, w.ok(*keys, "shipped/models/p16.json", common=False).out)
        k1 = parse_keys(self, w.ok(*keys, "shipped/models/p1.json", common=False).out)
        changed = sorted(kid.split("/")[1] for kid in k16 if k16[kid] != k1[kid])
        self.assertEqual(set(changed), {"decode_attention", "rope_kv_write", "layer"}, changed)
        w.ok("import-hf", cfg, "-o", "shipped/models/p3.json", "--name", "q", "--page-size", "3",
             common=False)
        r = w.kf(*keys, "shipped/models/p3.json", common=False)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("PAGE_SIZE", r.err)
        for bad in ("0", "-1", "x", "16k"):
            r = w.kf("import-hf", cfg, "--page-size", bad, common=False)
            self.assertEqual(r.rc, 2, f"--page-size {bad}: {r}")
            self.assertIn("--page-size", r.err)

    def test_a_description_of_several_page_sizes(self):
        """--page-size 16,1 writes page_sizes: the kinds that read the page
        size get a kernel per size, their ids say which, the default (the
        first) is in the manifest's header, and the other kinds are built
        once, with the same keys as a description of one page size."""
        w = Work(self, "hf-page-list", copy_shipped=True)
        cfg = os.path.join(FIXTURES, "hf", "qwen3-0.6b.config.json")
        w.ok("import-hf", cfg, "-o", "shipped/models/p16.json", "--name", "q", common=False)
        w.ok("import-hf", cfg, "-o", "shipped/models/both.json", "--name", "q",
             "--page-size", "16,1", common=False)
        desc = w.load_json("shipped/models/both.json")
        self.assertEqual((desc["shape"]["page_size"], desc["page_sizes"]), (16, [16, 1]))
        for d in ("p16", "both"):
            desc = w.load_json(f"shipped/models/{d}.json")
            desc["widths"] = [1]
            w.dump_json(f"shipped/models/{d}.json", desc)
        keys = ("keys", "--templates", "shipped/templates", "--arch", "sm_90a")
        one = parse_keys(self, w.ok(*keys, "shipped/models/p16.json", common=False).out)
        both = parse_keys(self, w.ok(*keys, "shipped/models/both.json", common=False).out)
        paged = {"decode_attention", "rope_kv_write", "layer"}
        for kid, key in one.items():
            kind = kid.split("/")[1]
            if kind in paged:
                self.assertNotIn(kid, both)
                for p in (16, 1):
                    self.assertIn(kid.replace("/w1/", f"/w1p{p}/"), both)
            else:
                self.assertEqual(both[kid], key, kid)  # one build serves both sizes
        self.assertEqual(len(both), len(one) + len(paged))
        r = w.ok("build", "--templates", "shipped/templates", "--arch", "sm_90a", "--cache",
                 "cache", "--out", "out", "shipped/models/both.json", common=False, timeout=900)
        man = w.load_json("cache/v1/manifests/q/sm_90a.json")
        self.assertEqual(man["page_size"], 16)
        got = {(k["kind"], k.get("page_size")) for k in man["kernels"]}
        self.assertEqual({p for kind, p in got if kind in paged}, {16, 1})
        self.assertEqual({p for kind, p in got if kind not in paged}, {None})
        self.assertEqual(sorted(k["id"] for k in man["kernels"]), sorted(both))
        w.ok("verify", "--cache", "cache", common=False)  # the runtime's reader takes the ids
        src = w.read("out/q/sm_90a/decode_attention_w1p1.cu")
        self.assertIn("static constexpr int PAGE_SIZE = 1;", src)
        self.assertIn("static constexpr int PAGE_SIZE = 16;",
                      w.read("out/q/sm_90a/layer_w1p16.cu"))
        # a list the import refuses
        for bad in ("16,16", "16,", ",1", "16;1"):
            r = w.kf("import-hf", cfg, "--page-size", bad, common=False)
            self.assertEqual(r.rc, 2, f"--page-size {bad}: {r}")
            self.assertIn("--page-size", r.err)

    def test_import_hf_names_the_model_from_where_the_config_lies(self):
        w = Work(self, "hf-names")
        with open(os.path.join(FIXTURES, "hf", "llama-3.2-1b.config.json")) as f:
            cfg = json.load(f)
        self.assertNotIn("_name_or_path", cfg)
        places = {
            # the Hugging Face hub cache: models--ORG--NAME/snapshots/REV/
            "hub/models--meta-llama--Llama-3.2-1B/snapshots/4e20de3/config.json": "llama-3.2-1b",
            "Llama-3.2-1B-Instruct/config.json": "llama-3.2-1b-instruct",
            "my model.config.json": "my-model",
        }
        for rel, want in places.items():
            os.makedirs(os.path.dirname(w.path(rel)) or w.root, exist_ok=True)
            w.dump_json(rel, cfg)
            r = w.ok("import-hf", rel, common=False)
            self.assertEqual(json.loads(r.out)["name"], want, rel)
        # config.json in the working directory: the directory's own name
        r = w.ok("import-hf", "config.json", common=False, cwd=w.path("Llama-3.2-1B-Instruct"))
        self.assertEqual(json.loads(r.out)["name"], "llama-3.2-1b-instruct")
        # _name_or_path wins over the place
        cfg["_name_or_path"] = "org/Some-Model"
        w.dump_json("Llama-3.2-1B-Instruct/config.json", cfg)
        r = w.ok("import-hf", "Llama-3.2-1B-Instruct/config.json", common=False)
        self.assertEqual(json.loads(r.out)["name"], "some-model")

    def test_import_hf_refuses_unknown_model_type(self):
        w = Work(self, "hf-bad")
        r = w.kf("import-hf", os.path.join(FIXTURES, "hf", "gpt2.config.json"), "-o", "x.json",
                 common=False)
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("gpt2", r.err)
        self.assertFalse(os.path.exists(w.path("x.json")))


if __name__ == "__main__":
    unittest.main()
