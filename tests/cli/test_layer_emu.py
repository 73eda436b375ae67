"""Layer kinds as built for AMD, without an AMD GPU: kforge builds a small
Qwen3-shaped description for gfx942 (clang-19, no spills), and the sources it
generated, the layer kernel's and its eight kinds', run on the host in
64-lane wavefronts (tests/emu/emu_layer.cpp over emu.h, with the software
sub-block barriers that AMD builds use). The layer kernel must give the
chain's bits: every activation, the residual and the KV cache, at full and
partial width and on the second launch over the same sync area; pad rows
keep their poison. (The NVIDIA side of the same property runs on the GPU:
tests/gpu/test_layer.py.)"""
import os
import random
import shutil
import struct
import subprocess
import unittest

from kfhelp import SRC, Work

CLANG19 = shutil.which("clang-19")
CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

ARCH = "gfx942"
WIDTH = 2
SHAPE = {"hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 128, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000, "page_size": 16, "o_proj_k_split": 2,
         "down_proj_k_split": 2, "dtype": "bf16"}
LENGTHS = [37, 70]  # tokens each row holds after the step
BF16_NAN = 0x7FC0
KINDS = ["input_norm", "qkv_proj", "rope_kv_write", "decode_attention", "o_proj",
         "post_attn_norm", "gate_up_proj", "down_proj"]


def bf16_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16


def bf16_table(rng, lo, hi):
    return [bf16_bits(rng.uniform(lo, hi)) for _ in range(4096)]


