"""The phrase automaton of :mod:`burble.asr.fusion.boosting`: Aho-Corasick over BPE token sequences.

Every token sequence of every phrase (:mod:`burble.asr.fusion.tokenizations`) is a path of one
trie; failure links turn it into an Aho-Corasick automaton, so a match can start at any token and
a broken match falls back to the longest phrase prefix that is still a suffix of the output.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

import torch


@dataclass(eq=False)
class Node:
    """A state of the automaton: a prefix of one or more phrases' token sequences."""

    depth: int
    weight: float = 0.0  # bonus of the token leading here
    potential: float = 0.0  # sum of weights from the root
    anchored: bool = False  # the path starts without a leading space: only valid at a word start
    children: dict[int, "Node"] = field(default_factory=dict)
    fail: Optional["Node"] = None
    phrase: Optional[int] = None  # index of the phrase a token sequence ends here
    output: Optional["Node"] = None  # nearest proper suffix state that ends a phrase
    # Memo of PhraseAutomaton.moves per (word_start, vocab size, device).
    moves: dict[tuple[bool, int, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)


class PhraseAutomaton:
    """Aho-Corasick automaton over token sequences.

    A surface form whose first token has no leading space (``"Akerman"`` at the start of a text
    or after an opening quote) is *anchored*: it may only begin at a word start, so the automaton
    never enters it from inside a word (``" Bl" "ak" "erman"`` is not the phrase ``akerman``).

    Each sequence says which *potential* (bonus earned so far) each of its prefixes carries:
    ``weight * (i + 1)`` after token ``i`` for a per-token bonus, or ``None`` for "what the prefix
    before it had" (an alternative BPE split earns nothing until its last token, which brings the
    phrase's whole bonus: it cannot lure the search into a common short piece, yet a hypothesis
    that spells the phrase that way gets the same bonus as the canonical spelling). A node
    shared by several sequences takes the largest potential; potentials never decrease along a
    path, and a node's weight is its potential minus its parent's.

    Args:
      sequences: ``(tokens, potentials, phrase_index)``, one potential (or ``None``) per token.
      anchored_first: predicate telling whether a first token lacks a leading space.
    """

    def __init__(
        self,
        sequences: Iterable[tuple[Sequence[int], Sequence[Optional[float]], int]],
        anchored_first: Callable[[int], bool],
    ) -> None:
        self.root = Node(depth=0)
        targets: dict[int, float] = {}  # id(node) -> the largest potential a sequence asked for
        for tokens, potentials, index in sequences:
            if not tokens:
                continue
            if len(potentials) != len(tokens):
                raise ValueError("one potential (or None) per token")
            node = self.root
            for token, potential in zip(tokens, potentials):
                child = node.children.get(token)
                if child is None:
                    anchored = node.anchored if node is not self.root else bool(anchored_first(token))
                    child = node.children[token] = Node(depth=node.depth + 1, anchored=anchored)
                if potential is not None:
                    targets[id(child)] = max(targets.get(id(child), 0.0), potential)
                node = child
            if node.phrase is None:
                node.phrase = index
        self._link(targets)

    def _link(self, targets: dict[int, float]) -> None:
        """Breadth-first: potentials and weights, failure links and output links (anchored states excluded)."""
        queue: deque[Node] = deque()
        for child in self.root.children.values():
            child.fail = self.root
            child.potential = child.weight = targets.get(id(child), 0.0)
            queue.append(child)
        while queue:
            node = queue.popleft()
            for token, child in node.children.items():
                child.potential = max(node.potential, targets.get(id(child), node.potential))
                child.weight = child.potential - node.potential
                fallback = node.fail
                while fallback is not None and not self._enterable(fallback.children.get(token)):
                    fallback = fallback.fail
                child.fail = fallback.children[token] if fallback is not None else self.root
                suffix = child.fail
                child.output = suffix if suffix.phrase is not None else suffix.output
                queue.append(child)

    @staticmethod
    def _enterable(node: Optional[Node], word_start: bool = False) -> bool:
        """Whether a fallback may land on ``node``: an anchored path only from the root at a word start."""
        return node is not None and (not node.anchored or (node.depth == 1 and word_start))

    def goto(self, node: Node, token: int, word_start: bool) -> Node:
        """The transition on ``token`` (the root when no phrase prefix survives)."""
        if node is not self.root:
            child = node.children.get(token)
            if child is not None:
                return child  # a match in progress continues (it began legitimately)
        walk: Optional[Node] = node.fail if node is not self.root else node
        while walk is not None:
            child = walk.children.get(token)
            if self._enterable(child, word_start):
                return child  # type: ignore[return-value]
            walk = walk.fail
        return self.root

    def moves(
        self, node: Node, word_start: bool, vocab_size: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Tokens below ``vocab_size`` leading away from the root: ids, whether each is a child of
        ``node``, and the target's weight (children) or potential (fallbacks), on ``device``.

        Memoised per node: a decoding step then moves no tensors to the device."""
        key = (word_start, vocab_size, device)
        if key not in node.moves:
            targets: dict[int, Node] = dict(node.children) if node is not self.root else {}
            walk: Optional[Node] = node.fail if node is not self.root else node
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
