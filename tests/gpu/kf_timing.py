"""Timing on the GPU, shared by scripts/bench-kernels, scripts/bench-ab and
the experiments in bench/probes: CUDA-graph replays, waiting out the
driver's scrub of freed memory, and the read probe (a read-only kernel over
rotated copies, and the same read launched programmatically behind a
dependent word) that gives the device's read ceiling and what a launch of a
given size can reach.

The read probe is a measuring instrument, not a kforge kernel: its source is
here, compiled with nvcc for the GPU at hand and launched through the CUDA
driver API (ctypes): compile_cubin, load_module, launch.
"""
import ctypes
import math
import os
import statistics
import subprocess
import tempfile
import time

import torch

NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


class Error(Exception):
    pass


# ---- the CUDA driver (ctypes) ----------------------------------------------------------
_cuda = None
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


def driver():
    """libcuda, loaded once; torch's primary context must be current (any
    CUDA tensor made it so) before the first call that needs a context."""
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
    return _cuda


def check(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        driver().cuGetErrorString(rc, ctypes.byref(s))
        raise Error(f"{what}: CUDA error {rc} ({s.value.decode() if s.value else '?'})")


def compile_cubin(src, arch=None, flags=()):
    """The cubin (bytes) of CUDA source src for arch (default: this GPU's)."""
    if arch is None:
        cc = torch.cuda.get_device_capability()
        arch = f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory(prefix="kf-timing-") as d:
        cu, cubin = os.path.join(d, "probe.cu"), os.path.join(d, "probe.cubin")
        with open(cu, "w") as f:
            f.write(src)
        r = subprocess.run([NVCC, "-std=c++17", "-O3", f"-gencode=arch=compute_{arch[3:]},code={arch}",
                            "-cubin", *flags, "-o", cubin, cu], capture_output=True, text=True)
        if r.returncode != 0:
            raise Error(f"nvcc failed:\n{r.stderr}")
        with open(cubin, "rb") as f:
            return f.read()


def load_module(image, names, max_shared=0):
    """(module, {name: function}) of a cubin; each function allowed
    max_shared bytes of dynamic shared memory. Keep the module while the
    functions are in use."""
    torch.zeros(1, device="cuda")  # torch's primary context, current for the driver calls
    mod = ctypes.c_void_p()
    check(driver().cuModuleLoadData(ctypes.byref(mod), image), "load the module")
    fns = {}
    for name in names:
        fn = ctypes.c_void_p()
        check(driver().cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()), name)
        if max_shared:
            check(driver().cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_shared),
                  f"{name}: shared memory")
        fns[name] = fn
    return mod, fns


class LaunchAttr(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte value
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttr)), ("numAttrs", ctypes.c_uint)]


def launch(fn, grid, block, shared, vals, stream=None, programmatic=False, what="launch"):
    """Launches fn with the ctypes values vals on stream (default: torch's
    current stream). grid, block: 3 dimensions each. programmatic: with
    programmatic stream serialisation, as the kforge runtime launches a
    programmatic kernel: it may start while the kernel before it finishes."""
    ptrs = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
    s = stream if stream is not None else torch.cuda.current_stream()
    handle = ctypes.c_void_p(s.cuda_stream if hasattr(s, "cuda_stream") else int(s))
    if programmatic:
        attr = LaunchAttr(id=_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        attr.value[0] = 1
        cfg = LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, handle,
                           ctypes.pointer(attr), 1)
        check(driver().cuLaunchKernelEx(ctypes.byref(cfg), fn, ptrs, None), what)
        return
    check(driver().cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, handle,
                                  ptrs, None), what)


L2_BYTES = 60 * 2**20
ROTATE_BYTES = 3 * L2_BYTES  # each timed pass reads at least this much distinct data

