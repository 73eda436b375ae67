"""Layer kinds (a family's "layers", docs/contracts.md "Layer kinds"): the
generator composes a model's kinds into one persistent kernel per width,
writes its launch, arguments and buffers to the manifest, and refuses a
layer it cannot compose, naming the place. (Its GPU side, bitwise equality
with the chain of kinds: tests/gpu/test_layer.py.)"""
import os
import unittest

from kfhelp import Work, parse_keys

PHASES = ["input_norm", "qkv_proj", "rope_kv_write", "decode_attention", "o_proj",
          "post_attn_norm", "gate_up_proj", "down_proj"]


def shipped(w, model, widths):
    """A copy of a shipped description with fewer widths, beside the shipped
    families (so that a test may change them)."""
    desc = w.load_json(f"shipped/models/{model}.json")
    desc["widths"] = widths
    desc["arches"] = ["sm_90a"]
    w.dump_json(f"shipped/models/{model}-t.json", desc)
    return f"shipped/models/{model}-t.json"


def build(w, desc, expect_rc=0):
    r = w.kf("build", "--arch", "sm_90a", "--cache", "cache", "--out", "out", "--templates",
             "shipped/templates", desc, common=False, timeout=900)
    w.case.assertEqual(r.rc, expect_rc, str(r))
    return r


def with_attention_layer_grid(w, widths, grid):
    """A work dir with Qwen3-0.6B at `widths` whose decode_attention schema
    gives launch.layer_grid `grid`; returns the description."""
    desc = shipped(w, "qwen3-0.6b", widths)
    schema = w.load_json("shipped/templates/decode_attention.json")
    schema["launch"]["layer_grid"] = grid
    w.dump_json("shipped/templates/decode_attention.json", schema)
    return desc


