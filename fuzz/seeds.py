#!/usr/bin/env python3
"""fuzz/seeds.py: writes the seed corpora, fuzz/corpus/<target>/, from the
shipped files (models/, models/families/, templates/), the test fixtures
(tests/fixtures) and the kinds of bad input tests/cli/test_bad_input.py and
test_hostile_limits.py try. Run it again after those change; the files it
writes are committed, so scripts/fuzz needs no Python."""
import glob
import json
import os
import shutil

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(SRC, "fuzz", "corpus")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write_all(target, seeds):
    d = os.path.join(OUT, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def description_seeds():
    seeds = {}
    fams = {os.path.basename(p)[:-5]: read(p) for p in glob.glob(f"{SRC}/models/families/*.json")}
    for p in sorted(glob.glob(f"{SRC}/models/*.json")):
        base = os.path.basename(p)[:-5]
        text = read(p)
        seeds[f"shipped-{base}"] = text
        fam = json.loads(text).get("family")
        if fam in fams:
            seeds[f"shipped-{base}-with-family"] = text + b"\n#family\n" + fams[fam]
            tmpl = json.loads(fams[fam])["kernels"][0]["template"]
            seeds[f"shipped-{base}-with-family-and-schema"] = (
                text + b"\n#family\n" + fams[fam] + b"\n#schema\n" +
                read(f"{SRC}/templates/{tmpl}.json"))
    for p in sorted(glob.glob(f"{SRC}/tests/fixtures/models/*.json")):
        d = json.loads(read(p))
        d.pop("include_dirs", None)
        text = json.dumps(d, indent=1).encode()
        seeds[f"fixture-{os.path.basename(p)[:-5]}"] = text
        for k in d.get("kernels", [])[:1]:
            s = f"{SRC}/tests/fixtures/templates/{k['template']}.json"
            if os.path.exists(s):
                seeds[f"fixture-{os.path.basename(p)[:-5]}-with-schema"] = (
                    text + b"\n#family\n{}\n#schema\n" + read(s))
    good = {"name": "fz", "shape": {"hidden_size": 256, "rms_norm_eps": 1e-6, "dtype": "bf16"},
            "widths": [1], "arches": ["sm_90a"],
            "kernels": [{"kind": "norm", "template": "add_rmsnorm",
                         "params": {"HIDDEN": "hidden_size", "EPS": "rms_norm_eps"}}]}

    def bad(label, **change):
        d = json.loads(json.dumps(good))
        d.update(change)
        seeds[f"bad-{label}"] = json.dumps(d)

    bad("deep-parens", kernels=[{"kind": "norm", "template": "add_rmsnorm",
                                 "params": {"HIDDEN": "(" * 70 + "1" + ")" * 70, "EPS": 0}}])
    bad("deep-minus", kernels=[{"kind": "norm", "template": "add_rmsnorm",
                                "params": {"HIDDEN": "-" * 70 + "8", "EPS": 0}}])
    bad("widths", widths=[0, 1, 1, 300, "x"])
    bad("arches", arches=["sm_90a", "gfx942:xnack-:xnack+", "sm_1"])
    bad("name", name="../x")
    bad("family-unknown", family="nope")
    bad("template-unknown", kernels=[{"kind": "a", "template": "nope"}])
    bad("params-type", kernels=[{"kind": "norm", "template": "add_rmsnorm", "params": []}])
    seeds["bad-nul"] = json.dumps(good).replace('"fz"', '"f\\u0000z"')
    seeds["bad-duplicate"] = json.dumps(good).replace('"widths"', '"name": "y", "widths"')
    seeds["bad-syntax"] = json.dumps(good)[:-3] + ",}"
    seeds["bad-json-deep"] = '{"name": ' + "[" * 600 + "]" * 600 + "}"
    return seeds


def expr_seeds():
    seeds = {}
    exprs = set()
    for p in glob.glob(f"{SRC}/templates/*.json") + glob.glob(f"{SRC}/tests/fixtures/templates/*.json"):
        launch = json.loads(read(p)).get("launch", {})
        for v in launch.values():
            for e in v if isinstance(v, list) else [v]:
                if isinstance(e, str):
                    exprs.add(e)
    for p in glob.glob(f"{SRC}/models/families/*.json") + glob.glob(f"{SRC}/tests/fixtures/models/*.json"):
        for k in json.loads(read(p)).get("kernels", []):
            for v in k.get("params", {}).values():
                if isinstance(v, str):
                    exprs.add(v)
    exprs |= {"hidden_size +", "(hidden_size * 2", "hidden_size ** 2", "hidden_size / 0",
              "big + 1", "small / neg", "small % neg", "-small", "eps * huge * huge",
              "1e308 * 10", "0x10", "1.5e-3 * W", "(" * 70 + "1" + ")" * 70, "-" * 70 + "1"}
    for i, e in enumerate(sorted(exprs)):
        seeds[f"e{i:03d}"] = e
    return seeds


def schema_seeds():
    seeds = {}
    for p in sorted(glob.glob(f"{SRC}/templates/*.json")):
        seeds[f"shipped-{os.path.basename(p)[:-5]}"] = read(p)
    for p in sorted(glob.glob(f"{SRC}/tests/fixtures/templates/*.json")):
        seeds[f"fixture-{os.path.basename(p)[:-5]}"] = read(p)
    d = json.loads(read(f"{SRC}/templates/add_rmsnorm.json"))
    d["params"]["HIDDEN"].update({"multiple_of": 0, "one_of": []})
    d["launch"]["block"] = [1e9, 1, 1]
    d["args"][0]["name"] = "x; int y"
    d["entry"] = "kf::f<1>(); //"
    seeds["bad-constraints"] = json.dumps(d)
    return seeds


def import_hf_seeds():
    seeds = {}
    for p in sorted(glob.glob(f"{SRC}/tests/fixtures/hf/*.json")):
        seeds[os.path.basename(p)[:-5]] = read(p)
    cfg = json.loads(read(f"{SRC}/tests/fixtures/hf/llama-3.1-8b.config.json"))
    cfg.update({"attention_bias": True, "hidden_act": "gelu", "sliding_window": 4096,
                "torch_dtype": "float16", "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
                "num_attention_heads": 0})
    seeds["bad-llama"] = json.dumps(cfg)
    return seeds


def manifest_seeds():
    key = "0123456789abcdef0123456789abcdef"
    params = [{"name": "x", "type": "const kf_bf16*", "size": 8}, {"name": "n", "type": "int", "size": 4}]

    def kernel(kind, w, **extra):
        k = {"id": f"m/{kind}/w{w}/sm_90a", "kind": kind, "width": w, "key": key,
             "object": f"objects/01/{key}/object.cubin", "meta": f"objects/01/{key}/meta.json",
             "checksum": key, "size": 6352, "symbol": f"kf_m_{kind}_w{w}",
             "launch": {"grid": [w, 1, 1], "block": [256, 1, 1], "shared_bytes": 0}}
        k.update(extra)
        return k

    m = {"format": 1, "model": "m", "arch": "sm_90a", "backend": "cuda",
         "signatures": {"norm": {"params": params}},
         "kernels": [kernel("norm", 1), kernel("norm", 2),
                     kernel("own", 1, params=params,
                            launch={"grid": [4, 1, 1], "block": [128, 1, 1], "shared_bytes": 1024,
                                    "programmatic": True, "cooperative": True,
                                    "cluster": [2, 1, 1], "one_wave": True,
                                    "max_blocks_per_sm": 2})]}
    seeds = {"good": json.dumps(m, indent=1)}
    hip = dict(m, arch="gfx942", backend="hip")
    seeds["hip"] = json.dumps(hip)
    bad = json.loads(json.dumps(m))
    bad["kernels"][0]["object"] = "../../etc/passwd"
    bad["kernels"][1]["id"] = bad["kernels"][0]["id"]
    seeds["bad-paths-ids"] = json.dumps(bad)
    seeds["bad-format"] = json.dumps(dict(m, format=99))
    seeds["signatures-last"] = json.dumps({k: m[k] for k in ("format", "model", "arch", "backend",
                                                             "kernels", "signatures")})
    return seeds


def meta_seeds():
    key = "0123456789abcdef0123456789abcdef"
    m = {"format": 1, "key": key, "kernel_id": "m/norm/w1/sm_90a", "object": "object.cubin",
         "checksum": "bbd65d5b1bcee3b5f25e5e8d6d2b1b5c", "size": 6,
         "command": ["nvcc", "-arch=sm_90a", "-c", "x.cu"], "compiler_output": "ptxas info",
         "compile_seconds": 0.84,
         "resources": {"registers": 32, "stack_bytes": 0, "spill_stores": 0, "spill_loads": 0,
                       "shared_bytes": 0},
         "inputs": [{"tag": "scheme", "name": "", "hash": "0123456789abcdef"},
                    {"tag": "param", "name": "W", "hash": "0123456789abcdef", "value": "1"}]}
    return {"good": json.dumps(m, indent=1),
            "bad-object": json.dumps(dict(m, object="..")),
            "bad-resources": json.dumps(dict(m, resources={"registers": -1})),
            "bad-format": json.dumps(dict(m, format=0))}


def deps_seeds():
    raw = "00112233445566778899aabbccddeeff"
    rec = {"format": 1, "source_raw": raw, "source_tokens": raw,
           "files": [{"path": "@T@/h.cuh", "name": "h.cuh", "tokens": raw, "size": 56,
                      "mtime_ns": "0"}],
           "absent": ["@T@/missing.cuh"]}
    return {"record": json.dumps(rec),
            "stale": json.dumps(dict(rec, files=[dict(rec["files"][0], size=1)])),
            "absent-present": json.dumps(dict(rec, absent=["@T@/h.cuh"])),
            "empty": json.dumps(dict(rec, files=[], absent=[]))}


def shared_seeds():
    tokens = "00112233445566778899aabbccddeeff"
    body = {"files": [{"name": "@templates/h.cuh", "tokens": tokens}],
            "absent": ["@templates/missing.cuh", "@src/h.cuh", "@abs/usr/include/nothing.h"]}
    return {"closure": json.dumps(body),
            "outside": json.dumps({"files": [{"name": "@templates/../../etc/hostname",
                                              "tokens": tokens}], "absent": []}),
            "unknown-label": json.dumps({"files": [], "absent": ["@inc7/x.h"]}),
            "present-absent": json.dumps({"files": [], "absent": ["@templates/h.cuh"]}),
            "empty": json.dumps({"files": [], "absent": []})}


def code_object_seeds():
    """A bundle of a host entry and two gfx entries (the ELFs stand-ins),
    and llvm-readelf's rendering of a metadata note of two kernels."""
    import struct
    entries = [("host-x86_64-unknown-linux", b""),
               ("hipv4-amdgcn-amd-amdhsa--gfx908", b"\x7fELF-908"),
               ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", b"\x7fELF-90a")]
    header = 24 + 8 + sum(24 + len(i) for i, _ in entries)
    head, body, at = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries)), b"", header
    for ident, payload in entries:
        head += struct.pack("<QQQ", at, len(payload), len(ident)) + ident.encode()
        body += payload
        at += len(payload)
    kernel = ("  - .agpr_count:     4\n    .group_segment_fixed_size: 96\n"
              "    .name:           {}\n    .private_segment_fixed_size: 8\n"
              "    .sgpr_count:     33\n    .sgpr_spill_count: 2\n    .vgpr_count:     77\n"
              "    .vgpr_spill_count: 3\n    .wavefront_size: 64\n")
    notes = ("Displaying notes found in: .note\n    AMDGPU Metadata:\n        ---\n"
             "amdhsa.kernels:\n" + kernel.format("kf_b") + kernel.format("kf_a") +
             "amdhsa.target:   amdgcn-amd-amdhsa--gfx90a\n...\n")
    return {"bundle": head + body, "elf": b"\x7fELF\x02\x01\x01", "notes": notes}


