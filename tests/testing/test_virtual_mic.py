import os
import subprocess

import pytest

from burble.testing.virtual_mic import VirtualMicrophone, unavailable_reason

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"virtual microphone: {unavailable_reason()}")


def test_daemon_starts_with_the_virtual_devices_and_cleans_up():
    before = os.environ.get("PULSE_SERVER")
    vm = VirtualMicrophone()
    with vm:
        assert os.environ["PULSE_SERVER"] == vm.server
        sources = subprocess.run(["pactl", "list", "short", "sources"], env=vm.env(), capture_output=True, text=True, check=True).stdout
        assert "vmic" in sources and "vspk.monitor" in sources
        sinks = subprocess.run(["pactl", "list", "short", "sinks"], env=vm.env(), capture_output=True, text=True, check=True).stdout
        assert "vspk" in sinks and "16000Hz" in sinks
        runtime, pid = vm.runtime_dir, vm.pid
        assert pid is not None
    assert os.environ.get("PULSE_SERVER") == before
    assert not runtime.exists()
    with pytest.raises(RuntimeError):
        vm.play("nothing.wav")


def test_play_rejects_missing_files():
    with VirtualMicrophone() as vm, pytest.raises(FileNotFoundError):
        vm.play("/nonexistent.wav")
