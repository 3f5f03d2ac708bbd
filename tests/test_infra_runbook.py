"""The runbook (docs/RUNBOOK.md) walked offline: the runpod module is a fake that records every
call, and `Shell.run` (every ssh) is a fake that answers like a pod. Checks each documented
command's effect, and that the one-command walk stops the pod at the end, on failure too."""
from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from monolith import REPO_ROOT, cli_pod
from monolith.errors import MonolithError
from monolith.infra import runbook as rb

POD = "pod123abc"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFake test@host"


class FakeRunpod(types.ModuleType):
    """The runpod SDK's functions that infra/pod.py calls, recording each call."""

    def __init__(self, stop_fails=False):
        super().__init__("runpod")
        self.calls, self.api_key, self.stop_fails = [], None, stop_fails

    def get_gpus(self, api_key=None):
        self.calls.append(("get_gpus",))
        return [{"id": "NVIDIA GeForce RTX 5090", "displayName": "RTX 5090", "memoryInGb": 32},
                {"id": "NVIDIA H200", "displayName": "H200", "memoryInGb": 141}]

    def create_pod(self, name, image, gpu, **kw):
        self.calls.append(("create_pod", name, gpu, tuple(kw["allowed_cuda_versions"])))
        return {"id": POD, "machine": {"podHostId": "host1"}}

    def get_pod(self, pod_id, api_key=None):
        self.calls.append(("get_pod", pod_id))
        return {"id": pod_id, "name": "monolith-sm120", "desiredStatus": "RUNNING",
                "machine": {"gpuDisplayName": "RTX 5090"},
                "runtime": {"ports": [{"privatePort": 22, "publicPort": 22001, "ip": "203.0.113.7",
                                       "isIpPublic": True, "type": "tcp"}]}}

    def get_pods(self, api_key=None):
        return [self.get_pod(POD)]

    def stop_pod(self, pod_id):
        self.calls.append(("stop_pod", pod_id))
        if self.stop_fails:
            raise RuntimeError("API hiccup")
        return {"id": pod_id, "desiredStatus": "EXITED"}

    def terminate_pod(self, pod_id):
        self.calls.append(("terminate_pod", pod_id))


class FakePod(rb.Shell):
    """Answers ssh argvs as a pod would; `fail` maps a substring of the remote command to an exit
    status. The pull's tar stream holds two results files and a page trace."""

    def __init__(self, fail=None):
        self.remote, self.fail = [], fail or {}

    def run(self, argv, *, log=None, stdin=None, stdout_to=None):
        assert argv[0] == "ssh" and "root@203.0.113.7" in argv and argv[argv.index("-p") + 1] == "22001"
        cmd = argv[-1]
        self.remote.append(cmd)
        if stdin is not None:
            assert Path(stdin).is_file()
        for k, rc in self.fail.items():
            if k in cmd:
                return rc
        if stdout_to is not None:
            assert "git ls-files" in cmd and "tar" in cmd
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tf:
                for name, body in (("results/m0_probes.json", b'{"ok": true}'), ("results/m1_baselines.md", b"# m1"),
                                   ("web/public/traces/bf16-upstream.json.gz", b"gz")):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(body)
                    tf.addfile(ti, io.BytesIO(body))
            Path(stdout_to).write_bytes(buf.getvalue())
        if log is not None:
            Path(log).write_text(f"ran {cmd}\n")
        return 0


def _small_bundle(repo, branch, path):
    path.write_bytes(b"# v2 git bundle (fake)\n")
    return path


@pytest.fixture
def real_bundle():
    return True


@pytest.fixture
def env(monkeypatch, tmp_path, request):
    fake = FakeRunpod()
    monkeypatch.setitem(sys.modules, "runpod", fake)
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_FAKEKEY0123456789ABCDEFGHIJKLMNOP")
    monkeypatch.setenv("MONOLITH_SSH_PUBLIC_KEY", SSH_KEY)
    monkeypatch.setenv("HOME", str(tmp_path))
    data = tmp_path / "data"
    data.mkdir()
    (data / rb.WIKITEXT).write_text("= Valkyria =\n")
    monkeypatch.setenv("MONOLITH_DATA_DIR", str(data))
    shell = FakePod()
    monkeypatch.setattr(rb, "Shell", lambda: shell)
    monkeypatch.setattr(rb.time, "sleep", lambda s: None)
    if "real_bundle" not in request.fixturenames:  # one walk makes the real bundle; the rest skip 3 s each
        monkeypatch.setattr(rb, "make_bundle", _small_bundle)
    return types.SimpleNamespace(fake=fake, shell=shell, tmp=tmp_path, data=data)


