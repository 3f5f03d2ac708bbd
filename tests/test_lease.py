"""scripts/lease.sh: the steps run in order in a process session of their own, each in its own
folder, and every poll returns what the finished steps wrote (no GPU: nvidia-smi may be absent)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from monolith import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "lease.sh"


def _run(args, env, timeout=60):
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


def _env(tmp_path: Path) -> tuple[dict, Path, Path]:
    lease, out = tmp_path / "lease", tmp_path / "out"
    return {**os.environ, "LEASE_DIR": str(lease), "OUT": str(out)}, lease, out


def _steps(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "q.steps"
    p.write_text(text)
    return p


def test_steps_run_in_order_each_in_its_folder_and_a_failure_does_not_stop_the_queue(tmp_path: Path):
    env, lease, out = _env(tmp_path)
    steps = _steps(
        tmp_path,
        '# a comment\n\nfirst echo one; touch "$LEASE_OUT/made"\nbad echo two; exit 3\nlast echo three\n',
    )
    r = _run(["start", str(steps)], env)
    assert r.returncode == 0 and "started 3 step(s)" in r.stdout, r.stdout + r.stderr
    r = _run(["poll", "30"], env)
    assert r.returncode == 0 and "lease: done" in r.stdout, r.stdout + r.stderr
    log = (lease / "log.txt").read_text()
    assert log.index("=== first") < log.index("=== bad") < log.index("=== last")
    assert "step bad rc=3" in log and "step last rc=0" in log
    with tarfile.open(out / "lease.tgz") as t:
        names = set(t.getnames())
        assert {"out/first/made", "out/first/log.txt", "out/bad/log.txt", "out/last/log.txt", "log.txt"} <= names
        assert t.extractfile("out/last/log.txt").read().decode().strip() == "three"


def test_a_poll_returns_the_finished_steps_while_the_queue_runs_and_skip_drops_a_waiting_step(tmp_path: Path):
    env, lease, out = _env(tmp_path)
    go = tmp_path / "go"
    steps = _steps(
        tmp_path,
        f"fast echo done-fast\nslow while [ ! -e {go} ]; do sleep 0.2; done; echo done-slow\nlater echo never\n",
    )
    assert _run(["start", str(steps)], env).returncode == 0
    r = _run(["poll", "3"], env)
    assert "lease: running slow" in r.stdout and "lease: done" not in r.stdout
    with tarfile.open(out / "lease.tgz") as t:
        assert t.extractfile("out/fast/log.txt").read().decode().strip() == "done-fast"
    assert _run(["start", str(steps)], env).returncode == 2  # one queue at a time
    assert _run(["skip", "later"], env).returncode == 0
    go.touch()
    r = _run(["poll", "30"], env)
    assert "lease: done" in r.stdout
    log = (lease / "log.txt").read_text()
    assert "step later skipped" in log and not (lease / "out" / "later").exists()


def test_bad_invocations_are_one_line_errors(tmp_path: Path):
    env, _, _ = _env(tmp_path)
    r = _run(["start", str(tmp_path / "missing.steps")], env)
    assert r.returncode == 2 and r.stdout.strip().startswith("lease: start needs a steps file")
    r = _run(["poll", "1"], env)
    assert r.returncode == 2 and "nothing started" in r.stdout
    assert _run(["--help"], env).stdout.startswith("A queue of GPU steps")
    assert _run(["start", str(_steps(tmp_path, "x true\n"))], env).returncode == 0
    r = _run(["poll", "ten"], env)
    assert r.returncode == 2 and r.stdout.strip() == "lease: poll needs a whole number of seconds (got 'ten')"


def test_a_relative_path_from_another_folder_starts_the_same_queue(tmp_path: Path):
    """The driver is the script run again after it moved to the repository root."""
    env, lease, out = _env(tmp_path)
    steps = _steps(tmp_path, "here pwd\n")
    r = subprocess.run(
        ["bash", "lease.sh", "start", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=SCRIPT.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lease: done" in _run(["poll", "30"], env).stdout
    assert (lease / "out" / "here" / "log.txt").read_text().strip() == str(REPO_ROOT)
    assert "step here rc=0" in (lease / "log.txt").read_text()


def test_shellcheck_clean():
    import shutil

    sc = shutil.which("shellcheck")
    assert sc, "shellcheck is not installed: run `make deps`"
    r = subprocess.run([sc, str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_the_committed_lease_files_name_one_step_per_line():
    for f in (REPO_ROOT / "scripts" / "leases").glob("*.steps"):
        names = [ln.split(" ", 1)[0] for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert names and len(names) == len(set(names)), f"{f.name}: step names must be unique"
        assert all(n.isidentifier() for n in names), f"{f.name}: {names}"
