"""The cache as the CLI sees it: damage found by `verify` and repaired by
`build`; `gc --max-size` evicting unreferenced entries first; an unwritable
cache refused by `build` (exit 2) but still served by `keys`, `ls` and
`verify`."""
import json
import os
import re
import shutil
import subprocess
import time
import unittest

from kfhelp import FIXTURE_MODEL, HEX32, KFORGE, Work, fixture_ids, parse_keys, snapshot


KERNEL_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*/[a-z0-9_-]+/w\d+/[a-z0-9_:+-]+$")


def ls_entries(case, r, sizes=None):
    """{key: kernel id} from `kforge ls`: one line per entry with the key
    first, then (in order) the kernel id, size and last use; marker columns
    between them are allowed. sizes (a dict) receives {key: size}."""
    case.assertEqual(r.rc, 0, str(r))
    out = {}
    for line in r.out.splitlines():
        f = line.split()
        if not f or not HEX32.match(f[0]):
            continue                   # a header or total line
        ids = [x for x in f[1:] if KERNEL_ID.match(x)]
        case.assertEqual(len(ids), 1, f"ls line without one kernel id: {line!r}")
        rest = f[f.index(ids[0]) + 1:]
        case.assertTrue(rest and rest[0].isdigit(), f"ls line lacks the size after the id: {line!r}")
        case.assertGreaterEqual(len(rest), 2, f"ls line lacks the last use: {line!r}")
        case.assertNotIn(f[0], out, f"ls lists {f[0]} twice")
        out[f[0]] = ids[0]
        if sizes is not None:
            sizes[f[0]] = int(rest[0])
    return out


def damaged_lines(r):
    return [l.strip() for l in (r.out + "\n" + r.err).splitlines()
            if l.strip().startswith("damaged: ")]


