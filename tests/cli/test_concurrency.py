"""Builders sharing one cache: four at once compile each key once; a builder
killed with SIGKILL mid-compile leaves no visible entry and no lock that
holds up the next build.

The compiler is a wrapper (KFORGE_NVCC, tests/cli/kfhelp.py) around the real
nvcc that logs every compile, so "compiled once" is counted at the compiler,
not only from kforge's own summary lines.
"""
import os
import signal
import subprocess
import time
import unittest

from kfhelp import (FIXTURE_MODEL, SUMMARY_RE, Work, compile_log, fixture_ids,
                    make_nvcc_wrapper)


def wait_for(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Concurrency(unittest.TestCase):

    def test_four_builders_on_one_cache_compile_each_key_once(self):
        w = Work(self, "conc")
        log = w.path("compiles.jsonl")
        # each compile takes 0.7 s longer, so the builders certainly overlap
        env = dict(w.env, KFORGE_NVCC=make_nvcc_wrapper(w.path("cuda-wrap")),
                   KF_WRAP_LOG=log, KF_WRAP_DELAY="0.7")
        keys = w.keys(env=env)
        self.assertEqual(set(keys), fixture_ids())
        procs = []
        for i in range(4):
            # one cache, a private out dir each (four checkouts, one cache)
            argv = w.argv("build", FIXTURE_MODEL, common=False)
            argv += ["--cache", w.cache, "--out", f"out{i}", "--templates", w.templates,
                     "-I", "third_party/vendor_b", "-j", "2"]
            procs.append(subprocess.Popen(argv, cwd=w.root, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            results.append((p.returncode, out, err))
        compiled = 0
        for rc, out, err in results:
            self.assertEqual(rc, 0, f"a concurrent build failed:\n{out}\n{err}")
            last = [l for l in out.splitlines() if l.strip()] or \
                   [l for l in err.splitlines() if l.strip()]
            m = SUMMARY_RE.match(last[-1].strip()) if last else None
            self.assertIsNotNone(m, f"no summary line:\n{out}\n{err}")
            n, cached, comp, failed = (int(g) for g in m.groups())
            self.assertEqual((n, failed, cached + comp), (6, 0, 6), last[-1])
            compiled += comp
        self.assertEqual(compiled, len(set(keys.values())),
                         "summed 'compiled' over the four builds must equal the distinct keys")
        runs = compile_log(log)
        self.assertEqual(len(runs), len(set(keys.values())),
                         "the compiler ran more often than there are keys:\n" +
                         "\n".join(" ".join(r["argv"]) for r in runs))
        self.assertEqual(w.entries(), set(keys.values()))
        r = w.ok("verify")
        self.assertIn("6 entries ok", r.out + r.err)
        tmp = w.v1("tmp")
        self.assertEqual(os.listdir(tmp) if os.path.isdir(tmp) else [], [],
                         "finished builders left temporary entries")

    def test_killed_builder_leaves_no_entry_and_no_lock(self):
        w = Work(self, "kill")
        marks = w.path("marks")
        os.makedirs(marks)
        # the same wrapper compiler (so the same keys) for both builders; its
        # KF_WRAP_* variables are not compiler environment, so not in keys
        fast = {"KFORGE_NVCC": make_nvcc_wrapper(w.path("cuda-wrap"))}
        keys = w.keys(env=fast)
        # width-2 compiles hang (in the wrapper, before nvcc starts); width-1
        # compiles run normally
        env = dict(w.env, KF_WRAP_SLOW_MATCH="_w2.cu", KF_WRAP_SLOW_SECONDS="120",
                   KF_WRAP_MARK_DIR=marks, **fast)
        argv = w.argv("build", "-j", "6", FIXTURE_MODEL)
        p = subprocess.Popen(argv, cwd=w.root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            ok = wait_for(lambda: len(os.listdir(marks)) == 3, 120)
            self.assertTrue(ok, f"the three width-2 compiles never started: {os.listdir(marks)}")
            # wait until the width-1 compiles are published, or a while
            w1 = {keys[i] for i in fixture_ids(widths=(1,))}
            wait_for(lambda: w1 <= w.entries(), 30)
            time.sleep(0.3)
            os.kill(p.pid, signal.SIGKILL)       # the builder only; its compilers live on
            p.wait(timeout=10)
        finally:
            # the orphaned wrappers (pids they wrote) are killed when the test ends
            for n in os.listdir(marks):
                for pid in open(os.path.join(marks, n)).read().split():
                    w.track_pid(int(pid))
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()

        w2 = {keys[i] for i in fixture_ids(widths=(2,))}
        self.assertEqual(w.entries() & w2, set(),
                         "entries of compiles that never finished are visible")
        for k in w.entries():
            d = w.entry_dir(k)
            self.assertTrue(os.path.exists(os.path.join(d, "meta.json")), f"half entry {d}")
        r = w.kf("verify")
        self.assertEqual(r.rc, 0, f"published entries must be whole\n{r}")

        # the next builder (real nvcc) is not held up by locks of the dead one,
        # even though the dead one's compiler processes are still running
        t0 = time.monotonic()
        r = w.kf("build", FIXTURE_MODEL, env=fast, timeout=90)
        took = time.monotonic() - t0
        self.assertEqual(r.rc, 0, str(r))
        n, cached, comp, failed = r.summary
        self.assertEqual((n, failed), (6, 0))
        self.assertGreaterEqual(comp, 3, "the width-2 kernels must be compiled now")
        self.assertEqual(cached + comp, 6)
        self.assertLess(took, 60, "the next build waited on a dead builder's lock")
        self.assertEqual(w.entries(), set(keys.values()))
        self.assertEqual(w.keys(env=fast), keys)
        r = w.ok("verify")
        self.assertIn("6 entries ok", r.out + r.err)
        tmp = w.v1("tmp")
        self.assertEqual(os.listdir(tmp) if os.path.isdir(tmp) else [], [],
                         "the dead builder's temporary entries were not removed")


if __name__ == "__main__":
    unittest.main()
