"""``burble.codecs.model``: the config's arithmetic, and the codec network's causality and streaming.

The network is the throwaway codec's (seeded random weights, ``codec_helpers``): causality and
streaming == whole are properties of the architecture, whatever the weights. Each causality check
has its negative control (perturbing an earlier frame does change the output), and the streaming
checks cut the input into random pieces, pieces of one frame and empty pieces included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from burble.codecs.mel import log_mel
from burble.codecs.model import CodecConfig, MelCodec
from burble.codecs.streaming import streaming
from codec_helpers import random_pieces


@pytest.fixture(scope="module")
def model(codec) -> MelCodec:
    return codec.model


@pytest.fixture(scope="module")
def mel(speech) -> torch.Tensor:
    return log_mel(speech)[None, :, :160]  # 40 code frames


def normalised(model: MelCodec, mel: torch.Tensor) -> torch.Tensor:
    return (mel - model.mel_mean) / model.mel_std


def test_config_arithmetic():
    config = CodecConfig()
    assert config.hop == 4
    assert config.frame_rate == pytest.approx(22050 / 1024)  # 21.53 Hz
    assert config.bitrate(4) == pytest.approx(22050 / 1024 * 40)  # 861 bit/s: under 1 kbps
    assert config.bitrate(8) == pytest.approx(2 * config.bitrate(4))
    assert CodecConfig.from_dict(config.to_dict()) == config
    assert CodecConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "decoder_units"}).decoder_units == 2
    assert CodecConfig(down_stages=3, channels=(64, 96, 128, 192)).frame_rate == pytest.approx(22050 / 2048)
    with pytest.raises(ValueError, match="channels"):
        MelCodec(CodecConfig(down_stages=3))


def test_tests_here_compute_on_one_thread():
    assert torch.get_num_threads() == 1


def test_shapes(model, mel):
    codes = model.encode(mel, 4)
    assert codes.shape == (1, 4, 40) and codes.dtype == torch.int64
    assert model.decode(codes).shape == (1, 80, 160)
    assert model.decode(codes[:, :1]).shape == (1, 80, 160)
    out = model(mel, num_books=torch.tensor([3]))
    assert out.mel.shape == mel.shape and out.codes.shape == (1, 8, 40)


def perturbed_from(x: torch.Tensor, t: int, seed: int = 0) -> torch.Tensor:
    """``x`` with noise added to every time step ``>= t``."""
    g = torch.Generator().manual_seed(seed)
    y = x.clone()
    y[..., t:] += 2.0 * torch.randn(y[..., t:].shape, generator=g)
    return y


@pytest.mark.parametrize("j", [0, 5, 20, 38])
def test_encoder_is_causal(model, mel, j):
    """Code frame j reads mel frames up to 4 j + 3 only: perturbing the frames after leaves the
    latents and codes of frames <= j exactly as they were."""
    x = normalised(model, mel)
    with torch.no_grad():
        latent = model.encoder(x)
        codes = model.encode(mel, 8)
        future = perturbed_from(mel, 4 * j + 4)
        assert torch.equal(model.encoder(normalised(model, future))[..., : j + 1], latent[..., : j + 1])
        assert torch.equal(model.encode(future, 8)[..., : j + 1], codes[..., : j + 1])
        # negative control: frame 4 j + 3, the last one code frame j reads, does change it
        present = perturbed_from(mel, 4 * j + 3)
        assert not torch.equal(model.encoder(normalised(model, present))[..., j], latent[..., j])
        assert not torch.equal(model.encode(present, 8)[..., j], codes[..., j])


@pytest.mark.parametrize("j", [0, 5, 20, 38])
def test_decoder_is_causal(model, mel, j):
    """Mel frames < 4 (j + 1) read code frames up to j only."""
    codes = model.encode(mel, 8)
    out = model.decode(codes)
    g = torch.Generator().manual_seed(j)
    future = codes.clone()
    future[..., j + 1:] = torch.randint(0, 1024, future[..., j + 1:].shape, generator=g)
    assert torch.equal(model.decode(future)[..., : 4 * (j + 1)], out[..., : 4 * (j + 1)])
    present = codes.clone()
    present[..., j] = (present[..., j] + 1) % 1024  # negative control: code frame j itself
    changed = (model.decode(present) - out).abs().amax(dim=1)[0]
    assert torch.equal(changed[: 4 * j], torch.zeros(4 * j)) and bool((changed[4 * j: 4 * (j + 1)] > 0).all())


@pytest.mark.parametrize("seed", range(4))
def test_encoder_streamed_in_pieces_equals_whole(model, mel, seed):
    """Latents within 1e-5 (measured max 8.6e-7) and exactly the same codes. Pieces of one mel
    frame reach the strided layers with nothing to emit (an empty piece inside the network)."""
    rng = np.random.default_rng(seed)
    x = normalised(model, mel)
    with torch.no_grad():
        whole = model.encoder(x)
        encoder = model.encoder
        with streaming(encoder):
            pieces = [encoder(x[..., p]) for p in random_pieces(x.shape[2], rng, largest=int(rng.choice([1, 3, 9])))]
        streamed = torch.cat(pieces, dim=2)
    assert streamed.shape == whole.shape
    assert (streamed - whole).abs().max() <= 1e-5
    rows = lambda latent: latent[0].t()  # noqa: E731
    q = model.quantizer
    assert torch.equal(q(rows(streamed), 8).codes, q(rows(whole), 8).codes)
    assert torch.equal(q(rows(whole), 8).codes.t()[None], model.encode(mel, 8))


@pytest.mark.parametrize("seed", range(3))
def test_decoder_streamed_in_pieces_equals_whole(model, mel, seed):
    rng = np.random.default_rng(seed)
    codes = model.encode(mel, 8)
    whole = model.decode(codes)
    latent = model.quantizer.decode(codes[0].t()).t()[None]
    with torch.no_grad(), streaming(model.decoder):
        pieces = [model.decoder(latent[..., p]) for p in random_pieces(40, rng, largest=5) if p.stop > p.start]
    streamed = torch.cat(pieces, dim=2) * model.mel_std + model.mel_mean
    assert streamed.shape == whole.shape
    assert (streamed - whole).abs().max() <= 1e-5


def test_negative_control_streaming_without_the_context_manager_differs(model, mel):
    x = normalised(model, mel)
    with torch.no_grad():
        whole = model.encoder(x)
        stateless = torch.cat([model.encoder(x[..., :80]), model.encoder(x[..., 80:])], dim=2)
    assert (stateless - whole).abs().max() > 1e-3


def test_a_deeper_decoder_stays_causal_and_streams(mel):
    """The shipped decoder's shape (5 residual units per rate, dilations up to 9; random weights):
    pieces give the whole output, and a code frame changes no mel frame before its own (negative
    control: it does change its own)."""
    torch.manual_seed(1)
    model = MelCodec(CodecConfig(decoder_units=5)).eval()
    latent = torch.randn(1, 128, 40)
    with torch.no_grad():
        whole = model.decoder(latent)
        with streaming(model.decoder):
            pieces = [model.decoder(latent[..., p]) for p in random_pieces(40, np.random.default_rng(0), largest=4)
                      if p.stop > p.start]
        assert (torch.cat(pieces, dim=2) - whole).abs().max() <= 1e-5
        changed = latent.clone()
        changed[..., 20] += 1.0
        diff = (model.decoder(changed) - whole).abs().amax(dim=1)[0]
    assert torch.equal(diff[:80], torch.zeros(80)) and bool((diff[80:84] > 0).all())