class Damage(unittest.TestCase):

    def setUp(self):
        self.w = Work(self, "damage")
        self.keys = self.w.keys()
        self.assertEqual(self.w.build().summary, (6, 0, 6, 0))
        r = self.w.ok("verify")
        self.assertIn("6 entries ok", r.out + r.err)

    def test_flipped_object_byte_is_named_by_verify_and_rebuilt(self):
        w = self.w
        kid = "fx-small/copy/w2/sm_90a"
        key = self.keys[kid]
        obj = w.object_path(key)
        good = open(obj, "rb").read()
        data = bytearray(good)
        data[len(data) // 2] ^= 0x5A
        open(obj, "wb").write(bytes(data))

        r = w.kf("verify")
        self.assertEqual(r.rc, 1, f"verify must exit 1 on damage\n{r}")
        lines = damaged_lines(r)
        self.assertEqual(len(lines), 1, f"exactly the flipped entry is damaged\n{r}")
        self.assertTrue(lines[0].startswith(f"damaged: {key} {kid}:"), lines[0])

        r = w.build()
        self.assertEqual(r.summary, (6, 5, 1, 0), "build recompiles only the damaged entry")
        self.assertEqual(open(w.object_path(key), "rb").read(), good,
                         "the rebuilt object differs from the original compile")
        r = w.ok("verify")
        self.assertIn("6 entries ok", r.out + r.err)
        self.assertEqual(damaged_lines(r), [])

    def test_missing_and_truncated_objects_are_named_and_rebuilt(self):
        w = self.w
        gone, short = "fx-small/add/w1/sm_90a", "fx-small/scale/w2/sm_90a"
        os.remove(w.object_path(self.keys[gone]))
        p = w.object_path(self.keys[short])
        open(p, "r+b").truncate(os.path.getsize(p) // 3)
        r = w.kf("verify")
        self.assertEqual(r.rc, 1, str(r))
        lines = sorted(damaged_lines(r))
        self.assertEqual(len(lines), 2, str(r))
        self.assertTrue(any(l.startswith(f"damaged: {self.keys[gone]} {gone}:") for l in lines), lines)
        self.assertTrue(any(l.startswith(f"damaged: {self.keys[short]} {short}:") for l in lines), lines)
        self.assertEqual(w.build().summary, (6, 4, 2, 0))
        self.assertIn("6 entries ok", w.ok("verify").out)


class JsonResults(unittest.TestCase):

    def test_verify_json_lists_entries_ok_and_damaged_with_reasons(self):
        w = Work(self, "vjson")
        keys = w.keys()
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        kid = "fx-small/copy/w2/sm_90a"
        os.remove(w.object_path(keys[kid]))
        r = w.kf("verify", "--json")
        self.assertEqual(r.rc, 1, str(r))
        doc = json.loads(r.out)
        self.assertEqual(doc["checked"], 6)
        self.assertFalse(doc["ok"])
        by_key = {e["key"]: e for e in doc["entries"]}
        self.assertEqual(set(by_key), set(keys.values()))
        self.assertEqual([e["kernel_id"] for e in doc["entries"] if not e["ok"]], [kid])
        self.assertIn("is missing", by_key[keys[kid]]["reason"])
        self.assertEqual([(d["key"], d["kernel_id"]) for d in doc["damaged"]], [(keys[kid], kid)])
        w.build()
        doc = json.loads(w.ok("verify", "--json").out)
        self.assertTrue(doc["ok"] and all(e["ok"] for e in doc["entries"]) and not doc["damaged"])

    def test_gc_json_lists_evicted_keys_and_bytes(self):
        w = Work(self, "gcjson")
        keys = w.keys()
        w.build()
        sizes = {}
        ls_entries(self, w.kf("ls"), sizes)
        total = sum(sizes.values())
        # every entry is referenced: nothing goes, and gc says what it kept
        r = w.ok("gc", "--json", "--max-size", str(total - 1))
        doc = json.loads(r.out)
        self.assertEqual(doc["evicted"], [], str(r))
        self.assertEqual({k["key"] for k in doc["kept"]}, set(keys.values()), str(r))
        self.assertEqual(w.entries(), set(keys.values()))
        r = w.ok("gc", "--json", "--max-size", str(total - 1), "--drop-manifest", "fx-small/sm_90a")
        doc = json.loads(r.out)
        self.assertEqual(len(doc["dropped_manifests"]), 1, str(r))
        self.assertTrue(doc["dropped_manifests"][0].endswith("/v1/manifests/fx-small/sm_90a.json"),
                        str(r))
        self.assertFalse(os.path.exists(w.v1("manifests", "fx-small", "sm_90a.json")), str(r))
        self.assertEqual(len(doc["evicted"]), 1, str(r))
        gone = doc["evicted"][0]
        self.assertIn(gone["key"], set(keys.values()))
        self.assertEqual(gone["bytes"], sizes[gone["key"]])
        self.assertEqual(doc["evicted_bytes"], gone["bytes"])
        self.assertEqual(doc["remaining_bytes"], total - gone["bytes"])
        self.assertEqual(w.entries(), set(keys.values()) - {gone["key"]})

    def test_ls_kernels_json_lists_the_manifest_kernels(self):
        w = Work(self, "lsjson")
        keys = w.keys()
        w.build()
        r = w.ok("ls", "--kernels", "--json")
        doc = json.loads(r.out)
        self.assertEqual({k["id"]: k["key"] for k in doc}, keys)
        self.assertTrue(all(k["entry_ok"] and k["bytes"] > 0 and len(k["grid"]) == 3 for k in doc))


class MissingCache(unittest.TestCase):

    def test_ls_on_a_cache_that_does_not_exist_is_an_error(self):
        w = Work(self, "nols")
        w.cache = "no-such-cache"
        r = w.kf("ls")
        self.assertEqual(r.rc, 2, str(r))
        self.assertIn("no-such-cache", r.err)
        self.assertIn("error: cache ", r.err)
        self.assertIn("does not exist", r.err)
        self.assertFalse(os.path.exists(w.path("no-such-cache")))


class GarbageCollection(unittest.TestCase):

    def test_gc_evicts_unreferenced_entries_first(self):
        w = Work(self, "gc")
        keep = w.keys()
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        time.sleep(1.1)   # the other model's entries are used later
        d = w.load_json(FIXTURE_MODEL)
        d["name"] = "fx-gone"
        d["kernels"] = [{"kind": "add", "template": "fx_add", "params": {"N": 128}}]
        w.dump_json("models/fx-gone.json", d)
        gone = w.keys("models/fx-gone.json")
        self.assertEqual(w.build("models/fx-gone.json").summary, (2, 0, 2, 0))
        # the model is dropped: nothing references its (most recent) entries
        shutil.rmtree(w.v1("manifests", "fx-gone"))
        sizes = {}    # what kforge counts per entry, as `ls` reports it
        listed = ls_entries(self, w.kf("ls"), sizes)
        self.assertEqual(set(listed), set(keep.values()) | set(gone.values()))
        self.assertEqual(listed[keep["fx-small/add/w1/sm_90a"]], "fx-small/add/w1/sm_90a")
        for k in listed:
            self.assertGreaterEqual(sizes[k], os.path.getsize(w.object_path(k)),
                                    "ls size is smaller than the object")
        keep_total = sum(sizes[k] for k in keep.values())
        limit = keep_total + min(sizes[k] for k in gone.values()) - 1
        r = w.ok("gc", "--max-size", str(limit))
        self.assertEqual(w.entries(), set(keep.values()),
                         f"gc --max-size {limit} must evict exactly the unreferenced entries\n{r}")
        self.assertIn("6 entries ok", w.ok("verify").out)

        # over the limit with referenced entries only: they are kept, and
        # listed, so that the served model stays whole
        r = w.ok("gc", "--max-size", str(keep_total - 1))
        self.assertEqual(w.entries(), set(keep.values()), str(r))
        self.assertEqual(sum(1 for l in r.out.splitlines() if l.startswith("kept ")
                             and l.endswith("(referenced by a manifest)")), 6, str(r))
        self.assertIn("6 entries ok", w.ok("verify").out)
        # told to drop the model's manifest: it goes first, then least
        # recently used entries until the objects fit, and no more than that
        r = w.ok("gc", "--max-size", str(keep_total - 1), "--drop-manifest", "fx-small")
        self.assertFalse(os.path.exists(w.v1("manifests", "fx-small")), str(r))
        left = w.entries()
        self.assertEqual(len(left), 5, f"one eviction brings the total under the limit\n{r}")
        self.assertLessEqual(sum(sizes[k] for k in left), keep_total - 1)
        self.assertEqual(set(ls_entries(self, w.kf("ls"))), left)


class UnwritableCache(unittest.TestCase):

    def test_cache_under_a_regular_file_is_refused_by_build(self):
        # a path whose parent is a regular file: mkdir fails with ENOTDIR even
        # for root, so this holds in CI containers running as root
        w = Work(self, "nocache")
        w.write("blocker", "a regular file, not a directory\n")
        w.cache = "blocker/cache"
        keys = w.keys()          # keys writes nothing, so it works
        self.assertEqual(set(keys), fixture_ids())
        r = w.kf("build", FIXTURE_MODEL)
        self.assertEqual(r.rc, 2, f"an unwritable cache is bad input (exit 2)\n{r}")
        self.assertIn("blocker/cache", r.err, "the message must name the cache directory")
        self.assertIn("error", r.err)
        self.assertTrue(os.path.isfile(w.path("blocker")))

    def test_read_only_cache_refused_by_build_served_by_keys_ls_verify(self):
        w = Work(self, "rocache")
        keys = w.keys()
        self.assertEqual(w.build().summary, (6, 0, 6, 0))
        user = None
        if os.geteuid() == 0:
            # root ignores permission bits; run kforge as "nobody" against the
            # root-owned cache (dirs 0755, files 0644), the way a server reads
            # an image's cache it does not own
            user = 65534
            for dirpath, dirnames, filenames in os.walk(w.root):
                os.chmod(dirpath, 0o755)
                for n in filenames:
                    p = os.path.join(dirpath, n)
                    if not os.path.islink(p):
                        os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
            os.makedirs(w.path("bin"))
            shutil.copy2(KFORGE, w.path("bin", "kforge"))
            os.chmod(w.path("bin", "kforge"), 0o755)
            os.makedirs(w.path("out-ro"))
            os.chown(w.path("out-ro"), user, user)
        else:
            os.makedirs(w.path("out-ro"))
            for dirpath, dirnames, filenames in os.walk(w.path(w.cache)):
                os.chmod(dirpath, 0o555)
                for n in filenames:
                    os.chmod(os.path.join(dirpath, n), 0o444)
        w.out = "out-ro"
        kf = w.kf
        if user is not None:
            w.kforge, w.user = w.path("bin", "kforge"), user
            # the setup really is unwritable for that user
            probe = subprocess.run(["touch", w.v1("probe")], user=user, group=user,
                                   extra_groups=[], capture_output=True)
            self.assertNotEqual(probe.returncode, 0, "the cache is writable by the test user")
        before = snapshot(w.path(w.cache))

        r = kf("keys", FIXTURE_MODEL)
        self.assertEqual(r.rc, 0, str(r))
        self.assertEqual(parse_keys(self, r.out), keys)
        r = kf("ls", "--cache", w.cache, common=False)
        self.assertEqual(set(ls_entries(self, r)), set(keys.values()))
        r = kf("verify", "--cache", w.cache, common=False)
        self.assertEqual(r.rc, 0, str(r))
        self.assertIn("6 entries ok", r.out + r.err)
        # everything is there: warm and build compile nothing and succeed
        for cmd in ("warm", "build"):
            r = kf(cmd, FIXTURE_MODEL)
            self.assertEqual(r.rc, 0, f"{cmd} on a complete read-only cache must succeed\n{r}")
            self.assertEqual(r.summary, (6, 6, 0, 0), str(r))
        self.assertEqual(snapshot(w.path(w.cache)), before, "a complete cache was written")

        # a build that has something to compile
        d = w.load_json(FIXTURE_MODEL)
        d["kernels"][2]["params"]["STRIDE"] = 4
        w.dump_json("models/fx-new.json", d)
        if user is not None:
            os.chmod(w.path("models/fx-new.json"), 0o644)
        for cmd in ("build", "warm"):
            r = kf(cmd, "models/fx-new.json")
            self.assertEqual(r.rc, 2, f"{cmd} on an unwritable cache must exit 2\n{r}")
            self.assertIn(w.cache, r.err, "the message must name the cache directory")
            self.assertIn("not writable", r.err)
            self.assertIn("lacks fx-small/", r.err, "the message must name a kernel the cache lacks")
        self.assertEqual(snapshot(w.path(w.cache)), before)


if __name__ == "__main__":
    unittest.main()
