"""``--engine ray``: the same job on Ray Data (local instance, 2 CPUs) writes the local engine's outputs."""

import json

import pytest

from burble.asr.options import TranscribeOptions
from burble.batch import BatchOptions, JobConfig, RunOptions, collect_inputs, run_job
from burble.testing import require_shared
from burble.testing.batch import broken_audio_files, short_dev_items, write_manifest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_engine_writes_the_outputs_of_the_local_engine(tmp_path, local_ray):
    require_shared()
    good = short_dev_items(3)
    rows = [{"id": it.id, "audio": str(it.audio_path)} for it in good]
    rows.append({"id": "corrupt", "audio": str(broken_audio_files(tmp_path / "bad")["corrupt"])})
    items = collect_inputs([str(write_manifest(tmp_path / "m.jsonl", rows))])
    options = TranscribeOptions(beam_size=1, temperatures=(0.0,))
    outputs = {}
    for engine in ("local", "ray"):
        config = JobConfig(output_dir=str(tmp_path / engine), formats=("txt", "srt", "vtt", "json"), options=options,
                           batch=BatchOptions(batch_size=2), threads=1)
        summary = run_job(items, config, RunOptions(engine=engine, workers=2, progress=False,
                                                    errors_file=str(tmp_path / f"{engine}-errors.jsonl")))
        assert (summary.ok, summary.failed, summary.engine) == (3, 1, engine)
        assert "corrupt.wav" in (tmp_path / f"{engine}-errors.jsonl").read_text()
        outputs[engine] = {p.name: p.read_text() for p in (tmp_path / engine).iterdir()}
    local, remote = outputs["local"], outputs["ray"]
    assert sorted(local) == sorted(remote) and len(local) == 12
    for name in local:
        if name.endswith(".json"):  # timing statistics differ; the transcript does not
            a, b = json.loads(local[name]), json.loads(remote[name])
            assert a["text"] == b["text"] and len(a["segments"]) == len(b["segments"])
            for x, y in zip(a["segments"], b["segments"]):
                # Other batch mates change float rounding in the last bits, never the tokens.
                assert {k: x[k] for k in ("tokens", "text", "start", "end")} == {k: y[k] for k in ("tokens", "text", "start", "end")}
                assert x["avg_logprob"] == pytest.approx(y["avg_logprob"], abs=1e-5)
        else:
            assert local[name] == remote[name]
