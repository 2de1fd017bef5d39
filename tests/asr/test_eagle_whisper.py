"""The draft layer burble ships for tiny.en: lossless on real speech, and accepted far above chance.

The tests decode a few real dev recordings plainly and with ``--speculative eagle``. The tokens must
be identical, and the shipped layer must be accepted as measured (``recipes/mtp_heads/RESULTS_eagle.md``).
As a negative control, the same layer with its output rows rolled by one (each row then scores its
neighbour's token) must fall to chance: the acceptance comes from what the layer learned.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

import burble
from burble.asr.options import TranscribeOptions
from burble.decoding.stats import SpeculativeStats
from burble.testing.dev_audio import dev_audio_items, require_shared

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,))
EAGLE = replace(GREEDY, speculative="eagle")
# Measured 1.69 on these clips with the layer shipped until 2026-12-06 (run 2 in RESULTS_eagle.md) (chance: ~1.0, see the negative control).
ACCEPTED_AT_LEAST = 1.45


@pytest.fixture(scope="module")
def asr():
    require_shared()
    model = burble.load_model("tiny.en")
    if model.whisper.draft_layer is None:
        pytest.fail("burble ships a draft layer for tiny.en (burble/asr/whisper/heads/tiny.en.eagle.safetensors)")
    return model


def _decode_dev(asr, count: int = 4) -> tuple[SpeculativeStats, bool]:
    stats, identical = SpeculativeStats(), True
    clips = [item for item in dev_audio_items() if item.duration_s <= 30.0][:count]
    with torch.inference_mode():
        for item in clips:
            audio = item.load()
            plain = asr.transcribe(audio, GREEDY)
            drafted = asr.transcribe(audio, EAGLE)
            identical &= [s.tokens for s in plain.segments] == [s.tokens for s in drafted.segments]
            stats.merge(drafted.stats)
    return stats, identical


def test_shipped_draft_layer_is_lossless_and_accepted(asr):
    stats, identical = _decode_dev(asr)
    assert identical
    assert stats.drafted > 0
    assert stats.mean_acceptance_length > ACCEPTED_AT_LEAST, stats.mean_acceptance_length


def test_a_layer_scoring_the_wrong_rows_is_accepted_at_chance(asr):
    broken = copy.deepcopy(asr.whisper.draft_layer)
    with torch.no_grad():
        broken.projection.copy_(torch.roll(broken.projection, shifts=1, dims=0))
    asr_broken = copy.copy(asr)
    asr_broken.whisper = replace(asr.whisper, draft_layer=broken)
    stats, identical = _decode_dev(asr_broken)
    assert identical  # a bad drafter costs speed, never tokens
    assert stats.mean_acceptance_length < 1.15, stats.mean_acceptance_length


def test_auto_drafts_two_token_chains_with_the_layer_offline_and_plainly_without_one(asr):
    """``--speculative auto`` offline: the shipped layer, 2 tokens a pass (what measured fastest);
    a model without a layer (here: the same one with it taken away) decodes plainly."""
    item = [item for item in dev_audio_items() if item.duration_s <= 30.0][0]
    audio = item.load()
    auto = replace(GREEDY, speculative="auto")
    with torch.inference_mode():
        plain = asr.transcribe(audio, GREEDY)
        drafted = asr.transcribe(audio, auto)
        without = copy.copy(asr)
        without.whisper = replace(asr.whisper, draft_layer=None)
        undrafted = without.transcribe(audio, auto)
    assert [s.tokens for s in drafted.segments] == [s.tokens for s in plain.segments]
    assert drafted.stats.drafted > 0 and drafted.stats.target_passes < plain.stats.target_passes
    assert drafted.stats.drafted <= 2 * drafted.stats.target_passes
    assert undrafted.stats.drafted == 0 and undrafted.stats.target_passes == plain.stats.target_passes


def test_first_position_leaves_take_fewer_passes_for_the_same_tokens(asr):
    """``--draft-tree static`` with the layer: the chain plus the first position's next-best guesses.
    Same tokens as plain decoding, and fewer passes than the chain alone (the leaves are accepted
    where the chain's first token is not; a tree quietly verified as its chain would tie)."""
    chain = replace(EAGLE, draft_length=3)
    tree = replace(chain, draft_tree="static")
    passes = {}
    with torch.inference_mode():
        for item in [item for item in dev_audio_items() if item.duration_s <= 30.0][:4]:
            audio = item.load()
            plain = [s.tokens for s in asr.transcribe(audio, GREEDY).segments]
            for name, options in (("chain", chain), ("tree", tree)):
                result = asr.transcribe(audio, options)
                assert [s.tokens for s in result.segments] == plain, (item.id, name)
                passes[name] = passes.get(name, 0) + result.stats.target_passes
    assert passes["tree"] < passes["chain"], passes
