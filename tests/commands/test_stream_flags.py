"""`--encoder`, `--lookahead`, `--policy`, `--alignatt-frames`: one switch for `burble stream`,
`burble listen` and `burble serve`, whose defaults are the dataclasses' own (RecognizerChoice,
StreamingOptions), and whose recognizers are built only by RecognizerChoice.build."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import burble
import burble.streaming.factory as factory_module
import burble.streaming.recognizer as recognizer_module
from burble.cli import build_parser, main
from burble.commands.common import recognizer_choice_from_args, streaming_overrides
from burble.commands.stream import build_pipeline, streaming_options_from_args
from burble.streaming.cache_aware import CacheAwareWhisperRecognizer
from burble.streaming.factory import RecognizerChoice
from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer
from burble.streaming.sources import ArraySource

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {"stream": ["x.wav"], "listen": [], "serve": []}
FLAGS = ("--encoder", "--lookahead", "--policy", "--alignatt-frames")


@pytest.fixture(scope="module")
def asr() -> burble.WhisperASR:
    return burble.load_model("tiny.en")


@pytest.fixture
def loaded(asr, monkeypatch):
    """``burble.load_model`` returns the module's loaded tiny.en (the commands load no model of their own)."""
    monkeypatch.setattr(burble, "load_model", lambda *args, **kwargs: asr)
    return asr


def _actions(command: str) -> dict[str, object]:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    return {a.option_strings[0]: a for a in subparsers.choices[command]._actions if a.option_strings}


def test_the_flags_are_the_same_in_every_command():
    described = {}
    for command in COMMANDS:
        actions = _actions(command)
        described[command] = [(flag, actions[flag].help, actions[flag].choices, repr(actions[flag].default)) for flag in FLAGS]
    assert described["stream"] == described["listen"] == described["serve"]
    encoder = _actions("serve")["--encoder"]
    assert set(encoder.choices) == {"cache-aware", "re-encode"}
    assert "once" in encoder.help and "30 s" in encoder.help
    # The CLI's torch-free copy of the commit policies is the recognizer's list.
    assert factory_module.COMMIT_POLICIES == recognizer_module.COMMIT_POLICIES
    assert tuple(_actions("stream")["--policy"].choices) == recognizer_module.COMMIT_POLICIES


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_defaults_are_the_dataclass_defaults(command):
    args = build_parser().parse_args([command, *COMMANDS[command]])
    assert recognizer_choice_from_args(args) == RecognizerChoice()
    assert streaming_overrides(args) == {}  # StreamingOptions' own defaults apply
    options = StreamingOptions(**streaming_overrides(args))
    assert (options.policy, options.alignatt_frames) == (StreamingOptions().policy, StreamingOptions().alignatt_frames)
    if command != "serve":
        assert streaming_options_from_args(args) == StreamingOptions()


def test_flipping_a_dataclass_default_flips_the_commands(monkeypatch):
    """The defaults are read from the dataclasses, not copied: a flipped field is the new default."""

    @dataclasses.dataclass(frozen=True)
    class FlippedChoice(RecognizerChoice):
        encoder: str = "cache-aware"
        lookahead_seconds: float = 0.24

    @dataclasses.dataclass(frozen=True)
    class FlippedOptions(StreamingOptions):
        policy: str = "alignatt"
        alignatt_frames: int = 3

    monkeypatch.setattr(factory_module, "RecognizerChoice", FlippedChoice)
    monkeypatch.setattr(recognizer_module, "StreamingOptions", FlippedOptions)
    for command in COMMANDS:
        args = build_parser().parse_args([command, *COMMANDS[command]])
        assert (args.encoder, args.lookahead) == ("cache-aware", 0.24)
        assert recognizer_choice_from_args(args) == FlippedChoice()
        if command != "serve":
            options = streaming_options_from_args(args)
            assert (options.policy, options.alignatt_frames) == ("alignatt", 3)


