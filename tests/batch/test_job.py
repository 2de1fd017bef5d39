"""Jobs: broken inputs are reported and skipped, outputs are complete, --resume skips finished items."""

import json

from burble.asr.options import TranscribeOptions
from burble.batch import BatchOptions, JobConfig, RunOptions, collect_inputs, run_job
from burble.batch.job import read_records, worker_threads
from burble.batch.outputs import is_complete
from burble.testing import require_shared
from burble.testing.batch import broken_audio_files, short_dev_items, write_manifest

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,), without_timestamps=True)


def test_worker_threads_never_oversubscribe():
    assert worker_threads(1, cores=8) == 8
    assert worker_threads(3, cores=8) == 2
    assert worker_threads(16, cores=8) == 1
    assert worker_threads(2, threads=8, cores=8) == 4  # asked for too many: capped
    assert worker_threads(2, threads=1, cores=8) == 1


def test_broken_files_are_reported_and_the_rest_finish(tmp_path):
    require_shared()
    good = short_dev_items(2)
    broken = broken_audio_files(tmp_path / "in")
    rows = [{"id": good[0].id, "audio": str(good[0].audio_path), "text": good[0].text}]
    rows += [{"id": name, "audio": str(path)} for name, path in broken.items()]
    rows += [{"id": "missing", "audio": str(tmp_path / "in" / "missing.wav")}]
    rows += [{"id": good[1].id, "audio": str(good[1].audio_path)}]
    items = collect_inputs([str(write_manifest(tmp_path / "m.jsonl", rows))])
    out = tmp_path / "out"
    config = JobConfig(output_dir=str(out), formats=("txt", "json"), options=GREEDY, batch=BatchOptions(batch_size=4), threads=1)
    run = RunOptions(progress=False, errors_file=str(tmp_path / "errors.jsonl"), records_file=str(tmp_path / "records.jsonl"),
                     summary_file=str(tmp_path / "summary.json"))
    summary = run_job(items, config, run)

    assert (summary.files, summary.ok, summary.failed, summary.skipped) == (7, 2, 5, 0)
    errors = {e["id"]: e for e in read_records(tmp_path / "errors.jsonl")}
    assert set(errors) == {"corrupt", "empty", "not_audio", "no_samples", "missing"}
    assert errors["missing"]["error_type"] == "FileNotFoundError"
    assert {errors[k]["error_type"] for k in ("corrupt", "empty", "not_audio", "no_samples")} == {"AudioDecodeError"}
    assert all(e["audio"] in e["error"] for e in errors.values())  # messages name the file
    assert "no audio samples" in errors["no_samples"]["error"]
    for item in good:
        assert is_complete(out, item.id, ("txt", "json"))
        assert json.loads((out / f"{item.id}.json").read_text())["text"].strip()
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{it.id}.{f}" for it in good for f in ("txt", "json"))
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["ok"] == 2 and saved["failed"] == 5 and saved["audio_seconds"] > 3 and saved["rtf"] > 0
    records = read_records(tmp_path / "records.jsonl")
    assert sorted(r["status"] for r in records) == ["failed"] * 5 + ["ok"] * 2

    # Resume: the finished items are skipped (outputs untouched), the broken ones are tried again.
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    again = run_job(items, config, RunOptions(progress=False, resume=True))
    assert (again.ok, again.failed, again.skipped) == (0, 5, 2)
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == before
