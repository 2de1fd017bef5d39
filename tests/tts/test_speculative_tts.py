"""Speculative sampling of the codec LM through the shared loop keeps the model's distribution.

The target is a tiny codec LM (1 book of 3 codes, units of 0-2 frames) bound to a 2-unit
utterance, so every token stream it can generate is enumerable (``sequence_distribution``). Drafts
come from a smaller, differently seeded codec LM sampled with its own ``q`` (a draft LM, as the
TTS issue allows) and from random MTP heads on the target's hidden states (one-hot drafts, and
drafts sampled from the heads with their ``q``, as ``burble speak`` drafts); the
sampled streams must fit the exact distribution (chi-square), and a verifier that ignores ``q`` in
its residual must not (the negative control).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import burble.decoding.generate as generate_module
from burble.decoding.drafters import ModelDrafter
from burble.decoding.generate import generate
from burble.decoding.mtp import MTPConfig, MTPDrafter, MTPHeads
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import verify_sampling
from burble.testing.statistics import chi_square_gof
from burble.testing.toy_models import sequence_distribution
from burble.tts.model import CodecLM, CodecLMConfig, CodecLMSession

ALPHA = 1e-3
SAMPLES = 2000
UNITS = [1, 2]
CONFIG = CodecLMConfig(num_phonemes=4, num_books=1, codebook_size=3, max_duration=2, width=16, heads=2,
                       decoder_layers=1, encoder_layers=1, ff=32, dropout=0.0)
DRAFT_CONFIG = CodecLMConfig(**{**CONFIG.to_dict(), "width": 8, "heads": 1, "ff": 16})
OPTIONS = DecodingOptions(max_new_tokens=8, eos_token_id=CONFIG.eos, temperature=0.9, draft_length=3)


def _model(config: CodecLMConfig, seed: int, scale: float = 3.0) -> CodecLM:
    torch.manual_seed(seed)
    model = CodecLM(config).double().eval()
    with torch.no_grad():  # peakier logits: a distribution far from uniform is a sharper test
        model.output.weight.mul_(scale)
    return model


TARGET = _model(CONFIG, 0)


def _drafter(kind: str):
    if kind == "draft-lm":
        return ModelDrafter(CodecLMSession(_model(DRAFT_CONFIG, 1), UNITS), sample=True,
                            generator=torch.Generator().manual_seed(9), eos_token_id=CONFIG.eos)
    torch.manual_seed(2)
    heads = MTPHeads(MTPConfig(hidden_size=CONFIG.width, num_heads=3, inner_size=16, draft_vocab_size=CONFIG.vocab_size,
                               decoder_inputs=kind.endswith("-inputs")),
                     torch.arange(CONFIG.vocab_size)).double().eval()
    return heads


def _counts(kind: str) -> tuple[Counter, float]:
    g = torch.Generator().manual_seed(0)
    counts: Counter = Counter()
    drafted = accepted = 0
    target = CodecLMSession(TARGET, UNITS)
    drafter = _drafter(kind)
    draft_generator = torch.Generator().manual_seed(9)
    for _ in range(SAMPLES):
        d = drafter if kind == "draft-lm" else MTPDrafter(target, drafter, eos_token_id=CONFIG.eos,
                                                          sample=kind.startswith("mtp-sampled"), generator=draft_generator)
        result = generate(target, torch.tensor([[CONFIG.bos]]), OPTIONS, drafter=d, generator=g)
        counts[tuple(result.tokens[0]) + ((CONFIG.eos,) if result.finished[0] else ())] += 1
        drafted += result.stats.drafted
        accepted += result.stats.accepted
    return counts, accepted / max(drafted, 1)


def _exact() -> dict:
    return sequence_distribution(CodecLMSession(TARGET, UNITS), [CONFIG.bos], OPTIONS.max_new_tokens,
                                 temperature=OPTIONS.temperature, eos_token_id=CONFIG.eos)


def test_the_exact_distribution_is_a_real_test():
    exact = _exact()
    assert 20 < len(exact) < 400 and all(k[-1] == CONFIG.eos for k in exact)  # every stream ends by the grammar
    assert max(exact.values()) < 0.5


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["draft-lm", "mtp-heads", "mtp-sampled", "mtp-sampled-inputs"])
def test_speculative_tts_sampling_is_lossless(kind):
    counts, rate = _counts(kind)
    assert 0.01 < rate < 0.95, rate  # drafts were both accepted and rejected
    result = chi_square_gof(counts, _exact())
    assert result.p_value > ALPHA, result


def _residual_ignores_q(draft, draft_probs, target_probs, generator=None):
    for j, x in enumerate(draft):
        p = target_probs[j]
        qx = 1.0 if draft_probs is None else float(draft_probs[j, x])
        if float(torch.rand((), generator=generator, dtype=torch.float64)) < min(1.0, float(p[x]) / qx):
            continue
        return j, int(torch.multinomial(p, 1, generator=generator))
    return len(draft), int(torch.multinomial(target_probs[len(draft)], 1, generator=generator))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["draft-lm", "mtp-sampled"])
def test_a_wrong_verifier_is_caught_on_the_tts_path(monkeypatch, kind):
    monkeypatch.setattr(generate_module, "verify_sampling", _residual_ignores_q)
    counts, _ = _counts(kind)
    assert chi_square_gof(counts, _exact()).p_value < ALPHA
    assert verify_sampling is not _residual_ignores_q
