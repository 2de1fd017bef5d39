"""The codec recipe's training resumes where it stopped and exports weights ``burble.codecs.load`` reads;
its decoder refinement grows the decoder without changing what it decodes or what the encoder codes,
resumes, and exports; its vocoder stage fits a causal generator, exports it and names it as the
codec's vocoder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "recipes" / "codec" / "local" / "train.py"
EXPORT = ROOT / "recipes" / "codec" / "local" / "export.py"
DISTILL = ROOT / "recipes" / "codec" / "local" / "distill_vocoder.py"
REFINE = ROOT / "recipes" / "codec" / "local" / "refine_decoder.py"


def _shard(path: Path, clips: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    tensors = {f"{i}.mel": (torch.randn(80, 40 + 8 * i, generator=g) - 5).to(torch.float16) for i in range(clips)}
    tensors.update({f"{i}.audio": torch.zeros((40 + 8 * i) * 256, dtype=torch.int16) for i in range(clips)})
    meta = [{"id": f"x{i}", "text": "t", "length_scale": 1.0} for i in range(clips)]
    save_file(tensors, str(path), metadata={"clips": json.dumps(meta)})


def _train(data: Path, exp: Path, steps: int) -> str:
    done = subprocess.run(
        [sys.executable, str(TRAIN), "--data-dir", str(data), "--exp-dir", str(exp), "--steps", str(steps),
         "--batch-size", "2", "--segment", "16", "--save-every", "2", "--eval-every", "2", "--warmup", "1",
         "--num-books", "2", "--codebook-size", "16", "--threads", "1"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _codec_train_module(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(TRAIN.parent))
    spec = importlib.util.spec_from_file_location("codec_recipe_train", TRAIN)  # the MTP recipe has a train.py too
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_resumes_from_its_checkpoint_and_exports(tmp_path):
    data, exp = tmp_path / "data", tmp_path / "exp"
    data.mkdir()
    _shard(data / "train_0000.safetensors", 4, seed=0)
    _shard(data / "heldout_0000.safetensors", 2, seed=1)
    first = _train(data, exp, steps=2)
    assert "resumed" not in first
    state = torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 2 and bool(state["model"]["quantizer.initialized"])
    second = _train(data, exp, steps=4)
    assert "resumed at step 2" in second
    assert torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == 4

    weights = tmp_path / "tiny.safetensors"
    done = subprocess.run([sys.executable, str(EXPORT), "--checkpoint", str(exp / "checkpoint.pt"), "--out", str(weights),
                           "--default-books", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from burble.codecs.codec import load

    codec = load(str(weights))
    assert codec.default_books == 2 and codec.config.codebook_size == 16

    # stage 3: the decoder grows to 3 units per rate and trains on the frozen codes; a rerun resumes
    refined = tmp_path / "refined.safetensors"
    command = [sys.executable, str(REFINE), "--data-dir", str(data), "--exp-dir", str(exp / "refine"), "--codec",
               str(weights), "--out", str(refined), "--units", "3", "--batch-size", "2", "--segment", "16",
               "--save-every", "1", "--eval-every", "2", "--warmup", "1", "--threads", "1"]
    done = subprocess.run(command + ["--steps", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    again = subprocess.run(command + ["--steps", "2"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "resumed at step 1" in again.stdout, again.stderr[-2000:]
    base, grown = load(str(weights)), load(str(refined))
    assert grown.config.decoder_units == 3 and base.config.decoder_units == 2 and grown.default_books == 2
    assert torch.equal(grown.model.quantizer.embed, base.model.quantizer.embed)
    mel = torch.randn(1, 80, 32) - 5
    assert torch.equal(grown.model.encode(mel, 2), base.model.encode(mel, 2))  # the codes keep their meaning
    assert not torch.equal(grown.model.decode(base.model.encode(mel, 2)), base.model.decode(base.model.encode(mel, 2)))

    # stage 4: the least-squares fit (on the random shards: what is checked is the plumbing), kept once made
    vocoder_exp = exp / "vocoder"
    command = [sys.executable, str(DISTILL), "--data-dir", str(data), "--exp-dir", str(vocoder_exp), "--codec",
               str(weights), "--fit-clips", "2", "--eval-clips", "1", "--threads", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    state = torch.load(vocoder_exp / "vocoder.pt", map_location="cpu", weights_only=False)
    assert state["evaluation"]["right_reach"] == {"student": 698, "teacher": 3258}
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "exists" in again.stdout
    # stage 5: the export stores the fitted first stage and makes it the codec's vocoder
    vocoder_file = tmp_path / "fitted.safetensors"
    done = subprocess.run([sys.executable, str(EXPORT), "--vocoder-checkpoint", str(vocoder_exp / "vocoder.pt"),
                           "--out", str(vocoder_file), "--codec", str(weights)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        assert f.metadata()["vocoder"] == "fitted"
    from burble.codecs.vocoder import load_vocoder

    fitted = load_vocoder(str(vocoder_file))
    assert fitted.right_reach() == 698
    assert torch.allclose(fitted.conv_pre.weight, state["model"]["conv_pre.weight"], rtol=1e-2, atol=1e-4)


def test_training_takes_the_codec_shape_and_favoured_books_from_flags(tmp_path):
    """What the mel-43hz preset passes: one 2x stage, its widths and decoder units, half the rows at 2 books."""
    data, exp = tmp_path / "data", tmp_path / "exp"
    data.mkdir()
    _shard(data / "train_0000.safetensors", 4, seed=0)
    _shard(data / "heldout_0000.safetensors", 2, seed=1)
    done = subprocess.run(
        [sys.executable, str(TRAIN), "--data-dir", str(data), "--exp-dir", str(exp), "--steps", "2", "--batch-size", "2",
         "--segment", "16", "--warmup", "1", "--num-books", "4", "--codebook-size", "16", "--threads", "1",
         "--down-stages", "1", "--channels", "32,48", "--decoder-units", "3", "--favoured-books", "2",
         "--favoured-share", "0.5", "--dropout", "0.3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    config = torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)["config"]
    assert (config["down_stages"], config["channels"], config["decoder_units"]) == (1, [32, 48], 3)
    too_much = subprocess.run([sys.executable, str(TRAIN), "--data-dir", str(data), "--exp-dir", str(tmp_path / "x"),
                               "--favoured-share", "0.8", "--dropout", "0.3"], capture_output=True, text=True, timeout=120)
    assert too_much.returncode == 2 and "at most 1" in too_much.stderr


def test_book_counts_favour_what_they_are_told_and_repeat_per_step(monkeypatch):
    book_counts = _codec_train_module(monkeypatch).book_counts

    counts = torch.cat([book_counts(s, 16, 8, dropout=0.3, favoured=[2], favoured_share=0.5) for s in range(200)])
    share = {b: float((counts == b).float().mean()) for b in range(1, 9)}
    assert 0.50 < share[2] < 0.58 and 0.17 < share[8] < 0.25  # 0.5 + 0.3 / 8 and 0.2 + 0.3 / 8
    assert all(0.02 < share[b] < 0.06 for b in (1, 3, 4, 5, 6, 7))  # 0.3 / 8 each
    assert torch.equal(book_counts(7, 16, 8, dropout=0.3, favoured=[2], favoured_share=0.5),
                       book_counts(7, 16, 8, dropout=0.3, favoured=[2], favoured_share=0.5))
    # without favoured counts (the mel-21hz preset) a row gets a uniform 1..8 or all 8
    plain = torch.cat([book_counts(s, 16, 8, dropout=0.6, favoured=[], favoured_share=0.0) for s in range(200)])
    assert 0.42 < float((plain == 8).float().mean()) < 0.5  # 0.4 + 0.6 / 8


def test_training_without_data_says_what_to_run(tmp_path):
    done = subprocess.run([sys.executable, str(TRAIN), "--data-dir", str(tmp_path), "--exp-dir", str(tmp_path / "exp"),
                           "--steps", "1"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "run stage 0 first" in done.stderr


def test_a_grown_decoder_starts_as_the_decoder_it_grew_from(monkeypatch):
    """New residual units start with a zero output projection: the grown decoder decodes exactly as
    before (negative control: once a new unit's projection is non-zero, it does not)."""
    monkeypatch.syspath_prepend(str(REFINE.parent))
    from refine_decoder import grow_decoder

    from burble.codecs.model import CodecConfig, MelCodec

    torch.manual_seed(0)
    base = MelCodec(CodecConfig(num_books=2, codebook_size=16)).eval()
    grown = grow_decoder(base, 5).eval()
    assert len(grown.decoder.convs[0]) == 5 and len(base.decoder.convs[0]) == 2
    latent = torch.randn(1, 128, 12)
    with torch.no_grad():
        assert torch.equal(grown.decoder(latent), base.decoder(latent))
        torch.nn.init.normal_(grown.decoder.convs[0][4].mix.weight, std=0.1)
        assert not torch.equal(grown.decoder(latent), base.decoder(latent))


def test_a_fine_tune_splits_every_code_and_starts_where_the_base_run_ended(tmp_path, monkeypatch):
    """What the mel-43hz preset's fine-tune does: books of 16 grow to 32, each code a copy of a trained one
    a small step away, so the codec decodes (nearly) as before; the fine-tune trains and resumes."""
    data, exp = tmp_path / "data", tmp_path / "exp"
    data.mkdir()
    _shard(data / "train_0000.safetensors", 4, seed=0)
    _shard(data / "heldout_0000.safetensors", 2, seed=1)
    _train(data, exp, steps=2)
    base_state = torch.load(exp / "checkpoint.pt", map_location="cpu", weights_only=False)

    from burble.codecs.model import CodecConfig, MelCodec

    module = _codec_train_module(monkeypatch)
    base = MelCodec(CodecConfig.from_dict(base_state["config"])).eval()
    base.load_state_dict(base_state["model"])
    grown = MelCodec(CodecConfig.from_dict({**base_state["config"], "codebook_size": 32})).eval()
    module.start_from(grown, exp / "checkpoint.pt")
    old, new = base.quantizer.embed, grown.quantizer.embed
    assert torch.equal(new[:, :16], old)
    offset = (new[:, 16:] - old).norm(dim=2)
    assert bool((offset > 0).all()) and float(offset.max()) < 0.1 * float(old.std(dim=1).norm(dim=1).max())
    assert torch.allclose(grown.quantizer.usage.sum(1), base.quantizer.usage.sum(1))
    assert torch.allclose(grown.quantizer.embed_sum / grown.quantizer.usage[..., None], new, atol=1e-5)
    mel = torch.randn(1, 80, 32) - 5
    before = base.decode(base.encode(mel, 2))
    after = grown.decode(grown.encode(mel, 2))
    assert (after - before).abs().mean() < 0.05 * (before - mel).abs().mean()  # the split barely moves the output
    with pytest.raises(SystemExit, match="cannot grow"):
        module.start_from(MelCodec(CodecConfig.from_dict({**base_state["config"], "codebook_size": 24})), exp / "checkpoint.pt")

    command = [sys.executable, str(TRAIN), "--data-dir", str(data), "--exp-dir", str(exp / "finetune"), "--batch-size", "2",
               "--segment", "16", "--save-every", "1", "--eval-every", "2", "--warmup", "1", "--num-books", "2",
               "--codebook-size", "32", "--threads", "1", "--init-from", str(exp / "checkpoint.pt")]
    done = subprocess.run(command + ["--steps", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "started from" in done.stdout, done.stderr[-2000:]
    again = subprocess.run(command + ["--steps", "2"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "resumed at step 1" in again.stdout, again.stderr[-2000:]
    tuned = torch.load(exp / "finetune" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert tuned["step"] == 2 and tuned["config"]["codebook_size"] == 32


def test_the_report_refuses_a_fine_tune_log_without_its_base_run(tmp_path):
    """The fine-tune's steps count on from the base run's, so a lone ``finetune/train.log`` gets a one-line
    error (no traceback); with the base log beside it the report is written."""
    exp = tmp_path / "exp-x"
    (exp / "finetune").mkdir(parents=True)
    record = {"step": 2, "l1": 0.1, "l2": 0.02, "delta": 0.1, "commit": 0.1, "lr": 1e-4, "mel_l1@1": 0.3, "mel_l1@2": 0.25}
    (exp / "finetune" / "train.log").write_text(json.dumps(record) + "\n")
    command = [sys.executable, str(ROOT / "recipes" / "codec" / "local" / "report.py"), "--exp-dir", str(exp),
               "--name", "x", "--out-dir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no base run" in done.stderr and "Traceback" not in done.stderr
    (exp / "train.log").write_text(json.dumps({**record, "step": 4}) + "\n")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "RESULTS_x.md").is_file() and (tmp_path / "report_x.png").is_file()
