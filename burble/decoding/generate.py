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
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from burble.decoding.logits import LogitsProcessor, apply_processors, warp
from burble.decoding.model import AutoregressiveModel
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Drafter, verify_greedy, verify_sampling
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


def _working_precision(logits: torch.Tensor) -> torch.Tensor:
    """fp32 for half-precision logits; fp64 logits stay fp64 (exact statistical tests)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def generate(
    model: AutoregressiveModel,
    prompt: torch.Tensor,
    options: DecodingOptions,
    *,
    processors: Sequence[LogitsProcessor] = (),
    drafter: Optional[Drafter] = None,
    probe_index: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
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
        apply_processors(processors, processed, torch.tensor([list(prefix)], device=device))
        if options.temperature == 0:
            return processed[0]
        return warp(processed[0], temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)

    if prompt_len > 1:
        probe.see(0, model.forward(prompt[:, :-1], cache))
        stats.target_passes += 1
    sequence = prompt.clone()
    pending = prompt[:, -1:]
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logprobs: list[list[float]] = [[] for _ in range(batch)]
    finished = [False] * batch

    # A row is active until it finishes or reaches the length limit (row 0 may stop before others).
    while any(not done and len(row) < options.max_new_tokens for done, row in zip(finished, tokens)):
        room = options.max_new_tokens - len(tokens[0]) - 1
        draft_tokens: list[int] = []
        draft_probs = None
        if drafter is not None and min(k_max, room) > 0:
            draft = drafter.propose(sequence[0].tolist(), min(k_max, room), rule)
            draft_tokens = list(draft.tokens[: min(k_max, room)])
            if draft.probs is not None:
                draft_probs = draft.probs[: len(draft_tokens)]
        step_input = pending
        if draft_tokens:
            step_input = torch.cat([pending, torch.tensor([draft_tokens], device=device)], dim=1)
        start = cache.length
        logits = model.forward(step_input, cache)
        stats.target_passes += 1
        probe.see(start, logits)

        processed = _working_precision(logits).clone()
        for j in range(step_input.shape[1]):
            prefix = sequence
            if j:
                prefix = torch.cat([sequence, step_input[:, 1 : j + 1]], dim=1)
            apply_processors(processors, processed[:, j], prefix)

        if options.temperature == 0:
            if draft_tokens:
                n_accepted, nxt = verify_greedy(draft_tokens, processed[0])
                next_tokens = torch.tensor([nxt], device=device)
            else:
                n_accepted, next_tokens = 0, processed[:, 0].argmax(dim=-1)
        else:
            probs = warp(processed, temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)
            if draft_tokens:
                n_accepted, nxt = verify_sampling(draft_tokens, draft_probs, probs[0], generator)
                next_tokens = torch.tensor([nxt], device=device)
            else:
                n_accepted = 0
                next_tokens = torch.multinomial(probs[:, 0], 1, generator=generator).squeeze(1)
        stats.record_round(len(draft_tokens), n_accepted)

        # Rows: accepted draft prefix then the verifier's token; log-probs under the processed logits.
        emitted = [draft_tokens[:n_accepted] + [int(next_tokens[b])] for b in range(batch)]
        step_logprobs = F.log_softmax(processed[:, : n_accepted + 1], dim=-1)
        for b in range(batch):
            if finished[b]:
                continue
            for j, token in enumerate(emitted[b]):
                if len(tokens[b]) >= options.max_new_tokens:
                    break
                logprobs[b].append(float(step_logprobs[b, j, token]))
                if eos is not None and token == eos:
                    finished[b] = True
                    break
                tokens[b].append(token)
        cache.truncate(start + 1 + n_accepted)
        new = torch.tensor([row for row in emitted], device=device)
        if eos is not None:
            # Finished rows keep feeding end-of-sequence so the batch stays rectangular.
            done = torch.tensor(finished, device=device)
            new = torch.where(done[:, None], torch.full_like(new, eos), new)
        sequence = torch.cat([sequence, new], dim=1)
        pending = new[:, -1:]

    stats.generated = sum(len(t) for t in tokens)
    stats.decoder_seconds = time.perf_counter() - started
    return GenerationResult(
        tokens=tokens, token_logprobs=logprobs, finished=finished, probe_logits=probe.logits, stats=stats
    )
