"""The remote tier (docs/cli.md "Remote tier", docs/contracts.md "Remote
layout"): builds that fetch before they compile, shard builders and pullers
against real Redis and nginx WebDAV servers, the faults a fleet meets (a
remote down or killed mid-build, HTTP 500, hangs, truncated bodies, garbage,
a flipped byte, a record replayed under another key, a manifest naming a
missing object) and signed entries.

Every test salts the keys with a random --define, so that what it finds on a
remote is what it put there; the salt is in the failure messages.
"""
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from kfhelp import FIXTURE_MODEL, VENDOR_B, Work, fixture_ids, make_nvcc_wrapper
from remote_servers import FaultServer, Nginx, Redis, need
from s3_server import S3

IDS = fixture_ids()
MODEL, ARCH = "fx-small", "sm_90a"


class Remote(unittest.TestCase):

    def setUp(self):
        self.w = Work(self, "remote")
        self.salt = random.randrange(1 << 40)
        self.rng = random.Random(self.salt)

    # --- helpers --------------------------------------------------------------

    def kf(self, cmd, cache, *args, env=None, timeout=300, work=None):
        w = work or self.w  # another Work is another checkout, elsewhere
        argv = ["--cache", cache] + list(args)
        if cmd in ("build", "warm", "publish", "keys"):
            argv = (["--out", "kernels-out", "--templates", "templates", "-I", VENDOR_B,
                     "--define", f"KF_TEST_SALT={self.salt}"] + argv + [FIXTURE_MODEL])
        r = w.kf(cmd, *argv, common=False, env=env, timeout=timeout)
        r.salt = self.salt
        return r

    def build(self, cache, *args, expect_rc=0, **kw):
        r = self.kf("build", cache, "--json", *args, **kw)
        if expect_rc is not None:
            self.assertEqual(r.rc, expect_rc, f"salt {self.salt}\n{r}")
        lines = [l for l in r.out.splitlines() if l.startswith("{")]
        self.assertTrue(lines, f"no JSON line\n{r}")
        r.doc = json.loads(lines[-1])
        return r

    def pull(self, cache, *args, expect_rc=0):
        r = self.kf("pull", cache, "--arch", ARCH, *args, MODEL)
        if expect_rc is not None:
            self.assertEqual(r.rc, expect_rc, f"salt {self.salt}\n{r}")
        return r

    def verify(self, cache):
        r = self.kf("verify", cache)
        self.assertEqual(r.rc, 0, f"verify failed on {cache}\n{r}")

    def v1(self, cache, *rel):
        return self.w.path(cache, "v1", *rel)

    def manifest_path(self, cache):
        return self.v1(cache, "manifests", MODEL, ARCH + ".json")

    def keys(self, cache):
        with open(self.manifest_path(cache)) as f:
            return {k["id"]: k["key"] for k in json.load(f)["kernels"]}

    def digest(self, cache):
        """What must be byte-identical between two caches of one build: every
        object and the manifests; and of each meta.json, all but what a compile
        records about itself (time, tmp paths in the command and output)."""
        out = {}
        root = self.v1(cache)
        for dirpath, _, names in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            if rel.split(os.sep)[0] not in ("objects", "manifests"):
                continue
            for n in names:
                p = os.path.join(dirpath, n)
                with open(p, "rb") as f:
                    data = f.read()
                if n == "meta.json":
                    m = json.loads(data)
                    for volatile in ("compile_seconds", "command", "compiler_output"):
                        m.pop(volatile, None)
                    out[os.path.join(rel, n)] = json.dumps(m, sort_keys=True)
                else:
                    out[os.path.join(rel, n)] = hashlib.sha256(data).hexdigest()
        return out

    def entry_dirs(self, cache):
        objs = self.v1(cache, "objects")
        if not os.path.isdir(objs):
            return set()
        return {k for sub in os.listdir(objs) for k in os.listdir(os.path.join(objs, sub))}

    @staticmethod
    def sha(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    @staticmethod
    def ac_of(what):
        return "ac/" + hashlib.sha256(what.encode()).hexdigest()

    def object_sha(self, cache, key):
        d = self.v1(cache, "objects", key[:2], key)
        obj = [n for n in os.listdir(d) if n.startswith("object.")][0]
        return self.sha(os.path.join(d, obj))

    # --- builds, pulls and the layout -------------------------------------------

    def test_remote_hit_build_compiles_nothing_and_matches_the_builder(self):
        redis = Redis(self)
        a = self.build("a", "--remote", redis.url)
        self.assertEqual((a.doc["compiled"], a.doc["remote"]["missed"]), (6, 6), a)
        self.assertEqual(a.doc["remote"]["manifests_published"], 1, a)
        b = self.build("b", "--remote", redis.url)
        self.assertEqual((b.doc["cached"], b.doc["compiled"], b.doc["remote"]["fetched"]),
                         (6, 0, 6), b)
        self.assertEqual(self.digest("b"), self.digest("a"))
        self.verify("b")
        stats = json.loads(self.kf("stats", "b", "--json").out)
        self.assertEqual((stats["remote_hits"], stats["compiled"], stats["remote_errors"]),
                         (6, 0, 0), stats)
        self.assertGreater(stats["bytes_in"], 0)
        # a no-op build with the remote asks only whether its entries are there
        c = self.build("b", "--remote", redis.url)
        self.assertEqual((c.doc["cached"], c.doc["remote"]["fetched"], c.doc["remote"]["bytes_in"]),
                         (6, 0, 0), c)

    def test_a_builder_elsewhere_keys_from_shared_closures_unless_its_files_differ(self):
        redis = Redis(self)
        a = self.build("a", "--remote", redis.url)
        self.assertGreater(a.doc["parsed"], 0, a)
        # another checkout in another directory: no parse, the same keys
        w2 = Work(self, "remote-elsewhere")
        b = self.build("b", "--remote", redis.url, work=w2)
        self.assertEqual((b.doc["parsed"], b.doc["compiled"], b.doc["remote"]["fetched"]),
                         (0, 0, 6), b)
        self.assertEqual(self.keys_in(w2, "b"), self.keys("a"))
        # a comment is not a token: the shared closure still holds
        tmpl = [n for n in os.listdir(w2.path("templates")) if n.endswith((".cuh", ".h"))]
        edited = w2.path("templates", sorted(tmpl)[0])
        with open(edited, "a") as f:
            f.write(f"\n// salt {self.salt}\n")
        c = self.build("c", "--remote", redis.url, work=w2)
        self.assertEqual((c.doc["parsed"], c.doc["compiled"]), (0, 0), c)
        # a token is: that builder parses, and its keys are its own
        w3 = Work(self, "remote-edited")
        edited = w3.path("templates", sorted(tmpl)[0])
        with open(edited, "a") as f:
            f.write(f"\nstatic const int kf_test_edit_{self.salt} = 1;\n")
        d = self.build("d", "--remote", redis.url, work=w3)
        self.assertGreater(d.doc["parsed"], 0, d)
        solo = Work(self, "remote-edited-solo")
        with open(solo.path("templates", sorted(tmpl)[0]), "a") as f:
            f.write(f"\nstatic const int kf_test_edit_{self.salt} = 1;\n")
        self.build("s", work=solo)  # no remote: its own parse
        self.assertEqual(self.keys_in(w3, "d"), self.keys_in(solo, "s"))
        self.assertNotEqual(self.keys_in(w3, "d"), self.keys("a"))
        # a header that would now shadow one the closure found: parses
        w4 = Work(self, "remote-shadow")
        deps = [os.path.join(dp, n) for dp, _, ns in os.walk(self.v1("a", "deps")) for n in ns]
        absent = sorted({p for d in deps for p in json.load(open(d))["absent"]
                         if p.startswith(self.w.path("templates") + os.sep)})
        self.assertTrue(absent, "no absent candidate under templates/ to shadow")
        shadow = w4.path(os.path.relpath(absent[0], self.w.root))
        os.makedirs(os.path.dirname(shadow), exist_ok=True)
        with open(shadow, "w") as f:
            f.write(f"/* salt {self.salt} */\n")
        e = self.build("e", "--remote", redis.url, work=w4)
        self.assertGreater(e.doc["parsed"], 0, e)

    def keys_in(self, work, cache):
        with open(work.path(cache, "v1", "manifests", MODEL, ARCH + ".json")) as f:
            return {k["id"]: k["key"] for k in json.load(f)["kernels"]}

    def test_redis_auth_unix_socket_and_database(self):
        pw = f"pw{self.rng.randrange(1 << 30)}"
        redis = Redis(self, password=pw)
        db = self.rng.randrange(1, 15)
        a = self.build("a", "--remote", f"redis://:{pw}@127.0.0.1:{redis.port}/{db}")
        self.assertEqual(a.doc["remote"]["errors"], 0, a)
        b = self.build("b", "--remote", f"redis+unix://:{pw}@{redis.socket}?db={db}")
        self.assertEqual(b.doc["remote"]["fetched"], 6, b)
        other_db = self.build("c", "--remote", f"redis://:{pw}@127.0.0.1:{redis.port}/{db + 1}")
        self.assertEqual(other_db.doc["remote"]["fetched"], 0, other_db)
        wrong = self.build("d", "--remote", f"redis://:nope@127.0.0.1:{redis.port}/{db}")
        self.assertEqual((wrong.doc["compiled"], wrong.doc["remote"]["fetched"]), (6, 0), wrong)
        self.assertEqual(wrong.err.count("skipped for the rest of this run"), 1, wrong)
        self.assertNotIn("nope", wrong.err, "a password reached a message")

    def test_webdav_layout_is_bazel_cas_and_ac_and_pull_matches(self):
        nginx = Nginx(self)
        url = f"{nginx.url}/kf"
        a = self.build("a", "--remote", url)
        keys = self.keys("a")
        cas = nginx.files("kf/cas")
        for name in cas:  # content is named by its SHA-256
            self.assertEqual(self.sha(os.path.join(nginx.root, "kf/cas", name)), name)
        self.assertEqual(len(cas), 6 * 2 + 1, cas)  # objects, metas, the manifest
        ac = set(nginx.files("kf/ac"))
        for k in keys.values():
            rec_name = self.ac_of(f"kforge/v1/entry/{k}")
            self.assertIn(rec_name[3:], ac)
            with open(os.path.join(nginx.root, "kf", rec_name)) as f:
                rec = json.load(f)
            self.assertEqual((rec["key"], rec["object_sha256"]), (k, self.object_sha("a", k)))
        self.assertIn(self.ac_of(f"kforge/v1/manifest/{MODEL}/{ARCH}")[3:], ac)
        r = self.pull("p", "--remote", url)
        self.assertIn(f"pulled {MODEL}/{ARCH}: 6 kernels (6 fetched, 0 already here)", r.out)
        self.assertEqual(self.digest("p"), self.digest("a"))
        with open(self.manifest_path("p"), "rb") as f, open(self.manifest_path("a"), "rb") as g:
            self.assertEqual(f.read(), g.read())
        self.verify("p")
        again = self.pull("p", "--remote", url)
        self.assertIn("(0 fetched, 6 already here)", again.out)
        self.assertEqual(a.doc["remote"]["errors"], 0)

    def test_s3_with_sigv4_builds_fetches_pulls_and_refuses_a_wrong_secret(self):
        s3 = S3(self)
        sigv4 = f"aws-sigv4=aws:amz:{s3.region}:s3"
        url = f"http://{s3.access_key}:{s3.secret_key}@127.0.0.1:{s3.port}/{s3.bucket}|{sigv4}"
        a = self.build("a", "--remote", url)
        self.assertEqual((a.doc["compiled"], a.doc["remote"]["errors"],
                          a.doc["remote"]["manifests_published"]), (6, 0, 1), a)
        b = self.build("b", "--remote", url)
        self.assertEqual((b.doc["compiled"], b.doc["remote"]["fetched"], b.doc["parsed"]),
                         (0, 6, 0), b)
        self.assertEqual(self.digest("b"), self.digest("a"))
        self.pull("p", "--remote", url)
        self.verify("p")
        self.assertEqual(self.digest("p"), self.digest("a"))
        # the store checks the signature: a wrong secret is refused, said
        # once, and the build goes on locally
        wrong = url.replace(s3.secret_key, "x" + s3.secret_key[1:])
        c = self.build("c", "--remote", wrong)
        self.assertEqual((c.doc["compiled"], c.doc["remote"]["fetched"]), (6, 0), c)
        self.assertEqual(c.err.count("skipped for the rest of this run"), 1, c)
        self.assertIn("HTTP 403", c.err, c)
        self.assertNotIn(s3.secret_key[1:], c.err + c.out, "a secret reached a message")

    def test_three_shard_builders_then_a_puller_match_one_machine(self):
        nginx, redis = Nginx(self), Redis(self)
        single = self.build("single")  # no remote
        remotes = ["--remote", redis.url, "--remote", f"{nginx.url}/fleet"]
        everything = set(self.keys("single").values())
        built = set()
        for i in (1, 2, 3):
            r = self.build(f"s{i}", "--shard", f"{i}/3", *remotes)
            mine = self.entry_dirs(f"s{i}")
            self.assertEqual(len(mine), r.doc["kernels"], r)
            self.assertFalse(mine & built, "two shards built one key")
            built |= mine
            self.assertFalse(os.path.exists(self.manifest_path(f"s{i}")),
                             "a shard wrote a manifest naming kernels it lacks")
            # a shard publishes once the remote holds every kernel (the keys,
            # salted per run, may leave the last shard nothing to build)
            self.assertEqual(r.doc["remote"]["manifests_published"],
                             1 if built == everything else 0, r)
        self.assertEqual(built, everything)
        for url in (redis.url, f"{nginx.url}/fleet"):
            cache = f"p-{url.split(':')[0]}"
            self.pull(cache, "--remote", url)
            self.assertEqual(self.digest(cache), self.digest("single"))
            self.verify(cache)

    def test_publish_waits_for_every_shard(self):
        redis = Redis(self)
        r = self.kf("keys", "k")
        keys = {l.split()[1] for l in r.out.splitlines()}
        n = self.rng.randrange(2, 4)
        shard = {k: int(k[:16], 16) % n + 1 for k in keys}  # docs/cli.md: --shard
        for i in range(1, n):
            self.build(f"s{i}", "--shard", f"{i}/{n}", "--remote", redis.url)
            self.assertEqual(self.entry_dirs(f"s{i}"), {k for k in keys if shard[k] == i})
        last_empty = n not in shard.values()
        r = self.kf("publish", "-", "--remote", redis.url)
        self.assertEqual(r.rc, 0 if last_empty else 1, r)
        if not last_empty:
            self.assertIn("not published to the remote", r.err)
            self.pull("p0", "--remote", redis.url, expect_rc=1)
            last = self.build(f"s{n}", "--shard", f"{n}/{n}", "--remote", redis.url)
            self.assertEqual(last.doc["remote"]["manifests_published"], 1, last)
        r = self.kf("publish", "-", "--remote", redis.url)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("1 manifests published, 0 incomplete", r.out)
        self.pull("p", "--remote", redis.url)
        self.verify("p")
        self.assertEqual(set(self.keys("p").values()), keys)

    def test_rendezvous_shards_move_only_what_a_new_shard_wins(self):
        n1, n2 = Nginx(self), Nginx(self)
        self.build("a", "--remote", f"{n1.url}/*|shards=a,b(2)")
        placed = {p.split("/", 1)[1]: p.split("/")[0] for p in n1.files()}
        self.assertEqual({v for v in placed.values()}, {"a", "b"}, placed)
        # the same blobs (the entries of cache a) onto three shards
        self.build("a", "--remote", f"{n2.url}/*|shards=a,b(2),c")
        moved = {p.split("/", 1)[1]: p.split("/")[0] for p in n2.files()}
        # the first build's shared keying records (it parsed; the second,
        # a no-op, did not) are not the second's
        records = {self.ac_of(f"kforge/v1/entry/{k}") for k in self.keys("a").values()}
        records.add(self.ac_of(f"kforge/v1/manifest/{MODEL}/{ARCH}"))
        placed = {n: s for n, s in placed.items() if n.startswith("cas/") or n in records}
        self.assertEqual(set(moved), set(placed))
        for name, shard in moved.items():
            if shard != "c":
                self.assertEqual(shard, placed[name], f"{name} moved between old shards")
        self.pull("p", "--remote", f"{n2.url}/*|shards=a,b(2),c")
        self.verify("p")

    # --- faults ------------------------------------------------------------------

    def test_remote_down_or_killed_mid_build_builds_locally(self):
        redis = Redis(self)
        port = redis.port
        redis.stop()
        r = self.build("a", "--remote", f"redis://127.0.0.1:{port}|connect-timeout=500")
        self.assertEqual(r.doc["compiled"], 6, r)
        self.assertEqual(r.err.count("skipped for the rest of this run"), 1, r)
        self.verify("a")
        # killed while the build runs: compiles slowed down by a wrapper
        redis = Redis(self)
        env = {"KFORGE_NVCC": make_nvcc_wrapper(self.w.path("cuda-wrap")), "KF_WRAP_DELAY": "0.4"}
        killer = threading.Timer(1.0, redis.stop)
        killer.start()
        r = self.build("b", "-j", "1", "--remote", redis.url, env=env)
        killer.join()
        self.assertEqual((r.doc["failed"], r.doc["cached"] + r.doc["compiled"]), (0, 6), r)
        # the uploads at the end at least meet the dead server: said once
        self.assertEqual(r.err.count("skipped for the rest of this run"), 1, r)
        self.verify("b")

    def test_http_500_hang_truncated_and_garbage_never_fail_a_build(self):
        fs = FaultServer(self)
        url = f"{fs.url}/kf|operation-timeout=1500|connect-timeout=1000"
        self.build("a", "--remote", url)
        self.assertTrue(fs.blobs)
        for mode in ("500", "hang", "truncate", "garbage"):
            fs.mode = mode
            t0 = time.monotonic()
            r = self.build(f"c-{mode}", "--remote", url)
            self.assertEqual((r.doc["compiled"], r.doc["remote"]["fetched"]), (6, 0),
                             f"{mode}\n{r}")
            self.assertLess(time.monotonic() - t0, 60, f"{mode}: the remote held up the build")
            if mode == "garbage":
                self.assertEqual(r.doc["remote"]["refused"], 6, r)
                self.assertIn("its record is damaged", r.err)
            else:
                self.assertEqual(r.err.count("skipped for the rest of this run"), 1, f"{mode}\n{r}")
            self.verify(f"c-{mode}")
            self.assertEqual(self.digest(f"c-{mode}"), self.digest("a"))
            p = self.pull(f"p-{mode}", "--remote", url, expect_rc=1)
            self.assertFalse(os.path.exists(self.manifest_path(f"p-{mode}")), p)
        fs.release.set()
        fs.mode = "ok"
        self.pull("p-ok", "--remote", url)

    def test_flipped_byte_is_refused_and_rebuilt_locally(self):
        nginx = Nginx(self)
        url = f"{nginx.url}/kf"
        self.build("a", "--remote", url)
        keys = self.keys("a")
        victim_id = self.rng.choice(sorted(keys))
        obj = os.path.join(nginx.root, "kf", "cas", self.object_sha("a", keys[victim_id]))
        with open(obj, "r+b") as f:
            data = bytearray(f.read())
            at = self.rng.randrange(len(data))
            data[at] ^= 1 << self.rng.randrange(8)
            f.seek(0)
            f.write(data)
        r = self.build("b", "--remote", url)
        self.assertEqual((r.doc["remote"]["fetched"], r.doc["remote"]["refused"],
                          r.doc["compiled"]), (5, 1, 1), f"byte {at}\n{r}")
        self.assertIn(f"{victim_id}: remote entry {keys[victim_id]} refused: its object has SHA-256",
                      r.err)
        self.verify("b")
        self.assertEqual(self.digest("b"), self.digest("a"))
        p = self.pull("p", "--remote", url, expect_rc=1)
        self.assertIn(victim_id, p.err)
        self.assertFalse(os.path.exists(self.manifest_path("p")))
        self.assertNotIn(keys[victim_id], self.entry_dirs("p"))
        self.verify("p")

    def test_a_pull_in_chunks_refuses_only_the_bad_entries(self):
        # 18 entries, more than the 16 whose contents a pull holds at once
        # (gen/remote_entry.c, CONTENT_CHUNK): a flipped byte in an entry of
        # each chunk refuses those two and publishes the other sixteen
        path = self.w.path(FIXTURE_MODEL)
        with open(path) as f:
            desc = json.load(f)
        desc["widths"] = [1, 2, 3, 4, 5, 6]
        with open(path, "w") as f:
            json.dump(desc, f)
        nginx = Nginx(self)
        url = f"{nginx.url}/kf"
        self.build("a", "--remote", url)
        keys = self.keys("a")
        self.assertEqual(len(keys), 18)
        order = sorted(keys.values())  # a pull's order
        victims = {order[self.rng.randrange(16)], order[self.rng.randrange(16, 18)]}
        for key in victims:
            obj = os.path.join(nginx.root, "kf", "cas", self.object_sha("a", key))
            with open(obj, "r+b") as f:
                data = bytearray(f.read())
                data[self.rng.randrange(len(data))] ^= 0x40
                f.seek(0)
                f.write(data)
        p = self.pull("p", "--remote", url, expect_rc=1)
        for kid, key in keys.items():
            if key in victims:
                self.assertIn(f"{kid}: remote entry {key} refused: its object has SHA-256",
                              p.err, f"salt {self.salt}")
        self.assertFalse(os.path.exists(self.manifest_path("p")))
        self.assertEqual(self.entry_dirs("p"), set(keys.values()) - victims, f"salt {self.salt}")
        self.verify("p")

    def test_replayed_record_and_meta_of_another_key_are_refused(self):
        nginx = Nginx(self)
        url = f"{nginx.url}/kf"
        self.build("a", "--remote", url)
        keys = self.keys("a")
        ida, idb = self.rng.sample(sorted(keys), 2)
        rec = {i: os.path.join(nginx.root, "kf", self.ac_of(f"kforge/v1/entry/{keys[i]}"))
               for i in (ida, idb)}
        shutil.copyfile(rec[ida], rec[idb])  # b's record now is a's
        r = self.build("b", "--remote", url)
        self.assertIn(f"{idb}: remote entry {keys[idb]} refused: its record names key {keys[ida]}",
                      r.err)
        self.assertEqual(r.doc["compiled"], 1, r)
        # a record that claims b's key but names a's meta
        with open(rec[ida]) as f:
            forged = json.load(f)
        forged["key"] = keys[idb]
        with open(rec[idb], "w") as f:
            json.dump(forged, f)
        r = self.build("c", "--remote", url)
        self.assertIn(f"refused: its meta.json names key {keys[ida]}", r.err)
        self.assertEqual(self.digest("c"), self.digest("a"))
        p = self.pull("p", "--remote", url, expect_rc=1)
        self.assertIn(idb, p.err)
        self.assertFalse(os.path.exists(self.manifest_path("p")))

    def test_manifest_naming_a_missing_object_fails_the_pull(self):
        redis, nginx = Redis(self), Nginx(self)
        url = f"{nginx.url}/kf"
        self.build("a", "--remote", url)
        keys = self.keys("a")
        gone = self.rng.choice(sorted(keys))
        os.unlink(os.path.join(nginx.root, "kf", "cas", self.object_sha("a", keys[gone])))
        p = self.pull("p", "--remote", url, expect_rc=1)
        self.assertIn(f"{gone}: remote entry {keys[gone]} refused: its object is missing", p.err)
        self.assertFalse(os.path.exists(self.manifest_path("p")))
        self.verify("p")
        nomanifest = self.pull("q", "--remote", redis.url, expect_rc=1)
        self.assertIn("no manifest on the remote", nomanifest.err)

    def test_full_local_disk_leaves_nothing_half_written(self):
        redis = Redis(self)
        self.build("a", "--remote", redis.url)
        self.pull("p", "--remote", redis.url)  # creates the layout
        shutil.rmtree(self.v1("p", "objects"))
        os.unlink(self.manifest_path("p"))
        smallest = min(os.path.getsize(os.path.join(d, n))
                       for d, _, ns in os.walk(self.v1("a", "objects")) for n in ns)

        def full_disk():  # files may not grow past a limit: writes fail with EFBIG
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            limit = self.rng.randrange(1, smallest)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        argv = self.w.argv("pull", "--cache", "p", "--remote", redis.url, "--arch", ARCH, MODEL,
                           common=False)
        r = subprocess.run(argv, cwd=self.w.root, env=self.w.env, capture_output=True, text=True,
                           preexec_fn=full_disk, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("cannot write into", r.stderr)
        self.assertEqual(self.entry_dirs("p"), set())
        self.assertFalse(os.path.exists(self.manifest_path("p")))
        self.assertEqual(os.listdir(self.v1("p", "tmp")), [])
        self.verify("p")
        self.pull("p", "--remote", redis.url)  # room again
        self.assertEqual(self.digest("p"), self.digest("a"))

    def test_ls_remote_lists_manifest_and_entries(self):
        nginx = Nginx(self)
        url = f"{nginx.url}/kf"
        r = self.kf("ls", "x", "--remote", url, "--arch", ARCH, MODEL)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"manifest {MODEL}/{ARCH}: missing", r.out)
        self.build("a", "--remote", url)
        keys = self.keys("a")
        r = self.kf("ls", "x", "--remote", url, "--json", "--arch", ARCH, MODEL)
        self.assertEqual(r.rc, 0, r)
        doc = json.loads(r.out)
        self.assertEqual(doc[0]["manifest"], "6 kernels")
        sizes = {k: os.path.getsize(os.path.join(nginx.root, "kf", "cas", self.object_sha("a", k)))
                 for k in keys.values()}
        self.assertEqual({e["id"]: (e["key"], e["bytes"], e["state"]) for e in doc[0]["kernels"]},
                         {i: (k, sizes[k], "ok") for i, k in keys.items()})
        gone = self.rng.choice(sorted(keys))
        os.unlink(os.path.join(nginx.root, "kf", self.ac_of(f"kforge/v1/entry/{keys[gone]}")))
        r = self.kf("ls", "x", "--remote", url, "--arch", ARCH, MODEL)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"  {gone} {keys[gone]} -1 missing", r.out)
        self.assertEqual(r.out.count(" ok\n"), 5, r)
        self.assertFalse(os.path.exists(self.w.path("x")), "ls --remote wrote a cache")

    def test_bad_remote_configuration_is_refused_before_anything_is_written(self):
        for spec, why in (("ftp://127.0.0.1/x", "unknown scheme"),
                          ("http://127.0.0.1/*", "needs a shards= attribute"),
                          ("http://127.0.0.1/x|shards=a", "needs a '*'"),
                          ("redis://127.0.0.1:99999", "expected redis://"),
                          ("http://127.0.0.1/x|operation-timeout=0", "bad attribute"),
                          ("redis://127.0.0.1|colour=blue", "bad attribute")):
            r = self.kf("build", "a", "--remote", spec)
            self.assertEqual(r.rc, 2, r)
            self.assertIn(why, r.err, spec)
            self.assertFalse(os.path.exists(self.w.path("a")), spec)
        r = self.kf("build", "a", "--shard", "4/3")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--shard needs I/N", r.err)
        r = self.kf("pull", "a", MODEL)
        self.assertEqual(r.rc, 2, r)
        r = self.kf("pull", "a", "--arch", ARCH, "../etc", "--remote", "redis://127.0.0.1:1")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("is not a model and arch name", r.err)

    # --- signatures --------------------------------------------------------------

    def keygen(self, name):
        r = self.w.kf("keygen", name, common=False)
        self.assertEqual(r.rc, 0, r)
        with open(self.w.path(name + ".pub")) as f:
            self.assertEqual(f.read().strip(), r.out.strip())
        self.assertEqual(os.stat(self.w.path(name)).st_mode & 0o777, 0o600)
        return self.w.path(name), self.w.path(name + ".pub")

    def test_signed_entries_untrusted_unsigned_and_replayed_are_refused(self):
        redis = Redis(self)
        k1, k1pub = self.keygen("k1")
        k2, k2pub = self.keygen("k2")
        self.assertEqual(self.w.kf("keygen", "k1", common=False).rc, 2, "keygen replaced a key")
        signed, unsigned = f"{redis.url}/1", f"{redis.url}/2"
        self.build("a", "--remote", signed, "--signing-key", k1)
        self.build("u", "--remote", unsigned)
        self.pull("p1", "--remote", signed, "--trusted-keys", k1pub)
        self.verify("p1")
        # the pulled manifest keeps its signed record, which verify checks as
        # the runtime does (runtime/rt_sign.c); so does a signing build's own
        self.assertTrue(os.path.exists(self.manifest_path("p1") + ".sig"))
        for cache, key, ok in (("p1", k1pub, True), ("a", k1pub, True), ("p1", k2pub, False),
                               ("u", k1pub, False)):
            r = self.kf("verify", cache, env={"KFORGE_TRUSTED_KEYS": key})
            self.assertEqual(r.rc, 0 if ok else 1, f"{cache} {key}\n{r}")
            if not ok:
                self.assertIn("damaged: manifest", r.out)
        with open(k1pub) as f:  # a key given as hex, with another beside it
            self.pull("p1b", "--remote", signed, "--trusted-keys", f"{k2pub},{f.read().strip()}")
        r = self.pull("p2", "--remote", signed, "--trusted-keys", k2pub, expect_rc=1)
        self.assertIn("signed by untrusted key", r.err)
        r = self.pull("p3", "--remote", unsigned, "--trusted-keys", k1pub, expect_rc=1)
        self.assertIn("unsigned, and trusted keys are required", r.err)
        self.assertEqual(self.entry_dirs("p2") | self.entry_dirs("p3"), set())
        # the environment names the trusted keys as well
        r = self.kf("build", "b", "--json", "--remote", unsigned,
                    env={"KFORGE_TRUSTED_KEYS": k1pub})
        doc = json.loads(r.out.splitlines()[-1])
        self.assertEqual((doc["compiled"], doc["remote"]["refused"]), (6, 6), r)
        # a signed record of one key replayed under another
        keys = self.keys("a")
        ida, idb = self.rng.sample(sorted(keys), 2)
        cli = need("redis-cli", ["/usr/bin/redis-cli"])
        base = [cli, "-p", str(redis.port), "-n", "1"]
        rec = subprocess.run(base + ["GET", "kforge/" + self.ac_of(f"kforge/v1/entry/{keys[ida]}")],
                             capture_output=True, check=True).stdout.rstrip(b"\n")
        for forged, why in ((rec, f"its record names key {keys[ida]}"),
                            (rec.replace(keys[ida].encode(), keys[idb].encode()),
                             "does not match the content")):
            subprocess.run(base + ["-x", "SET",
                                   "kforge/" + self.ac_of(f"kforge/v1/entry/{keys[idb]}")],
                           input=forged, capture_output=True, check=True)
            cache = f"r{len(why)}"
            r = self.pull(cache, "--remote", signed, "--trusted-keys", k1pub, expect_rc=1)
            self.assertIn(why, r.err)
            self.assertNotIn(keys[idb], self.entry_dirs(cache))

    def test_an_unsigned_build_that_changes_a_signed_manifest_drops_its_signature(self):
        key, pub = self.keygen("k")
        trusted = {"KFORGE_TRUSTED_KEYS": pub}
        self.build("a", "--signing-key", key)
        sig = self.manifest_path("a") + ".sig"
        self.assertEqual(self.kf("verify", "a", env=trusted).rc, 0)
        self.build("a")  # the same manifest: its signature still covers it
        self.assertTrue(os.path.exists(sig))
        self.assertEqual(self.kf("verify", "a", env=trusted).rc, 0)
        self.salt += 1  # other keys: another manifest, which no one signed
        self.build("a")
        self.assertFalse(os.path.exists(sig), "a signature of bytes that are gone stayed")
        r = self.kf("verify", "a", env=trusted)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("unsigned (no .sig beside it)", r.out + r.err)

    # --- load --------------------------------------------------------------------

    def test_eight_builders_and_thirty_two_pullers(self):
        redis, nginx = Redis(self), Nginx(self)
        remotes = ["--remote", redis.url, "--remote", f"{nginx.url}/load"]
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            builds = list(ex.map(lambda i: self.build(f"b{i}", "-j", "1", *remotes, timeout=600),
                                 range(8)))
        compiled = sum(b.doc["compiled"] for b in builds)
        self.assertGreaterEqual(compiled, 6)
        self.assertLessEqual(compiled, 6 * 8)
        for i in range(8):
            self.verify(f"b{i}")
        with ThreadPoolExecutor(16) as ex:
            pulls = list(ex.map(
                lambda i: self.pull(f"p{i}", "--remote", redis.url if i % 2 else f"{nginx.url}/load"),
                range(32)))
        self.assertTrue(all("pulled" in p.out for p in pulls))
        want = self.digest("b0")
        for i in range(32):
            self.verify(f"p{i}")
            self.assertEqual(self.digest(f"p{i}"), want)
        self.assertLess(time.monotonic() - t0, 600)


if __name__ == "__main__":
    unittest.main()
