"""The codec LM's token grammar, its KV-cached session, and generation through the shared loop."""

import numpy as np
import pytest
import torch

from burble.decoding.generate import generate
from burble.decoding.options import DecodingOptions
from burble.tts.model import (
    SLOT_DURATION,
    CodecLM,
    CodecLMConfig,
    CodecLMSession,
    slot_features,
    stream_slots,
    token_stream,
    unit_durations,
    unit_ids,
)

CONFIG = CodecLMConfig(num_phonemes=20, num_books=2, codebook_size=16, max_duration=5, width=32, heads=2,
                       decoder_layers=2, encoder_layers=1, ff=64, dropout=0.0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return CodecLM(CONFIG).eval()


def test_pads_fold_into_the_unit_before_them():
    ids = [1, 0, 7, 0, 9, 0, 2]  # ^ _ a _ b _ $
    assert unit_ids(ids) == [1, 7, 9, 2]
    assert unit_durations([1, 2, 3, 0, 0, 4, 1]) == [3, 3, 4, 1]


def test_stream_spells_durations_then_frames_and_the_grammar_reads_it_back():
    codes = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    stream = token_stream(CONFIG, [2, 0, 2], codes)
    d = CONFIG.duration_offset
    assert stream == [CONFIG.bos, d + 2, 1, 16 + 5, 2, 16 + 6, d + 0, d + 2, 3, 16 + 7, 4, 16 + 8, CONFIG.eos]
    slots = stream_slots(CONFIG, stream, num_units=3)
    assert len(slots) == len(stream) - 1
    # Position p predicts token p + 1: its slot allows exactly that token's kind.
    kinds = [SLOT_DURATION if t >= d and t < CONFIG.bos else (1 + t // 16 if t < d else CONFIG.num_books + 1) for t in stream[1:]]
    assert [s.slot for s in slots] == kinds
    assert [s.unit for s in slots] == [0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2]
    with pytest.raises(ValueError):
        token_stream(CONFIG, [2, 2], codes[:, :3])


def _one_full_pass(model, seed: int, durations: list[int], units: list[int]):
    """A random token stream of ``durations``, its session, and the logits of one pass over it."""
    codes = np.random.default_rng(seed).integers(0, 16, (2, sum(durations)))
    stream = token_stream(CONFIG, durations, codes)
    session = CodecLMSession(model, units)
    return stream, session, session.forward(torch.tensor([stream]), session.new_cache(1, 64))


def test_incremental_decoding_with_rollback_equals_one_full_pass(model):
    units = [1, 4, 5, 2]
    stream, session, full = _one_full_pass(model, 0, [1, 3, 0, 3], units)
    cache = session.new_cache(1, 64)
    pieces = [session.forward(torch.tensor([stream[:3]]), cache)]
    # A rejected draft: wrong tokens written, then rolled back, must leave no trace.
    session.forward(torch.tensor([[CONFIG.duration_offset + 5, 3, 20]]), cache)
    cache.truncate(3)
    for t in range(3, len(stream)):
        pieces.append(session.forward(torch.tensor([[stream[t]]]), cache))
    step = torch.cat(pieces, dim=1)
    finite = torch.isfinite(full)
    assert torch.equal(finite, torch.isfinite(step))
    assert torch.allclose(full[finite], step[finite], atol=1e-4)
    # Each position allows only its slot's tokens.
    for p, slot in enumerate(stream_slots(CONFIG, stream, len(units))):
        allowed = torch.isfinite(full[0, p]).nonzero().flatten()
        assert allowed.numel() == (CONFIG.max_duration + 1 if slot.slot == SLOT_DURATION else 1 if slot.slot == 3 else 16)


def test_draft_range_is_the_slot_the_logits_allow_even_after_a_rollback(model):
    stream, session, full = _one_full_pass(model, 1, [2, 0, 3, 1], [1, 4, 5, 2])
    cache = session.new_cache(1, 64)
    assert session.draft_range(stream[:1]) == (CONFIG.duration_offset, CONFIG.bos)  # BOS: a duration follows
    session.forward(torch.tensor([stream[:5]]), cache)
    # A rejected draft leaves slots of wrong tokens past the cache; they must not be read. Position
    # 6 spells unit 1's duration: 3 frames in the draft, 0 in the stream.
    assert stream[6] == CONFIG.duration_offset
    session.forward(torch.tensor([[stream[5], CONFIG.duration_offset + 3, 1]]), cache)
    cache.truncate(6)
    for end in range(6, len(stream)):
        lo, hi = session.draft_range(stream[:end])  # the verified prefix, then drafted tokens
        allowed = torch.isfinite(full[0, end - 1]).nonzero().flatten().tolist()
        assert allowed == list(range(lo, hi)), end
    # Negative control: the stale slot of position 6 (a code of the 3-frame unit) disagrees.
    stale = session._slots[0][6]
    assert session._ranges[stale.slot] != session.draft_range(stream[:7])


def test_draft_inputs_are_what_the_decoder_adds_up_at_those_positions(model):
    """What heads with ``decoder_inputs`` read: the token embedding plus the conditioning of each
    position, as the decoder's first step computes it, for verified and drafted tokens alike."""
    stream, session, _ = _one_full_pass(model, 2, [2, 1, 3, 1], [1, 4, 5, 2])
    seen = []
    original = model.decode

    def record(tokens, conditioning, positions, cache=None):
        seen.append(model.token_embedding(tokens) + conditioning)
        return original(tokens, conditioning, positions, cache)

    model.decode = record
    try:
        full_session = CodecLMSession(model, [1, 4, 5, 2])
        full_session.forward(torch.tensor([stream[:-1]]), full_session.new_cache(1, 64))
    finally:
        del model.decode
    decoder_inputs = seen[0][0]
    cache = session.new_cache(1, 64)
    session.forward(torch.tensor([stream[:5]]), cache)
    session.forward(torch.tensor([[stream[5], CONFIG.duration_offset + 3, 1]]), cache)  # a rejected draft
    cache.truncate(6)
    for end in range(7, len(stream)):
        for count in (1, 2, 3):
            got = session.draft_inputs(stream[:end], count)
            assert torch.allclose(got, decoder_inputs[end - count:end], atol=1e-6), (end, count)
    # Negative control: the bare embeddings are not what the decoder reads.
    assert not torch.allclose(model.token_embedding(torch.tensor(stream[6:9])), decoder_inputs[6:9])


def test_draft_inputs_follow_the_model_weights_from_one_session_to_the_next():
    """The host copy of the input embeddings is shared by a model's sessions: a later session of
    a model whose weights changed in between reads the new weights, not the stale copy."""
    torch.manual_seed(0)
    model = CodecLM(CONFIG).eval()
    stream = token_stream(CONFIG, [2, 1], np.zeros((2, 3), dtype=np.int64))
    before = CodecLMSession(model, [1, 2])
    before.new_cache(1, 64)
    first = before.draft_inputs(stream[:4], 2)
    with torch.no_grad():
        model.slot_embedding.weight.add_(1.0)
    after = CodecLMSession(model, [1, 2])
    after.new_cache(1, 64)
    assert torch.allclose(after.draft_inputs(stream[:4], 2), first + 1.0, atol=1e-5)


def test_generation_through_the_shared_loop_gives_a_well_formed_stream(model):
    units = [1, 4, 5, 6, 2]
    session = CodecLMSession(model, units)
    options = DecodingOptions(max_new_tokens=session.max_tokens, eos_token_id=CONFIG.eos, temperature=1.0)
    result = generate(session, torch.tensor([[CONFIG.bos]]), options, generator=torch.Generator().manual_seed(0))
    assert result.finished == [True]
    stream = [CONFIG.bos] + result.tokens[0] + [CONFIG.eos]
    durations = [t - CONFIG.duration_offset for t in stream if CONFIG.duration_offset <= t < CONFIG.bos]
    assert len(durations) == len(units)
    frames = [t for t in stream if t < CONFIG.duration_offset]
    assert len(frames) == CONFIG.num_books * sum(durations)
    assert len(stream) <= session.max_tokens


def test_teacher_forced_loss_learns_a_fixed_utterance():
    torch.manual_seed(0)
    net = CodecLM(CONFIG)
    codes = np.random.default_rng(1).integers(0, 16, (2, 6))
    units = torch.tensor([[1, 4, 5, 2]])
    stream = token_stream(CONFIG, [1, 2, 2, 1], codes)
    features = slot_features(CONFIG, stream_slots(CONFIG, stream, 4))[None]
    batch = dict(units=units, unit_padding=torch.zeros(1, 4, dtype=torch.bool), tokens=torch.tensor([stream[:-1]]),
                 features=features, targets=torch.tensor([stream[1:]]))
    optimizer = torch.optim.Adam(net.parameters(), 3e-3)
    first = None
    for _ in range(120):
        loss, _ = net.loss(**batch)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1 * first
    net.eval()
    session = CodecLMSession(net, units[0].tolist())
    greedy = generate(session, torch.tensor([[CONFIG.bos]]), DecodingOptions(max_new_tokens=session.max_tokens, eos_token_id=CONFIG.eos))
    assert [CONFIG.bos] + greedy.tokens[0] + [CONFIG.eos] == stream
