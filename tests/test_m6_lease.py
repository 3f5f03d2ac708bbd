"""scripts/m6_lease.sh, a layer over scripts/lease.sh: the final matrix's groups run as the queue's
steps in a process session of their own, in order, and a poll returns the rows so far, then the
merged matrix and the logs once they are done (gpu.sh faked)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from monolith import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "m6_lease.sh"

FAKE_GPU_SH = r"""#!/usr/bin/env bash
# the fake: `m6` writes one row per engine of M6_ENGINES, `m6merge` the matrix from the rows
mkdir -p "$OUT"
case "$1" in
  m6) IFS=, read -ra es <<<"$M6_ENGINES"; for e in "${es[@]}"; do [ "$e" = slow ] && while [ ! -e "$M6_ROWS/../go" ]; do sleep 0.2; done; echo "{\"engine\": \"$e\"}" >"$M6_ROWS/row-$e.json"; done
      echo "m6 $M6_ENGINES later=$M6_LATER_ENGINES inductor=$TORCHINDUCTOR_CACHE_DIR" ;;
  m6merge) ls "$M6_ROWS" >"$OUT/final.md"; echo '{"rows": 3}' >"$OUT/final.json"; echo merged ;;
esac
"""


def _run(args, env, timeout=60):
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


def _lease(tmp_path: Path, groups: str, **extra: str) -> tuple[dict, Path, Path]:
    """The environment of a lease over the fake gpu.sh: (env, lease dir, $OUT)."""
    fake = tmp_path / "gpu.sh"
    fake.write_text(FAKE_GPU_SH)
    lease, out = tmp_path / "lease", tmp_path / "out"
    env = {
        **os.environ,
        "M6_LEASE_DIR": str(lease),
        "M6_LEASE_GPU_SH": str(fake),
        "OUT": str(out),
        "M6_LEASE_GROUPS": groups,
        **extra,
    }
    return env, lease, out


def test_start_then_poll_runs_every_group_in_order_and_returns_the_matrix(tmp_path: Path):
    env, lease, out = _lease(tmp_path, "a,b;c", M6_LEASE_BEFORE="echo proof-first")
    r = _run(["start"], env)
    assert r.returncode == 0 and "started" in r.stdout
    r = _run(["poll", "30"], env)
    assert r.returncode == 0, r.stderr
    assert "m6-lease: done rc=0" in r.stdout and "rows, final.json/.md and logs" in r.stdout
    log = (lease / "log.txt").read_text()  # the queue's: a line per step started, with its command
    assert log.index("=== before") < log.index("=== group1") < log.index("=== group2") < log.index("=== merge")
    assert "M6_ENGINES=a,b " in log.split("=== group1")[1].splitlines()[0]
    assert "M6_ENGINES=c " in log.split("=== group2")[1].splitlines()[0]
    assert (lease / "out" / "before" / "log.txt").read_text().strip() == "proof-first"
    assert (out / "final.json").read_text().strip() == '{"rows": 3}'
    assert (out / "final.md").read_text().split() == ["row-a.json", "row-b.json", "row-c.json"]
    with tarfile.open(out / "m6rows.tgz") as t:
        assert sorted(n for n in t.getnames() if n.endswith(".json")) == [
            "rows/row-a.json",
            "rows/row-b.json",
            "rows/row-c.json",
        ]
    with tarfile.open(out / "m6logs.tgz") as t:
        assert {"log.txt", "merged", "out-1", "out/group1/log.txt", "out/merge/log.txt"} <= set(t.getnames())


def test_each_group_learns_the_later_groups_engines_and_shares_the_compile_caches(tmp_path: Path):
    """bench/m6.py starts hf-compile's warming and llama.cpp's conversions beside the first group's
    oracles: it needs the later groups' engines, and one inductor cache folder for the whole lease."""
    env, lease, _ = _lease(tmp_path, "a,b;c,hf-compile;llamacpp")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    assert _run(["start"], env).returncode == 0
    assert "m6-lease: done" in _run(["poll", "30"], env).stdout
    said = [(lease / "out" / f"group{i}" / "log.txt").read_text() for i in (1, 2, 3)]  # each group's output
    ind = f"inductor={lease}/inductor"
    assert f"m6 a,b later=c,hf-compile,llamacpp {ind}" in said[0]
    assert f"m6 c,hf-compile later=llamacpp {ind}" in said[1] and f"m6 llamacpp later= {ind}" in said[2]


