"""deploy/: the image is pinned and unprivileged, every header is set where nginx cannot drop it,
nothing is published (read from the files); and deploy/nginx.conf's cache policy as the real
nginx serves it on loopback (the browser tests run the built page against it too)."""
import gzip
import http.client
import json
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from monolith import REPO_ROOT

D = REPO_ROOT / "deploy"


def _blocks(conf: str, keyword: str) -> list[str]:
    """Bodies of `keyword ... { ... }` blocks (brace matching, comments removed)."""
    text = re.sub(r"#[^\n]*", "", conf)
    out = []
    for m in re.finditer(rf"\b{keyword}\b[^{{;]*\{{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


def test_no_location_drops_the_security_headers():
    conf = (D / "nginx.conf").read_text()
    locations = _blocks(conf, "location")
    assert locations, "no location blocks found"
    for body in locations:
        assert "add_header" not in body, f"a location with its own add_header drops the server's headers:\n{body}"
    server = _blocks(conf, "server")[0]
    for h in ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options", "Referrer-Policy"):
        assert re.search(rf"add_header {h} .* always;", server), h
    csp = re.search(r'add_header Content-Security-Policy "([^"]+)"', server).group(1)
    assert "frame-ancestors 'none'" in csp and "connect-src 'self'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_image_is_pinned_and_unprivileged():
    df = (D / "Dockerfile").read_text()
    image = re.search(r"^ARG NGINX_IMAGE=(\S+)", df, re.M).group(1)
    assert re.fullmatch(r"[\w./-]+:\d+\.\d+[\w.-]*@sha256:[0-9a-f]{64}", image), f"not pinned by version and digest: {image}"
    assert "unprivileged" in image
    user = re.findall(r"^USER (\S+)", df, re.M)
    assert user and user[-1] not in ("0", "root"), "the image must not run as root"
    port = int(re.search(r"^\s*listen (\d+);", (D / "nginx.conf").read_text(), re.M).group(1))
    assert port >= 1024 and f"EXPOSE {port}" in df and f"127.0.0.1:{port}/" in df
    compose = (D / "compose.yml").read_text()
    assert "ports:" not in compose and "read_only: true" in compose and "no-new-privileges:true" in compose


# --- deploy/nginx.conf served by the real nginx on loopback (the same wrapping as web/tests/e2e/run.mjs)

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def _wrap(server_block: str, prefix: Path, port: int, root: Path) -> str:
    """deploy/nginx.conf is a server block for the image's conf.d: put it in a main config that
    listens on 127.0.0.1:port, serves `root` and keeps every file nginx writes under `prefix`."""
    listen = re.compile(r"^\s*listen\s+8080\s*;\s*$", re.M)
    root_re = re.compile(r"^\s*root\s+/usr/share/nginx/html\s*;\s*$", re.M)
    assert listen.search(server_block) and root_re.search(server_block), "expected `listen 8080;` and `root /usr/share/nginx/html;`"
    block = root_re.sub(f"    root {root};", listen.sub(f"    listen 127.0.0.1:{port};", server_block))
    temps = "".join(f"  {t}_temp_path {prefix}/{t};\n" for t in TEMPS)
    return (f"daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\n"
            f"events {{ worker_connections 64; }}\nhttp {{\n  include /etc/nginx/mime.types;\n"
            f"  default_type application/octet-stream;\n  access_log off;\n{temps}{block}\n}}\n")


@pytest.fixture(scope="module")
def nginx():
    """nginx with deploy/nginx.conf on a free loopback port, serving a small site: a page, an
    asset, the manifest and one precompressed trace (only traces/t.json.gz exists)."""
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed (`make deps` installs Debian's)")
    tmp = Path(tempfile.mkdtemp(prefix="monolith-nginx-"))
    try:
        root, prefix = tmp / "site", tmp / "prefix"
        for d in (root / "assets", root / "traces", root / "data", *(prefix / t for t in TEMPS)):
            d.mkdir(parents=True)
        (root / "index.html").write_text("<!doctype html><title>t</title>")
        (root / "assets" / "app-1234.js").write_text("export {};\n")
        (root / "data" / "manifest.json").write_text('{"schema": "monolith-site/1"}')
        trace = gzip.compress(json.dumps({"format": "monolith-xray", "pad": "x" * 4000}).encode(), mtime=0)
        (root / "traces" / "t.json.gz").write_bytes(trace)
        for p in (tmp, root, *root.rglob("*")):   # nginx's worker may run as another user
            p.chmod(0o755 if p.is_dir() else 0o644)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        conf = prefix / "nginx.conf"
        conf.write_text(_wrap((D / "nginx.conf").read_text(), prefix, port, root))
        check = subprocess.run([NGINX, "-t", "-p", str(prefix), "-c", str(conf)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        proc = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf)], stderr=subprocess.PIPE)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    assert proc.poll() is None, proc.stderr.read().decode()
                    time.sleep(0.05)
            yield port, trace
        finally:
            proc.send_signal(signal.SIGQUIT)
            proc.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _get(port: int, path: str, **headers: str):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def test_nginx_never_caches_a_404(nginx):
    """A missing trace (or asset, or data file, or page) is answered with Cache-Control: no-store,
    not the path's long max-age: it may exist after the next deploy (issue 44, low item)."""
    port, _ = nginx
    for path in ("/traces/nope.json", "/traces/nope.json.gz", "/assets/nope-1234.js", "/data/nope.json", "/nope.html"):
        status, h, _ = _get(port, path, **{"Accept-Encoding": "gzip"})
        assert status == 404, path
        assert h.get("cache-control") == "no-store", f"{path}: Cache-Control {h.get('cache-control')!r}"
        assert "default-src 'none'" in h.get("content-security-policy", ""), f"{path}: the security headers stay"


def test_nginx_keeps_the_cache_policy_and_gzip_static(nginx):
    port, trace = nginx
    status, h, body = _get(port, "/traces/t.json", **{"Accept-Encoding": "gzip"})
    assert status == 200 and h.get("content-encoding") == "gzip" and body == trace, "gzip_static serves t.json.gz as t.json"
    assert h["cache-control"] == "public, max-age=3600"
    status, h, body = _get(port, "/traces/t.json.gz")
    assert status == 200 and body == trace and h["cache-control"] == "public, max-age=3600"
    # a revalidation keeps the policy of the file it revalidates
    status, h, _ = _get(port, "/traces/t.json.gz", **{"If-Modified-Since": h["last-modified"]})
    assert status == 304 and h["cache-control"] == "public, max-age=3600"
    status, h, _ = _get(port, "/assets/app-1234.js")
    assert status == 200 and h["cache-control"] == "public, max-age=31536000, immutable"
    status, h, _ = _get(port, "/data/manifest.json")
    assert status == 200 and h["cache-control"] == "no-cache"
    status, h, _ = _get(port, "/")
    assert status == 200 and "cache-control" not in h
    assert re.search(r"^\s*gzip_static on;", (D / "nginx.conf").read_text(), re.M)
