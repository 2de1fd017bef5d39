"""Phrase boosting (contextual biasing) as a logits processor over a phrase automaton.

Each phrase is held as every plausible token sequence (:mod:`burble.asr.fusion.tokenizations`:
as given, Capitalized, Title Case, lower case; with and without a leading space; the canonical BPE
encoding and alternative splits of the same bytes), so whichever path the decoder takes through a
name, the boost follows it. The sequences form one Aho-Corasick automaton
(:mod:`burble.asr.fusion.automaton`).

Rewards are potential-based so boosting cannot inflate the score of text that is not a phrase:

* a token that extends a match earns the phrase's per-token ``weight`` (provisionally);
* a token that breaks the match *revokes* the provisional bonus earned so far and grants the
  potential of the state it falls back to (zero at the root);
* a completed phrase commits its bonus (never revoked) when a word boundary follows it (a token
  with a leading space, punctuation, or a special token): "Akerman" followed by "n" is the word
  "Akermann", not the phrase, and loses the bonus; a shorter phrase that ends inside a longer
  partial match (the automaton's output link) is committed the same way;
* special and timestamp tokens (``>= eot``, end-of-text included) reset the match to the root,
  revoking any provisional bonus (which phrases have already earned is kept);
* sequences without a leading space only start at a word start (text start, after punctuation
  or a special token), never inside another word;
* a phrase repeated back to back ("Akerman Akerman") earns no bonus at all: the repetition
  commits nothing and revokes the bonus the first occurrence committed. A large weight would
  otherwise make beam search loop on one phrase, each repetition paying for itself, and a boosted
  name would be written twice where another name was said before it ("X X" for "Y X": the first
  X earned the bonus that the spoken Y never could);
* a phrase earns its bonus once per decoded window (``BoostOptions.once_per_window``): a later
  occurrence must win on the audio alone, so no loop over several phrases ("A B A B") pays for
  itself, and a name said once is not boosted into a second place where a similar word was said.

Over a finished hypothesis the bonuses therefore sum to the weights of the distinct phrases it
contains (back-to-back repeats excluded). The per-row reward is ``-provisional`` for every token
plus a correction on the few tokens the automaton can move along from the current state, so one
row costs O(phrase tokens), not O(V).

As with :mod:`burble.asr.fusion.shallow_fusion`, ``apply`` adds rewards to the logits (exact for
greedy search and sampling); ``adds_score = True`` and :meth:`PhraseBooster.score` let a beam search
add them after ``log_softmax`` so a revocation really lowers the hypothesis score.

Alternative BPE splits earn nothing until their last token, which brings the phrase's whole
bonus (as much as the canonical spelling earns): were their short first pieces (``" K"``,
``" S"``) boosted token by token, every common word starting with them would be lured into the
beam and some completed into a hotword that was never said (measured on the LJ Speech set: keyword
sentence WER 8.7% -> 12.1%, 6 inserted hotwords).

A rare name's first token is often far below the beam's top candidates even with its bonus, so
the match never starts. :meth:`PhraseBooster.reserve` names the best bonus-earning phrase token (a
start or a continuation) of the step that is within ``BoostOptions.lane_margin`` of the step's
best candidate; beam search (:mod:`burble.decoding.beam`) adds a row for it when no phrase token
won a row itself, so the ``beam_size`` best hypotheses stay as they were (replacing the last one
instead made a control sentence loop). The search still decides: a phrase that the audio does
not carry falls out again at the next step, its provisional bonus revoked.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Iterable, Optional, Sequence

import torch

from burble.asr.fusion.automaton import Node, PhraseAutomaton
from burble.asr.fusion.phrases import DEFAULT_WEIGHT, Phrase, as_phrases, load_phrases, parse_phrase
from burble.asr.fusion.prefix_state import PrefixTrie
from burble.asr.fusion.tokenizations import TokenizationOptions, surface_forms, tokenization_table
from burble.asr.fusion.words import breaks_word, is_boundary, word_boundary_mask
from burble.asr.tokenizer import WhisperTokenizer

__all__ = [
    "DEFAULT_WEIGHT", "BoostOptions", "BoostState", "Phrase", "PhraseBooster", "as_phrases", "load_phrases",
    "parse_phrase", "surface_forms",
]


@dataclass(frozen=True)
class BoostOptions:
    """How phrases are matched and how they compete in beam search.

    Attributes:
      tokenizations: which token sequences of each phrase the automaton holds.
      lane_margin: a phrase token may take a reserved beam slot when its score is at most this
        far (natural log) below the step's best candidate (``None``: no reserved slot).
      revoke_repeats: a phrase repeated back to back loses the bonus of both occurrences (else
        only the repetition earns nothing, as before issue 19).
      once_per_window: a phrase earns its bonus once per decoded window; a later occurrence must
        win on the audio alone (else several phrases alternating, "A B A B", each pay for
        themselves: at 5 per token they looped on the LJ Speech set).
    """

    tokenizations: TokenizationOptions = field(default_factory=TokenizationOptions)
    lane_margin: Optional[float] = 10.0
    revoke_repeats: bool = True
    once_per_window: bool = True

    def __post_init__(self) -> None:
        if self.lane_margin is not None and self.lane_margin < 0:
            raise ValueError("lane_margin must be >= 0 (or None: no reserved beam slot)")


@dataclass(frozen=True)
class BoostState:
    """Automaton node, the provisional (revocable) bonus of the partial match, and whether the next
    token begins a word even without a leading space."""

    node: Node
    provisional: float = 0.0
    word_start: bool = True
    repeat_of: Optional[int] = None  # phrase that ended exactly where the current match began
    repeat_bonus: float = 0.0  # the bonus that phrase committed (revoked if the match repeats it)
    done: frozenset[int] = frozenset()  # phrases that committed a bonus earlier in this hypothesis


class PhraseBooster:
    """Boosts token sequences that spell the given phrases, revoking bonuses of abandoned matches.

    Args:
      phrases: phrases (see :func:`as_phrases` for accepted forms).
      tokenizer: the Whisper tokenizer of the decoded model.
      sample_begin: prompt length; matching starts at the first generated token.
      case_variants: also boost Capitalized, Title Case and lower-case forms (overrides
        ``options.tokenizations.case_variants`` when given).
      default_weight: per-token bonus of phrases given without a weight.
      max_cache: prefix states kept before pruning to the live rows (see
        :class:`~burble.asr.fusion.prefix_state.PrefixTrie`).
      options: tokenizations, the reserved beam slot and the repeat rule.
    """

    adds_score = True

    def __init__(
        self,
        phrases: Iterable[str | Phrase | tuple[str, float]],
        tokenizer: WhisperTokenizer,
        *,
        sample_begin: int = 0,
        case_variants: Optional[bool] = None,
        default_weight: float = DEFAULT_WEIGHT,
        max_cache: int = 20000,
        options: BoostOptions = BoostOptions(),
    ) -> None:
        if case_variants is not None:
            options = replace(options, tokenizations=replace(options.tokenizations, case_variants=case_variants))
        self.options = options
        self.phrases = as_phrases(phrases, default_weight)
        self.tokenizer = tokenizer
        self.sample_begin = sample_begin
        self.max_cache = max_cache
        sequences = []
        for index, phrase in enumerate(self.phrases):
            for tokens, canonical, length in tokenization_table(tokenizer, phrase.text, options.tokenizations):
                if canonical:  # the bonus accrues token by token
                    potentials: list[Optional[float]] = [phrase.weight * (i + 1) for i in range(len(tokens))]
                else:  # an alternative split: the canonical spelling's whole bonus on its last token
                    potentials = [None] * (len(tokens) - 1) + [phrase.weight * length]
                sequences.append((tokens, potentials, index))
        self.automaton = PhraseAutomaton(sequences, lambda token: not tokenizer.piece(token).startswith("Ġ"))
        # States of generated-token prefixes (the prompt is not matched, so it is not in the keys).
        self._cache: PrefixTrie[BoostState] = self._new_cache()
        # Per (vocab size, device): the word-boundary mask as float.
        self._boundary: dict[tuple[int, torch.device], torch.Tensor] = {}
        # The phrase moves ``(rows, token ids)`` of the last ``score`` call, for ``reserve``.
        self._last_moves: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    def _new_cache(self) -> PrefixTrie[BoostState]:
        return PrefixTrie(lambda: self.initial, lambda state, token: self.step(state, token)[1], self.max_cache)

    def for_window(self, sample_begin: int) -> "PhraseBooster":
        """A booster for another prompt length sharing this one's automaton (fresh prefix cache)."""
        clone = copy.copy(self)
        clone.sample_begin = sample_begin
        clone._cache = clone._new_cache()
        clone._last_moves = None
        return clone

    @property
    def initial(self) -> BoostState:
        return BoostState(self.automaton.root)

    @staticmethod
    def ended_phrase(state: BoostState) -> Optional[int]:
        """Index of the phrase a word boundary would complete now (``None``: none)."""
        node = state.node
        if node.phrase is not None:
            return node.phrase
        return node.output.phrase if node.output is not None else None

    def committed(self, state: BoostState) -> float:
        """Bonus a word boundary would make permanent: a whole phrase, or one ending inside a longer
        match; negative when the phrase repeats the one just before it (that one's bonus is revoked)."""
        node = state.node
        phrase = self.ended_phrase(state)
        if phrase is None:
            return 0.0
        if phrase == state.repeat_of:  # the same phrase again, back to back
            return -state.repeat_bonus if self.options.revoke_repeats else 0.0
        if phrase in state.done:
            return 0.0  # it earned its bonus earlier in this hypothesis
        if node.phrase is not None:
            return state.provisional
        return min(state.provisional, node.output.potential)  # type: ignore[union-attr]

    def step(self, state: BoostState, token: int) -> tuple[float, BoostState]:
        """Reward for appending ``token`` and the state after it."""
        tokenizer = self.tokenizer
        provisional = state.provisional
        ended, commit = None, 0.0
        if is_boundary(tokenizer, token):
            commit = self.committed(state)
            provisional -= commit  # the phrase ended at a word boundary: keep its bonus
            ended = self.ended_phrase(state)
        done = state.done
        if commit > 0 and ended is not None and self.options.once_per_window:
            done = done | {ended}
        if token >= tokenizer.eot:  # a special or timestamp token: no match spans it
            return -provisional, BoostState(self.automaton.root, done=done)
        node = state.node
        target = self.automaton.goto(node, token, state.word_start)
        repeat_of, repeat_bonus = None, 0.0
        if node is not self.automaton.root and target is node.children.get(token):
            reward = target.weight
            provisional += target.weight
            repeat_of, repeat_bonus = state.repeat_of, state.repeat_bonus
        else:  # match broken: revoke what is provisional, grant the fallback's partial match
            reward = target.potential - provisional
            provisional = target.potential
            if target.depth == 1 and ended is not None:
                # A new match begins on the token that ended a phrase: if it spells that phrase
                # again, it revokes what this one committed (never more: a third repetition
                # then finds nothing left to revoke).
                repeat_of, repeat_bonus = ended, max(commit, 0.0)
        return reward, BoostState(target, provisional, breaks_word(tokenizer, token), repeat_of, repeat_bonus, done)

    def state(self, row: Sequence[int]) -> BoostState:
        """State after a full token row (matching starts at ``sample_begin``), walked through the prefix trie."""
        return self._cache.walk(row[self.sample_begin :]).state

    def _boundary_mask(self, vocab_size: int, device: torch.device) -> torch.Tensor:
        """The word-boundary mask as float on ``device``, made once per vocab and device."""
        key = (vocab_size, device)
        if key not in self._boundary:
            self._boundary[key] = word_boundary_mask(self.tokenizer, vocab_size).to(device=device, dtype=torch.float32)
        return self._boundary[key]

    def score(self, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Reward ``(B, vocab_size)`` for each candidate next token of each row."""
        device = tokens.device
        states = [node.state for node in self._cache.row_nodes(tokens[:, self.sample_begin :])]
        committed = [self.committed(state) for state in states]
        # One transfer for the per-row scalars (float32, as the per-row arithmetic was before).
        scalars = torch.tensor([[s.provisional for s in states], committed], dtype=torch.float32, device=device)
        provisional, commit = scalars[0], scalars[1]
        boundary = self._boundary_mask(vocab_size, device)
        # Default: every token falls back to the root and revokes the provisional bonus, except
        # that a word boundary first commits a completed phrase.
        bonus = commit[:, None] * boundary - provisional[:, None]
        moves = [self.automaton.moves(state.node, state.word_start, vocab_size, device) for state in states]
        counts = [len(ids) for ids, _, _ in moves]
        total = sum(counts)
        self._last_moves = None
        if total:
            # All rows' moves in one scatter (output_size: no device sync to size the row index).
            ids, is_child, value = (torch.cat(parts) for parts in zip(*moves))
            repeats = torch.tensor(counts, device=device)
            rows = torch.repeat_interleave(torch.arange(len(states), device=device), repeats, output_size=total)
            left = provisional[rows] - commit[rows] * boundary[ids]
            # Children earn their weight on top of the provisional bonus; fallbacks replace it.
            bonus[rows, ids] = torch.where(is_child, value, value - left)
            # Only moves that earn a bonus now may claim the reserved beam slot: an alternative
            # split's inner tokens earn nothing until the split is complete.
            earning = value > 0
            self._last_moves = (rows[earning], ids[earning])
        return bonus

    def reserve(self, scores: torch.Tensor, limit: int = 8) -> list[tuple[int, int, float]]:
        """Phrase tokens that may take a reserved beam slot this step, best first.

        Args:
          scores: the beam's ``(B, V)`` candidate scores of the step, this booster's bonus
            included (the rows of the last :meth:`score` call).
          limit: candidates returned at most.

        Returns:
          ``(row, token, score)`` of the best tokens that start or extend a phrase, each within
          ``options.lane_margin`` of the step's best score (empty without a margin).
        """
        margin = self.options.lane_margin
        if margin is None or self._last_moves is None or not len(self._last_moves[1]):
            return []
        rows, ids = self._last_moves
        values = scores[rows, ids]
        top, index = values.topk(min(limit, len(values)))
        floor = scores.max() - margin
        keep = top >= floor
        table = torch.stack([rows[index].to(top), ids[index].to(top), top], dim=1)[keep]
        return [(int(row), int(token), score) for row, token, score in table.tolist()]

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits.add_(self.score(tokens, logits.shape[-1]).to(logits.dtype))
