"""VADStage's speech pauses and RecognizerStage's response to them (real silero VAD, fake recognizer)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from burble.audio import SAMPLE_RATE as SR
from burble.audio.vad import SileroVAD, StreamingVAD, VADOptions
from burble.streaming.sources import AudioChunk
from burble.streaming.stages import Endpoint, RecognizerStage, SpeechPause, SpeechStop, VADStage
from streaming_helpers import FakeRecognizer


def ticks(audio: np.ndarray, seconds: float = 0.1):
    step = int(seconds * SR)
    for start in range(0, len(audio), step):
        yield AudioChunk(audio[start : start + step], start)


def vad_items(audio: np.ndarray, **stage_options: float) -> list[tuple[int, object]]:
    """(tick end sample, item) for everything VADStage emits over 0.1 s ticks."""
    stage = VADStage(StreamingVAD(model=SileroVAD()), **stage_options)
    out = []
    for chunk in ticks(audio):
        out += [(chunk.end, item) for item in asyncio.run(stage.process([chunk]))]
    return out + [(len(audio), item) for item in asyncio.run(stage.flush())]


def one_utterance(lj_speech: np.ndarray) -> np.ndarray:
    """0.5 s of silence, 4 s of LJ speech (a breath or two inside), 2 s of silence."""
    return np.concatenate([np.zeros(SR // 2, np.float32), lj_speech[: 4 * SR], np.zeros(2 * SR, np.float32)])


def of_kind(items: list[tuple[int, object]], kind: type) -> list[tuple[int, object]]:
    return [(tick, item) for tick, item in items if isinstance(item, kind)]


def test_a_pause_inside_an_utterance_is_signalled_once_and_long_before_the_endpoint(lj_speech):
    items = vad_items(one_utterance(lj_speech))
    pauses = of_kind(items, SpeechPause)
    endpoints = of_kind(items, Endpoint)
    assert len(endpoints) == 1 and len(pauses) >= 1
    tick, pause = pauses[-1]
    endpoint_tick, endpoint = endpoints[0]
    options = VADOptions()
    # The pause comes within a tick or two of the hangover's end, the endpoint only after
    # silence_after_speech_seconds (0.8 s): measured here, 0.4 s earlier on every utterance end.
    assert pause.at_sample == endpoint.at_sample  # the same end of speech
    # ... in the very tick that forwards the hangover's last audio (it once came a tick later).
    last_audio_tick = max(t for t, item in items if isinstance(item, AudioChunk) and item.end == pause.at_sample)
    assert tick == last_audio_tick
    assert tick - pause.at_sample <= 0.1 * SR + 512
    assert endpoint_tick - tick >= 0.3 * SR, (endpoint_tick - tick) / SR
    assert options.silence_after_speech_seconds - options.hangover_seconds > 0.3  # the gain is real
    # Never two pauses in a row without speech between them.
    kinds = [type(item).__name__ for _, item in items if not isinstance(item, Endpoint)]
    assert "SpeechPause,SpeechPause" not in ",".join(kinds)


def test_a_tick_shorter_than_a_vad_frame_is_no_pause(lj_speech):
    """Ticks of 10 ms bring no new VAD frame two times out of three: speech has not stopped."""
    speech = lj_speech[: 2 * SR]
    stage = VADStage(StreamingVAD(model=SileroVAD()))
    out = []
    for start in range(0, len(speech), 160):
        out += asyncio.run(stage.process([AudioChunk(speech[start : start + 160], start)]))
    pauses = [item.at_sample for item in out if isinstance(item, SpeechPause)]
    last_speech = stage.vad._last_speech_end
    assert all(at >= last_speech + int(VADOptions().hangover_seconds * SR) or at < last_speech for at in pauses)
    assert len(pauses) <= 3  # LJ's 2 s hold a breath or two, not one pause per frameless tick


def test_recognizer_stage_decodes_pending_audio_at_a_pause():
    recognizer = FakeRecognizer()
    stage = RecognizerStage(recognizer, chunk_seconds=1.0, decode_at_pauses=True)
    piece = np.ones(int(0.4 * SR), np.float32) * 0.1
    asyncio.run(stage.process([AudioChunk(piece, 0)]))
    assert [c[0] for c in recognizer.calls] == []  # less than a chunk: waits
    out = asyncio.run(stage.process([SpeechPause(len(piece))]))
    # The pause passes the audio on at once, then tells the recognizer speech stopped.
    assert [c[0] for c in recognizer.calls] == ["accept", "pause"]
    assert recognizer.calls[-1] == ("pause", len(piece))
    assert [e.type for e in out] == ["partial", "final"]  # the fake commits its words at a pause
    asyncio.run(stage.process([SpeechPause(len(piece))]))
    assert [c[0] for c in recognizer.calls] == ["accept", "pause", "pause"]  # nothing pending: no empty accept
    stage.close()


@pytest.mark.parametrize("decodes_at_pauses", [True, False])
def test_the_recognizer_decides_about_pauses_by_default(decodes_at_pauses):
    recognizer = FakeRecognizer()
    recognizer.decodes_at_pauses = decodes_at_pauses  # type: ignore[attr-defined]
    stage = RecognizerStage(recognizer, chunk_seconds=1.0)
    assert stage.decode_at_pauses is decodes_at_pauses
    piece = np.ones(int(0.4 * SR), np.float32) * 0.1
    asyncio.run(stage.process([AudioChunk(piece, 0), SpeechPause(len(piece))]))
    assert [c[0] for c in recognizer.calls] == (["accept", "pause"] if decodes_at_pauses else [])
    # An explicit choice wins over the recognizer's.
    assert RecognizerStage(recognizer, decode_at_pauses=not decodes_at_pauses).decode_at_pauses is (not decodes_at_pauses)
    stage.close()



def test_pauses_are_ignored_unless_asked_for():
    recognizer = FakeRecognizer()
    stage = RecognizerStage(recognizer, chunk_seconds=1.0)
    asyncio.run(stage.process([AudioChunk(np.ones(int(0.4 * SR), np.float32) * 0.1, 0), SpeechPause(int(0.4 * SR))]))
    assert recognizer.calls == []  # the default waits for a full chunk or the endpoint
    stage.close()


def test_speech_stops_before_the_pause_that_follows_it(lj_speech):
    audio = one_utterance(lj_speech)
    items = vad_items(audio)
    stops = of_kind(items, SpeechStop)
    pauses = of_kind(items, SpeechPause)
    assert stops and pauses
    # Every pause has the stop of the same last speech frame before it, a hangover earlier.
    for pause_tick, pause in pauses:
        stop_tick, stop = max((s for s in stops if s[1].at_sample == pause.speech_until), key=lambda s: s[0])
        assert stop_tick < pause_tick
        assert pause.at_sample - stop.at_sample == int(VADOptions().hangover_seconds * SR)
    # One stop per speech end, sent after the audio up to it.
    assert len({s.at_sample for _, s in stops}) == len(stops)
    for tick, stop in stops:
        forwarded = max(item.end for t, item in items if isinstance(item, AudioChunk) and t <= tick)
        assert forwarded >= stop.at_sample
    # The endpoint knows where speech ended too.
    endpoint = next(item for _, item in items if isinstance(item, Endpoint))
    assert endpoint.speech_until == pauses[-1][1].speech_until
    # Negative control: a stop that needs more silence than the utterance's pauses has fewer.
    assert len(of_kind(vad_items(audio, stop_seconds=0.5), SpeechStop)) < len(stops)


class HoldingRecognizer(FakeRecognizer):
    """A fake that can take the hangover's audio without decoding it."""

    def hold(self, audio: np.ndarray, start_sample: int) -> list:
        self.calls.append(("hold", start_sample, len(audio)))
        self._expected = start_sample + len(audio)
        return []


