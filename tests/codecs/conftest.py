"""Fixtures for the codec tests: one thread, the throwaway codec of ``codec_helpers``, real speech."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from codec_helpers import JFK_WAV, build_random_codec, one_thread


# Every phase of every test here (fixture setup of any scope included) computes on one torch thread:
# two threads on two cores that other work keeps busy spin against each other (a 0.5 s fixture
# took 27 s). The count is restored after each phase, so tests elsewhere are unaffected.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item) -> Iterator[None]:
    with one_thread():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item) -> Iterator[None]:
    with one_thread():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item) -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture(scope="session")
def codec_path(tmp_path_factory) -> Path:
    return build_random_codec(tmp_path_factory.mktemp("codec") / "random.safetensors")


@pytest.fixture(scope="session")
def codec43_path(tmp_path_factory) -> Path:
    """A 43 Hz codec (one 2x stage, 512 samples a code frame; the shape of ``mel-43hz``)."""
    from burble.codecs.model import CodecConfig

    return build_random_codec(tmp_path_factory.mktemp("codec43") / "random43.safetensors",
                              CodecConfig(down_stages=1, channels=(128, 256), decoder_units=5), default_books=2)


@pytest.fixture(scope="session")
def codec(codec_path):
    from burble.codecs.codec import load

    return load(str(codec_path))


@pytest.fixture(scope="session")
def speech() -> np.ndarray:
    """The first 2 s of examples/jfk.wav ("And so, my fellow Americans") at 22.05 kHz."""
    from burble.audio.io import load_audio

    return load_audio(JFK_WAV, 22050)[:44100]
