"""deploy/ without docker or nginx (the browser tests run the real nginx): the image is pinned
and unprivileged, every header is set where nginx cannot drop it, and nothing is published."""
import re

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
