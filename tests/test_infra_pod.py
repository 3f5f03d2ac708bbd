"""infra/pod.py and `monolith pod` against a fake RunPod GraphQL endpoint: the real SDK code
runs (runpod.api.graphql.run_graphql_query and ctl_commands), only `requests.post` is
replaced, and it answers from tests/fixtures/runpod/*.json (shaped after the SDK's queries)."""
from __future__ import annotations

import json
import logging
import re
import traceback
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from monolith import cli_pod
from monolith.errors import MonolithError
from monolith.infra import pod

runpod = pytest.importorskip("runpod")
import requests  # noqa: E402  (installed with runpod)

FIX = Path(__file__).parent / "fixtures" / "runpod"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFake test@host"
KEYS = ["rpa_FAKEKEY0123456789ABCDEFGHIJKLMNOP", "plainsecret-9f8e7d6c5b4a"]


def fx(name):
    return json.loads((FIX / name).read_text())


class Resp:
    def __init__(self, body, status=200):
        self.status_code, self._body = status, body

    def json(self):
        if isinstance(self._body, Exception):
            raise self._body
        return self._body


class FakeRunPod:
    """Answers the SDK's GraphQL queries from fixtures; emulates the scheduler's CUDA filter
    with capacity.json (the CUDA version each GPU type's free hosts report)."""

    def __init__(self, mode="ok"):
        self.mode, self.queries, self.auth = mode, [], []

    def post(self, url, headers=None, data=None, timeout=None):
        q = json.loads(data)["query"]
        self.queries.append(q)
        self.auth.append(headers.get("Authorization"))
        key = headers["Authorization"].split()[-1]
        if self.mode == "401":
            return Resp({}, 401)
        if self.mode == "graphql-error":  # a server that echoes the key back in its error
            return Resp({"errors": [{"message": f"invalid api key {key}"}]})
        if self.mode == "connection":
            raise requests.ConnectionError(f"HTTPSConnectionPool: /graphql?api_key={key} (Bearer {key})")
        if self.mode == "not-json":
            return Resp(ValueError(f"Expecting value: line 1 column 1 (char 0) in {key!r}"))
        if self.mode == "bad-shape":
            return Resp({"unexpected": key})
        if "podFindAndDeployOnDemand" in q:
            gpu = re.search(r'gpuTypeId: "([^"]+)"', q).group(1)
            allowed = re.search(r"allowedCudaVersions: \[([^\]]*)\]", q)
            allowed = set(re.findall(r'"([^"]+)"', allowed.group(1))) if allowed else None
            hosts = fx("capacity.json").get(gpu, [])
            if self.mode == "sold-out" or not any(allowed is None or h in allowed for h in hosts):
                return Resp(fx("no_capacity.json"))
            return Resp(fx("create.json"))
        if "gpuTypes(input" in q:
            gid = re.search(r'id: "([^"]+)"', q).group(1)
            return Resp(fx("gpu_type_by_id.json").get(gid, {"data": {"gpuTypes": []}}))
        if "gpuTypes" in q:
            return Resp(fx("gpu_types.json"))
        if "myPods" in q:
            return Resp(fx("pods.json"))
        if "pod(input" in q:
            pid = re.search(r'podId: "([^"]+)"', q).group(1)
            return Resp(fx("pod.json").get(pid, {"data": {"pod": None}}))
        if "podStop" in q:
            return Resp(fx("stop.json"))
        if "podTerminate" in q:
            return Resp(fx("terminate.json"))
        raise AssertionError(f"unexpected query {q}")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    f = FakeRunPod()
    monkeypatch.setattr(runpod.api.graphql.requests, "post", f.post)
    monkeypatch.setenv("RUNPOD_API_KEY", KEYS[0])
    monkeypatch.setenv("MONOLITH_SSH_PUBLIC_KEY", SSH_KEY)
    monkeypatch.delenv("MONOLITH_POD_CUDA_VERSIONS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no real ~/.ssh or ~/.runpod
    return f


def app():
    a = typer.Typer(pretty_exceptions_enable=False)
    cli_pod.register(a)
    return a


# ----------------------------------------------------------------------------- selection
def test_rank_prefers_5090_then_pro6000_then_hopper():
    ids = [g["id"] for g in pod.rank_gpus(fx("gpu_types.json")["data"]["gpuTypes"])]
    assert ids == ["NVIDIA GeForce RTX 5090",
                   "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                   "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                   "NVIDIA H200", "NVIDIA H100 NVL", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"]


def test_rank_custom_order_and_no_match():
    types = fx("gpu_types.json")["data"]["gpuTypes"]
    assert [g["id"] for g in pod.rank_gpus(types, ("H200", "RTX 5090"))] == ["NVIDIA H200", "NVIDIA GeForce RTX 5090"]
    assert pod.rank_gpus(types, ("MI300X",)) == []


def test_allowed_cuda_versions_are_13_and_up(monkeypatch):
    monkeypatch.delenv("MONOLITH_POD_CUDA_VERSIONS", raising=False)
    assert pod.allowed_cuda_versions() == ["13.0", "13.1", "13.2"]
    monkeypatch.setenv("MONOLITH_POD_CUDA_VERSIONS", "13.3, 12.9")
    assert pod.allowed_cuda_versions() == ["13.0", "13.1", "13.2", "13.3"]


def test_create_sends_cuda_floor_and_falls_back_past_old_driver_hosts(fake):
    out = pod.create(suffix="t1")
    # 5090 and PRO 6000 Server hosts only report CUDA 12.x: skipped; PRO 6000 WK has a 13.0 host.
    assert out["gpu"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert out["tried"] == ["NVIDIA GeForce RTX 5090", "NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert out["id"] == "n3wp0d1d2e3f4g" and out["name"] == "monolith-t1"
    m = [q for q in fake.queries if "podFindAndDeployOnDemand" in q]
    assert len(m) == 3
    for q in m:
        assert 'allowedCudaVersions: ["13.0", "13.1", "13.2"]' in q
        assert "volumeInGb: 50" in q and 'volumeMountPath: "/workspace"' in q and "startSsh: true" in q
        assert 'name: "monolith-t1"' in q and SSH_KEY in q
        img = re.search(r'imageName: "([^"]+)"', q).group(1)
        assert img.startswith("runpod/pytorch:") and pod.image_cuda(img) >= (12, 8)
    assert all(a == f"Bearer {KEYS[0]}" for a in fake.auth)


def test_create_everything_sold_out(fake):
    fake.mode = "sold-out"
    with pytest.raises(MonolithError, match="no capacity on any of"):
        pod.create(suffix="t2")


def test_create_dry_run_creates_nothing(fake):
    plan = pod.create(dry_run=True, gpu="H200,H100")
    assert plan["candidates"][0] == "NVIDIA H200" and plan["name"].startswith("monolith-")
    assert not any("podFindAndDeployOnDemand" in q for q in fake.queries)


def test_create_refuses_old_image_bad_name_bad_ssh_key(fake, monkeypatch):
    with pytest.raises(MonolithError, match="12.8"):
        pod.create(image="runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04")
    with pytest.raises(MonolithError, match="suffix"):
        pod.create(suffix="Bad Name")
    monkeypatch.setenv("MONOLITH_SSH_PUBLIC_KEY", 'ssh-ed25519 AAAA" evil')
    with pytest.raises(MonolithError, match="OpenSSH"):
        pod.create(suffix="t3")
    monkeypatch.delenv("MONOLITH_SSH_PUBLIC_KEY")
    monkeypatch.delenv("PUBLIC_KEY", raising=False)
    with pytest.raises(MonolithError, match="no SSH public key"):
        pod.create(suffix="t3")
    (Path.home() / ".ssh").mkdir()
    (Path.home() / ".ssh" / "id_ed25519.pub").write_text(SSH_KEY + "\n")
    assert pod.public_key() == SSH_KEY


# ----------------------------------------------------------------------------- pods, cost
def test_list_keeps_only_prefix(fake):
    assert [p["name"] for p in pod.list_pods()] == ["monolith-h200-a", "monolith-5090", "monolith-starting"]


def test_stop_terminate_refuse_foreign_pods(fake):
    with pytest.raises(MonolithError, match="leaves it alone"):
        pod.stop("z9y8x7w6v5u4t3")
    with pytest.raises(MonolithError, match="leaves it alone"):
        pod.terminate("z9y8x7w6v5u4t3")
    with pytest.raises(MonolithError, match="no pod"):
        pod.stop("nope")
    assert not any("podStop" in q or "podTerminate" in q for q in fake.queries)
    assert pod.stop("k7x2q9abc1d2e3")["desiredStatus"] == "EXITED"
    pod.terminate("k7x2q9abc1d2e3")
    assert any('podTerminate(input: { podId: "k7x2q9abc1d2e3" })' in q for q in fake.queries)


def test_cost_arithmetic():
    pods = fx("pods.json")["data"]["myself"]["pods"]
    c = pod.cost(pods)
    by = {r["name"]: r for r in c["pods"]}
    assert set(by) == {"monolith-h200-a", "monolith-5090", "monolith-starting"}  # someone-else excluded
    assert by["monolith-h200-a"]["uptime_h"] == 1.5
    assert by["monolith-h200-a"]["spend"] == pytest.approx(3.59 * 1.5)
    assert by["monolith-5090"]["spend"] == 0
    assert c["total_spend"] == pytest.approx(5.385)
    assert c["total_per_hr"] == pytest.approx(3.59 + 1.79)  # only RUNNING pods bill compute now
    assert pod.cost([{"name": "monolith-x", "costPerHr": None, "uptimeSeconds": None}])["total_spend"] == 0


def test_ssh_info_uses_public_tcp_22(fake):
    info = pod.ssh_info(pod.get("k7x2q9abc1d2e3"))
    assert info["command"] == "ssh root@194.68.245.21 -p 22122"
    with pytest.raises(MonolithError, match="no public SSH port yet"):
        pod.ssh_info(pod.get("b1c2d3e4f5g6h7"))


def test_cli_happy_paths(fake):
    r = CliRunner()
    for args in (["pod", "status"], ["pod", "status", "--json"], ["pod", "cost"], ["pod", "cost", "--json"],
                 ["pod", "ssh-info", "k7x2q9abc1d2e3"], ["pod", "create", "--name", "t4", "--gpu", "H200"],
                 ["pod", "stop", "k7x2q9abc1d2e3"], ["pod", "terminate", "k7x2q9abc1d2e3", "--yes"]):
        res = r.invoke(app(), args)
        assert res.exit_code == 0, (args, res.output, res.exception)
    res = r.invoke(app(), ["pod", "cost", "--json"])
    assert json.loads(res.output)["total_spend"] == pytest.approx(5.385)


# ----------------------------------------------------------------------------- secrets
def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    with pytest.raises(MonolithError, match="RUNPOD_API_KEY is not set"):
        pod.list_pods()
    res = CliRunner().invoke(app(), ["pod", "status"])
    assert isinstance(res.exception, MonolithError) and "RUNPOD_API_KEY" in str(res.exception)


def test_redact():
    assert pod.redact("Authorization: Bearer abc.def") == "Authorization: Bearer ***"
    assert pod.redact("https://api.runpod.io/graphql?api_key=XYZ&a=1") == "https://api.runpod.io/graphql?api_key=***&a=1"
    assert "rpa_" + "A" * 20 not in pod.redact("key rpa_" + "A" * 20)


COMMANDS = [["pod", "status"], ["pod", "status", "k7x2q9abc1d2e3"], ["pod", "cost"], ["pod", "cost", "--json"],
            ["pod", "create", "--name", "t5"], ["pod", "stop", "k7x2q9abc1d2e3"],
            ["pod", "terminate", "k7x2q9abc1d2e3", "--yes"], ["pod", "ssh-info", "k7x2q9abc1d2e3"]]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("mode", ["ok", "401", "graphql-error", "connection", "not-json", "bad-shape", "sold-out"])
def test_key_never_leaks(fake, monkeypatch, caplog, capsys, key, mode):
    monkeypatch.setenv("RUNPOD_API_KEY", key)
    fake.mode = mode
    caplog.set_level(logging.DEBUG)
    for args in COMMANDS:
        res = CliRunner().invoke(app(), args)
        text = res.output
        if res.exc_info and res.exception is not None:
            text += "".join(traceback.format_exception(*res.exc_info))
            if mode != "ok":
                assert isinstance(res.exception, (MonolithError, SystemExit)), (args, res.exception)
        text += caplog.text + "".join(capsys.readouterr())
        assert key not in text, (mode, args)
        if mode not in ("ok", "sold-out"):
            assert res.exit_code != 0, (mode, args)
    assert fake.auth and all(a == f"Bearer {key}" for a in fake.auth)  # the key did reach the API
