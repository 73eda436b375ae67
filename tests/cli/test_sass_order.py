"""tests/gpu/sass_order.py's rules, on SASS listings in cuobjdump's format
(no GPU or cuobjdump needed): what each kind of kernel may run before
griddepcontrol.wait (ACQBULK). The GPU run (scripts/gpu-test) applies the same
check to every shipped sm_90a kernel."""
import json
import os
import sys
import tempfile
import unittest

from kfhelp import SRC

sys.path.insert(0, os.path.join(SRC, "tests", "gpu"))
import sass_order  # noqa: E402


def listing(*ops):
    """A cuobjdump -sass body: one instruction per line, addresses 16 apart."""
    return "\n".join(f"        /*{16 * i:04x}*/                   {op} ;"
                     f"                /* 0x000000000000782d */" for i, op in enumerate(ops))


GEMM_OK = listing("S2R R0, SR_TID.X", "LDS R2, [UR4]",
                  "LDGSTS.E.BYPASS.128 [R11], desc[UR6][R12.64]", "LDGDEPBAR",
                  "ACQBULK", "LDGSTS.E.BYPASS.128 [R13], desc[UR6][R14.64]",
                  "HMMA.16816.F32.BF16 R28, R4, R14, R28", "STG.E.U16 desc[UR6][R2.64], R5", "EXIT")
# What ptxas made of a GEMM variant whose first units loaded weights and
# activations into registers with ld.global.nc: all of it ahead of the wait.
GEMM_HOISTED = listing("LDG.E.NA.128.CONSTANT R4, desc[UR6][R4.64]",
                       "LDG.E.128.CONSTANT R12, desc[UR6][R12.64]",
                       "HMMA.16816.F32.BF16 R28, R28, R12, RZ", "ACQBULK", "EXIT")
ATTN_OK = listing("LDG.E R3, desc[UR6][R2.64]", "@!P0 LDG.E R5, desc[UR6][R4.64]",
                  "@P1 LDG.E.NA.128.CONSTANT R8, desc[UR6][R6.64]",
                  "@P1 LDG.E.NA.LTC128B.128.CONSTANT R16, desc[UR6][R6.64+0x40]", "ACQBULK",
                  "LDG.E.128 R12, desc[UR6][R10.64]", "HMMA.16816.F32.BF16 R20, R12, R8, RZ", "EXIT")


class SassOrder(unittest.TestCase):
    def test_gemm_copies_weights_ahead_of_the_wait(self):
        self.assertEqual(sass_order.check("o_proj", GEMM_OK), [])

    def test_gemm_with_loads_or_mma_ahead_of_the_wait_fails(self):
        problems = sass_order.check("o_proj", GEMM_HOISTED)
        self.assertEqual(len(problems), 3, problems)
        self.assertIn("HMMA", problems[-1])

    def test_attention_reads_lengths_pages_and_older_kv_ahead(self):
        self.assertEqual(sass_order.check("decode_attention", ATTN_OK), [])

    def test_attention_q_or_coherent_kv_ahead_of_the_wait_fails(self):
        for load in ("LDG.E.128 R12, desc[UR6][R10.64]",  # q, or the newest token's K/V
                     "LDG.E.128.STRONG.GPU R12, desc[UR6][R10.64]",
                     "LDG.E.128.CONSTANT R12, desc[UR6][R10.64]"):
            with self.subTest(load=load):
                sass = listing("LDG.E R3, desc[UR6][R2.64]", load, "ACQBULK", "EXIT")
                self.assertEqual(sass_order.check("decode_attention", sass),
                                 [f"before the wait: {load}"])

    def test_norm_and_rope_load_nothing_ahead(self):
        ok = listing("S2R R0, SR_TID.X", "ACQBULK", "LDG.E.128 R4, desc[UR6][R2.64]", "EXIT")
        early = listing("LDG.E.128 R4, desc[UR6][R2.64]", "ACQBULK", "EXIT")
        for kind in ("input_norm", "post_attn_norm", "rope_kv_write", "router", "moe_gate_up",
                     "moe_down", "moe_combine"):
            with self.subTest(kind=kind):
                self.assertEqual(sass_order.check(kind, ok), [])
                self.assertEqual(len(sass_order.check(kind, early)), 1)

    def test_stores_ahead_of_the_wait_fail_everywhere(self):
        sass = listing("STG.E.128 desc[UR6][R2.64], R4", "ACQBULK", "EXIT")
        for kind in ("o_proj", "decode_attention", "input_norm"):
            with self.subTest(kind=kind):
                self.assertEqual(len(sass_order.check(kind, sass)), 1)

    def test_the_kernels_checked_are_those_the_manifests_name(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "v1", "manifests", "m"))
            os.makedirs(os.path.join(d, "v1", "objects", "ab", "abc"))  # stale: no manifest
            kernels = [{"id": "m/o_proj/w1/sm_90a", "object": "objects/cd/cd1/object.cubin"},
                       {"id": "m/o_proj/w1/sm_100a", "object": "objects/ef/ef1/object.cubin"},
                       # a layer kernel: persistent, not programmatic, not checked
                       {"id": "m/layer/w1/sm_90a", "object": "objects/12/121/object.cubin",
                        "launch": {"persistent": True, "cooperative": True}}]
            with open(os.path.join(d, "v1", "manifests", "m", "sm_90a.json"), "w") as f:
                json.dump({"kernels": kernels}, f)
            self.assertEqual(list(sass_order.objects(d)),
                             [("m/o_proj/w1/sm_90a",
                               os.path.join(d, "v1", "objects/cd/cd1/object.cubin"))])

    def test_a_kernel_without_the_wait_fails(self):
        self.assertEqual(len(sass_order.check("o_proj", listing("EXIT"))), 1)


if __name__ == "__main__":
    unittest.main()
