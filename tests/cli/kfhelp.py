"""Shared helpers for kforge's CLI and integration tests (tests/cli/test_*.py).

Every test works in its own temporary directory: `Work` copies the fixtures
(tests/fixtures/{templates,models,third_party}) there, and runs `kforge` with
that directory as its working directory, an explicit `--cache`, `--out` and
`--templates`, and an environment scrubbed of variables that would change
keys (KFORGE_*, NVCC_*). The checkout is never written.

Environment (set by tests/CMakeLists.txt):
  KFORGE_SOURCE_DIR  the checkout (default: two levels above this file)
  KFORGE_BIN         the kforge binary (default: build/gen/kforge)
"""
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("KFORGE_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(SRC, "tests", "fixtures")
KFORGE = os.environ.get("KFORGE_BIN") or os.path.join(SRC, "build", "gen", "kforge")

FIXTURE_MODEL = "models/fx-small.json"     # 3 kinds x widths [1, 2] x sm_90a
FIXTURE_KINDS = ("add", "copy", "scale")
VENDOR_B = "third_party/vendor_b"         # the third-party dir given with -I

SUMMARY_RE = re.compile(r"^(\d+) kernels: (\d+) cached, (\d+) compiled, (\d+) failed$")
KEY_LINE_RE = re.compile(r"^(\S+) ([0-9a-f]{32})$")
HEX32 = re.compile(r"^[0-9a-f]{32}$")


def real_nvcc():
    """Absolute path of the real nvcc (PATH, then /usr/local/cuda)."""
    p = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(p):
        raise unittest.SkipTest("nvcc is not installed")  # every CI machine has it
    return os.path.realpath(p)


def base_env(extra=None):
    """os.environ without anything that enters a key or picks a cache."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KFORGE_") and not k.startswith("NVCC_")
           and k not in ("CUDA_HOME", "CUDA_PATH", "CCACHE_DIR")}
    cuda_bin = os.path.dirname(real_nvcc())
    if cuda_bin not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = cuda_bin + os.pathsep + env.get("PATH", "")
    if extra:
        env.update(extra)
    return env


class Result:
    """A finished kforge run: rc, out, err, and the parsed summary line."""

    def __init__(self, argv, proc, seconds):
        self.argv = argv
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.seconds = seconds

    def __str__(self):
        return (f"$ {shlex.join(self.argv)}\nrc={self.rc}\n--- stdout\n{self.out[-4000:]}"
                f"\n--- stderr\n{self.err[-4000:]}")

    @property
    def summary(self):
        """(N, cached, compiled, failed) from the build's last line.

        cli.md: "the last line is `N kernels: H cached, C compiled, F failed`";
        it is looked for as the last non-empty line of stdout, else of stderr."""
        for stream in (self.out, self.err):
            lines = [l.strip() for l in stream.splitlines() if l.strip()]
            if lines and SUMMARY_RE.match(lines[-1]):
                return tuple(int(g) for g in SUMMARY_RE.match(lines[-1]).groups())
        raise AssertionError(f"no 'N kernels: H cached, C compiled, F failed' last line\n{self}")


class Work:
    """A private copy of the fixtures plus a cache and an out dir, in a temp dir."""

    def __init__(self, case, name="w", copy_shipped=False):
        self.case = case
        self.root = tempfile.mkdtemp(prefix=f"kf-cli-{name}-")
        case.addCleanup(self.cleanup)
        for d in ("templates", "models", "third_party"):
            shutil.copytree(os.path.join(FIXTURES, d), os.path.join(self.root, d))
        if copy_shipped:
            for d in ("templates", "models"):
                src = os.path.join(SRC, d)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(self.root, "shipped", d), symlinks=True)
        self.cache = "cache"
        self.out = "kernels-out"
        self.templates = "templates"
        self.env = base_env()
        self.kforge = KFORGE       # the binary to run
        self.user = None           # run kforge as this uid (root only)
        self.use_common = True     # add the fixture's --cache/--out/--templates/-I
        self._pids = []

    def cleanup(self):
        for pid in self._pids:
            # only if it is still ours: a wrapper of this work dir or its sleep
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.root in cmd or cmd.startswith("sleep "):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for dirpath, dirnames, _ in os.walk(self.root):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)

    def track_pid(self, pid):
        """Kill this process id when the test ends, if it is still a wrapper
        of this work dir (or its sleep)."""
        self._pids.append(pid)

    def path(self, *rel):
        return os.path.join(self.root, *rel)

    def common(self, cache=True, out=True, include_b=True):
        args = []
        if cache:
            args += ["--cache", self.cache]
        if out:
            args += ["--out", self.out]
        args += ["--templates", self.templates]
        if include_b:
            args += ["-I", VENDOR_B]
        return args

    def argv(self, cmd, *args, common=True):
        argv = [self.kforge, cmd]
        common = common and self.use_common
        if common and cmd in ("build", "warm", "keys", "explain", "lint"):
            argv += self.common()
        elif common and cmd in ("ls", "verify", "gc"):
            argv += ["--cache", self.cache]
        return argv + list(args)

    def kf(self, cmd, *args, env=None, timeout=300, common=True, cwd=None, user=None):
        """Run `kforge cmd [common options] args...` in the work dir."""
        if not os.path.exists(self.kforge):
            self.case.fail(f"kforge binary not found at {self.kforge} (set KFORGE_BIN)")
        argv = self.argv(cmd, *args, common=common)
        e = dict(self.env)
        if env:
            e.update(env)
        t0 = time.monotonic()
        kw = {}
        user = self.user if user is None else user
        if user is not None:
            kw = {"user": user, "group": user, "extra_groups": []}
        proc = subprocess.run(argv, cwd=cwd or self.root, env=e, capture_output=True,
                              text=True, timeout=timeout, errors="replace", **kw)
        return Result(argv, proc, time.monotonic() - t0)

    def ok(self, cmd, *args, **kw):
        r = self.kf(cmd, *args, **kw)
        self.case.assertEqual(r.rc, 0, f"expected exit 0\n{r}")
        return r

    # --- the things kforge produced -------------------------------------------

    def keys(self, *models, args=(), env=None, cwd=None):
        """{kernel id: key} from `kforge keys`, checking the documented format."""
        r = self.kf("keys", *args, *(models or (FIXTURE_MODEL,)), env=env, cwd=cwd)
        self.case.assertEqual(r.rc, 0, f"kforge keys failed\n{r}")
        return parse_keys(self.case, r.out)

    def build(self, *models, args=(), env=None, expect_rc=0, timeout=400):
        r = self.kf("build", *args, *(models or (FIXTURE_MODEL,)), env=env, timeout=timeout)
        if expect_rc is not None:
            self.case.assertEqual(r.rc, expect_rc, f"unexpected build exit status\n{r}")
        return r

    def v1(self, *rel):
        return os.path.join(self.root, self.cache, "v1", *rel)

    def entry_dir(self, key):
        return self.v1("objects", key[:2], key)

    def entries(self):
        """Keys of the directories under <cache>/v1/objects/<k[0:2]>/."""
        out = set()
        objs = self.v1("objects")
        if not os.path.isdir(objs):
            return out
        for sub in os.listdir(objs):
            d = os.path.join(objs, sub)
            if os.path.isdir(d):
                out.update(os.listdir(d))
        return out

    def meta(self, key):
        with open(os.path.join(self.entry_dir(key), "meta.json")) as f:
            return json.load(f)

    def object_path(self, key):
        d = self.entry_dir(key)
        objs = [n for n in os.listdir(d) if n.startswith("object.")]
        self.case.assertEqual(len(objs), 1, f"entry {key} holds {os.listdir(d)}")
        return os.path.join(d, objs[0])

    def manifest(self, model, arch):
        with open(self.v1("manifests", model, arch + ".json")) as f:
            return json.load(f)

    # --- editing the private copy ---------------------------------------------

    def read(self, rel):
        with open(self.path(rel)) as f:
            return f.read()

    def write(self, rel, text):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)

    def replace(self, rel, old, new):
        """Replace the single occurrence of `old` in file `rel`."""
        text = self.read(rel)
        self.case.assertEqual(text.count(old), 1, f"{rel}: {old!r} must occur once")
        self.write(rel, text.replace(old, new))

    def load_json(self, rel):
        with open(self.path(rel)) as f:
            return json.load(f)

    def dump_json(self, rel, obj):
        self.write(rel, json.dumps(obj, indent=2) + "\n")


def parse_keys(case, out):
    """`<kernel-id> <32-hex key>` per line, sorted by id -> dict."""
    lines = [l for l in out.splitlines() if l.strip()]
    ids = []
    keys = {}
    for l in lines:
        m = KEY_LINE_RE.match(l)
        case.assertIsNotNone(m, f"keys line not '<kernel-id> <32-hex>': {l!r}")
        ids.append(m.group(1))
        keys[m.group(1)] = m.group(2)
    case.assertEqual(ids, sorted(ids), "keys output is not sorted by kernel id")
    case.assertEqual(len(ids), len(set(ids)), "a kernel id is listed twice")
    return keys


def fixture_ids(model="fx-small", kinds=FIXTURE_KINDS, widths=(1, 2), arches=("sm_90a",)):
    return {f"{model}/{k}/w{w}/{a}" for k in kinds for w in widths for a in arches}


def changed(before, after):
    """Ids whose key differs (both must list the same ids)."""
    assert set(before) == set(after), (sorted(before), sorted(after))
    return {i for i in before if before[i] != after[i]}


def snapshot(root):
    """{relative path: ('d',) | ('f', sha256) | ('l', target)} of a tree."""
    snap = {}
    if not os.path.exists(root):
        return snap
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = ("d",)
            else:
                with open(p, "rb") as f:
                    snap[rel] = ("f", hashlib.sha256(f.read()).hexdigest())
    return snap


def collect_inputs(obj):
    """Every {"tag", "name", ...} record anywhere in a JSON document."""
    found = []
    if isinstance(obj, dict):
        if "tag" in obj and "name" in obj:
            found.append(obj)
        for v in obj.values():
            found += collect_inputs(v)
    elif isinstance(obj, list):
        for v in obj:
            found += collect_inputs(v)
    return found


def explain_files(work, model, kernel_id, args=(), env=None):
    """Closure file names of a kernel's key, from `kforge explain --json`."""
    r = work.kf("explain", "--json", *args, model, kernel_id, env=env)
    work.case.assertEqual(r.rc, 0, f"kforge explain --json failed\n{r}")
    try:
        doc = json.loads(r.out)
    except json.JSONDecodeError as e:
        work.case.fail(f"explain --json printed no JSON ({e})\n{r}")
    recs = collect_inputs(doc)
    work.case.assertTrue(recs, f"explain --json lists no inputs\n{r}")
    return sorted({rec["name"] for rec in recs if rec["tag"] == "file"})


# --- wrapper compilers (KFORGE_NVCC) ------------------------------------------

WRAPPER = r"""#!/bin/sh
# kforge test wrapper around the real nvcc; see tests/cli/kfhelp.py.
REAL='@REAL@'
compile=
for a in "$@"; do
  case "$a" in
    --version|-V)
      "$REAL" "$@" | sed -e 's/V\([0-9][0-9]*\)\.\([0-9][0-9]*\)\.\([0-9][0-9]*\)/V\1.\2.\3@VSUFFIX@/' \
                         -e 's/release \([0-9.]*\)/release \1@VSUFFIX@/'
      exit 0 ;;
    --dryrun|-###|-M|-MM|-E|--preprocess|--generate-dependencies|--list-gpu-code|--list-gpu-arch)
      exec "$REAL" "$@" ;;
    *.cu|*.hip) compile=1 ;;
  esac
done
[ -n "$compile" ] || exec "$REAL" "$@"
# a compile
if [ -n "$KF_WRAP_LOG" ]; then
  # one write(2) per record on an O_APPEND descriptor: concurrent compiles'
  # records never interleave (print() writes the newline separately when
  # Python runs unbuffered)
  '@PY@' -c 'import json,os,sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644); os.write(fd, (json.dumps({"cwd": os.getcwd(), "argv": sys.argv[2:]}) + "\n").encode()); os.close(fd)' "$KF_WRAP_LOG" "$@"
fi
if [ -n "$KF_WRAP_SLOW_MATCH" ]; then
  case "$*" in
    *"$KF_WRAP_SLOW_MATCH"*)
      sleep "${KF_WRAP_SLOW_SECONDS:-60}" &
      echo "$$ $!" > "$KF_WRAP_MARK_DIR/slow.$$"
      wait $!
      ;;
  esac
fi
if [ -n "$KF_WRAP_DELAY" ]; then sleep "$KF_WRAP_DELAY"; fi
if [ -n "$KF_WRAP_FAIL" ]; then
  echo "kforge-test wrapper: compile refused on purpose" >&2
  exit 1
fi
exec "$REAL" "$@"
"""


def make_nvcc_wrapper(root, version_suffix=""):
    """A fake CUDA install under `root`: bin/nvcc is WRAPPER, every other
    entry links to the real install (so a tool that finds headers next to the
    nvcc it was given still finds them). Returns the wrapper's path.
    version_suffix != "" makes `nvcc --version` report another version."""
    real = real_nvcc()
    real_root = os.path.dirname(os.path.dirname(real))
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    for n in os.listdir(real_root):
        if n != "bin" and not os.path.lexists(os.path.join(root, n)):
            os.symlink(os.path.join(real_root, n), os.path.join(root, n))
    for n in os.listdir(os.path.join(real_root, "bin")):
        if n != "nvcc" and not os.path.lexists(os.path.join(root, "bin", n)):
            os.symlink(os.path.join(real_root, "bin", n), os.path.join(root, "bin", n))
    w = os.path.join(root, "bin", "nvcc")
    with open(w, "w") as f:
        f.write(WRAPPER.replace("@REAL@", real).replace("@VSUFFIX@", version_suffix)
                .replace("@PY@", sys.executable))
    os.chmod(w, 0o755)
    return w


def compile_log(path):
    """Records of the compiles a wrapper saw (KF_WRAP_LOG)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def parse_make_deps(text):
    """Files of make-style dependency output (`target: dep dep \\`)."""
    text = text.replace("\\\n", " ")
    files = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        _, deps = line.split(":", 1)
        files += shlex.split(deps.replace("\\ ", "\0"))
    return [f.replace("\0", " ") for f in files]