PROBE_SRC = r"""
#include <stdint.h>
extern "C" __global__ void kf_bench_read(const uint4 *p, long long n, unsigned *sink) {
  unsigned acc = 0;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
          d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) { uint4 a = __ldcs(p + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}
// kf_bench_dep_read: a programmatic launch that reads n 16-byte words
// independent of the kernel before and combines them with one word that
// kernel wrote, as simply as that can be done. Each block owns a contiguous
// share; before griddepcontrol.wait it releases the next launch and copies
// up to `hold` words of its share into shared memory (cp.async: held on
// chip, as a kernel must hold what it reads before its dependent input
// arrives); after the wait it reads the dependent word, streams the rest of
// its share, folds in what it held and writes one word for the next launch.
extern "C" __global__ void kf_bench_dep_read(const uint4 *p, long long n, const unsigned *dep_in,
                                             unsigned *dep_out, int hold) {
  extern __shared__ uint4 held[];
  __shared__ unsigned warp_acc[32];
  const long long per = (n + gridDim.x - 1) / gridDim.x;
  const long long b0 = (long long)blockIdx.x * per;
  const long long b1 = b0 + per < n ? b0 + per : n;
  const long long nh = b1 - b0 < hold ? (b1 > b0 ? b1 - b0 : 0) : hold;
  asm volatile("griddepcontrol.launch_dependents;");
  for (long long i = threadIdx.x; i < nh; i += blockDim.x) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(held + i);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(p + b0 + i) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned acc = *(volatile const unsigned *)(dep_in + blockIdx.x);
  const long long st = blockDim.x;
  long long i = b0 + nh + threadIdx.x;
  for (; i + 3 * st < b1; i += 4 * st) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + st), c = __ldcs(p + i + 2 * st),
          d = __ldcs(p + i + 3 * st);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < b1; i += st) { uint4 a = __ldcs(p + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  for (long long k = threadIdx.x; k < nh; k += blockDim.x) {
    const uint4 a = held[k];
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) acc ^= warp_acc[w];
    dep_out[blockIdx.x] = acc;
  }
}
extern "C" __global__ void kf_bench_empty(int x) { (void)x; }
"""


# ---- timing --------------------------------------------------------------------------
def time_eager(body, reps, rounds=5):
    """Seconds per call of body(i) called back to back from Python on the
    current stream (launch cost included); median over rounds of 4 * reps."""
    for i in range(min(reps, 3)):
        body(i)
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(4 * reps):
            body(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / (4 * reps))
    return statistics.median(times)


def time_graph(body, reps, replays=15):
    """Seconds per call of body(i) (i = 0..reps-1), captured in one CUDA graph
    and replayed; median over replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(min(reps, 3)):
            body(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(reps):
            body(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / reps)
    del g
    return statistics.median(times)


# The driver zeroes the video memory handed back to it in the background,
# about 0.5 TiB/s on the H200, and every read on the GPU runs about 11%
# slower while it does: 30 ms after freeing 16 GiB, 125 ms after 64
# (notes/perf/journal.md, v22 run 3). Timing inside that spell reads low: v21's
# slow trials ran in such spells (runs 5 and 8).
SCRUB_BYTES_PER_S = 0.4e12  # a margin under the 0.55 TB/s measured


def release_memory():
    """Hand torch's cached blocks back to the driver, then wait out the
    driver's zeroing of them before anything is timed."""
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    freed = before - torch.cuda.memory_reserved()
    if freed > 0:
        time.sleep(freed / SCRUB_BYTES_PER_S + 0.005)


def copies_for(nbytes, cap=64):
    return max(2, min(cap, math.ceil(ROTATE_BYTES / max(nbytes, 1))))


