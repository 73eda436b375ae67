"""kforge.tune: times the candidates `kforge tune` built and writes the
tuning file that `kforge build --tuning FILE` applies (docs/cli.md, "kforge
tune"). Runs on the GPU, with torch:

    python3 -m kforge.tune DIR [--out FILE] [--budget SECONDS] [--rounds N]

DIR is kforge tune's directory: plan.json names each unit (template, arch,
width, shape), its candidates (one manifest each in DIR/cache) and the
values the description builds today ("current"). For each unit whose
template has a recipe here, every built candidate is checked against a
torch reference on random inputs (outputs poisoned before each run; relative
error at most TOL) and timed as scripts/bench-kernels times a projection:
launches back to back in a CUDA graph, each on its own copy of the weights
(together larger than L2), median of the graph's replays; the candidates of
a unit are timed in turn, ROUNDS times, and each keeps its best round. A
unit's choice is its fastest correct candidate, unless the current values are
within HYSTERESIS of it: then the current values stay (a choice that only
noise separates is not worth a different kernel).

Results go to DIR/results.json as they are measured, by candidate and
device, so a run that stops (budget, error, interrupt) resumes where it
stopped. Templates without a recipe here are reported and left out of the
tuning file. The MoE kinds are timed on random routing (distinct experts
per row), their outputs checked where a row's choice puts them.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

TOL = 1e-2         # relative error (L2) against the reference, as the GPU tests use
HYSTERESIS = 0.01  # keep the current values within 1% of the fastest
L2_ROTATE = 3 * 60 * 2**20  # distinct weight bytes a graph pass reads (over the H100/H200 L2)
REPLAYS = 10
ROUNDS = 3


class TuneError(Exception):
    pass


def _torch():
    import torch  # noqa: PLC0415 (torch is needed only on the GPU machine)
    return torch


# ---- recipes: a template's operands and its reference -------------------------------------
class Case:
    """One unit's operands by argument name: `rotated` names the weights,
    given a copy of their own at each launch; `out_name` the output, of
    out_shape and out_dtype, checked through view(out) against ref(ops)
    (view picks what the kernel must write)."""

    def __init__(self, ops, rotated, out_name, out_shape, ref, out_dtype="bfloat16",
                 view=None):
        self.ops, self.rotated, self.out_name, self.out_shape = ops, rotated, out_name, out_shape
        self.ref, self.out_dtype = ref, out_dtype
        self.view = view or (lambda t: t)


def _randn(*shape, scale=1.0):
    torch = _torch()
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def _linear(x, w, bias=None):
    y = x.float() @ w.float().t()
    return y + bias.float() if bias is not None else y


def _recipe_skinny_gemm(shape, width, bias=False):
    n, k = shape["N"], shape["K"]
    ops = {"x": _randn(width, k), "w": _randn(n, k, scale=k ** -0.5)}
    if bias:
        ops["bias"] = _randn(n)
    return Case(ops, ("w",), "y", (width, n), lambda o: _linear(o["x"], o["w"], o.get("bias")))


def _silu_mul(y, inter):
    torch = _torch()
    return torch.nn.functional.silu(y[..., :inter]) * y[..., inter:]


def _recipe_gate_up_silu(shape, width):
    inter, k = shape["INTERMEDIATE"], shape["K"]
    ops = {"x": _randn(width, k), "w": _randn(2 * inter, k, scale=k ** -0.5)}
    return Case(ops, ("w",), "out", (width, inter),
                lambda o: _silu_mul(_linear(o["x"], o["w"]), inter))


def _routing(shape, width):
    """ids [W x TOPK] int32, distinct experts per row at random, and the
    slots: the distinct chosen experts, ascending (templates/moe.cuh)."""
    torch = _torch()
    experts, topk = shape["EXPERTS"], shape["TOPK"]
    ids = torch.stack([torch.randperm(experts, device="cuda")[:topk] for _ in range(width)]).int()
    slots = torch.unique(ids).tolist()  # sorted
    slot_of = {e: i for i, e in enumerate(slots)}
    # (slot, row) of every choice, what the kernels must write
    pairs = [(slot_of[int(ids[r, k])], r, k) for r in range(width) for k in range(topk)]
    return ids, slots, pairs


def _recipe_moe_gate_up(shape, width):
    torch = _torch()
    hidden, inter, experts, topk = (shape[n] for n in ("HIDDEN", "INTERMEDIATE", "EXPERTS", "TOPK"))
    ids, slots, pairs = _routing(shape, width)
    ops = {"x": _randn(width, hidden), "w": _randn(experts, 2 * inter, hidden, scale=hidden ** -0.5),
           "ids": ids}
    s_idx = torch.tensor([p[0] for p in pairs], device="cuda")
    r_idx = torch.tensor([p[1] for p in pairs], device="cuda")

    def ref(o):
        act = torch.stack([_silu_mul(_linear(o["x"], o["w"][e]), inter) for e in slots])
        return act[s_idx, r_idx]
    return Case(ops, ("w",), "act", (min(width * topk, experts), width, inter), ref,
                view=lambda t: t[s_idx, r_idx])


def _recipe_moe_down(shape, width):
    torch = _torch()
    hidden, inter, experts, topk = (shape[n] for n in ("HIDDEN", "INTERMEDIATE", "EXPERTS", "TOPK"))
    ids, slots, pairs = _routing(shape, width)
    nslots = min(width * topk, experts)
    ops = {"act": _randn(nslots, width, inter), "w": _randn(experts, hidden, inter,
                                                           scale=inter ** -0.5), "ids": ids}

    def ref(o):
        y = torch.empty(width, topk, hidden, device="cuda")
        for s_, r, k in pairs:
            y[r, k] = _linear(o["act"][s_, r][None], o["w"][slots[s_]])[0]
        return y
    return Case(ops, ("w",), "y", (width, topk, hidden), ref, out_dtype="float32")


RECIPES = {
    "skinny_gemm": _recipe_skinny_gemm,
    "skinny_gemm_bias": lambda shape, width: _recipe_skinny_gemm(shape, width, bias=True),
    "gate_up_silu": _recipe_gate_up_silu,
    "moe_gate_up": _recipe_moe_gate_up,
    "moe_down": _recipe_moe_down,
}


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


# ---- one unit ----------------------------------------------------------------------------
class Candidate:
    def __init__(self, plan_entry, kernel):
        self.model = plan_entry["model"]
        self.params = plan_entry["params"]
        self.kernel = kernel
        self.us = None
        self.err = None
        self.why = None


def _call(kernel, named, stream):
    args = [named[name] for name, _ in kernel.params if name != "rows"]
    kernel(*args, stream=stream)


def _poisoned(case):
    torch = _torch()
    out = torch.empty(*case.out_shape, dtype=getattr(torch, case.out_dtype), device="cuda")
    if case.out_dtype == "bfloat16":
        out.view(torch.int16).fill_(0x7FC1)  # a bf16 NaN: anything left unwritten shows
    else:
        out.fill_(float("nan"))
    return out


def time_candidates(cands, case, rounds):
    """Each candidate's best-of-rounds microseconds per launch (set on .us)."""
    torch = _torch()
    ops = case.ops
    wbytes = sum(ops[r].numel() * ops[r].element_size() for r in case.rotated)
    copies = max(2, min(64, math.ceil(L2_ROTATE / max(wbytes, 1))))
    rot = {r: [ops[r]] + [ops[r].clone() for _ in range(copies - 1)] for r in case.rotated}
    out = _poisoned(case)
    reps = copies * max(1, math.ceil(24 / copies))
    stream = torch.cuda.Stream()
    graphs = {}
    for c in cands:
        def body(i, c=c):
            named = dict(ops)
            for r in case.rotated:
                named[r] = rot[r][i % copies]
            named[case.out_name] = out
            _call(c.kernel, named, stream.cuda_stream)
        try:
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for i in range(3):
                    body(i)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=stream):
                for i in range(reps):
                    body(i)
            graphs[c.model] = g
        except Exception as e:  # noqa: BLE001 (a candidate that cannot be timed is left out)
            c.why = f"not timed: {str(e).splitlines()[0]}"
            torch.cuda.synchronize()
    timed = [c for c in cands if c.model in graphs]
    best = {c.model: float("inf") for c in timed}
    for _ in range(rounds):
        for c in timed:
            g = graphs[c.model]
            g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(REPLAYS):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) * 1e3 / reps)
            best[c.model] = min(best[c.model], statistics.median(times))
    for c in timed:
        c.us = best[c.model]
    del graphs, rot
    torch.cuda.empty_cache()


