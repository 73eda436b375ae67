#!/usr/bin/env python3
"""decode.py: greedy decode of a Hugging Face checkpoint with kforge's kernels.

Usage:
  python3 examples/decode.py MODEL_DIR [--prompt "1,2,3" ...] [--new-tokens N]
                             [--cache DIR] [--arch ARCH] [--widths 1,2,4,8]
                             [--page-size N] [--build-only]

MODEL_DIR holds a config.json and the weights as safetensors (model.safetensors,
or shards named by model.safetensors.index.json), as Hugging Face publishes
them. Model types: llama, mistral, qwen2 and qwen3 (the dense families). What it does, in order:
  1. `kforge import-hf` turns config.json into a kforge description, and
     `kforge build` compiles its kernels into the cache (a no-op when they
     are there already). Without a kforge binary (KFORGE_BIN, PATH or this
     checkout's build/gen/kforge) it uses the cache as it is, and the runtime
     says which build command is missing.
  2. The weights are loaded into the layouts the kernels take: q, k and v
     stacked into one [q + k + v, hidden] matrix for qkv_proj (and their
     biases into one vector, Qwen2), gate and up
     into one [2 * intermediate, hidden] matrix for gate_up_proj.
  3. A batch of prompts (token ids; one row per prompt, at most the largest
     width) is decoded greedily: every step feeds each row one token (its
     next prompt token while it has one, then the token it generated), so the
     prompts are prefilled through the decode kernels themselves, token by
     token. The KV cache is paged (--page-size tokens per page; the
     description's page size). Each layer is the eight kforge kinds; the
     embedding and lm_head are torch's, and the final norm is kforge's
     input_norm kind with the model's final norm weight.
It prints the generated token ids and the decode rate. No tokenizer: prompts
are token ids, and so is the output.

--build-only does step 1 only (no GPU and no torch needed).

As a library (tests/gpu/test_decode_example.py): Model.load(...) and
Model.generate(prompts, new_tokens, on_logits=callback) give every step's
logits.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")  # model_type values: the dense families
KINDS = ("input_norm", "qkv_proj", "rope_kv_write", "decode_attention", "o_proj",
         "post_attn_norm", "gate_up_proj", "down_proj")


class ExampleError(Exception):
    """A refusal with its reason (bad checkpoint, unsupported family, ...)."""


# ---- step 1: description and kernels --------------------------------------------
def find_kforge():
    """The kforge binary: KFORGE_BIN, then PATH, then this checkout's build."""
    for cand in (os.environ.get("KFORGE_BIN"), shutil.which("kforge"),
                 os.path.join(ROOT, "build", "gen", "kforge")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except OSError as e:
        raise ExampleError(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ExampleError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if config.get("model_type") not in FAMILIES:
        raise ExampleError(f"{path}: model_type {config.get('model_type')!r}: this example "
                           f"decodes the dense families {', '.join(FAMILIES)}")
    return config


def model_name(model_dir):
    """A description name from the directory: lower case, [a-z0-9.-] only."""
    base = os.path.basename(os.path.normpath(model_dir)).lower()
    name = "".join(c if c.isalnum() or c in ".-" else "-" for c in base).strip("-.")
    return name or "model"


def page_size_list(page_size):
    """page_size as a list: None, tokens per page, or several (the first is
    the one served)."""
    if page_size is None:
        return []
    if isinstance(page_size, int):
        return [page_size]
    return list(page_size)


def prepare_kernels(model_dir, cache, arch, name, widths=None, page_size=None, kforge=None):
    """Writes <cache>/descriptions/<name>.json from config.json and builds its
    kernels for arch into cache. page_size: tokens per KV-cache page, or a
    list of them (the description's page_sizes, the first its default).
    Returns the description's path, or None when no kforge binary is found
    (the cache must then hold the kernels)."""
    kforge = kforge or find_kforge()
    if kforge is None:
        return None
    os.makedirs(os.path.join(cache, "descriptions"), exist_ok=True)
    desc = os.path.join(cache, "descriptions", name + ".json")
    r = subprocess.run([kforge, "import-hf", os.path.join(model_dir, "config.json"),
                        "--name", name], capture_output=True, text=True)
    if r.returncode != 0:
        raise ExampleError(f"kforge import-hf {model_dir}/config.json failed:\n{r.stderr.strip()}")
    d = json.loads(r.stdout)
    if widths:
        d["widths"] = sorted(set(widths))
    pages = page_size_list(page_size)
    if pages:
        d["shape"]["page_size"] = pages[0]
    if len(pages) > 1:
        d["page_sizes"] = pages
    text = json.dumps(d, indent=2) + "\n"
    try:
        with open(desc) as f:
            same = f.read() == text
    except OSError:
        same = False
    if not same:  # written only when it changes, so a rebuild stays a no-op
        tmp = desc + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, desc)
    r = subprocess.run([kforge, "build", "--arch", arch, "--cache", cache, desc],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ExampleError(f"kforge build --arch {arch} --cache {cache} {desc} failed:\n"
                           f"{r.stderr.strip()}")
    return desc


# ---- step 2: weights ---------------------------------------------------------------
# safetensors: an 8-byte little-endian header length, a JSON header naming each
# tensor's dtype, shape and [begin, end) byte range in the data that follows.
# Read here with the standard library and torch.frombuffer, so that the example
# needs nothing besides torch and the kforge binding.
_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def read_safetensors_header(path):
    """(header dict without __metadata__, offset of the data) of one file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ExampleError(f"{path}: {size} bytes, shorter than a safetensors header")
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise ExampleError(f"{path}: header of {n} bytes in a file of {size}")
            header = json.loads(f.read(n))
    except OSError as e:
        raise ExampleError(f"{path}: cannot read: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ExampleError(f"{path}: the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ExampleError(f"{path}: the header is not a JSON object")
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for tname, t in header.items():
        try:
            begin, end = t["data_offsets"]
            shape, dtype = list(t["shape"]), t["dtype"]
        except (TypeError, KeyError, ValueError):
            raise ExampleError(f"{path}: tensor {tname}: needs dtype, shape and "
                               f"data_offsets") from None
        if dtype not in _DTYPES:
            raise ExampleError(f"{path}: tensor {tname}: dtype {dtype} (this example reads "
                               f"{', '.join(_DTYPES)})")
        count = 1
        for s in shape:
            count *= s
        itemsize = 4 if dtype == "F32" else 2
        if not 0 <= begin <= end <= data_size or end - begin != count * itemsize:
            raise ExampleError(f"{path}: tensor {tname}: bytes [{begin}, {end}) do not hold "
                               f"{dtype} {shape} within the {data_size} bytes of data")
    return header, 8 + n


def load_safetensors(model_dir, device="cuda"):
    """Every tensor of the checkpoint, as torch tensors on device."""
    import torch
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(p for p in os.listdir(model_dir) if p.endswith(".safetensors"))
    if not files:
        raise ExampleError(f"{model_dir}: no .safetensors files")
    out = {}
    for fname in files:
        path = os.path.join(model_dir, fname)
        header, at = read_safetensors_header(path)
        with open(path, "rb") as f:
            data = bytearray(f.read()[at:])
        for tname, t in header.items():
            begin, end = t["data_offsets"]
            dtype = getattr(torch, _DTYPES[t["dtype"]])
            tensor = torch.frombuffer(data, dtype=dtype, count=(end - begin) // dtype.itemsize,
                                      offset=begin) if end > begin else torch.empty(0, dtype=dtype)
            out[tname] = tensor.reshape(t["shape"]).to(device)
    return out


class Shape:
    """What the decode loop needs from config.json."""

    def __init__(self, config):
        self.hidden = config["hidden_size"]
        self.inter = config["intermediate_size"]
        self.hq = config["num_attention_heads"]
        self.hkv = config.get("num_key_value_heads", self.hq)
        self.d = config.get("head_dim") or self.hidden // self.hq
        self.layers = config["num_hidden_layers"]
        self.vocab = config["vocab_size"]
        self.eps = config.get("rms_norm_eps", 1e-6)
        self.qk_norm = config["model_type"] == "qwen3"
        self.qkv_bias = config["model_type"] == "qwen2"  # biases on q, k and v
        self.tied = bool(config.get("tie_word_embeddings", False))


def fuse_layer(w, i, s):
    """Layer i's weights in the kernels' layouts (bf16, contiguous)."""
    import torch
    p = f"model.layers.{i}."

    def get(name, shape):
        t = w.get(p + name)
        if t is None:
            raise ExampleError(f"the checkpoint has no tensor {p + name}")
        if list(t.shape) != list(shape):
            raise ExampleError(f"{p + name}: shape {list(t.shape)}, expected {list(shape)}")
        return t.to(torch.bfloat16)

    h, i_, q, kv = s.hidden, s.inter, s.hq * s.d, s.hkv * s.d
    layer = {
        "in_norm": get("input_layernorm.weight", [h]),
        "post_norm": get("post_attention_layernorm.weight", [h]),
        "qkv": torch.cat([get("self_attn.q_proj.weight", [q, h]),
                          get("self_attn.k_proj.weight", [kv, h]),
                          get("self_attn.v_proj.weight", [kv, h])]).contiguous(),
        "o": get("self_attn.o_proj.weight", [h, q]).contiguous(),
        "gate_up": torch.cat([get("mlp.gate_proj.weight", [i_, h]),
                              get("mlp.up_proj.weight", [i_, h])]).contiguous(),
        "down": get("mlp.down_proj.weight", [h, i_]).contiguous(),
    }
    if s.qkv_bias:
        layer["qkv_bias"] = torch.cat([get("self_attn.q_proj.bias", [q]),
                                       get("self_attn.k_proj.bias", [kv]),
                                       get("self_attn.v_proj.bias", [kv])]).contiguous()
    if s.qk_norm:
        layer["q_norm"] = get("self_attn.q_norm.weight", [s.d])
        layer["k_norm"] = get("self_attn.k_norm.weight", [s.d])
    return layer


# ---- step 3: the decode loop ----------------------------------------------------
def launch(kernel, **named):
    """Launches kernel with arguments matched by its manifest parameter names
    (rows, the last, is appended by the binding)."""
    names = [p[0] for p in kernel.params]
    if names and names[-1] == "rows":
        names = names[:-1]
    missing = [n for n in names if n not in named]
    if missing:
        raise ExampleError(f"{kernel.id}: no value for {missing}")
    kernel(*[named[n] for n in names])


class Model:
    def __init__(self, rt, s, embed, final_norm, lm_head, layers, page_size):
        self.rt, self.s = rt, s
        self.embed, self.final_norm, self.lm_head = embed, final_norm, lm_head
        self.layers, self.page_size = layers, page_size

    @classmethod
    def load(cls, model_dir, cache, arch=None, name=None, widths=None, page_size=None):
        import torch
        import kforge
        config = read_config(model_dir)
        s = Shape(config)
        name = name or model_name(model_dir)
        arch = arch or device_arch()
        prepare_kernels(model_dir, cache, arch, name, widths, page_size)
        try:
            rt = kforge.Runtime(cache, name, device=torch.cuda.current_device())
        except kforge.Error as e:  # e.g. no kernels for this model: names the build command
            raise ExampleError(str(e)) from None
        # the page size to serve: the first asked, else the manifest's first
        if not rt.page_sizes:
            raise ExampleError(f"{cache}: the manifest of {name} names no page size for "
                               "decode_attention (written by an older kforge): build it again")
        pages = page_size_list(page_size)
        page_size = pages[0] if pages else rt.page_sizes[0]
        if page_size not in rt.page_sizes:
            raise ExampleError(f"{cache}: the kernels of {name} serve pages of "
                               f"{', '.join(map(str, rt.page_sizes))} tokens, not {page_size}")
        w = load_safetensors(model_dir)
        embed = w["model.embed_tokens.weight"].to(torch.bfloat16)
        lm_head = embed if s.tied else w["lm_head.weight"].to(torch.bfloat16)
        layers = [fuse_layer(w, i, s) for i in range(s.layers)]
        return cls(rt, s, embed, w["model.norm.weight"].to(torch.bfloat16), lm_head, layers,
                   page_size)

    def generate(self, prompts, new_tokens, on_logits=None):
        """Greedy decode of len(prompts) rows, each its prompt then new_tokens
        generated tokens; on_logits(step, fed_tokens, logits [rows, vocab]
        fp32, active) after every step, active[r] false for a row whose
        tokens are all fed (it runs on, its outputs dropped, so that the
        batch keeps its rows). Returns (generated token lists, steps, seconds
        spent in the decode steps)."""
        import torch
        s, rows = self.s, len(prompts)
        if rows == 0 or any(len(p) == 0 for p in prompts):
            raise ExampleError("every prompt needs at least one token")
        # every kind for this step's rows and the KV cache's page size (a kernel
        # built for another page size is refused, NO_PAGE_SIZE)
        ks = {kind: self.rt.kernel(kind, rows, page_size=self.page_size) for kind in KINDS}
        width = ks["qkv_proj"].width
        steps = max(len(p) for p in prompts) + new_tokens - 1
        total = [len(p) + new_tokens - 1 for p in prompts]  # tokens each row's cache holds
        ps = self.page_size
        pages_per_row = (max(total) + ps - 1) // ps
        dev = "cuda"
        # one pool of pages per layer; row r owns pages r * pages_per_row ...
        block_tables = torch.arange(width * pages_per_row, dtype=torch.int32,
                                    device=dev).reshape(width, pages_per_row)
        # NaN until written: attention never reads a slot before its token is
        # written, and a stray read would show in the logits
        kv = [tuple(torch.full((width * pages_per_row, ps, s.hkv, s.d), float("nan"),
                               dtype=torch.bfloat16, device=dev) for _ in range(2))
              for _ in self.layers]
        buf = {n: torch.empty(width, c, dtype=torch.bfloat16, device=dev) for n, c in (
            ("x", s.hidden), ("residual", s.hidden), ("h", s.hidden), ("qkv", (s.hq + 2 * s.hkv) * s.d),
            ("q", s.hq * s.d), ("attn", s.hq * s.d), ("o", s.hidden), ("act", s.inter),
            ("mlp", s.hidden))}
        scratch = {}
        for b in ks["decode_attention"].buffers:  # workspace and semaphores (Kernel.buffers)
            t = torch.empty(max(b.bytes, 1), dtype=torch.uint8, device=dev)
            if b.zero_once:
                t.zero_()
            scratch[b.arg] = t.view(torch.float32 if b.arg == "workspace" else torch.int32)
        no_norm = torch.ones(s.d, dtype=torch.bfloat16, device=dev)
        out = [[] for _ in prompts]
        fed = [p[0] for p in prompts]
        elapsed = 0.0
        for step in range(steps):
            # position of each row's token = step; rows whose generation is over
            # keep running (their outputs are dropped) so the batch stays whole
            pos = [min(step, total[r] - 1) for r in range(rows)]
            positions = torch.tensor(pos, dtype=torch.int32, device=dev)
            slots = torch.tensor([r * pages_per_row * ps + p for r, p in enumerate(pos)],
                                 dtype=torch.int32, device=dev)
            seq_lens = torch.tensor([p + 1 for p in pos], dtype=torch.int32, device=dev)
            tokens = torch.tensor(fed, dtype=torch.int64, device=dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.index_select(self.embed, 0, tokens, out=buf["x"][:rows])
            buf["residual"][:rows].zero_()
            x = buf["x"]
            for li, w in enumerate(self.layers):
                k_cache, v_cache = kv[li]
                launch(ks["input_norm"], x=x, residual=buf["residual"], weight=w["in_norm"],
                       out=buf["h"])
                launch(ks["qkv_proj"], x=buf["h"], w=w["qkv"], bias=w.get("qkv_bias"),
                       y=buf["qkv"])
                launch(ks["rope_kv_write"], qkv=buf["qkv"], positions=positions, slots=slots,
                       q_norm_w=w.get("q_norm", no_norm), k_norm_w=w.get("k_norm", no_norm),
                       q_out=buf["q"], k_cache=k_cache, v_cache=v_cache)
                launch(ks["decode_attention"], q=buf["q"], k_cache=k_cache, v_cache=v_cache,
                       block_tables=block_tables, block_table_stride=pages_per_row,
                       seq_lens=seq_lens, out=buf["attn"], **scratch)
                launch(ks["o_proj"], x=buf["attn"], w=w["o"], y=buf["o"])
                launch(ks["post_attn_norm"], x=buf["o"], residual=buf["residual"],
                       weight=w["post_norm"], out=buf["h"])
                launch(ks["gate_up_proj"], x=buf["h"], w=w["gate_up"], out=buf["act"])
                launch(ks["down_proj"], x=buf["act"], w=w["down"], y=buf["mlp"])
                x = buf["mlp"]
            launch(ks["input_norm"], x=x, residual=buf["residual"], weight=self.final_norm,
                   out=buf["h"])
            logits = torch.nn.functional.linear(buf["h"][:rows], self.lm_head).float()
            nxt = logits.argmax(dim=-1).tolist()
            torch.cuda.synchronize()
            elapsed += time.perf_counter() - t0
            if on_logits:
                on_logits(step, list(fed), logits, [step < t for t in total])
            for r, p in enumerate(prompts):
                if step + 1 < len(p):
                    fed[r] = p[step + 1]  # still prefilling
                elif step < total[r]:
                    out[r].append(nxt[r])
                    fed[r] = nxt[r]
        return out, steps, elapsed


def device_arch():
    """The kforge arch of the current GPU (sm_90a for an H100/H200)."""
    import torch
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def parse_prompt(text):
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise ExampleError(f"--prompt {text!r}: token ids, comma or space separated") from None
    if not ids:
        raise ExampleError("--prompt: empty")
    return ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt", action="append", default=[],
                    help="token ids of one prompt (repeat for a batch; default: two prompts)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--cache", default=os.environ.get("KFORGE_CACHE", "cache"))
    ap.add_argument("--arch", help="default: the GPU's (sm_90a on an H200)")
    ap.add_argument("--name", help="description name (default: from the directory)")
    ap.add_argument("--widths", help="widths to build, e.g. 1,2,4,8 (default: the family's)")
    ap.add_argument("--page-size", help="tokens per KV page (default: the family's); a list "
                    "such as 16,1 builds the kernels for each and serves the first")
    ap.add_argument("--build-only", action="store_true",
                    help="write the description and build the kernels, then stop")
    a = ap.parse_args(argv)
    try:
        widths = [int(x) for x in a.widths.split(",")] if a.widths else None
        try:
            pages = [int(x) for x in a.page_size.split(",")] if a.page_size else None
        except ValueError:
            raise ExampleError(f"--page-size {a.page_size}: expected tokens per page, or a "
                               "list such as 16,1") from None
        name = a.name or model_name(a.model_dir)
        if a.build_only:
            read_config(a.model_dir)
            kforge = find_kforge()
            if kforge is None:
                raise ExampleError("no kforge binary (set KFORGE_BIN, or build this checkout)")
            desc = prepare_kernels(a.model_dir, a.cache, a.arch or "sm_90a", name, widths,
                                   pages, kforge)
            print(f"kernels of {desc} for {a.arch or 'sm_90a'} are in {a.cache}")
            return 0
        prompts = [parse_prompt(p) for p in a.prompt] or [[1, 2, 3, 4], [5, 6]]
        model = Model.load(a.model_dir, a.cache, a.arch, name, widths, pages)
        out, steps, secs = model.generate(prompts, a.new_tokens)
    except ExampleError as e:
        print(f"decode.py: {e}", file=sys.stderr)
        return 2
    for p, o in zip(prompts, out):
        print(f"prompt {p} -> {o}")
    print(f"{steps} steps of {len(prompts)} rows in {secs:.3f} s: "
          f"{steps * len(prompts) / secs:.1f} tokens/s (prefill token by token included; "
          f"launched from Python, no CUDA graph)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