# ---- the read probe and the ceilings ------------------------------------------------------
class Probe:
    """The read probe (PROBE_SRC) compiled for this GPU, or the cubin named
    by KF_BENCH_PROBE_CUBIN (prebuilt elsewhere)."""

    def __init__(self):
        path = os.environ.get("KF_BENCH_PROBE_CUBIN")
        if path:
            with open(path, "rb") as f:
                image = f.read()
        else:
            image = compile_cubin(PROBE_SRC)
        self.mod, fns = load_module(image, ["kf_bench_read", "kf_bench_empty", "kf_bench_dep_read"])
        self.read_fn, self.empty_fn, self.dep_fn = (fns["kf_bench_read"], fns["kf_bench_empty"],
                                                    fns["kf_bench_dep_read"])
        check(driver().cuFuncSetAttribute(self.dep_fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          max(h for _, _, h in DEP_SHAPES)), "dep smem")
        self.sm = torch.cuda.get_device_properties(0).multi_processor_count

    def read(self, buf, sink):
        launch(self.read_fn, (self.sm * 4, 1, 1), (512, 1, 1), 0,
               [ctypes.c_void_p(buf.data_ptr()), ctypes.c_longlong(buf.numel() * buf.element_size() // 16),
                ctypes.c_void_p(sink.data_ptr())])

    def dep_read(self, buf, dep_in, dep_out, shape):
        """kf_bench_dep_read launched programmatically, shape = (blocks per
        SM, threads, bytes held in shared memory per block)."""
        per_sm, threads, hold = shape
        launch(self.dep_fn, (self.sm * per_sm, 1, 1), (threads, 1, 1), hold,
               [ctypes.c_void_p(buf.data_ptr()), ctypes.c_longlong(buf.numel() * buf.element_size() // 16),
                ctypes.c_void_p(dep_in.data_ptr()), ctypes.c_void_p(dep_out.data_ptr()),
                ctypes.c_int(hold // 16)],
               programmatic=True)

    def empty(self):
        launch(self.empty_fn, (1, 1, 1), (32, 1, 1), 0, [ctypes.c_int(0)])


def measure_ceilings(probe):
    buf = torch.randint(0, 2**31 - 1, (2**30,), dtype=torch.int32, device="cuda")  # 4 GiB
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    nbytes = buf.numel() * 4
    t = time_graph(lambda i: probe.read(buf, sink), 4, replays=10)
    read_bw = nbytes / t
    dst = torch.empty_like(buf)
    tc = time_graph(lambda i: dst.copy_(buf), 2, replays=10)
    copy_bw = 2 * nbytes / tc
    del buf, dst
    release_memory()
    # launch overhead: empty kernels back to back on a stream, and as graph nodes
    for _ in range(100):
        probe.empty()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(2000):
        probe.empty()
    b.record()
    b.synchronize()
    stream_launch = a.elapsed_time(b) * 1e-3 / 2000
    graph_node = time_graph(lambda i: probe.empty(), 200)
    return {"read_bw": read_bw, "copy_bw": copy_bw, "stream_launch_s": stream_launch,
            "graph_node_s": graph_node}


# Shapes of the dependent read (blocks per SM, threads, bytes held per block),
# the best of which counts: one block holding 96 KB or two holding 48 KB leave
# room on the SM for the next launch's to hold as much; three holding 64 KB
# do not, and were the best from 33 to 50 MB (H200, notes/perf/journal.md v17).
DEP_SHAPES = ((1, 1024, 96 * 1024), (2, 512, 48 * 1024), (3, 512, 64 * 1024), (4, 512, 0))


def read_fractions(probe, nbytes, ceiling, cap=64):
    """What reading nbytes per launch reaches (rotated copies, graph nodes),
    as fractions of the ceiling: (read, dep). read: the plain read kernel;
    dep: the best shape of kf_bench_dep_read, launched programmatically back
    to back, each launch reading a word the one before wrote, as the
    projections need their activations and attention its q. A reference for
    launches of that size that depend on the kernel before, not a bound: the
    projections, which hold less and start on their first bytes sooner, beat
    it below 16 MB."""
    c = copies_for(nbytes, cap)
    bufs = [torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_() for _ in range(c)]
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    reps = c * max(1, math.ceil(24 / c))
    t = time_graph(lambda i: probe.read(bufs[i % c], sink), reps)
    deps = [torch.zeros(probe.sm * 4, dtype=torch.int32, device="cuda") for _ in range(2)]
    td = min(time_graph(lambda i: probe.dep_read(bufs[i % c], deps[i % 2], deps[(i + 1) % 2], shape), 2 * reps)
             for shape in DEP_SHAPES)
    del bufs
    release_memory()
    return nbytes / t / ceiling, nbytes / td / ceiling