def test_flags_build_the_chosen_recognizer(loaded):
    source = ArraySource(np.zeros(16000, np.float32), realtime=False)
    args = build_parser().parse_args(["stream", "x.wav", "--no-vad"])
    _, recognizer = build_pipeline(args, source, [])
    assert type(recognizer) is (CacheAwareWhisperRecognizer if RecognizerChoice().encoder == "cache-aware" else WhisperStreamingRecognizer)

    argv = ["stream", "x.wav", "--no-vad", "--encoder", "cache-aware", "--lookahead", "0.24", "--policy", "alignatt", "--alignatt-frames", "7"]
    _, recognizer = build_pipeline(build_parser().parse_args(argv), source, [])
    assert isinstance(recognizer, CacheAwareWhisperRecognizer)
    assert (recognizer.cache_options.lookahead_frames, recognizer.cache_options.chunk_frames) == (12, 50)
    assert (recognizer.options.policy, recognizer.options.alignatt_frames) == ("alignatt", 7)

    argv = ["stream", "x.wav", "--no-vad", "--encoder", "re-encode", "--policy", "local-agreement", "--beam-size", "2"]
    _, recognizer = build_pipeline(build_parser().parse_args(argv), source, [])
    assert type(recognizer) is WhisperStreamingRecognizer
    assert (recognizer.options.policy, recognizer.options.beam_size) == ("local-agreement", 2)


def test_stream_reports_the_encoder_and_its_time(loaded, capsys):
    assert main(["stream", "examples/jfk.wav", "--fast", "--no-vad", "--encoder", "cache-aware", "--json"]) == 0
    captured = capsys.readouterr()
    assert "not what your country" in captured.out.lower()  # "ask not" or, without the VAD's pause, "asked not"
    stats = captured.err.strip().splitlines()[-1]
    assert stats.startswith("# audio 11.0s") and ", encoder cache-aware (encoder " in stats and "s, tail " in stats, stats


def test_serve_builds_its_factory_from_the_flags(loaded, monkeypatch):
    import burble.streaming.server as server_package
    import burble.streaming.server.logs as logs

    built = []

    class NoServer:
        url = root_url = page_url = "ws://test/"

        def __init__(self, factory, options):
            built.append(factory)

        async def start(self):
            pass

        async def serve_forever(self):
            pass

    monkeypatch.setattr(server_package, "AsrServer", NoServer)
    monkeypatch.setattr(logs, "configure_logging", lambda *args: None)  # leave pytest's log handlers alone
    assert main(["serve", "--encoder", "cache-aware", "--lookahead", "0", "--policy", "alignatt", "--alignatt-frames", "4"]) == 0
    (factory,) = built
    assert factory.choice == RecognizerChoice(encoder="cache-aware", lookahead_seconds=0.0)
    assert (factory.options.policy, factory.options.alignatt_frames) == ("alignatt", 4)
    from burble.streaming.server.protocol import SessionConfig

    recognizer = factory.create(SessionConfig())
    assert isinstance(recognizer, CacheAwareWhisperRecognizer) and recognizer.cache_options.lookahead_frames == 0


def test_a_bad_encoder_is_one_line_not_a_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "burble", "stream", "examples/jfk.wav", "--encoder", "nope"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("burble stream: error: argument --encoder: invalid choice: 'nope'"), done.stderr


@pytest.mark.parametrize(
    "argv, says",
    [
        (["serve", "--lookahead", "3"], "argument --lookahead: lookahead_seconds must be in [0, 2]"),
        (["listen", "--lookahead", "soon"], "argument --lookahead: 'soon' is not a number of seconds"),
        (["stream", "x.wav", "--policy", "greedy"], "argument --policy: invalid choice: 'greedy' (choose from 'local-agreement', 'alignatt')"),
        (["serve", "--alignatt-frames", "-1"], "argument --alignatt-frames: must be >= 0"),
        (["listen", "--alignatt-frames", "1.5"], "argument --alignatt-frames: '1.5' is not a whole number"),
    ],
)
def test_bad_values_are_argparse_errors(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"burble {argv[0]}: error: {says}", err
    assert "Traceback" not in err


def test_the_stats_line_of_the_re_encoding_recognizer_names_it():
    from burble.commands.stream import stats_line
    from burble.streaming.recognizer import RecognizerStats

    metrics = types.SimpleNamespace(audio_seconds=2.0, rtf=0.5, max_lag_seconds=0.1, dropped_seconds=0.0)
    args = types.SimpleNamespace(encoder="re-encode")
    line = stats_line(args, types.SimpleNamespace(stats=RecognizerStats()), metrics)
    assert ", encoder re-encode, decodes 0," in line and "tail" not in line
