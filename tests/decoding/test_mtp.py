"""MTP draft heads: the drafter reads the right hidden state, decoding stays lossless, files round-trip."""

from __future__ import annotations

import pytest
import torch

from burble.decoding.generate import generate
from burble.decoding.mtp import MTPConfig, MTPDrafter, MTPHeads, TreeShape
from burble.decoding.options import DecodingOptions
from burble.testing.toy_models import HiddenTableModel

V = 8


def oracle_heads(model: HiddenTableModel, num_heads: int = 3, steps: int = 2) -> MTPHeads:
    """Heads whose first head drafts greedy's token ``steps`` positions after the hidden state's
    (2 is right: the state of token ``t`` already decides ``t + 1``, the verified token).

    The heads' MLPs start as the identity (zero ``down`` layer), so every head's state is the
    one-hot hidden state of token ``a`` and the projection row set here decides the draft.
    """
    heads = MTPHeads(MTPConfig(hidden_size=V, num_heads=num_heads, inner_size=4, draft_vocab_size=V), torch.arange(V))
    with torch.no_grad():
        heads.projection.weight.zero_()
        for a in range(V):
            b = a
            for _ in range(steps):
                b = model.greedy_next(b)
            heads.projection.weight[b, a] = 1.0
    return heads


def random_heads(seed: int, num_heads: int = 4, memory_heads: int = 0) -> MTPHeads:
    torch.manual_seed(seed)
    config = MTPConfig(hidden_size=V, num_heads=num_heads, inner_size=16, draft_vocab_size=6, memory_heads=memory_heads)
    heads = MTPHeads(config, torch.randperm(V)[:6])
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_()
    return heads


OPTIONS = DecodingOptions(max_new_tokens=40, draft_length=1)


def test_oracle_heads_are_always_accepted():
    model = HiddenTableModel(V, seed=2)  # greedy cycles through 4 tokens
    prompt = torch.tensor([[1, 2]])
    plain = generate(model, prompt, OPTIONS)
    result = generate(model, prompt, OPTIONS, drafter=MTPDrafter(model, oracle_heads(model)))
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0 and result.stats.accepted == result.stats.drafted
    # Two tokens per pass: about half the passes of plain decoding.
    assert result.stats.target_passes <= plain.stats.target_passes // 2 + 2


@pytest.mark.parametrize("steps", [1, 3])
def test_heads_off_by_one_position_are_rejected(steps: int):
    """Negative control: the same oracle shifted by one position (a drafter or a training target
    misaligned by one) is rejected, so the test above can fail."""
    model = HiddenTableModel(V, seed=2)  # greedy cycles through 4 tokens
    prompt = torch.tensor([[1, 2]])
    result = generate(model, prompt, OPTIONS, drafter=MTPDrafter(model, oracle_heads(model, steps=steps)))
    assert result.stats.drafted > 0
    assert result.stats.accepted < result.stats.drafted / 2


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("draft_length", [1, 3, 6])
def test_any_heads_give_the_plain_greedy_tokens(seed: int, draft_length: int):
    model = HiddenTableModel(V, seed=seed)
    options = DecodingOptions(max_new_tokens=30, draft_length=draft_length)
    prompt = torch.tensor([[seed % V]])  # a one-token prompt: the first pass has no hidden state to draft from
    plain = generate(model, prompt, options)
    result = generate(model, prompt, options, drafter=MTPDrafter(model, random_heads(seed)))
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0


def test_chain_draft_stops_after_the_end_token():
    model = HiddenTableModel(V, seed=0)
    heads = oracle_heads(model, num_heads=4)
    with torch.no_grad():
        heads.projection.weight.zero_()
        heads.projection.weight[5, :] = 1.0  # every head drafts token 5
    hidden = torch.nn.functional.one_hot(torch.tensor(2), V).float()
    assert heads.draft(hidden, 1, model.embed_tokens, 4) == [5, 5, 5, 5]
    assert heads.draft(hidden, 1, model.embed_tokens, 4, stop_token=5) == [5]
    assert heads.draft(hidden, 1, model.embed_tokens, 9) == [5, 5, 5, 5]  # at most num_heads


