"""The codec language model: phonemes -> codec tokens, one decoder-only transformer.

Learning where each phoneme sits in the audio by attention is what makes small codec LMs slow
to train. This model is told instead: the token stream spells every phoneme's duration out.
For an utterance of phoneme units ``u_0 .. u_{U-1}`` (``^``, the phonemes, ``$``) the sequence is

    BOS, DUR(d_0), [c_1 .. c_B] x d_0, DUR(d_1), [c_1 .. c_B] x d_1, ..., EOS

where ``DUR(d)`` says that unit ``u`` lasts ``d`` codec frames (0 allowed) and each frame is its
``B`` codec codes, coarse book first (the flattened layout: one token per step, so the shared
decoding core drives it unchanged). Which token comes next is fixed by the tokens so far (a
grammar): the model knows at every position which unit, which slot (a duration, book ``b``, or
the end) and which frame of the unit it is predicting, adds that to the input embedding
(the unit's state from a bidirectional phoneme encoder, a slot embedding, the frame's index
in the unit and the frames left), and allows only that slot's tokens. So it only learns local
acoustics and durations, the end comes exactly after the last unit, and the length is bounded
by ``U * (1 + max_duration * B)``: no endless babble.

:class:`CodecLM` is the network (trained whole-sequence by ``recipes/tts``);
:class:`CodecLMSession` binds it to one utterance as an
:class:`~burble.decoding.model.AutoregressiveModel` with a KV cache, which
:func:`burble.decoding.generate.generate` decodes like any other model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from burble.decoding.kv_cache import KVCache
from burble.kernels.attention import attention
from burble.kernels.linear import linear

SLOT_DURATION = 0  # then 1..B: book b - 1; B + 1: end of sequence
FEATURE_CLIP = 31  # frame-in-unit and frames-left embeddings saturate here


@dataclass(frozen=True)
class CodecLMConfig:
    """Shape of a codec LM.

    Attributes:
      num_phonemes: size of the phoneme inventory (ids ``0 .. num_phonemes - 1``).
      num_books: codec books per frame (the flattened frame is this many tokens).
      codebook_size: codes per book.
      max_duration: the longest unit in codec frames (duration tokens ``0 .. max_duration``).
      width: model width.
      heads: attention heads.
      decoder_layers: causal transformer layers over the token stream.
      encoder_layers: bidirectional transformer layers over the phoneme units.
      ff: feed-forward width.
      dropout: dropout while training.
    """

    num_phonemes: int = 151
    num_books: int = 4
    codebook_size: int = 1024
    max_duration: int = 80
    width: int = 256
    heads: int = 4
    decoder_layers: int = 6
    encoder_layers: int = 3
    ff: int = 1024
    dropout: float = 0.1

    @property
    def duration_offset(self) -> int:
        return self.num_books * self.codebook_size

    @property
    def bos(self) -> int:
        return self.duration_offset + self.max_duration + 1

    @property
    def eos(self) -> int:
        return self.bos + 1

    @property
    def vocab_size(self) -> int:
        return self.eos + 1

    @property
    def num_slots(self) -> int:
        return self.num_books + 2

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CodecLMConfig":
        return cls(**d)


class Slot(NamedTuple):
    """What the next token is: unit ``unit``, slot ``slot``, frame ``frame`` of ``duration``."""

    unit: int
    slot: int
    frame: int
    duration: int


def first_slot() -> Slot:
    return Slot(0, SLOT_DURATION, 0, 0)


def next_slot(config: CodecLMConfig, current: Slot, token: int, num_units: int) -> Slot:
    """The slot after ``token`` was emitted in ``current`` (the grammar of the token stream)."""
    unit, slot, frame, duration = current
    books = config.num_books
    if slot == SLOT_DURATION:
        duration = token - config.duration_offset
        if duration > 0:
            return Slot(unit, 1, 0, duration)
    elif 1 <= slot < books:
        return Slot(unit, slot + 1, frame, duration)
    elif slot == books and frame + 1 < duration:
        return Slot(unit, 1, frame + 1, duration)
    elif slot == books + 1:
        return current  # after the end nothing changes (finished rows keep feeding EOS)
    if unit + 1 >= num_units:
        return Slot(unit, books + 1, 0, 0)
    return Slot(unit + 1, SLOT_DURATION, 0, 0)


def allowed_ranges(config: CodecLMConfig) -> list[tuple[int, int]]:
    """``[start, end)`` token ids each slot allows."""
    K, D = config.codebook_size, config.duration_offset
    return ([(D, D + config.max_duration + 1)] + [(b * K, (b + 1) * K) for b in range(config.num_books)]
            + [(config.eos, config.eos + 1)])


def unit_ids(phoneme_ids: Sequence[int]) -> list[int]:
    """Units from Piper-layout ids ``^ _ p1 _ ... pn _ $``: the pads fold into the unit before them."""
    return list(phoneme_ids[0::2])


def unit_durations(frames_per_id: Sequence[int]) -> list[int]:
    """Frames per unit: each id's frames plus its following pad's (see :func:`unit_ids`)."""
    d = list(frames_per_id)
    return [d[i] + (d[i + 1] if i + 1 < len(d) else 0) for i in range(0, len(d), 2)]


def token_stream(config: CodecLMConfig, durations: Sequence[int], codes: np.ndarray) -> list[int]:
    """The training sequence ``BOS, DUR, frames..., EOS`` of one utterance (codes ``(books, frames)``)."""
    if sum(durations) != codes.shape[1]:
        raise ValueError(f"durations sum to {sum(durations)} frames, codes have {codes.shape[1]}")
    offsets = (np.arange(config.num_books) * config.codebook_size)[:, None]
    flat = (codes[: config.num_books] + offsets).T.reshape(-1).tolist()
    stream, frame = [config.bos], 0
    per_frame = config.num_books
    for d in durations:
        if d > config.max_duration:
            raise ValueError(f"a unit of {d} frames exceeds max_duration {config.max_duration}")
        stream.append(config.duration_offset + d)
        stream.extend(flat[frame * per_frame:(frame + d) * per_frame])
        frame += d
    stream.append(config.eos)
    return stream


def stream_slots(config: CodecLMConfig, stream: Sequence[int], num_units: int) -> list[Slot]:
    """``slots[p]``: the slot of token ``p + 1`` (what position ``p`` predicts)."""
    slots = [first_slot()]
    for token in stream[1:-1]:
        slots.append(next_slot(config, slots[-1], token, num_units))
    return slots


def feature_row(slot: Slot) -> tuple[int, int, int, int]:
    """Unit, slot, frame in unit (clipped), frames left in unit (clipped): what a position is told."""
    return (slot.unit, slot.slot, min(slot.frame, FEATURE_CLIP), min(max(slot.duration - slot.frame - 1, 0), FEATURE_CLIP))


def slot_features(config: CodecLMConfig, slots: Sequence[Slot]) -> torch.Tensor:
    """``(T, 4)`` long: the :func:`feature_row` of each slot."""
    return torch.tensor([feature_row(s) for s in slots], dtype=torch.long).reshape(-1, 4)


def rotary_tables(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` ``(T, head_dim / 2)`` float32 rotary position embeddings at ``positions``
    (computed once per pass and shared by every layer)."""
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    angles = positions.to(torch.float32)[:, None] * inv[None]
    return angles.cos(), angles.sin()


