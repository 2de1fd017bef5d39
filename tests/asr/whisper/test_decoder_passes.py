"""A decoder pass of several tokens (speculative verification, a batch of streams) takes the
prepacked oneDNN path of ``burble.kernels.linear`` in every projection, and scores each token as
one-token steps do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from burble.asr.whisper.model import WhisperTextModel
from burble.kernels import linear as linear_module

pytestmark = pytest.mark.skipif(not linear_module._packing_available(), reason="no oneDNN linear in this torch build")


def _packed_layers(text_model: WhisperTextModel) -> list[str]:
    return [name for name, m in text_model.model.decoder.blocks.named_modules()
            if isinstance(m, nn.Linear) and getattr(m, linear_module._PACKED_ATTR, None) is not None]


def test_a_multi_token_pass_packs_every_decoder_projection_and_scores_as_single_steps(text_model):
    tokens = [50257, 50363, 383, 1271, 286, 3891]  # <|sot|> <|0.00|> " The" " number" " of" ...
    stepped = text_model.new_cache(1, 64)
    text_model.forward(torch.tensor([tokens[:2]]), stepped)
    one_at_a_time = torch.cat([text_model.forward(torch.tensor([[t]]), stepped)[0] for t in tokens[2:]])
    cache = text_model.new_cache(1, 64)
    text_model.forward(torch.tensor([tokens[:2]]), cache)
    together = text_model.forward(torch.tensor([tokens[2:]]), cache)[0]
    packed = _packed_layers(text_model)
    # Only the projections of the tokens pack; the audio's cross-attention K/V (1500 rows) stay with
    # F.linear. The query, key and value pack as one fused layer, kept on the self-attention module.
    per_block = ["attn.out", "cross_attn.query", "cross_attn.out", "mlp.0", "mlp.2"]
    expected = [f"{b}.{p}" for b in range(len(text_model.model.decoder.blocks)) for p in per_block]
    assert sorted(packed) == sorted(expected)
    for block in text_model.model.decoder.blocks:
        fused = getattr(block.attn, linear_module._FUSED_ATTR)
        assert getattr(fused, linear_module._PACKED_ATTR, None) is not None
    torch.testing.assert_close(together, one_at_a_time, atol=2e-4, rtol=1e-4)
