"""The pod runbook's steps (docs/RUNBOOK.md): wait for a pod, ship this checkout to it and bootstrap,
run commands there, copy back what they wrote, and the whole walk in one call that always stops
the pod at the end, on failure too.

Every step talks to the pod through `ssh` (OpenSSH, the user's key) and nothing else: no rsync or
scp on either side. Commands are argv lists handed to `Shell.run`, which tests replace, so the walk
can be checked offline with the runpod SDK faked. Secrets never appear in an argv: the pod's SSH
endpoint comes from the API, the key from the user's ssh agent or ~/.ssh.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from monolith.errors import MonolithError
from monolith.infra import pod as podlib

REMOTE_DIR = "/workspace/monolith"
REMOTE_DATA = "/workspace/shared/data"          # ../shared/data beside the pod's checkout
STATE = "/workspace/.monolith"
WIKITEXT = "wikitext-2-raw-v1-test.txt"
# What runs on an RTX 5090 / RTX PRO 6000: every milestone that measures a kernel. The streaming
# variants launch there in the sm_120 configuration (a 4-slot ring within 99 KB per block, picked by
# the engine from the device). m5 packs NVFP4 with the committed sensitivity map (its sweep is an
# H200 study, not a per-GPU step).
SM120_STEPS = (
    "monolith m0",
    "monolith m1",
    "monolith m2",
    "monolith m3",
    "monolith m4",
    "monolith m5 --steps pack,tests,bench,quality,xray",
)
# What the milestones write: results files, X-ray raws and summaries, timelines (results/), and the
# page's traces (web/public/traces).
PULLED = ("results", "web/public/traces")
SSH_OPTS = ("-o", "StrictHostKeyChecking=accept-new", "-o", "ServerAliveInterval=30", "-o", "ServerAliveCountMax=6",
            "-o", "BatchMode=yes")


class Shell:
    """Runs one local argv, streaming its output to the terminal and to `log` (if given); an
    optional `stdin` file is fed to it and `stdout_to` receives its raw stdout instead. Returns
    the exit status. Tests replace this class's `run`."""

    def run(self, argv: list[str], *, log: Path | None = None, stdin: Path | None = None,
            stdout_to: Path | None = None) -> int:
        fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
        try:
            if stdout_to is not None:
                with open(stdout_to, "wb") as out:
                    return subprocess.run(argv, stdin=fin, stdout=out, check=False).returncode
            proc = subprocess.Popen(argv, stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            logf = open(log, "ab") if log else None
            try:
                for line in proc.stdout:
                    text = podlib.redact(line.decode(errors="replace"))  # the terminal and the log alike
                    sys.stdout.write(text)
                    sys.stdout.flush()
                    if logf:
                        logf.write(text.encode())
            finally:
                if logf:
                    logf.close()
            return proc.wait()
        except FileNotFoundError as e:
            raise MonolithError(f"{argv[0]} not found: {e}") from None
        finally:
            if stdin:
                fin.close()


@dataclass
class Target:
    pod_id: str
    name: str
    host: str
    port: int
    gpu: str = ""

    def ssh(self, remote: str) -> list[str]:
        return ["ssh", *SSH_OPTS, "-p", str(self.port), f"root@{self.host}", remote]


def target(pod_id: str) -> Target:
    p = podlib.get(pod_id)
    info = podlib.ssh_info(p)
    return Target(pod_id, str(p.get("name")), info["host"], int(info["port"]),
                  str((p.get("machine") or {}).get("gpuDisplayName") or ""))


def wait(pod_id: str, shell: Shell, timeout_s: float = 900.0, poll_s: float = 10.0, say=print) -> Target:
    """Until the pod is RUNNING with a public SSH port and `ssh true` answers."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            t = target(pod_id)
            if shell.run(t.ssh("true")) == 0:
                say(f"pod {pod_id} answers on ssh root@{t.host} -p {t.port}")
                return t
            last = "ssh did not answer yet"
        except MonolithError as e:
            last = str(e)
        if time.monotonic() >= deadline:
            raise MonolithError(f"pod {pod_id} not reachable after {timeout_s:.0f} s ({last}); "
                                f"`monolith pod stop {pod_id}` stops its billing")
        say(f"waiting for pod {pod_id}: {last}")
        time.sleep(poll_s)


def remote_command(cmd: str, remote_dir: str = REMOTE_DIR) -> str:
    """`cmd` run in the pod's checkout with the toolkit bootstrap chose (env.sh) and the shared data."""
    return (f"set -o pipefail; cd {shlex.quote(remote_dir)} && source {STATE}/env.sh && "
            f"export MONOLITH_DATA_DIR={REMOTE_DATA} && {cmd}")


def pod_env(pod_id: str) -> str:
    """Shell prefix giving an SSH session the variables RunPod set for the container (its PID 1):
    RUNPOD_POD_ID and the pod-scoped key runpodctl uses, MAX_POD_HOURS for the watchdog. An SSH
    login does not always inherit them; the pod id is known here in any case."""
    return ("while IFS= read -r -d '' kv; do case \"$kv\" in RUNPOD_*=*|MAX_POD_HOURS=*) export \"$kv\";; esac; "
            "done 2>/dev/null < /proc/1/environ; "
            f"export RUNPOD_POD_ID=\"${{RUNPOD_POD_ID:-{shlex.quote(pod_id)}}}\"; ")


def make_bundle(repo: Path, branch: str, path: Path) -> Path:
    """`branch` of `repo` as one git bundle file (bootstrap.sh clones from it)."""
    r = subprocess.run(["git", "-C", str(repo), "bundle", "create", str(path), branch], capture_output=True,
                       text=True, check=False)
    if r.returncode != 0:
        raise MonolithError(f"git bundle of {branch} failed: {r.stderr.strip()[-300:]}")
    return path


def push(t: Target, shell: Shell, repo: Path, data_dir: Path | None, work: Path, say=print) -> None:
    """Ship HEAD of this checkout (a git bundle), bootstrap.sh and the WikiText file over ssh, then
    run bootstrap on the pod. Raises MonolithError when a step fails."""
    branch = subprocess.run(["git", "-C", str(repo), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "main"
    if branch == "HEAD":
        raise MonolithError("this checkout is on a detached HEAD: check out a branch to ship")
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    if dirty:
        say("note: uncommitted changes are not shipped (the pod gets the last commit of " + branch + ")")
    work.mkdir(parents=True, exist_ok=True)
    bundle = make_bundle(repo, branch, work / "monolith.bundle")
    steps = [("bundle", f"mkdir -p {STATE} && cat > /workspace/monolith.bundle", bundle),
             ("bootstrap.sh", "cat > /workspace/bootstrap.sh", repo / "infra" / "bootstrap.sh")]
    wt = (data_dir / WIKITEXT) if data_dir else None
    if wt is not None and wt.is_file():
        steps.append(("WikiText-2", f"mkdir -p {REMOTE_DATA} && cat > {REMOTE_DATA}/{WIKITEXT}", wt))
    else:
        say(f"note: no {WIKITEXT} under --data (MONOLITH_DATA_DIR): the quality measures on the pod will refuse")
    for what, remote, local in steps:
        say(f"push: {what}")
        if shell.run(t.ssh(remote), stdin=local) != 0:
            raise MonolithError(f"copying {what} to pod {t.pod_id} failed")
    say("push: bootstrap (clone, driver check, CUDA 13.0, pip install, watchdog)")
    if shell.run(t.ssh(pod_env(t.pod_id) + f"bash /workspace/bootstrap.sh /workspace/monolith.bundle "
                       f"{shlex.quote(branch)}"),
                 log=work / "bootstrap.log") != 0:
        raise MonolithError(f"bootstrap failed on pod {t.pod_id} (log: {work / 'bootstrap.log'})")


def run_step(t: Target, shell: Shell, cmd: str, log: Path | None) -> int:
    return shell.run(t.ssh(remote_command(cmd)), log=log)


def pull(t: Target, shell: Shell, dest: Path, say=print) -> list[str]:
    """Copy every file under PULLED that the pod's commands created or changed (git's view in the
    pod's checkout) into `dest`, keeping paths. Returns the paths copied."""
    dest.mkdir(parents=True, exist_ok=True)
    tgz = dest / ".pull.tgz"
    listing = "git ls-files -z --modified --others --exclude-standard -- " + " ".join(PULLED)
    cmd = f"cd {REMOTE_DIR} && {listing} | tar --null -T - -czf -"
    if shell.run(t.ssh(cmd), stdout_to=tgz) != 0:
        raise MonolithError(f"copying results back from pod {t.pod_id} failed")
    try:
        with tarfile.open(tgz, "r:gz") as tf:
            names = [m.name for m in tf.getmembers() if m.isfile()]
            tf.extractall(dest, filter="data")  # refuses absolute paths and ..
    except tarfile.TarError as e:
        raise MonolithError(f"the archive from pod {t.pod_id} is unreadable or unsafe: {e}") from None
    finally:
        tgz.unlink(missing_ok=True)
    say(f"pull: {len(names)} files into {dest}")
    return names


@dataclass
class Walk:
    """What `run_all` did: each step's name and exit status, in order."""
    pod_id: str | None = None
    steps: list[tuple[str, int]] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.pod_id is not None and all(rc == 0 for _s, rc in self.steps)


def run_all(*, shell: Shell, repo: Path, dest_root: Path, data_dir: Path | None, commands=SM120_STEPS,
            pod_id: str | None = None, create_kwargs: dict | None = None, keep: bool = False,
            wait_s: float = 900.0, poll_s: float = 10.0, say=print) -> Walk:
    """The runbook in one call: create (or take `pod_id`), wait, push + bootstrap, each command
    (a failed command does not stop the next), pull, and stop the pod unless `keep`, whatever
    happened before (a failed step, an exception, Ctrl-C)."""
    w = Walk(pod_id)
    try:
        if w.pod_id is None:
            made = podlib.create(**(create_kwargs or {}))
            w.pod_id = made["id"]
            say(f"created {made['name']} ({made['id']}) on {made['gpu']}")
            w.steps.append(("create", 0))
        t = wait(w.pod_id, shell, wait_s, poll_s, say)
        dest = dest_root / t.name
        logs = dest / "pod-logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            push(t, shell, repo, data_dir, logs, say)
            w.steps.append(("push", 0))
        except MonolithError as e:
            w.steps.append(("push", 1))
            say(f"error: {e}")
            return w
        for i, cmd in enumerate(commands):
            say(f"[{i + 1}/{len(commands)}] {cmd}")
            rc = run_step(t, shell, cmd, logs / f"{i + 1:02d}-{cmd.split()[1] if ' ' in cmd else cmd}.log")
            w.steps.append((cmd, rc))
            if rc != 0:
                say(f"{cmd}: exit {rc} (continuing)")
        try:
            w.pulled = pull(t, shell, dest, say)
            w.steps.append(("pull", 0))
        except MonolithError as e:
            w.steps.append(("pull", 1))
            say(f"error: {e}")
        return w
    finally:
        if w.pod_id is not None and not keep:
            try:
                podlib.stop(w.pod_id)
                w.stopped = True
                say(f"stopped pod {w.pod_id} (its volume is kept: `monolith pod terminate {w.pod_id}` deletes it)")
            except MonolithError as e:
                say(f"error: could not stop pod {w.pod_id}: {e}; stop it by hand: monolith pod stop {w.pod_id}")
