"""Fixtures for the server tests: each test gets its own server on a free port."""

from __future__ import annotations

import numpy as np
import pytest

from burble.testing.server import ServerThread, options_for_tests
from server_helpers import FakeFactory
from streaming_helpers import dev_audio


@pytest.fixture
def fake_factory() -> FakeFactory:
    return FakeFactory()


@pytest.fixture
def server(fake_factory):
    """A server with the fake recognizer and the real VAD on a free loopback port."""
    with ServerThread(fake_factory, options_for_tests()) as running:
        yield running
        assert running.wait_idle(), "sessions leaked"


@pytest.fixture(scope="session")
def speech() -> tuple[np.ndarray, int]:
    """3.3 s of real speech (LibriSpeech 1089-134686-0001), 16 kHz."""
    return dev_audio("ls_1089-134686-0001")
