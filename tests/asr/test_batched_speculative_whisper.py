"""Batched speculative decoding of real Whisper windows: token-identical to plain batched greedy.

Rows are different dev recordings decoded together (each row attends to its own audio). Each
row drafts with the previous-hypothesis drafter from a hypothesis that goes wrong at a different
place (a few tokens replaced), so rows accept different numbers of tokens per pass and stand at
different lengths (ragged acceptance); one pass verifies them all from their own positions. The
tokens must be exactly those of plain batched greedy decoding (fp32, the full logits chain).
"""

from __future__ import annotations

import pytest
import torch

import burble
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.asr.options import TranscribeOptions
from burble.asr.processors import window_processors
from burble.asr.search import decoding_options
from burble.decoding.drafters import PreviousHypothesisDrafter
from burble.decoding.generate import generate
from burble.testing.dev_audio import dev_audio_items, require_shared

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,), draft_length=4)


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def windows(asr):
    """Encoder states of the first 8 short dev recordings, one row each."""
    require_shared()
    items = [item for item in dev_audio_items() if item.duration_s <= 30.0][:8]
    with torch.inference_mode():
        return torch.cat([asr.encode(pad_or_trim(log_mel_spectrogram(item.load()))) for item in items])


def _decode(asr, features: torch.Tensor, drafters=None):
    prompt = asr.build_prompt([], GREEDY)
    whisper = asr.whisper
    with torch.inference_mode():
        return generate(
            whisper.text_model(features), torch.tensor([prompt] * features.shape[0]), decoding_options(whisper, prompt, GREEDY, 0.0),
            processors=window_processors(whisper, prompt, GREEDY), drafter=drafters,
        )  # fmt: skip


def _wrong_at(tokens: list[int], row: int) -> list[int]:
    """The hypothesis with a few tokens replaced (where depends on the row) and its end cut."""
    wrong = list(tokens)
    for i in range(2 + row, len(wrong), 5 + row):
        wrong[i] = 13  # "." : rarely right mid-sentence
    return wrong[: max(1, len(wrong) - row)]


@pytest.mark.parametrize("batch", [1, 4, 8])
def test_batched_previous_hypothesis_decoding_is_token_identical(asr, windows, batch):
    features = windows[:batch]
    plain = _decode(asr, features)
    drafters = [PreviousHypothesisDrafter(_wrong_at(tokens, b)) for b, tokens in enumerate(plain.tokens)]
    speculative = _decode(asr, features, drafters if batch > 1 else drafters[0])
    assert speculative.tokens == plain.tokens
    assert speculative.finished == plain.finished
    stats = speculative.stats
    assert 0 < stats.accepted < stats.drafted  # drafts were accepted and rejected
    assert stats.target_passes < plain.stats.target_passes  # and they paid: fewer passes


def test_ragged_rows_are_caught_when_placed_wrong(asr, windows, monkeypatch):
    """Negative control: rows written where the longest row stands (not at their own positions)
    give other tokens, so the identity above can fail."""
    from burble.asr.whisper.model import TextDecoder

    features = windows[:4]
    plain = _decode(asr, features)
    right = TextDecoder.hidden_states

    def shared_start(self, tokens, cache, *, row_starts=None, **kw):
        if row_starts is not None:
            row_starts = torch.full_like(row_starts, int(row_starts.max()))
        return right(self, tokens, cache, row_starts=row_starts, **kw)

    monkeypatch.setattr(TextDecoder, "hidden_states", shared_start)
    drafters = [PreviousHypothesisDrafter(_wrong_at(tokens, b)) for b, tokens in enumerate(plain.tokens)]
    assert _decode(asr, features, drafters).tokens != plain.tokens
