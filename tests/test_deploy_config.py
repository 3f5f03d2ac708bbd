"""deploy/: the image is pinned and unprivileged, every header is set where nginx cannot drop it,
nothing is published, the container answers where the proxy's line points (monolith:80), the
Dockerfile needs no BuildKit, DEPLOY.md only ever appends to the Caddyfile, and the Hub model card
says what the packs are (read from the files); and deploy/nginx.conf's cache policy as the real
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



def _listen_port() -> int:
    """The one port deploy/nginx.conf listens on (a second listen line would bind a real port in the
    loopback tests, and the proxy's line names one)."""
    ports = re.findall(r"^\s*listen\s+(\d+)\s*;", re.sub(r"#[^\n]*", "", (D / "nginx.conf").read_text()), re.M)
    assert len(ports) == 1, f"expected one `listen PORT;` in deploy/nginx.conf, found {ports}"
    return int(ports[0])


def _compose() -> dict:
    import yaml

    return yaml.safe_load((D / "compose.yml").read_text())


def _service() -> dict:
    services = _compose()["services"]
    assert list(services) == ["monolith"], f"compose.yml runs exactly the page's service, not {list(services)}"
    return services["monolith"]


def _sh_blocks(md: str) -> list[str]:
    """The ```sh blocks of a Markdown file."""
    return re.findall(r"^```sh\n(.*?)^```", md, re.M | re.S)

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
    port = _listen_port()
    assert f"EXPOSE {port}" in df and f"127.0.0.1:{port}/" in df
    compose = (D / "compose.yml").read_text()
    assert "ports:" not in compose and "read_only: true" in compose and "no-new-privileges:true" in compose
    if port < 1024:  # uid 101 binds it only where the container's namespace allows unprivileged low ports
        sysctls = _service().get("sysctls") or []
        assert "net.ipv4.ip_unprivileged_port_start=0" in sysctls, f"uid {user[-1]} cannot bind port {port}"
        # `nginx -t` binds the port too, in a build step that may not allow it: that step runs as
        # root and removes the temp dirs it created, so none stays root-owned in the image
        who = None
        for word, rest in _instructions(df):
            who = rest.strip() if word == "USER" else who
            if word == "RUN" and "nginx -t" in rest:
                assert who in ("root", "0"), f"`nginx -t` as {who} cannot bind port {port} in a build step"
                assert "rm -rf /tmp/client_temp" in rest.split("nginx -t", 1)[1], "nginx -t's temp dirs stay root-owned"


# --- deploy/nginx.conf served by the real nginx on loopback (the same wrapping as web/tests/e2e/run.mjs)

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def _wrap(server_block: str, prefix: Path, port: int, root: Path) -> str:
    """deploy/nginx.conf is a server block for the image's conf.d: put it in a main config that
    listens on 127.0.0.1:port, serves `root` and keeps every file nginx writes under `prefix`."""
    listen = re.compile(r"^\s*listen\s+\d+\s*;\s*$", re.M)
    root_re = re.compile(r"^\s*root\s+/usr/share/nginx/html\s*;\s*$", re.M)
    assert len(listen.findall(server_block)) == 1 and root_re.search(server_block), \
        "expected one `listen PORT;` and `root /usr/share/nginx/html;`"
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


# --- where the proxy points, the classic builder, the VM procedure, the Hub card (read from the files)

def test_container_answers_where_the_caddy_line_points():
    """DEPLOY.md's Caddy line (`reverse_proxy monolith:80`) names the container's alias on `edge`
    and the port nginx listens on; nothing is published on the host."""
    svc, compose = _service(), _compose()
    assert "ports" not in svc and "network_mode" not in svc
    assert compose["networks"]["edge"] == {"external": True}, "edge is the proxy's existing network"
    aliases = svc["networks"]["edge"]["aliases"]
    targets = re.findall(r"^\s*reverse_proxy\s+(\S+)\s*$", (D / "DEPLOY.md").read_text(), re.M)
    assert targets, "DEPLOY.md records the Caddy line"
    for t in targets:
        host, _, port = t.rpartition(":")
        assert host in aliases and int(port) == _listen_port(), f"Caddy points at {t}; the container is " \
            f"{aliases} on edge, listening on {_listen_port()}"
    # the procedure appends exactly that line
    assert all("reverse_proxy monolith:80" in b for b in _sh_blocks((D / "DEPLOY.md").read_text()) if "printf" in b)
    assert targets[0] == "monolith:80"


# Flags the classic (non-BuildKit) builder accepts, per instruction; any other `--flag` (RUN --mount,
# COPY --chmod/--link/--exclude/--parents, RUN --network/--security, ADD --checksum) needs BuildKit.
CLASSIC_FLAGS = {"FROM": {"platform"}, "COPY": {"from", "chown"}, "ADD": {"chown"},
                 "HEALTHCHECK": {"interval", "timeout", "start-period", "retries"}}


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) with continuation lines joined and comment lines dropped."""
    lines = [ln for ln in dockerfile.splitlines() if not ln.lstrip().startswith("#")]
    out = []
    for ln in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines():
        if ln.strip():
            word, _, rest = ln.strip().partition(" ")
            out.append((word.upper(), rest))
    return out


def _flags(rest: str) -> list[str]:
    """An instruction's own flags: the `--name[=value]` tokens right after its keyword."""
    out = []
    for tok in rest.split():
        if not tok.startswith("--"):
            break
        out.append(tok[2:].split("=")[0])
    return out


