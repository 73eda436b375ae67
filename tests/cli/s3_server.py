"""A real S3 server for kforge's remote-tier tests: Ceph's radosgw (Debian's).

radosgw is the S3 gateway of Ceph; it is a real S3 implementation (SigV4,
x-amz-content-sha256 checks, S3 error XML), unlike a test double.  Debian 12
ships Ceph 16.2 (pacific), whose radosgw has no standalone backend (the
SQLite "dbstore" came in Ceph 17), so S3 starts the smallest Ceph cluster it
can serve from, all as foreground children in one temporary directory:

  - one ceph-mon, on a free 127.0.0.1 port (msgr2 only);
  - one ceph-osd with the "memstore" object store: objects live in its
    memory (capped at MEMSTORE_BYTES), nothing but the mon's small RocksDB
    store is written to disk; it binds 127.0.0.1 ports in Ceph's range
    6800-7300, the first ones free;
  - radosgw, beast frontend on a free 127.0.0.1 port;
  - then one S3 user with fixed keys (radosgw-admin) and one bucket.

Ceph's internal auth (cephx) is off; S3's own auth is not: a request signed
with a wrong secret is refused with 403 SignatureDoesNotMatch.  radosgw does
not check the region of a SigV4 credential scope; REGION is what AWS clients
expect by default.  Clients must send x-amz-content-sha256 (as S3 requires;
radosgw takes a missing one as UNSIGNED-PAYLOAD, so a signature made over the
body's hash then fails).

Start: about 1.5-3 s on two cores (three side by side: up to 3.5 s).  stop() kills
every process (SIGKILL: memstore would otherwise write its objects to disk on
the way down) and removes the directory.
"""
import hashlib
import hmac
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timezone

from remote_servers import free_port, need

REGION = "us-east-1"
ACCESS_KEY = "KFTESTACCESSKEY0000"
SECRET_KEY = "kfTestSecretKey0000000000000000000000000"
BUCKET = "kforge-test"
MEMSTORE_BYTES = 1 << 30
START_SECONDS = 60      # the whole start; a bound, not an expectation

# no http_proxy for 127.0.0.1
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

CEPH_CONF = """
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
# no cephx; radosgw asks for "secure" mode to the mon, which needs cephx
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
keyring = {dir}/keyring
run dir = {dir}/run
admin socket = {dir}/run/$name.asok
pid file = {dir}/run/$name.pid
log file = {dir}/log/$name.log
log to stderr = false
err to stderr = true
mon data = {dir}/mon
# each osdmap change (a pool radosgw creates, the OSD's boot) is proposed
# after this, 1 s by default: 15 of them make most of the start
paxos propose interval = 0.05
paxos min wait = 0.01
mon data avail warn = 0
mon data avail crit = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd data = {dir}/osd
osd objectstore = memstore
memstore device bytes = {memstore_bytes}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
# radosgw starts with the OSD, and may send its first op before the OSD is
# up; its objecter then looks for a newer osdmap on this tick (default 5 s)
objecter tick interval = 0.5

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {dir}/rgw
rgw thread pool size = 32
rgw enable usage log = false
"""


