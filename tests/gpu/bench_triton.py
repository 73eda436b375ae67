#!/usr/bin/env python3
"""The Triton anchor of scripts/bench-startup: N small distinct @triton.jit
kernels are compiled once into a fresh TRITON_CACHE_DIR (warm-up, in
parallel processes), then a fresh process times, from that warm on-disk
cache: import torch, import triton, CUDA initialisation, and the first call of
each kernel (cache lookup + module load + launch), minus a second round of
calls (launch alone). RUN ON A GPU MACHINE.

Usage: bench_triton.py N [N...]     prints "result triton ..." lines."""
import json
import os
import subprocess
import sys
import tempfile
import time

KERNEL = '''
@triton.jit
def k{i:04d}(x_ptr, rows):
    pid = tl.program_id(0)
    v = tl.load(x_ptr + pid)
    tl.store(x_ptr + pid, v + {i}.0)
'''

TIMED = r'''
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import triton
t2 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import kfbench_kernels as m
t3 = time.perf_counter()
x = torch.zeros(64, device="cuda")
torch.cuda.synchronize()
t4 = time.perf_counter()
ks = [getattr(m, f"k{i:04d}") for i in range(int(sys.argv[2]))]
ks[0][(1,)](x, 1)
torch.cuda.synchronize()
t5 = time.perf_counter()
for k in ks[1:]:
    k[(1,)](x, 1)
torch.cuda.synchronize()
t6 = time.perf_counter()
for k in ks[1:]:
    k[(1,)](x, 1)
torch.cuda.synchronize()
t7 = time.perf_counter()
print(json.dumps({"import_torch_ms": 1e3*(t1-t0), "import_triton_ms": 1e3*(t2-t1),
  "define_ms": 1e3*(t3-t2), "cuda_init_ms": 1e3*(t4-t3), "first_kernel_ms": 1e3*(t5-t4),
  "rest_first_ms": 1e3*(t6-t5), "rest_warm_ms": 1e3*(t7-t6)}))
'''

WARM = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
import kfbench_kernels as m
x = torch.zeros(64, device="cuda")
for i in range(int(sys.argv[2]), int(sys.argv[3])):
    getattr(m, f"k{i:04d}")[(1,)](x, 1)
torch.cuda.synchronize()
'''


def count_files(d):
    return sum(len(f) for _, _, f in os.walk(d))


def run(n, procs=8):
    work = tempfile.mkdtemp(prefix=f"kftriton{n}-")
    with open(os.path.join(work, "kfbench_kernels.py"), "w") as f:
        f.write("import triton\nimport triton.language as tl\n")
        for i in range(n):
            f.write(KERNEL.format(i=i))
    env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(work, "cache"))
    t = time.perf_counter()
    step = (n + procs - 1) // procs
    ps = [subprocess.Popen([sys.executable, "-c", WARM, work, str(a), str(min(n, a + step))],
                           env=env) for a in range(0, n, step)]
    if any(p.wait() != 0 for p in ps):
        sys.exit("bench_triton: warm-up failed")
    warm_s = time.perf_counter() - t
    files = count_files(env["TRITON_CACHE_DIR"])
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", TIMED, work, str(n)], env=env,
                             check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    if count_files(env["TRITON_CACHE_DIR"]) != files:
        print(f"bench_triton: warning: the timed runs compiled (cache grew) for n={n}")
    runs.sort(key=lambda r: r["rest_first_ms"])
    r = runs[len(runs) // 2]
    load_ms = r["first_kernel_ms"] + r["rest_first_ms"] - r["rest_warm_ms"] * n / max(n - 1, 1)
    print(f"result triton n={n} warm_compile_s={warm_s:.1f} import_torch_ms={r['import_torch_ms']:.1f} "
          f"import_triton_ms={r['import_triton_ms']:.1f} define_ms={r['define_ms']:.1f} "
          f"cuda_init_ms={r['cuda_init_ms']:.1f} first_kernel_ms={r['first_kernel_ms']:.2f} "
          f"load_all_ms={load_ms:.2f} per_kernel_us={1e3 * load_ms / n:.1f} "
          f"launch_only_ms={r['rest_warm_ms']:.2f}", flush=True)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        run(int(arg))
