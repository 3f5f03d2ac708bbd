"""infra/watchdog.sh and infra/bootstrap.sh, run for real with stand-in `runpodctl`/`nvcc`
on PATH and the install steps stubbed: no network, no GPU, a few seconds."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

INFRA = Path(__file__).resolve().parent.parent / "infra"
POD_ID = "k7x2q9abc1d2e3"


def stand_in(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/usr/bin/env bash\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bindir(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    calls = tmp_path / "runpodctl.calls"
    stand_in(b, "runpodctl", f'echo "$*" >> {calls}\n')
    return b


def env_with(bindir: Path, **kw) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "MONOLITH_", "BOOTSTRAP_"))}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env.update(kw)
    return env


# ----------------------------------------------------------------------------- watchdog
def test_watchdog_stops_the_right_pod(bindir, tmp_path):
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(INFRA / "watchdog.sh")], capture_output=True, text=True, timeout=20,
                       env=env_with(bindir, RUNPOD_POD_ID=POD_ID, MAX_POD_HOURS="0.0003"))  # ~1.1 s
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "runpodctl.calls").read_text().split("\n")[0] == f"stop pod {POD_ID}"
    assert 1.0 <= time.monotonic() - t0 < 10


@pytest.mark.parametrize("env", [{}, {"RUNPOD_POD_ID": ""}, {"RUNPOD_POD_ID": POD_ID, "MAX_POD_HOURS": "six"},
                                 {"RUNPOD_POD_ID": POD_ID, "MAX_POD_HOURS": "-1"}])
def test_watchdog_refuses_bad_config(bindir, tmp_path, env):
    r = subprocess.run(["bash", str(INFRA / "watchdog.sh")], capture_output=True, text=True, timeout=10,
                       env=env_with(bindir, **env))
    assert r.returncode == 2
    assert ("RUNPOD_POD_ID" in r.stdout + r.stderr) or ("MAX_POD_HOURS" in r.stdout + r.stderr)
    assert not (tmp_path / "runpodctl.calls").exists()


def test_watchdog_retries_a_failed_stop(tmp_path):
    b = tmp_path / "bin"
    b.mkdir()
    n = tmp_path / "n"
    stand_in(b, "runpodctl", f'echo x >> {n}; [ "$(wc -l < {n})" -ge 2 ]\n')  # fails once
    r = subprocess.run(["bash", str(INFRA / "watchdog.sh")], capture_output=True, text=True, timeout=20,
                       env=env_with(b, RUNPOD_POD_ID=POD_ID, MAX_POD_HOURS="0", WATCHDOG_RETRY_S="0.1"))
    assert r.returncode == 0 and len(n.read_text().split()) == 2


# ----------------------------------------------------------------------------- bootstrap
def test_scripts_pass_shellcheck():
    """Fails (never skips) without shellcheck: `make deps` installs it, and a skipped lint would
    read as a passed one."""
    sc = shutil.which("shellcheck")
    assert sc, "shellcheck is not installed: run `make deps` (apt-get install shellcheck)"
    scripts = [INFRA / "bootstrap.sh", INFRA / "watchdog.sh", INFRA.parent / "scripts" / "deps.sh"]
    r = subprocess.run([sc, "-x", *map(str, scripts)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def origin(tmp_path):
    """A small git repo standing in for monolith's remote: it carries the infra scripts."""
    src = tmp_path / "origin"
    (src / "infra").mkdir(parents=True)
    for f in ("watchdog.sh", "bootstrap.sh"):
        shutil.copy2(INFRA / f, src / "infra" / f)
    git("init", "-q", "-b", "main", cwd=src)
    git("add", ".", cwd=src)
    git("commit", "-q", "-m", "one", cwd=src)
    return src


def test_bootstrap_twice_is_idempotent(bindir, tmp_path, origin):
    stand_in(bindir, "nvcc", 'echo "Cuda compilation tools, release 12.8, V12.8.93"\n')  # wrong release
    state, work = tmp_path / "state", tmp_path / "work" / "monolith"
    env = env_with(bindir, RUNPOD_POD_ID=POD_ID, MAX_POD_HOURS="1", MONOLITH_DIR=str(work),
                   MONOLITH_STATE_DIR=str(state))
    cmd = ["bash", str(INFRA / "bootstrap.sh"), "--stub-install", str(origin), "main"]
    pids = []
    try:
        r1 = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=env)
        assert r1.returncode == 0, r1.stderr
        pids.append(int((state / "watchdog.pid").read_text()))
        assert (work / "infra" / "watchdog.sh").is_file()
        assert "cloning" in r1.stdout and "nvcc 12.8, need 13.0" in r1.stdout
        assert "stub: would install cuda-toolkit-13-0" in r1.stdout and "stub: would pip install" in r1.stdout
        assert "watchdog started" in r1.stdout
        time.sleep(0.3)
        os.kill(pids[0], 0)  # alive

        # A new upstream commit, then a second run: fast-forwards, does not start a second watchdog.
        (origin / "README").write_text("two\n")
        git("add", ".", cwd=origin)
        git("commit", "-q", "-m", "two", cwd=origin)
        stand_in(bindir, "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.88"\n')
        r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=env)
        assert r2.returncode == 0, r2.stderr
        assert "updating" in r2.stdout and (work / "README").is_file()
        assert "nvcc 13.0 found" in r2.stdout and "would install cuda" not in r2.stdout
        assert f"watchdog already running (pid {pids[0]})" in r2.stdout
        assert int((state / "watchdog.pid").read_text()) == pids[0]
        assert 'CUDA_HOME=/usr/local/cuda-13.0' in (state / "env.sh").read_text()
        assert not (tmp_path / "runpodctl.calls").exists()  # 1 h watchdog has not fired
    finally:
        for pid in pids:  # the watchdog leads its own session (setsid): end that group only
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_bootstrap_needs_repo_and_pod_id(bindir, tmp_path, origin):
    base = dict(MONOLITH_DIR=str(tmp_path / "w"), MONOLITH_STATE_DIR=str(tmp_path / "s"),
                BOOTSTRAP_STUB_INSTALL="1")
    r = subprocess.run(["bash", str(INFRA / "bootstrap.sh")], capture_output=True, text=True, timeout=20,
                       env=env_with(bindir, **base))
    assert r.returncode != 0 and "no repository" in r.stderr
    r = subprocess.run(["bash", str(INFRA / "bootstrap.sh"), str(origin)], capture_output=True, text=True,
                       timeout=20, env=env_with(bindir, **base))
    assert r.returncode != 0 and "RUNPOD_POD_ID is not set" in r.stderr
    assert not (tmp_path / "s" / "watchdog.pid").exists()
