#!/usr/bin/env python3
"""Build the kforge cache that the GPU tests and the startup benchmark use:
real cubins compiled with nvcc, written per docs/contracts.md (objects,
meta.json, manifests). Independent of the generator on purpose, so the
runtime's GPU tests don't depend on it.

Usage: make_gpu_cache.py OUT_CACHE [--nvcc PATH] [--bench 64,256] [-j N]

Models written:
  kfgpu       sm_90a  scale_add w1,2,4,8 (float), bf16_scale w2 (bf16),
                      smem_reverse w4 (64 KiB dynamic shared memory)
  kfgpu       sm_100a the same kernels for sm_100a too (ignored on sm_90)
  kfgpu-b100  sm_100a only: refused on an H200
  bench-N     sm_90a  N distinct trivial kernels (N/4 kinds x widths 1,2,4,8)
"""
import argparse
import concurrent.futures
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import xxhash  # the GPU machine has it

    def xxh3_128_hex(data):
        return xxhash.xxh3_128_hexdigest(data)

    def xxh3_64(data):
        return xxhash.xxh3_64_intdigest(data)
except ImportError:  # Debian's libxxhash
    _xx = ctypes.CDLL("libxxhash.so.0")

    class _H128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

    _xx.XXH3_128bits.restype = _H128
    _xx.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    _xx.XXH3_64bits.restype = ctypes.c_uint64
    _xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def xxh3_128_hex(data):
        h = _xx.XXH3_128bits(data, len(data))
        return f"{h.high64:016x}{h.low64:016x}"

    def xxh3_64(data):
        return _xx.XXH3_64bits(data, len(data))

PRELUDE = """#include <cuda_bf16.h>
typedef __nv_bfloat16 kf_bf16;
"""

# kind -> (params, source body template, block, shared_bytes). {sym} is the
# entry symbol, {W} the width, {C} a per-kernel constant.
KINDS = {
    "scale_add": (
        [("x", "const float*"), ("y", "float*"), ("alpha", "float"), ("cols", "int"),
         ("rows", "int")],
        """extern "C" __global__ void __launch_bounds__(128)
{sym}(const float* x, float* y, float alpha, int cols, int rows) {{
  int r = blockIdx.x;  // one block per row of the width {W}; pad rows untouched
  if (r >= rows) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(long)r * cols + c] = alpha * x[(long)r * cols + c] + (float)r;
}}
""", 128, 0),
    "bf16_scale": (
        [("x", "const kf_bf16*"), ("y", "kf_bf16*"), ("cols", "int"), ("rows", "int")],
        """extern "C" __global__ void __launch_bounds__(128)
{sym}(const kf_bf16* x, kf_bf16* y, int cols, int rows) {{
  int r = blockIdx.x;
  if (r >= rows) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(long)r * cols + c] = __float2bfloat16(2.0f * __bfloat162float(x[(long)r * cols + c]));
}}
""", 128, 0),
    "smem_reverse": (
        [("x", "const float*"), ("y", "float*"), ("cols", "int"), ("rows", "int")],
        """extern "C" __global__ void __launch_bounds__(256)
{sym}(const float* x, float* y, int cols, int rows) {{
  extern __shared__ float buf[];  // 64 KiB: needs the opt-in above 48 KiB
  int r = blockIdx.x;
  if (r >= rows) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) buf[c] = x[(long)r * cols + c];
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[(long)r * cols + c] = buf[cols - 1 - c];
}}
""", 256, 65536),
    "bench": (
        [("x", "float*"), ("rows", "int")],
        """extern "C" __global__ void {sym}(float* x, int rows) {{
  if ((int)blockIdx.x < rows && threadIdx.x == 0) x[blockIdx.x] += {C}.0f;
}}
""", 32, 0),
}


def symbol(kid):
    mangled = re.sub(r"[^A-Za-z0-9]", "_", kid)
    return f"kf_{mangled}_{xxh3_64(kid.encode()) & 0xffffffff:08x}"


