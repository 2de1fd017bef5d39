import math

import pytest
import torch

from burble.asr.fusion.normalize import LMTextNormalizer
from burble.asr.fusion.shallow_fusion import LN10, FusionOptions, ShallowFusion
from burble.asr.fusion.words import word_boundary_mask

kenlm = pytest.importorskip("kenlm", reason="shallow fusion queries LMs with the kenlm module (pip install kenlm)")

V = 51864  # tiny.en's vocabulary (text + specials + timestamps)


def prompt(tokenizer, previous: list[int] = ()):
    head = [tokenizer.sot_prev, *previous] if previous else []
    return head + [tokenizer.sot, tokenizer.no_timestamps]


def reference_walk(lm, words, state=None):
    """KenLM's own log10 scores of ``words`` from <s> (or ``state``)."""
    if state is None:
        state = kenlm.State()
        lm.BeginSentenceWrite(state)
    scores = []
    for word in words:
        out = kenlm.State()
        scores.append(lm.BaseScore(state, word, out))
        state = out
    return scores, state


def test_word_bonus_equals_kenlm_score_in_context(tokenizer, lm, held_out):
    """Walk held-out sentences token by token: whenever the next token of the sentence ends a word,
    the bonus on word-ending candidates is alpha * ln(10) * KenLM's log10 P(word | history) + beta
    (plus alpha * ln P(</s>) on end-of-text); continuation tokens never get a bonus."""
    alpha, beta = 0.7, 0.3
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=alpha, beta=beta, score_eos=True), sample_begin=2)
    space_tok, cont_tok = tokenizer.encode(" the")[0], tokenizer.encode("the")[0]
    normalize = LMTextNormalizer()
    checked = 0
    for sentence in held_out[:12]:
        ids = tokenizer.encode(" " + sentence)
        _, groups = tokenizer.split_to_word_tokens(ids)
        ends: dict[int, list[str]] = {}  # token index where a word group ends -> its LM words
        position = 0
        for group in groups:
            position += len(group)
            ends[position] = normalize(tokenizer.decode(group))
        history: list[str] = []
        for i in range(len(ids) + 1):
            bonus = fusion.score(torch.tensor([prompt(tokenizer) + ids[:i]]), V)[0]
            assert float(bonus[cont_tok]) == 0.0
            assert float(bonus[tokenizer.timestamp_begin]) == float(bonus[space_tok])
            if i in ends:
                scores, state = reference_walk(lm, history + ends[i])
                expected = sum(alpha * LN10 * s + beta for s in scores[len(history):])
                assert float(bonus[space_tok]) == pytest.approx(expected, abs=1e-4)
                eos = lm.BaseScore(state, "</s>", kenlm.State())
                assert float(bonus[tokenizer.eot]) == pytest.approx(expected + alpha * LN10 * eos, abs=1e-4)
                history += ends[i]
                checked += 1
    assert checked > 100


def test_log_base_is_natural(tokenizer, lm):
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0), sample_begin=2)
    row = prompt(tokenizer) + tokenizer.encode(" The prison")
    bonus = float(fusion.score(torch.tensor([row]), V)[0, tokenizer.encode(" was")[0]])
    (the, prison), _ = reference_walk(lm, ["the", "prison"])
    assert bonus == pytest.approx(prison * math.log(10), abs=1e-5)
    assert bonus == pytest.approx(math.log(10**prison), abs=1e-5)


def test_mask_marks_word_ends(tokenizer):
    mask = word_boundary_mask(tokenizer, V)
    assert mask[tokenizer.encode(" the")[0]] and mask[tokenizer.encode(",")[0]] and mask[tokenizer.encode(".")[0]]
    assert mask[tokenizer.eot] and mask[tokenizer.timestamp_begin] and mask[V - 1]
    assert not mask[tokenizer.encode("gate")[0]] and not mask[tokenizer.encode("'s")[0]]


def test_batched_rows_with_different_prefixes_match_single_rows(tokenizer, lm):
    texts = [" The prison of Newgate was full", " In 1818, the jail", " Mr. Neild's account of it", " The prison of the city"]
    n = min(len(tokenizer.encode(t)) for t in texts)
    rows = [prompt(tokenizer) + tokenizer.encode(t)[:n] for t in texts]
    for cut in range(2, len(rows[0]) + 1):
        batch = ShallowFusion(lm, tokenizer, sample_begin=2).score(torch.tensor([r[:cut] for r in rows]), V)
        for b, r in enumerate(rows):
            alone = ShallowFusion(lm, tokenizer, sample_begin=2).score(torch.tensor([r[:cut]]), V)[0]
            torch.testing.assert_close(batch[b], alone)
    assert len({float(x) for x in batch[:, tokenizer.encode(" x")[0]]}) > 1  # rows really differ


