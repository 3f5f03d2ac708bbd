import numpy as np
import pytest

from monolith.errors import MonolithError
from monolith.xray.raw import load_raw, save_raw
from monolith.xray.synthetic import generate


@pytest.fixture(scope="module")
def small():
    meta, ev = generate(sm_count=12, blocks=10, layers=3, idle_sms=(2, 7), seed=3)
    meta.pop("truth")
    return meta, ev


def test_roundtrip_lossless(tmp_path, small):
    meta, ev = small
    p = save_raw(tmp_path / "t.raw.npz", meta, ev)
    m2, e2 = load_raw(p)
    assert m2 == meta
    order = np.lexsort((ev[:, 6], ev[:, 0]))
    assert e2.dtype == np.int64 and np.array_equal(e2, ev[order])


def test_missing_and_not_npz(tmp_path):
    with pytest.raises(MonolithError, match="not found"):
        load_raw(tmp_path / "nope.npz")
    (tmp_path / "x.npz").write_text("hello")
    with pytest.raises(MonolithError, match="not a raw trace"):
        load_raw(tmp_path / "x.npz")


def test_truncated(tmp_path, small):
    p = save_raw(tmp_path / "t.raw.npz", *small)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(MonolithError):
        load_raw(p)


def test_meta_errors(tmp_path, small):
    meta, ev = small
    bad = dict(meta)
    bad.pop("token_time_us")
    with pytest.raises(MonolithError, match="missing key 'token_time_us'"):
        save_raw(tmp_path / "a.npz", bad, ev)
    with pytest.raises(MonolithError, match="'sm_count' has type"):
        save_raw(tmp_path / "a.npz", dict(meta, sm_count="132"), ev)


def test_event_errors(tmp_path, small):
    meta, ev = small
    with pytest.raises(MonolithError, match=r"shape \[N, 8\]"):
        save_raw(tmp_path / "a.npz", meta, ev[:, :7])
    e = ev.copy()
    e[4, 2] = 99
    with pytest.raises(MonolithError, match="unknown phase ids \\[99\\]"):
        save_raw(tmp_path / "a.npz", meta, e)
    e = ev.copy()
    e[4, 5] = e[4, 4] - 1
    with pytest.raises(MonolithError, match="ends before it starts"):
        save_raw(tmp_path / "a.npz", meta, e)
    e = ev.copy()
    e[0, 1] = meta["sm_count"]
    with pytest.raises(MonolithError, match="smid"):
        save_raw(tmp_path / "a.npz", meta, e)
    with pytest.raises(MonolithError, match="no events"):
        save_raw(tmp_path / "a.npz", meta, ev[:0])


def test_wrong_version(tmp_path, small):
    import json
    p = save_raw(tmp_path / "t.raw.npz", *small)
    z = dict(np.load(p))
    m = json.loads(str(z["meta_json"]))
    m["version"] = 7
    z["meta_json"] = np.array(json.dumps(m))
    np.savez(p, **z)
    with pytest.raises(MonolithError, match="version 7"):
        load_raw(p)
