"""Issue 44's medium and low items (the Python side): every hostile input is one clear line
(MonolithError, exit 2 through the CLI), nothing is written on a refusal, and the validator
refuses impossible documents."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from monolith import REPO_ROOT, jsonio, results
from monolith.checkpoint import load_checkpoint, validate_config
from monolith.cli import app
from monolith.errors import MonolithError
from monolith.synth import hf_config

runner = CliRunner()
DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "1" * 5000


def _err(r):
    """A CliRunner result that is a one-line refusal: MonolithError (the CLI prints it, exit 2)."""
    assert isinstance(r.exception, MonolithError), (r.exit_code, r.output, r.exception)
    assert "\n" not in str(r.exception).strip(), str(r.exception)
    return str(r.exception)


# ---- item 6: one JSON reader ------------------------------------------------------------------
@pytest.mark.parametrize("text,msg", [
    (DEEP, "nested more than 64 levels"),
    ('{"a": ' + BIG_INT + "}", "an integer of 5000 digits"),
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ('{"a": NaN}', "bare NaN"),
    ('{"a": -Infinity}', "bare -Infinity"),
    ('{"a": 1e400}', "out of range"),
    ('{"a": ', "is not valid JSON"),
    (b'\xff{}', "not UTF-8"),
])
def test_json_reader_refuses_in_one_line(text, msg):
    with pytest.raises(MonolithError, match=msg) as e:
        jsonio.loads(text, "f.json")
    assert str(e.value).startswith("f.json") and "\n" not in str(e.value)


def test_json_reader_bounds_size_and_names_read_failures(tmp_path, monkeypatch):
    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    with pytest.raises(MonolithError, match="larger than the 1,000 bytes allowed"):
        jsonio.load(big, max_bytes=1000)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    with pytest.raises(MonolithError, match="symbolic link loop"):
        jsonio.load(loop)
    with pytest.raises(MonolithError, match="is a directory"):
        jsonio.load(tmp_path)
    with pytest.raises(MonolithError, match="not found"):
        jsonio.load(tmp_path / "nope.json")

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(jsonio, "open", denied, raising=False)
    with pytest.raises(MonolithError, match="permission denied"):
        jsonio.load(big)


def _ckdir(tmp_path, cfg_text=None):
    d = tmp_path / "ck"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(cfg_text if cfg_text is not None else json.dumps(hf_config(
        __import__("monolith.config", fromlist=["ModelShape"]).ModelShape(num_layers=1), 0)))
    return d


@pytest.mark.parametrize("cfg", [DEEP, '{"num_hidden_layers": ' + BIG_INT + "}", '{"a": 1, "a": 1}', "[1]"])
def test_hostile_config_json_is_one_line_exit_2(tmp_path, cfg):
    d = _ckdir(tmp_path, cfg)
    with pytest.raises(MonolithError, match=r"config.json"):
        load_checkpoint(d, allow_reduced_depth=True)
    r = runner.invoke(app, ["generate", "--model", str(d), "--prompt", "x", "-n", "1", "--device", "cpu"])
    _err(r)


def test_config_permission_denied_is_named(tmp_path, monkeypatch):
    d = _ckdir(tmp_path)

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(jsonio, "open", denied, raising=False)
    with pytest.raises(MonolithError, match="config.json: permission denied"):
        load_checkpoint(d, allow_reduced_depth=True)


def test_rope_parameters_of_the_wrong_type_are_refused_not_a_traceback():
    from monolith.config import ModelShape

    cfg = hf_config(ModelShape(num_layers=1), 0)
    for bad in ("x", [1]):
        c = {k: v for k, v in cfg.items() if k != "rope_theta"}
        c["rope_parameters"] = bad
        with pytest.raises(MonolithError):
            validate_config(c, allow_reduced_depth=True)


# ---- item 6: pack metadata, --map, synth, --out ------------------------------------------------
def _resave_meta(src_dir, dst_dir, edit_meta):
    from safetensors import safe_open
    from safetensors.torch import save_file

    from monolith.quant import fp8_layout as L

    with safe_open(str(src_dir / L.FILE), framework="pt") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    meta[L.META_KEY] = edit_meta(meta[L.META_KEY])
    dst_dir.mkdir(parents=True)
    save_file(tensors, str(dst_dir / L.FILE), metadata=meta)
    return dst_dir


@pytest.mark.parametrize("edit,msg", [
    (lambda m: json.dumps({k: v for k, v in json.loads(m).items() if k != "source"}), "field 'source' is missing"),
    (lambda m: json.dumps({**json.loads(m), "source": "x"}), "field 'source' must be an object, got a string"),
    (lambda m: json.dumps([json.loads(m)]), "must be an object, got an array"),
    (lambda m: json.dumps({**json.loads(m), "config": 3}), "field 'config' must be an object"),
    (lambda m: m[:-1] + ', "n": ' + BIG_INT + "}", "an integer of 5000 digits"),
    (lambda m: "[" * 5000 + "]" * 5000, "nested more than"),
])
def test_hostile_pack_metadata_is_one_line(fp8pack2, tmp_path, edit, msg):
    from monolith.quant.pack_fp8 import load_packed_fp8

    d = _resave_meta(fp8pack2, tmp_path / "p", edit)
    with pytest.raises(MonolithError, match=msg):
        load_packed_fp8(d)


@pytest.mark.parametrize("doc,msg", [
    ({"schema": "monolith-nvfp4-sensitivity/1", "status": "complete", "weights": "x"}, "'weights' must be an object"),
    ("MAP", "'map' must be an object, got a string"),
    ("UNIT", r"units\[0\]: field 'name' is missing"),
    ('{"formats": ' + DEEP + "}", "nested more than"),
    ('{"formats": {"a": ' + BIG_INT + "}}", "an integer of 5000 digits"),
])
def test_hostile_map_file_is_one_line(ckpt2, tmp_path, doc, msg):
    from monolith.quant import sensitivity as S

    p = tmp_path / "map.json"
    base = {"schema": S.SCHEMA, "status": "complete", "weights": {"sha256": ckpt2.sha256()}}
    if doc == "MAP":
        doc = {**base, "map": "x"}
    elif doc == "UNIT":
        doc = {**base, "map": {"formats": {}}, "units": [{"kl": 1.0}]}
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(MonolithError, match=msg):
        S.load_map(p, ckpt2)


def test_synth_seed_out_of_range_and_unwritable_out(tmp_path):
    out = tmp_path / "ck"
    assert "--seed must be an integer in 0.." in _err(runner.invoke(app, ["synth", "--out", str(out), "--layers", "1",
                                                                           "--seed", "9300000000000"]))
    f = tmp_path / "file"
    f.write_text("x")
    assert "is a file, not a directory" in _err(runner.invoke(app, ["synth", "--out", str(f / "sub"), "--layers", "1"]))
    msg = _err(runner.invoke(app, ["synth", "--out", "/proc/monolith-nope/ck", "--layers", "1"]))
    assert "/proc" in msg
    assert not out.exists() and f.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_pack_out_unwritable_is_refused_before_packing(synth2, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for out, msg in ((f / "p", "is a file, not a directory"), (f, "exists and is not a directory"),
                     (Path("/proc/monolith-nope"), "cannot write in /proc")):
        r = runner.invoke(app, ["pack", "--format", "fp8", "--model", str(synth2), "--out", str(out)])
        assert msg in _err(r)
    assert f.read_text() == "x"


# ---- item 5 and the npz low item: raw X-ray traces ---------------------------------------------
def _npy_bytes(shape, dtype="<i8", payload=b""):
    head = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    head += b" " * (63 - (10 + len(head)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + payload


def test_raw_trace_sizes_are_checked_from_member_headers(tmp_path):
    from monolith.xray.raw import load_raw

    p = tmp_path / "bomb.raw.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("meta_json.npy", _npy_bytes((), "<U2", "{}".encode("utf-32-le")))
        for k in ("block", "smid", "phase", "layer"):
            z.writestr(k + ".npy", _npy_bytes((1 << 33,), "<u2"))
        for k in ("g0_delta", "g_dur", "c0_delta", "c_dur"):
            z.writestr(k + ".npy", _npy_bytes((1 << 33,), "<i8"))
    t = time.perf_counter()
    with pytest.raises(MonolithError, match=r"column block must be at most 4,194,304 integers, got uint16 \[8589934592\]"):
        load_raw(p)
    assert time.perf_counter() - t < 5
    # random bytes: named as not a zip archive, not numpy's "pickled data"
    junk = tmp_path / "junk.raw.npz"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(MonolithError, match="not a raw trace \\(.npz\\): the file is not a zip archive"):
        load_raw(junk)
    r = runner.invoke(app, ["xray", "--raw", str(junk)]) if False else None  # noqa: F841  (the loader is what commands call)


def _meta(**kw):
    m = {"variant": "v", "gpu": "g", "sm_count": 4, "blocks": 4, "threads": 32, "position": 1,
         "sm_clock_mhz": 1000.0, "token_time_us": 10.0}
    m.update(kw)
    return m


@pytest.mark.parametrize("key,value,msg", [
    ("globaltimer_tick_ns", 1e30, "globaltimer_tick_ns must be an integer in \\[1, 10000\\] ns, got 1e\\+30"),
    ("globaltimer_tick_ns", 10 ** 30, "globaltimer_tick_ns must be an integer"),
    ("globaltimer_tick_ns", 0, "globaltimer_tick_ns must be an integer"),
    ("globaltimer_tick_ns", True, "globaltimer_tick_ns must be an integer"),
    ("xray_max_events", "x", "xray_max_events must be an integer"),
])
def test_item8_raw_meta_tick_and_slots_are_checked(key, value, msg):
    from monolith.xray.raw import check_meta

    assert check_meta(_meta(globaltimer_tick_ns=32, xray_max_events=1024))
    with pytest.raises(MonolithError, match=msg):
        check_meta(_meta(**{key: value}))


def test_site_script_prints_one_line_and_exits_2(tmp_path, capsys):
    from monolith.xray import site

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "final.json").write_text(DEEP)
    with pytest.raises(SystemExit) as e:
        site.main(["--root", str(tmp_path), "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err


# ---- item 7: the validator ---------------------------------------------------------------------
def _gate(**kw):
    g = {"passed": True, "reasons": [], "divergences": 0, "divergences_disallowed": 0, "deterministic": True,
         "free_running": [{"prompt": 0, "first_divergence": None, "allowed": True}]}
    g.update(kw)
    return g


def _ok_row(engine="megakernel-x", **kw):
    r = results.base_row(engine, engine)
    r.update(status="ok", gate=_gate(), tok_s={"median": 100.0, "min": 90.0, "max": 110.0})
    r.update(kw)
    return r


def _doc(*rows):
    d = results.new_doc({}, {"kind": "synthetic"}, {"title": "t"})
    d["rows"] = list(rows)
    return d


@pytest.mark.parametrize("row,msg", [
    (_ok_row(tok_s={"median": float("inf"), "min": 1.0, "max": float("inf")}), "tok_s.median is inf"),
    (_ok_row(tok_s={"median": 1e300, "min": 1e300, "max": 1e300}), "tok_s needs numbers median/min/max in"),
    (_ok_row(gate=_gate(divergences=3, divergences_disallowed=3)), "contradicts its own 3 disallowed divergence"),
    (_ok_row(gate=_gate(deterministic=False)), "contradicts its own deterministic: false"),
    (_ok_row(gate=_gate(passed=False, reasons=[], free_running=[])), "passed: false with no reason"),
    (_ok_row(gate={"passed": None, "applicable": False, "reasons": ["x"]}), "only external baselines"),
    (_ok_row(quality={"kl": float("nan"), "agreement": 0.5}), "quality.kl is nan"),
    (_ok_row(quality={"kl": -3.0}), "quality KL -3.0 is negative"),
    (_ok_row(eff_bw_tbs=-1.0), "eff_bw_tbs -1.0 is outside"),
    (_ok_row(us_per_token={"median": -5.0, "min": -5.0, "max": -5.0}), "us_per_token {'median': -5.0"),
])
def test_item7_validator_refuses_impossible_rows(row, msg):
    errs = results.validate(_doc(row))
    assert any(msg in e for e in errs), errs


def test_item7_validator_accepts_external_and_labelled_rows_and_refuses_duplicates(tmp_path, capsys):
    ext = _ok_row("llamacpp-bf16", gate={"passed": None, "applicable": False, "reasons": ["external"]})
    lab = _ok_row("hf-static", gate={"passed": None, "applicable": False, "reasons": ["ungated"],
                                      "verdict": _gate(passed=False, deterministic=False, reasons=["not identical"])})
    assert results.validate(_doc(_ok_row(), ext, lab)) == []
    assert any("appears twice" in e for e in results.validate(_doc(_ok_row(), _ok_row())))
    # duplicate keys and bare NaN/Infinity in a file: INVALID, exit 1, one line each
    p = tmp_path / "r.json"
    text = json.dumps(_doc(_ok_row()), indent=1)
    for bad, msg in ((text.replace('"schema"', '"rows": [],\n "schema"', 1), "duplicate key 'rows'"),
                     (text.replace('"median": 100.0', '"median": NaN'), "bare NaN"),
                     (text.replace('"max": 110.0', '"max": Infinity'), "bare Infinity"),
                     ('{"rows": ' + DEEP + "}", "nested more than"),
                     ('{"rows": ' + BIG_INT + "}", "5000 digits")):
        p.write_text(bad)
        assert results.main([str(p)]) == 1
        out = capsys.readouterr().out
        assert msg in out and "Traceback" not in out


# ---- low items ---------------------------------------------------------------------------------
def test_symlink_loop_and_permission_are_named(synth2, tmp_path, monkeypatch):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(MonolithError, match="symbolic link loop"):
        load_checkpoint(loop, allow_reduced_depth=True)
    d = tmp_path / "ck"
    d.mkdir()
    shutil.copyfile(synth2 / "config.json", d / "config.json")
    (d / "model.safetensors").symlink_to(d / "model.safetensors")
    with pytest.raises(MonolithError, match="model.safetensors: a symbolic link loop"):
        load_checkpoint(d, allow_reduced_depth=True)
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").symlink_to(synth2 / "model.safetensors")
    from monolith import checkpoint
    monkeypatch.setattr(checkpoint.os, "access", lambda p, mode: False)
    with pytest.raises(MonolithError, match="model.safetensors: permission denied"):
        load_checkpoint(d, allow_reduced_depth=True)


def test_gap_in_tensor_offsets_is_a_missing_tensor(synth2, tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    shutil.copyfile(synth2 / "config.json", d / "config.json")
    raw = (synth2 / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    name = "model.layers.0.self_attn.k_norm.weight"
    assert header[name]["data_offsets"][1] < max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    del header[name]
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    (d / "model.safetensors").write_bytes(len(h).to_bytes(8, "little") + h + raw[8 + n:])
    with pytest.raises(MonolithError, match=f"missing tensor {name}"):
        load_checkpoint(d, allow_reduced_depth=True)


@pytest.mark.parametrize("rs,ok", [({"rope_type": "default"}, True), ({"type": "default"}, True), (None, True),
                                   ("default", True), ({"rope_type": "yarn", "factor": 4.0}, False),
                                   ({"rope_type": "default", "factor": 4.0}, False), ("linear", False)])
def test_rope_scaling_default_means_none(rs, ok):
    from monolith.config import ModelShape

    cfg = {**hf_config(ModelShape(num_layers=1), 0), "rope_scaling": rs}
    if ok:
        validate_config(cfg, allow_reduced_depth=True)
    else:
        with pytest.raises(MonolithError, match="rope scaling expected none/default"):
            validate_config(cfg, allow_reduced_depth=True)


def test_synth_removes_a_killed_writers_leftovers(tmp_path):
    from monolith.synth import remove_stale_temporaries, write_synthetic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    out = tmp_path / "ck"
    stale = tmp_path / ".ck.synth-abc123"
    stale.mkdir()
    (stale / ".pid").write_text(dead.stdout)
    (stale / "model.safetensors").write_bytes(b"partial")
    live = tmp_path / ".ck.synth-live"
    live.mkdir()
    (live / ".pid").write_text(str(os.getpid()))
    other = tmp_path / ".ck.synth-notours"
    other.mkdir()
    (other / ".pid").write_text(dead.stdout)
    (other / "precious.txt").write_text("x")
    assert remove_stale_temporaries(out) == [stale]
    write_synthetic(out, seed=0, num_layers=1, progress=False)
    assert not stale.exists() and live.is_dir() and (other / "precious.txt").is_file()


def test_synth_cleans_up_on_sigterm(tmp_path):
    out = tmp_path / "ck"
    code = ("import time, monolith.synth as s\n"
            "def slow(*a, **k):\n    time.sleep(60)\n"
            "s.generate_tensors = slow\n"
            f"s.write_synthetic({str(out)!r}, num_layers=1, progress=False)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    p = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO_ROOT)
    try:
        for _ in range(600):
            if list(tmp_path.glob(".ck.synth-*")):
                break
            time.sleep(0.1)
        assert list(tmp_path.glob(".ck.synth-*")), "the writer never started"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
    assert not list(tmp_path.glob(".ck.synth-*")) and not out.exists()


def test_markdown_escapes_pipes_and_newlines():
    row = results.base_row("e", "a | b\nc")
    row.update(status="failed", reason="boom |\n| x")
    md = results.render_md(_doc(row))
    line = next(x for x in md.splitlines() if x.startswith("| a"))
    assert line.startswith("| a \\| b c | failed |") and "boom \\| \\| x" in line
    assert line.count(" | ") == 10  # eleven cells, none split


def test_env_files_are_ignored_but_the_example_is_not():
    def ignored(name):
        return subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=REPO_ROOT).returncode == 0
    assert ignored(".env") and ignored(".env.local") and ignored(".env.production")
    assert not ignored(".env.example")


def test_cpu_sweep_stays_within_the_timed_runs(monkeypatch):
    from harness_fakes import FakeEngine

    from monolith.bench.decode import BenchConfig, bench_engine

    class Slow(FakeEngine):
        def _step(self, tok, in_decode=False):
            time.sleep(0.002)
            return super()._step(tok, in_decode)

    cfg = BenchConfig(runs=1, tokens=4, prompts=1, warmup_tokens=2, power=False)
    t = time.perf_counter()
    row = bench_engine(Slow(), [[1, 2, 3]], cfg, sweep_seq=list(range(1, 30)) * 100, log=lambda *a: None)
    assert time.perf_counter() - t < 10  # the full sweep would be ~3,900 steps (~8 s of sleeps alone)
    sw = row["sweep"]
    assert sw["2048"]["status"] == "not run" and "budget" in sw["2048"]["reason"]
    assert results.non_finite(row) == []
