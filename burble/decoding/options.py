"""Options of the shared decoding core (model-agnostic)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class DecodingOptions:
    """How to search for an output sequence.

    Attributes:
      max_new_tokens: stop after this many generated tokens.
      eos_token_id: generation of this token ends a row (``None``: only the length limit ends it).
      temperature: 0 for greedy / beam search; > 0 samples from softmax(logits / temperature).
      top_k: keep only the k most likely tokens when sampling (0 = off).
      top_p: nucleus sampling mass (1.0 = off).
      beam_size: > 1 runs beam search (temperature must be 0).
      patience: beam search keeps going until ``beam_size * patience`` hypotheses finished.
      length_penalty: ``None`` ranks by sum logprob / length; a float uses Google NMT's penalty.
      draft_length: tokens a speculative drafter may propose per target pass (``k``).
      length_offset: tokens at the prompt's end that count toward a beam hypothesis's length (a
        forced prefix the continuation completes). Beam search ranks finished hypotheses by score
        over length; counted from the prefix, a short ending is not favoured over a longer one by
        a score normalised over its few new tokens alone.
    """

    max_new_tokens: int = 224
    eos_token_id: Optional[int] = None
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    beam_size: int = 1
    patience: float = 1.0
    length_penalty: Optional[float] = None
    draft_length: int = 4
    length_offset: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.beam_size < 1:
            raise ValueError("beam_size must be >= 1")
        if self.beam_size > 1 and self.temperature > 0:
            raise ValueError("beam search is deterministic: use temperature 0 with beam_size > 1")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.draft_length < 0:
            raise ValueError("draft_length must be >= 0")
