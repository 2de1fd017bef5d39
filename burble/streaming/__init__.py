"""Streaming speech pipeline: sources -> ring buffer -> VAD -> recognizer -> sinks on asyncio.

Modules (one job each):

- ``ring_buffer``: ``RingBuffer``, bounded SPSC audio buffer with absolute sample indices.
- ``events``: ``Word`` and ``StreamEvent`` (partial / final / endpoint, JSON lines).
- ``sources``: ``MicrophoneSource``, ``FileSource``, ``ArraySource``, ``PushSource`` (network).
- ``policy``: ``LocalAgreement`` commit policy and ``find_trim_time``.
- ``stages``: the ``Stage`` and ``Recognizer`` interfaces and the standard stages.
- ``loop``: ``Pipeline`` (the asyncio driver), ``asr_pipeline``, ``run_until_interrupted``.
- ``sinks``: ``TerminalSink``, ``JsonLinesSink``, ``EventLogSink``, ``SrtSink``.

Resampling and the VAD (``StreamingResampler``, ``StreamingVAD``) live below this package, in
``burble.audio``, because batch jobs use them too.

Importing this package does not import sounddevice, silero-vad or onnxruntime; they load when a
microphone or the VAD is first used.
"""

from burble.streaming.events import StreamEvent, Word
from burble.streaming.loop import (
    Pipeline,
    PipelineMetrics,
    PipelineOptions,
    asr_pipeline,
    run_until_interrupted,
)
from burble.streaming.policy import LocalAgreement, find_trim_time, normalize_word
from burble.streaming.ring_buffer import RingBuffer
from burble.streaming.sinks import EventLogSink, JsonLinesSink, Sink, SrtSink, TerminalSink
from burble.streaming.sources import (
    ArraySource,
    AudioChunk,
    AudioSource,
    FileSource,
    MicrophoneSource,
    PushSource,
)
from burble.streaming.stages import (
    Endpoint,
    Recognizer,
    RecognizerStage,
    SinkStage,
    SpeechPause,
    SpeechStop,
    Stage,
    VADStage,
)

__all__ = [
    "ArraySource",
    "AudioChunk",
    "AudioSource",
    "Endpoint",
    "EventLogSink",
    "FileSource",
    "JsonLinesSink",
    "LocalAgreement",
    "MicrophoneSource",
    "Pipeline",
    "PipelineMetrics",
    "PipelineOptions",
    "PushSource",
    "Recognizer",
    "RecognizerStage",
    "RingBuffer",
    "Sink",
    "SinkStage",
    "SpeechPause",
    "SpeechStop",
    "SrtSink",
    "Stage",
    "StreamEvent",
    "TerminalSink",
    "VADStage",
    "Word",
    "asr_pipeline",
    "find_trim_time",
    "normalize_word",
    "run_until_interrupted",
]
