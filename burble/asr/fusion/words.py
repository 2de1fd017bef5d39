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

_MASKS: "weakref.WeakKeyDictionary[WhisperTokenizer, dict[int, torch.Tensor]]" = weakref.WeakKeyDictionary()


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


def word_boundary_mask(tokenizer: WhisperTokenizer, vocab_size: int) -> torch.Tensor:
    """Bool ``(vocab_size,)`` of :func:`is_boundary` over the vocabulary (cached per tokenizer)."""
    masks = _MASKS.setdefault(tokenizer, {})
    if vocab_size not in masks:
        mask = torch.ones(vocab_size, dtype=torch.bool)
        for token in range(min(tokenizer.eot, vocab_size)):
            mask[token] = is_boundary_piece(tokenizer.piece(token))
        masks[vocab_size] = mask
    return masks[vocab_size]
