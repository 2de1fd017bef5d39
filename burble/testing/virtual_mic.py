"""A virtual microphone for tests: a private PulseAudio daemon whose default input plays files.

Machines without a sound card (CI, containers) can still exercise the real capture path
(PortAudio -> ALSA -> PulseAudio) this way::

    paplay --device=vspk file.wav  ->  null sink "vspk" (16 kHz mono)
                                   ->  its monitor, remapped as source "vmic" (the default input)
                                   ->  PortAudio "default"/"pulse" device -> MicrophoneSource

``VirtualMicrophone`` starts its own daemon (``pulseaudio -n --daemonize=yes
--exit-idle-time=-1`` with a generated config, in its own runtime directory, so it never touches
a user's sound server), points ``PULSE_SERVER`` at it for this process (ALSA's pulse plugin
reads it when PortAudio opens a stream) and stops the daemon on exit. The capture is bit-exact
at 16 kHz. Note that PortAudio's first callback can come ~1 s after a stream opens: wait for it
(``MicrophoneSource.wait_started``) before playing.

Requirements (Debian/Ubuntu): ``apt install pulseaudio pulseaudio-utils libasound2-plugins
libportaudio2``, and ``pip install sounddevice``. ``unavailable_reason()`` says what is missing
so tests can skip with a clear message. Works as root (the daemon warns, harmlessly) or as a user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

_CONFIG = """\
load-module module-native-protocol-unix auth-anonymous=1 socket={socket}
load-module module-null-sink sink_name={sink} rate={rate} channels={channels} sink_properties=device.description={sink}
load-module module-remap-source source_name={source} master={sink}.monitor source_properties=device.description={source}
set-default-sink {sink}
set-default-source {source}
"""


def unavailable_reason() -> Optional[str]:
    """Why a virtual microphone cannot run here (``None`` if it can)."""
    for tool, package in (("pulseaudio", "pulseaudio"), ("paplay", "pulseaudio-utils"), ("pactl", "pulseaudio-utils")):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt install {package} libasound2-plugins libportaudio2)"
    if not any(
        Path(d, "libasound_module_pcm_pulse.so").exists()
        for d in ("/usr/lib/x86_64-linux-gnu/alsa-lib", "/usr/lib/aarch64-linux-gnu/alsa-lib", "/usr/lib/alsa-lib", "/usr/lib64/alsa-lib")
    ):
        return "ALSA's PulseAudio plugin is missing (apt install libasound2-plugins)"
    try:
        import sounddevice  # noqa: F401
    except OSError:
        return "PortAudio library not installed (apt install libportaudio2)"
    except ImportError:
        return "sounddevice not installed (pip install sounddevice)"
    return None


class VirtualMicrophone:
    """A private PulseAudio server with a playable virtual microphone (a context manager).

    Args:
      sample_rate: rate of the null sink (and so of the virtual microphone).
      channels: channel count of the sink.
      sink: name of the sink files are played to.
      source: name of the virtual microphone (made the default input).
      start_timeout: seconds to wait for the daemon to accept connections.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        channels: int = 1,
        *,
        sink: str = "vspk",
        source: str = "vmic",
        start_timeout: float = 10.0,
    ) -> None:
        self.sample_rate = sample_rate
        self.channels = channels
        self.sink = sink
        self.source = source
        self.start_timeout = start_timeout
        self.runtime_dir: Optional[Path] = None
        self.pid: Optional[int] = None
        self._saved_env: dict[str, Optional[str]] = {}

    # ---------------------------------------------------------------------------- lifecycle
    @property
    def server(self) -> str:
        assert self.runtime_dir is not None, "not started"
        return f"unix:{self.runtime_dir / 'native'}"

    def env(self) -> dict[str, str]:
        """Environment for client processes (paplay, pactl) talking to this server."""
        assert self.runtime_dir is not None, "not started"
        env = dict(os.environ)
        env.update(
            PULSE_SERVER=self.server,
            PULSE_RUNTIME_PATH=str(self.runtime_dir),
            PULSE_STATE_PATH=str(self.runtime_dir),
            PULSE_COOKIE=str(self.runtime_dir / "cookie"),
        )
        return env

    def start(self) -> "VirtualMicrophone":
        """Start the daemon and point this process's PortAudio/ALSA at it."""
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"virtual microphone unavailable: {reason}")
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="burble-pulse-"))
        config = self.runtime_dir / "default.pa"
        config.write_text(
            _CONFIG.format(
                socket=self.runtime_dir / "native",
                sink=self.sink,
                source=self.source,
                rate=self.sample_rate,
                channels=self.channels,
            )
        )
        env = self.env()
        env["HOME"] = str(self.runtime_dir)  # keep ~/.config/pulse of the user out of it
        cmd = [
            "pulseaudio",
            "-n",  # no default script: only our config
            "--daemonize=yes",
            "--exit-idle-time=-1",
            f"--file={config}",
            "--use-pid-file=yes",
            f"--log-target=file:{self.runtime_dir / 'pulseaudio.log'}",
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.start_timeout)
        if done.returncode != 0:
            log = self.log()
            self._cleanup_dir()
            raise RuntimeError(f"pulseaudio failed to start ({done.returncode}): {done.stderr.strip()} {log}")
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise
        for key in ("PULSE_SERVER", "PULSE_COOKIE"):
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = env[key]
        _rescan_portaudio()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            info = subprocess.run(["pactl", "info"], env=self.env(), capture_output=True, text=True)
            if info.returncode == 0 and f"Default Source: {self.source}" in info.stdout:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"pulseaudio did not become ready: {info.stderr.strip()} {self.log()}")
            time.sleep(0.05)
        pid_file = self.runtime_dir / "pid" if self.runtime_dir else None
        if pid_file is not None and pid_file.exists():
            self.pid = int(pid_file.read_text().split()[0])

    def log(self) -> str:
        """The daemon's log (for error messages)."""
        if self.runtime_dir is None:
            return ""
        path = self.runtime_dir / "pulseaudio.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        """Stop the daemon, restore the environment and remove the runtime directory."""
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}
        if self.runtime_dir is not None:
            subprocess.run(["pactl", "exit"], env=self.env(), capture_output=True, timeout=10)
            if self.pid is not None:
                deadline = time.monotonic() + 5.0
                while _alive(self.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if _alive(self.pid):
                    os.kill(self.pid, signal.SIGKILL)  # the daemon we started, by its own pid
        self.pid = None
        self._cleanup_dir()
        _rescan_portaudio()

    def _cleanup_dir(self) -> None:
        if self.runtime_dir is not None:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
            self.runtime_dir = None

    def __enter__(self) -> "VirtualMicrophone":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------------------- playback
    def play(self, audio: Union[str, Path, np.ndarray], sample_rate: int = 16000, *, wait: bool = True) -> subprocess.Popen:
        """Play a file (or a float array) into the virtual microphone with ``paplay``.

        Args:
          audio: a sound file path, or mono float samples.
          sample_rate: rate of ``audio`` when it is an array.
          wait: block until playback finished.

        Returns:
          the ``paplay`` process (finished if ``wait``).
        """
        if self.runtime_dir is None:
            raise RuntimeError("virtual microphone not started")
        if isinstance(audio, np.ndarray):
            import soundfile

            path = Path(tempfile.mkstemp(suffix=".wav", dir=self.runtime_dir)[1])
            soundfile.write(str(path), np.asarray(audio, dtype=np.float32), sample_rate, subtype="PCM_16")
        else:
            path = Path(audio)
            if not path.exists():
                raise FileNotFoundError(f"audio file not found: {path}")
        proc = subprocess.Popen(
            ["paplay", f"--device={self.sink}", str(path)],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if wait:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"paplay failed ({proc.returncode}): {err.decode(errors='replace').strip()}")
        return proc


def _rescan_portaudio() -> None:
    # PortAudio enumerates ALSA devices once, at ``import sounddevice``; the "pulse" and
    # "default" devices only appear while a server is reachable, so re-scan after changing it.
    import sys

    if "sounddevice" in sys.modules:
        from burble.streaming.sources import MicrophoneSource

        MicrophoneSource.rescan_devices()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # In a container without an init that reaps orphans, an exited daemon stays a zombie.
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except OSError:
        return False
    return True
