"""Template harness that does not need the kforge generator or runtime.

It reads a model description (with its family preset) and the template
schemas the way docs/contracts.md defines them, writes each kernel's source in
the contract's generated shape, compiles it with nvcc, and launches it through
the CUDA driver API (ctypes), with the same Python surface as the kforge
binding: Runtime(cache_dir, model).kernel(kind, rows)(*args, stream=None).

It exists to check templates when the real toolchain is not at hand (the GPU
tests use the kforge binding unless KF_TEST_LOADER=direct) and to compile
every shipped kernel for the resource check (`python3 kf_direct.py check`).
It is no replacement for gen/: no cache keys, no manifest, no validation
beyond what a template check needs.
"""
import ctypes
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATES = os.path.join(ROOT, "templates")
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


class Error(Exception):
    pass


class NoKernelError(Error):
    pass


# ---- expressions (contracts.md: + - * / %, unary minus, parentheses) -------
_TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\.\d+(?:[eE][-+]?\d+)?)|(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def evaluate(src, names):
    """Evaluates an expression; ints stay exact, `/` truncates on ints."""
    if isinstance(src, (int, float)):
        return src
    toks = []
    for m in _TOKEN.finditer(src):
        f, i, n, op = m.groups()
        if f is not None:
            toks.append(("num", float(f)))
        elif i is not None:
            toks.append(("num", int(i)))
        elif n is not None:
            if n not in names:
                raise Error(f"unknown name '{n}' in '{src}'")
            toks.append(("num", names[n]))
        elif op.strip():
            toks.append(("op", op))
    pos = [0]

    def peek():
        return toks[pos[0]] if pos[0] < len(toks) else ("end", None)

    def take():
        t = peek()
        pos[0] += 1
        return t

    def binop(a, op, b):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if isinstance(a, int) and isinstance(b, int):
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            return a / b
        if op == "%":
            return int(a - b * int(a / b)) if isinstance(a, int) and isinstance(b, int) else a % b
        raise Error(op)

    def unary():
        t = take()
        if t == ("op", "-"):
            return -unary()
        if t == ("op", "("):
            v = expr()
            if take() != ("op", ")"):
                raise Error(f"expected ')' in '{src}'")
            return v
        if t[0] == "num":
            return t[1]
        raise Error(f"unexpected token in '{src}'")

    def term():
        v = unary()
        while peek()[0] == "op" and peek()[1] in "*/%":
            v = binop(v, take()[1], unary())
        return v

    def expr():
        v = term()
        while peek()[0] == "op" and peek()[1] in "+-":
            v = binop(v, take()[1], term())
        return v

    v = expr()
    if pos[0] != len(toks):
        raise Error(f"trailing input in '{src}'")
    return v


def _c_float(v):
    s = "%.9g" % float(v)
    if not any(c in s for c in ".en"):
        s += ".0"
    return s + "f"


# ---- descriptions -----------------------------------------------------------
def load_model(path, overrides=None):
    """Returns (model dict, kernel list [(kind, schema, params)]); overrides:
    {kind: {PARAM: value}} replaces template parameters (for tuning)."""
    with open(path) as f:
        desc = json.load(f)
    shape = dict(desc["shape"])
    kernels = {}
    if desc.get("family"):
        with open(os.path.join(ROOT, "models", "families", desc["family"] + ".json")) as f:
            fam = json.load(f)
        for name, spec in fam.get("optional_fields", {}).items():
            if name not in shape and isinstance(spec, dict) and "default" in spec:
                shape[name] = spec["default"]
        for k in fam["kernels"]:
            kernels[k["kind"]] = k
    for k in desc.get("kernels", []):
        kernels[k["kind"]] = k
    out = []
    for kind in sorted(kernels):
        k = kernels[kind]
        with open(os.path.join(TEMPLATES, k["template"] + ".json")) as f:
            schema = json.load(f)
        params = {}
        for pname, pspec in schema["params"].items():
            v = evaluate(k["params"][pname], shape)
            if pspec["type"] == "int":
                if float(v) != int(v):
                    raise Error(f"{kind}: {pname} must be an integer, got {v}")
                v = int(v)
                if "multiple_of" in pspec and v % pspec["multiple_of"]:
                    raise Error(f"{kind}: {pname}={v} not a multiple of {pspec['multiple_of']}")
                if "one_of" in pspec and v not in pspec["one_of"]:
                    raise Error(f"{kind}: {pname}={v} not one of {pspec['one_of']}")
            else:
                v = float(v)
            if "min" in pspec and v < pspec["min"] or "max" in pspec and v > pspec["max"]:
                raise Error(f"{kind}: {pname}={v} out of range")
            params[pname] = v
        for pname, v in (overrides or {}).get(kind, {}).items():
            if pname not in schema["params"]:
                raise Error(f"{kind}: override of '{pname}', which template {k['template']} "
                            f"does not have (it has {', '.join(schema['params'])})")
            params[pname] = v
        out.append((kind, schema, params))
    unknown = sorted(set(overrides or {}) - set(kernels))
    if unknown:
        raise Error(f"{path}: overrides for kinds the model does not have: {', '.join(unknown)}")
    return desc, out


def symbol_for(kid):
    return "kf_" + re.sub(r"[^A-Za-z0-9]", "_", kid) + "_" + hashlib.sha256(kid.encode()).hexdigest()[:8]


def launch_dims(schema, params, width, mma=1):
    """mma: the MMA of launch expressions, 1 where the templates take the
    matrix-instruction path (sm_80 and later, unless KF_FORCE_GENERIC)."""
    names = dict(params)
    names["W"] = width
    names["MMA"] = mma
    lc = schema["launch"]
    grid = [int(evaluate(e, names)) for e in lc["grid"]]
    block = [int(evaluate(e, names)) for e in lc["block"]]
    shared = int(evaluate(lc["shared_bytes"], names))
    return grid, block, shared, int(evaluate(lc.get("max_blocks_per_sm", 0), names)), \
        bool(lc.get("one_wave"))


def emit(desc_path, model_name, kind, schema, params, width, arch):
    kid = f"{model_name}/{kind}/w{width}/{arch}"
    lines = [f"// generated by kforge from {os.path.relpath(desc_path, ROOT)}, do not edit",
             f"// kernel {kid}, template {schema['template']}",
             f'#include "{schema["header"]}"', "", "namespace {", "struct kf_params {",
             f"  static constexpr int W = {width};"]
    for pname, pspec in schema["params"].items():
        v = params[pname]
        if pspec["type"] == "int":
            lines.append(f"  static constexpr int {pname} = {v};")
        else:
            lines.append(f"  static constexpr float {pname} = {_c_float(v)};")
    lines += ["};", "} // namespace", ""]
    _, block, _, _, _ = launch_dims(schema, params, width)
    threads = block[0] * block[1] * block[2]
    args = ", ".join(f"{a['type']} {a['name']}" for a in schema["args"])
    names = ", ".join(a["name"] for a in schema["args"])
    cluster = [int(evaluate(e, dict(params, W=width))) for e in schema["launch"].get("cluster", [1, 1, 1])]
    dims = f" __cluster_dims__({cluster[0]}, {cluster[1]}, {cluster[2]})" \
        if re.match(r"sm_\d+", arch) and int(re.match(r"sm_(\d+)", arch).group(1)) >= 90 and cluster[0] * cluster[1] * cluster[2] > 1 else ""
    lines += [f'extern "C" __global__ void __launch_bounds__({threads}){dims}',
              f"{symbol_for(kid)}({args}) {{",
              f"  {schema['entry']}<kf_params>({names});", "}", ""]
    return kid, "\n".join(lines)


def arch_flags(arch):
    num = arch[3:]
    return [f"-gencode=arch=compute_{num},code={arch}"]


def compile_one(src, out_cubin, arch, extra=()):
    cu = out_cubin[:-6] + ".cu"
    with open(cu, "w") as f:
        f.write(src)
    cmd = [NVCC, "-std=c++17", "-O3", *arch_flags(arch), "-cubin", "-Xptxas", "-v",
           "-I", TEMPLATES, *extra, "-o", out_cubin, cu]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise Error(f"nvcc failed for {cu}:\n{r.stderr}")
    return r.stderr


_RES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REG = re.compile(r"Used (\d+) registers")


def parse_resources(ptxas):
    m = _RES.search(ptxas)
    r = _REG.search(ptxas)
    return {"stack": int(m.group(1)), "spill_stores": int(m.group(2)),
            "spill_loads": int(m.group(3)), "registers": int(r.group(1)) if r else -1}


def build(models, arches, outdir, jobs=None, extra=(), overrides=None, kinds=None):
    """Compiles every kernel of the models for the arches into outdir (kinds:
    only those).

    Writes outdir/<model>/<arch>/<kind>_w<W>.{cu,cubin} and
    outdir/<model>/<arch>/index.json. Returns [(kid, resources)]."""
    work = []
    for path in models:
        desc, kernels = load_model(path, overrides)
        if kinds is not None:
            missing = sorted(set(kinds) - {k[0] for k in kernels})
            if missing:
                raise Error(f"{path}: no kernel of kind {', '.join(missing)}")
            kernels = [k for k in kernels if k[0] in kinds]
        for arch in arches:
            d = os.path.join(outdir, desc["name"], arch)
            os.makedirs(d, exist_ok=True)
            for kind, schema, params in kernels:
                for w in desc.get("widths", [1, 2, 4, 8]):
                    kid, src = emit(path, desc["name"], kind, schema, params, w, arch)
                    work.append((kid, src, os.path.join(d, f"{kind}_w{w}.cubin"), arch, schema,
                                 params, w, d, kind))

    tdigest = _templates_digest()

    def job(item):
        kid, src, cubin, arch, *_ = item
        old = cubin[:-6] + ".cu"
        src_key = src + "\n// flags: " + " ".join(extra) + "\n// templates: " + tdigest + "\n"
        if os.path.exists(cubin) and os.path.exists(old) and _read(old) == src_key and \
                os.path.exists(cubin + ".log"):
            log = _read(cubin + ".log")
        else:
            log = compile_one(src_key, cubin, arch, extra)
            with open(cubin + ".log", "w") as f:
                f.write(log)
        return kid, parse_resources(log)

    with ThreadPoolExecutor(jobs or os.cpu_count()) as ex:
        results = list(ex.map(job, work))
    indexes = {}
    for (kid, src, cubin, arch, schema, params, w, d, kind), (_, res) in zip(work, results):
        mma = int("-DKF_FORCE_GENERIC" not in extra and int(re.match(r"sm_(\d+)", arch).group(1)) >= 80)
        grid, block, shared, max_blocks, one_wave = launch_dims(schema, params, w, mma)
        indexes.setdefault(d, []).append({
            "id": kid, "kind": kind, "width": w, "symbol": symbol_for(kid),
            "object": os.path.basename(cubin),
            "params": [{"name": a["name"], "type": a["type"]} for a in schema["args"]],
            "template_params": params, "launch": {"grid": grid, "block": block,
                                                  "shared_bytes": shared, "max_blocks_per_sm": max_blocks,
                                                  "one_wave": one_wave,
                                                  "programmatic": bool(schema["launch"].get("programmatic"))},
            "resources": res})
    for d, ks in indexes.items():
        with open(os.path.join(d, "index.json"), "w") as f:
            json.dump({"kernels": sorted(ks, key=lambda k: k["id"])}, f, indent=1)
    return results


def _read(path):
    with open(path) as f:
        return f.read()


def _templates_digest():
    h = hashlib.sha256()
    for f in sorted(os.listdir(TEMPLATES)):
        with open(os.path.join(TEMPLATES, f), "rb") as fh:
            h.update(f.encode() + b"\0" + fh.read() + b"\0")
    return h.hexdigest()[:16]


# ---- launching (CUDA driver API through ctypes) ------------------------------
_cuda = None


def _driver():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
    return _cuda


def _check(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        _driver().cuGetErrorString(rc, ctypes.byref(s))
        raise Error(f"{what}: CUDA error {rc} ({s.value.decode() if s.value else '?'})")


_CTYPE = {"int": ctypes.c_int, "float": ctypes.c_float, "long long": ctypes.c_longlong}


class Kernel:
    def __init__(self, entry, fn, rows):
        self.entry = entry
        self._fn = fn
        self.rows = rows
        self.width = entry["width"]
        self.params = [(p["name"], p["type"]) for p in entry["params"]]
        self.launch = entry["launch"]

    def __call__(self, *args, stream=None):
        import torch
        specs = self.entry["params"][:-1]
        if len(args) != len(specs):
            raise Error(f"{self.entry['id']}: expected {len(specs)} arguments, got {len(args)}")
        vals = []
        for a, p in zip(args, specs):
            t = p["type"]
            if t.endswith("*"):
                if not isinstance(a, torch.Tensor) or not a.is_cuda:
                    raise Error(f"{p['name']}: expected a CUDA tensor")
                vals.append(ctypes.c_void_p(a.data_ptr()))
            else:
                vals.append(_CTYPE[t](a))
        vals.append(ctypes.c_int(self.rows))
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])
        s = stream if stream is not None else torch.cuda.current_stream()
        handle = ctypes.c_void_p(s.cuda_stream if hasattr(s, "cuda_stream") else int(s))
        g, b, sh = self.launch["grid"], self.launch["block"], self.launch["shared_bytes"]
        if self.launch.get("programmatic"):
            # the runtime's programmatic launch: overlap with the previous kernel
            launch_programmatic(self._fn, g, b, sh, handle, ptrs, f"launch {self.entry['id']}")
            return
        _check(_driver().cuLaunchKernel(self._fn, g[0], g[1], g[2], b[0], b[1], b[2], sh, handle,
                                        ptrs, None), f"launch {self.entry['id']}")


