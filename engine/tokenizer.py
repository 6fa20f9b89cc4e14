"""A byte-level BPE tokenizer built from a GGUF's own vocabulary and merges.

The `tokenizers` library does the BPE; the pre-tokenizer (how text is split before BPE) is
chosen from the GGUF's `tokenizer.ggml.pre` exactly as llama.cpp's llama-vocab.cpp does:
a sequence of regex splits, then the GPT-2 byte-to-unicode mapping. For SmolLM2 ("smollm")
that is: every digit on its own, then the GPT-2 pattern.

encode() treats control tokens written in the text (e.g. "<|im_start|>") as plain text unless
parse_special=True, so decode(encode(text)) == text for any text.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from engine.errors import EngineError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> the regex splits llama.cpp applies, in order
PRE_TOKENIZER_REGEXES: dict[str, list[str]] = {
    "default": [_GPT2],
    "gpt2": [_GPT2],
    "smollm": [r"\p{N}", _GPT2],
    "starcoder": [r"\p{N}", _GPT2],
    "refact": [r"\p{N}", _GPT2],
    "llama-bpe": [_LLAMA3],
    "llama3": [_LLAMA3],
    "qwen2": [_QWEN2],
}

_CONTROL = 3  # llama.cpp token type of control tokens (<|im_start|>, <|endoftext|>, ...)


class Tokenizer:
    """encode(text) -> ids and decode(ids) -> text with a GGUF's vocabulary."""

    def __init__(
        self,
        tokens: list[str],
        merges: list[str],
        pre: str,
        token_types: list[int] | None = None,
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
    ) -> None:
        from tokenizers import Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer

        if pre not in PRE_TOKENIZER_REGEXES:
            raise EngineError(
                f"pre-tokenizer {pre!r} is not supported "
                f"(supported: {', '.join(sorted(PRE_TOKENIZER_REGEXES))})"
            )
        vocab = {tok: i for i, tok in enumerate(tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        # llama.cpp looks whole pre-tokens up in the vocabulary first for llama3 only
        bpe = models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre in ("llama-bpe", "llama3"))
        self._tok = HFTokenizer(bpe)
        splits = [
            pre_tokenizers.Split(Regex(rx), behavior="isolated")
            for rx in PRE_TOKENIZER_REGEXES[pre]
        ]
        self._tok.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
        self._tok.decoder = decoders.ByteLevel()
        self._special: dict[str, int] = {}
        if token_types is not None:
            self._special = {
                tokens[i]: i for i, t in enumerate(token_types) if t == _CONTROL and tokens[i]
            }
        self.vocab_size = len(tokens)
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_bos = add_bos
        self.pre = pre

    def encode(
        self, text: str, add_bos: bool | None = None, parse_special: bool = False
    ) -> list[int]:
        """Token ids of `text`; a BOS id first when add_bos (default: what the GGUF says)."""
        ids: list[int] = []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.append(self.bos_id)
        if not parse_special or not self._special:
            ids.extend(self._tok.encode(text, add_special_tokens=False).ids)
            return ids
        # split out control tokens written in the text, BPE the pieces between them
        pos = 0
        while pos < len(text):
            hits = [(text.find(s, pos), s) for s in self._special]
            hits = [(at, s) for at, s in hits if at >= 0]
            if not hits:
                break
            at, s = min(hits, key=lambda h: (h[0], -len(h[1])))
            if at > pos:
                ids.extend(self._tok.encode(text[pos:at], add_special_tokens=False).ids)
            ids.append(self._special[s])
            pos = at + len(s)
        if pos < len(text):
            ids.extend(self._tok.encode(text[pos:], add_special_tokens=False).ids)
        return ids

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        """Text of token ids; ids outside the vocabulary are an EngineError."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise EngineError(
                f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})"
            )
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])


_KEYS = {
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.add_bos_token",
}


@lru_cache(maxsize=4)
def _tokenizer_cached(path: str, mtime_ns: int) -> Tokenizer:
    from engine.gguf_meta import read_metadata

    meta = read_metadata(path, _KEYS)
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise EngineError(
            f"{path}: the GGUF carries no tokenizer (tokenizer.ggml.model is missing)"
        )
    if model != "gpt2":
        raise EngineError(
            f"{path}: tokenizer model {model!r} is not supported (only byte-level BPE, 'gpt2')"
        )
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise EngineError(f"{path}: the GGUF carries no tokenizer vocabulary or merges")
    return Tokenizer(
        tokens=list(tokens),
        merges=list(merges),
        pre=meta.get("tokenizer.ggml.pre") or "default",
        token_types=list(meta.get("tokenizer.ggml.token_type") or []) or None,
        bos_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_id=meta.get("tokenizer.ggml.eos_token_id"),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token") or False),
    )


def load_gguf_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer stored in a GGUF file (cached per file)."""
    p = Path(path)
    if not p.is_file():
        raise EngineError(f"model file not found: {p}")
    return _tokenizer_cached(str(p), p.stat().st_mtime_ns)
