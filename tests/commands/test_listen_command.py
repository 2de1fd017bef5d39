"""`burble listen` for a newcomer: a missing PortAudio is one line saying what to install, and the
microphone flag (--input-device) is apart from the compute device (--device)."""

import importlib.abc
import sys
import types

import pytest

from burble.cli import main


class _PortAudioMissing(importlib.abc.MetaPathFinder):
    """Imports sounddevice the way it fails without libportaudio2: OSError at import time."""

    def find_spec(self, name, path=None, target=None):
        if name == "sounddevice":
            raise OSError("PortAudio library not found")
        return None


@pytest.fixture
def no_portaudio(monkeypatch):
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_PortAudioMissing(), *sys.meta_path])


@pytest.fixture
def fake_sounddevice(monkeypatch):
    """A working sounddevice with one input device (the positive control of the PortAudio check)."""
    device = {"index": 0, "name": "Fake Mic", "max_input_channels": 1, "default_samplerate": 16000.0, "hostapi": 0}
    module = types.SimpleNamespace(
        default=types.SimpleNamespace(device=(0, 0)),
        query_hostapis=lambda: [{"name": "FakeAPI"}],
        query_devices=lambda *args: device if args else [device],
        check_input_settings=lambda **kwargs: None,
    )
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    return module


def _refuse_to_build(*args, **kwargs):
    raise AssertionError("the model must not be loaded when the microphone cannot work")


@pytest.mark.parametrize("argv", [["listen", "--list-devices"], ["listen"]])
def test_missing_portaudio_is_one_line_saying_what_to_install(no_portaudio, monkeypatch, capsys, argv):
    import burble.commands.stream

    monkeypatch.setattr(burble.commands.stream, "build_pipeline", _refuse_to_build)
    assert main(argv) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert "apt-get install libportaudio2" in lines[0] and lines[0].startswith("burble listen: error:")
    assert captured.out == ""


def test_list_devices_with_portaudio_lists_them(fake_sounddevice, capsys):
    assert main(["listen", "--list-devices"]) == 0
    captured = capsys.readouterr()
    assert "Fake Mic" in captured.out and "FakeAPI" in captured.out and captured.err == ""


def test_input_device_picks_the_microphone(fake_sounddevice, monkeypatch):
    import burble.commands.stream

    opened = []

    def capture(args, source, sinks):
        opened.append((source.device, args.device))
        raise SystemExit(0)

    monkeypatch.setattr(burble.commands.stream, "build_pipeline", capture)
    with pytest.raises(SystemExit):
        main(["listen", "--input-device", "0", "--device", "cpu"])
    assert opened == [(0, "cpu")]  # "0" from the command line is device index 0


def test_a_microphone_number_given_to_device_is_refused_with_the_right_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["listen", "--device", "3"])
    assert exit_info.value.code == 2
    assert "--input-device" in capsys.readouterr().err
