"""Draft trees: several candidate continuations verified in one target pass.

A tree drafter proposes nodes ``0 .. m-1``, each a token with a parent (``-1``: the verified token
the pass starts from, the *root*). Parents come before their children. One pass feeds
``[root] + nodes`` with each node at position ``start + 1 + depth`` and a mask that lets a node
attend to the cache, the root and its own ancestors only, so every node's logits are exactly what
plain decoding would compute after its path. Greedy verification then walks down from the root,
following the child whose token is the target's argmax, and the accepted path's keys and values
are compacted to consecutive cache positions.

A chain (every node the child of the one before) is the special case the plain speculative loop
already handles; :func:`first_chain` takes that path out of any tree for sampling decodes, whose
verification rule here is the chain one.
"""

from __future__ import annotations

from dataclasses import dataclass
import torch


@dataclass(frozen=True)
class DraftTree:
    """Tree-shaped draft: ``tokens[i]`` hangs below node ``parents[i]`` (``-1`` = the root)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a draft tree needs one parent per token")
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must be -1 or an earlier node")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> list[int]:
        """Depth of every node (children of the root have depth 1)."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return depths

    @property
    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node`` (inclusive)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def positions(self, start: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Absolute positions of ``[root] + nodes`` when the root sits at ``start``."""
        return torch.tensor([start] + [start + d for d in self.depths], device=device)

    def attention_mask(self, start: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Boolean ``(1 + m, start + 1 + m)`` mask (True = attend) of the pass over ``[root] + nodes``."""
        m = len(self.tokens)
        mask = torch.zeros((1 + m, start + 1 + m), dtype=torch.bool)
        mask[:, : start + 1] = True  # the cache and the root
        for i in range(m):
            for node in self.path_to(i):
                mask[1 + i, start + 1 + node] = True
        return mask.to(device)


def verify_greedy_tree(tree: DraftTree, target_logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification of a tree.

    Args:
      tree: the draft.
      target_logits: ``(1 + m, V)`` processed logits; row 0 scores the token after the root, row
        ``1 + i`` the token after node ``i``.

    Returns:
      ``(path, next_token)``: the accepted nodes from the root down, and the target's own token
      after the last of them.
    """
    best = target_logits.argmax(dim=-1).tolist()
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(tree.parents):
        children.setdefault(parent, []).append(i)
    path: list[int] = []
    node = -1
    while True:
        want = best[node + 1]
        follow = next((c for c in children.get(node, ()) if tree.tokens[c] == want), None)
        if follow is None:
            return path, want
        path.append(follow)
        node = follow


def first_chain(tree: DraftTree) -> list[int]:
    """Tokens of the path that always follows a node's first child (the drafter's best guess)."""
    tokens: list[int] = []
    node = -1
    while True:
        child = next((i for i, parent in enumerate(tree.parents) if parent == node), None)
        if child is None:
            return tokens
        tokens.append(tree.tokens[child])
        node = child


def path_prefixes(history: torch.Tensor, tree: DraftTree) -> list[torch.Tensor]:
    """The token prefix each row of a tree pass scores after (for the logits processors).

    Args:
      history: ``(1, L)`` tokens up to and including the root.
    """
    rows = [history]
    for i in range(len(tree)):
        path = [tree.tokens[n] for n in tree.path_to(i)]
        rows.append(torch.cat([history, torch.tensor([path], dtype=history.dtype, device=history.device)], dim=1))
    return rows


def pruned(tree: DraftTree, max_depth: int) -> DraftTree:
    """The nodes of ``tree`` at depth <= ``max_depth`` (parents re-indexed)."""
    keep = [i for i, d in enumerate(tree.depths) if d <= max_depth]
    index = {old: new for new, old in enumerate(keep)}
    return DraftTree(tuple(tree.tokens[i] for i in keep), tuple(index.get(tree.parents[i], -1) for i in keep))
