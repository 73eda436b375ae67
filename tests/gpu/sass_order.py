#!/usr/bin/env python3
"""sass_order: what each shipped kernel does before griddepcontrol.wait, in the
machine code (SASS) ptxas emitted, against what its template may do there.

Every shipped kernel but the layer kinds (persistent: their phases wait on
counters, templates/kf_layer.cuh) is launched programmatically: it starts while the kernel
before it still runs, and waits (griddepcontrol.wait, ACQBULK in SASS) before
it touches what that kernel writes. The templates keep the order in their
source, but ptxas schedules the machine code: it treats ld.global.nc as a read
of memory nothing writes while the kernel runs, and has hoisted such loads
above the wait (a GEMM variant on sm_90a: its activation loads and matrix
instructions all ran ahead of it, notes/perf/journal.md v12). So this reads the
SASS. Before the first ACQBULK a kernel may issue:
  - the GEMMs (qkv_proj, o_proj, gate_up_proj, down_proj, and GLM-4.5's shared
    expert, shared_gate_up and shared_down): their weight copies (LDGSTS) and
    shared-memory reads, nothing else from global memory;
  - decode_attention: 32-bit loads (seq_lens, page-table entries), 128-bit
    loads on the read-only, non-allocating path (LDG.E.NA.128.CONSTANT, the
    older tokens' K and V through load_stream) and L2 prefetches (of older
    tokens' K and V: cp.async.bulk.prefetch.L2, which returns nothing);
  - the norms, rope_kv_write and the MoE kinds (router, moe_gate_up,
    moe_down, moe_combine: which experts to read comes from the router):
    no global load at all;
and no kernel stores, atomics or matrix instructions there.

Usage: sass_order.py CACHE            every sm_90 kernel a manifest of a kforge cache names
                                      (needs cuobjdump: the GPU machine)
       sass_order.py --sass FILE KIND a SASS listing saved earlier
Exit status 1 when a kernel breaks its rule (each named, with the
instructions), 0 otherwise.
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys

GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "shared_gate_up", "shared_down")
ANYWHERE_FORBIDDEN = re.compile(r"^(STG|ST|ATOM|ATOMG|RED|REDG|HMMA|HGMMA)\b")


def instructions(sass):
    """The opcodes with modifiers and operands of a cuobjdump -sass listing,
    predicates dropped, in program order."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out.append(re.sub(r"^@!?U?P[T0-9]+\s+", "", m.group(1)))
    return out


def allowed_early(kind, ins):
    """Whether instruction ins may run before the wait in a kernel of kind."""
    op = ins.split()[0]
    if ANYWHERE_FORBIDDEN.match(op):
        return False
    if not op.startswith("LDG") and not op.startswith("LD."):
        return True  # arithmetic, shared memory, cp.async copies (LDGSTS) ...
    if op.startswith("LDGSTS") or op.startswith("LDGDEPBAR"):  # cp.async and its commit
        return kind in GEMMS
    if kind == "decode_attention":
        parts = op.split(".")
        if not any(p in ("64", "128") for p in parts):
            return "STRONG" not in parts  # seq_lens, page-table entries
        return "NA" in parts and "CONSTANT" in parts  # older K and V
    return False


def check(kind, sass):
    """Problems (strings) of one kernel's SASS; empty when it keeps its rule."""
    ins = instructions(sass)
    waits = [i for i, s in enumerate(ins) if s.startswith("ACQBULK")]
    if not waits:
        return ["no griddepcontrol.wait (ACQBULK) in a programmatic kernel"]
    bad = [s for s in ins[:waits[0]] if not allowed_early(kind, s)]
    return [f"before the wait: {s}" for s in bad]


def kind_of(kernel_id):
    return kernel_id.split("/")[1]


def objects(cache):
    """(kernel id, object path) of every sm_90 kernel the cache's manifests
    name (older entries that no manifest names are not what a server runs)."""
    root = os.path.join(cache, "v1")
    for dp, _, fs in os.walk(os.path.join(root, "manifests")):
        for name in fs:
            if not name.endswith(".json"):
                continue
            with open(os.path.join(dp, name)) as f:
                manifest = json.load(f)
            for k in manifest["kernels"]:
                # a layer kernel (persistent, not launched programmatically):
                # its phases wait on counters, not on griddepcontrol
                if k.get("launch", {}).get("persistent"):
                    continue
                if re.search(r"/sm_9\d", k["id"]):
                    yield k["id"], os.path.join(root, k["object"])


def sass_of(obj):
    return subprocess.run(["cuobjdump", "-sass", obj], capture_output=True, text=True,
                          check=True).stdout


def main(argv):
    if len(argv) == 4 and argv[1] == "--sass":
        with open(argv[2]) as f:
            results = [(argv[2], check(argv[3], f.read()))]
    elif len(argv) == 2:
        found = sorted(objects(argv[1]))
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 4) as pool:
            listings = list(pool.map(sass_of, [obj for _, obj in found]))
        results = [(kid, check(kind_of(kid), sass)) for (kid, _), sass in zip(found, listings)]
        if not results:
            print(f"sass_order: no sm_90 objects under {argv[1]}", file=sys.stderr)
            return 2
    else:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    failed = [(k, p) for k, p in results if p]
    for kid, problems in failed:
        print(f"FAIL {kid}:")
        for p in problems[:8]:
            print(f"  {p}")
    print(f"sass_order: {len(results)} kernels, {len(failed)} with work ahead of the wait "
          "that their template does not allow")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
