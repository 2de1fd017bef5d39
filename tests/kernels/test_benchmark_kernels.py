"""benchmarks/kernels.py on the CPU: its shapes are the real models' shapes, its byte and FLOP counts
are what its own inputs and burble's attention really do, and without a GPU it writes nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from burble.kernels.attention import attention

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"


def _load():
    spec = importlib.util.spec_from_file_location("benchmark_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load()


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script really benchmarks")
def test_without_cuda_it_reports_and_writes_nothing(tmp_path, capsys, bench):
    output = tmp_path / "BENCHMARKS.md"
    assert bench.main(["--output", str(output)]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out
    assert not output.exists()


@pytest.mark.parametrize("label", ["whisper-tiny", "whisper-base"])
def test_whisper_shapes_are_the_checkpoints_shapes(bench, label):
    """The table the benchmark builds its Whisper rows from, against the real weights' dimensions,
    and every Whisper row it would time against that table."""
    from burble.asr.whisper.loading import load_checkpoint

    table = bench.WHISPER[label]
    try:
        dims = load_checkpoint(table.checkpoint).model.dims
    except FileNotFoundError as error:  # base is an optional extra
        pytest.skip(str(error))
    assert (table.text_heads, table.audio_heads) == (dims.n_text_head, dims.n_audio_head)
    assert table.head_dim == dims.n_text_state // dims.n_text_head == dims.n_audio_state // dims.n_audio_head
    assert (table.text_ctx, table.audio_ctx) == (dims.n_text_ctx, dims.n_audio_ctx)

    for quick in (False, True):
        rows = [s for s in bench.decode_shapes(quick) if s.model == label]
        assert {s.kind for s in rows} == ({"self", "cross"} if quick else {"self", "cross", "verify"})
        for s in rows:
            assert (s.heads, s.head_dim) == (dims.n_text_head, dims.n_text_state // dims.n_text_head), s
            if s.kind == "cross":
                assert s.cache_len == s.capacity == dims.n_audio_ctx, s
            else:
                assert s.capacity == dims.n_text_ctx and 0 < s.cache_len <= dims.n_text_ctx, s
        assert quick or max(s.cache_len for s in rows if s.kind == "self") == dims.n_text_ctx  # a full cache is timed
        encoder = [s for s in bench.prefill_shapes(quick) if s.model == f"{label} encoder"]
        assert encoder or (quick and label == "whisper-base")
        for s in encoder:
            assert (s.heads, s.head_dim, s.q_len, s.k_len, s.causal) == (
                dims.n_audio_head, dims.n_audio_state // dims.n_audio_head, dims.n_audio_ctx, dims.n_audio_ctx, False
            ), s


def test_the_lm_rows_reach_their_context(bench):
    rows = [s for s in bench.decode_shapes(quick=False) if s.model == bench.LM_MODEL]
    assert {s.heads for s in rows} == {bench.LM_HEADS}
    assert max(s.cache_len for s in rows) == bench.LM_CONTEXT and all(s.capacity == bench.LM_CONTEXT for s in rows)
    assert any(s.kind == "verify" and s.q_len > 1 for s in rows)


def distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of memory a tensor view covers, counting once what stride-0 dimensions repeat."""
    return t.element_size() * int(torch.tensor([n for n, st in zip(t.shape, t.stride()) if st != 0]).prod())


@pytest.mark.parametrize("kind", ["self", "cross", "verify"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kv_bytes_are_the_bytes_its_inputs_hold(bench, kind, dtype):
    """``kv_bytes`` (the GB/s numerator) against the tensors the benchmark really builds, run
    through burble's attention on the CPU so the inputs are known to be a valid call."""
    shape = bench.DecodeShape("m", kind, batch=3, heads=2, cache_len=10, capacity=16, q_len=4 if kind == "verify" else 1, head_dim=8)
    q, k, v = bench.decode_inputs(shape, dtype, torch.Generator().manual_seed(0))
    assert shape.kv_bytes == distinct_bytes(k) + distinct_bytes(v)
    assert k.shape == v.shape == (3, 2, 10, 8) and q.shape == (3, 2, shape.q_len, 8)
    out = attention(q.float(), k.float(), v.float(), is_causal=kind != "cross", backend="torch")
    assert out.shape == q.shape and torch.isfinite(out).all()
    # Negative control: the cross call shares one audio's keys across the batch; a count that
    # read a copy per row would be 3x too large for it (and right for self attention).
    naive = 2 * k.numel() * k.element_size()
    assert (naive == shape.kv_bytes) == (kind != "cross")


@pytest.mark.parametrize("q_len, k_len", [(4, 6), (3, 3), (1, 5), (5, 9)])
def test_causal_prefill_flops_count_the_pairs_burbles_mask_keeps(bench, q_len, k_len):
    """Which (query, key) pairs a causal call computes, read off burble's attention itself: with
    all scores equal and one-hot values, each output row is uniform over exactly its visible keys."""
    q = torch.zeros(1, 1, q_len, k_len)
    k = torch.zeros(1, 1, k_len, k_len)
    v = torch.eye(k_len)[None, None]
    visible = int((attention(q, k, v, is_causal=True, backend="torch") > 0).sum())
    causal = bench.PrefillShape("m", 2, 3, q_len=q_len, k_len=k_len, causal=True, head_dim=16)
    full = bench.PrefillShape("m", 2, 3, q_len=q_len, k_len=k_len, causal=False, head_dim=16)
    per_pair = 4 * 2 * 3 * 16  # QK^T and PV: 2 multiply-adds of head_dim per (query, key), per row and head
    assert causal.flops == per_pair * visible
    assert full.flops == per_pair * q_len * k_len
    # Negative control: a top-left mask (query i sees keys 0..i) keeps fewer pairs whenever keys
    # are cached ahead of the queries; the benchmark must not count that one.
    top_left = sum(min(k_len, i + 1) for i in range(q_len))
    assert (top_left == visible) == (q_len == k_len)


def test_markdown_table(bench):
    table = bench.markdown_table([{"a": "1", "b": "2"}, {"a": "3", "b": "4"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
    assert bench.markdown_table([]) == "(no rows)\n"
