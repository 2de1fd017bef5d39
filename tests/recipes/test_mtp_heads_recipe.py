"""The MTP-heads recipe: training rows (head ``i`` at position ``t`` learns token ``t + 2 + i``) and the data's augmentation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]


def _train_module():
    spec = importlib.util.spec_from_file_location("mtp_train", ROOT / "recipes" / "mtp_heads" / "local" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_rows_align_hidden_states_with_the_tokens_after_the_next(tmp_path):
    train = _train_module()
    # One clip: tokens s0..s5 (s0 = last prompt token), hidden h0..h4 (h_i predicts s_{i+1}).
    tokens = torch.tensor([100, 11, 12, 13, 14, 15], dtype=torch.int32)
    hidden = torch.arange(5, dtype=torch.float16)[:, None].repeat(1, 3)
    save_file({"0.tokens": tokens, "0.hidden": hidden}, str(tmp_path / "shard_0000.safetensors"))
    rows = train.read_shards([tmp_path / "shard_0000.safetensors"], span=3)
    states, following = rows.hidden, rows.following
    assert states[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert rows.offsets.tolist() == [0, 5] and rows.audio is None
    assert following[0].tolist() == [11, 12, 13]  # after h0: s1 (verified), s2, s3
    assert following[3].tolist() == [14, 15, -1]
    lookup = torch.full((200,), train.IGNORE)
    lookup[torch.tensor([11, 12, 13, 14])] = torch.arange(4)  # 15 is outside the draft vocabulary
    targets, inputs = train.targets_and_inputs(following, lookup, num_heads=2, pad_token=0)
    # head 0 at h0 sees s1 and learns s2; head 1 sees s1, s2 and learns s3
    assert inputs[0].tolist() == [11, 12] and targets[0].tolist() == [1, 2]
    assert targets[3].tolist() == [train.IGNORE, train.IGNORE]  # s5 not in the vocabulary, s6 past the end
    assert inputs[4].tolist() == [15, 0]


def test_draft_vocabulary_is_the_most_frequent_next_tokens():
    train = _train_module()
    following = torch.tensor([[5, 0], [5, 0], [7, 0], [9, 0], [-1, 0]])
    ids, coverage = train.draft_vocabulary(following, 2)
    assert ids.tolist()[0] == 5 and len(ids) == 2
    assert abs(coverage - 3 / 4) < 1e-9


def _eagle_module():
    spec = importlib.util.spec_from_file_location("mtp_train_eagle", ROOT / "recipes" / "mtp_heads" / "local" / "train_eagle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Projector:
    """Stands in for Whisper's last cross-attention: keys/values ``(1, 1, S, D)``."""

    def project_kv(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return source[:, None], -source[:, None]


def test_eagle_rows_predict_the_next_feature_and_the_token_after_the_next(tmp_path):
    eagle = _eagle_module()
    # One clip: tokens s0..s5 (s0 = last prompt token), features h0..h4 (h_i predicts s_{i+1}).
    tokens = torch.tensor([100, 11, 12, 13, 14, 15], dtype=torch.int32)
    hidden = torch.arange(5, dtype=torch.float16)[:, None].repeat(1, 3)
    audio = torch.ones(4, 3, dtype=torch.float16)
    save_file({"0.tokens": tokens, "0.hidden": hidden, "0.audio": audio}, str(tmp_path / "shard_0000.safetensors"))
    clips = eagle.Clips([tmp_path / "shard_0000.safetensors"], _Projector())
    assert len(clips) == 1 and clips.rows == 5
    embedding = torch.arange(200, dtype=torch.float32)[:, None].repeat(1, 3)  # token t embeds as (t, t, t)
    lookup = torch.full((200,), eagle.IGNORE)
    lookup[torch.tensor([11, 12, 13, 14])] = torch.arange(4)  # 15 is outside the draft vocabulary
    batch = clips.batch([0], embedding, lookup)
    # Row i reads h_i and s_{i+1}; it learns h_{i+1} and s_{i+2}.
    assert batch["features"][0, :, 0].tolist() == [0, 1, 2, 3, 4]
    assert batch["embeddings"][0, :, 0].tolist() == [11, 12, 13, 14, 15]
    assert batch["target_features"][0, :4, 0].tolist() == [1, 2, 3, 4]
    assert batch["targets"][0].tolist() == [1, 2, 3, eagle.IGNORE, eagle.IGNORE]  # s5 outside, nothing after h4
    assert batch["keys"].shape == (1, 1, 4, 3) and torch.equal(batch["values"], -batch["keys"])


def test_augmentation_is_seeded_stays_in_range_and_says_what_it_did():
    spec = importlib.util.spec_from_file_location("mtp_augment", ROOT / "recipes" / "mtp_heads" / "local" / "augment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    t = np.arange(16000) / 16000
    audio = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    labels = set()
    for seed in range(12):
        out, label = module.augment(audio, np.random.default_rng(seed))
        again, same_label = module.augment(audio, np.random.default_rng(seed))
        assert np.array_equal(out, again) and label == same_label  # a shard remade is the same shard
        assert out.dtype == np.float32 and np.abs(out).max() <= 1.0
        if "speed" in label:  # 0.9-1.1x faster: the length follows
            factor = float(label.split("speed")[1].split("+")[0])
            assert abs(len(out) * factor / len(audio) - 1) < 0.01  # the label rounds the factor
        else:
            assert len(out) == len(audio)
        labels.add(label.split("+gain")[0])
    assert len(labels) >= 6  # the effects vary from clip to clip
