"""The evaluation report of a recipe: markdown summary, per-utterance table, plots (PNG).

:func:`write_report` writes into one folder:

* ``report.md``: overall WER/CER with error counts, speed (RTF, audio hours per hour), the worst
  utterances with word diffs, and the plots;
* ``per_utterance.tsv``: id, duration, latency, RTF, WER, CER, edit counts, texts;
* ``scores.json``: the totals (for scripts and CI);
* ``wer_per_utterance.png`` and ``latency.png`` (matplotlib, headless).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

from burble.batch.outputs import atomic_write_text
from burble.batch.scoring import CorpusScore, compact_diff


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) or math.isinf(value) else f"{100 * value:.2f}%"


def totals(corpus: CorpusScore, summary: Optional[dict] = None) -> dict:
    words, chars = corpus.words, corpus.chars
    data = {
        "utterances": len(corpus.utterances),
        "missing": corpus.missing,
        "wer": words.rate, "cer": chars.rate,
        "substitutions": words.substitutions, "deletions": words.deletions, "insertions": words.insertions,
        "reference_words": words.ref_len,
    }
    if summary:
        data.update({k: summary.get(k) for k in ("rtf", "audio_hours", "audio_hours_per_hour", "wall_seconds", "ok", "failed", "skipped", "workers", "batch_size", "engine")})
    return data


def plot_wer(corpus: CorpusScore, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    utterances = sorted(corpus.utterances, key=lambda u: u.wer, reverse=True)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(utterances) + 2), 4.5))
    values = [100 * min(u.wer, 2.0) for u in utterances]
    ax.bar(range(len(utterances)), values, color=["#c0392b" if u.missing else "#2e86c1" for u in utterances])
    ax.axhline(100 * corpus.words.rate, color="#555", linestyle="--", label=f"corpus WER {_pct(corpus.words.rate)}")
    ax.set_xticks(range(len(utterances)), [u.id for u in utterances], rotation=75, ha="right", fontsize=7)
    ax.set_ylabel("WER (%)")
    ax.set_title("WER per utterance")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(corpus: CorpusScore, path: Path) -> bool:
    """Histograms of per-utterance latency and RTF; ``False`` when no latency was recorded."""
    timed = [u for u in corpus.utterances if u.seconds is not None and u.duration > 0]
    if not timed:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.hist([u.seconds for u in timed], bins=min(20, max(5, len(timed) // 2)), color="#2e86c1")
    left.set_xlabel("latency per utterance (s, read to written)")
    left.set_ylabel("utterances")
    right.hist([u.rtf for u in timed], bins=min(20, max(5, len(timed) // 2)), color="#28b463")
    right.set_xlabel("RTF per utterance (latency / audio duration)")
    fig.suptitle("Latency and real-time factor")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(corpus: CorpusScore, data: dict, *, title: str, worst: int, has_latency: bool) -> str:
    words = corpus.words
    lines = [f"# {title}", ""]
    lines += [
        "| utterances | WER | CER | sub | del | ins | ref words | missing |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(corpus.utterances)} | {_pct(words.rate)} | {_pct(corpus.chars.rate)} | {words.substitutions} | "
        f"{words.deletions} | {words.insertions} | {words.ref_len} | {len(corpus.missing)} |",
        "",
    ]
    if data.get("rtf") is not None:
        lines += [
            "| engine | workers | batch size | files ok / failed / skipped | audio h | wall s | RTF | audio h/h |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
            f"| {data.get('engine')} | {data.get('workers')} | {data.get('batch_size') or 'long-form'} | "
            f"{data.get('ok')} / {data.get('failed')} / {data.get('skipped')} | {data.get('audio_hours', 0):.4f} | "
            f"{data.get('wall_seconds', 0):.1f} | {data.get('rtf', float('nan')):.3f} | {data.get('audio_hours_per_hour', float('nan')):.2f} |",
            "",
        ]
    timed = [u for u in corpus.utterances if u.rtf is not None]
    if timed:
        latencies = sorted(u.seconds for u in timed)
        median = latencies[len(latencies) // 2]
        lines += [f"Per-utterance latency (read to written): median {median:.2f} s, max {latencies[-1]:.2f} s.", ""]
    if corpus.missing:
        lines += [f"Missing outputs (scored as empty): {', '.join(corpus.missing)}", ""]
    lines += ["![WER per utterance](wer_per_utterance.png)", ""]
    if has_latency:
        lines += ["![latency and RTF](latency.png)", ""]
    bad = corpus.worst(worst)
    if bad:
        lines += [f"## Worst {len(bad)} utterances", "",
                  "Normalised words; `[ref->hyp]` substitution, `[-w]` deletion, `[+w]` insertion.", ""]
        for u in bad:
            lines += [f"**{u.id}**: WER {_pct(u.wer)} ({u.words.errors} of {u.words.ref_len} words wrong)", "",
                      f"> {compact_diff(u.diff())}", ""]
    return "\n".join(lines) + "\n"


def write_report(
    corpus: CorpusScore,
    out_dir: str | Path,
    *,
    summary: Optional[dict] = None,
    title: str = "Evaluation report",
    worst: int = 10,
) -> Path:
    """Write the report folder; return the path of ``report.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = ["id", "duration_s", "latency_s", "rtf", "wer", "cer", "sub", "del", "ins", "ref_words", "missing", "reference", "hypothesis"]
    rows = ["\t".join(header)]
    for u in corpus.utterances:
        rows.append("\t".join(str(v) for v in (
            u.id, f"{u.duration:.3f}", "" if u.seconds is None else f"{u.seconds:.3f}", "" if u.rtf is None else f"{u.rtf:.4f}",
            f"{u.wer:.4f}", f"{u.cer:.4f}", u.words.substitutions, u.words.deletions, u.words.insertions, u.words.ref_len,
            int(u.missing), " ".join(u.reference.split()), " ".join(u.hypothesis.split()),
        )))
    atomic_write_text(out / "per_utterance.tsv", "\n".join(rows) + "\n")
    data = totals(corpus, summary)
    atomic_write_text(out / "scores.json", json.dumps(data, indent=2) + "\n")
    plot_wer(corpus, out / "wer_per_utterance.png")
    has_latency = plot_latency(corpus, out / "latency.png")
    report = out / "report.md"
    atomic_write_text(report, markdown(corpus, data, title=title, worst=worst, has_latency=has_latency))
    return report
