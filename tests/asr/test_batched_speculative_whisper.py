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


def test_windows_of_different_streams_in_one_batch_match_each_decoded_alone(asr, windows):
    """What a streaming engine batches: windows whose prompts (previous text) differ in length,
    each with its own processor chain, no-speech probe and record of the alignment heads' scores
    (word timing), drafted from their own hypotheses."""
    from burble.asr.whisper.attention_record import CrossAttentionRecord, heads_by_layer

    whisper, tokenizer = asr.whisper, asr.tokenizer
    histories = ["", " And so my fellow Americans.", " He hoped there would be stew for dinner.", " Printing."]
    prompts = [asr.build_prompt(tokenizer.encode(h) if h else [], GREEDY) for h in histories]
    features = windows[: len(prompts)]
    width = max(len(p) for p in prompts)
    padded = torch.tensor([p + [tokenizer.eot] * (width - len(p)) for p in prompts])
    options = decoding_options(whisper, max(prompts, key=len), GREEDY, 0.0)
    chains = [window_processors(whisper, p, GREEDY) for p in prompts]
    probes = [p.index(tokenizer.sot) for p in prompts]
    heads = heads_by_layer(whisper.model.alignment_heads)
    alone, records = [], []
    with torch.inference_mode():
        for b, p in enumerate(prompts):
            text_model = whisper.text_model(features[b : b + 1])
            text_model.record = CrossAttentionRecord(heads)
            alone.append(generate(text_model, torch.tensor([p]), options, processors=chains[b], probe_index=probes[b]))
            records.append(text_model.record)
        drafters = [PreviousHypothesisDrafter(_wrong_at(a.tokens[0], b)) for b, a in enumerate(alone)]
        text_model = whisper.text_model(features)
        text_model.row_records = [CrossAttentionRecord(heads) for _ in prompts]
        batched = generate(
            text_model, padded, options, prompt_lengths=[len(p) for p in prompts],
            row_processors=chains, probe_index=probes, drafter=drafters,
        )  # fmt: skip
    for b, result in enumerate(alone):
        assert batched.tokens[b] == result.tokens[0], b
        assert torch.allclose(batched.probe_logits[b], result.probe_logits[0], atol=1e-3)
        sequence = prompts[b] + result.tokens[0]
        ours = text_model.row_records[b].scores(sequence, probes[b], len(sequence))
        theirs = records[b].scores(sequence, probes[b], len(sequence))
        assert ours is not None and theirs is not None and torch.allclose(ours, theirs, atol=1e-3), b
    assert len({len(p) for p in prompts}) == len(prompts) and batched.stats.accepted > 0


def test_decode_rows_gives_each_stream_its_window_decoded_alone(asr, windows):
    """``decode_rows`` (the streaming engine's batch): windows of different lengths (cross-attention
    K/V stacked and right-padded), prompts, drafts, token caps, one with speculation off; each
    row's tokens, scores and recorded alignment scores equal ``decode_window`` alone."""
    from dataclasses import replace

    from burble.asr.batching import WindowRequest

    tokenizer = asr.tokenizer
    histories = ["", " And so my fellow Americans.", " He hoped there would be stew for dinner.", " Printing."]
    frames = [1500, 1100, 700, 1300]
    requests = []
    for b, (history, n) in enumerate(zip(histories, frames)):
        prompt = asr.build_prompt(tokenizer.encode(history) if history else [], GREEDY)
        options = replace(GREEDY, max_new_tokens=[40, 6, 40, 40][b], speculative="off" if b == 3 else "auto")
        requests.append(WindowRequest(windows[b : b + 1, :n], prompt, options))
    alone = [asr.decode_window(r.audio_features, r.prompt, r.options, record_alignment=True) for r in requests]
    for r, a in zip(requests, alone):
        r.previous_hypothesis = _wrong_at(a.tokens, len(r.prompt) % 3)
    together = asr.decode_rows(requests)
    for b, (ours, theirs) in enumerate(zip(together, alone)):
        assert ours.tokens == theirs.tokens and len(ours.tokens) > 0, b
        assert ours.avg_logprob == pytest.approx(theirs.avg_logprob, abs=1e-4)
        assert ours.no_speech_prob == pytest.approx(theirs.no_speech_prob, abs=1e-4)
        sequence = requests[b].prompt + theirs.tokens
        first = requests[b].prompt.index(tokenizer.sot)
        end = len(sequence) - 1  # a capped decode never fed its last token back
        mine, reference = ours.record.scores(sequence, first, end), theirs.record.scores(sequence, first, end)
        assert reference is not None and mine is not None, b
        assert torch.allclose(mine[..., : frames[b]], reference, atol=1e-3), b
    assert len(together[1].tokens) == 6  # its own cap
