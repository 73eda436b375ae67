"""Shared pieces of the GPU tests and scripts/bench-kernels for dense decoder
layers: model shapes, kernel access (the kforge binding over a cache that
kforge built), the buffers a decode step needs, fp32 references of each
kernel kind and of a whole layer, and one decoder layer through the eight
kernels.

Tensors are torch CUDA tensors; references compute in fp32 (fp64 where noted)
on upcast copies of the bf16 inputs.

Environment: KFORGE_TEST_CACHE (a cache with the shipped models for sm_90a;
else one is built with KFORGE_BIN or build/gen/kforge); KF_TEST_MODELS="a,b"
for some of the shipped models only.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ARCH = "sm_90a"

# KF_TEST_MODELS="a,b" narrows the tests and benchmarks to those models.
MODELS = [m for m in os.environ.get(
    "KF_TEST_MODELS",
    "llama-3.1-8b,qwen3-8b,qwen3-0.6b,qwen2.5-7b,mistral-7b-v0.3,glm-4.5-air").split(",") if m]
KINDS = ["input_norm", "qkv_proj", "rope_kv_write", "decode_attention", "o_proj",
         "post_attn_norm", "gate_up_proj", "down_proj"]
BF16_NAN = 0x7FC0  # poison bits


# ---- shapes -------------------------------------------------------------------
def manifest_path(cache, model, arch=ARCH):
    return os.path.join(cache, "v1", "manifests", model, arch + ".json")


def built_params(cache, model, arch=ARCH):
    """{kind: (template, {param: value}, [widths])} as kforge built the
    model into the cache: the template and its parameters are the "param"
    records of each kernel's key (meta.json, docs/contracts.md), the widths
    the manifest's."""
    if (cache, model, arch) in _built:
        return _built[(cache, model, arch)]
    path = manifest_path(cache, model, arch)
    with open(path) as f:
        manifest = json.load(f)
    out = {}
    for k in manifest["kernels"]:
        if k["kind"] not in out:
            with open(os.path.join(cache, "v1", k["meta"])) as f:
                recs = [r for r in json.load(f)["inputs"] if r["tag"] == "param"]
            params = {r["name"]: _number(r["value"]) for r in recs if r["name"] not in ("template", "W")}
            template = next(r["value"] for r in recs if r["name"] == "template")
            out[k["kind"]] = (template, params, [])
        out[k["kind"]][2].append(k["width"])
    if not out:
        raise RuntimeError(f"{path}: no kernels")
    _built[(cache, model, arch)] = out
    return out


_built = {}


def _number(text):
    try:
        return int(text)
    except ValueError:
        return float(text)