class S3:
    """radosgw on a one-OSD, in-memory Ceph cluster; self.url is
    http://127.0.0.1:PORT/BUCKET (path style), the bucket already exists."""

    def __init__(self, case):
        exes = {t: need(t, ["/usr/bin/" + t])
                for t in ("radosgw", "radosgw-admin", "ceph-mon", "ceph-osd",
                          "monmaptool", "ceph")}
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="kf-s3-")
        case.addCleanup(self.stop)
        t0 = time.monotonic()
        self.deadline = t0 + START_SECONDS
        for sub in ("mon", "osd", "rgw", "run", "log"):
            os.makedirs(os.path.join(self.dir, sub))
        fsid = str(uuid.uuid4())
        mon_port = free_port()
        self.port = free_port()
        self.conf = os.path.join(self.dir, "ceph.conf")
        with open(self.conf, "w") as f:
            f.write(CEPH_CONF.format(fsid=fsid, mon_port=mon_port, rgw_port=self.port,
                                     dir=self.dir, memstore_bytes=MEMSTORE_BYTES))
        with open(os.path.join(self.dir, "keyring"), "w") as f:
            f.write("")
        monmap = os.path.join(self.dir, "monmap")
        self._run([exes["monmaptool"], "--create", "--fsid", fsid,
                   "--addv", "a", f"[v2:127.0.0.1:{mon_port}]", monmap])
        self._run([exes["ceph-mon"], "-c", self.conf, "--mkfs", "-i", "a",
                   "--monmap", monmap])
        self._spawn("mon", [exes["ceph-mon"], "-c", self.conf, "-i", "a", "-f"])
        osd_uuid = str(uuid.uuid4())
        # waits for the mon's quorum, so no port polling before it
        self._run([exes["ceph"], "-c", self.conf, "--connect-timeout", "20",
                   "osd", "new", osd_uuid])
        self._run([exes["ceph-osd"], "-c", self.conf, "-i", "0", "--mkfs",
                   "--osd-uuid", osd_uuid])
        self._spawn("osd", [exes["ceph-osd"], "-c", self.conf, "-i", "0", "-f"])
        # radosgw creates its pools (needs the OSD up: a pool's first write
        # waits for it), then listens
        self._spawn("rgw", [exes["radosgw"], "-c", self.conf, "-n", "client.rgw", "-f"])
        self._wait_http(f"http://127.0.0.1:{self.port}/", "radosgw")
        self._run([exes["radosgw-admin"], "-c", self.conf, "-n", "client.admin",
                   "user", "create", "--uid=kforge", "--display-name=kforge",
                   f"--access-key={ACCESS_KEY}", f"--secret-key={SECRET_KEY}"])
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.region = REGION
        self.bucket = BUCKET
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.endpoint}/{BUCKET}"
        self._create_bucket()
        self.start_seconds = time.monotonic() - t0

    # -- helpers -------------------------------------------------------------

    def _logs(self, lines=15):
        out = []
        logdir = os.path.join(self.dir, "log")
        for name in sorted(os.listdir(logdir)) if os.path.isdir(logdir) else []:
            try:
                with open(os.path.join(logdir, name), errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                continue
            if tail:
                out.append(f"--- {name}\n" + "".join(l[:300] for l in tail))
        return "\n".join(out)

    def _fail(self, msg):
        raise AssertionError(f"S3 (radosgw) start: {msg}\nlog tails:\n{self._logs()}")

    def _left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._fail(f"not up within {START_SECONDS} s")
        return left

    def _check_alive(self):
        for what, p in self.procs:
            if p.poll() is not None:
                self._fail(f"{what} exited with {p.returncode}")

    def _run(self, argv):
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=self._left())
        except subprocess.TimeoutExpired:
            self._fail(f"{os.path.basename(argv[0])} {' '.join(argv[1:4])}... timed out")
        if r.returncode != 0:
            self._fail(f"{' '.join(argv)} exited with {r.returncode}:\n"
                       f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return r.stdout

    def _spawn(self, what, argv):
        out = open(os.path.join(self.dir, "log", what + ".stderr"), "wb")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        self.procs.append((what, p))
        return p

    def _wait_http(self, url, what):
        while True:
            self._check_alive()
            try:
                with _OPENER.open(url, timeout=min(2, self._left())):
                    return
            except OSError:
                self._left()
                time.sleep(0.1)

    def _create_bucket(self):
        # through S3 itself, signed with the keys just created: proves them
        now = datetime.now(timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        host = f"127.0.0.1:{self.port}"
        payload = hashlib.sha256(b"").hexdigest()
        headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(["PUT", f"/{self.bucket}", "",
                               "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                               signed, payload])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        req = urllib.request.Request(self.url, method="PUT", data=b"", headers={
            "x-amz-content-sha256": payload, "x-amz-date": amz_date,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                             f"SignedHeaders={signed}, Signature={sig}"})
        try:
            with _OPENER.open(req, timeout=self._left()) as r:
                r.read()
        except urllib.error.HTTPError as e:
            self._fail(f"PUT {self.url} (create bucket): HTTP {e.code} {e.read()[:500]!r}")
        except OSError as e:
            self._fail(f"PUT {self.url} (create bucket): {e}")

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)
