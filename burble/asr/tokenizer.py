"""Whisper's byte-level BPE tokenizer, read from a checkpoint's ``tokenizer.json`` with HF ``tokenizers``.

Special-token ids differ between English-only and multilingual checkpoints, so they are looked up
by their text (``<|endoftext|>``, ``<|startoftranscript|>``, ...). Timestamp tokens are not in
``tokenizer.json``: they follow ``<|notimestamps|>`` at 0.02 s steps.

The tokenizer holds no per-call state: one instance is shared by every caller of a model (server
slots decode different languages at once), so the language and task are arguments of
:meth:`WhisperTokenizer.sot_sequence`, never attributes.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Iterable, Optional, Sequence

from tokenizers import Tokenizer

TIME_PRECISION = 0.02  # seconds per timestamp token


class WhisperTokenizer:
    """Text <-> token ids for Whisper, plus the special tokens decoding needs.

    Args:
      path: a ``tokenizer.json`` file (or a directory containing one).
      multilingual: override the English-only / multilingual detection.
    """

    def __init__(self, path: str | Path, *, multilingual: Optional[bool] = None) -> None:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        self.hf = Tokenizer.from_file(str(path))
        self.special: dict[str, int] = {
            t.content: i for i, t in self.hf.get_added_tokens_decoder().items() if t.special
        }
        self.eot = self.special["<|endoftext|>"]
        self.sot = self.special["<|startoftranscript|>"]
        self.no_timestamps = self.special["<|notimestamps|>"]
        self.timestamp_begin = self.no_timestamps + 1
        self.sot_prev = self.special["<|startofprev|>"]
        self.no_speech = self.special.get("<|nospeech|>", self.special.get("<|nocaptions|>"))
        self.transcribe = self.special["<|transcribe|>"]
        self.translate = self.special["<|translate|>"]
        self.language_tokens = {
            content[2:-2]: i
            for content, i in self.special.items()
            if len(content) <= 9 and content[2:-2].isalpha() and content[2:-2].islower()
            and self.sot < i < self.translate
        }
        # English-only checkpoints keep GPT-2's vocabulary (end-of-text at 50256); the multilingual
        # vocabulary has one more byte-level token. The model's vocab size says the same.
        self.multilingual = self.eot != 50256 if multilingual is None else multilingual

    def sot_sequence(self, language: Optional[str], task: str = "transcribe") -> tuple[int, ...]:
        """``<|startoftranscript|>`` plus language and task tokens (multilingual models only).

        English-only models have no language or task tokens, so both arguments are ignored there.
        """
        if not self.multilingual:
            return (self.sot,)
        sequence = [self.sot]
        if language is not None:
            if language not in self.language_tokens:
                raise ValueError(f"unknown language {language!r}")
            sequence.append(self.language_tokens[language])
        sequence.append(self.translate if task == "translate" else self.transcribe)
        return tuple(sequence)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of the ids, special and timestamp tokens left out."""
        return self.hf.decode([i for i in ids if i < self.eot], skip_special_tokens=True)

    def decode_with_timestamps(self, ids: Iterable[int]) -> str:
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i >= self.timestamp_begin:
                out.append(self.hf.decode(run))
                run = []
                out.append(f"<|{(i - self.timestamp_begin) * TIME_PRECISION:.2f}|>")
            elif i < self.eot:
                run.append(i)
        out.append(self.hf.decode(run))
        return "".join(out)

    def piece(self, token_id: int) -> str:
        """The token's byte-level BPE piece (``Ġ`` marks a leading space)."""
        return self.hf.id_to_token(token_id) or ""

    def starts_word(self, token_id: int) -> bool:
        """Whether a text token begins with a space (i.e. begins a new word)."""
        return self.piece(token_id).startswith("Ġ")

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        """Ids of symbols that are not speech (Whisper's default ``suppress_tokens="-1"`` set)."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        miscellaneous = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + list(miscellaneous):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        return tuple(sorted(result))

    def split_to_word_tokens(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        """Group text tokens into words (a word starts at a token with a leading space)."""
        words: list[str] = []
        groups: list[list[int]] = []
        for token in tokens:
            if token >= self.eot:
                continue
            if not groups or self.starts_word(token) or self._is_punctuation_only(token):
                groups.append([token])
            else:
                groups[-1].append(token)
        for group in groups:
            words.append(self.hf.decode(group))
        return words, groups

    def _is_punctuation_only(self, token: int) -> bool:
        text = self.piece(token)
        return bool(text) and all(not ch.isalnum() and ch != "Ġ" for ch in text) and not text.startswith("'")