@pytest.mark.parametrize("resumed", [False, True])
def test_a_decode_at_the_stop_spares_the_pause_its_decode(resumed: bool):
    recognizer = HoldingRecognizer()
    stage = RecognizerStage(recognizer, chunk_seconds=1.0, decode_at_pauses=True)
    speech, hangover = int(0.4 * SR), int(0.2 * SR)
    asyncio.run(stage.process([AudioChunk(np.ones(speech, np.float32), 0), SpeechStop(speech)]))
    assert [c[0] for c in recognizer.calls] == ["accept"]  # decoded at once, not after a full chunk
    # The hangover's audio follows; then the pause. If speech resumed in between (control), the
    # decode at the stop did not cover it: the pause decodes.
    speech_until = speech + (hangover // 2 if resumed else 0)
    asyncio.run(stage.process([AudioChunk(np.ones(hangover, np.float32), speech),
                               SpeechPause(speech_until + hangover, speech_until=speech_until)]))
    expected = ["accept", "accept", "pause"] if resumed else ["accept", "hold", "pause"]
    assert [c[0] for c in recognizer.calls] == expected
    stage.close()


def test_an_endpoint_after_a_decoded_stop_holds_the_rest():
    recognizer = HoldingRecognizer()
    stage = RecognizerStage(recognizer, chunk_seconds=1.0, decode_at_pauses=True)
    speech = int(0.4 * SR)
    asyncio.run(stage.process([AudioChunk(np.ones(speech, np.float32), 0), SpeechStop(speech),
                               AudioChunk(np.ones(800, np.float32), speech), Endpoint(speech + 800, speech_until=speech)]))
    assert [c[0] for c in recognizer.calls] == ["accept", "hold", "endpoint"]
    # Without the speech's end (an upstream endpoint) the rest is decoded.
    asyncio.run(stage.process([AudioChunk(np.ones(speech, np.float32), SR), Endpoint(SR + speech)]))
    assert [c[0] for c in recognizer.calls][3:] == ["accept", "endpoint"]
    stage.close()


def test_stops_are_ignored_unless_the_stage_decodes_at_pauses():
    recognizer = HoldingRecognizer()
    stage = RecognizerStage(recognizer, chunk_seconds=1.0, decode_at_pauses=False)
    asyncio.run(stage.process([AudioChunk(np.ones(int(0.4 * SR), np.float32), 0), SpeechStop(int(0.4 * SR))]))
    assert recognizer.calls == []
    stage.close()
