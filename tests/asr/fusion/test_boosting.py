import pytest
import torch

from burble.asr.fusion.boosting import DEFAULT_WEIGHT, Phrase, PhraseBooster, load_phrases, parse_phrase, surface_forms

V = 51864


def total_bonus(booster, tokenizer, text, end=True):
    """Sum of the rewards the booster gives along ``text`` (and end-of-text)."""
    ids = tokenizer.encode(text) + ([tokenizer.eot] if end else [])
    state, total = booster.initial, 0.0
    for token in ids:
        reward, state = booster.step(state, token)
        total += reward
    return total


@pytest.fixture
def booster(tokenizer):
    return PhraseBooster(
        ["Chronicles of Newgate", ("Akerman", 3.0), "New York", "New York City"], tokenizer, sample_begin=2, default_weight=2.0
    )


def n_tokens(tokenizer, text):
    return len(tokenizer.encode(text))


def test_completed_phrase_keeps_its_bonus(booster, tokenizer):
    per_token = 2.0 * n_tokens(tokenizer, " Chronicles of Newgate")
    assert total_bonus(booster, tokenizer, " The Chronicles of Newgate.") == pytest.approx(per_token)
    assert total_bonus(booster, tokenizer, " The Chronicles of Newgate") == pytest.approx(per_token)
    # Once per window: the second occurrence must win on the audio alone.
    assert total_bonus(booster, tokenizer, " by Akerman, and Akerman") == pytest.approx(3.0 * n_tokens(tokenizer, " Akerman"))


def test_abandoned_prefix_ends_with_zero_net_bonus(booster, tokenizer):
    # The partial match earns a bonus token by token, then the breaking token revokes all of it.
    ids = tokenizer.encode(" The Chronicles of the Tower")
    state, running = booster.initial, []
    for token in ids:
        reward, state = booster.step(state, token)
        running.append(reward)
    assert running[1] > 0 and running[2] > 0  # " Chronicles", " of" extend a match
    assert sum(running[:3]) > 0
    assert sum(running) == pytest.approx(0.0)
    # Abandoned at end of text, or by continuing a word past the phrase (a different word).
    assert total_bonus(booster, tokenizer, " The Chronicles of") == pytest.approx(0.0)
    assert total_bonus(booster, tokenizer, " Akermann") == pytest.approx(0.0)
    assert total_bonus(booster, tokenizer, " New Yorker") == pytest.approx(0.0)


def test_back_to_back_repetition_earns_no_bonus(booster, tokenizer):
    """A phrase repeated back to back revokes both occurrences' bonus ("X X" where "Y X" was said
    must not beat "Y X"); with other words in between the first occurrence keeps its bonus."""
    once = 3.0 * n_tokens(tokenizer, " Akerman")
    ny = 2.0 * n_tokens(tokenizer, " New York")
    assert total_bonus(booster, tokenizer, " Akerman") == pytest.approx(once)
    assert total_bonus(booster, tokenizer, " Akerman Akerman") == pytest.approx(0.0)
    assert total_bonus(booster, tokenizer, " Akerman Akerman Akerman.") == pytest.approx(0.0)
    assert total_bonus(booster, tokenizer, " Akerman Akerman Akerman Akerman") == pytest.approx(0.0)
    assert total_bonus(booster, tokenizer, " Akerman met Akerman") == pytest.approx(once)
    # A loop over two phrases earns each once, however long it runs.
    assert total_bonus(booster, tokenizer, " Akerman New York Akerman New York Akerman") == pytest.approx(once + ny)
    assert total_bonus(booster, tokenizer, " Akerman New York") == pytest.approx(once + ny)
    assert total_bonus(booster, tokenizer, " New York New York") == pytest.approx(0.0)
    # A repeated phrase's tokens still get provisional bonuses, all revoked at the boundary.
    ids = tokenizer.encode(" Akerman Akerman") + [tokenizer.eot]
    state, rewards = booster.initial, []
    for token in ids:
        reward, state = booster.step(state, token)
        rewards.append(reward)
    first = n_tokens(tokenizer, " Akerman")
    assert sum(rewards[:first]) == pytest.approx(once) and sum(rewards) == pytest.approx(0.0)


def test_repetition_rule_before_issue_19(tokenizer):
    """``revoke_repeats=False``: the repetition only earns nothing (the first keeps its bonus)."""
    from burble.asr.fusion.boosting import BoostOptions

    old = PhraseBooster([("Akerman", 3.0)], tokenizer, options=BoostOptions(revoke_repeats=False, once_per_window=False))
    once = 3.0 * n_tokens(tokenizer, " Akerman")
    assert total_bonus(old, tokenizer, " Akerman Akerman") == pytest.approx(once)
    assert total_bonus(old, tokenizer, " Akerman Akerman Akerman.") == pytest.approx(once)
    assert total_bonus(old, tokenizer, " Akerman met Akerman") == pytest.approx(2 * once)