def remote_record_seeds():
    key, sha = "0123456789abcdef0123456789abcdef", "ab" * 32
    entry = {"format": 1, "type": "kforge-entry", "key": key, "object": "object.cubin",
             "object_sha256": sha, "object_size": 4096, "checksum": "cd" * 16,
             "meta_sha256": sha, "meta_size": 900}
    signed = dict(entry, signature={"public_key": "37" * 32, "ed25519": "ef" * 64})
    manifest = {"format": 1, "type": "kforge-manifest", "model": "m", "arch": "sm_90a",
                "sha256": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "size": 2}
    return {"entry": json.dumps(entry), "entry-signed": json.dumps(signed),
            "entry-other-key": json.dumps(dict(entry, key="f" * 32)),
            "manifest": json.dumps(manifest),
            "manifest-signed": json.dumps(dict(manifest, signature=signed["signature"])),
            "empty": "", "not-json": "{\"key\": "}


if __name__ == "__main__":
    write_all("description", description_seeds())
    write_all("expr", expr_seeds())
    write_all("schema", schema_seeds())
    write_all("import-hf", import_hf_seeds())
    write_all("manifest", manifest_seeds())
    write_all("meta", meta_seeds())
    write_all("deps", deps_seeds())
    write_all("code-object", code_object_seeds())
    write_all("remote-record", remote_record_seeds())
    write_all("shared", shared_seeds())
