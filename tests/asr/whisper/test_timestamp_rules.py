"""Rule 5 of the timestamp grammar compares raw logits; it must decide exactly as the log-softmax form."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from burble.asr.whisper.rules import TimestampRules

EOT, NO_TIMESTAMPS, TB, VOCAB = 50256, 50362, 50363, 51864  # tiny.en's ids
SAMPLE_BEGIN = 3


def _reference_prefer_timestamps(rules: TimestampRules, logits: torch.Tensor, rows: list[int]) -> None:
    """openai/whisper's form: a full-vocabulary log_softmax per row, then the mass comparison."""
    for row in rows:
        logprobs = torch.log_softmax(logits[row].float(), dim=-1)
        if torch.logsumexp(logprobs[TB:], dim=-1) > logprobs[:TB].max():
            logits[row, :TB] = float("-inf")


PROMPT = [50257, NO_TIMESTAMPS - 1, NO_TIMESTAMPS][:SAMPLE_BEGIN]
HISTORIES = {
    "first token": [],  # only the initial-timestamp rules
    "inside a segment": [TB + 10, 400],  # rule 5 applies
    "opened pair": [TB + 4, 500, TB + 9],  # the end timestamp must follow; rule 5 applies
    "closed pair": [TB + 4, 500, TB + 9, TB + 9],  # text must follow; rule 5 does not apply
}


def _logits(count: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(count, VOCAB, generator=gen) * 3
    # Shift the timestamps so that both outcomes of the comparison are common.
    logits[:, TB:] += torch.linspace(-12.0, 4.0, count)[:, None]
    return logits


def test_raw_logit_comparison_decides_as_log_softmax(monkeypatch):
    tokenizer = SimpleNamespace(eot=EOT, no_timestamps=NO_TIMESTAMPS, timestamp_begin=TB)
    rules = TimestampRules(tokenizer, sample_begin=SAMPLE_BEGIN)
    for seed in range(3):
        logits = _logits(32, seed)
        for name, history in HISTORIES.items():
            tokens = torch.tensor([PROMPT + history] * logits.shape[0])
            fast = logits.clone()
            rules.apply(fast, tokens)
            with monkeypatch.context() as patch:
                patch.setattr(TimestampRules, "_prefer_timestamps", _reference_prefer_timestamps)
                reference = logits.clone()
                rules.apply(reference, tokens)
            assert torch.equal(fast, reference), (seed, name)
            if name in ("inside a segment", "opened pair"):
                # End-of-text is below timestamp_begin: only rule 5 forbids it here. Both outcomes
                # occur, so a comparison that always (or never) fires would fail this test.
                fired = torch.isinf(fast[:, EOT])
                assert fired.any() and not fired.all(), (seed, name)


def test_rule_5_skips_rows_it_does_not_apply_to():
    tokenizer = SimpleNamespace(eot=EOT, no_timestamps=NO_TIMESTAMPS, timestamp_begin=TB)
    rules = TimestampRules(tokenizer, sample_begin=SAMPLE_BEGIN)
    prompt = PROMPT
    # Row 0 closed a pair (text must follow); row 1 is inside a segment. Timestamps dominate both.
    tokens = torch.tensor([prompt + [TB + 4, TB + 4], prompt + [TB + 4, 400]])
    logits = torch.zeros(2, VOCAB)
    logits[:, TB:] = 5.0
    rules.apply(logits, tokens)
    assert torch.isfinite(logits[0, :EOT]).all()  # rule 5 did not forbid row 0's text
    assert torch.isinf(logits[1, :TB]).all()