def test_a_poll_before_the_end_returns_the_rows_finished_so_far(tmp_path: Path):
    env, lease, out = _lease(tmp_path, "a;slow")
    assert _run(["start"], env).returncode == 0
    for _ in range(30):  # group "slow" holds until the test lets it go: poll until it is the one running
        r = _run(["poll", "1"], env)
        if "m6-lease: running group 2/2: slow" in r.stdout:
            break
    assert r.returncode == 0 and "m6-lease: running group 2/2: slow" in r.stdout and "done" not in r.stdout
    with tarfile.open(out / "m6rows.tgz") as t:
        assert sorted(n for n in t.getnames() if n.endswith(".json")) == ["rows/row-a.json"]
    assert not (out / "final.json").exists()
    (lease / "go").touch()
    r = _run(["poll", "30"], env)
    assert "m6-lease: done rc=0" in r.stdout
    with tarfile.open(out / "m6rows.tgz") as t:
        assert sorted(n for n in t.getnames() if n.endswith(".json")) == ["rows/row-a.json", "rows/row-slow.json"]


def test_poll_without_a_start_and_a_bad_subcommand_are_one_line_refusals(tmp_path: Path):
    env = {**os.environ, "M6_LEASE_DIR": str(tmp_path / "none")}
    r = _run(["poll", "1"], env)
    assert r.returncode == 2 and r.stdout.strip() == f"m6-lease: nothing started in {tmp_path / 'none'}"
    r = _run(["bogus"], env)
    assert r.returncode == 2 and "usage" in r.stdout
    assert "usage" in _run(["--help"], env).stdout


def test_shellcheck_clean():
    import shutil

    sc = shutil.which("shellcheck")
    assert sc, "shellcheck is not installed: run `make deps`"
    r = subprocess.run([sc, str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_a_named_llamacpp_pack_must_exist_before_the_lease_starts(tmp_path: Path):
    env = {**os.environ, "M6_LEASE_DIR": str(tmp_path / "lease"), "M6_LLAMACPP": str(tmp_path / "nopack")}
    r = _run(["start"], env)
    assert r.returncode == 2 and "holds no bin/llama-bench or pack.tar.xz" in r.stdout
    assert not (tmp_path / "lease").exists()  # nothing started


def test_bad_groups_are_a_one_line_refusal_and_start_nothing(tmp_path: Path):
    for spec in ("a;;b", "a;b;", ";a", "a b,c", "a;b$(echo c)"):
        env, lease, _ = _lease(tmp_path, spec)
        r = _run(["start"], env)
        assert r.returncode == 2 and r.stdout.strip().count("\n") == 0, (spec, r.stdout)
        assert "M6_LEASE_GROUPS=" in r.stdout and "none empty" in r.stdout
        assert not lease.exists()


def test_a_multiline_before_command_is_one_step_and_blanks_around_separators_are_dropped(tmp_path: Path):
    env, lease, _ = _lease(tmp_path, " a , b ; c ", M6_LEASE_BEFORE="echo one\necho two")
    r = _run(["start"], env)
    assert r.returncode == 0 and "started 4 step(s)" in r.stdout, r.stdout  # before, 2 groups, merge
    assert "m6-lease: done rc=0" in _run(["poll", "30"], env).stdout
    assert (lease / "out" / "before" / "log.txt").read_text().split() == ["one", "two"]
    assert "m6 a,b later=c " in (lease / "out" / "group1" / "log.txt").read_text()


def test_a_failed_merge_is_the_done_line_status(tmp_path: Path):
    env, _, out = _lease(tmp_path, "a")
    env["M6_LEASE_GPU_SH"] = str(tmp_path / "merge_fails.sh")
    (tmp_path / "merge_fails.sh").write_text(
        '[ "$1" = m6merge ] && exit 7; mkdir -p "$M6_ROWS"; echo "{}" >"$M6_ROWS/r.json"\n'
    )
    assert _run(["start"], env).returncode == 0
    r = _run(["poll", "30"], env)
    assert "m6-lease: done rc=7" in r.stdout and not (out / "final.json").exists()
    with tarfile.open(out / "m6rows.tgz") as t:
        assert "rows/r.json" in t.getnames()
