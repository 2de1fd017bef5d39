"""Phrase boosting (contextual biasing) as a logits processor: an Aho-Corasick automaton over BPE tokens.

Each phrase is tokenized in several surface forms (as given, Capitalized, lower case; each with and
without a leading space) and every form is inserted into a token-level trie; failure links turn
the trie into an Aho-Corasick automaton, so a match can start at any token and a broken match falls
back to the longest phrase prefix that is still a suffix of the output.

Rewards are potential-based so boosting cannot inflate the score of text that is not a phrase:

* a token that extends a match earns the phrase's per-token ``weight`` (provisionally);
* a token that breaks the match *revokes* the provisional bonus earned so far and grants the
  potential of the state it falls back to (zero at the root);
* a completed phrase commits its bonus (never revoked) when a word boundary follows it (a token
  with a leading space, punctuation, or a special token): "Akerman" followed by "n" is the word
  "Akermann", not the phrase, and loses the bonus; a shorter phrase that ends inside a longer
  partial match (the automaton's output link) is committed the same way;
* special and timestamp tokens (``>= eot``, end-of-text included) reset to the root, revoking any
  provisional bonus;
* surface forms without a leading space only start at a word start (text start, after
  punctuation or a special token), never inside another word;
* a phrase repeated back to back ("Akerman Akerman") earns its bonus once: a match that starts on
  the very token that ended the same phrase commits nothing. Without this, a large weight (6 per
  token on the tuning set) makes beam search loop on one phrase, each repetition paying for itself.
  Loops over several phrases ("Buell Davis Buell Davis") still appear at 8 per token; the default
  (4) is well below.

Over a finished hypothesis the bonuses therefore sum to the weights of the phrases it contains.
The per-row reward is ``-provisional`` for every token plus a correction on the few tokens the
automaton can move along from the current state, so one row costs O(phrase tokens), not O(V).

As with :mod:`burble.asr.fusion.shallow_fusion`, ``apply`` adds rewards to the logits (exact for
greedy search and sampling); ``adds_score = True`` and :meth:`PhraseBooster.score` let a beam search
add them after ``log_softmax`` so a revocation really lowers the hypothesis score.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch

from burble.asr.fusion.prefix_state import PrefixTrie
from burble.asr.fusion.words import breaks_word, is_boundary, word_boundary_mask
from burble.asr.tokenizer import WhisperTokenizer

DEFAULT_WEIGHT = 4.0  # per token; chosen on the tuning set (benchmarks/data/biasing_tune.json) with tiny.en


@dataclass(frozen=True)
class Phrase:
    """A phrase to boost and its bonus per matched token (natural-log units)."""

    text: str
    weight: float = DEFAULT_WEIGHT

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("a boosted phrase cannot be empty")


def parse_phrase(spec: str, default_weight: float = DEFAULT_WEIGHT) -> Phrase:
    """``"phrase"`` or ``"phrase<TAB>weight"`` (a file line or a ``--hotwords`` item)."""
    text, _, weight = spec.rstrip("\n").partition("\t")
    if not weight:
        return Phrase(text.strip(), default_weight)
    try:
        return Phrase(text.strip(), float(weight))
    except ValueError:
        raise ValueError(f"bad phrase weight {weight!r} in {spec!r} (expected phrase<TAB>number)") from None


def load_phrases(path: str | Path, default_weight: float = DEFAULT_WEIGHT) -> list[Phrase]:
    """Phrases from a file: one per line, optionally ``phrase<TAB>weight``; blank lines and ``#`` comments skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"hotwords file not found: {path}")
    phrases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            phrases.append(parse_phrase(line, default_weight))
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
    return phrases


def as_phrases(items: Iterable[str | Phrase | tuple[str, float]], default_weight: float = DEFAULT_WEIGHT) -> list[Phrase]:
    """Normalise API input: strings (``"phrase"`` or ``"phrase\\tweight"``), ``(text, weight)`` or :class:`Phrase`."""
    out = []
    for item in items:
        if isinstance(item, Phrase):
            out.append(item)
        elif isinstance(item, tuple):
            out.append(Phrase(item[0], float(item[1])))
        else:
            out.append(parse_phrase(item, default_weight))
    return out


def surface_forms(text: str, case_variants: bool = True) -> list[str]:
    """The strings a phrase may appear as in Whisper output (leading space and case variants)."""
    text = " ".join(text.split())
    cases = [text]
    if case_variants:
        cases += [text[:1].upper() + text[1:], text.lower()]
    forms: list[str] = []
    for case in cases:
        for form in (" " + case, case):
            if form not in forms:
                forms.append(form)
    return forms


