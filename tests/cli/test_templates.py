"""The shipped GEMM templates' schemas against their headers.

skinny_gemm.json, gate_up_silu.json and moe_down.json spell
launch.shared_bytes as an expression of their parameters; the kernels trap on the GPU when a launch gives
less dynamic shared memory than gemm_dyn_smem_bytes (skinny_gemm.cuh) asks
for. Here, with no GPU, a host program built from the header prints what the
kernel asks for, and every parameter combination the schemas allow must get at
least that, and no more (the extra would only cost occupancy), on the
matrix-instruction path (MMA 1) and on the portable one (MMA 0: none).
"""
import json
import os
import subprocess
import tempfile
import unittest

from kfhelp import SRC, real_nvcc

TEMPLATES = os.path.join(SRC, "templates")

PROBE = r"""
#include <cstdio>
#include "skinny_gemm.cuh"
int main() {
  const int ks[] = {256, 1024, 1536, 4096, 8192, 12288, 14336};
  for (int mma = 0; mma <= 1; ++mma)
    for (int k : ks)
      for (int ksplit = 1; ksplit <= 8; ksplit *= 2)
        for (int deep = 0; deep <= 1; ++deep)
          for (int w = 1; w <= 8; ++w)
            if (k % (256 * ksplit) == 0)
              std::printf("%d %d %d %d %d %d\n", mma, k, ksplit, deep, w,
                          kf::gemm_dyn_smem_bytes(mma != 0, kf::gemm_long(k / ksplit, deep != 0), w));
  // moe_down (KSPLIT 1) with its SMEM_CAP: "moe" lines
  const int is[] = {768, 1408, 4096, 8192, 14336};
  const int caps[] = {0, 1, 30000, 40960, 57344, 61440, 73728, 98304, 232448};
  for (int mma = 0; mma <= 1; ++mma)
    for (int i : is)
      for (int deep = 0; deep <= 1; ++deep)
        for (int w = 1; w <= 8; ++w)
          for (int cap : caps)
            std::printf("moe %d %d %d %d %d %d\n", mma, i, deep, w, cap,
                        kf::gemm_dyn_smem_bytes(mma != 0, kf::gemm_long(i, deep != 0), w,
                                                kf::gemm_long_slots_within(cap, w)));
  return 0;
}
"""


def schema_shared_bytes(expr, names):
    """The schema's integer expression (+ - * / and parentheses, `/`
    truncating as kforge's does for non-negative integers)."""
    py = expr.replace("/", "//")
    return eval(py, {"__builtins__": {}, "min": min, "max": max},  # noqa: S307 (the checkout's own file)
                dict(names))


class GemmSharedBytes(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        d = tempfile.mkdtemp(prefix="kf-tpl-")
        src, exe = os.path.join(d, "probe.cu"), os.path.join(d, "probe")
        with open(src, "w") as f:
            f.write(PROBE)
        subprocess.run([real_nvcc(), "-std=c++17", "-I", TEMPLATES, "-o", exe, src], check=True,
                       capture_output=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        lines = out.splitlines()
        cls.asked = [tuple(int(v) for v in line.split()) for line in lines if not line.startswith("moe")]
        cls.moe_asked = [tuple(int(v) for v in line.split()[1:]) for line in lines
                         if line.startswith("moe")]

    def same_as_asked(self, schema_file, names, asked):
        """launch.shared_bytes of schema_file, evaluated with names bound to
        each row of asked but its last, equals that last (what the kernel
        asks)."""
        with open(os.path.join(TEMPLATES, schema_file)) as f:
            expr = json.load(f)["launch"]["shared_bytes"]
        self.assertGreater(len(asked), 100)
        for *values, want in asked:
            env = dict(zip(names, values))
            got = schema_shared_bytes(expr, env)
            where = " ".join(f"{n}={v}" for n, v in env.items())
            self.assertEqual(got, want, f"{schema_file}: {where}: launch.shared_bytes {got}, "
                                        f"the kernel asks {want}")

    def check(self, schema_file):
        with open(os.path.join(TEMPLATES, schema_file)) as f:
            self.assertIn("DEEP_RING", json.load(f)["params"])
        self.assertEqual({a[0] for a in self.asked}, {0, 1})
        self.same_as_asked(schema_file, ("MMA", "K", "KSPLIT", "DEEP_RING", "W"), self.asked)

    def test_skinny_gemm_schema_gives_what_the_kernel_asks(self):
        self.check("skinny_gemm.json")

    def test_gate_up_silu_schema_gives_what_the_kernel_asks(self):
        self.check("gate_up_silu.json")

    def test_moe_down_schema_gives_what_the_kernel_asks(self):
        self.same_as_asked("moe_down.json", ("MMA", "INTERMEDIATE", "DEEP_RING", "W", "SMEM_CAP"),
                           self.moe_asked)

    def test_moe_down_smem_cap_shrinks_the_long_ring_only_where_it_must(self):
        asked = {(i, d, w, c): v for m, i, d, w, c, v in self.moe_asked if m == 1}
        for w in (1, 2, 4, 8):
            # no cap: skinny_gemm's rings (64 KB of weights and 4 KB a row on the long path)
            self.assertEqual(asked[(14336, 0, w, 0)], 65536 + 4096 * w)
            self.assertEqual(asked[(4096, 0, w, 0)], 2048 * w)
            # the short path ignores the cap
            self.assertEqual(asked[(4096, 0, w, 40960)], 2048 * w)
            # never fewer than 2 slots, however small the cap
            self.assertEqual(asked[(14336, 0, w, 1)], 2 * (16384 + 1024 * w))
        # Mixtral (K = 14336) at 72 KB: widths 1-2 keep the 4 slots, 4 and 8
        # take 3 (60 and 72 KB): three blocks in an SM's 228 KB at every width
        self.assertEqual([asked[(14336, 0, w, 73728)] for w in (1, 2, 4, 8)],
                         [69632, 73728, 61440, 73728])
        # the cap applies with DEEP_RING at a short K as well
        self.assertEqual(asked[(1408, 1, 8, 73728)], 73728)

    def test_deep_ring_is_the_long_path_at_any_k(self):
        asked = {(k, s, d, w): v for m, k, s, d, w, v in self.asked if m == 1}
        # the portable path (HIP) takes none: AMD gives a workgroup 64 KB
        self.assertEqual({v for m, *_, v in self.asked if m == 0}, {0})
        # K = 4096: short path (activation ring only) unless DEEP_RING
        self.assertEqual(asked[(4096, 1, 0, 1)], 4096 // 2)
        self.assertEqual(asked[(4096, 1, 1, 1)], 65536 + 4096)
        self.assertEqual(asked[(4096, 1, 1, 8)], 65536 + 8 * 4096)
        # K / KSPLIT >= 8192: the long path either way
        self.assertEqual(asked[(14336, 1, 0, 2)], asked[(14336, 1, 1, 2)])
        self.assertEqual(asked[(12288, 2, 0, 1)], 4096 // 2)


if __name__ == "__main__":
    unittest.main()