def _app():
    a = typer.Typer(pretty_exceptions_enable=False)
    cli_pod.register(a)
    return a


def documented_commands() -> list[str]:
    text = (REPO_ROOT / "docs" / "RUNBOOK.md").read_text()
    block = text[text.index("<!-- runbook:begin -->"):text.index("<!-- runbook:end -->")]
    return [ln.strip() for ln in block.splitlines() if ln.startswith("monolith ")]


def test_the_documented_walk_runs_each_step_and_stops_the_pod(real_bundle, env):
    cmds = documented_commands()
    assert cmds[0].startswith("monolith pod create") and cmds[-1] == "monolith pod stop <pod-id>"
    runner = CliRunner()
    dest = env.tmp / "back"
    for c in cmds:
        argv = [a.replace("<pod-id>", POD) for a in shlex.split(c)][2:]   # drop "monolith pod"
        if argv[0] == "pull":
            argv += ["--dest", str(dest)]
        r = runner.invoke(_app(), ["pod", *argv])
        assert r.exit_code == 0, (c, r.output)
        if argv[0] == "create":
            assert POD in r.output
    calls = [c[0] for c in env.fake.calls]
    assert calls[:2] == ["get_gpus", "create_pod"] and env.fake.calls[1][2] == "NVIDIA GeForce RTX 5090"
    assert calls[-1] == "stop_pod" and env.fake.calls[-1][1] == POD
    remote = env.shell.remote
    assert remote[0] == "true"                                                   # wait: ssh answers
    assert any("cat > /workspace/monolith.bundle" in r for r in remote)
    assert any(f"cat > /workspace/shared/data/{rb.WIKITEXT}" in r for r in remote)
    boot = [r for r in remote if "bash /workspace/bootstrap.sh /workspace/monolith.bundle " in r]
    assert len(boot) == 1 and "/proc/1/environ" in boot[0] and f"RUNPOD_POD_ID:-{POD}" in boot[0]
    ran = [re.search(r"&& (monolith m\d.*)$", r).group(1) for r in remote if "&& monolith m" in r]
    assert ran == ["monolith m0", "monolith m1", "monolith m2", "monolith m3", "monolith m4",
                   "monolith m5 --steps pack,tests,bench,quality,xray"]
    assert all("source /workspace/.monolith/env.sh" in r and "MONOLITH_DATA_DIR=" in r
               for r in remote if "&& monolith m" in r)
    assert (dest / "results" / "m0_probes.json").read_text() == '{"ok": true}'
    assert (dest / "web" / "public" / "traces" / "bf16-upstream.json.gz").is_file()
    assert not (dest / ".pull.tgz").exists()


def test_the_documented_steps_are_the_one_command_defaults():
    steps = [c.split(" -- ", 1)[1] for c in documented_commands() if " exec " in c]
    assert tuple(steps) == rb.SM120_STEPS


def test_exec_exits_with_the_remote_status(env):
    env.shell.fail = {"monolith m1": 3}
    r = CliRunner().invoke(_app(), ["pod", "exec", POD, "--", "monolith", "m1"])
    assert r.exit_code == 3


def test_one_command_walk(env):
    r = CliRunner().invoke(_app(), ["pod", "runbook", "--dest", str(env.tmp / "back")])
    assert r.exit_code == 0, r.output
    assert [c[0] for c in env.fake.calls][-1] == "stop_pod"
    back = env.tmp / "back" / "monolith-sm120"
    assert (back / "results" / "m1_baselines.md").is_file()
    assert sorted(p.name for p in (back / "pod-logs").glob("*.log")) == [
        "01-m0.log", "02-m1.log", "03-m2.log", "04-m3.log", "05-m4.log", "06-m5.log", "bootstrap.log"]


def test_a_failed_milestone_does_not_stop_the_rest_and_the_pod_is_stopped(env):
    env.shell.fail = {"monolith m1": 1}
    w = rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data,
                   create_kwargs={"suffix": "sm120"}, say=lambda *a: None)
    assert not w.ok and w.stopped
    assert [s for s, _ in w.steps] == ["create", "push", *rb.SM120_STEPS, "pull"]
    assert dict(w.steps)["monolith m1"] == 1 and dict(w.steps)["monolith m2"] == 0
    assert env.fake.calls[-1] == ("stop_pod", POD)


def test_a_failed_bootstrap_stops_the_pod_without_running_milestones(env):
    env.shell.fail = {"bootstrap.sh /workspace": 1}
    w = rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data,
                   create_kwargs={"suffix": "sm120"}, say=lambda *a: None)
    assert w.steps[-1] == ("push", 1) and w.stopped
    assert not any("&& monolith m" in r for r in env.shell.remote)
    assert env.fake.calls[-1] == ("stop_pod", POD)