def _buildkit_only(dockerfile: str) -> list[str]:
    """What in `dockerfile` the classic builder cannot build."""
    bad = ["a `# syntax=` directive"] if re.match(r"\s*#\s*syntax\s*=", dockerfile, re.I) else []
    for word, rest in _instructions(dockerfile):
        if "<<" in rest:
            bad.append(f"a heredoc in {word}")
        bad += [f"{word} --{f}" for f in _flags(rest) if f not in CLASSIC_FLAGS.get(word, set())]
    return bad


def test_dockerfile_builds_without_buildkit():
    df = (D / "Dockerfile").read_text()
    ins = _instructions(df)
    assert ins and ins[0][0] in ("ARG", "FROM") and _flags(dict(ins)["HEALTHCHECK"]) == ["interval", "timeout"]
    assert _buildkit_only(df) == []
    # .dockerignore keeps what COPY reads (the context is deploy/)
    sources = {rest.split()[-2].rstrip("/") for word, rest in ins if word == "COPY"}
    kept = {ln[1:] for ln in (D / ".dockerignore").read_text().split() if ln.startswith("!")}
    assert sources <= kept, f".dockerignore drops a COPY source: {sources - kept}"


def test_buildkit_check_refuses_buildkit_syntax():
    """The check above fails on each BuildKit-only form (so it is not vacuous)."""
    for bad in ("RUN --mount=type=cache,target=/x true", "COPY --chmod=644 a /b", "COPY --link a /b",
                "RUN <<EOF\ntrue\nEOF", "# syntax=docker/dockerfile:1\nFROM y"):
        assert _buildkit_only("FROM x\n" + bad + "\n" if not bad.startswith("#") else bad + "\n"), bad
    assert _buildkit_only("FROM x\nCOPY --from=y --chown=1:1 a /b\nRUN test --x\n") == []


def _caddyfile_writes(md: str) -> list[str]:
    """Every shell line of DEPLOY.md that names the host Caddyfile."""
    return [ln for b in _sh_blocks(md) for ln in b.splitlines() if "$HOSTFILE" in ln and not ln.startswith("HOSTFILE=")]


def test_deploy_md_only_appends_to_the_caddyfile_and_needs_approval():
    md = (D / "DEPLOY.md").read_text()
    assert "needs the user's approval" in md.splitlines()[0]
    assert "Nothing in this file has been run" in md and md.count("[approval]") >= 5
    for ln in _caddyfile_writes(md):
        code = ln.split("  #")[0]
        assert not re.search(r"sed\s+-i|\bmv\b|\btee\b(?!\s+-a)|>\s*\"\$HOSTFILE\"|\bvi\b|\bnano\b", code), ln
        if re.search(r"\bcp\b", code):
            assert re.search(r"\bcp\b.*\"\$HOSTFILE\"\s+\"\$BACKUP\"", code), f"cp only copies the Caddyfile away: {ln}"
        for m in re.finditer(r"(?<![>\d&])>(?![>&])\s*(\S+)", code):   # a truncating redirect
            assert m.group(1).strip("\"'").startswith(("/tmp/", "/dev/null")), f"a write other than >>: {ln}"
    steps = "\n".join(_sh_blocks(md))
    compare, backup, append = (steps.index(s) for s in ('diff -u "$HOSTFILE"', 'cp -p "$HOSTFILE" "$BACKUP"', '>> "$1"'))
    validate = steps.index("caddy validate --config", append)
    reload = steps.index("caddy reload")
    assert compare < backup < append < validate < reload, "compare, back up, append, validate, reload, in that order"
    # touch no other container: compose only as project `monolith`, Caddy only exec'd into
    for ln in steps.splitlines():
        code = ln.split("  #")[0]
        assert not re.search(r"docker\s+(restart|rm|kill|system\s+prune|container\s+prune)\b", code), ln
        if re.search(r"docker\s+stop\b", code):
            assert "monolith-check" in code, ln
        if "docker compose" in code:
            assert "-p monolith" in code and "--remove-orphans" not in code, ln


