"""Whisper in PyTorch: audio encoder, text decoder, and the decoder bound to one audio.

Parameter names follow OpenAI's checkpoints (``encoder.blocks.0.attn.query.weight``...), so an
OpenAI ``.pt`` state dict loads as is and the other loaders (CTranslate2, Hugging Face) map onto
the same names. Every attention call goes through :func:`burble.kernels.attention.attention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from burble.asr.whisper.attention_record import CrossAttentionRecord
from burble.decoding.kv_cache import KVCache
from burble.kernels.attention import KeysValues, KeyValueSegments, attention, segmented_attention
from burble.kernels.linear import MAX_PACKED_ROWS, fused_linear, linear, weight_linear
from burble.kernels.screened_projection import Int8Table, ScreenPolicy, screened_logits


@dataclass(frozen=True)
class WhisperDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def multilingual(self) -> bool:
        return self.n_vocab >= 51865


class LayerNorm(nn.LayerNorm):
    """Layer norm computed in float32 whatever the model's dtype (half-precision variance loses
    the small activations), returned in the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = None if self.weight is None else self.weight.float()
        bias = None if self.bias is None else self.bias.float()
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).type(x.dtype)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, state = x.shape
        return x.view(batch, length, self.n_head, state // self.n_head).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, -1)

    def project_kv(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split_heads(self.key(source)), self.split_heads(self.value(source))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        n_mlp = n_state * 4
        self.mlp = nn.Sequential(nn.Linear(n_state, n_mlp), nn.GELU(), nn.Linear(n_mlp, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward_encoder(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attn_ln(x)
        q, k, v = (self.attn.split_heads(p(h)) for p in (self.attn.query, self.attn.key, self.attn.value))
        x = x + self.attn.out(self.attn.merge_heads(attention(q, k, v)))
        return x + self.mlp(self.mlp_ln(x))

    def forward_decoder(
        self,
        x: torch.Tensor,
        cache: KVCache,
        layer: int,
        start: int | torch.Tensor,
        attn_mask: Optional[torch.Tensor] = None,
        capture_heads: Optional[list[int]] = None,
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        # Every projection of the decoded tokens goes through kernels.linear: a pass of 2-64 rows
        # (speculative verification, a batch of streams) costs about what a one-row step does there,
        # and the query, key and value are one product over their stacked weights.
        h = self.attn_ln(x)
        q, k, v = (self.attn.split_heads(p) for p in fused_linear(h, self.attn, (self.attn.query, self.attn.key, self.attn.value)))
        if isinstance(start, torch.Tensor):  # each row at its own position (ragged batch)
            k_all, v_all = cache.write_rows(layer, start, k, v)
        else:
            k_all, v_all = cache.write(layer, start, k, v)
        out = attention(q, k_all, v_all, is_causal=attn_mask is None, mask=attn_mask)
        x = x + linear(self.attn.merge_heads(out), self.attn.out)

        assert self.cross_attn is not None and self.cross_attn_ln is not None
        h = self.cross_attn_ln(x)
        q = self.cross_attn.split_heads(linear(h, self.cross_attn.query))
        if cache.cross_rows is not None:  # rows of different streams: each attends to its own audio
            per_row = [_cross_attention(q[b : b + 1], row[layer], capture_heads) for b, row in enumerate(cache.cross_rows)]
            out = torch.cat([row_out for row_out, _ in per_row])
            scores = [row_scores for _, row_scores in per_row]
        else:
            out, one = _cross_attention(q, cache.cross[layer], capture_heads)
            scores = [one]
        x = x + linear(self.cross_attn.merge_heads(out), self.cross_attn.out)
        weights = None
        if capture_heads:
            frames = max(s.shape[-1] for s in scores)  # rows' own lengths, right-padded (read up to them only)
            weights = torch.cat([F.pad(s, (0, frames - s.shape[-1])) for s in scores])  # type: ignore[union-attr]
        up, act, down = self.mlp
        return x + linear(act(linear(self.mlp_ln(x), up)), down), weights


def _cross_attention(
    q: torch.Tensor, source: KeysValues, capture_heads: Optional[list[int]]
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Cross-attention of ``q`` over one audio's K/V (batch 1 serves every row), and the scaled
    scores (float32) of ``capture_heads`` when asked.

    Word timing needs the cross-attention *weights* of a few alignment heads; the fused op returns
    only outputs, so over whole K/V those heads' scores are computed on the side (segmented K/V
    compute every score anyway).
    """
    if isinstance(source, KeyValueSegments):
        return segmented_attention(q, source, keep_heads=capture_heads)
    k, v = source
    if k.shape[0] != q.shape[0]:
        k, v = k.expand(q.shape[0], -1, -1, -1), v.expand(q.shape[0], -1, -1, -1)
    out = attention(q, k, v)
    if not capture_heads:
        return out, None
    return out, (q[:, capture_heads] @ k[:, capture_heads].transpose(-1, -2)).float() * q.shape[-1] ** -0.5


class AudioEncoder(nn.Module):
    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        # Stored, not recomputed: converted checkpoints carry the exact table the model was trained with.
        self.register_buffer("positional_embedding", torch.zeros(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList(
            ResidualAttentionBlock(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer)
        )
        self.ln_post = LayerNorm(dims.n_audio_state)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """``mel`` ``(B, n_mels, 3000)`` -> audio states ``(B, 1500, n_audio_state)``."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        if x.shape[1] > self.positional_embedding.shape[0]:
            raise ValueError(f"audio too long for the encoder: {x.shape[1]} frames")
        x = x + self.positional_embedding[: x.shape[1]].to(x.dtype)
        for block in self.blocks:
            x = block.forward_encoder(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.dims = dims
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        self.positional_embedding = nn.Parameter(torch.zeros(dims.n_text_ctx, dims.n_text_state))
        self.blocks = nn.ModuleList(
            ResidualAttentionBlock(dims.n_text_state, dims.n_text_head, cross_attention=True)
            for _ in range(dims.n_text_layer)
        )
        self.ln = LayerNorm(dims.n_text_state)
        self._embedding_t: Optional[torch.Tensor] = None  # lazily made by project_logits (CPU)
        self._int8_embedding: Optional[Int8Table] = None  # lazily made by int8_embedding (CPU)

    def cross_kv(self, audio_features: torch.Tensor, num_layers: Optional[int] = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        blocks = self.blocks[: num_layers or len(self.blocks)]
        # Contiguous copies: every decode step reads them whole, and SDPA is ~3x slower on strided K/V.
        pairs = [block.cross_attn.project_kv(audio_features) for block in blocks]  # type: ignore[union-attr]
        return [(k.contiguous(), v.contiguous()) for k, v in pairs]

    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache,
        *,
        num_layers: Optional[int] = None,
        attn_mask: Optional[torch.Tensor] = None,
        capture: Optional[dict[int, list[int]]] = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Decode ``tokens`` ``(B, T)`` after ``cache.length`` cached positions.

        Args:
          num_layers: run only the first layers (early-exit self-drafting); final norm and output
            projection are shared with the full model.
          attn_mask: explicit self-attention mask over ``[0, start+T)`` instead of causal.
          capture: ``{layer: [heads]}`` whose scaled cross-attention scores (pre-softmax) to return.

        Returns:
          ``(logits (B, T, V) float32, captured weights)``.
        """
        hidden, captured = self.hidden_states(
            tokens, cache, num_layers=num_layers, attn_mask=attn_mask, capture=capture
        )
        return self.project_logits(hidden), captured

    def hidden_states(
        self,
        tokens: torch.Tensor,
        cache: KVCache,
        *,
        num_layers: Optional[int] = None,
        attn_mask: Optional[torch.Tensor] = None,
        capture: Optional[dict[int, list[int]]] = None,
        positions: Optional[torch.Tensor] = None,
        row_starts: Optional[torch.Tensor] = None,
        block_outputs: Optional[list[torch.Tensor]] = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Like :meth:`forward`, but return the final-norm states ``(B, T, D)`` the logits are
        projected from (what multi-token-prediction draft heads read) instead of the logits.

        Args:
          positions: ``(T,)`` absolute positions of ``tokens`` (a draft tree's nodes share
            depths); default ``cache.length ..``.
          row_starts: ``(B,)`` each row's own first position (a ragged batch); the rows attend
            causally to their own positions only, and ``cache.length`` becomes the last row's end.
          block_outputs: a list to append each block's output ``(B, T, D)`` to (the residual
            stream before the final norm: what a multi-layer draft layer fuses).
        """
        start: int | torch.Tensor = cache.length
        length = tokens.shape[1]
        if row_starts is not None:
            start = row_starts.to(tokens.device)
            positions = start[:, None] + torch.arange(length, device=tokens.device)
            end = int(start.max()) + length
            # Row b's query t sees keys 0 .. start[b] + t: (B, 1, T, end).
            attn_mask = torch.arange(end, device=tokens.device)[None, None, None, :] <= positions[:, None, :, None]
        else:
            end = start + length
        if end > self.positional_embedding.shape[0]:
            raise ValueError(f"text context is limited to {self.positional_embedding.shape[0]} tokens")
        if positions is None:
            x = self.token_embedding(tokens) + self.positional_embedding[start : start + length]
        else:
            x = self.token_embedding(tokens) + self.positional_embedding[positions]
        captured: list[torch.Tensor] = []
        for layer, block in enumerate(self.blocks[: num_layers or len(self.blocks)]):
            heads = capture.get(layer) if capture else None
            x, weights = block.forward_decoder(x, cache, layer, start, attn_mask, heads)
            if weights is not None:
                captured.append(weights)
            if block_outputs is not None:
                block_outputs.append(x)
        cache.length = end
        return self.ln(x), captured

    def int8_embedding(self) -> Int8Table:
        """The int8 copy of the output embedding that :meth:`project_logits` screens with (20 MB for tiny.en)."""
        weight = self.token_embedding.weight
        if self._int8_embedding is None or self._int8_embedding.quantized.shape != weight.shape:
            self._int8_embedding = Int8Table.of(weight)
        return self._int8_embedding

    def project_logits(self, x: torch.Tensor, screen: Optional[ScreenPolicy] = None) -> torch.Tensor:
        """``(B, T, D)`` -> float32 logits over the tied token embedding.

        This product reads the whole embedding (80-100 MB in fp32) every step, so its layout
        matters on CPU, and which layout wins depends on the CPU (tiny.en, 2 threads). One row (a
        plain decoding step) multiplies a contiguous transposed copy: MKL's GEMV, 1.7 ms on the
        Intel machines here, 5.3 ms on an AMD EPYC one. With several rows (a speculative
        verification, a timing pass) that copy cost 1.7-6.7 ms for 2-16 rows on Intel but 10-25
        ms on the AMD machine, where MKL pays per row (``E @ x^T``: 6-17 ms); oneDNN with the
        weight prepacked once (:func:`burble.kernels.linear.weight_linear`, a second 80 MB copy)
        costs 7-11 ms there for 2-16 rows, so 2-64 rows go through it. Beyond that (batched
        decoding) ``E @ x^T`` is MKL's efficient GEMM.

        With ``screen`` (greedy decoding under a mask-only processor chain), a one-row float32 CPU
        pass goes through :func:`burble.kernels.screened_projection.screened_logits`: an int8
        product, exact wherever the argmax can be (1.7 ms instead of 3.4-3.6 ms on the AMD
        machine, tiny.en, 2 threads). Several rows are not screened: the int8 kernel's cost grows
        with the rows (1.0 ms for 3) and so does the union of their candidates, and the sum came
        out level with the packed float32 product (2.7 against 2.5-2.9 ms for 3 rows).
        """
        weight = self.token_embedding.weight
        batch, length, dim = x.shape
        if x.device.type != "cpu":
            return (x @ weight.to(x.dtype).T).float()
        if screen is not None and batch * length == 1 and x.dtype == torch.float32:
            logits = screened_logits(x.reshape(batch * length, dim), self.int8_embedding(), screen)
            if logits is not None:
                return logits.reshape(batch, length, -1)
        if batch * length == 1:
            if self._embedding_t is None or self._embedding_t.shape[1] != weight.shape[0]:
                self._embedding_t = weight.detach().T.contiguous()
            return (x @ self._embedding_t).float()
        if batch * length <= MAX_PACKED_ROWS and x.dtype == torch.float32:
            return weight_linear(x, self.token_embedding).float()
        flat = x.reshape(batch * length, dim)
        return (weight @ flat.T).T.reshape(batch, length, -1).float()


class Whisper(nn.Module):
    def __init__(self, dims: WhisperDims) -> None:
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)
        # (layer, head) pairs whose cross-attention follows the audio (for word timestamps).
        self.alignment_heads: list[tuple[int, int]] = [
            (layer, head) for layer in range(dims.n_text_layer // 2, dims.n_text_layer) for head in range(dims.n_text_head)
        ]

    @property
    def device(self) -> torch.device:
        return self.decoder.token_embedding.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.token_embedding.weight.dtype

    def embed_audio(self, mel: torch.Tensor) -> torch.Tensor:
        return self.encoder(mel.to(self.dtype))


class WhisperTextModel:
    """Whisper's decoder bound to encoded audio: an ``AutoregressiveModel`` for the decoding core.

    Args:
      model: the Whisper model.
      audio_features: ``(1 or B, 1500, D)`` encoder output (batch 1 is shared by every row).
      num_layers: use only the first layers (the early-exit self-draft view of the same weights).
      cross: each layer's cross-attention K/V of ``audio_features``, if the caller has them (a
        stream extends them as its frames become final, and may hand them over in segments:
        :class:`~burble.kernels.attention.KeyValueSegments`); computed here otherwise.
      cross_rows: per row, each layer's cross-attention K/V ``(1, H, T_b, d)`` of its own audio,
        instead of ``cross`` (rows of different streams: :func:`burble.asr.batching.decode_rows`).

    Attributes:
      record: set it to a :class:`~burble.asr.whisper.attention_record.CrossAttentionRecord` to
        keep its heads' cross-attention scores of every linear pass (word timing without a pass
        of its own).
      row_records: one record per row instead (a batch of different windows).
      logit_screen: set it (:meth:`screen_policy`) when only the argmax of the logits and
        log-softmax normalisers matter (greedy decoding, a mask-only processor chain): the output
        projection then goes through the int8 screen of :meth:`TextDecoder.project_logits`.
    """

    def __init__(
        self, model: Whisper, audio_features: torch.Tensor, num_layers: Optional[int] = None,
        cross: Optional[list[KeysValues]] = None,
        cross_rows: Optional[list[list[KeysValues]]] = None,
    ) -> None:
        self.model = model
        self.audio_features = audio_features
        self.cross_rows = None if cross_rows is None else [list(row) for row in cross_rows]
        self.num_layers = num_layers or model.dims.n_text_layer
        self.vocab_size = model.dims.n_vocab
        self.record: Optional[CrossAttentionRecord] = None
        self.row_records: Optional[list[CrossAttentionRecord]] = None
        self.logit_screen: Optional[ScreenPolicy] = None
        self._kept_layers: tuple[int, ...] = ()  # blocks whose outputs a pass keeps (keep_layer_states)
        self._last_layers: Optional[torch.Tensor] = None
        if cross is not None and len(cross) < self.num_layers:
            raise ValueError(f"{len(cross)} layers of cross-attention K/V for a {self.num_layers}-layer decoder")
        if cross_rows is not None:  # nothing shared: each row's K/V are read where its stream keeps them
            self._cross: list[KeysValues] = []
        else:
            self._cross = list(cross[: self.num_layers]) if cross is not None else model.decoder.cross_kv(audio_features, self.num_layers)

    def early_exit(self, num_layers: int) -> "WhisperTextModel":
        """A view that drafts with the first ``num_layers`` layers (no extra weights)."""
        view = WhisperTextModel.__new__(WhisperTextModel)
        view.model, view.audio_features, view.vocab_size = self.model, self.audio_features, self.vocab_size
        view.num_layers = num_layers
        view.cross_rows = None if self.cross_rows is None else [row[:num_layers] for row in self.cross_rows]
        view.record, view.row_records = None, None  # drafts are not the text
        view.logit_screen = self.logit_screen
        view._kept_layers, view._last_layers = (), None  # a drafter of its own: nothing to keep
        view._cross = self._cross[:num_layers]
        return view

    def screen_policy(self, *, exact: list[int], ignored: list[int]) -> ScreenPolicy:
        """A policy for :attr:`logit_screen`: ``exact`` tokens a processor may mask one by one
        (specials, timestamps, the blank), ``ignored`` ones it always masks."""
        return ScreenPolicy.of(self.model.decoder.int8_embedding(), exact=exact, ignored=ignored)

    def _project(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.decoder.project_logits(hidden, self.logit_screen)

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        dims = self.model.dims
        cache = KVCache.allocate(
            num_layers=self.num_layers,
            batch_size=batch_size,
            num_heads=dims.n_text_head,
            head_dim=dims.n_text_state // dims.n_text_head,
            max_length=min(max_length, dims.n_text_ctx),
            dtype=self.model.dtype,
            device=self.model.device,
        )
        cache.cross = list(self._cross)
        cache.cross_rows = self.cross_rows
        return cache

    def _hidden(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """The decoder's final-norm states of a linear pass (recorded, if asked)."""
        start = cache.length
        outputs = self._block_outputs()
        hidden, weights = self.model.decoder.hidden_states(
            tokens, cache, num_layers=self.num_layers, capture=self._capture(), block_outputs=outputs
        )
        self._record([start] * tokens.shape[0], tokens, weights)
        # Kept for multi-token-prediction drafting (burble.decoding.mtp): a reference, no copy.
        self._last_hidden = (start, hidden)
        self._keep(outputs)
        return hidden

    def keep_layer_states(self, layers: Sequence[int]) -> None:
        """Keep the outputs of decoder blocks ``layers`` of every later pass beside its final-norm
        states (:meth:`last_layer_states`): an EAGLE-3-style draft layer fuses them."""
        if any(not 0 <= layer < self.num_layers for layer in layers):
            raise ValueError(f"blocks {list(layers)} of a {self.num_layers}-layer decoder")
        self._kept_layers = tuple(layers)

    def last_layer_states(self) -> Optional[torch.Tensor]:
        """``(B, T, L, D)``: the kept blocks' outputs at the positions of :meth:`last_hidden_states`
        (``None`` when no blocks are kept or the last pass kept none)."""
        return self._last_layers

    def _block_outputs(self) -> Optional[list[torch.Tensor]]:
        return [] if self._kept_layers else None

    def _keep(self, outputs: Optional[list[torch.Tensor]]) -> None:
        self._last_layers = None if outputs is None else torch.stack([outputs[i] for i in self._kept_layers], dim=2)

    def _capture(self) -> Optional[dict[int, list[int]]]:
        if self.record is not None:
            return self.record.heads
        return self.row_records[0].heads if self.row_records else None

    def _record(self, starts: list[int], tokens: torch.Tensor, weights: list[torch.Tensor]) -> None:
        """Keep a pass's captured scores: in ``record`` (one row), or per row in ``row_records``
        (a batch of different streams' windows, each row from its own position)."""
        if self.record is not None:
            self.record.add(starts[0], tokens, weights)
        for b, record in enumerate(self.row_records or []):
            record.add(starts[b], tokens[b : b + 1], [w[b : b + 1] for w in weights])

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        return self._project(self._hidden(tokens, cache))

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, cache: KVCache, rows: list[int]) -> torch.Tensor:
        """Like :meth:`forward`, projecting only ``rows`` of ``tokens`` to logits (a prompt: see
        :class:`burble.decoding.model.PrefillModel`); hidden states of all rows stay for drafters."""
        hidden = self._hidden(tokens, cache)
        return self._project(hidden[:, rows])

    @torch.inference_mode()
    def forward_rows(self, tokens: torch.Tensor, cache: KVCache, starts: torch.Tensor) -> torch.Tensor:
        """Each row at its own position (:class:`burble.decoding.model.RaggedModel`): rows that
        accepted different numbers of drafted tokens verify their next drafts in one pass."""
        hidden, weights = self.model.decoder.hidden_states(
            tokens, cache, num_layers=self.num_layers, capture=self._capture(), row_starts=starts
        )
        self._record(starts.tolist(), tokens, weights)
        self._last_hidden = (0, None)  # per-row positions: nothing a batch-1 MTP drafter may read
        self._last_layers = None
        return self._project(hidden)

    @torch.inference_mode()
    def forward_tree(self, tokens: torch.Tensor, cache: KVCache, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score a draft tree in one pass (:class:`burble.decoding.model.TreeModel`)."""
        start = cache.length
        outputs = self._block_outputs()
        hidden, _ = self.model.decoder.hidden_states(
            tokens, cache, num_layers=self.num_layers, attn_mask=mask[None, None], positions=positions, block_outputs=outputs
        )
        self._last_hidden = (start, hidden)
        self._keep(outputs)
        return self._project(hidden)

    def last_hidden_states(self) -> tuple[int, Optional[torch.Tensor]]:
        """``(start, hidden (B, T, D))`` of the last :meth:`forward` (``(0, None)`` before any)."""
        return getattr(self, "_last_hidden", (0, None))

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.decoder.token_embedding(tokens)

    def draft_memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The last decoder layer's cross-attention keys/values (the audio): what MTP heads attend
        to. The full model has computed them already; an early-exit view projects them once."""
        if len(self._cross) == self.model.dims.n_text_layer:
            last = self._cross[-1]
            return last.joined() if isinstance(last, KeyValueSegments) else last
        if getattr(self, "_last_layer_kv", None) is None:
            block = self.model.decoder.blocks[-1].cross_attn
            k, v = block.project_kv(self.audio_features)  # type: ignore[union-attr]
            self._last_layer_kv = (k.contiguous(), v.contiguous())
        return self._last_layer_kv
