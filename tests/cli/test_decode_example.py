"""examples/decode.py without a GPU: its build step (a Hugging Face config
turned into a description and built, again a no-op), its refusals (a family
it does not decode, a config import-hf refuses, a bad prompt), and its
safetensors reader on damaged files. The decode loop itself runs on the GPU
(tests/gpu/test_decode_example.py)."""
import json
import os
import struct
import subprocess
import sys
import unittest

from kfhelp import KFORGE, SRC, Work

EXAMPLE = os.path.join(SRC, "examples", "decode.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
import decode  # noqa: E402

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
          "intermediate_size": 1024, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 128, "num_hidden_layers": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
          "vocab_size": 1000, "torch_dtype": "bfloat16", "hidden_act": "silu"}


class DecodeExample(unittest.TestCase):
    def setUp(self):
        self.w = Work(self, "decode")

    def model_dir(self, name="tiny", **changes):
        d = self.w.path(name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(CONFIG, **changes), f)
        return d

    def example(self, *args):
        env = dict(os.environ, KFORGE_BIN=KFORGE)
        return subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True,
                              env=env, cwd=self.w.root)

    def test_build_only_builds_every_kind_then_does_nothing(self):
        d, cache = self.model_dir(), self.w.path("cache")
        args = (d, "--build-only", "--cache", cache, "--arch", "gfx90a", "--widths", "1")
        r = self.example(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(cache, "v1", "manifests", "tiny", "gfx90a.json")) as f:
            kernels = json.load(f)["kernels"]
        # the eight kinds the example runs, and the family's layer kind
        self.assertEqual(sorted(k["kind"] for k in kernels), sorted(decode.KINDS + ("layer",)))
        self.assertEqual({k["width"] for k in kernels}, {1})
        desc = os.path.join(cache, "descriptions", "tiny.json")
        with open(desc) as f:
            self.assertEqual(json.load(f)["family"], "llama")
        before = os.stat(desc).st_mtime_ns
        objects = sorted(os.listdir(os.path.join(cache, "v1", "objects")))
        again = self.example(*args)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(os.stat(desc).st_mtime_ns, before, "the description is not rewritten")
        self.assertEqual(sorted(os.listdir(os.path.join(cache, "v1", "objects"))), objects)
        v = subprocess.run([KFORGE, "verify", "--cache", cache], capture_output=True, text=True)
        self.assertEqual(v.returncode, 0, v.stderr)

    def test_build_only_with_several_page_sizes(self):
        """--page-size 16,1 lists both in the description (16 first, its
        default) and builds the page-size kinds once per size."""
        d, cache = self.model_dir(), self.w.path("cache")
        r = self.example(d, "--build-only", "--cache", cache, "--arch", "gfx90a", "--widths",
                         "1", "--page-size", "16,1")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(cache, "descriptions", "tiny.json")) as f:
            desc = json.load(f)
        self.assertEqual((desc["shape"]["page_size"], desc["page_sizes"]), (16, [16, 1]))
        with open(os.path.join(cache, "v1", "manifests", "tiny", "gfx90a.json")) as f:
            man = json.load(f)
        self.assertEqual(man["page_size"], 16)
        paged = sorted((k["kind"], k["page_size"]) for k in man["kernels"] if "page_size" in k)
        self.assertEqual(paged, [("decode_attention", 1), ("decode_attention", 16),
                                 ("layer", 1), ("layer", 16),
                                 ("rope_kv_write", 1), ("rope_kv_write", 16)])
        self.assertEqual(len(man["kernels"]), len(decode.KINDS) + 4)
        r = self.example(d, "--build-only", "--cache", cache, "--page-size", "16,one")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--page-size 16,one: expected tokens per page", r.stderr)

    def test_a_family_it_does_not_decode_is_refused_by_name(self):
        d = self.model_dir(model_type="qwen3_moe")
        r = self.example(d, "--build-only", "--cache", self.w.path("cache"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("model_type 'qwen3_moe'", r.stderr)
        self.assertIn(os.path.join(d, "config.json"), r.stderr)
        self.assertFalse(os.path.exists(self.w.path("cache", "v1")), "nothing was built")

    def test_a_config_import_hf_refuses_says_why(self):
        d = self.model_dir(attention_bias=True)
        r = self.example(d, "--build-only", "--cache", self.w.path("cache"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("kforge import-hf", r.stderr)
        self.assertIn("attention_bias", r.stderr)

    def test_a_bad_prompt_is_refused(self):
        r = self.example(self.model_dir(), "--prompt", "1,two,3")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--prompt '1,two,3'", r.stderr)

    # ---- the safetensors reader ---------------------------------------------
    def write(self, header, data=b"", raw_header=None):
        path = self.w.path("model.safetensors")
        text = raw_header if raw_header is not None else json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        return path

    def refused(self, path, *words):
        with self.assertRaises(decode.ExampleError) as e:
            decode.read_safetensors_header(path)
        for w in (path,) + words:
            self.assertIn(w, str(e.exception))

    def test_safetensors_header_is_read(self):
        header = {"__metadata__": {"format": "pt"},
                  "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                  "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}}
        path = self.write(header, bytes(range(16)))
        got, at = decode.read_safetensors_header(path)
        self.assertEqual(sorted(got), ["a", "b"], "__metadata__ is not a tensor")
        self.assertEqual(got["a"]["shape"], [2, 3])
        self.assertEqual(at, 8 + len(json.dumps(header).encode()))

    def test_safetensors_damage_is_named(self):
        ok = {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}
        self.refused(self.write({"a": ok}, bytes(11)), "tensor a", "[0, 12)")
        self.refused(self.write({"a": dict(ok, shape=[2, 4])}, bytes(12)), "tensor a")
        self.refused(self.write({"a": dict(ok, dtype="I8")}, bytes(12)), "tensor a", "I8")
        self.refused(self.write({"a": {"shape": [1]}}, bytes(12)), "tensor a", "data_offsets")
        self.refused(self.write(None, raw_header=b"{not json"), "not JSON")
        path = self.w.path("short.safetensors")
        with open(path, "wb") as f:
            f.write(b"\x01\x02")
        self.refused(path, "shorter than a safetensors header")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1 << 40) + b"{}")
        self.refused(path, "header of 1099511627776 bytes")


if __name__ == "__main__":
    unittest.main()