def test_deploy_md_append_and_undo_keep_the_inode(tmp_path):
    """DEPLOY.md's own append and undo lines, run on a stand-in Caddyfile (sudo dropped): the block
    lands at the end of the same inode, and cutting back to the backup's length restores it byte for byte."""
    md = (D / "DEPLOY.md").read_text()
    lines = [ln.split("  #")[0].strip() for b in _sh_blocks(md) for ln in b.splitlines()]
    pick = lambda key: next(ln for ln in lines if key in ln)  # noqa: E731
    script = "\n".join([
        "set -eu", f"HOSTFILE={tmp_path}/Caddyfile", "HOST=page.example.org",
        pick("BACKUP=\"$HOSTFILE.bak-"), pick('cp -p "$HOSTFILE" "$BACKUP"'),
        pick("printf ").replace("/tmp/monolith.caddy", f"{tmp_path}/monolith.caddy"),
        pick('>> "$1"').replace("/tmp/monolith.caddy", f"{tmp_path}/monolith.caddy"),
        'stat -c %i "$HOSTFILE" > "$HOSTFILE.inode.after"', 'cat "$HOSTFILE" > "$HOSTFILE.appended"',
        pick('truncate -s "$(stat -c %s "$BACKUP")"'),
    ]).replace("sudo ", "")
    original = "example.com {\n\treverse_proxy other:8000\n}\n"
    (tmp_path / "Caddyfile").write_text(original)
    inode = (tmp_path / "Caddyfile").stat().st_ino
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout
    appended = (tmp_path / "Caddyfile.appended").read_text()
    assert appended == original + "\npage.example.org {\n\treverse_proxy monolith:80\n}\n"
    assert int((tmp_path / "Caddyfile.inode.after").read_text()) == inode, "the append kept the inode"
    assert (tmp_path / "Caddyfile").read_text() == original and (tmp_path / "Caddyfile").stat().st_ino == inode


# --- the Hub model card (prepared, not uploaded)

HUB = D / "hub" / "README.md"


def _front_matter(card: str) -> dict:
    import yaml

    m = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert m, "a model card starts with YAML front matter"
    return yaml.safe_load(m.group(1))


def _tables_after(card: str, heading: str) -> list[list[str]]:
    """Rows (cells) of the first Markdown table after `heading`."""
    rest = card[card.index(heading):]
    rows = []
    for ln in rest.splitlines()[1:]:
        if ln.startswith("|"):
            cells = [c.strip() for c in ln.strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header row


def test_model_card_names_licence_base_model_and_formats():
    from monolith.quant import fp8_layout as L8
    from monolith.quant import nvfp4_layout as L4

    card = HUB.read_text()
    fm = _front_matter(card)
    assert fm["license"] == "apache-2.0" and fm["base_model"] == "Qwen/Qwen3-0.6B"
    assert fm.get("base_model_relation") == "quantized"
    assert "Apache License 2.0" in card and "Qwen/Qwen3-0.6B" in card
    for L in (L8, L4):
        for name in (L.FORMAT, L.SCHEME, L.LAYOUT, L.FILE):
            assert name in card, f"the card names {name}"
    assert "E4M3" in card and "E2M1" in card and "per 16 weights" in card and "fp32 scale per tensor" in card
    assert "monolith pack --format fp8" in card and "monolith pack --format nvfp4" in card


def test_model_card_tensor_tables_are_the_packers_layouts():
    from monolith.quant import pack_fp8, pack_nvfp4

    card = HUB.read_text()
    for heading, want in (("### FP8 (", pack_fp8._expected_shapes(28, "fp8")),
                          ("### NVFP4 (", pack_nvfp4._expected_shapes(28))):
        rows = _tables_after(card, heading)
        got = {r[0].strip("`"): (json.loads(r[2]), r[1]) for r in rows}
        assert got == {k: (list(s), d) for k, (s, d) in want.items()}, heading


def test_model_card_quality_is_the_measured_numbers():
    """The synthetic rows are the committed results, rounded as printed; the real checkpoint's rows
    are marked unmeasured until `monolith m3/m5 --model DIR` writes them."""
    card = HUB.read_text()
    rows = _tables_after(card, "### Synthetic weights")
    assert len(rows) == 3
    for pack, engine, ppl, agree, kl, floor, gate, src in rows:
        doc = json.loads((REPO_ROOT / src.strip("`")).read_text())
        assert doc["format"] == pack.lower(), f"{src} measures {doc['format']}, the row says {pack}"
        pair = next(p for p in doc["pairs"] if p["roles"]["engine"].split(" ")[0] == engine)
        e, f, g = pair["engine"], pair["floor"], pair["gates"]
        assert ppl == f"{e['ppl_ratio']:.3f}" and agree == f"{100 * e['agreement']:.1f} %", engine
        assert kl == f"{e['kl']:.2f}" and floor == f"{100 * f['agreement']:.1f} %", engine
        assert gate == ("pass" if g["fixed_gates_pass"] else "fail"), engine
        assert doc["weights"]["kind"] == "synthetic", f"{src} is a synthetic-weights measurement"
    real = _tables_after(card, "### Qwen3-0.6B (these files)")
    assert real and all(r[2] == "NOT MEASURED" or re.fullmatch(r"\d\.\d{3}", r[2]) for r in real)
    assert "grep -n 'NOT MEASURED'" in card, "the upload steps refuse an unfilled card"
    assert "monolith m3 --model" in card and "hf upload" in card and "upload_folder" in card
