"""Scoring a transcription job against references: WER/CER overall and per utterance, word diffs.

References come from the job's manifest (``text``); hypotheses from the job's JSON (or TXT)
outputs; per-item latency from the ``--records-file`` of ``burble transcribe``. Both sides go
through Whisper's English normaliser (:mod:`burble.metrics.wer`). An item without an output counts
as an empty hypothesis (all its words deleted) and is listed as missing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from burble.batch.inputs import AudioItem
from burble.metrics.wer import ErrorCounts, align_word_sequences, char_errors, normalize_text, word_errors


@dataclass
class UtteranceScore:
    """One item's errors.

    Attributes:
      id: the item id.
      reference, hypothesis: raw texts (hypothesis empty when missing).
      words: word edit counts; chars: character edit counts.
      duration: audio seconds (from the records, else the JSON output).
      seconds: wall seconds from reading to writing (``None`` without records).
      missing: no output was found.
    """

    id: str
    reference: str
    hypothesis: str
    words: ErrorCounts
    chars: ErrorCounts
    duration: float = 0.0
    seconds: Optional[float] = None
    missing: bool = False

    @property
    def wer(self) -> float:
        return self.words.rate

    @property
    def cer(self) -> float:
        return self.chars.rate

    @property
    def rtf(self) -> Optional[float]:
        return self.seconds / self.duration if self.seconds is not None and self.duration > 0 else None

    def diff(self) -> str:
        """The normalised word alignment: ``word``, ``[ref->hyp]``, ``[-deleted]``, ``[+inserted]``."""
        return word_diff(normalize_text(self.reference), normalize_text(self.hypothesis))

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(wer=self.wer, cer=self.cer, rtf=self.rtf)
        return data


@dataclass
class CorpusScore:
    """All utterances and their totals."""

    utterances: list[UtteranceScore] = field(default_factory=list)

    @property
    def words(self) -> ErrorCounts:
        total = ErrorCounts()
        for u in self.utterances:
            total = total + u.words
        return total

    @property
    def chars(self) -> ErrorCounts:
        total = ErrorCounts()
        for u in self.utterances:
            total = total + u.chars
        return total

    @property
    def missing(self) -> list[str]:
        return [u.id for u in self.utterances if u.missing]

    def worst(self, n: int = 10) -> list[UtteranceScore]:
        """The ``n`` utterances with the most word errors (ties: higher WER first)."""
        ranked = sorted(self.utterances, key=lambda u: (u.words.errors, u.wer), reverse=True)
        return [u for u in ranked[:n] if u.words.errors > 0]


def word_diff(reference: str, hypothesis: str) -> str:
    """Inline diff of two (normalised) texts, word by word."""
    ref, hyp = reference.split(), hypothesis.split()
    out = []
    for op, i, j in align_word_sequences(ref, hyp):
        if op == "equal":
            out.append(ref[i])
        elif op == "substitute":
            out.append(f"[{ref[i]}->{hyp[j]}]")
        elif op == "delete":
            out.append(f"[-{ref[i]}]")
        else:
            out.append(f"[+{hyp[j]}]")
    return " ".join(out)


def compact_diff(diff: str, context: int = 6) -> str:
    """Keep only the words within ``context`` words of an edit (``…`` marks the cuts)."""
    words = diff.split()
    edits = [i for i, w in enumerate(words) if w.startswith("[")]
    if not edits:
        return diff
    keep = sorted({j for i in edits for j in range(max(0, i - context), min(len(words), i + context + 1))})
    out, previous = [], -1
    for j in keep:
        if j != previous + 1:
            out.append("…")
        out.append(words[j])
        previous = j
    if previous != len(words) - 1:
        out.append("…")
    return " ".join(out)


def read_hypothesis(hyp_dir: str | Path, item_id: str) -> Optional[tuple[str, float]]:
    """``(text, duration)`` from ``<id>.json`` (else ``<id>.txt``, duration 0), or ``None``."""
    base = Path(hyp_dir) / item_id
    json_path, txt_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".txt")
    if json_path.is_file():
        data = json.loads(json_path.read_text(encoding="utf-8"))
        return str(data.get("text", "")), float(data.get("duration") or 0.0)
    if txt_path.is_file():
        return " ".join(txt_path.read_text(encoding="utf-8").split()), 0.0
    return None


def score_items(items: Sequence[AudioItem], hyp_dir: str | Path, records: Sequence[dict] = ()) -> CorpusScore:
    """Score every item that has a reference.

    Args:
      items: manifest items (those without ``text`` are skipped).
      hyp_dir: the job's output folder.
      records: rows of the job's records file (for latency and duration; the last ``ok`` row of
        an id wins, as a resumed run appends to the file).
    """
    by_id = {r["id"]: r for r in records if r.get("status") == "ok"}
    corpus = CorpusScore()
    for item in items:
        if item.text is None:
            continue
        found = read_hypothesis(hyp_dir, item.id)
        hypothesis, duration = found if found is not None else ("", 0.0)
        record = by_id.get(item.id)
        corpus.utterances.append(
            UtteranceScore(
                id=item.id, reference=item.text, hypothesis=hypothesis,
                words=word_errors(item.text, hypothesis), chars=char_errors(item.text, hypothesis),
                duration=float(record["duration"]) if record else duration,
                seconds=float(record["seconds"]) if record else None,
                missing=found is None,
            )
        )
    if not corpus.utterances:
        raise ValueError("no item has a reference 'text': nothing to score")
    return corpus
