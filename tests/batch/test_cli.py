import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _burble(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burble", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_manifest_errors_stop_the_job_before_loading_the_model(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "a.wav"}\n{"audio": "b.wav", "txt": \n')
    proc = _burble("transcribe", str(manifest), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert f"burble transcribe: error: {manifest}:2: not valid JSON" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_bad_flags_are_clear(tmp_path):
    proc = _burble("transcribe", "examples/jfk.wav", "--batch-size", "0", "-o", str(tmp_path))
    assert proc.returncode == 2 and "--batch-size must be >= 1" in proc.stderr
    proc = _burble("transcribe", str(tmp_path / "nothing" / "*.wav"))
    assert proc.returncode == 2 and "no files match" in proc.stderr


def test_help_lists_the_job_flags():
    proc = _burble("transcribe", "--help")
    assert proc.returncode == 0
    for flag in ("--batch-size", "--segmentation", "--workers", "--engine", "--resume", "--errors-file", "--summary-file", "--lm"):
        assert flag in proc.stdout
