"""`monolith pod ...`: rent, inspect and release RunPod GPUs (infra/pod.py does the work).
Everything printed goes through pod.redact, so the API key cannot reach the terminal."""
from __future__ import annotations

import json

import typer
from rich.table import Table

from monolith.console import make_console

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


def register(app: typer.Typer) -> None:
    app.add_typer(pod_app, name="pod")
