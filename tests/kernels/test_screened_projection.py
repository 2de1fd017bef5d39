"""The int8 logit screen: its error bound holds, and the argmax it leaves is the float32 one.

Rows are tiny.en decoder states (random audio, real prompts: the logits have Whisper's range) and
the weight is tiny.en's tied output embedding, so the bound is tested at the scale it is used at.
"""

from __future__ import annotations

import pytest
import torch

import burble
from burble.kernels import screened_projection
from burble.kernels.screened_projection import Int8Table, ScreenPolicy, error_bound, screened_logits

EOT = 50256  # tiny.en: the specials and timestamps follow end-of-text


@pytest.fixture(scope="module")
def states() -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows (N, D), embedding (V, D))``: tiny.en's final-norm decoder states for a few prompts."""
    asr = burble.load_model("tiny.en")
    model = asr.whisper.model
    torch.manual_seed(0)
    text_model = asr.whisper.text_model(torch.randn(1, 1500, model.dims.n_audio_state) * 0.5)
    prompt = asr.tokenizer.encode(" And so, my fellow Americans: ask not what your country can do for you.")
    tokens = torch.tensor([asr.build_prompt([], burble.TranscribeOptions()) + prompt])
    cache = text_model.new_cache(1, 448)
    hidden = text_model._hidden(tokens, cache)[0]
    return hidden.float(), model.decoder.token_embedding.weight.detach().float()


@pytest.fixture(scope="module")
def table(states) -> Int8Table:
    return Int8Table.of(states[1])


def _policy(table: Int8Table, window: float = 4.0) -> ScreenPolicy:
    vocab = table.weight.shape[0]
    return ScreenPolicy.of(table, exact=list(range(EOT, vocab)) + [220], ignored=[1, 2, 7], window=window)


def _screen_rows(rows: torch.Tensor, table: Int8Table, policy: ScreenPolicy) -> torch.Tensor:
    """Each row screened alone (as decoding does); rows the screen hands back (``None``) are left out."""
    screened = [screened_logits(row[None], table, policy) for row in rows]
    kept = [i for i, logits in enumerate(screened) if logits is not None]
    assert len(kept) >= len(rows) // 2, f"only {len(kept)} of {len(rows)} rows screened"
    return torch.tensor(kept), torch.cat([screened[i] for i in kept])


def test_error_bound_holds(states, table):
    rows, weight = states
    approx = torch.ops.aten._weight_int8pack_mm(rows.bfloat16(), table.quantized, table.scale_bf16).float()
    error = (approx - rows @ weight.T).abs()
    bound = error_bound(rows, approx, table)
    assert (error <= bound).all()
    # Negative control: a tenth of the bound is exceeded, so the check above has teeth.
    assert (error > bound / 10).any()


@pytest.mark.parametrize("window", [0.0, 4.0])
def test_argmax_is_exact_under_whisper_masks(states, table, window):
    kept, screened = _screen_rows(states[0], table, _policy(table, window))
    rows, weight = states[0][kept], states[1]
    exact = rows @ weight.T
    vocab = weight.shape[0]
    masks = {
        "none": torch.zeros(vocab, dtype=torch.bool),
        "ignored": torch.isin(torch.arange(vocab), torch.tensor([1, 2, 7])),
        "blank and eot": torch.isin(torch.arange(vocab), torch.tensor([220, EOT])),
        "all text": torch.arange(vocab) < EOT + 1,
        "timestamps": torch.arange(vocab) >= EOT + 100,
    }
    for name, mask in masks.items():
        got = screened.masked_fill(mask, float("-inf")).argmax(dim=1)
        want = exact.masked_fill(mask, float("-inf")).argmax(dim=1)
        assert torch.equal(got, want), name
        # The winner is recomputed in float32 (a product over fewer rows: the same to rounding).
        torch.testing.assert_close(screened.gather(1, got[:, None]), exact.gather(1, want[:, None]), rtol=0, atol=1e-4)
    # Negative control: the int8 approximations alone rank another text token first in some row
    # (so the float32 recomputation is what makes the argmax right).
    every, weight = states
    approx = torch.ops.aten._weight_int8pack_mm(every.bfloat16(), table.quantized, table.scale_bf16).float()
    assert (approx[:, :EOT].argmax(dim=1) != (every @ weight.T)[:, :EOT].argmax(dim=1)).any()


def test_normaliser_is_close(states, table):
    kept, screened = _screen_rows(states[0], table, _policy(table))
    rows, weight = states[0][kept], states[1]
    difference = (torch.logsumexp(screened, dim=1) - torch.logsumexp(rows @ weight.T, dim=1)).abs()
    assert difference.max() < 1e-2


def test_too_many_candidates_gives_none(states, table, monkeypatch):
    rows, _ = states
    monkeypatch.setattr(screened_projection, "MAX_EXACT", 0)
    assert screened_logits(rows[:1], table, _policy(table, window=1000.0)) is None


def test_policy_sets():
    weight = torch.randn(10, 4)
    policy = ScreenPolicy.of(Int8Table.of(weight), exact=[8, 9, 3], ignored=[0])
    assert policy.exact.tolist() == [3, 8, 9]
    assert policy.free.tolist() == [False, True, True, False, True, True, True, True, False, False]
    assert torch.equal(policy.exact_weight_t, weight[[3, 8, 9]].T)
