"""Where words begin and end in Whisper's byte-level BPE token stream.

A word ends when the next token starts a new word (a ``Ġ`` piece: leading space), is punctuation
(``,`` ``.`` ``?`` ``"`` ...; apostrophe pieces like ``'s`` continue the word), or is a special or
timestamp token (``>= eot``). Shallow fusion charges a word's LM score to exactly these tokens;
phrase boosting commits a matched phrase only when one of them follows it.
"""

from __future__ import annotations

import weakref

import torch

from burble.asr.tokenizer import WhisperTokenizer

_MASKS: "weakref.WeakKeyDictionary[WhisperTokenizer, dict[tuple[str, int], torch.Tensor]]" = weakref.WeakKeyDictionary()


def is_boundary_piece(piece: str) -> bool:
    """Whether a BPE piece ends the word before it: ``Ġword`` or punctuation (not ``'s``-style)."""
    if piece.startswith("Ġ"):
        return True
    return is_punctuation_piece(piece)


def is_punctuation_piece(piece: str) -> bool:
    """A piece of punctuation only (no letters or digits, no leading space, not an apostrophe piece)."""
    return bool(piece) and not piece.startswith("'") and all(not ch.isalnum() and ch != "Ġ" for ch in piece)


def is_boundary(tokenizer: WhisperTokenizer, token: int) -> bool:
    """Whether ``token`` ends the pending word (see the module docstring)."""
    return token >= tokenizer.eot or is_boundary_piece(tokenizer.piece(token))


def breaks_word(tokenizer: WhisperTokenizer, token: int) -> bool:
    """Whether a token *after* ``token`` starts a new word even without a leading space."""
    if token >= tokenizer.eot:
        return True
    piece = tokenizer.piece(token)
    rest = piece[1:] if piece.startswith("Ġ") else piece
    return not rest or is_punctuation_piece(rest)  # a bare space, or punctuation like ``Ġ"`` / ``(``


def is_word_piece(piece: str) -> bool:
    """Whether a piece carries letters or digits (it is part of a word, not punctuation or a space)."""
    return any(ch.isalnum() for ch in piece)


def word_boundary_mask(tokenizer: WhisperTokenizer, vocab_size: int) -> torch.Tensor:
    """Bool ``(vocab_size,)`` of :func:`is_boundary` over the vocabulary (cached per tokenizer)."""
    return _mask(tokenizer, vocab_size, "boundary", is_boundary_piece, True)


def word_piece_mask(tokenizer: WhisperTokenizer, vocab_size: int) -> torch.Tensor:
    """Bool ``(vocab_size,)``: text tokens with letters or digits (special tokens excluded)."""
    return _mask(tokenizer, vocab_size, "piece", is_word_piece, False)


def _mask(tokenizer: WhisperTokenizer, vocab_size: int, kind: str, rule, special: bool) -> torch.Tensor:
    masks = _MASKS.setdefault(tokenizer, {})
    if (kind, vocab_size) not in masks:
        text = min(tokenizer.eot, vocab_size)
        flags = [rule(tokenizer.piece(token)) for token in range(text)] + [special] * (vocab_size - text)
        masks[(kind, vocab_size)] = torch.tensor(flags, dtype=torch.bool)
    return masks[(kind, vocab_size)]
