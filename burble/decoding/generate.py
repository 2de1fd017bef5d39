"""The one autoregressive loop of burble: greedy, sampling and speculative decoding.

Every target pass feeds ``[last token] + draft`` to the model (``draft`` is empty for plain AR
decoding), runs the logits-processor chain on every returned position, and lets the verifier of
:mod:`burble.decoding.speculative` decide how many tokens to keep. Plain AR decoding is the same
loop with no drafter, so ASR, streaming re-decoding and codec-LM speech generation all share it.
Beam search lives in :mod:`burble.decoding.beam` and shares the model protocol and the chain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from burble.decoding.logits import LogitsProcessor, apply_processors, sample_from, warp
from burble.decoding.kv_cache import KVCache
from burble.decoding.model import AutoregressiveModel, TreeModel
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Draft, Drafter, verify_greedy, verify_sampling
from burble.decoding.tree import DraftTree, first_chain, path_prefixes, pruned, verify_greedy_tree
from burble.decoding.stats import SpeculativeStats


@dataclass
class GenerationResult:
    """Output of :func:`generate` for a batch.

    Attributes:
      tokens: generated token ids per row, without the end-of-sequence token.
      token_logprobs: log-probability (under the processed logits) of each generated token,
        the end-of-sequence token included when it was generated.
      finished: whether the row ended with the end-of-sequence token.
      probe_logits: raw logits ``(B, V)`` at ``probe_index`` if one was asked for.
      stats: pass/acceptance counters and decoder wall time.
    """

    tokens: list[list[int]]
    token_logprobs: list[list[float]]
    finished: list[bool]
    probe_logits: Optional[torch.Tensor] = None
    stats: SpeculativeStats = field(default_factory=SpeculativeStats)

    @property
    def sum_logprobs(self) -> list[float]:
        return [float(sum(lp)) for lp in self.token_logprobs]


class _ProbeRecorder:
    """Keeps the raw logits at one absolute position, whichever pass produces them."""

    def __init__(self, index: Optional[int]) -> None:
        self.index = index
        self.logits: Optional[torch.Tensor] = None

    def see(self, start: int, logits: torch.Tensor) -> None:
        if self.index is not None and start <= self.index < start + logits.shape[1]:
            self.logits = logits[:, self.index - start].clone()

    def prefill(self, model: AutoregressiveModel, tokens: torch.Tensor, cache: KVCache) -> None:
        """Run a prompt's ``tokens`` into ``cache``, keeping only the logits this probe needs.

        A :class:`~burble.decoding.model.PrefillModel` projects just the probe's row (if the
        probe lies in the prompt) instead of every prompt row: with Whisper's previous-text
        prompt (up to 224 tokens) that projection was the largest single cost of a window's decode.
        """
        start = cache.length
        prefill = getattr(model, "prefill", None)
        if prefill is None:
            self.see(start, model.forward(tokens, cache))
            return
        inside = self.index is not None and start <= self.index < start + tokens.shape[1]
        logits = prefill(tokens, cache, [self.index - start] if inside else [])
        if inside:
            self.logits = logits[:, 0].clone()


def _working_precision(logits: torch.Tensor) -> torch.Tensor:
    """fp32 for half-precision logits; fp64 logits stay fp64 (exact statistical tests)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _emitted_with_logprobs(
    processed: torch.Tensor, accepted: list[int], verified: int | torch.Tensor
) -> tuple[list[list[int]], list[list[float]]]:
    """Each row's emitted tokens (``accepted`` draft, then the verifier's token) and their log-probs.

    ``verified`` is a host int after a drafted pass (batch 1) or a ``(B,)`` device tensor. Tokens and
    log-probs come back to the host together, in one transfer per pass.
    """
    if isinstance(verified, int):
        ids = torch.tensor([accepted + [verified]], device=processed.device)
    else:
        ids = verified[:, None]
    width = ids.shape[1]
    step_logprobs = F.log_softmax(processed[:, :width], dim=-1).gather(2, ids[:, :, None]).squeeze(2)
    # float64 holds token ids exactly and every float32 log-prob, so one tensor carries both.
    host = torch.cat([ids.to(torch.float64), step_logprobs.to(torch.float64)], dim=1).tolist()
    return [[int(t) for t in row[:width]] for row in host], [row[width:] for row in host]