def test_an_exception_mid_walk_still_stops_the_pod(env, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rb, "pull", boom)
    with pytest.raises(KeyboardInterrupt):
        rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data,
                   create_kwargs={"suffix": "sm120"}, say=lambda *a: None)
    assert env.fake.calls[-1] == ("stop_pod", POD)


def test_a_pod_that_never_answers_is_stopped(env):
    env.shell.fail = {"true": 255}
    said = []
    w = None
    with pytest.raises(MonolithError, match="not reachable"):
        w = rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data,
                       create_kwargs={"suffix": "sm120"}, wait_s=0.0, say=said.append)
    assert w is None and env.fake.calls[-1] == ("stop_pod", POD)
    assert any("stopped pod" in s for s in said)


def test_keep_leaves_it_running_and_a_failed_stop_says_how(env):
    w = rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data, pod_id=POD,
                   keep=True, say=lambda *a: None)
    assert w.ok and not w.stopped and "stop_pod" not in [c[0] for c in env.fake.calls]
    env.fake.stop_fails = True
    said = []
    w = rb.run_all(shell=env.shell, repo=REPO_ROOT, dest_root=env.tmp / "back", data_dir=env.data, pod_id=POD,
                   say=said.append)
    assert not w.stopped and any(f"monolith pod stop {POD}" in s for s in said)


def test_pull_refuses_paths_outside_dest(env, tmp_path):
    class Evil(FakePod):
        def run(self, argv, *, log=None, stdin=None, stdout_to=None):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tf:
                ti = tarfile.TarInfo("../../escape.txt")
                ti.size = 1
                tf.addfile(ti, io.BytesIO(b"x"))
            Path(stdout_to).write_bytes(buf.getvalue())
            return 0

    t = rb.Target(POD, "monolith-sm120", "203.0.113.7", 22001)
    with pytest.raises(MonolithError, match="unreadable"):
        rb.pull(t, Evil(), tmp_path / "d", say=lambda *a: None)
    assert not (tmp_path / "escape.txt").exists()


def test_pod_env_imports_runpods_variables(tmp_path):
    """pod_env's loop, fed a fake PID-1 environment, exports RUNPOD_* and MAX_POD_HOURS only, and
    falls back to the pod id it was given."""
    env1 = tmp_path / "environ"
    env1.write_bytes(b"PATH=/x\0RUNPOD_POD_ID=fromenv\0MAX_POD_HOURS=2.5\0OTHER=no\0")
    prefix = rb.pod_env("abc").replace("/proc/1/environ", str(env1))
    out = subprocess.run(["bash", "-c", prefix + 'echo "$RUNPOD_POD_ID $MAX_POD_HOURS ${OTHER:-unset}"'],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.split() == ["fromenv", "2.5", "unset"]
    out = subprocess.run(["bash", "-c", rb.pod_env("abc").replace("/proc/1/environ", str(tmp_path / "none"))
                          + 'echo "$RUNPOD_POD_ID"'], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.strip() == "abc"


def test_remote_command_quotes_and_sets_up():
    c = rb.remote_command("monolith m0")
    assert c.startswith("set -o pipefail; cd /workspace/monolith && source /workspace/.monolith/env.sh")
    assert c.endswith("&& monolith m0")
    assert subprocess.run(["bash", "-n", "-c", c], check=False).returncode == 0


def test_the_real_shell_streams_logs_feeds_stdin_and_captures_stdout(tmp_path, capsys, monkeypatch):
    sh = rb.Shell()
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_SECRETSECRETSECRET01")
    leak = tmp_path / "leak.log"
    assert sh.run(["bash", "-c", "echo key=rpa_SECRETSECRETSECRET01"], log=leak) == 0
    assert "SECRET" not in leak.read_text() and "SECRET" not in capsys.readouterr().out
    log = tmp_path / "x.log"
    assert sh.run(["bash", "-c", "echo one; echo two >&2; exit 3"], log=log) == 3
    assert log.read_text().split() == ["one", "two"] and "one" in capsys.readouterr().out
    src = tmp_path / "in.bin"
    src.write_bytes(b"\x00\x01payload")
    got = tmp_path / "out.bin"
    assert sh.run(["cat"], stdin=src, stdout_to=got) == 0 and got.read_bytes() == b"\x00\x01payload"
    with pytest.raises(MonolithError, match="not found"):
        sh.run(["/nonexistent/ssh"])
