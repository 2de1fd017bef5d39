"""Per-hypothesis state of a logits processor, kept in a trie of token prefixes.

Beam search reorders rows every step, so a processor's state (an LM history, a phrase match)
belongs to the hypothesis' token prefix, not to the row. Prefixes form a trie (one node per token,
so memory is O(nodes), not O(nodes x T) of tuple keys). Each call remembers its rows' nodes; a row
of the next call finds its parent by comparing its tokens with those rows on the device (beam
search: a parent of the last step; speculative verification: an ancestor a few tokens up), so a
step costs O(1) per row instead of hashing O(T) prefix tuples. Only a row with no such parent walks
the trie from the root.

Used by :class:`~burble.asr.fusion.shallow_fusion.ShallowFusion` and
:class:`~burble.asr.fusion.boosting.PhraseBooster`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Optional, Sequence, TypeVar

import torch

S = TypeVar("S")


@dataclass(eq=False)
class PrefixNode(Generic[S]):
    """A node of the prefix trie: the state after the ``depth`` tokens on the path to it."""

    state: S
    depth: int
    parent: Optional["PrefixNode[S]"] = None
    children: dict[int, "PrefixNode[S]"] = field(default_factory=dict)

    def ancestor(self, depth: int) -> Optional["PrefixNode[S]"]:
        """The node ``depth`` tokens deep on this node's path (``None`` past a pruned trie's edge)."""
        node: Optional[PrefixNode[S]] = self
        while node is not None and node.depth > depth:
            node = node.parent
        return node if node is not None and node.depth == depth else None


class PrefixTrie(Generic[S]):
    """States of token prefixes: ``begin()`` at the root, ``advance(state, token)`` along each edge.

    Args:
      begin: the state of the empty prefix (called lazily, when a root is needed).
      advance: the state after one more token (pure: a node's state is computed once).
      max_nodes: nodes created before the trie is pruned to the live rows.

    ``len(trie)`` is the number of nodes created since the last pruning.
    """

    def __init__(self, begin: Callable[[], S], advance: Callable[[S, int], S], max_nodes: int) -> None:
        self._begin = begin
        self._advance = advance
        self.max_nodes = max_nodes
        self._root: Optional[PrefixNode[S]] = None
        self._nodes = 0
        # The rows of the last call (a copy: callers may pass views of a buffer they overwrite) and
        # their nodes: the next call's rows find their parents among them.
        self._last_tokens: Optional[torch.Tensor] = None
        self._last_nodes: list[PrefixNode[S]] = []

    def __len__(self) -> int:
        return self._nodes

    def _child(self, node: PrefixNode[S], token: int) -> PrefixNode[S]:
        child = node.children.get(token)
        if child is None:
            child = PrefixNode(self._advance(node.state, token), node.depth + 1, node)
            node.children[token] = child
            self._nodes += 1
        return child

    def walk(self, row: Sequence[int]) -> PrefixNode[S]:
        """The node of a whole row, walked from the root."""
        if self._root is None:
            self._root = PrefixNode(self._begin(), 0)
        node = self._root
        for token in row:
            node = self._child(node, int(token))
        return node

    def row_nodes(self, tokens: torch.Tensor) -> list[PrefixNode[S]]:
        """The node of each row of ``tokens`` ``(B, T)``, from a parent among the last call's rows where there is one."""
        batch, length = tokens.shape
        parent_depth = length - 1
        parents = [-1] * batch
        last = self._last_tokens
        if last is not None and 0 < parent_depth <= last.shape[1] and last.device == tokens.device:
            # Row b's parent prefix is an ancestor of old row j's node when their first
            # ``parent_depth`` tokens agree: a (B, B_last) comparison on the device, one transfer.
            same = (tokens[:, None, :parent_depth] == last[None, :, :parent_depth]).all(dim=-1)
            first = torch.where(same.any(dim=1), same.to(torch.int8).argmax(dim=1), -1)
            parents = first.tolist()
        last_tokens = tokens[:, -1].tolist() if length else []
        nodes = []
        for b in range(batch):
            parent = self._last_nodes[parents[b]].ancestor(parent_depth) if parents[b] >= 0 else None
            nodes.append(self._child(parent, last_tokens[b]) if parent is not None else self.walk(tokens[b].tolist()))
        if self._nodes > self.max_nodes:
            # Prune to the live rows: their nodes stay reachable from the memo, the trie starts afresh.
            self._root = None
            for node in nodes:
                node.parent = None
                node.children = {}
            self._nodes = len({id(node) for node in nodes})
        self._last_tokens = tokens.clone()
        self._last_nodes = nodes
        return nodes