def test_state_follows_prefixes_when_beams_reorder(tokenizer, lm):
    """Rows swap places (beam reordering) and share parents: results depend on the prefix only."""
    base = prompt(tokenizer) + tokenizer.encode(" The prison")
    a = base + tokenizer.encode(" was")
    b = base + tokenizer.encode(" of")
    fusion = ShallowFusion(lm, tokenizer, sample_begin=2)
    first = fusion.score(torch.tensor([a, b]), V)
    swapped = fusion.score(torch.tensor([b, a]), V)
    torch.testing.assert_close(first, swapped.flip(0))
    fresh = ShallowFusion(lm, tokenizer, sample_begin=2).score(torch.tensor([b]), V)
    torch.testing.assert_close(swapped[:1], fresh)
    assert first[0, tokenizer.encode(" x")[0]] != first[1, tokenizer.encode(" x")[0]]


def test_numbers_score_each_spelled_word(tokenizer, lm):
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.5), sample_begin=2)
    ids = tokenizer.encode(" in 1818")
    assert len(ids) >= 3  # " in", " 18", "18": the number is one word of two tokens
    bonus = float(fusion.score(torch.tensor([prompt(tokenizer) + ids]), V)[0, tokenizer.encode(",")[0]])
    scores, _ = reference_walk(lm, ["in", "eighteen", "eighteen"])
    assert bonus == pytest.approx(sum(LN10 * s + 0.5 for s in scores[1:]), abs=1e-4)


def test_prompt_previous_text_and_context_are_history(tokenizer, lm):
    previous = tokenizer.encode(" The debtors were crowded in the prison")
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0), sample_begin=len(prompt(tokenizer, previous)))
    row = prompt(tokenizer, previous) + tokenizer.encode(" of")
    bonus = float(fusion.score(torch.tensor([row]), V)[0, tokenizer.encode(" x")[0]])
    history = "the debtors were crowded in the prison".split()
    scores, _ = reference_walk(lm, history + ["of"])
    assert bonus == pytest.approx(LN10 * scores[-1], abs=1e-5)

    ignored = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0, use_prompt_context=False), sample_begin=len(row) - 1)
    scores, _ = reference_walk(lm, ["of"])
    assert float(ignored.score(torch.tensor([row]), V)[0, tokenizer.encode(" x")[0]]) == pytest.approx(LN10 * scores[-1], abs=1e-5)

    explicit = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0), sample_begin=2,
                             context="The debtors were crowded in the prison")
    row = prompt(tokenizer) + tokenizer.encode(" of")
    assert float(explicit.score(torch.tensor([row]), V)[0, tokenizer.encode(" x")[0]]) == pytest.approx(bonus, abs=1e-5)


def test_special_tokens(tokenizer, lm):
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0), sample_begin=2)
    ts = tokenizer.timestamp_begin
    # A timestamp ends a word like a space does; the next word starts fresh after it.
    row = prompt(tokenizer) + [ts] + tokenizer.encode(" The prison") + [ts + 50, ts + 50] + tokenizer.encode(" was")
    bonus = float(fusion.score(torch.tensor([row]), V)[0, tokenizer.encode(" x")[0]])
    scores, _ = reference_walk(lm, ["the", "prison", "was"])
    assert bonus == pytest.approx(LN10 * scores[-1], abs=1e-5)
    # Right after a special token nothing is pending: no bonus anywhere.
    after = fusion.score(torch.tensor([prompt(tokenizer) + [ts]]), V)[0]
    assert float(after.abs().max()) == 0.0
    # Finished rows keep receiving end-of-text: harmless, nothing pending.
    done = prompt(tokenizer) + tokenizer.encode(" The prison") + [tokenizer.eot, tokenizer.eot]
    assert float(fusion.score(torch.tensor([done]), V)[0].abs().max()) == 0.0