def load_probe(src, names, max_shared=0):
    """Compiles the CUDA source of a probe in tests/gpu for this GPU and
    loads it: (module, {name: function}), each function allowed max_shared
    bytes of dynamic shared memory. Keep the module while launching."""
    import tempfile
    import torch
    torch.zeros(1, device="cuda")  # torch's primary context, current before the driver calls
    cc = torch.cuda.get_device_capability()
    with tempfile.TemporaryDirectory() as d:
        cubin = os.path.join(d, "probe.cubin")
        compile_one(src, cubin, f"sm_{cc[0]}{cc[1]}")
        with open(cubin, "rb") as f:
            image = f.read()
    drv = _driver()
    mod = ctypes.c_void_p()
    _check(drv.cuModuleLoadData(ctypes.byref(mod), image), "load the probe")
    fns = {}
    for name in names:
        fn = ctypes.c_void_p()
        _check(drv.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), name)
        if max_shared:
            _check(drv.cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_shared),
                   f"{name}: shared memory")
        fns[name] = fn
    return mod, fns


def load_bench_kernels():
    """scripts/bench-kernels as a module (its timing and input helpers)."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("kf_bench_kernels",
                                                  os.path.join(ROOT, "scripts", "bench-kernels"))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


def launch_programmatic(fn, grid, block, shared_bytes, stream_handle, ptrs, what):
    """cuLaunchKernelEx with programmatic stream serialisation, as the
    runtime launches a programmatic kernel: it may start while the kernel
    before it on the stream finishes. grid, block: 3 dimensions each."""
    attr = _LaunchAttr(id=_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1
    cfg = _LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                        stream_handle, ctypes.pointer(attr), 1)
    _check(_driver().cuLaunchKernelEx(ctypes.byref(cfg), fn, ptrs, None), what)


_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class _LaunchAttr(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttr)), ("numAttrs", ctypes.c_uint)]


def _device_attr(a):
    import torch
    drv = _driver()
    dev, v = ctypes.c_int(), ctypes.c_int()
    _check(drv.cuDeviceGet(ctypes.byref(dev), torch.cuda.current_device()), "cuDeviceGet")
    _check(drv.cuDeviceGetAttribute(ctypes.byref(v), a, dev), f"device attribute {a}")
    return v.value


def _blocks_per_sm_cap(launch):
    """The runtime's cap (rt_kernel.c): max_blocks_per_sm, and with one_wave
    no more than the grid's share of the SMs; 0: none."""
    cap = launch.get("max_blocks_per_sm", 0)
    if launch.get("one_wave"):
        g = launch["grid"]
        sms = _device_attr(16)
        wave = (g[0] * g[1] * g[2] + sms - 1) // sms
        cap = min(cap, wave) if cap else wave
    return cap