class Shape:
    """A model's shape (models/<name>.json, its family's defaults for the
    optional fields) and its kernels' template parameters as built into
    the cache (default: kforge_cache())."""

    def __init__(self, model, cache=None):
        with open(os.path.join(ROOT, "models", model + ".json")) as f:
            desc = json.load(f)
        self.name = desc["name"]
        self.family = desc.get("family")
        shape = dict(desc["shape"])
        with open(os.path.join(ROOT, "models", "families", self.family + ".json")) as f:
            fam = json.load(f)
        for name, spec in fam.get("optional_fields", {}).items():
            if name not in shape and isinstance(spec, dict):
                shape[name] = spec.get("default")
        built = built_params(cache or kforge_cache(), model)
        self.tparams = {kind: params for kind, (_, params, _) in built.items()}
        self.templates = {kind: template for kind, (template, _, _) in built.items()}
        self.hidden = shape["hidden_size"]
        self.inter = shape.get("intermediate_size")  # None: a mixture of experts
        self.hq = shape["num_attention_heads"]
        self.hkv = shape["num_key_value_heads"]
        self.d = shape["head_dim"]
        self.eps = float(shape["rms_norm_eps"])
        self.theta = float(shape["rope_theta"])
        self.rope_factor = float(shape.get("rope_scaling_factor") or 1.0)
        self.rope_low = float(shape.get("rope_low_freq_factor") or 1.0)
        self.rope_high = float(shape.get("rope_high_freq_factor") or 4.0)
        self.rope_orig = float(shape.get("rope_original_max_position_embeddings") or 8192)
        self.page_size = self.tparams["decode_attention"]["PAGE_SIZE"]
        self.splits = self.tparams["decode_attention"]["SPLITS"]
        self.qk_norm = self.templates["rope_kv_write"].startswith("qknorm")
        # the rotated part of a head (partial RoPE: GLM-4.5's partial_rotary_factor)
        self.rot = int(self.tparams["rope_kv_write"].get("ROTARY_DIM", self.d))
        self.qkv_bias = self.templates["qkv_proj"] == "skinny_gemm_bias"  # qwen2
        self.widths = sorted(built["decode_attention"][2])
        self.g = self.hq // self.hkv
        self.qkv_n = (self.hq + 2 * self.hkv) * self.d

    def proj_shape(self, kind):
        """(N, K) of a projection's weight; gate_up's N counts gate and up."""
        return {"qkv_proj": (self.qkv_n, self.hidden),
                "o_proj": (self.hidden, self.hq * self.d),
                "gate_up_proj": (2 * self.inter, self.hidden),
                "down_proj": (self.hidden, self.inter)}[kind]

    def workspace_floats(self, width, splits=None):
        """decode_attention's documented workspace size (decode_attention.cuh)."""
        rec = self.g * self.d + (2 * self.g + 3) // 4 * 4
        return width * self.hkv * (splits or self.splits) * rec


# ---- kernel access ----------------------------------------------------------------
_cache = []


def kforge_cache():
    """KFORGE_TEST_CACHE, else a cache built once here by kforge (KFORGE_BIN,
    else build/gen/kforge) with the models for sm_90a."""
    if not _cache:
        cache = os.environ.get("KFORGE_TEST_CACHE")
        if not cache:
            kbin = os.environ.get("KFORGE_BIN") or os.path.join(ROOT, "build", "gen", "kforge")
            cache = tempfile.mkdtemp(prefix="kf-gpu-cache-")
            models = [os.path.join(ROOT, "models", m + ".json") for m in MODELS]
            subprocess.run([kbin, "build", "--arch", ARCH, "--cache", cache,
                            "--out", os.path.join(cache, "sources"), *models], check=True)
        _cache.append(cache)
    return _cache[0]


def set_cache(cache):
    """Makes kforge_cache() return cache (a build of the models for sm_90a)."""
    _cache[:] = [cache]


def open_runtime(model, cache=None):
    """kforge.Runtime over the cache (default: kforge_cache()): .kernel(kind, rows)."""
    return kforge().Runtime(cache or kforge_cache(), model, device=0)


def kforge():
    """The installed kforge package, else the one in python/ (then the
    library comes from KFORGE_RT_LIBRARY)."""
    try:
        import kforge as k
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import kforge as k
    return k


def errors():
    """(Error, NoKernelError) of the binding."""
    k = kforge()
    return k.Error, k.NoKernelError


def _param_name(p):
    if isinstance(p, str):
        return p
    if isinstance(p, dict):
        return p["name"]
    if hasattr(p, "name"):
        return p.name
    return p[0]


def arg_names(k):
    return [n for n in (_param_name(p) for p in k.params) if n != "rows"]


def call(k, stream=None, **named):
    """Launches k with arguments matched by the manifest's parameter names."""
    names = arg_names(k)
    missing = [n for n in names if n not in named]
    if missing:
        raise KeyError(f"no value for {missing} (kernel takes {names})")
    args = [named[n] for n in names]
    if stream is None:
        return k(*args)
    try:
        return k(*args, stream=stream)
    except (TypeError, errors()[0]):
        # a binding that takes the raw stream handle rather than torch's object
        return k(*args, stream=stream.cuda_stream)


