"""``burble.codecs.codec``: load/save, encode/decode, the streaming encoder and decoders, bad input.

Run on the throwaway codec of ``codec_helpers`` (seeded random weights, real HiFi-GAN vocoder):
what is checked holds for any weights. Measured here (one thread):

* ``stream_encoder`` over random pieces gives exactly ``encode``'s codes, for 22.05 kHz input
  and for 16 kHz input too (soxr's output does not depend on how its input is cut, so the
  resampled samples, the mel frames and the codes are the same);
* ``stream_decoder()`` (the exact streaming vocoder) gives ``decode``'s audio: max |difference|
  6e-6, asserted < 1e-4; ``stream_decoder(lookahead=2)`` (the approximate chunked vocoder) gives
  the same length, and exactly (within 1e-5) ``decode``'s mel before the vocoder: only the vocoder
  approximation differs (its audio bound is in test_vocoder.py, on real speech);
* ``algorithmic_latency()`` is what the streams do, fed 128 samples at a time (128 divides the
  frame's 1024 samples and the STFT's 384, so the measurement is exact): 4666 samples (211.6 ms)
  with the exact vocoder, 1920 (87.1 ms) with ``lookahead=2``, the stream's first code frame
  included (``StreamingVocoder`` sends its first frames out without waiting for a whole chunk);
  through the distilled ``low-latency`` vocoder (698 samples of reach), exactly ``decode``'s audio
  at 2106 samples (95.5 ms).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from burble.audio.resample import resample
from burble.codecs.codec import DEFAULT_CODEC, WEIGHTS_DIR, Codec, CodecInputError, available_codecs, load
from codec_helpers import random_pieces

SPF = 1024  # samples per code frame at 22.05 kHz


@pytest.fixture(scope="module")
def short(speech) -> np.ndarray:
    """0.75 s of speech: 17 code frames (the last one zero-padded)."""
    return speech[:16538]


@pytest.fixture(scope="module")
def codes8(codec, speech) -> np.ndarray:
    return codec.encode(speech[:22050], 22050, books=8)


# -- load / save ------------------------------------------------------------------------------


def test_load_reads_what_save_wrote(codec, codec_path):
    from safetensors import safe_open

    assert isinstance(codec, Codec)
    assert codec.name == Path(codec_path).stem and codec.default_books == 4 and codec.sample_rate == 22050
    with safe_open(str(codec_path), "pt") as f:
        assert f.metadata()["vocoder"] == "universal"
        for key in f.keys():
            assert torch.equal(f.get_tensor(key), codec.model.state_dict()[key]), key
    assert not codec.model.training


def test_unknown_codec_names_what_ships():
    with pytest.raises(CodecInputError, match="no codec 'no-such-codec'; shipped: "):
        load("no-such-codec")
    with pytest.raises(CodecInputError, match="no codec"):
        load("/nonexistent/codec.safetensors")


def test_the_shipped_default_codec_loads_and_runs(speech):
    if not (WEIGHTS_DIR / f"{DEFAULT_CODEC}.safetensors").is_file():
        pytest.skip(f"burble/codecs/weights/{DEFAULT_CODEC}.safetensors is not there yet (training)")
    codec = load()
    assert codec.name == DEFAULT_CODEC and DEFAULT_CODEC in available_codecs()
    assert codec.config.bitrate(codec.default_books) <= 1000  # the default is the <= 1 kbps setting
    audio = speech[:22050]
    codes = codec.encode(audio, 22050)
    frames = -(-22050 // codec.samples_per_frame)
    assert codes.shape == (codec.default_books, frames)
    out = codec.decode(codes)
    assert out.shape == (frames * codec.samples_per_frame,) and np.isfinite(out).all()
    assert np.corrcoef(np.abs(out[:22050]), np.abs(audio))[0, 1] > 0  # something of the input survives


# -- encode / decode ---------------------------------------------------------------------------


def test_codes_are_int64_in_range_one_frame_per_1024_samples(codec, speech):
    for n in (1, 1023, 1024, 1025, 22050):
        codes = codec.encode(speech[5000:5000 + n], 22050)
        assert codes.dtype == np.int64 and codes.shape == (4, -(-n // SPF)), n
        assert codes.min() >= 0 and codes.max() < codec.config.codebook_size


def test_fewer_books_are_a_prefix_of_more(codec, speech, codes8):
    per_book = [len(np.unique(row)) for row in codes8]
    assert min(per_book) > 5, per_book  # every book's codes vary (else this would check little)
    for books in range(1, 9):
        assert np.array_equal(codec.encode(speech[:22050], 22050, books=books), codes8[:books])


def test_every_number_of_books_decodes(codec, codes8):
    """1..8 rows of codes decode to frames * 1024 samples (the codes here: 3 frames)."""
    outs = [codec.decode(codes8[:books, :3]) for books in range(1, 9)]
    assert all(out.shape == (3 * SPF,) and out.dtype == np.float32 and np.isfinite(out).all() for out in outs)
    assert not np.allclose(outs[0], outs[7])  # the books beyond the first change the audio
    assert np.array_equal(codec.decode(codes8[:4, :3].astype(np.int16)), outs[3])  # any integer dtype


def test_multichannel_audio_is_averaged_and_other_rates_resampled(codec, speech):
    audio = speech[:11025]
    stereo = np.stack([audio, audio], axis=1)
    assert np.array_equal(codec.encode(stereo, 22050), codec.encode(audio, 22050))
    at16k = resample(audio, 22050, 16000)
    assert codec.encode(at16k, 16000).shape == codec.encode(audio, 22050).shape


# -- streaming ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [22050, 16000])
@pytest.mark.parametrize("seed", range(3))
def test_stream_encoder_gives_encodes_codes_exactly(codec, speech, rate, seed):
    audio = speech if rate == 22050 else resample(speech, 22050, rate)
    rng = np.random.default_rng(seed)
    whole = codec.encode(audio, rate, books=8)
    stream = codec.stream_encoder(rate, books=8)
    pieces = [stream.push(audio[p]) for p in random_pieces(audio.size, rng, largest=int(rng.choice([300, 3000])))]
    streamed = np.concatenate(pieces + [stream.flush()], axis=1)
    assert streamed.dtype == np.int64 and streamed.shape == whole.shape
    assert np.array_equal(streamed, whole)


def test_negative_control_a_perturbed_stream_gives_other_codes(codec, speech):
    stream = codec.stream_encoder(22050, books=8)
    perturbed = speech.copy()
    perturbed[20000:20100] += 0.2
    streamed = np.concatenate([stream.push(perturbed), stream.flush()], axis=1)
    changed = (streamed != codec.encode(speech, 22050, books=8)).any(axis=0)
    assert not changed[:19].any() and changed[19:].any()  # frame 19: its last mel frames' windows reach sample 20000


def stream_through(codec: Codec, audio: np.ndarray, lookahead, step: int = 128):
    """Audio -> stream_encoder -> stream_decoder, ``step`` samples at a time. Returns the output, the
    mel the decoder handed its vocoder, and for every output sample emitted before the flush how
    many input samples had arrived when it came out."""
    encoder, decoder = codec.stream_encoder(22050, books=8), codec.stream_decoder(lookahead=lookahead)
    mels = []
    push = decoder._vocoder.push
    decoder._vocoder.push = lambda frames: (mels.append(frames.clone()), push(frames))[1]
    outs, arrival = [], []
    for start in range(0, audio.size, step):
        out = decoder.push(encoder.push(audio[start:start + step]))
        outs.append(out)
        arrival += [min(start + step, audio.size)] * out.size
    outs += [decoder.push(encoder.flush()), decoder.flush()]
    return np.concatenate(outs), torch.cat(mels, dim=1), np.array(arrival)


def test_stream_decoder_exact_gives_decodes_audio_at_the_stated_latency(codec, speech):
    audio = speech[:22050]
    whole = codec.decode(codec.encode(audio, 22050, books=8))
    out, mel, arrival = stream_through(codec, audio, lookahead=None)
    assert out.shape == whole.shape
    assert np.abs(out - whole).max() < 1e-4  # measured 6e-6
    delay = arrival - np.arange(arrival.size)
    assert arrival.size > 10000 and delay.max() == codec.algorithmic_latency() == 4666


def test_stream_decoder_through_the_low_latency_vocoder_keeps_under_100_ms(codec_path, speech):
    codec = load(str(codec_path), vocoder="low-latency")
    assert codec.vocoder is not load(str(codec_path)).vocoder
    audio = speech[:22050]
    whole = codec.decode(codec.encode(audio, 22050, books=8))
    out, mel, arrival = stream_through(codec, audio, lookahead=None)
    assert out.shape == whole.shape and np.abs(out - whole).max() < 1e-4
    delay = arrival - np.arange(arrival.size)
    assert delay.max() == codec.algorithmic_latency() == 2106 < 0.1 * 22050


@pytest.mark.parametrize("seed", range(2))
def test_a_43_hz_codec_streams_exactly_under_100_ms(codec43_path, speech, seed):
    """The shape of ``mel-43hz`` (512 samples a code frame): streamed encoding gives ``encode``'s
    codes, streamed decoding ``decode``'s audio, and through ``low-latency`` the reconstruction
    leaves at most ``algorithmic_latency()`` samples after the input (1594, 72.3 ms)."""
    codec = load(str(codec43_path), vocoder="low-latency")
    assert codec.samples_per_frame == 512 and codec.config.bitrate(codec.default_books) < 1000
    audio = speech[:22050]
    whole_codes = codec.encode(audio, 22050, books=8)
    assert whole_codes.shape == (8, 44)
    stream = codec.stream_encoder(22050, books=8)
    rng = np.random.default_rng(seed)
    pieces = [stream.push(audio[p]) for p in random_pieces(audio.size, rng, largest=700)]
    assert np.array_equal(np.concatenate(pieces + [stream.flush()], axis=1), whole_codes)
    whole = codec.decode(whole_codes)
    out, mel, arrival = stream_through(codec, audio, lookahead=None)
    assert out.shape == whole.shape == (44 * 512,) and np.abs(out - whole).max() < 1e-4
    delay = arrival - np.arange(arrival.size)
    assert delay.max() == codec.algorithmic_latency() == 1594 < 0.1 * 22050


def test_stream_decoder_approximate_differs_only_in_the_vocoder(codec, short):
    codes = codec.encode(short, 22050, books=8)
    out, mel, arrival = stream_through(codec, short, lookahead=2)
    assert out.shape == (codes.shape[1] * SPF,)
    assert (mel - codec.decode_mel(codes)).abs().max() <= 1e-5  # the causal part is exact
    delay = arrival - np.arange(arrival.size)
    assert delay.max() == codec.algorithmic_latency(2) == 1920


@pytest.mark.parametrize("seed", range(2))
def test_stream_decoder_takes_codes_in_any_pieces(codec, codes8, seed):
    codes = codes8[:, :8]
    whole = codec.decode(codes)
    decoder = codec.stream_decoder()
    pieces = [decoder.push(codes[:, p]) for p in random_pieces(8, np.random.default_rng(seed), largest=3)]
    out = np.concatenate(pieces + [decoder.flush()])
    assert out.shape == whole.shape and np.abs(out - whole).max() < 1e-4


def test_distributions_over_codes_decode_whole_or_streamed(codec, codes8):
    """One-hot distributions decode exactly as their codes; a mixture (what a codec LM's
    posterior mean gives) decodes to other audio, streamed as whole."""
    codes = codes8[:2, :6]
    onehot = np.eye(codec.config.codebook_size, dtype=np.float32)[codes]  # (books, frames, size)
    assert np.array_equal(codec.decode(onehot), codec.decode(codes))
    mixed = 0.5 * onehot + 0.5 * np.eye(codec.config.codebook_size, dtype=np.float32)[np.roll(codes, 1, axis=1)]
    whole = codec.decode(mixed)
    assert np.abs(whole - codec.decode(codes)).max() > 1e-3  # the probabilities count
    decoder = codec.stream_decoder()
    out = np.concatenate([decoder.push(mixed[:, :1]), decoder.push(mixed[:, 1:4]), decoder.push(mixed[:, 4:]),
                          decoder.flush()])
    assert out.shape == whole.shape and np.abs(out - whole).max() < 1e-4


@pytest.mark.parametrize("make, message", [
    (lambda d: d[:, :, :100], "must be a \\(books, frames, 1024\\) array"),
    (lambda d: d[:, :0], "frames > 0"),
    (lambda d: d * 2, "must sum to 1"),
    (lambda d: np.where(d > 0.5, np.nan, d), "finite and non-negative"),
    (lambda d: d - 1e-3, "finite and non-negative"),
    (lambda d: np.concatenate([d] * 5), "books must be 1..8, got 10"),
])
def test_bad_distributions_over_codes_are_refused_clearly(codec, codes8, make, message):
    bad = make(np.eye(codec.config.codebook_size, dtype=np.float32)[codes8[:2, :3]])
    with pytest.raises(CodecInputError, match=message):
        codec.decode(bad)
    if bad.shape[1]:
        with pytest.raises(CodecInputError, match=message):
            codec.stream_decoder().push(bad)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("audio,message", [
    (np.zeros(0, np.float32), "empty"),
    (np.zeros(22050, np.float32), "silent"),
    (np.full(22050, 5e-5, np.float32), "silent"),
    (np.array([0.1, np.nan, 0.2] * 1000, np.float32), "NaN"),
    (np.array([0.1, np.inf] * 1000, np.float32), "infinite"),
    (np.ones((2, 22050), np.float32) * 0.1, "shape"),  # channels first
    (np.ones((4, 100, 2), np.float32) * 0.1, "shape"),
])
def test_bad_audio_is_refused_clearly(codec, audio, message):
    with pytest.raises(CodecInputError, match=message):
        codec.encode(audio, 22050)


def test_bad_book_counts_are_refused(codec, speech):
    for books in (0, 9, -1):
        with pytest.raises(CodecInputError, match="books must be 1..8"):
            codec.encode(speech[:5000], 22050, books=books)
        with pytest.raises(CodecInputError, match="books must be 1..8"):
            codec.stream_encoder(22050, books=books)


@pytest.mark.parametrize("make,message", [
    (lambda c: c[0], "must be a \\(books, frames\\) array"),
    (lambda c: c[None], "must be a \\(books, frames\\) array"),
    (lambda c: c[:, :0], "frames > 0"),
    (lambda c: c.astype(np.float32), "must be integers"),
    (lambda c: np.where(c == c[0, 0], -1, c), "must lie in 0..1023"),
    (lambda c: np.where(c == c[0, 0], 1024, c), "must lie in 0..1023"),
    (lambda c: np.concatenate([c, c[:1]]), "books must be 1..8, got 9"),
    (lambda c: c[:0], "frames > 0|books must be 1..8, got 0"),
])
def test_bad_codes_are_refused_clearly(codec, codes8, make, message):
    bad = make(codes8)
    with pytest.raises(CodecInputError, match=message):
        codec.decode(bad)
    decoder = codec.stream_decoder()
    if bad.ndim == 2 and bad.shape[1] == 0:
        assert decoder.push(bad).size == 0  # an empty piece is no error while streaming
    else:
        with pytest.raises(CodecInputError, match=message):
            decoder.push(bad)


def test_stream_encoder_refuses_non_finite_samples(codec):
    with pytest.raises(CodecInputError, match="NaN"):
        codec.stream_encoder(22050).push(np.array([0.0, np.nan], np.float32))


def test_a_bfloat16_codec_encodes_nearly_the_same_codes_and_decodes_float32_audio():
    from burble.audio.io import load_audio
    from burble.codecs.codec import load

    audio = load_audio("examples/jfk.wav")[: 16000 * 4]
    reference, half = load(), load(dtype="bfloat16")
    assert half is not reference
    assert next(half.vocoder.parameters()).dtype == torch.bfloat16
    assert half.model.quantizer.embed.dtype == torch.float32  # nearest-code search stays float32
    codes, half_codes = reference.encode(audio, 16000), half.encode(audio, 16000)
    assert codes.shape == half_codes.shape
    assert (codes == half_codes).mean() > 0.9
    out = half.decode(codes)
    assert out.dtype == np.float32 and out.size == codes.shape[1] * half.samples_per_frame
    assert load() is reference  # the float32 CPU codec is still the cached one


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_codec_on_cuda_in_float16():
    from burble.audio.io import load_audio
    from burble.codecs.codec import CodecInputError, load

    audio = load_audio("examples/jfk.wav")[: 16000 * 4]
    codec = load(device="cuda", dtype="float16")
    assert codec.device.type == "cuda"
    codes = codec.encode(audio, 16000)
    assert (codes == load().encode(audio, 16000)).mean() > 0.9
    assert codec.decode(codes).dtype == np.float32
    with pytest.raises(CodecInputError, match="runs on the CPU"):
        codec.stream_encoder(16000)


@pytest.mark.parametrize("native", [True, False])
def test_auto_vocoder_precision_is_bfloat16_only_where_native(monkeypatch, native):
    import burble.codecs.codec as codec_module

    monkeypatch.setattr(codec_module, "native_bfloat16", lambda device: native)
    codec = codec_module.load(vocoder_dtype="auto")
    expected = torch.bfloat16 if native else torch.float32
    assert next(codec.vocoder.parameters()).dtype == expected
    assert next(codec.model.decoder.parameters()).dtype == torch.float32  # only the vocoder changes
    assert (codec is codec_module.load()) is (not native)  # float32 everywhere is the cached default
    assert codec_module.load(vocoder_dtype="auto") is codec  # cached per precision