class LayerKinds(unittest.TestCase):
    def test_qwen3_layer_kernel_in_the_manifest(self):
        w = Work(self, "layer", copy_shipped=True)
        build(w, shipped(w, "qwen3-0.6b", [1, 8]))
        man = w.load_json("cache/v1/manifests/qwen3-0.6b/sm_90a.json")
        layers = {k["width"]: k for k in man["kernels"] if k["kind"] == "layer"}
        self.assertEqual(sorted(layers), [1, 8])
        params = [p["name"] for p in man["signatures"]["layer"]["params"]]
        self.assertEqual(params[:4], ["input_norm_x", "input_norm_residual", "input_norm_weight",
                                      "input_norm_out"])
        self.assertEqual(params[-3:], ["layer_sync", "layer_scratch", "rows"])
        self.assertEqual(params.count("rows"), 1)
        for p in ("qkv_proj_w", "rope_kv_write_q_norm_w", "decode_attention_seq_lens",
                  "down_proj_y"):
            self.assertIn(p, params)
        for width, k in layers.items():
            launch = k["launch"]
            self.assertTrue(launch["cooperative"])
            self.assertTrue(launch["persistent"])
            self.assertEqual(launch["block"], [256, 1, 1])
            # the largest phase: qkv_proj's N / 16 = (16 + 2 * 8) * 128 / 16 tiles
            self.assertEqual(launch["grid"], [256, 1, 1])
            self.assertNotIn("cluster", launch)
            # attention (launch.layer_pack): two items of 128 threads side by
            # side, each with its own 47120 bytes
            self.assertGreaterEqual(launch["shared_bytes"], 2 * 47120)
            bufs = {b["arg"]: b for b in k["buffers"]}
            self.assertEqual(list(bufs), ["decode_attention_workspace",
                                          "decode_attention_semaphores", "layer_sync",
                                          "layer_scratch"])
            # status, exit, entry count, 8 phases, then o_proj's and down_proj's
            # 64 split tiles each (k_split 2), one 128-byte line apiece
            self.assertEqual(bufs["layer_sync"], {"arg": "layer_sync",
                                                  "bytes": (3 + 8 + 128) * 128,
                                                  "init": "zero_once"})
            self.assertEqual(bufs["layer_scratch"]["bytes"], 64 * 1 * 1024)
            self.assertEqual(bufs["decode_attention_semaphores"]["bytes"], 4 * width * 8)
            meta = w.load_json("cache/v1/" + k["meta"])
            self.assertEqual(meta["resources"]["spill_stores"], 0)
            records = {r["name"]: r["value"] for r in meta["inputs"] if r["tag"] == "param"}
            self.assertEqual(records["template"], "layer")
            self.assertEqual(records["o_proj.KSPLIT"], "2")
            self.assertEqual(records["qkv_proj.K"], "1024")
        src = w.read("out/qwen3-0.6b/sm_90a/layer_w8.cu")
        self.assertIn("#define KF_MONO 1", src)
        at = [src.index(f"// phase {i}: {kind} ") for i, kind in enumerate(PHASES)]
        self.assertEqual(at, sorted(at))
        calls = [src.index(e) for e in ("kf::add_rmsnorm_entry<kf_params_0>",
                                        "kf::skinny_gemm_entry<kf_params_1>",
                                        "kf::qknorm_rope_kv_write_entry<kf_params_2>",
                                        "kf::decode_attention_entry<kf_params_3>",
                                        "kf::skinny_gemm_entry<kf_params_4>",
                                        "kf::add_rmsnorm_entry<kf_params_5>",
                                        "kf::gate_up_silu_entry<kf_params_6>",
                                        "kf::skinny_gemm_entry<kf_params_7>")]
        self.assertEqual(calls, sorted(calls))
        self.assertIn("kf::layer::phase<128, 2>(3, ", src)
        self.assertIn("kf::layer::phase<256, 1>(4, ", src)
        # the separate kinds are all still there
        kinds = {k["kind"] for k in man["kernels"]}
        self.assertEqual(kinds, set(PHASES) | {"layer"})

    def test_moe_layers_compose_the_router_and_the_experts(self):
        """Qwen3-30B-A3B's layer kind runs the mixture of experts as phases:
        the router's semaphore is zeroed once like the sync area, the
        experts' act and y are the layer's buffers, and the separate kinds
        stay; GLM-4.5-Air gets a layer kind per layer type."""
        w = Work(self, "layer-moe", copy_shipped=True)
        build(w, shipped(w, "qwen3-30b-a3b", [2]))
        man = w.load_json("cache/v1/manifests/qwen3-30b-a3b/sm_90a.json")
        layer = next(k for k in man["kernels"] if k["kind"] == "layer")
        params = [p["name"] for p in man["signatures"]["layer"]["params"]]
        for p in ("router_w", "router_ids", "moe_gate_up_w", "moe_down_y", "moe_combine_out"):
            self.assertIn(p, params)
        self.assertLess(params.index("post_attn_norm_out"), params.index("router_x"))
        self.assertLess(params.index("moe_down_y"), params.index("moe_combine_y"))
        bufs = {b["arg"]: b for b in layer["buffers"]}
        self.assertEqual(bufs["router_semaphores"]["init"], "zero_once")
        self.assertEqual(bufs["moe_down_y"]["bytes"], 2 * 8 * 2048 * 4)  # W x TOPK x HIDDEN fp32
        self.assertTrue(layer["launch"]["cooperative"] and layer["launch"]["persistent"])
        meta = w.load_json("cache/v1/" + layer["meta"])
        self.assertEqual(meta["resources"]["spill_stores"], 0)
        src = w.read("out/qwen3-30b-a3b/sm_90a/layer_w2.cu")
        calls = [src.index(e) for e in ("kf::moe_router_entry<kf_params_6>",
                                        "kf::moe_gate_up_entry<kf_params_7>",
                                        "kf::moe_down_entry<kf_params_8>",
                                        "kf::moe_combine_entry<kf_params_9>")]
        self.assertEqual(calls, sorted(calls))
        self.assertEqual({k["kind"] for k in man["kernels"]} - {"layer"},
                         {"input_norm", "qkv_proj", "rope_kv_write", "decode_attention", "o_proj",
                          "post_attn_norm", "router", "moe_gate_up", "moe_down", "moe_combine"})
        keys = ("keys", "--templates", "shipped/templates", "--arch", "sm_90a")
        glm = {kid.split("/")[1] for kid in parse_keys(
            self, w.ok(*keys, shipped(w, "glm-4.5-air", [1]), common=False).out)}
        self.assertTrue({"dense_layer", "moe_layer"} <= glm, glm)

    def test_a_layer_type_names_the_layer_kind_that_runs_its_kinds(self):
        """The manifest's layer_types say which layer kind runs a type's kinds
        in one launch (the one whose phases are those kinds, in order); a type
        no layer kind runs has no "layer"."""
        w = Work(self, "layer-types", copy_shipped=True)
        fam = w.load_json("shipped/models/families/qwen3.json")
        fam["layer_types"] = [{"name": "first", "count": "1", "kinds": PHASES},
                              {"name": "rest", "count": "27", "kinds": PHASES[:4]}]
        w.dump_json("shipped/models/families/qwen3.json", fam)
        build(w, shipped(w, "qwen3-0.6b", [1]))
        man = w.load_json("cache/v1/manifests/qwen3-0.6b/sm_90a.json")
        self.assertEqual(man["layer_types"],
                         [{"name": "first", "count": 1, "kinds": PHASES, "layer": "layer"},
                          {"name": "rest", "count": 27, "kinds": PHASES[:4]}])

    def test_a_layer_of_an_unknown_kind_is_refused(self):
        w = Work(self, "layer-bad", copy_shipped=True)
        desc = shipped(w, "qwen3-0.6b", [1])
        fam = w.load_json("shipped/models/families/qwen3.json")
        fam["layers"][0]["phases"][3] = "attention"
        w.dump_json("shipped/models/families/qwen3.json", fam)
        r = build(w, desc, expect_rc=2)
        self.assertIn("layers[0]: error: phase 3: attention is not a kernel kind of the model",
                      r.err)
        self.assertFalse(os.path.exists(w.path("cache", "v1", "manifests", "qwen3-0.6b",
                                               "sm_90a.json")))

    def test_a_phase_whose_template_cannot_be_one_is_refused(self):
        w = Work(self, "layer-nophase", copy_shipped=True)
        desc = shipped(w, "qwen3-0.6b", [1])
        schema = w.load_json("shipped/templates/add_rmsnorm.json")
        del schema["launch"]["layer_shared_bytes"]
        w.dump_json("shipped/templates/add_rmsnorm.json", schema)
        r = build(w, desc, expect_rc=2)
        self.assertIn("phase 0: template add_rmsnorm (kind input_norm) has no "
                      "launch.layer_shared_bytes", r.err)

    def test_a_phase_takes_its_items_from_layer_grid(self):
        w = Work(self, "layer-grid", copy_shipped=True)
        build(w, with_attention_layer_grid(w, [8], ["SPLITS", "NUM_KV_HEADS", "W"]))
        src = w.read("out/qwen3-0.6b/sm_90a/layer_w8.cu")
        # phase 3 (attention): 32 ranges x 8 kv heads x 8 rows, one range an
        # item; the separate kernel keeps its own grid, 8 ranges a block
        call = src[src.index("kf::layer::phase<128, 2>(3, "):]
        self.assertEqual(call[:call.index(")")].split(", ")[3:6], ["32", "8", "8"])
        man = w.load_json("cache/v1/manifests/qwen3-0.6b/sm_90a.json")
        attn = next(k for k in man["kernels"] if k["kind"] == "decode_attention")
        self.assertEqual(attn["launch"]["grid"], [4, 8, 8])
        # o_proj (phase 4) waits for all 2048 of them
        self.assertIn("kf::layer::phase<256, 1>(4, 2048, ", src)

    def test_a_layer_grid_that_gives_no_blocks_is_refused(self):
        w = Work(self, "layer-grid-bad", copy_shipped=True)
        desc = with_attention_layer_grid(w, [1], ["SPLITS - 32", "NUM_KV_HEADS", "W"])
        r = build(w, desc, expect_rc=2)
        self.assertIn("launch.layer_grid[0]: \"SPLITS - 32\" gives 0 for width 1", r.err)
        self.assertFalse(os.path.exists(w.path("cache", "v1", "manifests", "qwen3-0.6b",
                                               "sm_90a.json")))


if __name__ == "__main__":
    unittest.main()