def test_no_match_inside_other_words(booster, tokenizer):
    assert total_bonus(booster, tokenizer, " Blakerman was here") == pytest.approx(0.0)
    # ...but the no-space form counts at a word start (after an opening quote).
    assert total_bonus(booster, tokenizer, ' said "Akerman"') == pytest.approx(3.0 * n_tokens(tokenizer, "Akerman"))


def test_overlapping_phrases(booster, tokenizer):
    ny = 2.0 * n_tokens(tokenizer, " New York")
    nyc = 2.0 * n_tokens(tokenizer, " New York City")
    assert total_bonus(booster, tokenizer, " New York Times") == pytest.approx(ny)
    assert total_bonus(booster, tokenizer, " New York City.") == pytest.approx(nyc)
    # A broken long match falls back to the shorter phrase that is still a suffix.
    assert total_bonus(booster, tokenizer, " Chronicles of New York") == pytest.approx(ny)


def test_case_variants_and_weights(tokenizer):
    assert surface_forms("new york") == [" new york", "new york", " New york", "New york", " New York", "New York"]
    assert surface_forms("Dun Laoghaire") == [" Dun Laoghaire", "Dun Laoghaire", " dun laoghaire", "dun laoghaire"]
    booster = PhraseBooster([Phrase("newgate", 1.5)], tokenizer)
    for text in (" newgate", " Newgate"):
        assert total_bonus(booster, tokenizer, text) == pytest.approx(1.5 * n_tokens(tokenizer, text))
    exact = PhraseBooster([Phrase("newgate", 1.5)], tokenizer, case_variants=False)
    assert total_bonus(exact, tokenizer, " Newgate") == pytest.approx(0.0)


def test_score_matches_step_for_every_token(booster, tokenizer):
    """The vectorised per-row scores equal the reference transition for all V candidates."""
    prefix = [tokenizer.sot, tokenizer.no_timestamps]
    texts = (" The Chronicles of", " The Chronicles of New York", " by Akerman", " (", " Akerman Akerman",
             " Akerman Akerman Akerman", " Akerman Ak", " New York New", " Akerman met Akerman", " Akerman, Ak")
    for text in texts:
        row = prefix + tokenizer.encode(text)
        scores = booster.score(torch.tensor([row]), V)[0]
        state = booster.state(row)
        reference = torch.tensor([booster.step(state, t)[0] for t in range(V)])
        torch.testing.assert_close(scores, reference)


def test_batched_rows_and_special_tokens(booster, tokenizer):
    prefix = [tokenizer.sot, tokenizer.no_timestamps]
    a = prefix + tokenizer.encode(" The Chronicles of")
    b = prefix + tokenizer.encode(" Nothing to see")[: len(a) - 2]
    b = b + [tokenizer.encode(" x")[0]] * (len(a) - len(b))
    batch = booster.score(torch.tensor([a, b]), V)
    torch.testing.assert_close(batch[0], booster.score(torch.tensor([a]), V)[0])
    torch.testing.assert_close(batch[1], booster.score(torch.tensor([b]), V)[0])
    new = tokenizer.encode(" New")[0]
    assert batch[0, new] == pytest.approx(2.0)  # extends the match
    assert batch[0, tokenizer.eot] == pytest.approx(-4.0)  # revokes " Chronicles of"
    assert batch[0, tokenizer.timestamp_begin] == pytest.approx(-4.0)
    assert batch[1, new] == pytest.approx(2.0)  # starts a match
    assert batch[1, tokenizer.eot] == 0.0
    # A timestamp in the middle breaks the phrase.
    ts = tokenizer.timestamp_begin
    ids = tokenizer.encode(" Chronicles of") + [ts + 10] + tokenizer.encode(" Newgate")
    state, total = booster.initial, 0.0
    for token in ids + [tokenizer.eot]:
        reward, state = booster.step(state, token)
        total += reward
    assert total == pytest.approx(0.0)


def test_apply_and_prefix_cache(booster, tokenizer):
    row = [tokenizer.sot, tokenizer.no_timestamps] + tokenizer.encode(" The Chronicles")
    logits = torch.zeros(1, V)
    booster.apply(logits, torch.tensor([row]))
    torch.testing.assert_close(logits, booster.score(torch.tensor([row]), V))
    other = booster.for_window(5)
    assert other.automaton is booster.automaton and other.sample_begin == 5 and not other._cache


def test_phrase_parsing(tmp_path):
    assert parse_phrase("Newgate") == Phrase("Newgate", DEFAULT_WEIGHT)
    assert parse_phrase("New York\t3.5") == Phrase("New York", 3.5)
    with pytest.raises(ValueError, match="weight"):
        parse_phrase("New York\tlots")
    with pytest.raises(ValueError, match="empty"):
        Phrase("  ")
    path = tmp_path / "hotwords.txt"
    path.write_text("# names\nAkerman\t4\n\nNewgate\n")
    assert load_phrases(path, default_weight=1.0) == [Phrase("Akerman", 4.0), Phrase("Newgate", 1.0)]
    path.write_text("Akerman\tx\n")
    with pytest.raises(ValueError, match="hotwords.txt:1"):
        load_phrases(path)
    with pytest.raises(FileNotFoundError):
        load_phrases(tmp_path / "missing.txt")