def _sampling_rule(logits: torch.Tensor, prefix) -> torch.Tensor:
    return torch.softmax(logits / 0.7, dim=-1)


def _sampled_draft(seed: int, k: int = 4):
    model = HiddenTableModel(V, seed=1)
    heads = random_heads(0)
    with torch.no_grad():
        heads.projection.weight.mul_(0.1)  # random heads are near one-hot; flatter q to sample from
    model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))  # the pass whose last state drafts
    drafter = MTPDrafter(model, heads, sample=True, generator=torch.Generator().manual_seed(seed))
    return model, heads, drafter.propose([1, 2, 3], k, _sampling_rule)


def test_sampled_drafts_hand_their_q_to_the_verifier():
    model, heads, draft = _sampled_draft(seed=0)
    assert len(draft.tokens) == 4 and draft.probs is not None and draft.probs.shape == (4, V)
    allowed = heads.draft_ids.tolist()
    assert set(draft.tokens) <= set(allowed)
    assert torch.allclose(draft.probs.sum(-1), torch.ones(4))
    outside = [t for t in range(V) if t not in allowed]
    assert float(draft.probs[:, outside].abs().max()) == 0.0  # q lives on the draft vocabulary
    # q of the first token is head 0's distribution after the verified token 3, read from the
    # state of token 2 (the last position of the pass), through the target's rule.
    with torch.no_grad():
        logits = heads.projection(heads.heads[0](model.embed_tokens(torch.tensor([2])), model.embed_tokens(torch.tensor([[3]]))))[0]
    full = torch.full((V,), float("-inf"))
    full[heads.draft_ids] = logits
    assert torch.allclose(draft.probs[0], _sampling_rule(full, None), atol=1e-6)
    # Off-by-one control: the state of token 3 (or of token 1) would give another q.
    for wrong in (1, 3):
        with torch.no_grad():
            other = heads.projection(heads.heads[0](model.embed_tokens(torch.tensor([wrong])), model.embed_tokens(torch.tensor([[3]]))))[0]
        full[heads.draft_ids] = other
        assert not torch.allclose(draft.probs[0], _sampling_rule(full, None), atol=1e-3)


def test_a_drafted_chain_is_what_the_training_forward_picks_at_every_depth():
    """Drafting lays ``[h; e_0 .. e_i]`` out in one buffer; head ``i`` must read exactly what the
    teacher-forced forward (training) gives it: the verified token, then the heads' own picks."""
    model = HiddenTableModel(V, seed=3)
    model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))
    hidden = model.embed_tokens(torch.tensor([2]))  # the state of token 2 (HiddenTableModel: its embedding)
    shifted_differs = False
    for seed in range(4):
        heads = random_heads(seed, num_heads=4)
        draft = MTPDrafter(model, heads).propose([1, 2, 3], 4, None).tokens
        assert len(draft) == 4
        chain = [3] + draft
        with torch.no_grad():
            picks = heads(hidden, model.embed_tokens(torch.tensor([chain[:4]])))[:, 0].argmax(-1)
            # Control: the context one token off (what a misplaced buffer slot would feed).
            shifted = heads(hidden, model.embed_tokens(torch.tensor([chain[1:5]])))[:, 0].argmax(-1)
        assert heads.draft_ids[picks].tolist() == draft
        shifted_differs |= heads.draft_ids[shifted].tolist() != draft
    assert shifted_differs


class _PlainRule:
    """``_sampling_rule`` declaring itself a plain temperature (as ``generate.TargetRuleOf`` does)."""

    def __init__(self, temperature: float = 0.7) -> None:
        self.plain_temperature = temperature

    def __call__(self, logits: torch.Tensor, prefix) -> torch.Tensor:
        return _sampling_rule(logits, prefix)


