"""An EAGLE-style draft layer: drafts at the level of the target's features, one layer per token.

MTP heads (:mod:`burble.decoding.mtp`) guess token ``t + 2 + i`` from one target state with an
MLP per distance, and their guesses beyond the next token are rarely right. The draft layer here
(after Li et al., *EAGLE*, 2024) instead predicts the target's next **feature** (its final-norm
hidden state) from the current feature and the next token's embedding:

    g_{t+1} = Layer(fc([f_t; e(x_{t+1})]))        logits of x_{t+2} = P g_{t+1}

and drafts a chain by feeding its own predictions back in. The layer is a pre-norm decoder
block like the target's (self-attention over the positions drafted so far, cross-attention over
the target's memory, an MLP), started from the target's last block. Cross-attention reads the
keys/values the target has already computed (``HiddenStateModel.draft_memory``: for Whisper the
last decoder layer's projection of the audio), so the drafter sees the audio for free.

Its self-attention cache holds one entry per position: entries made from the target's true
features (positions the target has verified) are kept across passes; entries of drafted positions
are dropped when the next pass arrives. A drafted token costs one layer over one row plus the
projection ``P`` onto the draft vocabulary (the most frequent target tokens): rows started from the
target's own output embedding and fine-tuned with the layer (it learned faster than with the
target's rows frozen), shipped in the layer's file.

With ``EagleConfig.feature_layers`` (after Li et al., *EAGLE-3*, 2025) the input feature of a
verified position is not its final-norm state alone but a learned fusion of it with the outputs of
earlier target blocks (``fc`` of their concatenation, started as the identity on the final-norm
state); the target keeps those outputs of every pass (``keep_layer_states``). Drafted positions
still feed back predicted final-norm features.

Training (``recipes/mtp_heads``, ``--drafter eagle``) unrolls the chain: pass ``s`` of
:meth:`EagleLayer.unrolled` feeds back pass ``s - 1``'s predictions and attends to exactly the
entries drafting would have (true features up to the last verified position, its own drafted
entries after it), so what is trained is what drafts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from burble.decoding.mtp import HiddenStateModel, Memory
from burble.decoding.speculative import Draft, TargetRule
from burble.kernels.attention import attention


@dataclass(frozen=True)
class EagleConfig:
    """Shape of a draft layer.

    Attributes:
      hidden_size: the target's feature (and embedding) width ``D``.
      num_attention_heads: heads of both attentions (cross-attention must match the memory's).
      mlp_size: inner width of the MLP.
      draft_vocab_size: rows of the draft projection.
      target: name of the target model it was trained on (a guard when loading).
      feature_layers: target blocks whose outputs are fused with the final-norm feature of a
        verified position (EAGLE-3's low-, mid- and high-level features); empty: the final-norm
        feature alone. The target must keep them (``keep_layer_states``).
    """

    hidden_size: int
    num_attention_heads: int
    mlp_size: int
    draft_vocab_size: int = 4096
    target: str = ""
    feature_layers: tuple[int, ...] = ()


def _layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight.to(x.dtype), norm.bias.to(x.dtype), norm.eps)


def _linear(x: torch.Tensor, layer: nn.Linear) -> torch.Tensor:
    """``layer(x)`` in the weights' dtype, returned in ``x``'s. Drafting keeps float16 weights and
    float32 activations: on the CPUs here a one-row float16 product from a cold cache runs several
    times faster than float32 (it reads half the bytes), and drafting is a chain of such rows."""
    weight = layer.weight
    return F.linear(x.to(weight.dtype), weight, layer.bias).to(x.dtype)


class EagleLayer(nn.Module):
    """``fc([f; e])`` through one pre-norm decoder block: the predicted next feature (a residual
    stream that regresses onto the target's final-norm states, so no norm of its own).

    Args:
      config: the layer's shape.
      draft_ids: ``(draft_vocab_size,)`` target token id of each draft-vocabulary row.
    """

    def __init__(self, config: EagleConfig, draft_ids: torch.Tensor) -> None:
        super().__init__()
        if draft_ids.shape != (config.draft_vocab_size,):
            raise ValueError(f"draft_ids must have shape ({config.draft_vocab_size},), got {tuple(draft_ids.shape)}")
        d = config.hidden_size
        self.config = config
        self.fc = nn.Linear(2 * d, d)
        self.attn_ln, self.cross_ln, self.mlp_ln = (nn.LayerNorm(d) for _ in range(3))
        self.query, self.key, self.value, self.out = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d), nn.Linear(d, d)
        self.cross_query, self.cross_out = nn.Linear(d, d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, config.mlp_size), nn.Linear(config.mlp_size, d)
        self.register_buffer("draft_ids", draft_ids.long().clone())
        # The fusion of a verified position's block outputs and final-norm feature into one feature
        # (drafted positions feed back predicted features, which live in the final-norm space).
        self.fuse: Optional[nn.Linear] = None
        if config.feature_layers:
            parts = len(config.feature_layers) + 1
            self.fuse = nn.Linear(parts * d, d)
            self.register_buffer("feature_scales", torch.ones(parts))  # each part's typical size
        # Draft-vocabulary output rows, started from the target's own (``init_projection``) and
        # fine-tuned with the layer: a layer that must land on the target's rows exactly learns slower.
        self.projection = nn.Parameter(torch.zeros(config.draft_vocab_size, d))

    # -- weights --------------------------------------------------------------------------------

    def init_from_block(self, block: nn.Module) -> None:
        """Start from a target decoder block with Whisper's layout (``attn``, ``cross_attn``, ``mlp``
        and their norms), its three output projections zeroed, and ``fc`` passing ``f`` through: a
        fresh layer predicts ``f_{t+1} = f_t`` and learns the change (like a fresh MTP head)."""
        d = self.config.hidden_size
        pairs = [
            (self.attn_ln, block.attn_ln), (self.cross_ln, block.cross_attn_ln), (self.mlp_ln, block.mlp_ln),
            (self.query, block.attn.query), (self.key, block.attn.key), (self.value, block.attn.value),
            (self.cross_query, block.cross_attn.query), (self.up, block.mlp[0]),
        ]
        with torch.no_grad():
            for mine, theirs in pairs:
                mine.weight.copy_(theirs.weight.float())
                if mine.bias is not None:
                    mine.bias.copy_(theirs.bias.float())
            for projection in (self.out, self.cross_out, self.down):
                projection.weight.zero_()
                projection.bias.zero_()
            self.fc.weight.copy_(torch.cat([torch.eye(d), torch.zeros(d, d)], dim=1))
            self.fc.bias.zero_()

    def init_fuse(self, feature_scales: torch.Tensor) -> None:
        """Start the fusion as the identity on the final-norm feature (a fresh fused layer drafts
        like an unfused one), its inputs divided by ``feature_scales`` ``(len(feature_layers) + 1,)``:
        the block outputs are ~50x smaller than the final-norm states."""
        if self.fuse is None:
            raise ValueError("this layer fuses no block outputs (feature_layers is empty)")
        d = self.config.hidden_size
        with torch.no_grad():
            self.feature_scales.copy_(feature_scales)
            self.fuse.weight.zero_()
            self.fuse.bias.zero_()
            self.fuse.weight[:, -d:] = torch.eye(d) * float(feature_scales[-1])

    def features(self, final: torch.Tensor, block_outputs: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The input features of verified positions: their final-norm states ``(..., D)``, fused
        with the kept block outputs ``(..., L, D)`` when the layer has ``feature_layers``."""
        if self.fuse is None:
            return final
        if block_outputs is None:
            raise ValueError("this layer fuses block outputs: pass the target's kept block outputs")
        parts = torch.cat([block_outputs.to(final.dtype), final.unsqueeze(-2)], dim=-2)
        parts = parts / self.feature_scales[:, None].to(final.dtype)
        return _linear(parts.flatten(-2), self.fuse)

    def init_projection(self, target_embedding: torch.Tensor) -> None:
        """Start the projection from the draft rows of the target's (tied) output embedding ``(V, D)``."""
        with torch.no_grad():
            self.projection.copy_(target_embedding[self.draft_ids.to(target_embedding.device)].to(self.projection.dtype))

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of predicted features ``(..., D)`` (in the features' dtype)."""
        return F.linear(features.to(self.projection.dtype), self.projection).to(features.dtype)

    # -- the block -----------------------------------------------------------------------------

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.config.num_attention_heads
        return x.view(b, t, h, d // h).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, e = x.shape
        return x.transpose(1, 2).reshape(b, t, h * e)

    def _input(self, features: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
        return _linear(torch.cat([features, embeddings.to(features.dtype)], dim=-1), self.fc)

    def _after_self_attention(self, x: torch.Tensor, attended: torch.Tensor, memory: Memory) -> torch.Tensor:
        """The rest of the block once self-attention has produced ``attended`` ``(B, H, T, d)``."""
        x = x + _linear(self._merge(attended), self.out)
        q = self._heads(_linear(_layer_norm(x, self.cross_ln), self.cross_query))
        keys, values = memory
        x = x + _linear(self._merge(attention(q, keys.to(q.dtype), values.to(q.dtype))), self.cross_out)
        return x + _linear(F.gelu(_linear(_layer_norm(x, self.mlp_ln), self.up)), self.down)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = _layer_norm(x, self.attn_ln)
        return self._heads(_linear(h, self.query)), self._heads(_linear(h, self.key)), self._heads(_linear(h, self.value))

    def unrolled(self, features: torch.Tensor, embeddings: torch.Tensor, memory: Memory, passes: int) -> list[torch.Tensor]:
        """Teacher-forced chains of ``passes`` drafted tokens at every position (training, evaluation).

        Args:
          features: ``(B, T, D)`` target features ``f_0 .. f_{T-1}`` (rows past a sequence's end are
            padding: causal attention keeps them away from the real rows).
          embeddings: ``(B, T, D)`` embeddings of the tokens that follow them, ``x_1 .. x_T``.
          memory: keys/values ``(B, H, S, d)``.
          passes: drafting steps to unroll.

        Returns:
          per pass ``s`` (0-based) predicted features ``(B, T, D)``: row ``i`` is the prediction of
          ``f_{i+1}`` made ``s`` steps after the last verified position ``i - s``, i.e. from the
          pass-``s - 1`` prediction at row ``i - 1`` and, in self-attention, the true-feature entries
          up to ``i - s`` and the entries drafted after it. Its logits score token ``x_{i+2}``.
        """
        t = features.shape[1]
        rows = torch.arange(t, device=features.device)
        outputs: list[torch.Tensor] = []
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        inputs = features
        for s in range(passes):
            if s:  # the previous pass's prediction at row i - 1 is this pass's input feature at row i
                inputs = torch.cat([features[:, :1], outputs[-1][:, :-1]], dim=1)
            x = self._input(inputs, embeddings)
            q, k, v = self._qkv(x)
            keys.append(k)
            values.append(v)
            # Query i of pass s sees pass 0's keys j <= i - s and pass r's key at i - s + r (r = 1..s).
            allowed = [rows[None, :] <= rows[:, None] - s] + [rows[None, :] == rows[:, None] - s + r for r in range(1, s + 1)]
            mask = torch.cat(allowed, dim=1)
            attended = attention(q, torch.cat(keys, dim=2), torch.cat(values, dim=2), mask=mask)
            outputs.append(self._after_self_attention(x, attended, memory))
        return outputs

    # -- persistence ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in self.state_dict().items() if name != "draft_ids"}
        tensors["draft_ids"] = self.draft_ids.to(torch.int32).contiguous()
        save_file(tensors, str(path), metadata={"eagle_config": json.dumps(asdict(self.config))})

    @classmethod
    def load(cls, path: str | Path, *, dtype: torch.dtype = torch.float16) -> "EagleLayer":
        """A layer from a file written by :meth:`save`, its weights in ``dtype`` (activations stay
        in the caller's dtype: see ``_linear``)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if "eagle_config" not in meta:
                raise ValueError(f"{path}: not a draft-layer file (no eagle_config metadata)")
            fields = json.loads(meta["eagle_config"])
            config = EagleConfig(**fields | {"feature_layers": tuple(fields.get("feature_layers", ()))})
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        layer = cls(config, tensors.pop("draft_ids").long())
        layer.load_state_dict({name: t.to(dtype) for name, t in tensors.items()} | {"draft_ids": layer.draft_ids})
        return layer.to(dtype).eval().requires_grad_(False)


class EagleDrafter:
    """Greedy chains from a draft layer, for one decode (make a new drafter per decode).

    The generation loop calls :meth:`propose` with the sequence so far, whose last token is the
    verifier's own. The target's pass that just ran holds the true features of the positions it
    verified; the drafter first adds those positions to its cache (one call over all of them),
    then drafts token by token from its own predictions. The first call starts the cache at the
    position before the last token (the prompt's last position, where training starts too); if a
    later pass skipped positions (another drafter drafted them), the cache restarts at that pass.

    Args:
      model: the target, exposing its features, embeddings and memory.
      layer: the trained draft layer.
      eos_token_id: nothing is drafted after this token.
      min_probability: stop the chain before a token the layer gives less than this probability
        (the first token is always drafted): an unlikely token costs a drafting step and a
        verification row and is rarely accepted.
      max_tokens: draft at most this many tokens a pass, whatever the loop's ``k`` (``None``: ``k``).
      first_candidates: with more than 1, the draft is a tree: the chain, and beside its first token
        the layer's next-best ``first_candidates - 1`` guesses as leaves (verified in the same pass,
        for a model that scores trees). The first position is where the layer is wrong most often.
    """

    def __init__(
        self, model: HiddenStateModel, layer: EagleLayer, *, eos_token_id: Optional[int] = None, min_probability: float = 0.0,
        max_tokens: Optional[int] = None, first_candidates: int = 1,
    ) -> None:
        if first_candidates < 1:
            raise ValueError("first_candidates must be >= 1")
        self.model, self.layer, self.eos_token_id = model, layer, eos_token_id
        self.min_probability = min_probability
        self.max_tokens = max_tokens
        # Leaves only where the loop can verify a tree (greedy passes of a model with forward_tree).
        self.first_candidates = first_candidates if hasattr(model, "forward_tree") else 1
        if layer.config.feature_layers:
            keep = getattr(model, "keep_layer_states", None)
            if keep is None:
                raise ValueError("this draft layer fuses block outputs, and the target keeps none (no keep_layer_states)")
            keep(layer.config.feature_layers)
        self._alternatives: list[int] = []  # the last tree's first-position leaves
        self._tree_root = -1  # the position its pass started from
        self._first: Optional[int] = None  # absolute position of cache entry 0
        self._verified = 0  # cache entries made from true features (the rest were drafts)
        self._length = 0  # cache entries in use
        self._keys: Optional[torch.Tensor] = None  # (1, H, capacity, d)
        self._values: Optional[torch.Tensor] = None
        self._ids = [int(t) for t in layer.draft_ids.tolist()]

    def _attend(self, x: torch.Tensor, memory: Memory) -> torch.Tensor:
        """Run rows ``x`` ``(1, n, D)`` after the cache's entries, append theirs, return the outputs."""
        layer = self.layer
        q, k, v = layer._qkv(x)
        n, end = x.shape[1], self._length + x.shape[1]
        if self._keys is None or end > self._keys.shape[2]:
            capacity = max(64, 2 * end)
            keys = k.new_zeros(1, k.shape[1], capacity, k.shape[3])
            values = torch.zeros_like(keys)
            if self._keys is not None:
                keys[:, :, : self._length] = self._keys[:, :, : self._length]
                values[:, :, : self._length] = self._values[:, :, : self._length]  # type: ignore[index]
            self._keys, self._values = keys, values
        self._keys[:, :, self._length : end] = k
        self._values[:, :, self._length : end] = v  # type: ignore[index]
        self._length = end
        attended = attention(q, self._keys[:, :, :end], self._values[:, :, :end], is_causal=n > 1)  # type: ignore[index]
        return layer._after_self_attention(x, attended, memory)

    @torch.inference_mode()
    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        k = k if self.max_tokens is None else min(k, self.max_tokens)
        if k <= 0 or len(tokens) < 2:
            return Draft([])
        start, hidden = self.model.last_hidden_states()
        last = len(tokens) - 2  # the newest position with a true feature (it chose tokens[-1])
        if hidden is None or not start <= last < start + hidden.shape[1]:
            return Draft([])
        seen = None if self._first is None else self._first + self._verified  # first position not in the cache
        if seen is None or seen > last:  # a new decode: start where training starts, at the prompt's end
            self._first, self._verified = last, 0
        elif seen < start:  # verified positions this drafter never saw (another drafter's): restart here
            self._first, self._verified = start, 0
        self._length = self._verified  # drop the entries of the last chain's drafted positions
        first_new = self._first + self._verified
        layer = self.layer
        embed = self.model.embed_tokens
        rows = self._rows(tokens, start, first_new, last, hidden.shape[1])
        features = hidden[0, rows].float()[None]
        if layer.fuse is not None:
            kept = self.model.last_layer_states()  # type: ignore[attr-defined]
            if kept is None:  # a pass that kept none (a batch of rows): nothing to start from
                return Draft([])
            features = layer.features(features, kept[0, rows].float()[None])
        following = torch.tensor([list(tokens[first_new + 1 : last + 2])], device=features.device)
        memory = self.model.draft_memory()
        predicted = self._attend(layer._input(features, embed(following)), memory)[:, -1:]
        self._verified = last + 1 - self._first
        drafted: list[int] = []
        self._alternatives, self._tree_root = [], len(tokens) - 1
        while True:
            logits = layer.logits(predicted[0, 0]).float()
            best = int(logits.argmax())
            if drafted and self.min_probability > 0 and float(torch.softmax(logits, dim=-1)[best]) < self.min_probability:
                return self._draft(drafted)
            if not drafted and self.first_candidates > 1:
                ranked = logits.topk(min(self.first_candidates, logits.shape[0])).indices.tolist()
                self._alternatives = [self._ids[i] for i in ranked[1:]]
            drafted.append(self._ids[best])
            if len(drafted) == k or drafted[-1] == self.eos_token_id:
                return self._draft(drafted)
            token = torch.tensor([[drafted[-1]]], device=predicted.device)
            predicted = self._attend(layer._input(predicted, embed(token)), memory)

    def _draft(self, chain: list[int]) -> Draft:
        """The chain, or a tree of the chain (nodes first, so a pass cut short keeps its prefix)
        and the first position's other candidates as leaves (last: see :meth:`_rows`)."""
        if not self._alternatives:
            return Draft(chain)
        parents = list(range(-1, len(chain) - 1)) + [-1] * len(self._alternatives)
        return Draft(chain + self._alternatives, parents=parents)

    def _rows(self, tokens: Sequence[int], start: int, first: int, last: int, rows: int) -> list[int]:
        """Rows of the last pass's hidden states holding positions ``first .. last`` (its root at ``start``).

        A chain pass holds them in order. A tree pass does too while it accepted the chain; when it
        accepted one of the first-position leaves, that leaf is among the pass's last rows (the
        leaves follow the chain, which a pass may have cut to fewer nodes).
        """
        positions = list(range(first - start, last + 1 - start))
        if self._tree_root == start and last > start and tokens[start + 1] in self._alternatives:
            leaf_row = rows - len(self._alternatives) + self._alternatives.index(tokens[start + 1])
            positions = [leaf_row if p == 1 else p for p in positions]
        return positions


def chain_acceptance(correct: list[torch.Tensor]) -> torch.Tensor:
    """Tokens one verification pass accepts per position, bonus included, from per-pass correctness
    ``(N,)`` (pass ``s`` right about its token): ``1 +`` the run of correct passes from the first."""
    runs = torch.cumprod(torch.stack([c.int() for c in correct], dim=1), dim=1).sum(dim=1)
    return 1.0 + runs.float()

