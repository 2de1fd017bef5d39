import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from burble.testing import dev_audio
from burble.testing.dev_audio import (
    dev_audio_items,
    dev_item,
    require_shared,
    shared_dir,
    untranscribed_items,
)


@pytest.fixture
def fake_shared(tmp_path, monkeypatch):
    """A minimal shared folder: two items (one 8 kHz stereo) and an untranscribed one."""
    base = tmp_path / "shared" / "dev-audio"
    (base / "audio").mkdir(parents=True)
    t = np.arange(8000) / 8000.0
    sf.write(base / "audio" / "a.wav", (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 8000)
    stereo = np.stack([np.zeros(16000), 0.2 * np.ones(16000)], axis=1).astype(np.float32)
    sf.write(base / "audio" / "b.wav", stereo, 16000)
    rows = [
        {"id": "a", "audio": "audio/a.wav", "text": "Hi.", "text_normalized": "hi", "duration_s": 1.0, "subset": "short"},
        {"id": "b", "audio": "audio/b.wav", "text": "Yo.", "text_normalized": "yo", "duration_s": 1.0, "subset": "long"},
    ]
    (base / "manifest.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (base / "untranscribed.jsonl").write_text(json.dumps({"id": "u", "audio": "audio/a.wav", "duration_s": 1.0}) + "\n")
    monkeypatch.setenv(dev_audio.ENV_SHARED, str(tmp_path / "shared"))
    return base


def test_env_override_and_fields(fake_shared):
    assert shared_dir() == fake_shared.parent.resolve()
    items = dev_audio_items()
    assert [it.id for it in items] == ["a", "b"]
    assert all(it.audio_path.is_absolute() and it.audio_path.is_file() for it in items)
    assert [it.id for it in dev_audio_items("long")] == ["b"]
    with pytest.raises(ValueError, match="unknown subset"):
        dev_audio_items("medium")
    (u,) = untranscribed_items()
    assert u.text is None and u.subset == "untranscribed"
    assert dev_item("u").id == "u"
    with pytest.raises(KeyError):
        dev_item("nope")


def test_load_resamples_and_downmixes(fake_shared):
    a = dev_item("a").load()
    assert a.dtype == np.float32 and len(a) == 16000  # 1 s at 8 kHz -> 16 kHz
    # A 440 Hz tone survives resampling: its spectral peak is still at 440 Hz.
    spectrum = np.abs(np.fft.rfft(a))
    assert abs(np.argmax(spectrum) * 16000 / len(a) - 440) < 2
    b = dev_item("b").load()
    assert np.allclose(b, 0.1, atol=1e-4)  # mean of the two channels (16-bit file)


def test_bad_manifest_line_is_reported(fake_shared):
    with open(fake_shared / "manifest.jsonl", "a") as f:
        f.write("{not json\n")
    with pytest.raises(ValueError, match=r"manifest.jsonl:3"):
        dev_audio_items()


def test_missing_shared_skips_outside_ci(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv(dev_audio.ENV_SHARED, str(tmp_path / "absent"))
    assert shared_dir(required=False) is None
    with pytest.raises(FileNotFoundError, match="BURBLE_SHARED"):
        shared_dir()
    with pytest.raises(pytest.skip.Exception, match="not available"):
        require_shared()
    monkeypatch.setenv("CI", "false")  # a CI variable that says "not CI" still skips
    with pytest.raises(pytest.skip.Exception):
        require_shared()


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_missing_shared_fails_in_ci(tmp_path, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv(dev_audio.ENV_SHARED, str(tmp_path / "absent"))
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_shared()


def test_missing_subfolder_fails_in_ci_and_present_data_passes(fake_shared, monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert require_shared("dev-audio") == fake_shared  # present: no skip, no failure
    with pytest.raises(pytest.fail.Exception, match="shared/voices not available"):
        require_shared("voices")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="shared/voices not available"):
        require_shared("voices")


def test_without_the_env_override_the_folder_beside_the_repository_is_used(tmp_path, monkeypatch):
    """The default search starts at ``<repo>/../shared``; a checkout without any fails in CI."""
    monkeypatch.delenv(dev_audio.ENV_SHARED, raising=False)
    repo = Path(dev_audio.__file__).resolve().parents[2]
    assert dev_audio._candidates()[0] == repo.parent / "shared"
    (tmp_path / "repo").mkdir()
    monkeypatch.setattr(dev_audio, "_candidates", lambda: [tmp_path / "repo" / ".." / "shared"])
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        require_shared()
    (tmp_path / "shared" / "dev-audio").mkdir(parents=True)
    assert require_shared() == (tmp_path / "shared" / "dev-audio").resolve()