def test_a_plain_temperature_rule_gives_the_drafts_of_the_full_rule():
    """With a plain-temperature rule the drafter computes q on the rows it scored: the same drafts
    and the same q as the rule over the whole vocabulary (rows sorted by token id, as
    ``MTPHeads.load`` keeps them, so one uniform draw picks the same token from either). Control:
    a rule that misstates its temperature gives another q, so the comparison can fail."""
    model = HiddenTableModel(V, seed=1)
    heads = random_heads(0)
    with torch.no_grad():
        heads.projection.weight.mul_(0.1)
        order = torch.argsort(heads.draft_ids)
        heads.draft_ids.copy_(heads.draft_ids[order])
        heads.projection.weight.copy_(heads.projection.weight[order])
    model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))

    def propose(rule, seed: int):
        drafter = MTPDrafter(model, heads, sample=True, generator=torch.Generator().manual_seed(seed))
        return drafter.propose([1, 2, 3], 4, rule)

    for seed in range(5):
        full, plain = propose(_sampling_rule, seed), propose(_PlainRule(), seed)
        assert plain.tokens == full.tokens
        assert torch.allclose(plain.probs, full.probs, atol=1e-6)
    misstated = propose(_PlainRule(temperature=1.0), 0)
    assert not torch.allclose(misstated.probs[0], propose(_sampling_rule, 0).probs[0], atol=1e-3)


def test_sampled_drafts_follow_the_seed_and_vary_with_it():
    drafts = {seed: tuple(_sampled_draft(seed)[2].tokens) for seed in range(12)}
    assert tuple(_sampled_draft(3)[2].tokens) == drafts[3]
    assert len(set(drafts.values())) > 3  # sampled, not the argmax chain


def test_sampled_drafts_need_a_sampling_rule():
    model = HiddenTableModel(V, seed=1)
    model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))
    drafter = MTPDrafter(model, random_heads(0), sample=True)
    with pytest.raises(ValueError, match="sampling decode"):
        drafter.propose([1, 2, 3], 3, lambda logits, prefix: logits)  # a greedy rule: processed logits


class _ParityGrammarModel(HiddenTableModel):
    """Allows tokens 0-3 after an even-length sequence and 4-7 after an odd one."""

    def draft_range(self, tokens):
        return (0, 4) if len(tokens) % 2 == 0 else (4, 8)


def full_vocabulary_heads(seed: int, projection_scale: float = 1.0) -> MTPHeads:
    """Random heads over the whole vocabulary (draft ids = target ids)."""
    heads = MTPHeads(MTPConfig(hidden_size=V, num_heads=4, inner_size=16, draft_vocab_size=V), torch.arange(V))
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            p.normal_()
        heads.projection.weight.mul_(projection_scale)
    return heads


@pytest.mark.parametrize("seed", range(4))
def test_sampled_drafts_stay_in_the_range_the_grammar_allows(seed: int):
    heads = full_vocabulary_heads(seed, projection_scale=0.1)
    outside_mass = {}
    for model in (_ParityGrammarModel(V, seed=1), HiddenTableModel(V, seed=1)):
        model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))
        drafter = MTPDrafter(model, heads, sample=True, generator=torch.Generator().manual_seed(seed))
        draft = drafter.propose([1, 2, 3], 4, _sampling_rule)
        assert len(draft.tokens) == 4
        masses = []
        for j, token in enumerate(draft.tokens):
            lo, hi = (0, 4) if (3 + j) % 2 == 0 else (4, 8)  # the sequence so far: 3 tokens, then j drafts
            masses.append(1.0 - float(draft.probs[j, lo:hi].sum()))
            if isinstance(model, _ParityGrammarModel):
                assert lo <= token < hi
        outside_mass[type(model).__name__] = max(masses)
    assert outside_mass["_ParityGrammarModel"] < 1e-6
    assert outside_mass["HiddenTableModel"] > 0.05  # control: without the grammar, q strays


