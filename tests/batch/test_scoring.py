import json
from pathlib import Path

from burble.batch.inputs import AudioItem
from burble.batch.scoring import score_items, word_diff
from burble.batch.report import write_report
from burble.testing.batch import write_manifest


def _hyps(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.json").write_text(json.dumps({"text": "The cat sat on the mat.", "duration": 2.0, "segments": []}))
    (folder / "b.txt").write_text("hello there world\n")
    # "c" has no output at all.


def test_word_diff_marks_each_edit():
    assert word_diff("red green blue pink gold", "red grin blue gold") == "red [green->grin] blue [-pink] gold"
    assert word_diff("hello world", "hello there world") == "hello [+there] world"
    assert word_diff("", "hi") == "[+hi]"


def test_scores_count_missing_outputs_as_deletions(tmp_path):
    _hyps(tmp_path / "hyp")
    items = [AudioItem("a", "a.wav", "THE CAT SAT ON THE MAT"), AudioItem("b", "b.wav", "hello world"),
             AudioItem("c", "c.wav", "red green blue"), AudioItem("u", "u.wav", None)]
    records = [{"id": "a", "status": "ok", "duration": 2.0, "seconds": 0.5}]
    corpus = score_items(items, tmp_path / "hyp", records)
    assert [u.id for u in corpus.utterances] == ["a", "b", "c"]  # "u" has no reference
    a, b, c = corpus.utterances
    assert a.wer == 0 and a.rtf == 0.25
    assert (b.words.insertions, b.words.ref_len) == (1, 2)
    assert c.missing and c.words.deletions == 3
    assert corpus.words.errors == 4 and corpus.words.ref_len == 11
    assert corpus.missing == ["c"] and [u.id for u in corpus.worst(5)] == ["c", "b"]

    report = write_report(corpus, tmp_path / "report", summary={"rtf": 0.3, "audio_hours": 0.001, "audio_hours_per_hour": 3.3,
                                                                "wall_seconds": 1.2, "ok": 2, "failed": 0, "skipped": 0})
    text = report.read_text()
    assert "| 3 | 36.36% |" in text and "[-red] [-green] [-blue]" in text and "hello [+there] world" in text
    assert "Missing outputs (scored as empty): c" in text
    for png in ("wer_per_utterance.png", "latency.png"):
        assert (tmp_path / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scores = json.loads((tmp_path / "report" / "scores.json").read_text())
    assert scores["wer"] == 4 / 11 and scores["rtf"] == 0.3
    rows = (tmp_path / "report" / "per_utterance.tsv").read_text().splitlines()
    assert len(rows) == 4 and rows[1].startswith("a\t2.000\t0.500\t0.2500\t0.0000")


def test_score_cli(tmp_path, capsys):
    from burble.cli import main

    _hyps(tmp_path / "hyp")
    manifest = write_manifest(tmp_path / "m.jsonl", [{"id": "a", "audio": "a.wav", "text": "the cat sat on the mat"}])
    assert main(["score", str(manifest), str(tmp_path / "hyp"), "-o", str(tmp_path / "r")]) == 0
    assert capsys.readouterr().out.startswith("WER 0.00% (0/6)")
    assert main(["score", str(tmp_path / "none.jsonl"), str(tmp_path), "-o", str(tmp_path / "r")]) == 2
    assert "manifest not found" in capsys.readouterr().err


def test_compact_diff_keeps_context_around_edits():
    from burble.batch.scoring import compact_diff

    words = [f"w{i}" for i in range(40)]
    words[20] = "[w20->x]"
    assert compact_diff(" ".join(words), context=2) == "… w18 w19 [w20->x] w21 w22 …"
    assert compact_diff("a b c") == "a b c"
