"""Acceptance: a job killed midway (SIGKILL) and rerun with --resume ends with exactly one complete
output per item: none corrupt or partial, none lost, and finished items are not redone."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burble.batch.outputs import FORMATS, check_output, is_complete
from burble.testing import require_shared
from burble.testing.batch import dev_manifest, short_dev_items

ROOT = Path(__file__).resolve().parents[2]


def _command(manifest: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "burble", "transcribe", str(manifest), "-o", str(out), "-f", "all",
            "--beam-size", "1", "--temperature", "0", "--without-timestamps", "--threads", "1", "--quiet", *extra]


def _complete(out: Path, ids) -> set[str]:
    return {i for i in ids if is_complete(out, i, FORMATS)}


@pytest.mark.slow
def test_sigkill_midway_then_resume(tmp_path):
    require_shared()
    items = short_dev_items(8)
    ids = [it.id for it in items]
    manifest = dev_manifest(tmp_path / "m.jsonl", items)
    out = tmp_path / "out"

    # Two worker processes, two windows per batch: the kill lands while several items are in flight.
    proc = subprocess.Popen(_command(manifest, out, "--workers", "2", "--batch-size", "2"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while len(_complete(out, ids)) < 2:
        assert proc.poll() is None, f"the job ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "no item finished in time"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    finished = _complete(out, ids)
    assert 2 <= len(finished) < len(ids), "the kill did not land midway"
    mtimes = {p: p.stat().st_mtime_ns for i in finished for p in out.glob(f"{i}.*")}

    # The workers died with the parent: nothing is written after the kill.
    snapshot = sorted(p.name for p in out.iterdir())
    time.sleep(3)
    assert sorted(p.name for p in out.iterdir()) == snapshot

    summary_file = tmp_path / "summary.json"
    rerun = subprocess.run(_command(manifest, out, "--resume", "--summary-file", str(summary_file)), cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = json.loads(summary_file.read_text())
    assert (summary["skipped"], summary["ok"], summary["failed"]) == (len(finished), len(ids) - len(finished), 0)

    # Exactly one whole output per item and format, no temporary files, finished ones untouched.
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{i}.{fmt}" for i in ids for fmt in FORMATS)
    assert all(check_output(out / f"{i}.{fmt}") is None for i in ids for fmt in FORMATS)
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    texts = {i: json.loads((out / f"{i}.json").read_text())["text"] for i in ids}
    assert all(texts.values())
