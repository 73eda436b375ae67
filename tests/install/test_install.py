"""kforge as installed: `cmake --install` of this build into a temporary
prefix, then what a user of the install meets, with nothing taken from the
source tree (the binding's sources are copied as pip's input, as an sdist
would be):

- C consumers of libkforge_rt through find_package(kforge) and through
  pkg-config, each linking the shared and the static library, run;
- the installed `kforge`, run from another directory with no KFORGE_*
  variable, reads the prefix's templates and family presets (and fails,
  naming the prefix, once they are removed there), and builds a kernel;
- a copy of kforge outside any prefix and its build tree does not fall back
  on the checkout;
- `pip install` of the binding finds the prefix's libkforge_rt, or the copy
  bundled into the package.

Environment (set by tests/install/CMakeLists.txt): KFORGE_BINARY_DIR,
KFORGE_BIN (the build tree's kforge), KFORGE_CMAKE, KFORGE_CC,
KFORGE_PKG_CONFIG."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KFORGE_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("KFORGE_BINARY_DIR") or os.path.join(SRC, "build")
BUILD_KFORGE = os.environ.get("KFORGE_BIN") or os.path.join(BUILD, "gen", "kforge")
CMAKE = os.environ.get("KFORGE_CMAKE") or "cmake"
CC = os.environ.get("KFORGE_CC") or "cc"
PKG_CONFIG = os.environ.get("KFORGE_PKG_CONFIG") or "pkg-config"
CUDA_BIN = "/usr/local/cuda/bin"
SOVERSION_NAME = "libkforge_rt.so.0"

# A consumer of the public API that needs no GPU: opening with a driver
# library that does not exist fails cleanly with KF_ERR_NO_DRIVER.
CONSUMER_C = r"""
#include <kforge/runtime.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 3)
    return 2;
  kf_runtime_options opts;
  kf_runtime_options_init(&opts);
  opts.cache_dir = argv[1];
  opts.model = "none";
  opts.backend = KF_BACKEND_CUDA;
  opts.driver_path = argv[2];
  kf_runtime *rt = NULL;
  kf_status st = kf_runtime_open(&opts, &rt);
  printf("status %d (%s): %s\n", (int)st, kf_strerror(st), kf_last_error());
  return rt == NULL ? 0 : 1;
}
"""

CONSUMER_CMAKE = """
cmake_minimum_required(VERSION 3.20)
project(kforge_consumer LANGUAGES C)
find_package(kforge 0.1 REQUIRED)
message(STATUS "kforge templates: ${KFORGE_TEMPLATES_DIR}")
add_executable(with_shared main.c)
target_link_libraries(with_shared PRIVATE kforge::rt)
add_executable(with_static main.c)
target_link_libraries(with_static PRIVATE kforge::rt_static)
"""

# One kernel of a shipped template, one width: kforge build stays fast.
NORM_DESC = {
    "name": "inst-norm",
    "shape": {"hidden_size": 256, "rms_norm_eps": 1e-6, "dtype": "bf16"},
    "widths": [1],
    "arches": ["sm_90a"],
    "kernels": [{"kind": "input_norm", "template": "add_rmsnorm",
                 "params": {"HIDDEN": "hidden_size", "EPS": "rms_norm_eps"}}],
}
NORM_ID = "inst-norm/input_norm/w1/sm_90a"

# The shipped qwen3 family preset, keyed only (nothing compiled).
FAMILY_DESC = {
    "name": "inst-qwen3",
    "family": "qwen3",
    "shape": {"hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
              "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
              "rope_theta": 1000000, "dtype": "bf16"},
    "widths": [1],
    "arches": ["sm_90a"],
}

NO_DRIVER_RE = re.compile(r"^status 3 \(.*\): .*/nonexistent/libcuda\.so", re.M)


def run(argv, cwd, env=None, check=True):
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"$ {' '.join(argv)}\nrc={p.returncode}\n--- stdout\n"
                             f"{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")
    return p


def clean_env(extra=None):
    """os.environ without anything that points kforge or the binding at the
    build or source tree."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KFORGE_", "NVCC_", "PYTHON", "PKG_CONFIG"))
           and k not in ("LD_LIBRARY_PATH", "CMAKE_PREFIX_PATH", "VIRTUAL_ENV")}
    env["PATH"] = CUDA_BIN + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def needed(path):
    """The DT_NEEDED entries of an ELF file."""
    out = run(["readelf", "-d", path], cwd="/").stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def python_with_pip():
    """An interpreter that can build the binding offline (pip, setuptools,
    wheel and venv importable): this one, else Debian's."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if exe and os.path.exists(exe) and subprocess.run(
                [exe, "-c", "import setuptools, wheel, pip, venv"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return exe
    raise AssertionError("no Python with pip, setuptools, wheel and venv: install "
                         "python3-pip python3-setuptools python3-wheel python3-venv "
                         "(scripts/setup --test)")


class Installed(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kforge-install-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.prefix = os.path.join(self.tmp, "prefix")

    def install(self):
        run([CMAKE, "--install", BUILD, "--prefix", self.prefix], cwd=self.tmp)
        self.lib = os.path.join(self.prefix, "lib")
        for f in ("bin/kforge", "include/kforge/runtime.h", "lib/libkforge_rt.a",
                  "lib/" + SOVERSION_NAME, "lib/cmake/kforge/kforgeConfig.cmake",
                  "lib/pkgconfig/kforge-rt.pc", "share/kforge/templates/add_rmsnorm.cuh",
                  "share/kforge/families/qwen3.json"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, f)), f"not installed: {f}")

    def workdir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        return d

    def write(self, path, text):
        with open(path, "w") as f:
            f.write(text)

    def check_runs(self, exe, env=None):
        cache = self.workdir("cache-" + os.path.basename(exe))
        p = run([exe, cache, "/nonexistent/libcuda.so"], cwd=self.tmp, env=env)
        self.assertRegex(p.stdout, NO_DRIVER_RE, f"{exe} ran the runtime's open")

    def test_find_package_links_the_shared_and_the_static_runtime(self):
        self.install()
        src = self.workdir("consumer")
        self.write(os.path.join(src, "main.c"), CONSUMER_C)
        self.write(os.path.join(src, "CMakeLists.txt"), CONSUMER_CMAKE)
        out = os.path.join(self.tmp, "consumer-build")
        env = clean_env({"CMAKE_PREFIX_PATH": self.prefix})
        p = run([CMAKE, "-S", src, "-B", out], cwd=self.tmp, env=env)
        self.assertIn("kforge templates: " + os.path.join(self.prefix, "share/kforge/templates"),
                      p.stdout)
        run([CMAKE, "--build", out], cwd=self.tmp, env=env)
        shared, static = os.path.join(out, "with_shared"), os.path.join(out, "with_static")
        self.assertIn(SOVERSION_NAME, needed(shared))
        self.assertFalse([n for n in needed(static) if "kforge" in n], needed(static))
        # the static consumer linked cJSON through the package's interface
        self.assertTrue([n for n in needed(static) if n.startswith("libcjson")], needed(static))
        self.check_runs(shared, env)  # found through the build's RPATH into the prefix
        self.check_runs(static, env)

    def test_pkg_config_links_the_shared_and_the_static_runtime(self):
        self.install()
        src = self.workdir("pc")
        main = os.path.join(src, "main.c")
        self.write(main, CONSUMER_C)
        env = clean_env({"PKG_CONFIG_PATH": os.path.join(self.lib, "pkgconfig")})

        def pc(*args):
            return run([PKG_CONFIG, *args, "kforge-rt"], cwd=src, env=env).stdout.split()

        self.assertEqual(pc("--modversion"), ["0.1.0"])
        cflags = pc("--cflags")
        self.assertEqual([os.path.normpath(f[2:]) for f in cflags if f.startswith("-I")],
                         [os.path.join(self.prefix, "include")], cflags)
        private = pc("--static", "--libs")
        for lib in ("-lcjson", "-ldl", "-lpthread"):
            self.assertIn(lib, private, "Libs.private lists what libkforge_rt.a needs")

        shared = os.path.join(src, "with_shared")
        run([CC, main, "-o", shared, *pc("--cflags"), *pc("--libs")], cwd=src, env=env)
        self.assertIn(SOVERSION_NAME, needed(shared))
        self.check_runs(shared, dict(env, LD_LIBRARY_PATH=self.lib))

        # the archive by name, then everything --static lists
        static = os.path.join(src, "with_static")
        libs = ["-l:libkforge_rt.a" if f == "-lkforge_rt" else f for f in private]
        run([CC, main, "-o", static, *pc("--cflags"), *libs], cwd=src, env=env)
        self.assertFalse([n for n in needed(static) if "kforge" in n], needed(static))
        self.check_runs(static, env)

    def test_installed_kforge_reads_its_prefix_from_anywhere(self):
        self.install()
        kforge = os.path.join(self.prefix, "bin", "kforge")
        share = os.path.join(self.prefix, "share", "kforge")
        work = self.workdir("work")
        env = clean_env()
        p = run([kforge, "--version"], cwd=work, env=env)
        self.assertEqual(p.stdout.splitlines(),
                         ["kforge 0.1.0", "templates: " + os.path.join(share, "templates"),
                          "families: " + os.path.join(share, "families")])
        self.assertEqual(p.stderr, "")

        self.write(os.path.join(work, "norm.json"), json.dumps(NORM_DESC))
        self.write(os.path.join(work, "fam.json"), json.dumps(FAMILY_DESC))
        p = run([kforge, "build", "--cache", "cache", "-j", "1", "norm.json"], cwd=work, env=env)
        self.assertEqual(p.stdout.strip().splitlines()[-1],
                         "1 kernels: 0 cached, 1 compiled, 0 failed", p.stdout)
        manifest = os.path.join(work, "cache", "v1", "manifests", "inst-norm", "sm_90a.json")
        with open(manifest) as f:
            self.assertEqual([k["id"] for k in json.load(f)["kernels"]], [NORM_ID])
        p = run([kforge, "explain", "--cache", "cache", "norm.json", NORM_ID], cwd=work, env=env)
        self.assertIn("\ntemplates " + os.path.join(share, "templates") + "\n", p.stdout)
        self.assertIn("unchanged since last build", p.stdout)

        # the family preset comes from the prefix too, and keys do not depend
        # on where the templates are: the build tree's kforge agrees
        keys = run([kforge, "keys", "fam.json"], cwd=work, env=env).stdout
        self.assertEqual(len(keys.splitlines()), 9, keys)  # eight kinds and the layer kind
        same = run([BUILD_KFORGE, "keys", "fam.json"], cwd=work, env=env).stdout
        self.assertEqual(keys, same)

        # without them in the prefix it fails, naming the prefix: it never
        # reads the checkout's copies
        os.rename(os.path.join(share, "families"), os.path.join(share, "families.off"))
        p = run([kforge, "keys", "fam.json"], cwd=work, env=env, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(os.path.join(share, "families", "qwen3.json"), p.stderr)
        os.rename(os.path.join(share, "templates"), os.path.join(share, "templates.off"))
        p = run([kforge, "keys", "norm.json"], cwd=work, env=env, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"(searched {os.path.join(share, 'templates')})", p.stderr)

        # the variables still override
        p = run([kforge, "keys", "fam.json"], cwd=work, check=False,
                env=dict(env, KFORGE_TEMPLATES=os.path.join(share, "templates.off"),
                         KFORGE_FAMILIES=os.path.join(share, "families.off")))
        self.assertEqual(p.stdout, keys, p.stderr)

    def test_kforge_outside_prefix_and_build_tree_does_not_use_the_checkout(self):
        here = self.workdir("elsewhere")
        kforge = os.path.join(here, "kforge")
        shutil.copy2(BUILD_KFORGE, kforge)
        p = run([kforge, "--version"], cwd=here, env=clean_env())
        self.assertNotIn(SRC, p.stdout)
        self.assertIn("templates: " + os.path.join(self.tmp, "share", "kforge", "templates"),
                      p.stdout)
        self.assertIn("does not exist", p.stderr)
        # while the build tree's own kforge reads the source tree
        p = run([BUILD_KFORGE, "--version"], cwd=here, env=clean_env())
        self.assertIn("templates: " + os.path.join(SRC, "templates"), p.stdout)

    def test_pip_installed_binding_finds_the_runtime(self):
        python = python_with_pip()
        # a virtual environment used as the prefix of both installs
        run([python, "-m", "venv", "--system-site-packages", "--without-pip", self.prefix],
            cwd=self.tmp)
        self.install()
        pkg = os.path.join(self.tmp, "python-src")
        shutil.copytree(os.path.join(SRC, "python"), pkg,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                      "libkforge_rt.so*"))
        venv_python = os.path.join(self.prefix, "bin", "python")
        pip = [venv_python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index"]
        env = clean_env()
        run(pip + [pkg], cwd=self.tmp, env=env)
        probe = ("import kforge, os\n"
                 "print(os.path.realpath(kforge.library_path))\n"
                 "try:\n"
                 "    kforge.Runtime('cache', 'none', backend='cuda',\n"
                 "                   driver_path='/nonexistent/libcuda.so')\n"
                 "except kforge.Error as e:\n"
                 "    print(e.status.name)\n")
        work = self.workdir("work")
        p = run([venv_python, "-c", probe], cwd=work, env=env)
        real = os.path.realpath(os.path.join(self.lib, SOVERSION_NAME))
        self.assertEqual(p.stdout.splitlines(), [real, "NO_DRIVER"])

        # bundled: a copy put into the package before pip install wins
        shutil.copy2(real, os.path.join(pkg, "kforge", SOVERSION_NAME))
        target = os.path.join(self.tmp, "target")
        run(pip + ["--target", target, pkg], cwd=self.tmp, env=env)
        p = run([venv_python, "-c", probe], cwd=work, env=dict(env, PYTHONPATH=target))
        bundled = os.path.realpath(os.path.join(target, "kforge", SOVERSION_NAME))
        self.assertEqual(p.stdout.splitlines(), [bundled, "NO_DRIVER"])


if __name__ == "__main__":
    unittest.main()
