"""Multi-token-prediction (MTP) draft heads and the drafter that reads them.

A target decoder's final hidden state at position ``t`` already decides token ``t + 1`` (through
the output projection). Draft heads guess the tokens after it from the same state, so drafting
``k`` tokens costs ``k`` small MLPs instead of ``k`` decoder passes. The heads here are
*sequentially dependent* (Hydra-style, Ankner et al. 2024): head ``i`` reads the hidden state and
the embeddings of the ``i`` tokens before its own (the verified token and the earlier heads'
guesses), which Medusa-style independent heads cannot, and it predicts over a reduced **draft
vocabulary** (the most frequent tokens of the training transcripts) so a drafted token pays a
4k-row projection, not the full one. Verification always runs the full target, so decoding stays
lossless whatever the heads guess.

Heads are a property of an :class:`~burble.decoding.model.AutoregressiveModel` that exposes its
hidden states (:class:`HiddenStateModel`); nothing here knows about Whisper. Weights live in a
safetensors file whose metadata holds the :class:`MTPConfig`.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Protocol, Sequence

import torch
from torch import nn

from burble.decoding.logits import sample_from
from burble.decoding.speculative import Draft, TargetRule
from burble.kernels.attention import attention


@dataclass(frozen=True)
class MTPConfig:
    """Shape of a set of draft heads.

    Attributes:
      hidden_size: the target's hidden (and token-embedding) width ``D``.
      num_heads: tokens drafted per pass at most.
      inner_size: width of each head's MLP.
      draft_vocab_size: rows of the draft projection (the draft vocabulary).
      target: name of the target model the heads were trained on (a guard when loading).
      memory_heads: > 0 gives each head a cross-attention with this many heads over the target's
        memory (for Whisper: the last decoder layer's audio keys/values, computed anyway), so a
        head can read the next words from the audio instead of guessing them from the text.
      decoder_inputs: the heads read the target's *decoder inputs* at the chain's positions (the
        token embedding plus what the model adds there: the codec LM's phoneme, slot and frame
        conditioning, ``HiddenStateModel.draft_inputs``) instead of the bare token embeddings.
    """

    hidden_size: int
    num_heads: int = 4
    inner_size: int = 1024
    draft_vocab_size: int = 4096
    target: str = ""
    memory_heads: int = 0
    decoder_inputs: bool = False


@dataclass(frozen=True)
class TreeShape:
    """How an MTP drafter shapes its draft trees.

    Attributes:
      top_k: next tokens considered per expanded node (dynamic trees).
      beam: nodes expanded per depth, the most probable first (dynamic trees).
      max_nodes: nodes in the tree at most (each costs one more position in the verification pass).
      min_probability: nodes whose path probability is below this are dropped (dynamic trees).
      paths: a fixed (static, Medusa-style) tree as rank paths, e.g. ``((0,), (1,), (0, 0))``;
        ``None`` chooses nodes by the heads' probabilities (dynamic).
    """

    top_k: int = 3
    beam: int = 3
    max_nodes: int = 12
    min_probability: float = 0.0
    paths: Optional[tuple[tuple[int, ...], ...]] = None

    def __post_init__(self) -> None:
        if self.top_k < 1 or self.beam < 1 or self.max_nodes < 1:
            raise ValueError("top_k, beam and max_nodes must be >= 1")


class HiddenStateModel(Protocol):
    """An autoregressive model that keeps the final hidden states of its last ``forward``."""

    def last_hidden_states(self) -> tuple[int, torch.Tensor]:
        """``(start, hidden (B, T, D))``: the states of positions ``[start, start + T)``."""
        ...

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """The target's input embeddings ``(..., D)`` of ``tokens`` (what the heads condition on)."""
        ...

    def draft_memory(self) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """Keys and values ``(1, H, S, D / H)`` that memory-attending heads read (``None``: none)."""
        ...

    # Optional: ``draft_range(tokens) -> (lo, hi) | None``, the target ids ``[lo, hi)`` the model can
    # emit after ``tokens`` (a grammar's slot: the codec LM allows one codebook per position). A
    # sampling drafter then scores only those rows of its projection, which is cheaper and puts no
    # draft mass on tokens the target would reject for certain.
    # Optional: ``draft_inputs(tokens, n) -> (n, D)``, the decoder inputs of the last ``n`` of
    # ``tokens`` at their positions (for heads with ``MTPConfig.decoder_inputs``).
    # Optional: ``keep_layer_states(layers)`` and ``last_layer_states() -> (B, T, L, D) | None``, the
    # outputs of those blocks at the positions of ``last_hidden_states`` (for a draft layer with
    # ``EagleConfig.feature_layers``).


# Keys/values of a head's memory, and how many consecutive rows of a training batch read each
# memory (``None``: every row reads the one memory, as when drafting).
Memory = tuple[torch.Tensor, torch.Tensor]


class DraftHead(nn.Module):
    """One head: ``h + W2 SiLU(W1 x) [+ Wo Attn(Wq x, memory)]`` with ``x = [h; e_1 .. e_i]``,
    then the shared draft projection."""

    def __init__(self, hidden_size: int, inner_size: int, num_inputs: int, memory_heads: int = 0) -> None:
        super().__init__()
        width = hidden_size * (1 + num_inputs)
        self.up = nn.Linear(width, inner_size)
        self.down = nn.Linear(inner_size, hidden_size)
        # Zero init: a fresh head starts as the identity on ``h`` and learns only the correction.
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)
        self.memory_heads = memory_heads
        if memory_heads:
            self.query = nn.Linear(width, hidden_size)
            self.out = nn.Linear(hidden_size, hidden_size)
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(
        self, hidden: torch.Tensor, embeddings: torch.Tensor, memory: Optional[Memory] = None, segments: Optional[list[int]] = None
    ) -> torch.Tensor:
        """``hidden (N, D)``, ``embeddings (N, i, D)`` -> the head's state ``(N, D)``.

        Args:
          memory: keys/values ``(M, H, S, d)``; row group ``g`` (``segments[g]`` consecutive rows)
            reads memory ``g``. Without ``segments`` all rows read memory 0.
        """
        x = torch.cat([hidden, embeddings.flatten(1)], dim=-1)
        state = self.mlp_state(hidden, x)
        if not self.memory_heads or memory is None:
            return state
        keys, values = memory
        n, dim = hidden.shape
        q = self.query(x).view(n, self.memory_heads, dim // self.memory_heads).transpose(0, 1)  # (H, N, d)
        groups = [n] if segments is None else segments
        outputs, row = [], 0
        for g, size in enumerate(groups):
            k, v = keys[g].to(q.dtype), values[g].to(q.dtype)
            outputs.append(attention(q[None, :, row : row + size], k[None], v[None])[0])
            row += size
        attended = torch.cat(outputs, dim=1).transpose(0, 1).reshape(n, dim)
        return state + self.out(attended)

    def mlp_state(self, hidden: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The MLP part of :meth:`forward` on ``x = [h; e_1 .. e_i]`` ``(N, (1 + i) D)`` laid out
        already (drafting writes each new input into one buffer instead of concatenating)."""
        # Functional calls, not the submodules': drafting runs this once per drafted token, where
        # two module dispatches cost about as much as the matrix products.
        inner = nn.functional.silu(nn.functional.linear(x, self.up.weight, self.up.bias))
        return hidden + nn.functional.linear(inner, self.down.weight, self.down.bias)


class MTPHeads(nn.Module):
    """``num_heads`` sequentially dependent draft heads over a reduced vocabulary.

    Args:
      config: the heads' shape.
      draft_ids: ``(draft_vocab_size,)`` target token id of each draft-vocabulary row.
    """

    def __init__(self, config: MTPConfig, draft_ids: torch.Tensor) -> None:
        super().__init__()
        if draft_ids.shape != (config.draft_vocab_size,):
            raise ValueError(f"draft_ids must have shape ({config.draft_vocab_size},), got {tuple(draft_ids.shape)}")
        self.config = config
        self.heads = nn.ModuleList(
            DraftHead(config.hidden_size, config.inner_size, num_inputs=i + 1, memory_heads=config.memory_heads)
            for i in range(config.num_heads)
        )
        self.projection = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        self.register_buffer("draft_ids", draft_ids.long().clone())

    def init_projection(self, target_embedding: torch.Tensor) -> None:
        """Start the draft projection from the target's (tied) output rows of the draft vocabulary."""
        with torch.no_grad():
            self.projection.weight.copy_(target_embedding[self.draft_ids].float())

    def forward(
        self, hidden: torch.Tensor, embeddings: torch.Tensor, memory: Optional[Memory] = None, segments: Optional[list[int]] = None
    ) -> torch.Tensor:
        """Teacher-forced logits of every head (training).

        Args:
          hidden: ``(N, D)`` target states at positions ``t``.
          embeddings: ``(N, num_heads, D)`` target embeddings of tokens ``t + 1 .. t + num_heads``.
          memory, segments: see :meth:`DraftHead.forward`.

        Returns:
          ``(num_heads, N, draft_vocab_size)``: head ``i`` scores token ``t + 2 + i``.
        """
        return torch.stack(
            [self.projection(head(hidden, embeddings[:, : i + 1], memory, segments)) for i, head in enumerate(self.heads)]
        )

    @torch.inference_mode()
    def draft(
        self, hidden: torch.Tensor, token: int, embed: "EmbedFn", k: int, stop_token: Optional[int] = None,
        memory: Optional[Memory] = None, allowed: Optional["AllowedFn"] = None,
    ) -> list[int]:
        """Greedy chain draft of at most ``k`` target token ids after ``token``.

        Args:
          hidden: ``(D,)`` the target state whose next token is ``token``.
          token: the verified token that the draft continues.
          embed: the target's token embedding.
          k: tokens to draft (at most ``num_heads``).
          stop_token: stop after drafting this token (end of sequence).
          allowed: see :meth:`draft_sampled` (the argmax is then taken over the allowed ids only).
        """
        return self.draft_sampled(hidden, token, embed, k, choose=lambda logits, drafted, offset: (offset + int(logits.argmax()), None),
                                  stop_token=stop_token, memory=memory, allowed=allowed)[0]

    @torch.inference_mode()
    def draft_sampled(
        self, hidden: torch.Tensor, token: int, embed: "EmbedFn", k: int, *, choose: "ChooseFn",
        stop_token: Optional[int] = None, memory: Optional[Memory] = None,
        allowed: Optional["AllowedFn"] = None,
    ) -> tuple[list[int], list[torch.Tensor]]:
        """A chain of at most ``k`` target token ids after ``token``, each picked by ``choose``.

        Args:
          hidden, token, embed, stop_token, memory: as in :meth:`draft`.
          choose: ``(logits of draft-vocabulary rows [offset, offset + n), tokens drafted so far,
            offset) -> (draft-vocabulary row, its draft distribution or None)``; :meth:`draft`
            takes the argmax, a sampling drafter samples and returns ``q``. A negative row stops.
          allowed: ``(tokens drafted so far) -> (lo, hi) | None``, the target ids the next token
            can be; only the draft rows of ids in ``[lo, hi)`` are projected (``None``: all rows).

        Returns:
          ``(target token ids, the distributions choose returned)``.
        """
        k = min(k, len(self.heads))
        dim = hidden.numel()
        hidden = hidden.reshape(1, dim).to(self.projection.weight.dtype)
        # x = [h; e_0; e_1 ..]: head i reads its first (2 + i) D columns. One buffer with each new
        # input copied into place, not a concatenation per drafted token: at one row a drafted
        # token's cost is mostly the dispatch of its few small ops.
        x = hidden.new_empty(1, dim * (1 + k))
        x[:, :dim] = hidden
        x[:, dim : 2 * dim] = embed(torch.tensor([token], device=hidden.device))
        ids = self.draft_id_list()
        weight = self.projection.weight
        drafted: list[int] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            lo, hi = self.rows_of_ids(allowed(drafted) if allowed is not None else None)
            if hi <= lo:
                break
            head = self.heads[i]
            if head.memory_heads and memory is not None:
                state = head(hidden, x[:, dim : dim * (2 + i)].view(1, 1 + i, dim), memory)
            else:
                state = head.mlp_state(hidden, x[:, : dim * (2 + i)])
            logits = nn.functional.linear(state, weight[lo:hi])[0].float()
            row, dist = choose(logits, drafted, lo)
            if row < 0:
                break
            drafted.append(ids[row])
            if dist is not None:
                dists.append(dist)
            if drafted[-1] == stop_token or i == k - 1:
                break
            x[:, dim * (2 + i) : dim * (3 + i)] = embed(torch.tensor([drafted[-1]], device=hidden.device))
        return drafted, dists

    def rows_of_ids(self, ids: Optional[tuple[int, int]]) -> tuple[int, int]:
        """The draft-vocabulary rows ``[lo, hi)`` of the target ids in ``ids`` (``None``: all rows).

        Exact when ``draft_ids`` is sorted (a range of ids is then a range of rows); otherwise all
        rows, since scoring more rows than needed never makes a draft wrong, only dearer.
        """
        ids_list = self.draft_id_list()
        if ids is None or not self._ids_sorted:
            return 0, len(ids_list)
        return bisect.bisect_left(ids_list, ids[0]), bisect.bisect_left(ids_list, ids[1])

    def draft_id_list(self) -> list[int]:
        """``draft_ids`` on the host, as a list (drafting looks ids up one at a time)."""
        if getattr(self, "_ids_list", None) is None or len(self._ids_list) != self.draft_ids.shape[0]:
            self._ids_list = [int(t) for t in self.draft_ids.tolist()]
            self._ids_sorted = all(a < b for a, b in zip(self._ids_list, self._ids_list[1:]))
        return self._ids_list

    @torch.inference_mode()
    def expand(
        self, hidden: torch.Tensor, contexts: list[list[int]], embed: "EmbedFn", top_k: int, memory: Optional[Memory] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``top_k`` next tokens and log-probabilities after each context (one batched head call).

        Args:
          hidden: ``(D,)`` the target state the draft starts from.
          contexts: token lists of equal length ``i + 1`` (the verified token, then a draft path);
            head ``i`` scores what follows them.

        Returns:
          ``(tokens (n, top_k) target ids, log-probs (n, top_k))``.
        """
        depth = len(contexts[0]) - 1
        n = len(contexts)
        states = hidden.reshape(1, -1).to(self.projection.weight.dtype).expand(n, -1)
        ids = torch.tensor(contexts, device=states.device)
        logits = self.projection(self.heads[depth](states, embed(ids).to(states.dtype), memory)).float()
        logp, index = torch.log_softmax(logits, dim=-1).topk(top_k, dim=-1)
        return self.draft_ids[index], logp

    def draft_tree(
        self, hidden: torch.Tensor, token: int, embed: "EmbedFn", depth: int, shape: "TreeShape", stop_token: Optional[int] = None,
        memory: Optional[Memory] = None,
    ) -> tuple[list[int], list[int]]:
        """A draft tree of depth <= ``depth`` after ``token``: ``(tokens, parents)``.

        Level by level, the ``shape.beam`` most probable nodes of a depth are expanded with their
        ``shape.top_k`` best next tokens (one batched head call per depth); then the
        ``shape.max_nodes`` most probable nodes overall (path probability, the product of the heads'
        probabilities along it: the chance the target accepts that node if the heads are calibrated)
        form the tree, minus any below ``shape.min_probability``. Path probabilities only shrink
        with depth, so a kept node's ancestors are kept too.
        """
        depth = min(depth, len(self.heads))
        # candidates: (log path probability, parent candidate index, token, context tokens)
        candidates: list[tuple[float, int, int, list[int]]] = []
        frontier: list[int] = [-1]
        for d in range(depth):
            contexts = [[token] if f < 0 else candidates[f][3] for f in frontier]
            tokens, logp = self.expand(hidden, contexts, embed, shape.top_k, memory)
            base = [0.0 if f < 0 else candidates[f][0] for f in frontier]
            fresh = []
            for row, f in enumerate(frontier):
                for t, lp in zip(tokens[row].tolist(), logp[row].tolist()):
                    candidates.append((base[row] + lp, f, int(t), contexts[row] + [int(t)]))
                    fresh.append(len(candidates) - 1)
            # Nothing follows the end of the sequence: such nodes are kept but never expanded.
            frontier = [c for c in sorted(fresh, key=lambda c: -candidates[c][0]) if candidates[c][2] != stop_token]
            frontier = frontier[: shape.beam]
            if not frontier:
                break
        floor = math.log(shape.min_probability) if shape.min_probability > 0 else -math.inf
        ranked = sorted(range(len(candidates)), key=lambda c: (-candidates[c][0], c))
        keep = sorted(c for c in ranked[: shape.max_nodes] if candidates[c][0] >= floor)
        index = {c: i for i, c in enumerate(keep)}
        kept = [c for c in keep if candidates[c][1] < 0 or candidates[c][1] in index]
        index = {c: i for i, c in enumerate(kept)}
        return [candidates[c][2] for c in kept], [index.get(candidates[c][1], -1) for c in kept]

    def static_tree(
        self, hidden: torch.Tensor, token: int, embed: "EmbedFn", depth: int, paths: Sequence[Sequence[int]],
        memory: Optional[Memory] = None,
    ) -> tuple[list[int], list[int]]:
        """A fixed-shape (Medusa-style) tree: node ``(r1, .., rd)`` is the ``rd``-th best token of
        head ``d`` after the path ``(r1, .., r(d-1))``. Every prefix of a path must be a path too."""
        nodes: dict[tuple[int, ...], tuple[int, list[int]]] = {(): (-1, [token])}  # path -> (node index, context)
        tokens: list[int] = []
        parents: list[int] = []
        wanted = sorted({tuple(p) for p in paths if 0 < len(p) <= min(depth, len(self.heads))}, key=lambda p: (len(p), p))
        for d in range(1, 1 + max((len(p) for p in wanted), default=0)):
            level = [p for p in wanted if len(p) == d and p[:-1] in nodes]
            if not level:
                break
            parent_paths = sorted({p[:-1] for p in level})
            top = 1 + max(p[-1] for p in level)
            ids, _ = self.expand(hidden, [nodes[q][1] for q in parent_paths], embed, top, memory)
            row_of = {q: i for i, q in enumerate(parent_paths)}
            for p in level:
                t = int(ids[row_of[p[:-1]], p[-1]])
                parent_index, context = nodes[p[:-1]]
                tokens.append(t)
                parents.append(parent_index)
                nodes[p] = (len(tokens) - 1, context + [t])
        return tokens, parents

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in self.state_dict().items() if name != "draft_ids"}
        tensors["draft_ids"] = self.draft_ids.to(torch.int32).contiguous()
        save_file(tensors, str(path), metadata={"mtp_config": json.dumps(asdict(self.config))})

    @classmethod
    def load(cls, path: str | Path, *, dtype: torch.dtype = torch.float32) -> "MTPHeads":
        """Heads from a file written by :meth:`save` (weights cast to ``dtype``)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if "mtp_config" not in meta:
                raise ValueError(f"{path}: not an MTP heads file (no mtp_config metadata)")
            config = MTPConfig(**json.loads(meta["mtp_config"]))
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        # Rows sorted by target id, so that a range of ids is a range of rows (see rows_of_ids).
        order = torch.argsort(tensors["draft_ids"].long())
        tensors["projection.weight"] = tensors["projection.weight"][order]
        heads = cls(config, tensors.pop("draft_ids").long()[order])
        heads.load_state_dict({name: t.to(dtype) for name, t in tensors.items()}, strict=False)
        heads.to(dtype)
        heads.eval()
        return heads


class EmbedFn(Protocol):
    def __call__(self, tokens: torch.Tensor) -> torch.Tensor: ...


class ChooseFn(Protocol):
    def __call__(self, logits: torch.Tensor, drafted: list[int], offset: int) -> tuple[int, Optional[torch.Tensor]]: ...


class AllowedFn(Protocol):
    def __call__(self, drafted: list[int]) -> Optional[tuple[int, int]]: ...


class MTPDrafter:
    """Draft with a model's MTP heads from the hidden state of its last verification pass.

    The generation loop calls :meth:`propose` with the sequence so far, whose last token is the
    verifier's own token: the hidden state of the position before it (from the pass that just
    ran) is what the heads read. After a tree pass that position is the last accepted node's row,
    which the drafter finds by walking its own last tree along the accepted tokens. When no state
    is at hand (the first call with a one-token prompt: no pass has run yet) it proposes nothing
    and the loop decodes one plain step.

    Args:
      model: the target, exposing its hidden states and embeddings.
      heads: the target's draft heads.
      eos_token_id: nothing is drafted after this token.
      tree: draft trees of this shape (``None``: a chain of the heads' best tokens).
      sample: draft a chain *sampled* from the heads, each token from ``q``: the head's logits
        over the full vocabulary (``-inf`` outside the draft vocabulary) through the target's own
        rule (processors, temperature, top-k/top-p), and hand ``q`` to the verifier. Speculative
        sampling then accepts a token with probability ``min(1, p/q)``: on average
        ``sum min(p, q)``, far more than a one-hot draft's ``p(argmax q)`` when the heads have
        learned ``p``. Only for sampling decodes (temperature > 0); ignores ``tree``.
      generator: random source of the sampled drafts (seed it for reproducible runs).
    """

    def __init__(
        self, model: HiddenStateModel, heads: MTPHeads, *, eos_token_id: Optional[int] = None, tree: Optional[TreeShape] = None,
        sample: bool = False, generator: Optional[torch.Generator] = None,
    ) -> None:
        self.model = model
        self.heads = heads
        self.eos_token_id = eos_token_id
        self.tree = tree
        self.sample = sample
        self.generator = generator
        self._row_of: Optional[list[int]] = None
        self._last_tree: Optional[tuple[int, list[int], list[int]]] = None  # (sequence length, tokens, parents)

    def _hidden_row(self, tokens: Sequence[int], start: int) -> int:
        last = self._last_tree
        if last is not None and last[0] - 1 == start:  # the pass that just ran verified our tree
            _, tree_tokens, parents = last
            node = -1
            for token in tokens[last[0] : len(tokens) - 1]:  # the accepted nodes' tokens
                node = next((i for i, p in enumerate(parents) if p == node and tree_tokens[i] == token), -2)
                if node == -2:
                    return -1
            return node + 1
        return len(tokens) - 2 - start

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        if k <= 0 or len(tokens) < 2:
            return Draft([])
        start, hidden = self.model.last_hidden_states()
        if hidden is None:
            return Draft([])
        row = self._hidden_row(tokens, start)
        self._last_tree = None
        if not 0 <= row < hidden.shape[1]:
            return Draft([])
        state, token = hidden[0, row], int(tokens[-1])
        memory = self.model.draft_memory() if self.heads.config.memory_heads else None
        if self.sample:
            return self._sampled_chain(tokens, state, token, k, rule, memory)
        if self.tree is None:
            return Draft(self.heads.draft(state, token, self._chain_inputs(tokens), k, self.eos_token_id, memory,
                                          allowed=self._grammar(tokens)))
        embed = self.model.embed_tokens
        if self.heads.config.decoder_inputs:
            raise ValueError("heads that read decoder inputs draft chains, not trees")
        if self.tree.paths is not None:
            draft_tokens, parents = self.heads.static_tree(state, token, embed, k, self.tree.paths, memory)
        else:
            draft_tokens, parents = self.heads.draft_tree(state, token, embed, k, self.tree, self.eos_token_id, memory)
        self._last_tree = (len(tokens), draft_tokens, parents)
        return Draft(draft_tokens, parents=parents)

    def _grammar(self, tokens: Sequence[int]) -> Optional["AllowedFn"]:
        """The ids the model allows after ``tokens`` plus a drafted chain (``None``: no grammar)."""
        grammar = getattr(self.model, "draft_range", None)
        if grammar is None:
            return None
        prefix = list(tokens)
        return lambda drafted: grammar(prefix + drafted)

    def _chain_inputs(self, tokens: Sequence[int]) -> "EmbedFn":
        """What the heads read of a chain: token embeddings, or with ``decoder_inputs`` the
        decoder inputs at the chain's positions. The heads ask for the chain's tokens one call at
        a time, in order: the verified token (``tokens[-1]``), then each drafted one, each at the
        position after the one before."""
        if not self.heads.config.decoder_inputs:
            return self.model.embed_tokens
        inputs_of = getattr(self.model, "draft_inputs", None)
        if inputs_of is None:
            raise ValueError("heads that read decoder inputs need a model with draft_inputs()")
        sequence = list(tokens[:-1])

        def embed(ids: torch.Tensor) -> torch.Tensor:
            new = [int(t) for t in ids.reshape(-1).tolist()]
            sequence.extend(new)
            return inputs_of(sequence, len(new)).reshape(*ids.shape, -1)

        return embed

    def _sampled_chain(
        self, tokens: Sequence[int], state: torch.Tensor, token: int, k: int, rule: TargetRule, memory: Optional[Memory]
    ) -> Draft:
        vocab_size = int(self.model.vocab_size)  # type: ignore[attr-defined]
        prefix = list(tokens)
        draft_ids = self.heads.draft_ids
        ids = self.heads.draft_id_list()
        if self._row_of is None:  # target id -> draft-vocabulary row (-1: not in it)
            self._row_of = [-1] * vocab_size
            for row, target in enumerate(ids):
                self._row_of[target] = row
        row_of = self._row_of
        temperature = getattr(rule, "plain_temperature", None)

        def place(rows: torch.Tensor, offset: int, fill: float) -> torch.Tensor:
            """A full-vocabulary vector holding ``rows`` at the ids of draft rows ``offset..``, ``fill`` elsewhere."""
            n = rows.shape[0]
            full = torch.full((vocab_size,), fill, dtype=rows.dtype, device=rows.device)
            if ids[offset + n - 1] - ids[offset] == n - 1:  # the rows hold consecutive ids: one slice copy
                full[ids[offset] : ids[offset] + n] = rows
            else:
                full[draft_ids[offset : offset + n]] = rows
            return full

        def choose(logits: torch.Tensor, drafted: list[int], offset: int) -> tuple[int, Optional[torch.Tensor]]:
            if temperature is not None:
                # The rule is softmax(logits / T) alone: over the scored rows (-inf elsewhere) that is
                # their own softmax, so q is computed on them, not on the whole vocabulary.
                q_rows = torch.softmax(logits * (1.0 / temperature), dim=-1)
                return offset + int(sample_from(q_rows, self.generator)), place(q_rows, offset, 0.0)
            q = rule(place(logits, offset, float("-inf")), prefix + drafted)
            if not drafted and bool((q < 0).any()):  # a greedy rule returns logits, not a distribution
                raise ValueError("MTPDrafter(sample=True) needs a sampling decode (temperature > 0): "
                                 "the rule did not return probabilities")
            if not float(q.sum()) > 0.5:  # NaN, or nothing left of the draft vocabulary
                return -1, None
            return row_of[int(sample_from(q, self.generator))], q

        drafted, dists = self.heads.draft_sampled(state, token, self._chain_inputs(tokens), k, choose=choose,
                                                  stop_token=self.eos_token_id, memory=memory,
                                                  allowed=self._grammar(tokens))
        return Draft(drafted, torch.stack(dists) if dists else None)
