"""The streaming encoder equals the masked full-sequence encoder (fp32, every layer, tiny.en).

The reference (``encode_block_causal``) is one pass with the model's own convolutions over the whole
mel and an explicit block-causal mask; the streaming side feeds mel in irregular pieces, so chunk
boundaries, conv context, lookahead recomputation, the padding tail and trims are all exercised.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import burble
from burble.asr.frontend import log_mel_spectrogram
from burble.asr.whisper.block_causal import encode_block_causal
from burble.asr.whisper.streaming_encoder import (
    EncoderOutput,
    EncoderState,
    StreamingEncoder,
    StreamingEncoderOptions,
    blocks_in,
    conv_ready_frames,
    padding_encoding,
    tail_dtype,
)
from burble.testing.dev_audio import dev_audio_items, require_shared

# fp32 rounding only: slice-wise convolutions and unmasked vs masked SDPA sum in other orders
# (measured max |diff| ~1e-5 on activations of magnitude ~10). A bookkeeping error (a wrong
# position, a missing context frame, a cached lookahead frame) moves states by O(0.1-1).
ATOL = 1e-3  # on final states (|x| ~10)
REL = 1e-4  # of a layer's largest activation (at least 10)


@pytest.fixture(scope="module")
def model():
    # One thread: these tests compare numbers, not speed, and on a shared machine OpenMP's
    # spinning threads cost ~4x the CPU time (measured: 81 s vs 17 s for this file).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield burble.load_model("tiny.en").model.eval()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def real_mel() -> torch.Tensor:
    require_shared()
    item = min((i for i in dev_audio_items("short")), key=lambda i: abs(i.duration_s - 10.0))
    return log_mel_spectrogram(item.load())


def _pieces(total: int, seed: int, largest: int = 90) -> list[tuple[int, int]]:
    """Irregular ``[start, end)`` spans covering ``total`` mel frames (odd sizes, 1-frame pieces)."""
    generator = torch.Generator().manual_seed(seed)
    spans, start = [], 0
    while start < total:
        size = int(torch.randint(1, largest, (1,), generator=generator))
        spans.append((start, min(total, start + size)))
        start += size
    return spans


def _stream(encoder: StreamingEncoder, mel: torch.Tensor, seed: int = 1) -> tuple[EncoderState, EncoderOutput]:
    state = encoder.new_state(batch_size=1 if mel.dim() == 2 else mel.shape[0])
    outputs = [encoder.step(state, mel[..., a:b], return_layers=True) for a, b in _pieces(mel.shape[-1], seed)]
    for previous, current in zip(outputs, outputs[1:]):
        assert current.start == previous.start + previous.states.shape[1]  # no gaps, no repeats
    layers = [torch.cat([o.layers[i] for o in outputs], dim=1) for i in range(len(outputs[0].layers))]
    joined = EncoderOutput(states=torch.cat([o.states for o in outputs], dim=1), start=0, layers=layers)
    return state, joined


def _assert_layers(streamed: EncoderOutput, reference: tuple[torch.Tensor, list[torch.Tensor]], begin: int, label: str) -> None:
    """Every block's output and the final states match the reference over the streamed span.

    The bound is relative to each layer's largest activation: Whisper's last block carries a few
    outlier channels in the hundreds-thousands on padding frames, where fp32 spacing alone is ~1e-4.
    """
    ref_states, ref_layers = reference
    n = streamed.states.shape[1]
    pairs = [(s, r[:, begin : begin + n]) for s, r in zip(streamed.layers, ref_layers)]
    pairs.append((streamed.states, ref_states[:, begin : begin + n]))
    diffs = [float((s - r).abs().max()) for s, r in pairs]
    scales = [max(10.0, float(r.abs().max())) for _, r in pairs]
    print(f"{label}: {n} frames, max|diff| per layer {['%.1e' % d for d in diffs]} (scale {['%.0f' % s for s in scales]})")
    assert all(d <= REL * s for d, s in zip(diffs, scales)), f"{label}: {diffs}"


def test_one_chunk_reference_is_whisper(model):
    mel = torch.randn(1, 80, 3000)
    assert torch.equal(encode_block_causal(model, mel, chunk=1500), model.encoder(mel))


@pytest.mark.parametrize("chunk,lookahead", [(50, 0), (50, 25), (25, 12), (16, 24)])
def test_streaming_equals_masked_full_random(model, chunk, lookahead):
    mel = torch.randn(80, 1203)
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=chunk, lookahead_frames=lookahead))
    state, out = _stream(encoder, mel)
    # Every chunk whose lookahead is conv-ready is final, and no other.
    ready = conv_ready_frames(mel.shape[-1])
    assert state.n_final == (ready - lookahead) // chunk * chunk
    reference = encode_block_causal(model, mel, chunk, lookahead, return_layers=True)
    _assert_layers(out, reference, 0, f"random C={chunk} R={lookahead}")
    torch.testing.assert_close(state.final_states(), out.states, atol=0, rtol=0)


def test_lookahead_changes_states(model):
    """Guards the reference itself: lookahead must reach the states (and the mask must differ)."""
    mel = torch.randn(80, 400)
    plain = encode_block_causal(model, mel, 50, 0)
    ahead = encode_block_causal(model, mel, 50, 25)
    last_of_chunk = torch.arange(49, 200, 50)
    assert float((plain[:, last_of_chunk] - ahead[:, last_of_chunk]).abs().max()) > 0.05


@pytest.mark.parametrize("chunk,lookahead", [(50, 0), (50, 24), (25, 12)])
def test_streaming_equals_masked_full_real_audio(model, real_mel, chunk, lookahead):
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=chunk, lookahead_frames=lookahead))
    _, out = _stream(encoder, real_mel, seed=chunk + lookahead)
    reference = encode_block_causal(model, real_mel, chunk, lookahead, return_layers=True)
    _assert_layers(out, reference, 0, f"real C={chunk} R={lookahead}")


@pytest.mark.parametrize("chunk,lookahead,tail", [(50, 0, 256), (50, 25, 64), (25, 12, "full")])
def test_content_plus_tail_equals_masked_full(model, real_mel, chunk, lookahead, tail):
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=chunk, lookahead_frames=lookahead))
    mel = real_mel[:, :777]  # odd: the last received frame's conv reads Whisper's zero mel
    state, _ = _stream(encoder, mel)
    features = encoder.audio_features(state, tail)
    received = (mel.shape[-1] + 1) // 2
    pad = 1500 - received if tail == "full" else tail
    assert features.shape[1] == received + pad
    # The reference: the mel followed by zero mel (Whisper's layout), the tail as one last block.
    padded = F.pad(mel, (0, 2 * (received + pad) - mel.shape[-1]))
    reference = encode_block_causal(model, padded, chunk, lookahead, tail_from=state.n_final, return_layers=True)
    torch.testing.assert_close(features, reference[0], atol=ATOL, rtol=0)
    _assert_layers(encoder.padding_tail(state, tail, return_layers=True), reference, state.n_final, f"tail C={chunk} R={lookahead} pad={pad}")
    # Nothing of the tail was cached: streaming on still matches.
    more = encoder.step(state, real_mel[:, 777:900], return_layers=True)
    _assert_layers(more, encode_block_causal(model, real_mel[:, :900], chunk, lookahead, return_layers=True), more.start, "after tail")


def test_a_bfloat16_tail_stays_close_to_the_float32_one(model, real_mel):
    exact = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50))
    low = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50, tail_precision="bfloat16"))
    assert low.tail_dtype == torch.bfloat16 and exact.tail_dtype == torch.float32
    state, _ = _stream(exact, real_mel[:, :777])
    reference = exact.padding_tail(state, 256).states
    tail = low.padding_tail(state, 256).states
    assert tail.dtype == torch.float32 and tail.shape == reference.shape
    cosine = F.cosine_similarity(tail, reference, dim=-1)
    print(f"bfloat16 tail: cosine to float32 min {float(cosine.min()):.4f} mean {float(cosine.mean()):.4f}")
    assert float(cosine.min()) > 0.995
    assert not torch.equal(tail, reference)  # control: the bfloat16 blocks did run
    # The stream's own content and cache are untouched: streaming on matches the exact encoder.
    more = exact.step(state, real_mel[:, 777:900], return_layers=True)
    _assert_layers(more, encode_block_causal(model, real_mel[:, :900], 50, 0, return_layers=True), more.start, "after a bf16 tail")
    # Every stream of a model shares one bfloat16 copy of the blocks; the model's dtype needs none.
    assert blocks_in(model.encoder, torch.bfloat16) is blocks_in(model.encoder, torch.bfloat16)
    assert blocks_in(model.encoder, torch.float32) is model.encoder.blocks


def test_a_tail_beyond_its_near_frames_is_the_shared_encoding_of_padding_alone(model, real_mel):
    exact = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50, tail_frames=256))
    split = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50, tail_frames=256, near_tail_frames=64))
    state, _ = _stream(exact, real_mel[:, :777])
    received = state.n_received
    tail = split.padding_tail(state)
    assert tail.shared_frames == 192 and tail.states.shape[1] == received - state.n_final + 256
    near = tail.states[:, : -tail.shared_frames]
    # The near part: the stream's pending frames and 64 padding frames, encoded against the cache,
    # each other and the shared padding's keys/values of the far frames. That brings it closer to
    # the tail encoded whole than a 64-frame tail alone (the control).
    whole = exact.padding_tail(state).states
    alone = exact.padding_tail(state, 64).states
    to_whole = F.cosine_similarity(near, whole[:, : near.shape[1]], dim=-1)
    alone_to_whole = F.cosine_similarity(alone, whole[:, : near.shape[1]], dim=-1)
    print(f"near part vs whole tail: cosine mean {float(to_whole.mean()):.4f} min {float(to_whole.min()):.4f};"
          f" a 64-frame tail alone: mean {float(alone_to_whole.mean()):.4f} min {float(alone_to_whole.min()):.4f}")
    assert float(to_whole.mean()) > float(alone_to_whole.mean()) and float(to_whole.min()) > float(alone_to_whole.min())
    # The far part: the padding encoded alone (a stream that received nothing), at the same positions.
    shared = padding_encoding(split).states
    alone = exact.padding_tail(exact.new_state(), "full").states
    assert shared.shape == (1, 1500, alone.shape[2]) and torch.allclose(shared, alone, atol=1e-4)
    assert torch.equal(tail.states[:, -tail.shared_frames :], shared[:, received + 64 : received + 256])
    assert padding_encoding(StreamingEncoder(model, split.options)).states is shared  # once per model, shared
    # Control: it is not the tail encoded against the stream, which tells the far frames apart.
    cosine = F.cosine_similarity(tail.states[:, -tail.shared_frames :], whole[:, -tail.shared_frames :], dim=-1)
    print(f"shared far padding vs encoded: cosine mean {float(cosine.mean()):.3f} min {float(cosine.min()):.3f}")
    assert float(cosine.min()) < 0.99
    with pytest.raises(ValueError):
        split.padding_tail(state, return_layers=True)  # the shared states keep no layers
    with pytest.raises(ValueError):
        StreamingEncoder(model, StreamingEncoderOptions(near_tail_frames=-1))


def test_auto_tail_precision_is_bfloat16_only_where_it_is_native(monkeypatch):
    import burble.asr.whisper.streaming_encoder as streaming_encoder

    cpu = torch.device("cpu")
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(streaming_encoder, "native_bfloat16", lambda device, native=native: native)
        assert tail_dtype("auto", torch.float32, cpu) == expected
        assert tail_dtype("auto", torch.float16, cpu) == torch.float16  # only a float32 model changes
        assert tail_dtype(None, torch.float32, cpu) == torch.float32
    assert tail_dtype("bf16", torch.float32, cpu) == torch.bfloat16


def test_trim_equals_fresh_stream_from_the_cut(model, real_mel):
    chunk, lookahead, cut = 50, 12, 137  # a cut off the chunk grid
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=chunk, lookahead_frames=lookahead))
    state = encoder.new_state()
    for a, b in _pieces(600, seed=3):
        encoder.step(state, real_mel[:, a:b])
    encoder.trim(state, cut)
    assert state.offset == cut
    rest = real_mel[:, 600:]
    outputs = [encoder.step(state, rest[:, a:b], return_layers=True) for a, b in _pieces(rest.shape[-1], seed=4)]
    kept = real_mel[:, 2 * cut :]
    reference = encode_block_causal(model, kept, chunk, lookahead, return_layers=True)
    # The frames re-encoded by the trim, and those streamed after it.
    torch.testing.assert_close(state.final_states(), reference[0][:, : state.n_final], atol=ATOL, rtol=0)
    first = outputs[0].start
    joined = EncoderOutput(
        states=torch.cat([o.states for o in outputs], 1),
        start=first,
        layers=[torch.cat([o.layers[i] for o in outputs], 1) for i in range(len(outputs[0].layers))],
    )
    _assert_layers(joined, reference, first, "after trim at 137")
    assert state.n_final == (conv_ready_frames(kept.shape[-1]) - lookahead) // chunk * chunk


def test_automatic_trims_keep_positions_in_range(model):
    """A long stream trims itself: positions stay below the budget, states stay exact."""
    options = StreamingEncoderOptions(chunk_frames=25, lookahead_frames=12, tail_frames=64, max_frames=400, trim_keep_frames=100)
    encoder = StreamingEncoder(model, options)
    mel = torch.randn(80, 2001)
    state = encoder.new_state()
    trims = []
    for index, (a, b) in enumerate(_pieces(mel.shape[-1], seed=5, largest=120)):
        out = encoder.step(state, mel[:, a:b])
        if out.trimmed:
            trims.append(out.trimmed)
            assert out.trimmed % options.chunk_frames == 0
        if index % 6 == 0:
            assert encoder.audio_features(state).shape[1] <= options.max_frames
    assert len(trims) >= 3 and sum(trims) == state.offset
    assert state.peak_position < options.max_frames
    kept = mel[:, 2 * state.offset :]
    reference = encode_block_causal(model, kept, 25, 12)
    torch.testing.assert_close(state.final_states(), reference[:, : state.n_final], atol=ATOL, rtol=0)


def test_default_budget_over_a_long_stream(model):
    """34 s of audio in 1 s pieces with the default 1500 positions: it trims, never past 1499."""
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50, lookahead_frames=25))
    state = encoder.new_state()
    mel = torch.randn(80, 3400)
    for start in range(0, mel.shape[-1], 100):
        encoder.step(state, mel[:, start : start + 100])
        assert state.n_received + encoder.options.tail_frames <= 1500
    features = encoder.audio_features(state)
    assert state.offset > 0 and state.peak_position <= 1499 and features.shape[1] <= 1500
    with pytest.raises(ValueError):
        encoder.padding_tail(state, 1500)


def test_lockstep_batch_equals_single_streams(model):
    mels = torch.randn(2, 80, 500)
    encoder = StreamingEncoder(model, StreamingEncoderOptions(chunk_frames=50, lookahead_frames=12))
    batch_state, batch_out = _stream(encoder, mels)
    for row in range(2):
        _, single = _stream(encoder, mels[row])
        torch.testing.assert_close(batch_out.states[row : row + 1], single.states, atol=ATOL, rtol=0)
    assert encoder.audio_features(batch_state).shape[0] == 2


def test_options_and_inputs_are_checked(model):
    assert StreamingEncoderOptions.from_seconds(1.0, 0.48) == StreamingEncoderOptions(chunk_frames=50, lookahead_frames=24)
    with pytest.raises(ValueError):
        StreamingEncoder(model, StreamingEncoderOptions(max_frames=1501))
    with pytest.raises(ValueError):
        StreamingEncoder(model, StreamingEncoderOptions(trim_keep_frames=1200))
    encoder = StreamingEncoder(model)
    with pytest.raises(ValueError):
        encoder.step(encoder.new_state(), torch.zeros(128, 10))
    with pytest.raises(ValueError):
        encoder.trim(encoder.new_state(), 1)


# -- a larger first chunk (utterance starts) --------------------------------------------------------


@pytest.mark.parametrize("first,chunk,lookahead", [(150, 50, 25), (75, 50, 0), (30, 50, 12)])
def test_first_chunk_streaming_equals_masked_full(model, real_mel, first, chunk, lookahead):
    options = StreamingEncoderOptions(chunk_frames=chunk, lookahead_frames=lookahead, first_chunk_frames=first)
    encoder = StreamingEncoder(model, options)
    state, out = _stream(encoder, real_mel, seed=first)
    ready = conv_ready_frames(real_mel.shape[-1])
    assert state.n_final == first + (ready - lookahead - first) // chunk * chunk
    reference = encode_block_causal(model, real_mel, chunk, lookahead, first_chunk=first, return_layers=True)
    _assert_layers(out, reference, 0, f"first={first} C={chunk} R={lookahead}")
    # With the tail as one last block after the content.
    mel = real_mel[:, :777]
    state, _ = _stream(encoder, mel)
    received = (mel.shape[-1] + 1) // 2
    padded = F.pad(mel, (0, 2 * (received + 64) - mel.shape[-1]))
    tail_reference = encode_block_causal(model, padded, chunk, lookahead, tail_from=state.n_final, first_chunk=first)
    torch.testing.assert_close(encoder.audio_features(state, 64), tail_reference, atol=ATOL, rtol=0)


def test_first_chunk_applies_again_after_a_trim(model, real_mel):
    options = StreamingEncoderOptions(chunk_frames=50, lookahead_frames=12, first_chunk_frames=120)
    encoder = StreamingEncoder(model, options)
    state = encoder.new_state()
    for a, b in _pieces(700, seed=5):
        encoder.step(state, real_mel[:, a:b])
    encoder.trim(state, 101)
    kept = real_mel[:, 202:700]
    reference = encode_block_causal(model, kept, 50, 12, first_chunk=120)
    assert state.n_final == 120 + (conv_ready_frames(kept.shape[-1]) - 12 - 120) // 50 * 50
    torch.testing.assert_close(state.final_states(), reference[:, : state.n_final], atol=ATOL, rtol=0)


def test_first_chunk_changes_the_first_states(model, real_mel):
    """Guards the reference: a first chunk of 150 must differ from three chunks of 50 in its early frames."""
    plain = encode_block_causal(model, real_mel[:, :600], 50, 0)
    first = encode_block_causal(model, real_mel[:, :600], 50, 0, first_chunk=150)
    assert float((plain[:, :100] - first[:, :100]).abs().max()) > 0.05
    with pytest.raises(ValueError):
        StreamingEncoder(model, StreamingEncoderOptions(first_chunk_frames=0))


FRESH_STATES = """
import sys
import torch
import burble
from burble.asr.whisper.streaming_encoder import StreamingEncoder, StreamingEncoderOptions
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
torch.set_num_threads(1)
encoder = StreamingEncoder(burble.load_model("tiny.en").model, StreamingEncoderOptions())
states, base = [], rss()
for _ in range(20):
    state = encoder.new_state()
    if sys.argv[1] == "written":  # every position written: the negative control
        for t in (state.mel, state.content, *state.cache.keys, *state.cache.values):
            t.zero_()
    states.append(state)
storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
            for s in states for t in (s.mel, s.content, *s.cache.keys, *s.cache.values)}
print((rss() - base) / (1 << 20), sum(storages.values()) / (1 << 20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["fresh", "written"])
def test_a_new_state_holds_every_position_but_only_written_pages_are_resident(mode):
    """A state's storage is allocated for all 1500 frames at once, uninitialised, and under the
    server's 1 MiB mmap threshold each block is its own mapping: 20 fresh tiny.en states (~430 MiB
    of storage) add almost no resident memory, so a stream holds what it has written (issue 14's
    memory per stream). Negative control: the same states with every position written are resident."""
    env = {"PATH": "/usr/bin:/bin", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # as `burble serve` sets it
    out = subprocess.run([sys.executable, "-c", FRESH_STATES, mode], capture_output=True, text=True, env=env, check=True)
    resident, allocated = (float(x) for x in out.stdout.split())
    assert allocated > 300
    if mode == "fresh":
        assert resident < 10
    else:
        assert resident > 0.8 * allocated
