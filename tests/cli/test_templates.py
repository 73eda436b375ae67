"""The shipped GEMM templates' schemas against their headers.

skinny_gemm.json and gate_up_silu.json spell launch.shared_bytes as an
expression of their parameters; the kernels trap on the GPU when a launch gives
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
  return 0;
}
"""


def schema_shared_bytes(expr, names):
    """The schema's integer expression (+ - * / and parentheses, `/`
    truncating as kforge's does for non-negative integers)."""
    py = expr.replace("/", "//")
    return eval(py, {"__builtins__": {}}, dict(names))  # noqa: S307 (the checkout's own file)


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
        cls.asked = [tuple(int(v) for v in line.split()) for line in out.splitlines()]

    def check(self, schema_file):
        with open(os.path.join(TEMPLATES, schema_file)) as f:
            schema = json.load(f)
        expr = schema["launch"]["shared_bytes"]
        self.assertIn("DEEP_RING", schema["params"])
        self.assertGreater(len(self.asked), 100)
        self.assertEqual({a[0] for a in self.asked}, {0, 1})
        for mma, k, ksplit, deep, w, asked in self.asked:
            got = schema_shared_bytes(expr, {"MMA": mma, "K": k, "KSPLIT": ksplit, "DEEP_RING": deep,
                                             "W": w})
            self.assertEqual(got, asked, f"{schema_file}: MMA={mma} K={k} KSPLIT={ksplit} "
                                         f"DEEP_RING={deep} W={w}: launch.shared_bytes {got}, "
                                         f"the kernel asks {asked}")

    def test_skinny_gemm_schema_gives_what_the_kernel_asks(self):
        self.check("skinny_gemm.json")

    def test_gate_up_silu_schema_gives_what_the_kernel_asks(self):
        self.check("gate_up_silu.json")

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
