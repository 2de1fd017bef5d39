"""Offline batch transcription: batched windows, folders and manifests, resumable jobs, local and Ray engines.

* :mod:`burble.batch.batched`: many 30 s windows per encoder forward / decoder pass;
* :mod:`burble.batch.segment`: cutting recordings into windows (fixed or silero-vad);
* :mod:`burble.batch.inputs`: files, folders, globs, JSONL and lhotse manifests -> items;
* :mod:`burble.batch.outputs`: atomic writes and the completeness rule of ``--resume``;
* :mod:`burble.batch.job`, :mod:`burble.batch.worker`, :mod:`burble.batch.runner`: the job;
* :mod:`burble.batch.local`, :mod:`burble.batch.ray_engine`: where it runs;
* :mod:`burble.batch.scoring`, :mod:`burble.batch.report`: WER/CER reports for recipes.
"""

from burble.batch.batched import BatchedTranscriber, BatchOptions
from burble.batch.inputs import AudioItem, InputError, ManifestError, collect_inputs, read_manifest
from burble.batch.job import ItemRecord, JobConfig, JobSummary
from burble.batch.runner import RunOptions, run_job

__all__ = [
    "AudioItem", "BatchOptions", "BatchedTranscriber", "InputError", "ItemRecord", "JobConfig", "JobSummary",
    "ManifestError", "RunOptions", "collect_inputs", "read_manifest", "run_job",
]