def rotary(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate ``x`` ``(B, H, T, d)`` by the tables of :func:`rotary_tables` (in ``x``'s dtype)."""
    cos, sin = (t.to(x.dtype) for t in tables)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    """Pre-norm transformer layer (self-attention with rotary positions, GELU MLP)."""

    def __init__(self, config: CodecLMConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.norm1 = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, config.ff), nn.GELU(), nn.Linear(config.ff, config.width))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor], *, causal: bool,
                cache: Optional[KVCache] = None, layer: int = 0, key_padding: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = linear(self.norm1(x), self.qkv).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rotary(q, tables), rotary(k, tables)
        mask = None if key_padding is None else key_padding[:, None, None, :]
        if cache is not None:
            k, v = cache.write(layer, cache.length, k, v)
        a = attention(q, k, v, is_causal=causal, mask=mask)
        x = x + self.dropout(linear(a.transpose(1, 2).reshape(b, t, w), self.proj))
        up, act, down = self.mlp
        return x + self.dropout(linear(act(linear(self.norm2(x), up)), down))


class CodecLM(nn.Module):
    """Phoneme encoder + causal decoder over the flattened codec token stream."""

    def __init__(self, config: CodecLMConfig) -> None:
        super().__init__()
        self.config = config
        w = config.width
        self.phoneme_embedding = nn.Embedding(config.num_phonemes, w)
        self.encoder = nn.ModuleList(Block(config) for _ in range(config.encoder_layers))
        self.encoder_norm = nn.LayerNorm(w)
        self.token_embedding = nn.Embedding(config.vocab_size, w)
        self.slot_embedding = nn.Embedding(config.num_slots, w)
        self.frame_embedding = nn.Embedding(FEATURE_CLIP + 1, w)
        self.left_embedding = nn.Embedding(FEATURE_CLIP + 1, w)
        self.decoder = nn.ModuleList(Block(config) for _ in range(config.decoder_layers))
        self.norm = nn.LayerNorm(w)
        self.output = nn.Linear(w, config.vocab_size, bias=False)
        slot_of_token = torch.full((config.vocab_size,), -1, dtype=torch.long)
        for s, (lo, hi) in enumerate(allowed_ranges(config)):
            slot_of_token[lo:hi] = s
        # (slots, vocab) additive mask: 0 where the slot allows the token, -inf elsewhere.
        mask = torch.full((config.num_slots, config.vocab_size), float("-inf"))
        mask[slot_of_token.clamp(min=0), torch.arange(config.vocab_size)] = 0.0
        mask[:, slot_of_token < 0] = float("-inf")
        self.register_buffer("slot_mask", mask, persistent=False)

    def encode_units(self, units: torch.Tensor, padding: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, U)`` unit ids -> ``(B, U, W)`` states (``padding``: True where a unit is padding)."""
        x = self.phoneme_embedding(units)
        tables = rotary_tables(torch.arange(units.shape[1], device=units.device), self.config.width // self.config.heads)
        keep = None if padding is None else ~padding
        for block in self.encoder:
            x = block(x, tables, causal=False, key_padding=keep)
        return self.encoder_norm(x)

    def condition(self, unit_states: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """``(B, T, W)`` what each position is told about the token it predicts."""
        unit = features[..., 0].clamp(max=unit_states.shape[1] - 1)
        picked = torch.gather(unit_states, 1, unit[..., None].expand(-1, -1, unit_states.shape[-1]))
        return (picked + self.slot_embedding(features[..., 1]) + self.frame_embedding(features[..., 2])
                + self.left_embedding(features[..., 3]))

    def decode(self, tokens: torch.Tensor, conditioning: torch.Tensor, positions: torch.Tensor,
               cache: Optional[KVCache] = None) -> torch.Tensor:
        """Final hidden states ``(B, T, W)`` of ``tokens`` at ``positions``."""
        x = self.token_embedding(tokens) + conditioning
        tables = rotary_tables(positions, self.config.width // self.config.heads)
        for i, block in enumerate(self.decoder):
            x = block(x, tables, causal=True, cache=cache, layer=i)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Float32 logits with every token the slot does not allow at ``-inf``."""
        return linear(hidden, self.output).float() + self.slot_mask[slots]

    def loss(self, units: torch.Tensor, unit_padding: torch.Tensor, tokens: torch.Tensor, features: torch.Tensor,
             targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Teacher-forced cross-entropy (targets ``-100`` are ignored) and per-slot losses."""
        states = self.encode_units(units, unit_padding)
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        hidden = self.decode(tokens, self.condition(states, features), positions)
        logits = self.logits(hidden, features[..., 1])
        flat = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="none")
        valid = targets.flatten() != -100
        slots = features[..., 1].flatten()
        parts = {}
        for s, name in [(0, "duration"), (1, "book0"), (self.config.num_books, f"book{self.config.num_books - 1}")]:
            sel = valid & (slots == s)
            if sel.any():
                parts[name] = float(flat[sel].detach().mean())
        return flat[valid].mean(), parts

    def session(self, units: Sequence[int]) -> "CodecLMSession":
        return CodecLMSession(self, units)

    def save(self, path: str, *, inventory: Sequence[str], extra: Optional[dict] = None) -> None:
        """Inference weights in bfloat16 (upcast on load) with config and phoneme inventory."""
        from safetensors.torch import save_file

        tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, path, metadata={"config": json.dumps(self.config.to_dict()),
                                           "inventory": json.dumps(list(inventory)), "extra": json.dumps(extra or {})})


class CodecLMSession:
    """One utterance's :class:`~burble.decoding.model.AutoregressiveModel` view of a :class:`CodecLM`.

    The phoneme units are encoded once. Each forward pass works out the slot of every new position
    from the tokens before it (kept per position, so a speculative rollback, which only shortens
    ``cache.length``, needs nothing else) and returns logits that allow only that slot's tokens.
    It also keeps the final hidden states of its last pass (for MTP draft heads) and, with
    ``keep_code_distributions``, the distribution over codes it gave at every codec-code position
    (for decoding a frame from its expected code vector, see ``code_distributions``).
    """

    def __init__(self, model: CodecLM, units: Sequence[int], *, keep_code_distributions: bool = False) -> None:
        self.model = model
        self.keep_code_distributions = keep_code_distributions
        self.config = model.config
        self.vocab_size = model.config.vocab_size
        self.units = list(units)
        if len(self.units) < 1:
            raise ValueError("an utterance needs at least one phoneme unit")
        param = next(model.parameters())
        with torch.inference_mode():
            self.unit_states = model.encode_units(torch.tensor([self.units], device=param.device))
        self._slots: list[list[Slot]] = []
        self._last: tuple[int, Optional[torch.Tensor]] = (0, None)
        self._ranges = allowed_ranges(self.config)
        self._cache: Optional[KVCache] = None  # the cache of new_cache(): how far the slots are exact
        # per row: position -> (its pass's code logits, row, index in the pass, book)
        self._code_distributions: list[dict[int, tuple[torch.Tensor, int, int, int]]] = []
        self._input_table: Optional[tuple[np.ndarray, np.ndarray]] = None  # see _input_tables

    @property
    def max_tokens(self) -> int:
        """The longest stream the grammar allows (BOS and EOS included)."""
        return 2 + len(self.units) * (1 + self.config.max_duration * self.config.num_books)

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        c = self.config
        param = next(self.model.parameters())
        self._slots = [[] for _ in range(batch_size)]
        self._code_distributions = [{} for _ in range(batch_size)]
        self._last = (0, None)
        self._cache = KVCache.allocate(num_layers=c.decoder_layers, batch_size=batch_size, num_heads=c.heads,
                                       head_dim=c.width // c.heads, max_length=max_length, dtype=param.dtype,
                                       device=param.device)
        return self._cache

    def slots_for(self, row: int, start: int, tokens: Sequence[int]) -> list[Slot]:
        slots = self._slots[row]
        del slots[start:]
        for p, token in enumerate(tokens, start):
            if p == 0:
                if token != self.config.bos:
                    raise ValueError("a codec LM stream starts with its BOS token")
                slots.append(first_slot())
            else:
                slots.append(next_slot(self.config, slots[p - 1], int(token), len(self.units)))
        return slots[start:]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        start = cache.length
        rows = tokens.tolist()
        features = torch.stack([slot_features(self.config, self.slots_for(r, start, row)) for r, row in enumerate(rows)])
        features = features.to(tokens.device)
        states = self.unit_states.expand(tokens.shape[0], -1, -1)
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)
        hidden = self.model.decode(tokens, self.model.condition(states, features), positions, cache)
        cache.length = start + tokens.shape[1]
        self._last = (start, hidden)
        logits = self.model.logits(hidden, features[..., 1])
        if self.keep_code_distributions:
            self._keep_code_distributions(start, features[..., 1], logits)
        return logits

    def _keep_code_distributions(self, start: int, slots: torch.Tensor, logits: torch.Tensor) -> None:
        # Only the codes' logits are copied here (the loop may edit what it was handed); the softmax
        # waits until code_distributions() asks, so drafted positions that get rejected cost
        # nothing. A later pass over the same position (after a rejected draft) overwrites it:
        # what is kept is always the pass over the tokens the cache holds.
        books = self.config.num_books
        codes = logits[..., : books * self.config.codebook_size].clone()
        for row, (row_slots, kept) in enumerate(zip(slots.tolist(), self._code_distributions)):
            for i, slot in enumerate(row_slots):
                if 1 <= slot <= books:
                    kept[start + i] = (codes, row, i, slot - 1)

    def code_distributions(self, positions: Sequence[int], row: int = 0) -> torch.Tensor:
        """``(len(positions), codebook_size)``: the distribution over its book's codes the model gave
        at each position, i.e. of the codec code that is token ``position + 1`` (needs
        ``keep_code_distributions``). Each position is handed out once and then forgotten, so a
        long sentence does not hold every pass's logits."""
        if not self.keep_code_distributions:
            raise ValueError("this session keeps no code distributions (keep_code_distributions=False)")
        size = self.config.codebook_size
        if not positions:
            return torch.zeros(0, size)
        kept = self._code_distributions[row]
        rows = []
        for p in positions:
            logits, pass_row, index, book = kept.pop(p)
            rows.append(logits[pass_row, index, book * size:(book + 1) * size])
        return torch.softmax(torch.stack(rows), dim=-1)

    # -- what MTP draft heads read (burble.decoding.mtp.HiddenStateModel) --
    def last_hidden_states(self) -> tuple[int, Optional[torch.Tensor]]:
        return self._last

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.token_embedding(tokens)

    def draft_memory(self) -> None:
        return None

    def _draft_slots(self, tokens: Sequence[int], count: int) -> list[Slot]:
        """The slots of the last ``count`` positions of ``tokens`` (row 0's sequence, drafted tokens
        included): what each of those positions predicts."""
        slots = self._slots[0] if self._slots else []
        # Slots of the positions the cache holds are exact; a rejected draft's may linger past it.
        known = min(len(slots), len(tokens), self._cache.length if self._cache is not None else 0)
        tail: list[Slot] = []
        for p in range(known, len(tokens)):
            previous = tail[-1] if tail else (slots[p - 1] if p > 0 else None)
            tail.append(first_slot() if previous is None else next_slot(self.config, previous, int(tokens[p]), len(self.units)))
        first = max(0, len(tokens) - count)
        return (list(slots[first:known]) + tail)[-count:] if count > 0 else []

    def draft_range(self, tokens: Sequence[int]) -> Optional[tuple[int, int]]:
        """The token ids ``[lo, hi)`` the grammar allows after ``tokens`` (row 0's sequence, drafted
        tokens included), so MTP drafts score one codebook instead of the whole vocabulary."""
        if not tokens or not self._slots:
            return None
        return self._ranges[self._draft_slots(tokens, 1)[0].slot]

    def draft_inputs(self, tokens: Sequence[int], count: int) -> torch.Tensor:
        """``(count, W)``: the decoder inputs of the last ``count`` of ``tokens`` (row 0's sequence,
        drafted tokens included) at their positions, as :meth:`forward` would build them: the
        token embedding plus the conditioning (unit, slot, frame) of the token each predicts.
        Draft heads with ``MTPConfig.decoder_inputs`` read these instead of bare embeddings."""
        table, units = self._input_tables()
        c = self.config
        last_unit = units.shape[0] - 1
        # CodecLM.condition's sum over host (numpy) rows: drafting asks for one token at a time,
        # where torch's per-op dispatch costs more than the rows (24 -> 11 us a call).
        picked = [(int(token), c.vocab_size + kind, c.vocab_size + c.num_slots + frame,
                   c.vocab_size + c.num_slots + FEATURE_CLIP + 1 + left, min(unit, last_unit))
                  for token, (unit, kind, frame, left) in
                  zip(tokens[len(tokens) - count:], map(feature_row, self._draft_slots(tokens, count)))]
        if not picked:
            return torch.zeros(0, c.width)
        return torch.from_numpy(np.stack([table[t] + table[s] + table[f] + table[r] + units[u] for t, s, f, r, u in picked]))

    def _input_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Float32 host copies of the decoder's input embeddings (token, slot, frame, frames left:
        stacked, shared by the model's sessions while its weights stay) and this utterance's unit
        states."""
        if self._input_table is None:  # once a session: its model's weights do not change under it
            m = self.model
            sources = (m.token_embedding.weight, m.slot_embedding.weight, m.frame_embedding.weight, m.left_embedding.weight)
            key = tuple((t.data_ptr(), t._version) for t in sources)
            cached = getattr(m, "_draft_input_table", None)
            if cached is None or cached[0] != key:
                cached = (key, torch.cat([t.detach().float().cpu() for t in sources]).numpy())
                object.__setattr__(m, "_draft_input_table", cached)  # not a parameter or buffer: never saved
            self._input_table = (cached[1], self.unit_states[0].detach().float().cpu().numpy())
        return self._input_table


def load_state(path: str, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> tuple[CodecLM, list[str], dict]:
    """A :class:`CodecLM` from a file written by :meth:`CodecLM.save`: ``(model, inventory, extra)``."""
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
        if "config" not in meta or "inventory" not in meta:
            raise ValueError(f"{path}: not a codec LM file (no config/inventory metadata)")
        state = {k: f.get_tensor(k) for k in f.keys()}
    config = CodecLMConfig.from_dict(json.loads(meta["config"]))
    model = CodecLM(config)
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return model, json.loads(meta["inventory"]), json.loads(meta.get("extra", "{}"))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
