"""What a first-time user meets (docs/cli.md): `kforge help` with and without
a command, and a compiler setting (KFORGE_NVCC, KFORGE_HIPCC) that names a
path that does not exist, which must fail those kernels saying "not found"
and the path, not something about the compiler's answer."""
import unittest

from kfhelp import Work, fixture_ids


class FirstHour(unittest.TestCase):
    def test_help_without_a_command_is_the_top_level_help(self):
        w = Work(self, "help")
        top = w.kf("--help", common=False)
        self.assertEqual(top.rc, 0, str(top))
        r = w.kf("help", common=False)
        self.assertEqual(r.rc, 0, f"`kforge help` must work like `kforge --help`\n{r}")
        self.assertEqual(r.out, top.out, "the same usage, on stdout")
        self.assertEqual(r.err, "")
        self.assertIn("build", r.out)

    def test_help_names_a_command(self):
        w = Work(self, "help")
        r = w.kf("help", "build", common=False)
        self.assertEqual(r.rc, 0, str(r))
        self.assertIn("usage: kforge build", r.out)
        bad = w.kf("help", "biuld", common=False)
        self.assertEqual(bad.rc, 2, str(bad))
        self.assertIn("unknown command 'biuld'", bad.err, "the unknown name is the argument")

    def _missing_compiler(self, var, arch):
        w = Work(self, "nocc")
        missing = w.path("no-such-dir", "cc")
        r = w.build(args=("--arch", arch), env={var: missing}, expect_rc=1)
        ids = fixture_ids(arches=(arch,))
        self.assertEqual(r.summary, (len(ids), 0, 0, len(ids)), f"every kernel fails\n{r}")
        errors = [l for l in r.err.splitlines() if ": error: " in l]
        self.assertTrue(errors, f"an error line\n{r}")
        for line in errors:
            self.assertIn(f"{var}: {missing}: not found", line, f"says what is missing\n{r}")
        self.assertNotIn("did not answer", r.err)

    def test_kforge_nvcc_that_does_not_exist_is_not_found(self):
        self._missing_compiler("KFORGE_NVCC", "sm_90a")

    def test_kforge_hipcc_that_does_not_exist_is_not_found(self):
        self._missing_compiler("KFORGE_HIPCC", "gfx90a")

    def test_kforge_nvcc_name_not_on_path_is_not_found(self):
        w = Work(self, "nocc")
        r = w.build(env={"KFORGE_NVCC": "kforge-no-such-nvcc"}, expect_rc=1)
        self.assertIn("KFORGE_NVCC: kforge-no-such-nvcc: not found on PATH", r.err, str(r))


if __name__ == "__main__":
    unittest.main()