def _capped_shared(fn, shared, max_blocks):
    """The runtime's rule for launch.max_blocks_per_sm (rt_cuda.c): enough
    dynamic shared memory that one block more than max_blocks would not fit
    on an SM."""
    sm, optin, reserved = _device_attr(81), _device_attr(97), _device_attr(111)
    v = ctypes.c_int()
    _check(_driver().cuFuncGetAttribute(ctypes.byref(v), 1, fn), "static shared memory")
    need = sm // (max_blocks + 1) + 1 - v.value - reserved
    return need if shared < need and v.value + need <= optin else shared


class Runtime:
    """Same surface as kforge.Runtime, over a directory written by build()."""

    def __init__(self, cache_dir, model, device=0, arch="sm_90a"):
        import torch
        torch.cuda.init()
        torch.zeros(1, device=f"cuda:{device}")
        idx = os.path.join(cache_dir, model, arch, "index.json")
        if not os.path.exists(idx):
            raise Error(f"no kernels for {model} on {arch} under {cache_dir}")
        self._dir = os.path.dirname(idx)
        with open(idx) as f:
            self._entries = json.load(f)["kernels"]
        self._fns = {}

    def _function(self, e):
        if e["id"] not in self._fns:
            with open(os.path.join(self._dir, e["object"]), "rb") as f:
                data = f.read()
            mod = ctypes.c_void_p()
            _check(_driver().cuModuleLoadData(ctypes.byref(mod), data), f"load {e['id']}")
            fn = ctypes.c_void_p()
            _check(_driver().cuModuleGetFunction(ctypes.byref(fn), mod, e["symbol"].encode()),
                   f"symbol {e['symbol']}")
            cap = _blocks_per_sm_cap(e["launch"])
            if cap:
                e["launch"]["shared_bytes"] = _capped_shared(fn, e["launch"]["shared_bytes"], cap)
            if e["launch"]["shared_bytes"] > 0:  # opt in (static shared memory counts too), as the runtime does
                _check(_driver().cuFuncSetAttribute(fn, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    e["launch"]["shared_bytes"]), f"shared memory {e['id']}")
            self._fns[e["id"]] = (mod, fn)
        return self._fns[e["id"]][1]

    def kernel(self, kind, rows):
        cands = sorted((e for e in self._entries if e["kind"] == kind), key=lambda e: e["width"])
        if not cands:
            raise Error(f"no kernel of kind '{kind}'")
        for e in cands:
            if e["width"] >= rows:
                return Kernel(e, self._function(e), rows)
        raise NoKernelError(f"{rows} rows exceed the largest width {cands[-1]['width']} of '{kind}'")


