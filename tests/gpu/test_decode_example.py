"""The decode loop of examples/decode.py against a torch implementation of the
same model, on the GPU: for each tiny model (one per dense family, random
weights written as a Hugging Face checkpoint by this test), a batch of prompts
of different lengths is prefilled token by token and decoded greedily through
kforge's kernels, and at every step each row's logits are checked against an
fp32 torch forward pass over that row's whole token history (teacher-forced
with the tokens the example fed). Run on the GPU machine:

  python3 tests/gpu/test_decode_example.py            (KFORGE_TEST_CACHE: a cache
                                                       holding the tiny models' kernels)
  python3 tests/gpu/test_decode_example.py --prepare CACHE   (no GPU: writes the
      tiny configs and builds their kernels into CACHE, as scripts/gpu-prepare does)
"""
import json
import math
import os
import struct
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import decode  # noqa: E402

ARCH = "sm_90a"
WIDTHS = "1,4"  # the batch of 3 rows runs at width 4, the single row at width 1

_COMMON = {"hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 128, "num_hidden_layers": 3,
           "rms_norm_eps": 1e-6, "vocab_size": 2048, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False, "hidden_act": "silu",
           "max_position_embeddings": 4096, "attention_bias": False, "mlp_bias": False}
TINY = {
    "tiny-qwen3": dict(_COMMON, architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                       rope_theta=1000000.0),
    "tiny-llama": dict(_COMMON, architectures=["LlamaForCausalLM"], model_type="llama",
                       rope_theta=500000.0, tie_word_embeddings=True),
    "tiny-qwen2": dict(_COMMON, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                       rope_theta=1000000.0, sliding_window=4096, use_sliding_window=False),
}
# Built under their own names with another page size (kernel ids have no
# page-size part): the loop over pages of 32 and 64 tokens, and over a
# token-granular pool (pages of one token).
PAGE_SIZES = {"tiny-qwen3-p32": ("tiny-qwen3", 32), "tiny-llama-p64": ("tiny-llama", 64),
              "tiny-qwen2-p1": ("tiny-qwen2", 1),
              # one description of two page sizes: 16 its default, 1 asked by name
              "tiny-qwen3-ps": ("tiny-qwen3", (16, 1))}
PROMPTS = [[5, 17, 300, 42, 1999], [7], [1000, 3, 9, 11, 12, 13, 14, 15, 16]]
LONG_PROMPTS = [list(range(1, 70)), [3] * 40]  # past a page of 64 tokens
NEW_TOKENS = 10


def write_config(dirname, name):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(TINY[name], f, indent=2)


