"""`monolith pod ...`: rent, inspect and release RunPod GPUs (infra/pod.py does the work).
Everything printed goes through pod.redact, so the API key cannot reach the terminal."""
from __future__ import annotations

import json
import os
import shlex
import tempfile
from pathlib import Path

import typer
from rich.table import Table

from monolith import REPO_ROOT
from monolith.console import make_console

WIKITEXT = "wikitext-2-raw-v1-test.txt"
pod_app = typer.Typer(help="Rent a GPU on RunPod (pods named monolith-*; key from RUNPOD_API_KEY).",
                      no_args_is_help=True)


def _pod():
    from monolith.infra import pod  # late: keeps `monolith --help` fast
    return pod


def _say(obj) -> None:
    text = obj if isinstance(obj, str) else json.dumps(obj, indent=2, default=str)
    make_console(highlight=False, soft_wrap=True).print(_pod().redact(text), markup=False)


@pod_app.command()
def create(
    name: str = typer.Option("", help="suffix after 'monolith-' (default: a timestamp)"),
    gpu: str = typer.Option(None, help="comma-separated GPU patterns overriding the preference order, e.g. 'H200,H100'"),
    image: str = typer.Option(None, help="container image (official runpod/pytorch, CUDA >= 12.8)"),
    volume_gb: int = typer.Option(50, help="volume size, mounted at /workspace"),
    cloud: str = typer.Option("ALL", help="ALL, SECURE or COMMUNITY"),
    max_hours: float = typer.Option(6.0, help="MAX_POD_HOURS passed to the pod's watchdog"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the GPU types that would be tried, create nothing"),
) -> None:
    """Create a pod on the first GPU type with capacity: RTX 5090, RTX PRO 6000, then H200/H100,
    only on hosts whose driver runs the pinned CUDA toolkit."""
    p = _pod()
    out = p.create(suffix=name, gpu=gpu, image=image or p.IMAGE, volume_gb=volume_gb, cloud=cloud,
                   max_hours=max_hours, dry_run=dry_run)
    _say(out)
    if not dry_run:
        _say(f"next: monolith pod ssh-info {out['id']}  (once RUNNING), then run infra/bootstrap.sh on the pod "
             "(infra/README.md)")


@pod_app.command()
def status(pod_id: str = typer.Argument(None, help="one pod (default: every monolith-* pod)"),
           as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """Status of monolith-* pods."""
    p = _pod()
    pods = [p.get(pod_id)] if pod_id else p.list_pods()
    rows = [{"id": x.get("id"), "name": x.get("name"), "status": x.get("desiredStatus"),
             "gpu": (x.get("machine") or {}).get("gpuDisplayName"), "cost_per_hr": x.get("costPerHr"),
             "uptime_s": x.get("uptimeSeconds"), "image": x.get("imageName")} for x in pods]
    if as_json:
        _say(rows)
        return
    if not rows:
        _say("no monolith-* pods")
        return
    t = Table("id", "name", "status", "gpu", "$/h", "uptime")
    for r in rows:
        t.add_row(*(p.redact(v) for v in (r["id"], r["name"], r["status"], r["gpu"], r["cost_per_hr"],
                                          f"{(r['uptime_s'] or 0) / 3600:.2f} h")))
    make_console().print(t)


@pod_app.command()
def stop(pod_id: str) -> None:
    """Stop a monolith-* pod (the /workspace volume is kept and still billed)."""
    _say(_pod().stop(pod_id))


@pod_app.command()
def terminate(pod_id: str, yes: bool = typer.Option(False, "--yes", "-y", help="skip the confirmation")) -> None:
    """Terminate a monolith-* pod: its volume is deleted."""
    if not yes:
        typer.confirm(f"terminate {pod_id} and delete its volume?", abort=True)
    _pod().terminate(pod_id)
    _say(f"terminated {pod_id}")


@pod_app.command("ssh-info")
def ssh_info(pod_id: str) -> None:
    """How to SSH into a running monolith-* pod."""
    p = _pod()
    _say(p.ssh_info(p.get(pod_id)))


@pod_app.command()
def cost(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table")) -> None:
    """Uptime and spend of every monolith-* pod (costPerHr × uptime)."""
    p = _pod()
    c = p.cost(p.list_pods())
    if as_json:
        _say(c)
        return
    t = Table("id", "name", "status", "gpu", "$/h", "uptime", "spend $")
    for r in c["pods"]:
        t.add_row(*(p.redact(v) for v in (r["id"], r["name"], r["status"], r["gpu"], f"{r['cost_per_hr']:.3f}",
                                          f"{r['uptime_h']:.2f} h", f"{r['spend']:.2f}")))
    make_console().print(t)
    _say(f"running now: ${c['total_per_hr']:.3f}/h; spent by these runs: ${c['total_spend']:.2f}")


# ----------------------------------------------------------------------------- the runbook (docs/RUNBOOK.md)
def _rb():
    from monolith.infra import runbook  # late, as _pod
    return runbook


def _data_dir(data: Path | None) -> Path | None:
    if data is not None:
        return data
    env = os.environ.get("MONOLITH_DATA_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pod_app.command()
def wait(pod_id: str, timeout: float = typer.Option(900.0, help="give up after this many seconds")) -> None:
    """Wait until a pod is RUNNING and answers on SSH."""
    rb = _rb()
    rb.wait(pod_id, rb.Shell(), timeout, say=_say)


@pod_app.command()
def push(pod_id: str,
         data: Path = typer.Option(None, help=f"directory holding {WIKITEXT} (default: MONOLITH_DATA_DIR, "
                                   "else ../shared/data)")) -> None:
    """Ship this checkout's last commit (a git bundle), bootstrap.sh and the WikiText-2 file to a
    pod over SSH, then run bootstrap there (clone, driver check, CUDA 13.0, pip install, watchdog)."""
    rb = _rb()
    t = rb.target(pod_id)
    with tempfile.TemporaryDirectory(prefix="monolith-push-") as d:
        rb.push(t, rb.Shell(), REPO_ROOT, _data_dir(data), Path(d), say=_say)
    _say(f"pushed and bootstrapped {t.name}")


@pod_app.command("exec")
def exec_(pod_id: str, command: list[str] = typer.Argument(..., help="the command, after --: e.g. -- monolith m0")) -> None:
    """Run a command in the pod's checkout (toolkit and data set up as bootstrap left them); exits
    with its status."""
    rb = _rb()
    rc = rb.run_step(rb.target(pod_id), rb.Shell(), " ".join(shlex.quote(c) for c in command), None)
    if rc != 0:
        raise typer.Exit(rc)


@pod_app.command()
def pull(pod_id: str, dest: Path = typer.Option(None, help="where the files go (default: results/pods/<pod name>/)")) -> None:
    """Copy back every file the pod's commands created or changed under results/ and
    web/public/traces/ (the pod checkout's git status), keeping their paths."""
    rb = _rb()
    t = rb.target(pod_id)
    rb.pull(t, rb.Shell(), dest or REPO_ROOT / "results" / "pods" / t.name, say=_say)


@pod_app.command()
def runbook(
    pod_id: str = typer.Option(None, "--pod", help="use this running pod instead of creating one"),
    gpu: str = typer.Option("RTX 5090,RTX PRO 6000", help="GPU patterns to create on, in order"),
    name: str = typer.Option("sm120", help="pod name suffix after 'monolith-'"),
    step: list[str] = typer.Option(None, "--step", help="a command to run on the pod (repeatable; default: "
                                   "the milestones that run on sm_120 today, docs/RUNBOOK.md)"),
    data: Path = typer.Option(None, help=f"directory holding {WIKITEXT} (default: MONOLITH_DATA_DIR, else ../shared/data)"),
    dest: Path = typer.Option(REPO_ROOT / "results" / "pods", help="results come back into DEST/<pod name>/"),
    max_hours: float = typer.Option(6.0, help="the pod's watchdog stops it after this long in any case"),
    keep: bool = typer.Option(False, "--keep", help="leave the pod running at the end (default: stop it)"),
    wait_s: float = typer.Option(900.0, help="seconds to wait for the pod to answer on SSH"),
) -> None:
    """The whole runbook in one command: create a pod (RTX 5090 first), wait, push + bootstrap, run
    each milestone that works there, copy the results back, stop the pod: on failure too."""
    rb = _rb()
    w = rb.run_all(shell=rb.Shell(), repo=REPO_ROOT, dest_root=dest, data_dir=_data_dir(data),
                   commands=tuple(step) if step else rb.SM120_STEPS, pod_id=pod_id,
                   create_kwargs={"suffix": name, "gpu": gpu, "max_hours": max_hours}, keep=keep,
                   wait_s=wait_s, say=_say)
    t = Table("step", "exit")
    for s_, rc in w.steps:
        t.add_row(s_, str(rc))
    make_console().print(t)
    _say(f"pod {w.pod_id}: {'stopped' if w.stopped else 'still running'}; {len(w.pulled)} files pulled")
    if not w.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(pod_app, name="pod")
