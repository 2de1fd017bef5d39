import gzip
import json

import pytest

from burble.batch.inputs import InputError, ManifestError, collect_inputs, read_manifest, scan_folder
from burble.testing.batch import write_manifest


def test_burble_manifest_resolves_relative_paths_and_defaults_ids(tmp_path):
    manifest = write_manifest(tmp_path / "data" / "m.jsonl", [
        {"id": "a", "audio": "audio/a.wav", "text": "hello"},
        {"audio": "/abs/b.flac"},
    ])
    a, b = read_manifest(manifest)
    assert (a.id, a.audio, a.text) == ("a", str(tmp_path / "data" / "audio" / "a.wav"), "hello")
    assert (b.id, b.audio, b.text) == ("b", "/abs/b.flac", None)


def test_lhotse_recordings_and_cuts_gzipped(tmp_path):
    recording = {"id": "rec1", "sources": [{"type": "file", "channels": [0], "source": "wav/rec1.wav"}],
                 "sampling_rate": 16000, "num_samples": 160000, "duration": 10.0}
    cut = {"id": "rec1-cut0", "start": 1.5, "duration": 2.0, "channel": 0, "recording": recording,
           "supervisions": [{"id": "s", "start": 0, "duration": 2.0, "text": "HELLO THERE"}]}
    path = tmp_path / "cuts.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(recording) + "\n" + json.dumps(cut) + "\n")
    rec, c = read_manifest(path)
    assert (rec.id, rec.audio, rec.start, rec.duration) == ("rec1", str(tmp_path / "wav" / "rec1.wav"), 0.0, None)
    assert (c.id, c.start, c.duration, c.text) == ("rec1-cut0", 1.5, 2.0, "HELLO THERE")


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"audio": "a.wav"', "m.jsonl:2: not valid JSON"),
        ('["a.wav"]', "m.jsonl:2: expected a JSON object, got list"),
        ('{"path": "a.wav", "text": "x"}', "m.jsonl:2: no 'audio' field"),
        ('{"audio": 3}', "m.jsonl:2: 'audio' must be a path string"),
        ('{"audio": "a.wav", "text": 5}', "m.jsonl:2: 'text' must be a string"),
        ('{"audio": "a.wav", "id": "../escape"}', "m.jsonl:2: id '../escape' must be a plain relative name"),
        ('{"audio": "a.wav", "id": "/abs"}', "m.jsonl:2: id '/abs' must be a plain relative name"),
        ('{"id": "c", "recording": {"sources": [{"type": "url", "source": "http://x"}]}, "duration": 1}', "only lhotse sources of type 'file'"),
    ],
)
def test_manifest_errors_name_file_line_and_problem(tmp_path, line, message):
    path = tmp_path / "m.jsonl"
    path.write_text('{"audio": "ok.wav"}\n' + line + "\n")
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    assert message in str(info.value)


def test_empty_and_missing_manifests(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n# only a comment\n")
    with pytest.raises(ManifestError, match="holds no items"):
        read_manifest(tmp_path / "empty.jsonl")
    with pytest.raises(ManifestError, match="manifest not found"):
        collect_inputs([str(tmp_path / "nope.jsonl")])


def test_folders_globs_and_name_collisions(tmp_path):
    for name in ("x/one.wav", "x/sub/two.FLAC", "x/sub/notes.txt", "x/.hidden.wav", "y/one.wav"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert [(i.id, i.audio) for i in scan_folder(tmp_path / "x")] == [
        ("one", str(tmp_path / "x/one.wav")), ("sub/two", str(tmp_path / "x/sub/two.FLAC"))]
    # A glob expands to files named by stem; the same file reached twice counts once.
    items = collect_inputs([str(tmp_path / "x" / "*.wav"), str(tmp_path / "x" / "one.wav")])
    assert [i.id for i in items] == ["one"]
    with pytest.raises(InputError, match="same output name 'one'"):
        collect_inputs([str(tmp_path / "x"), str(tmp_path / "y" / "one.wav")])
    with pytest.raises(InputError, match="no files match"):
        collect_inputs([str(tmp_path / "z" / "*.wav")])
    # A missing plain file is not an input error: the job reports it per item.
    assert [i.id for i in collect_inputs([str(tmp_path / "missing.wav")])] == ["missing"]