def generate(
    model: AutoregressiveModel,
    prompt: torch.Tensor,
    options: DecodingOptions,
    *,
    processors: Sequence[LogitsProcessor] = (),
    drafter: Optional[Drafter] = None,
    probe_index: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    on_tokens: Optional[Callable[[list[list[int]]], None]] = None,
) -> GenerationResult:
    """Decode a continuation of ``prompt`` with greedy search or sampling, optionally speculative.

    Args:
      model: the target model (see :class:`AutoregressiveModel`).
      prompt: ``(B, T0)`` token ids; all rows have the same length.
      options: search options; ``beam_size`` must be 1 here (see :func:`burble.decoding.beam.beam_search`).
      processors: the logits-processor chain, applied to every position before any decision.
      drafter: a speculative drafter (batch size 1 only); ``None`` decodes one token per pass.
      probe_index: absolute position whose raw logits to return (Whisper's no-speech probability).
      generator: random source for sampling.
      on_tokens: called after every pass with each row's newly generated tokens (end of sequence
        excluded), so a consumer can stream them (TTS turns them into audio as they come).

    Returns:
      A :class:`GenerationResult`.
    """
    if options.beam_size != 1:
        raise ValueError("generate() does greedy/sampling; use beam_search() for beam_size > 1")
    batch, prompt_len = prompt.shape
    if drafter is not None and batch != 1:
        raise ValueError("speculative decoding runs one sequence at a time (batch size 1)")
    if prompt_len < 1:
        raise ValueError("the prompt needs at least one token")
    started = time.perf_counter()
    stats = SpeculativeStats()
    k_max = options.draft_length if drafter is not None else 0
    cache = model.new_cache(batch, prompt_len + options.max_new_tokens + k_max + 1)
    probe = _ProbeRecorder(probe_index)
    eos = options.eos_token_id
    device = prompt.device

    def rule(logits: torch.Tensor, prefix: Sequence[int]) -> torch.Tensor:
        processed = _working_precision(logits).clone().unsqueeze(0)
        if processors:  # drafters call this per drafted token: no prefix tensor when nothing reads it
            apply_processors(processors, processed, torch.tensor([list(prefix)], device=device))
        if options.temperature == 0:
            return processed[0]
        return warp(processed[0], temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)

    if prompt_len > 1:
        probe.prefill(model, prompt[:, :-1], cache)
        stats.target_passes += 1
    # Every row's tokens live in one preallocated buffer: ``history[:, :length]`` is the sequence so
    # far and a pass writes its draft just after it, so each verified position's prefix is a view
    # (no ``torch.cat`` per position or per pass). Row 0 is mirrored on the host for the drafter.
    history = torch.empty((batch, prompt_len + options.max_new_tokens + k_max + 1), dtype=prompt.dtype, device=device)
    history[:, :prompt_len] = prompt
    length = prompt_len
    host_row = prompt[0].tolist()
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logprobs: list[list[float]] = [[] for _ in range(batch)]
    finished = [False] * batch

    # A row is active until it finishes or reaches the length limit (row 0 may stop before others).
    while any(not done and len(row) < options.max_new_tokens for done, row in zip(finished, tokens)):
        room = options.max_new_tokens - len(tokens[0]) - 1
        draft_tokens: list[int] = []
        draft_probs = None
        tree: Optional[DraftTree] = None
        if drafter is not None and min(k_max, room) > 0:
            draft = drafter.propose(list(host_row), min(k_max, room), rule)
            tree_room = cache.max_length - cache.length - 1  # a tree may have more nodes than k
            draft_tokens, draft_probs, tree = _usable_draft(draft, min(k_max, room), options.temperature, model, tree_room)
        if tree is not None:
            n_accepted, emitted, emitted_logprobs = _verify_tree(
                model, tree, cache, history[:, :length], processors, probe  # type: ignore[arg-type]
            )
            stats.target_passes += 1
            stats.record_round(max(tree.depths), n_accepted)
        else:
            n_accepted, emitted, emitted_logprobs = _verify_chain(
                model, draft_tokens, draft_probs, cache, history, length, processors, probe, options, generator
            )
            stats.target_passes += 1
            stats.record_round(len(draft_tokens), n_accepted)
        # Rows: the accepted draft, then the verifier's token (log-probs under the processed logits).
        counts = [len(row) for row in tokens] if on_tokens is not None else []
        for b in range(batch):
            if finished[b]:
                continue
            for token, logprob in zip(emitted[b], emitted_logprobs[b]):
                if len(tokens[b]) >= options.max_new_tokens:
                    break
                logprobs[b].append(logprob)
                if eos is not None and token == eos:
                    finished[b] = True
                    break
                tokens[b].append(token)
        if on_tokens is not None:
            on_tokens([row[n:] for row, n in zip(tokens, counts)])
        width = n_accepted + 1
        # Finished rows keep feeding end-of-sequence so the batch stays rectangular.
        new = [[eos] * width if done else row for done, row in zip(finished, emitted)]
        history[:, length : length + width] = torch.tensor(new, device=device)
        length += width
        host_row.extend(new[0])

    stats.generated = sum(len(t) for t in tokens)
    stats.decoder_seconds = time.perf_counter() - started
    return GenerationResult(
        tokens=tokens, token_logprobs=logprobs, finished=finished, probe_logits=probe.logits, stats=stats
    )