@pytest.mark.parametrize("seed", range(4))
def test_greedy_drafts_take_the_argmax_among_the_ids_the_grammar_allows(seed: int):
    heads = full_vocabulary_heads(seed)
    strays = {}
    for model in (_ParityGrammarModel(V, seed=1), HiddenTableModel(V, seed=1)):
        model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))
        tokens = []
        for start in range(V):  # drafts after several verified tokens
            tokens += MTPDrafter(model, heads).propose([1, 2, start], 4, _sampling_rule).tokens
        strays[type(model).__name__] = sum(
            not ((0 <= t < 4) if j % 2 == 1 else (4 <= t < 8)) for j, t in enumerate(tokens))  # 3 tokens, then j drafts
    assert strays["_ParityGrammarModel"] == 0
    assert strays["HiddenTableModel"] > 0  # control: without the grammar, the argmax strays


class _InputsModel(_ParityGrammarModel):
    """Decoder inputs that depend on the position: the embedding of the token, shifted by its index."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[list[int], int]] = []

    def draft_inputs(self, tokens, count):
        self.asked.append((list(tokens), count))
        ids = torch.tensor(list(tokens[len(tokens) - count:]))
        return self.embed_tokens(ids) + torch.arange(len(tokens) - count, len(tokens))[:, None].float()


def test_heads_with_decoder_inputs_read_each_chain_token_at_its_position():
    torch.manual_seed(0)
    heads = MTPHeads(MTPConfig(hidden_size=V, num_heads=3, inner_size=16, draft_vocab_size=V, decoder_inputs=True),
                     torch.arange(V))
    model = _InputsModel(V, seed=1)
    model.forward(torch.tensor([[1, 2]]), model.new_cache(1, 16))
    draft = MTPDrafter(model, heads).propose([1, 2, 3], 3, _sampling_rule).tokens
    assert len(draft) == 3
    # The verified token at position 2, then each drafted token at the next position.
    assert model.asked == [([1, 2, 3], 1), ([1, 2, 3, draft[0]], 1), ([1, 2, 3, draft[0], draft[1]], 1)]
    plain = HiddenTableModel(V, seed=1)
    plain.forward(torch.tensor([[1, 2]]), plain.new_cache(1, 16))
    with pytest.raises(ValueError, match="draft_inputs"):
        MTPDrafter(plain, heads).propose([1, 2, 3], 3, _sampling_rule)


def test_draft_rows_of_an_id_range_need_sorted_draft_ids():
    heads = random_heads(0)  # draft ids in random order: every row
    assert heads.rows_of_ids((2, 6)) == (0, 6)
    ordered = MTPHeads(heads.config, torch.sort(heads.draft_ids).values)
    lo, hi = ordered.rows_of_ids((2, 6))
    assert ordered.draft_ids[lo:hi].tolist() == [t for t in sorted(heads.draft_ids.tolist()) if 2 <= t < 6]
    assert ordered.rows_of_ids(None) == (0, 6)


def test_heads_round_trip_through_safetensors(tmp_path):
    heads = random_heads(0)
    path = tmp_path / "heads.safetensors"
    heads.save(path)
    loaded = MTPHeads.load(path)
    assert loaded.config == heads.config
    # Loading sorts the draft vocabulary by target id (a grammar's id range is then a row range).
    order = torch.argsort(heads.draft_ids)
    assert torch.equal(loaded.draft_ids, heads.draft_ids[order])
    hidden, emb = torch.randn(5, V), torch.randn(5, 4, V)
    # Stored in fp16: the reloaded heads agree to fp16 rounding.
    torch.testing.assert_close(loaded(hidden, emb), heads(hidden, emb)[..., order], atol=0.05, rtol=0.01)


def test_a_file_without_heads_metadata_is_refused(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(path))
    with pytest.raises(ValueError, match="not an MTP heads file"):
        MTPHeads.load(path)


TREES = [
    TreeShape(top_k=2, beam=2, max_nodes=6),
    TreeShape(top_k=3, beam=1, max_nodes=4, min_probability=0.05),
    TreeShape(paths=((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))),
]


@pytest.mark.parametrize("shape", TREES, ids=["dynamic", "dynamic-thin", "static"])
@pytest.mark.parametrize("seed", range(3))
def test_tree_drafts_give_the_plain_greedy_tokens(shape: TreeShape, seed: int):
    model = HiddenTableModel(V, seed=seed)
    options = DecodingOptions(max_new_tokens=30, draft_length=3)
    prompt = torch.tensor([[seed % V, 1]])
    plain = generate(model, prompt, options)
    drafter = MTPDrafter(model, random_heads(seed), tree=shape)
    result = generate(model, prompt, options, drafter=drafter)
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0


def test_oracle_tree_finds_the_accepted_node_row():
    """After a tree pass the drafter reads the last accepted node's state (not the chain row):
    with oracle heads every pass accepts its first-level node."""
    model = HiddenTableModel(V, seed=2)
    prompt = torch.tensor([[1, 2]])
    options = DecodingOptions(max_new_tokens=40, draft_length=1)
    # top_k 3 at depth 1: the oracle token plus two decoys, in probability order.
    drafter = MTPDrafter(model, oracle_heads(model), tree=TreeShape(top_k=3, beam=1, max_nodes=3))
    plain = generate(model, prompt, options)
    result = generate(model, prompt, options, drafter=drafter)
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0 and result.stats.accepted == result.stats.drafted


def test_dynamic_tree_keeps_the_most_probable_nodes():
    heads = random_heads(1, num_heads=3)
    model = HiddenTableModel(V, seed=1)
    hidden = torch.randn(V)
    tokens, parents = heads.draft_tree(hidden, 2, model.embed_tokens, 3, TreeShape(top_k=2, beam=2, max_nodes=5))
    assert len(tokens) == 5
    assert all(-1 <= p < i for i, p in enumerate(parents))
    assert parents[0] == -1
    thin, thin_parents = heads.draft_tree(hidden, 2, model.embed_tokens, 3, TreeShape(top_k=1, beam=1, max_nodes=8))
    assert thin_parents == [-1, 0, 1] and thin == heads.draft(hidden, 2, model.embed_tokens, 3)


@pytest.mark.parametrize("shape", [None, TREES[0]], ids=["chain", "tree"])
def test_memory_attending_heads_give_the_plain_greedy_tokens(shape):
    model = HiddenTableModel(V, seed=4)
    options = DecodingOptions(max_new_tokens=30, draft_length=3)
    prompt = torch.tensor([[3, 1]])
    plain = generate(model, prompt, options)
    result = generate(model, prompt, options, drafter=MTPDrafter(model, random_heads(4, memory_heads=2), tree=shape))
    assert result.tokens == plain.tokens and result.stats.drafted > 0


def test_training_segments_read_their_own_memory():
    """A batch of rows from several clips (segments) equals each clip's rows run alone."""
    heads = random_heads(5, memory_heads=2)
    gen = torch.Generator().manual_seed(0)
    keys, values = torch.randn(2, 2, 5, V // 2, generator=gen), torch.randn(2, 2, 5, V // 2, generator=gen)
    hidden, emb = torch.randn(5, V, generator=gen), torch.randn(5, 4, V, generator=gen)
    together = heads(hidden, emb, (keys, values), [3, 2])
    first = heads(hidden[:3], emb[:3], (keys[:1], values[:1]))
    second = heads(hidden[3:], emb[3:], (keys[1:], values[1:]))
    # Batched and per-clip matmuls sum in different orders: float32 noise (~1e-5) on some CPUs.
    torch.testing.assert_close(together, torch.cat([first, second], dim=1), atol=1e-4, rtol=1e-4)
    # and the memory matters (negative control: the other clip's memory gives other logits)
    swapped = heads(hidden[:3], emb[:3], (keys[1:], values[1:]))
    assert not torch.allclose(swapped, first)