# ---- random data ----------------------------------------------------------------
def randn(*shape, scale=1.0, gen=None):
    return (torch.randn(*shape, device="cuda", generator=gen) * scale).to(torch.bfloat16)


def poisoned(*shape, dtype=torch.bfloat16):
    t = torch.empty(*shape, device="cuda", dtype=dtype)
    if dtype == torch.bfloat16:
        t.view(torch.int16).fill_(BF16_NAN)
    else:
        t.fill_(float("nan"))
    return t


def is_poison(t):
    return (t.view(torch.int16) == BF16_NAN).all().item()


def rel_err(out, ref):
    out = out.double()
    ref = ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def cosine(out, ref):
    out = out.double().flatten()
    ref = ref.double().flatten()
    return (out @ ref / (out.norm() * ref.norm()).clamp_min(1e-30)).item()


# ---- references (fp32 on upcast inputs) ---------------------------------------------
def ref_add_rmsnorm(x, residual, weight, eps):
    z = x.float() + residual.float()
    inv = torch.rsqrt(z.double().pow(2).mean(-1, keepdim=True) + eps).float()
    return z * inv * weight.float(), z


def ref_linear(x, w):
    return x.float() @ w.float().t()


def ref_gate_up(x, w, inter):
    y = ref_linear(x, w)
    g, u = y[:, :inter], y[:, inter:]
    return torch.nn.functional.silu(g) * u


def rope_inv_freq(s):
    """fp32 inverse frequencies over the rotated part of a head, Hugging
    Face's rule (llama3 when factor > 1)."""
    i = torch.arange(0, s.rot, 2, dtype=torch.float64)
    inv = 1.0 / (s.theta ** (i / s.rot))
    if s.rope_factor > 1.0:
        low_wl = s.rope_orig / s.rope_low
        high_wl = s.rope_orig / s.rope_high
        wl = 2 * math.pi / inv
        f = torch.where(wl > low_wl, inv / s.rope_factor, inv)
        smooth = (s.rope_orig / wl - s.rope_low) / (s.rope_high - s.rope_low)
        smoothed = (1 - smooth) * f / s.rope_factor + smooth * f
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = torch.where(medium, smoothed, f)
    return inv.float().cuda()


def ref_rope(x, positions, s):
    """x [n, heads, D] fp32, neox layout over the first s.rot values of each
    head (the rest passes unchanged), at each row's position."""
    ang = positions.float()[:, None] * rope_inv_freq(s)[None, :]  # fp32 product, as HF
    c = torch.cos(ang.double()).float()[:, None, :]
    sn = torch.sin(ang.double()).float()[:, None, :]
    h = s.rot // 2
    x1, x2, rest = x[..., :h], x[..., h:s.rot], x[..., s.rot:]
    return torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn, rest], dim=-1)


def ref_head_norm(x, w, eps):
    inv = torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps).float()
    return x * inv * w.float()


def ref_rope_kv(qkv, positions, s, q_norm_w=None, k_norm_w=None):
    """fp32 (q [n, hq, D], k [n, hkv, D], v [n, hkv, D]) from a qkv row block."""
    n = qkv.shape[0]
    x = qkv.float().view(n, s.hq + 2 * s.hkv, s.d)
    q, k, v = x[:, :s.hq], x[:, s.hq:s.hq + s.hkv], x[:, s.hq + s.hkv:]
    if s.qk_norm:
        q = ref_head_norm(q, q_norm_w, s.eps)
        k = ref_head_norm(k, k_norm_w, s.eps)
    return ref_rope(q, positions, s), ref_rope(k, positions, s), v


def gather_kv(cache, block_row, length, s):
    """[length, hkv, D] fp32 of one row's tokens from a paged cache."""
    pages = (length + s.page_size - 1) // s.page_size
    return cache[block_row[:pages].long()].reshape(-1, s.hkv, s.d)[:length].float()


