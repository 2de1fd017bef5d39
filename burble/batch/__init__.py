"""Offline batch transcription: batched windows, folders and manifests, resumable jobs, local and Ray engines.

* :mod:`burble.batch.batched`: many 30 s windows per encoder forward / decoder pass;
* :mod:`burble.batch.segment`: cutting recordings into windows (fixed or silero-vad);
* :mod:`burble.batch.inputs`: files, folders, globs, JSONL and lhotse manifests -> items;
* :mod:`burble.batch.outputs`: atomic writes and the completeness rule of ``--resume``;
* :mod:`burble.batch.job`, :mod:`burble.batch.worker`, :mod:`burble.batch.runner`: the job;
* :mod:`burble.batch.local`, :mod:`burble.batch.ray_engine`: where it runs;
* :mod:`burble.batch.scoring`, :mod:`burble.batch.report`: WER/CER reports for recipes.
"""

from __future__ import annotations

from burble.lazy import lazy_exports

# Loaded on first use (PEP 562): ``burble transcribe --help`` and the output helpers need no torch.
_EXPORTS = {
    "BatchedTranscriber": "burble.batch.batched", "BatchOptions": "burble.batch.batched",
    "AudioItem": "burble.batch.inputs", "InputError": "burble.batch.inputs", "ManifestError": "burble.batch.inputs",
    "collect_inputs": "burble.batch.inputs", "read_manifest": "burble.batch.inputs",
    "ItemRecord": "burble.batch.job", "JobConfig": "burble.batch.job", "JobSummary": "burble.batch.job",
    "RunOptions": "burble.batch.runner", "run_job": "burble.batch.runner",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