@dataclass(eq=False)
class _Node:
    depth: int
    weight: float = 0.0  # bonus of the token leading here
    potential: float = 0.0  # sum of weights from the root
    anchored: bool = False  # the path starts without a leading space: only valid at a word start
    children: dict[int, "_Node"] = field(default_factory=dict)
    fail: Optional["_Node"] = None
    phrase: Optional[int] = None  # index of the phrase a surface form ends here
    output: Optional["_Node"] = None  # nearest proper suffix state that ends a phrase
    # Memo of PhraseAutomaton.moves per (word_start, vocab size, device).
    moves: dict[tuple[bool, int, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)


class PhraseAutomaton:
    """Aho-Corasick automaton over token sequences.

    A surface form whose first token has no leading space (``"Akerman"`` at the start of a text
    or after an opening quote) is *anchored*: it may only begin at a word start, so the automaton
    never enters it from inside a word (``" Bl" "ak" "erman"`` is not the phrase ``akerman``).

    Args:
      sequences: ``(tokens, weight, phrase_index)`` per surface form; a node shared by several
        forms takes the largest weight.
      anchored_first: predicate telling whether a first token lacks a leading space.
    """

    def __init__(self, sequences: Iterable[tuple[Sequence[int], float, int]], anchored_first) -> None:
        self.root = _Node(depth=0)
        for tokens, weight, index in sequences:
            if not tokens:
                continue
            node = self.root
            for token in tokens:
                child = node.children.get(token)
                if child is None:
                    anchored = node.anchored if node is not self.root else bool(anchored_first(token))
                    child = node.children[token] = _Node(depth=node.depth + 1, anchored=anchored)
                child.weight = max(child.weight, weight)
                node = child
            if node.phrase is None:
                node.phrase = index
        self._link()

    def _link(self) -> None:
        """Breadth-first: potentials, failure links and output links (anchored states excluded)."""
        queue = []
        for child in self.root.children.values():
            child.fail = self.root
            child.potential = child.weight
            queue.append(child)
        while queue:
            node = queue.pop(0)
            for token, child in node.children.items():
                child.potential = node.potential + child.weight
                fallback = node.fail
                while fallback is not None and not self._enterable(fallback.children.get(token)):
                    fallback = fallback.fail
                child.fail = fallback.children[token] if fallback is not None else self.root
                suffix = child.fail
                child.output = suffix if suffix.phrase is not None else suffix.output
                queue.append(child)

    @staticmethod
    def _enterable(node: Optional[_Node], word_start: bool = False) -> bool:
        """Whether a fallback may land on ``node``: an anchored path only from the root at a word start."""
        return node is not None and (not node.anchored or (node.depth == 1 and word_start))

    def goto(self, node: _Node, token: int, word_start: bool) -> _Node:
        """The transition on ``token`` (the root when no phrase prefix survives)."""
        if node is not self.root:
            child = node.children.get(token)
            if child is not None:
                return child  # a match in progress continues (it began legitimately)
        walk: Optional[_Node] = node.fail if node is not self.root else node
        while walk is not None:
            child = walk.children.get(token)
            if self._enterable(child, word_start):
                return child  # type: ignore[return-value]
            walk = walk.fail
        return self.root

    def moves(
        self, node: _Node, word_start: bool, vocab_size: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens below ``vocab_size`` leading away from the root: ids, whether each is a child of
        ``node``, and the target's weight (children) or potential (fallbacks), on ``device``.

        Memoised per node: a decoding step then moves no tensors to the device."""
        key = (word_start, vocab_size, device)
        if key not in node.moves:
            targets: dict[int, _Node] = dict(node.children) if node is not self.root else {}
            walk: Optional[_Node] = node.fail if node is not self.root else node
            while walk is not None:
                state, walk = walk, walk.fail
                for token, child in state.children.items():
                    if token not in targets and self._enterable(child, word_start):
                        targets[token] = child
            child_of = node.children if node is not self.root else {}
            kept = [(t, target) for t, target in targets.items() if t < vocab_size]
            ids = torch.tensor([t for t, _ in kept], dtype=torch.long)
            is_child = torch.tensor([t in child_of for t, _ in kept], dtype=torch.bool)
            value = torch.tensor(
                [target.weight if t in child_of else target.potential for t, target in kept], dtype=torch.float32
            )
            node.moves[key] = (ids.to(device), is_child.to(device), value.to(device))
        return node.moves[key]


@dataclass(frozen=True)
class BoostState:
    """Automaton node, the provisional (revocable) bonus of the partial match, and whether the next
    token begins a word even without a leading space."""

    node: _Node
    provisional: float = 0.0
    word_start: bool = True
    repeat_of: Optional[int] = None  # phrase that ended exactly where the current match began


class PhraseBooster:
    """Boosts token sequences that spell the given phrases, revoking bonuses of abandoned matches.

    Args:
      phrases: phrases (see :func:`as_phrases` for accepted forms).
      tokenizer: the Whisper tokenizer of the decoded model.
      sample_begin: prompt length; matching starts at the first generated token.
      case_variants: also boost Capitalized and lower-case forms.
      default_weight: per-token bonus of phrases given without a weight.
      max_cache: prefix states kept before pruning to the live rows (see
        :class:`~burble.asr.fusion.prefix_state.PrefixTrie`).
    """

    adds_score = True

    def __init__(
        self,
        phrases: Iterable[str | Phrase | tuple[str, float]],
        tokenizer: WhisperTokenizer,
        *,
        sample_begin: int = 0,
        case_variants: bool = True,
        default_weight: float = DEFAULT_WEIGHT,
        max_cache: int = 20000,
    ) -> None:
        self.phrases = as_phrases(phrases, default_weight)
        self.tokenizer = tokenizer
        self.sample_begin = sample_begin
        self.max_cache = max_cache
        sequences = []
        for index, phrase in enumerate(self.phrases):
            for form in surface_forms(phrase.text, case_variants):
                sequences.append((tokenizer.encode(form), phrase.weight, index))
        self.automaton = PhraseAutomaton(sequences, lambda token: not tokenizer.piece(token).startswith("Ġ"))
        # States of generated-token prefixes (the prompt is not matched, so it is not in the keys).
        self._cache: PrefixTrie[BoostState] = self._new_cache()
        # Per (vocab size, device): the word-boundary mask as float.
        self._boundary: dict[tuple[int, torch.device], torch.Tensor] = {}

    def _new_cache(self) -> PrefixTrie[BoostState]:
        return PrefixTrie(lambda: self.initial, lambda state, token: self.step(state, token)[1], self.max_cache)

    def for_window(self, sample_begin: int) -> "PhraseBooster":
        """A booster for another prompt length sharing this one's automaton (fresh prefix cache)."""
        clone = copy.copy(self)
        clone.sample_begin = sample_begin
        clone._cache = clone._new_cache()
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

    @classmethod
    def committed(cls, state: BoostState) -> float:
        """Bonus a word boundary would make permanent: a whole phrase, or one ending inside a longer match."""
        node = state.node
        phrase = cls.ended_phrase(state)
        if phrase is None or phrase == state.repeat_of:
            return 0.0  # no phrase, or the same phrase again back to back
        if node.phrase is not None:
            return state.provisional
        return min(state.provisional, node.output.potential)  # type: ignore[union-attr]

    def step(self, state: BoostState, token: int) -> tuple[float, BoostState]:
        """Reward for appending ``token`` and the state after it."""
        tokenizer = self.tokenizer
        provisional = state.provisional
        ended = None
        if is_boundary(tokenizer, token):
            provisional -= self.committed(state)  # the phrase ended at a word boundary: keep its bonus
            ended = self.ended_phrase(state)
        if token >= tokenizer.eot:
            return -provisional, self.initial
        node = state.node
        target = self.automaton.goto(node, token, state.word_start)
        repeat_of = None
        if node is not self.automaton.root and target is node.children.get(token):
            reward = target.weight
            provisional += target.weight
            repeat_of = state.repeat_of
        else:  # match broken: revoke what is provisional, grant the fallback's partial match
            reward = target.potential - provisional
            provisional = target.potential
            if target.depth == 1:
                repeat_of = ended  # a new match begins on the token that ended a phrase
        return reward, BoostState(target, provisional, breaks_word(tokenizer, token), repeat_of)

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
        if total:
            # All rows' moves in one scatter (output_size: no device sync to size the row index).
            ids, is_child, value = (torch.cat(parts) for parts in zip(*moves))
            repeats = torch.tensor(counts, device=device)
            rows = torch.repeat_interleave(torch.arange(len(states), device=device), repeats, output_size=total)
            left = provisional[rows] - commit[rows] * boundary[ids]
            # Children earn their weight on top of the provisional bonus; fallbacks replace it.
            bonus[rows, ids] = torch.where(is_child, value, value - left)
        return bonus

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits.add_(self.score(tokens, logits.shape[-1]).to(logits.dtype))