def compile_one(nvcc, arch, src, workdir, name):
    cu = os.path.join(workdir, name + ".cu")
    cubin = os.path.join(workdir, name + ".cubin")
    with open(cu, "w") as f:
        f.write(PRELUDE + src)
    cmd = [nvcc, f"-gencode=arch=compute_{arch[3:]},code={arch}", "-cubin", "-O3",
           "-Xptxas", "-v", "-o", cubin, cu]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"make_gpu_cache: nvcc failed for {name}:\n{p.stderr}")
    with open(cubin, "rb") as f:
        data = f.read()
    out = p.stderr + p.stdout
    res = {"registers": 0, "stack_bytes": 0, "spill_stores": 0, "spill_loads": 0,
           "shared_bytes": 0}
    for pat, key in ((r"Used (\d+) registers", "registers"),
                     (r"(\d+) bytes stack frame", "stack_bytes"),
                     (r"(\d+) bytes spill stores", "spill_stores"),
                     (r"(\d+) bytes spill loads", "spill_loads"),
                     (r"(\d+) bytes smem", "shared_bytes")):
        m = re.search(pat, out)
        if m:
            res[key] = int(m.group(1))
    return data, res, cmd, out


def write_model(cache, nvcc, model, arch, plan, jobs):
    """plan: list of (kind, width, constant)."""
    v1 = os.path.join(cache, "v1")
    entries = []
    signatures = {}
    with tempfile.TemporaryDirectory() as work, \
            concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futs = []
        for kind, width, const in plan:
            kid = f"{model}/{kind}/w{width}/{arch}"
            sym = symbol(kid)
            params, body, block, shared = KINDS[kind]
            src = f"// kernel {kid}\n" + body.format(sym=sym, W=width, C=const)
            name = re.sub(r"[^A-Za-z0-9]", "_", kid)
            futs.append((kid, kind, width, sym, params, block, shared,
                         pool.submit(compile_one, nvcc, arch, src, work, name)))
        for kid, kind, width, sym, params, block, shared, fut in futs:
            data, res, cmd, out = fut.result()
            checksum = xxh3_128_hex(data)
            key = xxh3_128_hex(("kfgpu-key\0" + kid).encode() + data)
            edir = os.path.join(v1, "objects", key[:2], key)
            os.makedirs(edir, exist_ok=True)
            with open(os.path.join(edir, "object.cubin"), "wb") as f:
                f.write(data)
            meta = {"format": 1, "key": key, "kernel_id": kid, "object": "object.cubin",
                    "checksum": checksum, "size": len(data), "command": cmd,
                    "compiler_output": out, "compile_seconds": 0.0, "resources": res,
                    "inputs": []}
            with open(os.path.join(edir, "meta.json"), "w") as f:
                json.dump(meta, f, indent=2, sort_keys=True)
            sizes = {"int": 4, "float": 4, "long long": 8}
            # as kforge writes it: one parameter list per kind
            signatures[kind] = {"params": [{"name": n, "type": t, "size": sizes.get(t, 8)}
                                           for n, t in params]}
            entries.append({
                "id": kid, "kind": kind, "width": width, "key": key,
                "object": f"objects/{key[:2]}/{key}/object.cubin",
                "meta": f"objects/{key[:2]}/{key}/meta.json",
                "checksum": checksum, "size": len(data), "symbol": sym,
                "launch": {"grid": [width, 1, 1], "block": [block, 1, 1],
                           "shared_bytes": shared},
            })
    entries.sort(key=lambda e: e["id"])
    mdir = os.path.join(v1, "manifests", model)
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(mdir, arch + ".json"), "w") as f:
        json.dump({"format": 1, "model": model, "arch": arch, "backend": "cuda",
                   "signatures": dict(sorted(signatures.items())), "kernels": entries}, f,
                  indent=2)
    print(f"make_gpu_cache: {model}/{arch}: {len(entries)} kernels")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cache")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    ap.add_argument("--bench", default="64,256")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    test_plan = [("scale_add", w, 0) for w in (1, 2, 4, 8)] + \
        [("bf16_scale", 2, 0), ("smem_reverse", 4, 0)]
    write_model(a.cache, a.nvcc, "kfgpu", "sm_90a", test_plan, a.j)
    write_model(a.cache, a.nvcc, "kfgpu", "sm_100a", test_plan, a.j)
    write_model(a.cache, a.nvcc, "kfgpu-b100", "sm_100a", test_plan[:2], a.j)
    for n in [int(x) for x in a.bench.split(",") if x]:
        write_model_bench(a.cache, a.nvcc, f"bench-{n}", "sm_90a", n, a.j)


def write_model_bench(cache, nvcc, model, arch, n, jobs):
    # Bench kinds k000.. each with widths 1,2,4,8: register them as kinds
    # sharing the "bench" body.
    plan = []
    for k in range(n // 4):
        kind = f"k{k:03d}"
        KINDS[kind] = KINDS["bench"]
        for i, w in enumerate((1, 2, 4, 8)):
            plan.append((kind, w, k * 4 + i))
    write_model(cache, nvcc, model, arch, plan, jobs)


if __name__ == "__main__":
    main()