def write_safetensors(path, tensors):
    """tensors: {name: torch tensor}; the format's header, then the bytes."""
    import torch
    codes = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def random_checkpoint(dirname, name, seed):
    """config.json and model.safetensors of random weights; returns them as
    fp32 CUDA tensors by name."""
    import torch
    c = TINY[name]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    h, i, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d

    def mat(n, k):
        return (torch.randn(n, k, generator=gen) * k ** -0.5).to(torch.bfloat16)

    def norm(n):
        return (1 + 0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16)

    w = {"model.embed_tokens.weight": torch.randn(c["vocab_size"], h, generator=gen).to(torch.bfloat16),
         "model.norm.weight": norm(h)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(c["vocab_size"], h)
    for li in range(c["num_hidden_layers"]):
        p = f"model.layers.{li}."
        w.update({p + "input_layernorm.weight": norm(h), p + "post_attention_layernorm.weight": norm(h),
                  p + "self_attn.q_proj.weight": mat(q, h), p + "self_attn.k_proj.weight": mat(kv, h),
                  p + "self_attn.v_proj.weight": mat(kv, h), p + "self_attn.o_proj.weight": mat(h, q),
                  p + "mlp.gate_proj.weight": mat(i, h), p + "mlp.up_proj.weight": mat(i, h),
                  p + "mlp.down_proj.weight": mat(h, i)})
        if c["model_type"] == "qwen2":
            for proj, n in (("q", q), ("k", kv), ("v", kv)):
                w[p + f"self_attn.{proj}_proj.bias"] = (0.5 * torch.randn(n, generator=gen)).to(torch.bfloat16)
        if c["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
    write_config(dirname, name)
    write_safetensors(os.path.join(dirname, "model.safetensors"), w)
    return {k: v.float().cuda() for k, v in w.items()}


# ---- the reference: the model in plain torch, fp32 ---------------------------------
def rmsnorm(x, w, eps):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w


def rope(x, theta):
    """neox layout (rotate_half), positions 0..T-1; x [T, heads, d]."""
    import torch
    t, _, d = x.shape
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    ang = torch.arange(t, device=x.device, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def ref_logits(w, c, tokens):
    """Logits [vocab] after the last of tokens, fp32 throughout."""
    import torch
    eps, d = c["rms_norm_eps"], c["head_dim"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    x = w["model.embed_tokens.weight"][torch.tensor(tokens, device="cuda")]
    t = x.shape[0]
    mask = torch.ones(t, t, device="cuda", dtype=torch.bool).tril()
    for li in range(c["num_hidden_layers"]):
        p = f"model.layers.{li}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].t() + w.get(p + f"self_attn.{n}_proj.bias", 0)
                   for n in "qkv")
        q, k, v = q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d)
        if c["model_type"] == "qwen3":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
        k = k.repeat_interleave(hq // hkv, dim=1)
        v = v.repeat_interleave(hq // hkv, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        a = torch.einsum("hqk,khd->qhd", s, v).reshape(t, hq * d)
        x = x + a @ w[p + "self_attn.o_proj.weight"].t()
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].t()
        u = h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].t()
    x = rmsnorm(x[-1], w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return head @ x


class DecodeExample(unittest.TestCase):
    def _run(self, name, prompts, seed, new_tokens=NEW_TOKENS, page_size=None):
        import torch
        config, built = PAGE_SIZES.get(name, (name, None))
        page_size = page_size or built
        cache = os.environ.get("KFORGE_TEST_CACHE")
        if not cache:
            self.fail("KFORGE_TEST_CACHE must name a cache holding the tiny models "
                      "(python3 tests/gpu/test_decode_example.py --prepare CACHE)")
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = os.path.join(tmp, name)
            w = random_checkpoint(ckpt, config, seed)
            model = decode.Model.load(ckpt, cache, ARCH, name, [int(x) for x in WIDTHS.split(",")],
                                      page_size)
        if page_size:
            want = decode.page_size_list(page_size)[0]
            self.assertEqual(model.page_size, want, "the kernels of that page size")
            self.assertEqual(sorted(model.rt.page_sizes), sorted(decode.page_size_list(built)))
        history = [[] for _ in prompts]
        worst = {"cos": 1.0, "rel": 0.0, "agree": 0, "close": 0}

        def check(step, fed, logits, active):
            self.assertFalse(torch.isnan(logits).any().item(), f"{name} step {step}: NaN logits")
            for r in range(len(prompts)):
                if not active[r]:
                    continue
                history[r].append(fed[r])
                ref = ref_logits(w, TINY[config], history[r])
                out = logits[r]
                cos = torch.nn.functional.cosine_similarity(out, ref, dim=0).item()
                rel = ((out - ref).norm() / ref.norm()).item()
                worst["cos"] = min(worst["cos"], cos)
                worst["rel"] = max(worst["rel"], rel)
                self.assertGreater(cos, 0.999, f"{name} step {step} row {r}: cosine {cos}")
                self.assertLess(rel, 0.05, f"{name} step {step} row {r}: relative error {rel}")
                top2 = ref.topk(2).values
                if (top2[0] - top2[1]).item() > 0.05 * ref.std().item():
                    same = out.argmax().item() == ref.argmax().item()
                    self.assertTrue(same, f"{name} step {step} row {r}: greedy token "
                                          f"{out.argmax().item()}, reference {ref.argmax().item()}")
                    worst["agree"] += 1
                else:
                    worst["close"] += 1

        out, steps, secs = model.generate(prompts, new_tokens, on_logits=check)
        for r, p in enumerate(prompts):
            self.assertEqual(len(out[r]), new_tokens)
            self.assertEqual(history[r][:len(p)], p, "the prompt is fed first, token by token")
            self.assertEqual(history[r][len(p):], out[r][:-1], "then the tokens it generated")
        print(f"{name}: {len(prompts)} rows, {steps} steps: logits cosine >= {worst['cos']:.6f}, "
              f"relative error <= {worst['rel']:.4f}; greedy token = reference's at "
              f"{worst['agree']} row-steps ({worst['close']} near-ties not compared); "
              f"{secs * 1e3 / steps:.2f} ms a step from Python", flush=True)

    def test_qwen3_batch(self):
        self._run("tiny-qwen3", PROMPTS, 1)

    def test_llama_batch_tied_embeddings(self):
        self._run("tiny-llama", PROMPTS, 2)

    def test_qwen2_batch_qkv_bias(self):
        self._run("tiny-qwen2", PROMPTS, 4)

    def test_qwen3_pages_of_32(self):
        self._run("tiny-qwen3-p32", LONG_PROMPTS, 5, new_tokens=4)

    def test_llama_pages_of_64(self):
        self._run("tiny-llama-p64", LONG_PROMPTS, 6, new_tokens=4)

    def test_qwen2_pages_of_one_token(self):
        self._run("tiny-qwen2-p1", LONG_PROMPTS, 7, new_tokens=4)

    def test_qwen3_two_page_sizes_the_default(self):
        self._run("tiny-qwen3-ps", LONG_PROMPTS, 8, new_tokens=4)

    def test_qwen3_two_page_sizes_the_other_by_name(self):
        self._run("tiny-qwen3-ps", LONG_PROMPTS, 9, new_tokens=4, page_size=(1, 16))

    def test_qwen3_one_row(self):
        self._run("tiny-qwen3", [[11, 22, 33]], 3)


def prepare(cache):
    """Builds the tiny models' kernels into cache (no GPU needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, page_size) in [(n, (n, None)) for n in TINY] + list(PAGE_SIZES.items()):
            d = os.path.join(tmp, name)
            write_config(d, config)
            rc = decode.main([d, "--build-only", "--cache", cache, "--arch", ARCH, "--name", name,
                              "--widths", WIDTHS] +
                             (["--page-size", ",".join(map(str, decode.page_size_list(page_size)))]
                              if page_size else []))
            if rc != 0:
                sys.exit(rc)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--prepare":
        prepare(sys.argv[2])
    else:
        unittest.main(verbosity=2)
