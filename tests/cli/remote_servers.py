"""Real remote servers for kforge's remote-tier tests (tests/cli/test_remote.py).

Each test starts its own servers on 127.0.0.1, on free ports, with their files
in a temporary directory, and stops them when it ends (addCleanup):
  - redis-server (Debian's), no persistence;
  - nginx (Debian's) serving a WebDAV directory (PUT creates full paths);
  - FaultServer: a small Python http.server for the faults real servers do
    not produce (HTTP 500, hangs, truncated bodies, garbage), which otherwise
    stores and serves blobs like a WebDAV server.
"""
import http.server
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, seconds=15):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} at start")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on port {port} within {seconds} s")


def need(tool, paths=()):
    for p in (shutil.which(tool), *paths):
        if p and os.path.exists(p):
            return p
    # scripts/setup --test installs both; a machine without them cannot run
    # these tests, and says so
    raise unittest.SkipTest(f"{tool} is not installed (scripts/setup --test installs it)")


class Redis:
    def __init__(self, case, password=None):
        exe = need("redis-server", ["/usr/bin/redis-server"])
        self.dir = tempfile.mkdtemp(prefix="kf-redis-")
        self.port = free_port()
        argv = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--unixsocket",
                os.path.join(self.dir, "redis.sock"), "--unixsocketperm", "700"]
        if password:
            argv += ["--requirepass", password]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        case.addCleanup(self.stop)
        wait_port(self.port, self.proc, "redis-server")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.url = f"redis://{':' + password + '@' if password else ''}127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


NGINX_CONF = """
{user}
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}/tmp;
  proxy_temp_path {dir}/tmp;
  fastcgi_temp_path {dir}/tmp;
  uwsgi_temp_path {dir}/tmp;
  scgi_temp_path {dir}/tmp;
  client_max_body_size 256m;
  server {{
    listen 127.0.0.1:{port};
    root {dir}/dav;
    location / {{
      dav_methods PUT DELETE MKCOL;
      create_full_put_path on;
      dav_access user:rw;
    }}
  }}
}}
"""


class Nginx:
    """nginx with WebDAV; self.root is the directory it serves."""

    def __init__(self, case):
        exe = need("nginx", ["/usr/sbin/nginx"])
        self.dir = tempfile.mkdtemp(prefix="kf-nginx-")
        self.root = os.path.join(self.dir, "dav")
        os.makedirs(self.root)
        os.makedirs(os.path.join(self.dir, "tmp"))
        self.port = free_port()
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            # as root, nginx would serve as nobody, who cannot write here
            f.write(NGINX_CONF.format(user="user root;" if os.geteuid() == 0 else "",
                                      dir=self.dir, port=self.port))
        self.proc = subprocess.Popen([exe, "-p", self.dir, "-c", conf, "-e",
                                      os.path.join(self.dir, "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        case.addCleanup(self.stop)
        wait_port(self.port, self.proc, "nginx")
        self.url = f"http://127.0.0.1:{self.port}"

    def files(self, sub=""):
        """Relative paths of the files served under sub/."""
        out = []
        base = os.path.join(self.root, sub)
        for dirpath, _, names in os.walk(base):
            out += [os.path.relpath(os.path.join(dirpath, n), base) for n in names]
        return sorted(out)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class FaultServer:
    """Stores PUTs and serves GET/HEAD like WebDAV while mode is "ok";
    mode "500" answers every request with HTTP 500, "hang" never answers,
    "truncate" sends half of a body it announced whole, "garbage" answers
    every GET with 200 and random bytes."""

    def __init__(self, case):
        self.blobs = {}
        self.mode = "ok"
        self.requests = 0
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def fault(self):
                server.requests += 1
                if server.mode == "500":
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                if server.mode == "hang":
                    server.release.wait(60)
                    self.close_connection = True
                    return True
                return False

            def do_PUT(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if self.fault():
                    return
                server.blobs[self.path] = body
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                if self.fault():
                    return
                self.send_response(200 if self.path in server.blobs else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self):
                if self.fault():
                    return
                body = server.blobs.get(self.path)
                if server.mode == "garbage":
                    body = os.urandom(200)
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.mode == "truncate":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        case.addCleanup(self.stop)

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