def check_candidates(cands, case):
    """Sets .err (relative error against the reference, inf for poison left)."""
    torch = _torch()
    want = case.ref(case.ops)
    for c in cands:
        out = _poisoned(case)
        named = dict(case.ops)
        named[case.out_name] = out
        _call(c.kernel, named, None)
        torch.cuda.synchronize()
        got = case.view(out)
        c.err = float("inf") if got.isnan().any().item() else rel_err(got, want)


def choose(unit, measured):
    """(params, us, current_us) of the unit's choice from {model: result}."""
    ok = [(r["us"], r["params"]) for r in measured.values() if r["ok"]]
    if not ok:
        return None
    best_us, best = min(ok, key=lambda t: t[0])
    current = unit["current"]
    cur = [r for r in measured.values() if r["ok"] and r["params"] == current]
    cur_us = cur[0]["us"] if cur else None
    if cur_us is not None and cur_us <= best_us * (1 + HYSTERESIS):
        return current, cur_us, cur_us
    return best, best_us, cur_us


# ---- the run -----------------------------------------------------------------------------
def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        if default is not None:
            return default
        raise


def write_json(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def unit_label(u):
    shape = " ".join(f"{k}={v}" for k, v in u["shape"].items())
    return f"{u['template']} {shape} W={u['W']} {u['arch']}"


def params_label(p):
    return ",".join(f"{k}={v}" for k, v in p.items())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kforge.tune",
                                 description="time kforge tune's candidates on this GPU and "
                                             "write the tuning file")
    ap.add_argument("dir", help="kforge tune's directory (plan.json, cache/)")
    ap.add_argument("--out", help="the tuning file (default DIR/tuning.json)")
    ap.add_argument("--budget", type=float, help="stop timing after this many seconds")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help="timing rounds per unit")
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args(argv)
    plan_path = os.path.join(a.dir, "plan.json")
    try:
        plan = load_json(plan_path)
    except (OSError, ValueError) as e:
        print(f"{plan_path}: error: {e} (run kforge tune --build-only first)", file=sys.stderr)
        return 2
    if plan.get("kforge_tune_plan") != 1:
        print(f"{plan_path}: error: not a plan of this kforge tune", file=sys.stderr)
        return 2
    try:
        torch = _torch()
    except ImportError as e:
        print(f"kforge tune: the timer needs torch with CUDA on the GPU machine ({e}); the "
              f"candidates in {a.dir} stay built", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print(f"kforge tune: no GPU that torch can use here; time {a.dir} on the GPU machine",
              file=sys.stderr)
        return 1
    from .runtime import Error, Runtime  # noqa: PLC0415
    torch.cuda.set_device(a.device)
    device = torch.cuda.get_device_name(a.device)
    cache = os.path.join(a.dir, "cache")
    res_path = os.path.join(a.dir, "results.json")
    results = load_json(res_path, {})
    out_path = a.out or os.path.join(a.dir, "tuning.json")
    start = time.monotonic()
    units = plan["units"]
    major, minor = torch.cuda.get_device_capability(a.device)
    here = f"sm_{major}{minor}"  # sm_90a, sm_90 and sm_90f run here (sm_100a does not)
    entries, skipped, untimed, elsewhere = [], set(), 0, set()
    for i, u in enumerate(units):
        label = f"[{i + 1}/{len(units)}] {unit_label(u)}"
        recipe = RECIPES.get(u["template"])
        if not (u["arch"] == here or u["arch"][:len(here) + 1] in (here + "a", here + "f")):
            elsewhere.add(u["arch"])
            continue
        if recipe is None:
            skipped.add(u["template"])
            continue
        built = [c for c in u["candidates"] if c["built"]]
        todo = [c for c in built if f"{device}|{c['model']}" not in results]
        if todo and a.budget is not None and time.monotonic() - start > a.budget:
            untimed += 1
            continue
        if todo:
            torch.manual_seed(1000 + i)
            shape = u["shape"]
            case = recipe(shape, u["W"])
            cands = []
            for c in todo:
                try:
                    rt = Runtime(cache, c["model"], device=a.device)
                    cands.append(Candidate(c, rt.kernel("k", u["W"])))
                except Error as e:
                    results[f"{device}|{c['model']}"] = {"params": c["params"], "ok": False,
                                                         "us": None, "why": str(e)}
            check_candidates(cands, case)
            good = [c for c in cands if c.err <= TOL]
            time_candidates(good, case, a.rounds)
            for c in cands:
                ok = c.err <= TOL and c.us is not None
                results[f"{device}|{c.model}"] = {"params": c.params, "ok": ok, "us": c.us,
                                                  "err": c.err}
                if c.why or c.err > TOL:
                    results[f"{device}|{c.model}"]["why"] = c.why or f"relative error {c.err:.3g}"
                    print(f"{label}: {c.model} ({params_label(c.params)}): "
                          f"{c.why or f'relative error {c.err:.3g} over {TOL}'}", file=sys.stderr)
            write_json(res_path, results)
            del case, cands
            torch.cuda.empty_cache()
        measured = {c["model"]: results[f"{device}|{c['model']}"] for c in built
                    if f"{device}|{c['model']}" in results}
        pick = choose(u, measured)
        if pick is None:
            print(f"{label}: no candidate computed the right result", file=sys.stderr)
            continue
        params, us, cur_us = pick
        # candidate 0 takes each knob's first candidate: the families' defaults
        first = measured.get(u["candidates"][0]["model"])
        first_us = first["us"] if first and first["ok"] else None
        cur = f", current {params_label(u['current'])} {cur_us:.2f} us" if cur_us else ""
        dflt = f", first {first_us:.2f} us" if first_us else ""
        print(f"{label}: {params_label(params)} {us:.2f} us ({len(measured)} candidates{cur}{dflt})",
              flush=True)
        entries.append({"template": u["template"], "arch": u["arch"], "W": u["W"],
                        "shape": u["shape"], "params": params,
                        "measured": {"us": round(us, 3),
                                     "current_us": round(cur_us, 3) if cur_us else None,
                                     "first_us": round(first_us, 3) if first_us else None,
                                     "candidates": len(measured), "kernels": u["kernels"]}})
    write_json(out_path, {"kforge_tuning": 1, "device": device, "entries": entries})
    for t in sorted(skipped):
        print(f"kforge tune: {t}: no timing recipe for this template; its kernels keep their "
              f"description's values", file=sys.stderr)
    for arch in sorted(elsewhere):
        print(f"kforge tune: {arch}: not this device's arch ({here}, {device}); its units are "
              f"timed on such a device", file=sys.stderr)
    if untimed:
        print(f"kforge tune: the budget ran out with {untimed} units untimed: run again to go on",
              file=sys.stderr)
    print(f"kforge tune: {len(entries)} entries for {device} in {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
