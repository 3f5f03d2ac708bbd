import pytest

from monolith.errors import MonolithError
from monolith.tokenizer import load_tokenizer


def test_hello_world(synth2):
    for tok in (load_tokenizer(), load_tokenizer(synth2)):
        assert tok.encode("Hello world") == [9707, 1879]
        assert tok.decode([9707, 1879]) == "Hello world"


def test_pieces_join_to_text():
    tok = load_tokenizer()
    text = "Hello world, 你好 ü 🎉 done."
    ids = tok.encode(text)
    pieces = tok.pieces(ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert tok.pieces([151_900]) == ["<151900>"]  # padding row of the embedding: no crash


def test_missing_tokenizer(monkeypatch, tmp_path):
    import monolith.synth
    monkeypatch.setattr(monolith.synth, "packaged_tokenizer_json", lambda: None)
    with pytest.raises(MonolithError, match="no Qwen3 tokenizer found"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(MonolithError, match="cannot load tokenizer"):
        load_tokenizer(tmp_path)
