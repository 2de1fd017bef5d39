"""A decode's recorded alignment-head scores are the timing pass's, row for row, and rows computed
after a rejected draft token are never used."""

from __future__ import annotations

import pytest
import torch

import burble
from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
from burble.asr.options import TranscribeOptions
from burble.asr.prompt import sot_sequence
from burble.asr.whisper.attention_record import CrossAttentionRecord, heads_by_layer
from burble.asr.whisper.timing import _timing_pass, align
from burble.audio.io import load_audio
from burble.decoding.drafters import PreviousHypothesisDrafter
from burble.decoding.stats import SpeculativeStats

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,), without_timestamps=True)


def _pass(record: CrossAttentionRecord, start: int, tokens: list[int]) -> None:
    """A fake pass whose row for position p holds the value p * 100 + its token."""
    rows = torch.tensor([[(start + i) * 100.0 + t for i, t in enumerate(tokens)]])[:, :, None].expand(1, len(tokens), 3)
    record.add(start, torch.tensor([tokens]), [rows[None]])


def test_rows_after_a_rejected_draft_token_are_not_used():
    record = CrossAttentionRecord({0: [0]})
    _pass(record, 0, [1, 2, 3])  # the prompt
    _pass(record, 3, [4, 5, 6])  # verification: 5 (position 4) is rejected, the model says 7
    final = [1, 2, 3, 4, 7, 8, 9]
    # Control: position 4 and 5 were computed only after the rejected 5: no scores yet.
    assert record.scores(final, 0, 6) is None
    _pass(record, 4, [7, 8])  # the next pass feeds the correction and one more token
    scores = record.scores(final, 0, 6)
    assert scores is not None and scores.shape == (1, 6, 3)
    assert scores[0, :, 0].tolist() == [1.0, 102.0, 203.0, 304.0, 407.0, 508.0]
    assert record.scores(final, 2, 5)[0, :, 0].tolist() == [203.0, 304.0, 407.0]
    assert record.scores(final, 0, 7) is None  # 9 was never fed (a decode cut at its token limit)
    record.add(0, torch.tensor([[1, 2], [1, 2]]), [torch.zeros(2, 1, 2, 3)])  # a batch: not one text
    assert len(record._passes) == 3


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_speculative_decode_records_the_timing_pass_rows():
    """The rows recorded while decoding JFK with a draft that is partly wrong equal the rows of
    align()'s own pass over the final text, and give the same word times."""
    asr = burble.load_model("tiny.en")
    model, tokenizer = asr.model, asr.tokenizer
    audio = load_audio("examples/jfk.wav")
    features = asr.encode(pad_or_trim(log_mel_spectrogram(audio)))
    start = list(sot_sequence(tokenizer, GREEDY))
    prompt = start + [tokenizer.no_timestamps]
    plain = asr.decode_window(features, prompt, GREEDY).tokens
    wrong = list(plain)
    wrong[5] = tokenizer.encode(" banana")[0]  # rejected there, then redrafted from the hypothesis
    drafter = PreviousHypothesisDrafter(wrong)
    stats = SpeculativeStats()
    window = asr.decode_window(features, prompt, GREEDY, drafter=drafter, record_alignment=True, stats=stats)
    assert window.tokens == plain and 0 < stats.accepted < stats.drafted  # some draft rows were wrong
    record = window.text_model.record
    assert record is not None and len(record._passes) > 2  # the prefill and several verifications
    text = [t for t in window.tokens if t < tokenizer.eot]
    recorded = record.scores(prompt + text, 0, len(prompt) + len(text))
    reference, probabilities = _timing_pass(model, tokenizer, start, text, features, window.text_model)
    assert recorded is not None and recorded.shape[0] == len(model.alignment_heads)
    assert recorded.shape[1] == reference.shape[1] - 1  # all but end-of-text's row
    assert torch.allclose(recorded, reference[:, :-1], atol=1e-3), float((recorded - reference[:, :-1]).abs().max())
    with_pass = align(model, tokenizer, start, text, features, 2 * 550, text_model=window.text_model)
    with_record = align(model, tokenizer, start, text, features, 2 * 550, scores=recorded, token_probabilities=probabilities)
    assert [w.word for w in with_record.words] == [w.word for w in with_pass.words]
    # The standardisation over rows misses end-of-text's row: times may move by a frame or two.
    assert max(abs(a.start - b.start) + abs(a.end - b.end) for a, b in zip(with_record.words, with_pass.words)) <= 0.1
    assert heads_by_layer(model.alignment_heads) == record.heads
    with pytest.raises(ValueError):
        align(model, tokenizer, start, text, features, 1100, scores=recorded[:, :-2], token_probabilities=probabilities)