class Step:
    """A decode step's tensors for the shape: name -> bytes, the ones the
    kernels write poisoned, and each kind's arguments as tensor names."""

    def __init__(self, rng):
        s = SHAPE
        h, i, d = s["hidden_size"], s["intermediate_size"], s["head_dim"]
        hq, hkv, ps = s["num_attention_heads"], s["num_key_value_heads"], s["page_size"]
        qkv_n = (hq + 2 * hkv) * d
        unit, norm = bf16_table(rng, -1, 1), bf16_table(rng, 0.9, 1.1)

        def rand(n, scale=1.0):
            table = unit if scale == 1.0 else [bf16_bits(rng.uniform(-scale, scale))
                                               for _ in range(4096)]
            return struct.pack(f"<{n}H", *rng.choices(table, k=n))

        def poison(n):
            return struct.pack(f"<{n}H", *([BF16_NAN] * n))

        def ints(v):
            return struct.pack(f"<{len(v)}i", *v)

        need = [(L + ps - 1) // ps for L in LENGTHS]
        self.max_pages = max(need)
        pages = sum(need) + 3
        order = list(range(pages))
        rng.shuffle(order)
        tables, at = [], 0
        for n in need:
            tables += order[at:at + n] + [-1] * (self.max_pages - n)
            at += n
        page_elems = ps * hkv * d
        kv = {}
        for name in ("k_cache", "v_cache"):
            cache = bytearray(rand(pages * page_elems))
            for r, L in enumerate(LENGTHS):  # never read: the tail of each row's last page
                if L % ps:
                    page = tables[r * self.max_pages + L // ps]
                    first, end = page * page_elems + (L % ps) * hkv * d, (page + 1) * page_elems
                    cache[2 * first:2 * end] = poison(end - first)
            kv[name] = bytes(cache)
        slots = [tables[r * self.max_pages + (L - 1) // ps] * ps + (L - 1) % ps
                 for r, L in enumerate(LENGTHS)]
        W = WIDTH
        self.tensors = {
            "x": rand(W * h), "residual": rand(W * h), "in_norm": struct.pack(
                f"<{h}H", *rng.choices(norm, k=h)),
            "h": poison(W * h), "qkv_w": rand(qkv_n * h, h ** -0.5), "qkv": poison(W * qkv_n),
            "positions": ints([L - 1 for L in LENGTHS]), "slots": ints(slots),
            "q_norm": struct.pack(f"<{d}H", *rng.choices(norm, k=d)),
            "k_norm": struct.pack(f"<{d}H", *rng.choices(norm, k=d)),
            "q": poison(W * hq * d), **kv, "block_tables": ints(tables),
            "seq_lens": ints(LENGTHS), "attn": poison(W * hq * d),
            "o_w": rand(h * hq * d, (hq * d) ** -0.5), "o": poison(W * h),
            "post_norm": struct.pack(f"<{h}H", *rng.choices(norm, k=h)), "h2": poison(W * h),
            "gate_up_w": rand(2 * i * h, h ** -0.5), "act": poison(W * i),
            "down_w": rand(h * i, i ** -0.5), "mlp": poison(W * h),
        }
        self.args = {
            "input_norm": dict(x="x", residual="residual", weight="in_norm", out="h"),
            "qkv_proj": dict(x="h", w="qkv_w", y="qkv"),
            "rope_kv_write": dict(qkv="qkv", positions="positions", slots="slots",
                                  q_norm_w="q_norm", k_norm_w="k_norm", q_out="q",
                                  k_cache="k_cache", v_cache="v_cache"),
            "decode_attention": dict(q="q", k_cache="k_cache", v_cache="v_cache",
                                     block_tables="block_tables",
                                     block_table_stride=self.max_pages, seq_lens="seq_lens",
                                     out="attn"),
            "o_proj": dict(x="attn", w="o_w", y="o"),
            "post_attn_norm": dict(x="o", residual="residual", weight="post_norm", out="h2"),
            "gate_up_proj": dict(x="h2", w="gate_up_w", out="act"),
            "down_proj": dict(x="act", w="down_w", y="mlp"),
        }
        self.outputs = ["h", "qkv", "q", "k_cache", "v_cache", "attn", "o", "residual", "h2",
                        "act", "mlp"]
        self.rows_of = {"h": h, "qkv": qkv_n, "q": hq * d, "attn": hq * d, "o": h, "h2": h,
                        "act": i, "mlp": h}


def own_buffer(b):
    """A kernel's own buffer (manifest "buffers"): zeroed once, or poisoned."""
    if b["init"] == "zero_once":
        return bytes(b["bytes"]), True
    return struct.pack("<f", float("nan")) * (b["bytes"] // 4) + bytes(b["bytes"] % 4), False


@unittest.skipUnless(CLANG19 and CXX, "needs clang-19 and a C++ compiler (scripts/setup --test)")
class LayerOnAmd(unittest.TestCase):
    def setUp(self):
        self.w = w = Work(self, "layer-emu", copy_shipped=True)
        w.dump_json("shipped/models/tiny-qwen3.json",
                    {"name": "tiny-qwen3", "family": "qwen3", "shape": SHAPE, "widths": [WIDTH],
                     "arches": [ARCH], "limits": {"spills": 0}})
        r = w.kf("build", "--arch", ARCH, "--cache", "cache", "--out", "out", "--templates",
                 "shipped/templates", "shipped/models/tiny-qwen3.json", common=False, timeout=900)
        self.assertEqual(r.rc, 0, str(r))
        self.manifest = w.load_json(f"cache/v1/manifests/tiny-qwen3/{ARCH}.json")
        self.step = Step(random.Random(20261207))
        self.exes = {}

    def kernel(self, kind):
        return next(k for k in self.manifest["kernels"]
                    if k["kind"] == kind and k["width"] == WIDTH)

    def program(self, name, kinds):
        """Builds emu_layer with the generated sources of `kinds` (in order,
        each launched once per step); returns (executable, buffer names,
        their sizes in bytes)."""
        if name in self.exes:
            return self.exes[name]
        w, step = self.w, self.step
        names = list(step.tensors)
        data = dict(step.tensors)
        persist = set()
        head, calls = ["#pragma once"], []
        for n, kind in enumerate(kinds):
            k = self.kernel(kind)
            src = w.path("out", "tiny-qwen3", ARCH, f"{kind}_w{WIDTH}.hip")
            self.assertTrue(os.path.exists(src), src)
            head += [f"#define kf_params kf_params_k{n}", f'#include "{src}"', "#undef kf_params"]
            own = {}
            for b in k.get("buffers", []):
                tensor = f"{kind}.{b['arg']}"
                data[tensor], keep = own_buffer(b)
                names.append(tensor)
                if keep:
                    persist.add(tensor)
                own[b["arg"]] = tensor
            args = []
            for p in self.manifest["signatures"][kind]["params"]:
                pname, ptype = p["name"], p["type"]
                if pname == "rows":
                    args.append("rows")
                    continue
                if pname in own:
                    tensor = own[pname]
                elif kind == "layer":  # <phase>_<argument>
                    phase = next(ph for ph in KINDS if pname.startswith(ph + "_"))
                    tensor = step.args[phase][pname[len(phase) + 1:]]
                else:
                    tensor = step.args[kind][pname]
                if isinstance(tensor, int):
                    args.append(str(tensor))
                else:
                    args.append(f"({ptype})b[{names.index(tensor)}]")
            launch = k["launch"]
            # one block runs a layer kernel's every item (emu.h runs blocks
            # one after another, so a grid's blocks could not wait for each other)
            grid = [1, 1, 1] if launch.get("persistent") else launch["grid"]
            calls.append(f"  emu::launch(dim3{{{grid[0]}, {grid[1]}, {grid[2]}}}, "
                         f"dim3{{{launch['block'][0]}, {launch['block'][1]}, "
                         f"{launch['block'][2]}}}, [&] {{ {k['symbol']}({', '.join(args)}); }});")
        head.append(f"constexpr int kNumBufs = {len(names)};")
        head.append("static const size_t kBufBytes[] = {%s};"
                    % ", ".join(str(len(data[n])) for n in names))
        head.append("static const bool kBufPersist[] = {%s};"
                    % ", ".join("true" if n in persist else "false" for n in names))
        head.append("static void launch_all(unsigned char *const *b, int rows) {")
        head += calls + ["}"]
        d = w.path(name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "emu_layer_gen.h"), "w") as f:
            f.write("\n".join(head) + "\n")
        with open(os.path.join(d, "in.bin"), "wb") as f:
            for n in names:
                f.write(data[n])
        exe = os.path.join(d, "emu_layer")
        emu = os.path.join(SRC, "tests", "emu")
        cmd = [CXX, "-std=c++20", "-O1", "-DKF_EMU_WARP=64", "-DKF_EMU_SOFT_BARRIERS",
               "-Wno-unknown-pragmas", "-I", d, "-I", os.path.join(emu, "include"), "-I", emu,
               "-I", w.path("shipped", "templates"), os.path.join(emu, "emu_layer.cpp"),
               "-o", exe]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr[-6000:])
        self.exes[name] = (exe, names, [len(data[n]) for n in names])
        return self.exes[name]

    def run_program(self, name, kinds, rows, steps):
        exe, names, sizes = self.program(name, kinds)
        d = os.path.dirname(exe)
        out = os.path.join(d, f"out-{rows}-{steps}.bin")
        p = subprocess.run([exe, str(rows), str(steps), os.path.join(d, "in.bin"), out],
                           capture_output=True, text=True, timeout=900)
        self.assertEqual(p.returncode, 0, p.stderr[-4000:])
        with open(out, "rb") as f:
            blob = f.read()
        got, at = {}, 0
        for n, size in zip(names, sizes):
            got[n] = blob[at:at + size]
            at += size
        self.assertEqual(at, len(blob))
        return got

    def check_build(self):
        kinds = {k["kind"] for k in self.manifest["kernels"]}
        self.assertEqual(kinds, set(KINDS) | {"layer"})
        r = self.w.kf("lint", "--arch", ARCH, "--cache", "cache", "--templates",
                      "shipped/templates", "shipped/models/tiny-qwen3.json", common=False)
        self.assertEqual(r.rc, 0, str(r))
        row = next(line.split() for line in r.out.splitlines()
                   if line.startswith(f"tiny-qwen3/layer/w{WIDTH}/{ARCH}"))
        self.assertEqual(row[2], "0", r.out)  # spills
        # AMD's 64 KiB of LDS hold one attention item, not two side by side
        src = self.w.read(f"out/tiny-qwen3/{ARCH}/layer_w{WIDTH}.hip")
        self.assertIn("kf::layer::phase<128, 1>", src)
        self.assertLessEqual(self.kernel("layer")["launch"]["shared_bytes"], 65536)

    def test_layer_kernel_built_for_gfx942_gives_the_chains_bits(self):
        self.check_build()
        step = self.step
        for rows in (WIDTH, 1):
            with self.subTest(rows=rows):
                want = self.run_program("chain", KINDS, rows, 1)
                got = self.run_program("layer", ["layer"], rows, 2)
                for name in step.outputs:
                    self.assertEqual(len(got[name]), len(want[name]))
                    if got[name] != want[name]:
                        first = next(i for i in range(0, len(want[name]), 2)
                                     if got[name][i:i + 2] != want[name][i:i + 2])
                        self.fail(f"rows {rows}: {name} differs first at bf16 {first // 2} "
                                  f"(layer, chain)")
                for name, n in step.rows_of.items():  # rows written, pad rows poisoned
                    vals = struct.unpack(f"<{len(want[name]) // 2}H", want[name])
                    self.assertNotIn(BF16_NAN, vals[:rows * n], name)
                    self.assertEqual(set(vals[rows * n:]), {BF16_NAN} if rows < WIDTH else set(),
                                     name)
                self.assertNotEqual(want["residual"], step.tensors["residual"])
                self.assertNotEqual(want["k_cache"], step.tensors["k_cache"])


if __name__ == "__main__":
    unittest.main()
