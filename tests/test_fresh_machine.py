"""A fresh machine (issue 13, items 1-3): `make test` installs what it needs (scripts/deps.sh for
the system tools, .venv for Python, each once), the pod extra is never installed by the main
targets, CI runs only the README's commands, and the README says what a new user needs."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from monolith import REPO_ROOT

DEPS = REPO_ROOT / "scripts" / "deps.sh"
BASH = shutil.which("bash")


def _stub(d: Path, name: str, body: str = "exit 0") -> Path:
    p = d / name
    p.write_text(f"#!{BASH}\n{body}\n")
    p.chmod(0o755)
    return p


@pytest.fixture
def machine(tmp_path):
    """A PATH holding only stand-ins: every tool present, not root, no sudo, apt-get recording."""
    b = tmp_path / "bin"
    b.mkdir()
    calls = tmp_path / "apt.calls"
    for tool in ("shellcheck", "patch", "npm", "nvcc", "xvfb-run"):
        _stub(b, tool)
    _stub(b, "node", 'case "$1" in --version) echo v20.20.2;; esac; exit 0')
    _stub(b, "python3", "exit 0")
    _stub(b, "id", "echo 1000")
    _stub(b, "apt-get", f'echo "$*" >> {calls}')
    env = {"PATH": str(b), "HOME": str(tmp_path), "CHROMIUM": str(_stub(tmp_path, "chromium")),
           "NGINX": str(_stub(tmp_path, "nginx")), "WEBKIT_DRIVER": str(_stub(tmp_path, "WebKitWebDriver")),
           "PYTHON": str(b / "python3")}
    return b, env, calls


def _deps(env):
    return subprocess.run([BASH, str(DEPS)], capture_output=True, text=True, env=env, timeout=30)


def test_deps_installs_nothing_when_everything_is_there(machine):
    _, env, calls = machine
    r = _deps(env)
    assert r.returncode == 0, r.stderr
    assert "present" in r.stdout and not calls.exists()


def test_deps_says_what_to_run_when_it_cannot_install(machine):
    b, env, calls = machine
    (b / "shellcheck").unlink()
    env["CHROMIUM"] = "/nonexistent/chromium"
    r = _deps(env)
    assert r.returncode == 1
    assert "missing chromium shellcheck; not root and sudo needs a password" in r.stderr
    assert "sudo apt-get install -y --no-install-recommends chromium shellcheck" in r.stderr
    assert not calls.exists()


def test_deps_installs_the_missing_packages_as_root(machine, tmp_path):
    b, env, calls = machine
    (b / "shellcheck").unlink()
    env["CHROMIUM"] = str(tmp_path / "later" / "chromium")
    _stub(b, "id", "echo 0")
    # apt-get "installs" by creating the tools, the way the real packages would
    cp, mkdir = shutil.which("cp"), shutil.which("mkdir")
    _stub(b, "apt-get", f'echo "$*" >> {calls}\n'
                        f'if [ "$1" = install ]; then {mkdir} -p {tmp_path}/later; {cp} {b}/npm {tmp_path}/later/chromium; '
                        f'{cp} {b}/npm {b}/shellcheck; fi')
    r = _deps(env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.read_text().splitlines() == ["update -q", "install -y -q --no-install-recommends chromium shellcheck"]
    assert "deps: installing chromium shellcheck with apt-get" in r.stdout


def test_deps_fails_when_apt_fails_or_tools_are_unusable(machine):
    b, env, calls = machine
    _stub(b, "id", "echo 0")
    _stub(b, "apt-get", 'exit 100')
    (b / "shellcheck").unlink()
    r = _deps(env)
    assert r.returncode == 1 and "apt-get update failed" in r.stderr
    _stub(b, "shellcheck")
    _stub(b, "node", 'case "$1" in --version) echo v18.19.0;; -e) exit 1;; esac')
    r = _deps(env)
    assert r.returncode == 1 and "node v18.19.0 is too old for vite 8: need >= 20.19" in r.stderr
    _stub(b, "node", 'case "$1" in --version) echo v22.1.0;; esac; exit 0')
    (b / "nvcc").unlink()
    r = _deps(env)
    assert r.returncode == 1 and "nvcc not found" in r.stderr and "CUDA 13.0" in r.stderr


def _make_n(*args, cwd=REPO_ROOT, **env):
    r = subprocess.run(["make", "-n", *args], capture_output=True, text=True, cwd=cwd, timeout=60,
                       env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_install_is_once_into_a_venv_and_without_the_pod_extra(tmp_path):
    venv = tmp_path / "v"
    first = _make_n("install", f"VENV={venv}")
    assert f"-m venv --system-site-packages {venv}" in first
    assert 'pip install --progress-bar on -e ".[dev]"' in first
    assert "--ignore-installed --no-deps" in first  # ruff's binary in .venv/bin, even when the system has ruff
    assert "infra" not in first.replace("# The pod extra", "")
    # the stamp is newer than pyproject.toml: nothing left to do, no pip at all
    (venv / "bin").mkdir(parents=True)
    (venv / ".monolith-installed").touch()
    again = _make_n("install", f"VENV={venv}")
    assert "pip" not in again
    assert "pip" not in _make_n("run", f"VENV={venv}", "CKPT=/nonexistent")  # run reuses the install


def test_make_test_installs_before_it_tests(tmp_path):
    venv = tmp_path / "v"
    out = _make_n("test", f"VENV={venv}")
    deps, pip, ruff = out.index("scripts/deps.sh"), out.index("pip install"), out.index("ruff check")
    assert deps < ruff and pip < ruff, out


def test_ci_runs_only_the_readme_commands():
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = "\n".join(re.findall(r"```\n(.*?)```", readme, re.S))
    cmds = [ln.strip() for ln in ci.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
            and not ln.startswith(("set ", "cd "))]
    assert cmds == ["make run", "make test"], cmds
    for c in cmds:
        assert re.search(rf"^{c}\b", blocks, re.M), f"{c} is not in the README's quick start"


def test_readme_tells_a_new_user_what_they_need():
    readme = (REPO_ROOT / "README.md").read_text()
    pre = readme[readme.index("## Prerequisites"):readme.index("## Results")]
    for need in ("Python ≥ 3.11", "../shared", "wikitext-2-raw-v1-test.txt", "nvcc", "node ≥ 20.19", "chromium",
                 "nginx", "shellcheck", "make deps", "torch==2.13.0", "TORCH_INDEX", "is kept", ".[infra]",
                 "meaningless", "tokens/s"):
        assert need in pre, need
    # the table's reading guide stands before the (generated) table
    guide = readme[readme.index("## Results"):readme.index("<!-- results:begin")]
    for term in ("*correctness gate*", "**implementation gate**", "*quality gate vs bf16*", "*eff. TB/s*", "*tok/J*",
                 "tol 0.5"):
        assert term in guide, term


def test_deps_names_the_webkit_driver_and_xvfb_when_missing(machine):
    """The page's WebKit smoke test needs WebKitWebDriver (webkit2gtk-driver) and xvfb-run (xvfb)."""
    b, env, calls = machine
    (b / "xvfb-run").unlink()
    env["WEBKIT_DRIVER"] = "/nonexistent/WebKitWebDriver"
    r = _deps(env)
    assert r.returncode == 1
    assert "sudo apt-get install -y --no-install-recommends webkit2gtk-driver xvfb" in r.stderr