def ref_attention_row(q, k, v, s):
    """q [hq, D], k/v [L, hkv, D] (fp32) -> [hq, D]; softmax in fp64."""
    qg = q.float().view(s.hkv, s.g, s.d)
    sc = torch.einsum("kgd,lkd->kgl", qg, k) / math.sqrt(s.d)
    p = torch.softmax(sc.double(), dim=-1).float()
    return torch.einsum("kgl,lkd->kgd", p, v).reshape(s.hq, s.d)


# ---- a decode step's buffers ----------------------------------------------------
class PagedKV:
    """A paged KV cache with per-row history: random pages in random order
    (order="sequential": each row's pages one after another, as a fresh pool
    hands them out), the tail of each row's last page poisoned with NaN
    (never to be read)."""

    def __init__(self, s, lengths, extra_pages=4, gen=None, poison_tail=True, order="random"):
        self.s = s
        self.lengths = list(lengths)  # tokens each row holds after this step
        ps = s.page_size
        need = [(L + ps - 1) // ps for L in self.lengths]
        self.max_pages = max(max(need), 1)
        total = sum(need) + extra_pages
        self.k = randn(total, ps, s.hkv, s.d, gen=gen)
        self.v = randn(total, ps, s.hkv, s.d, gen=gen)
        if order == "sequential":
            perm = torch.arange(total, device="cuda", dtype=torch.int32)
        else:
            perm = torch.randperm(total, device="cuda", generator=gen).int()
        self.block_tables = torch.full((len(self.lengths), self.max_pages), -1, dtype=torch.int32,
                                       device="cuda")
        at = 0
        for r, n in enumerate(need):
            self.block_tables[r, :n] = perm[at:at + n]
            at += n
        if poison_tail:
            for r, L in enumerate(self.lengths):
                if L % ps:
                    page = self.block_tables[r, L // ps].item()
                    self.k[page, L % ps:].view(torch.int16).fill_(BF16_NAN)
                    self.v[page, L % ps:].view(torch.int16).fill_(BF16_NAN)
        self.seq_lens = torch.tensor(self.lengths, dtype=torch.int32, device="cuda")

    def slots_for_last_token(self):
        ps = self.s.page_size
        out = []
        for r, L in enumerate(self.lengths):
            pos = L - 1
            out.append(self.block_tables[r, pos // ps].item() * ps + pos % ps)
        return torch.tensor(out, dtype=torch.int32, device="cuda")

    def positions(self):
        return torch.tensor([L - 1 for L in self.lengths], dtype=torch.int32, device="cuda")


def attention_scratch(s, width, splits=None):
    """decode_attention's workspace (exactly the documented size, or sized for
    `splits` ranges), poisoned with NaN so that a record the kernel reads
    without having written it shows (memory from the caching allocator may
    hold another build's identical records), and zeroed semaphores."""
    n = s.workspace_floats(width, splits)
    ws = torch.full((max(n, 1),), float("nan"), dtype=torch.float32, device="cuda")
    sem = torch.zeros(width * s.hkv, dtype=torch.int32, device="cuda")
    return ws, sem


# ---- weights and the whole layer ---------------------------------------------------
class LayerWeights:
    def __init__(self, s, gen=None):
        h, i = s.hidden, s.inter
        self.in_norm = (1 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(torch.bfloat16)
        self.post_norm = (1 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(torch.bfloat16)
        self.q_norm = (1 + 0.1 * torch.randn(s.d, device="cuda", generator=gen)).to(torch.bfloat16)
        self.k_norm = (1 + 0.1 * torch.randn(s.d, device="cuda", generator=gen)).to(torch.bfloat16)
        self.qkv = randn(s.qkv_n, h, scale=h ** -0.5, gen=gen)
        self.qkv_bias = randn(s.qkv_n, scale=0.5, gen=gen) if s.qkv_bias else None
        self.o = randn(h, s.hq * s.d, scale=(s.hq * s.d) ** -0.5, gen=gen)
        # the dense MLP (a mixture of experts has its own weights: test_moe.py)
        self.gate_up = randn(2 * i, h, scale=h ** -0.5, gen=gen) if i else None
        self.down = randn(h, i, scale=i ** -0.5, gen=gen) if i else None

    def nbytes(self):
        return sum(t.numel() * 2 for t in (self.qkv, self.o, self.gate_up, self.down)
                   if t is not None)


class LayerBuffers:
    """Activations of one decode step at a width (rows <= width)."""

    def __init__(self, s, width):
        self.h = poisoned(width, s.hidden)
        self.qkv = poisoned(width, s.qkv_n)
        self.q = poisoned(width, s.hq * s.d)
        self.attn = poisoned(width, s.hq * s.d)
        self.o = poisoned(width, s.hidden)
        self.h2 = poisoned(width, s.hidden)
        self.act = poisoned(width, s.inter) if s.inter else None
        self.mlp = poisoned(width, s.hidden)
        self.ws, self.sem = attention_scratch(s, width)


def layer_kernels(rt, rows):
    return {kind: rt.kernel(kind, rows) for kind in KINDS}


def run_attention(ks, s, w, buf, kv, x, residual, positions, slots, stream=None):
    """A decoder layer up to the MLP's input, through its first six kernels.
    x: the previous layer's MLP output, residual: updated in place; returns
    buf.h2 (the MLP's normalised input); kv.k/kv.v receive the step's k and v."""
    call(ks["input_norm"], stream, x=x, residual=residual, weight=w.in_norm, out=buf.h)
    call(ks["qkv_proj"], stream, x=buf.h, w=w.qkv, bias=w.qkv_bias, y=buf.qkv)
    call(ks["rope_kv_write"], stream, qkv=buf.qkv, positions=positions, slots=slots,
         q_norm_w=w.q_norm, k_norm_w=w.k_norm, q_out=buf.q, k_cache=kv.k, v_cache=kv.v)
    call(ks["decode_attention"], stream, q=buf.q, k_cache=kv.k, v_cache=kv.v,
         block_tables=kv.block_tables, block_table_stride=kv.block_tables.shape[1],
         seq_lens=kv.seq_lens, out=buf.attn, workspace=buf.ws, semaphores=buf.sem)
    call(ks["o_proj"], stream, x=buf.attn, w=w.o, y=buf.o)
    call(ks["post_attn_norm"], stream, x=buf.o, residual=residual, weight=w.post_norm, out=buf.h2)
    return buf.h2


def layer_phase_args(s, w, buf, kv, x, residual, positions, slots):
    """{kind: {argument: value}} of the eight kernels of run_layer, in order."""
    return {
        "input_norm": dict(x=x, residual=residual, weight=w.in_norm, out=buf.h),
        "qkv_proj": dict(x=buf.h, w=w.qkv, bias=w.qkv_bias, y=buf.qkv),
        "rope_kv_write": dict(qkv=buf.qkv, positions=positions, slots=slots, q_norm_w=w.q_norm,
                              k_norm_w=w.k_norm, q_out=buf.q, k_cache=kv.k, v_cache=kv.v),
        "decode_attention": dict(q=buf.q, k_cache=kv.k, v_cache=kv.v,
                                 block_tables=kv.block_tables,
                                 block_table_stride=kv.block_tables.shape[1],
                                 seq_lens=kv.seq_lens, out=buf.attn, workspace=buf.ws,
                                 semaphores=buf.sem),
        "o_proj": dict(x=buf.attn, w=w.o, y=buf.o),
        "post_attn_norm": dict(x=buf.o, residual=residual, weight=w.post_norm, out=buf.h2),
        "gate_up_proj": dict(x=buf.h2, w=w.gate_up, out=buf.act),
        "down_proj": dict(x=buf.act, w=w.down, y=buf.mlp),
    }


class LayerKernelState:
    """What a layer kernel (kind "layer") takes besides the phases' operands:
    its buffers as Kernel.buffers gives them; the sync area zeroed once, the
    rest (attention's workspace, the split scratch) poisoned with NaN."""

    def __init__(self, k):
        self.k = k
        self.bufs = {}
        for b in k.buffers:
            n = (b.bytes + 3) // 4
            if b.zero_once:
                self.bufs[b.arg] = torch.zeros(n, dtype=torch.int32, device="cuda")
            else:
                self.bufs[b.arg] = torch.full((n,), float("nan"), dtype=torch.float32,
                                              device="cuda")

    def status(self):
        """(state, counter, block, target, seen, epoch) of the sync area's
        status line (kf_sync.cuh)."""
        line = self.bufs["layer_sync"][:32].cpu()
        u64 = line.view(torch.int64)
        return (int(line[0]), int(line[1]), int(line[2]), int(u64[2]), int(u64[3]), int(u64[4]))


def run_layer_kernel(lk, s, w, buf, kv, x, residual, positions, slots, stream=None):
    """One dense decoder layer through the layer kernel lk (a
    LayerKernelState): the operands of run_layer's kernels, each named
    <kind>_<argument>; returns buf.mlp."""
    named = {}
    for kind, args in layer_phase_args(s, w, buf, kv, x, residual, positions, slots).items():
        for name, v in args.items():
            named[f"{kind}_{name}"] = v
    # the layer's own buffers; attention's workspace and semaphores are the
    # layer's (its buffers, sized for its width)
    named.update(lk.bufs)
    call(lk.k, stream, **named)
    return buf.mlp


def run_layer(ks, s, w, buf, kv, x, residual, positions, slots, stream=None):
    """One dense decoder layer through the eight kernels (run_attention, then
    the MLP); returns buf.mlp (this layer's MLP output)."""
    run_attention(ks, s, w, buf, kv, x, residual, positions, slots, stream)
    call(ks["gate_up_proj"], stream, x=buf.h2, w=w.gate_up, out=buf.act)
    call(ks["down_proj"], stream, x=buf.act, w=w.down, y=buf.mlp)
    return buf.mlp


def ref_attention(s, w, kv_k, kv_v, kv, x, residual, rows):
    """fp32 reference of run_attention on the same inputs (kv_k/kv_v: the
    caches before the step). Returns (h2, residual_out, k_new, v_new)."""
    h, res = ref_add_rmsnorm(x[:rows], residual[:rows], w.in_norm, s.eps)
    qkv = h @ w.qkv.float().t()
    if w.qkv_bias is not None:
        qkv = qkv + w.qkv_bias.float()
    pos = kv.positions()[:rows]
    q, k_new, v_new = ref_rope_kv(qkv, pos, s, w.q_norm, w.k_norm)
    attn = torch.empty(rows, s.hq, s.d, device="cuda")
    for r in range(rows):
        L = kv.lengths[r]
        kr = gather_kv(kv_k, kv.block_tables[r], L, s)
        vr = gather_kv(kv_v, kv.block_tables[r], L, s)
        kr[L - 1] = k_new[r]
        vr[L - 1] = v_new[r]
        attn[r] = ref_attention_row(q[r], kr, vr, s)
    o = attn.reshape(rows, -1) @ w.o.float().t()
    h2, res2 = ref_add_rmsnorm(o, res, w.post_norm, s.eps)
    return h2, res2, k_new, v_new


def ref_layer(s, w, kv_k, kv_v, kv, x, residual, rows):
    """fp32 reference of run_layer. Returns (mlp_out, residual_out, k_new, v_new)."""
    h2, res2, k_new, v_new = ref_attention(s, w, kv_k, kv_v, kv, x, residual, rows)
    act = ref_gate_up(h2, w.gate_up, s.inter)
    mlp = act @ w.down.float().t()
    return mlp, res2, k_new, v_new