# ---- command line -------------------------------------------------------------
def main(argv):
    """kf_direct.py check|build [OUTDIR] [options] [models...]: compiles the
    models' kernels (default: every shipped model, sm_90a and sm_100a) and
    prints each one's registers, stack and spills; exits 1 when any has a
    stack frame or spills. Options make a tuning variant to time with
    scripts/bench-ab: --kinds k,... (only those), --overrides JSON ({kind:
    {PARAM: value}}), --flag F (an nvcc flag, repeatable), --templates DIR (a
    copy of templates/)."""
    import argparse
    global TEMPLATES
    ap = argparse.ArgumentParser(prog="kf_direct.py", description=main.__doc__.split(":", 1)[1])
    ap.add_argument("command", choices=["check", "build"])
    ap.add_argument("outdir", nargs="?", default="/tmp/kf-direct")
    ap.add_argument("models", nargs="*")
    ap.add_argument("--arch", default="sm_90a,sm_100a", help="comma-separated arches")
    ap.add_argument("--kinds", help="comma-separated kernel kinds (default: all)")
    ap.add_argument("--overrides", help='template parameters per kind, JSON: {"qkv_proj": {"LATE_SLOTS": 1}}')
    ap.add_argument("--flag", action="append", default=[], help="an extra nvcc flag, e.g. -DKF_GEMM_CHUNK=2")
    ap.add_argument("--templates", help="a templates directory to build from instead of templates/")
    a = ap.parse_args(argv[1:])
    if a.templates:
        TEMPLATES = os.path.abspath(a.templates)
    try:
        overrides = json.loads(a.overrides) if a.overrides else None
    except json.JSONDecodeError as e:
        print(f"kf_direct.py: --overrides is not JSON: {e}", file=sys.stderr)
        return 2
    models = a.models or sorted(os.path.join(ROOT, "models", f) for f in os.listdir(os.path.join(ROOT, "models"))
                                if f.endswith(".json"))
    try:
        res = build(models, a.arch.split(","), a.outdir, extra=a.flag, overrides=overrides,
                    kinds=a.kinds.split(",") if a.kinds else None)
    except Error as e:
        print(f"kf_direct.py: {e}", file=sys.stderr)
        return 2
    bad = 0
    for kid, r in sorted(res):
        flag = ""
        if r["spill_stores"] or r["spill_loads"] or r["stack"]:
            flag = "  <-- SPILL/STACK"
            bad += 1
        print(f"{kid:48s} regs {r['registers']:3d} stack {r['stack']:3d} spill {r['spill_stores']}/{r['spill_loads']}{flag}")
    print(f"{len(res)} kernels, {bad} with stack frame or spills")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