def test_oov_override(tokenizer, lm):
    row = prompt(tokenizer) + tokenizer.encode(" Zzyzxqa")
    own = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0), sample_begin=2)
    fixed = ShallowFusion(lm, tokenizer, FusionOptions(alpha=1.0, beta=0.0, oov_log10=-2.0), sample_begin=2)
    x = tokenizer.encode(" x")[0]
    scores, _ = reference_walk(lm, ["zzyzxqa"])
    assert float(own.score(torch.tensor([row]), V)[0, x]) == pytest.approx(LN10 * scores[0], abs=1e-5)
    assert float(fixed.score(torch.tensor([row]), V)[0, x]) == pytest.approx(-2.0 * LN10, abs=1e-5)


def test_apply_edits_logits_in_place(tokenizer, lm):
    fusion = ShallowFusion(lm, tokenizer, FusionOptions(alpha=0.5, beta=1.0), sample_begin=2)
    rows = torch.tensor([prompt(tokenizer) + tokenizer.encode(" The prison")] * 2)
    logits = torch.randn(2, V)
    logits[:, 7] = float("-inf")
    expected = logits + fusion.score(rows, V)
    fusion.apply(logits, rows)
    torch.testing.assert_close(logits, expected)
    assert fusion.adds_score


def test_cache_is_pruned_to_live_rows(tokenizer, lm):
    fusion = ShallowFusion(lm, tokenizer, sample_begin=2, max_cache=5)
    row = prompt(tokenizer)
    for token in tokenizer.encode(" The prison of Newgate was full of debtors and felons"):
        row = row + [token]
        fusion.score(torch.tensor([row]), V)
    assert fusion._nodes <= 6


def test_pending_penalty_is_refunded_when_the_word_completes(tokenizer, lm):
    """Each word-piece token pays c provisionally; the completing token refunds c per piece, so the
    sum of the bonuses along any finished text equals the plain fusion scores."""
    c = 1.7
    plain = ShallowFusion(lm, tokenizer, FusionOptions(alpha=0.5, beta=1.0), sample_begin=2)
    charged = ShallowFusion(lm, tokenizer, FusionOptions(alpha=0.5, beta=1.0, pending_penalty=c), sample_begin=2)
    ids = tokenizer.encode(" The prison of Newgate, in 1818.") + [tokenizer.eot]
    totals = [0.0, 0.0]
    for i, token in enumerate(ids):
        row = torch.tensor([prompt(tokenizer) + ids[:i]])
        a, b = plain.score(row, V)[0, token], charged.score(row, V)[0, token]
        totals[0] += float(a)
        totals[1] += float(b)
        if token < tokenizer.eot and not tokenizer.starts_word(token) and tokenizer.piece(token).isalnum():
            assert float(b) == pytest.approx(float(a) - c)  # a continuation piece pays provisionally
    assert totals[1] == pytest.approx(totals[0], abs=1e-4)
    # Punctuation and end-of-text are not word pieces: no provisional charge on them.
    row = torch.tensor([prompt(tokenizer) + tokenizer.encode(" The")])
    a, b = float(plain.score(row, V)[0, tokenizer.eot]), float(charged.score(row, V)[0, tokenizer.eot])
    assert b == pytest.approx(a + c)  # " The" is one piece: completing it refunds c
    assert float(charged.score(row, V)[0, tokenizer.encode(",")[0]]) == pytest.approx(b)


def test_rows_find_their_parents_across_calls_of_any_length(tokenizer, lm):
    """Speculative verification's pattern: prefixes grow inside one buffer, a rejected draft is
    overwritten, and the next call is shorter than the last. Every score equals a fresh instance's."""
    text = tokenizer.encode(" The prison of Newgate was full of debtors")
    other = tokenizer.encode(" jail in 1818")
    buffer = torch.tensor([prompt(tokenizer) + text + other])
    fusion = ShallowFusion(lm, tokenizer, sample_begin=2)
    start = len(prompt(tokenizer)) + 2
    lengths = [start, start + 1, start + 2, start + 3, start + 4, start + 3, start + 5, start + 6, start + 4]
    for step, length in enumerate(lengths):
        if step == 5:
            buffer[0, start + 1 : start + 1 + len(other)] = torch.tensor(other)  # a rejected draft is overwritten
        view = buffer[:, :length]
        fresh = ShallowFusion(lm, tokenizer, sample_begin=2).score(view.clone(), V)
        torch.testing.assert_close(fusion.score(view, V), fresh, rtol=0, atol=0)
