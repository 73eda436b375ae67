"""The runtime's signed manifests (runtime/rt_sign.c, docs/contracts.md
"Remote layout"): with KFORGE_TRUSTED_KEYS set, a manifest opens only when
<arch>.json.sig beside it covers its bytes and is signed by a trusted key.
Through the Python binding and the fake CUDA driver, with caches written by
kf_rt_fixture; the signatures are made here with libsodium itself (ctypes),
the library the runtime checks them with."""
import ctypes
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("KFORGE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "python"))
import kforge  # noqa: E402

FAKE = os.environ["KFORGE_TEST_FAKE_CUDA"]
FIXTURE = os.environ["KFORGE_TEST_FIXTURE"]
NORM = "const float* x; float* y; float eps; int rows"


def sodium():
    for name in ("libsodium.so.23", "libsodium.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:  # scripts/setup installs libsodium-dev, which kforge builds with
        raise unittest.SkipTest("libsodium is not installed")
    assert lib.sodium_init() >= 0
    return lib


class Key:
    def __init__(self, lib):
        self.lib = lib
        self.pk = ctypes.create_string_buffer(32)
        self.sk = ctypes.create_string_buffer(64)
        lib.crypto_sign_keypair(self.pk, self.sk)
        self.hex = self.pk.raw.hex()

    def sign(self, msg):
        sig = ctypes.create_string_buffer(64)
        self.lib.crypto_sign_detached(sig, None, msg, ctypes.c_ulonglong(len(msg)), self.sk)
        return sig.raw.hex()


class SignedManifest(unittest.TestCase):
    def setUp(self):
        os.environ["FAKE_CUDA_CC"] = "90"
        os.environ.pop("FAKE_CUDA_INIT_ERROR", None)
        os.environ.pop("KFORGE_TRUSTED_KEYS", None)
        self.addCleanup(os.environ.pop, "KFORGE_TRUSTED_KEYS", None)
        self.cache = tempfile.mkdtemp(prefix="kfsig-")
        self.addCleanup(shutil.rmtree, self.cache, True)
        subprocess.run([FIXTURE, self.cache, "m", "sm_90a", "1", "norm", "1,2,4", NORM],
                       check=True)
        self.manifest = os.path.join(self.cache, "v1", "manifests", "m", "sm_90a.json")
        self.lib = sodium()
        self.rng = random.Random()

    def sign(self, key, model="m", arch="sm_90a", data=None):
        """Writes the manifest's .sig as kforge writes it, signed by key."""
        if data is None:
            with open(self.manifest, "rb") as f:
                data = f.read()
        sha = hashlib.sha256(data).hexdigest()
        msg = (f"kforge-manifest-v1\nmodel={model}\narch={arch}\nsha256={sha}\n"
               f"size={len(data)}\n").encode()
        rec = {"format": 1, "type": "kforge-manifest", "model": model, "arch": arch,
               "sha256": sha, "size": len(data)}
        if key:
            rec["signature"] = {"public_key": key.hex, "ed25519": key.sign(msg)}
        with open(self.manifest + ".sig", "w") as f:
            json.dump(rec, f)
        return rec

    def open(self):
        return kforge.Runtime(self.cache, "m", driver_path=FAKE)

    def refused(self, why):
        with self.assertRaises(kforge.Error) as cm:
            self.open()
        self.assertEqual(cm.exception.status, kforge.Status.UNTRUSTED, cm.exception.reason)
        self.assertIn(why, cm.exception.reason)

    def test_no_trusted_keys_no_check(self):
        self.assertEqual(self.open().model, "m")  # no .sig, nothing required

    def test_signed_by_a_trusted_key_opens_and_anything_else_is_refused(self):
        good, other = Key(self.lib), Key(self.lib)
        os.environ["KFORGE_TRUSTED_KEYS"] = f"{other.hex},{good.hex}"
        self.refused("unsigned (no .sig beside it)")
        self.sign(None)
        self.refused("unsigned, and KFORGE_TRUSTED_KEYS requires a signature")
        self.sign(good)
        self.assertEqual(self.open().model, "m")
        pub = os.path.join(self.cache, "good.pub")  # a key file, as kforge keygen writes
        with open(pub, "w") as f:
            f.write(good.hex + "\n")
        os.environ["KFORGE_TRUSTED_KEYS"] = pub
        self.assertEqual(self.open().model, "m")
        os.environ["KFORGE_TRUSTED_KEYS"] = other.hex
        self.refused(f"signed by untrusted key {good.hex}")

    def test_edited_manifest_forged_signature_and_another_manifests_record_are_refused(self):
        key = Key(self.lib)
        os.environ["KFORGE_TRUSTED_KEYS"] = key.hex
        rec = self.sign(key)
        with open(self.manifest, "ab") as f:  # still valid JSON, other bytes
            f.write(b" " * self.rng.randrange(1, 9))
        self.refused("its bytes are not the ones its signature covers")
        rec = self.sign(key)
        sig = bytearray(bytes.fromhex(rec["signature"]["ed25519"]))
        sig[self.rng.randrange(64)] ^= 1 << self.rng.randrange(8)
        rec["signature"]["ed25519"] = sig.hex()
        with open(self.manifest + ".sig", "w") as f:
            json.dump(rec, f)
        self.refused(f"signature by key {key.hex} does not match the content")
        self.sign(key, model="other")
        self.refused("signs other/sm_90a, not this manifest")
        os.environ["KFORGE_TRUSTED_KEYS"] = "not-a-key"
        self.sign(key)
        self.refused("'not-a-key' is neither 64 hex digits nor a file")

    def test_a_signed_manifest_binds_each_object_by_sha256(self):
        key = Key(self.lib)
        os.environ["KFORGE_TRUSTED_KEYS"] = key.hex
        self.sign(key)
        self.assertEqual(self.open().model, "m")  # every object has its SHA-256
        with open(self.manifest) as f:
            doc = json.load(f)
        # an object whose checksum (XXH3-128) still matches but whose SHA-256
        # is not the signed one: what a checksum collision would give
        k = self.rng.choice(doc["kernels"])
        k["sha256"] = "%064x" % self.rng.randrange(1 << 256)
        edited = json.dumps(doc, indent=2).encode()
        with open(self.manifest, "wb") as f:
            f.write(edited)
        self.sign(key)
        self.refused(f"kernel {k['id']}: object {k['object']} does not have the SHA-256 its "
                     "signed manifest names")
        del os.environ["KFORGE_TRUSTED_KEYS"]  # nothing required: not checked
        self.assertEqual(self.open().model, "m")
        os.environ["KFORGE_TRUSTED_KEYS"] = key.hex
        for k in doc["kernels"]:  # a manifest of a kforge before SHA-256 was named
            del k["sha256"]
        with open(self.manifest, "w") as f:
            json.dump(doc, f, indent=2)
        self.sign(key)
        self.refused("its signed manifest names no SHA-256 for the object")


if __name__ == "__main__":
    unittest.main()