def _usable_draft(
    draft: Draft, limit: int, temperature: float, model: AutoregressiveModel, tree_room: int
) -> tuple[list[int], Optional[torch.Tensor], Optional[DraftTree]]:
    """``(chain tokens, chain probs, tree)`` of a draft, cut to ``limit`` tokens (or depth).

    A tree is kept for greedy decoding of a model that scores trees, if its nodes fit in the
    cache (``tree_room`` positions); otherwise its best path is drafted as a chain (still
    lossless: any proposal is).
    """
    if draft.parents is not None and draft.tokens:
        tree = pruned(DraftTree(tuple(draft.tokens), tuple(draft.parents)), limit)
        if tree.is_chain:
            return list(tree.tokens), None, None
        if temperature > 0 or not hasattr(model, "forward_tree") or len(tree) > tree_room:
            return first_chain(tree), None, None
        return [], None, tree
    tokens = list(draft.tokens[:limit])
    probs = draft.probs[: len(tokens)] if draft.probs is not None else None
    return tokens, probs, None


def _verify_chain(
    model: AutoregressiveModel,
    draft_tokens: list[int],
    draft_probs: Optional[torch.Tensor],
    cache: KVCache,
    history: torch.Tensor,
    length: int,
    processors: Sequence[LogitsProcessor],
    probe: _ProbeRecorder,
    options: DecodingOptions,
    generator: Optional[torch.Generator],
) -> tuple[int, list[list[int]], list[list[float]]]:
    """One pass over ``[last token] + draft`` (every row); returns what it emits per row."""
    device = history.device
    if draft_tokens:
        history[:, length : length + len(draft_tokens)] = torch.tensor(draft_tokens, device=device)
    step_input = history[:, length - 1 : length + len(draft_tokens)]
    start = cache.length
    logits = model.forward(step_input, cache)
    probe.see(start, logits)

    processed = _working_precision(logits).clone()
    for j in range(step_input.shape[1]):
        apply_processors(processors, processed[:, j], history[:, : length + j])

    # ``verified`` is the verifier's token on the host (drafted passes) or per row on the device.
    verified: int | torch.Tensor
    if options.temperature == 0:
        if draft_tokens:
            n_accepted, verified = verify_greedy(draft_tokens, processed[0])
        else:
            n_accepted, verified = 0, processed[:, 0].argmax(dim=-1)
    else:
        probs = warp(processed, temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)
        if draft_tokens:
            n_accepted, verified = verify_sampling(draft_tokens, draft_probs, probs[0], generator)
        else:
            n_accepted = 0
            verified = sample_from(probs[:, 0], generator)
    emitted, logprobs = _emitted_with_logprobs(processed, draft_tokens[:n_accepted], verified)
    cache.truncate(start + 1 + n_accepted)
    return n_accepted, emitted, logprobs


def _verify_tree(
    model: TreeModel,
    tree: DraftTree,
    cache: KVCache,
    history: torch.Tensor,
    processors: Sequence[LogitsProcessor],
    probe: _ProbeRecorder,
) -> tuple[int, list[list[int]], list[list[float]]]:
    """One greedy pass over ``[last token] + tree`` (batch 1); the accepted path is compacted in the cache."""
    device = history.device
    start = cache.length
    step_input = torch.cat([history[:, -1:], torch.tensor([tree.tokens], dtype=history.dtype, device=device)], dim=1)
    logits = model.forward_tree(step_input, cache, tree.positions(start, device), tree.attention_mask(start, device))
    processed = _working_precision(logits).clone()
    for j, prefix in enumerate(path_prefixes(history, tree)):
        apply_processors(processors, processed[:, j], prefix)
    path, verified = verify_greedy_tree(tree, processed[0])
    rows = [0] + [1 + node for node in path]
    probe.see(start, logits[:, rows])
    emitted, logprobs = _emitted_with_logprobs(processed[:, rows], [tree.tokens[n] for n in path], verified)
    cache.compact(start + 1, [start + 1 + node for node in path])
    cache.truncate(start + 1 + len(path))
    return len(path), emitted, logprobs
