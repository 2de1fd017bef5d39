"""Beam search over any :class:`~burble.decoding.model.AutoregressiveModel`.

The beams of one prompt are rows of one batch; every step runs the logits-processor chain (so
timestamp rules, shallow fusion and phrase boosting steer beam search exactly as they steer greedy
decoding), keeps the ``beam_size`` best unfinished continuations, moves finished ones aside, and
reorders the KV cache rows. Finished hypotheses are ranked by length-normalised log-probability.
Processors marked ``adds_score`` (shallow fusion, boosting) contribute through ``score()`` after the
``log_softmax`` rather than by editing logits, as classic shallow fusion defines it. One that also
has ``reserve(scores)`` (phrase boosting) may add one row for a continuation below the cut, e.g.
the first token of a boosted name that would otherwise never enter the beam.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from burble.decoding.generate import GenerationResult, _ProbeRecorder
from burble.decoding.logits import LogitsProcessor, apply_processors
from burble.decoding.model import AutoregressiveModel
from burble.decoding.options import DecodingOptions
from burble.decoding.stats import SpeculativeStats


def length_normalised_score(sum_logprob: float, length: int, length_penalty: Optional[float]) -> float:
    """Ranking score: mean log-probability, or Google NMT's ``((5 + L) / 6) ** alpha`` penalty."""
    penalty = length if length_penalty is None else ((5 + length) / 6) ** length_penalty
    return sum_logprob / max(penalty, 1e-9)


def _ranked_candidates(
    scores: torch.Tensor, logprobs: torch.Tensor, per_row: int
) -> list[tuple[float, int, int, float]]:
    """The ``per_row`` best continuations of every row, best first: ``(score, row, token, log p)``.

    Equal scores keep row-major order (row, then rank within the row), as a stable sort of the
    rows' top-k lists does. The ranking runs as tensor ops and the table crosses to the host in
    one transfer (not one synchronising ``float()`` per candidate).
    """
    top_scores, top_tokens = scores.topk(per_row, dim=-1)
    flat_scores = top_scores.flatten()
    order = flat_scores.sort(descending=True, stable=True).indices
    rows = torch.div(order, per_row, rounding_mode="floor")
    tokens = top_tokens.flatten()[order]
    step_logprobs = logprobs[rows, tokens]
    # float64 holds token ids exactly, so one tensor (one device-to-host copy) carries the table.
    columns = (flat_scores[order], rows, tokens, step_logprobs)
    table = torch.stack([column.to(torch.float64) for column in columns], dim=1)
    return [(score, int(row), int(token), step_lp) for score, row, token, step_lp in table.tolist()]


def _take_reserved_slot(
    offers: Sequence[tuple[int, int, float]],
    eos: int,
    logprobs: torch.Tensor,
    token_logprobs: list[list[float]],
    keep_rows: list[int],
    keep_tokens: list[int],
    keep_scores: list[float],
    keep_logprobs: list[list[float]],
) -> None:
    """Widen the beam by one row for the best offered continuation unless an offer already holds a row.

    A scorer (phrase boosting) offers ``(row, token, score)`` continuations that deserve to be
    explored even below the beam's cut (a rare name's first token). The extra row displaces no
    hypothesis: the ``beam`` best continuations are kept as without it, so the search only
    widens while such an offer exists. The kept lists are edited in place. Offers of end-of-text
    are ignored: finishing is the ranking's business.
    """
    offers = [offer for offer in offers if offer[1] != eos]
    if not offers:
        return
    kept = set(zip(keep_rows, keep_tokens))
    if any((row, token) in kept for row, token, _ in offers):
        return
    row, token, score = offers[0]
    keep_rows.append(row)
    keep_tokens.append(token)
    keep_scores.append(score)
    keep_logprobs.append(token_logprobs[row] + [float(logprobs[row, token])])


def beam_search(
    model: AutoregressiveModel,
    prompt: torch.Tensor,
    options: DecodingOptions,
    *,
    processors: Sequence[LogitsProcessor] = (),
    probe_index: Optional[int] = None,
) -> GenerationResult:
    """Beam search for one prompt ``(1, T0)``; returns the best hypothesis (batch of one).

    Args:
      model: the target model.
      prompt: ``(1, T0)`` token ids.
      options: ``beam_size``, ``patience``, ``length_penalty``, ``max_new_tokens``, ``eos_token_id``.
      processors: the logits-processor chain.
      probe_index: absolute position whose raw logits to return (from the first beam).
    """
    if prompt.shape[0] != 1:
        raise ValueError("beam_search() takes one prompt; batch prompts by calling it per item")
    eos = options.eos_token_id
    if eos is None:
        raise ValueError("beam search needs an end-of-sequence token")
    started = time.perf_counter()
    stats = SpeculativeStats()
    beam = options.beam_size
    prompt_len = prompt.shape[1]
    cache = model.new_cache(1, prompt_len + options.max_new_tokens + 1)
    probe = _ProbeRecorder([probe_index])  # the prompt is one row until the beams split
    if prompt_len > 1:
        probe.prefill(model, prompt[:, :-1], cache)
        stats.target_passes += 1
    cache.reorder(torch.zeros(beam, dtype=torch.long))
    sequences = prompt.repeat(beam, 1)
    sum_logprobs = torch.zeros(beam, dtype=torch.float64, device=prompt.device)
    # Before the first step all rows are the same hypothesis: count it once.
    sum_logprobs[1:] = float("-inf")
    token_logprobs: list[list[float]] = [[] for _ in range(beam)]
    finished: list[tuple[float, list[int], list[float]]] = []
    max_finished = round(beam * options.patience)
    # Processors that edit logits (suppression, timestamp rules) run before the softmax; those that
    # offer an additive score (``adds_score``: shallow fusion, phrase boosting) are added after it.
    rules = [p for p in processors if not getattr(p, "adds_score", False)]
    scorers = [p for p in processors if getattr(p, "adds_score", False)]

    for _step in range(options.max_new_tokens):
        start = cache.length
        logits = model.forward(sequences[:, -1:], cache)[:, -1]
        stats.target_passes += 1
        probe.see([start], logits[:1, None])
        apply_processors(rules, logits, sequences)
        logprobs = F.log_softmax(logits.float(), dim=-1).double()
        scores = sum_logprobs[:, None] + logprobs
        for scorer in scorers:
            # Fusion scores join after the softmax (log p_AM + alpha log p_LM + beta): added to the
            # logits, a bonus shared by every word-ending token would be normalised away.
            scores = scores + scorer.score(sequences, logprobs.shape[-1]).to(scores)
        candidates = _ranked_candidates(scores, logprobs, min(beam + 1, scores.shape[-1]))
        keep_rows: list[int] = []
        keep_tokens: list[int] = []
        keep_scores: list[float] = []
        keep_logprobs: list[list[float]] = []
        for score, row, token, step_lp in candidates:
            if score == float("-inf"):
                break
            if token == eos:
                # Only an end that ranks above the beam's last live continuation counts as finished
                # (Whisper's rule): collecting every end-of-text in the top beam+1 of *any* row would
                # fill the finished list with weak early stops and end the search too soon.
                if len(finished) < max_finished:
                    generated = sequences[row, prompt_len:].tolist()
                    finished.append((score, generated, token_logprobs[row] + [step_lp]))
            else:
                keep_rows.append(row)
                keep_tokens.append(token)
                keep_scores.append(score)
                keep_logprobs.append(token_logprobs[row] + [step_lp])
                if len(keep_rows) == beam:
                    break
        if keep_rows:
            for scorer in scorers:
                if hasattr(scorer, "reserve"):
                    _take_reserved_slot(scorer.reserve(scores), eos, logprobs, token_logprobs,
                                        keep_rows, keep_tokens, keep_scores, keep_logprobs)
        if len(finished) >= max_finished or not keep_rows:
            break
        while len(keep_rows) < beam:  # fewer live candidates than beams: pad with dead rows
            keep_rows.append(keep_rows[0])
            keep_tokens.append(keep_tokens[0])
            keep_scores.append(float("-inf"))
            keep_logprobs.append(list(keep_logprobs[0]))
        index = torch.tensor(keep_rows, device=sequences.device)
        cache.reorder(index)
        sequences = torch.cat([sequences[index], torch.tensor(keep_tokens, device=sequences.device)[:, None]], dim=1)
        sum_logprobs = torch.tensor(keep_scores, dtype=torch.float64, device=logprobs.device)
        token_logprobs = keep_logprobs
        if cache.length + 1 >= cache.max_length:
            break

    unfinished = not finished
    if unfinished:
        finished = [
            (float(sum_logprobs[r]), sequences[r, prompt_len:].tolist(), token_logprobs[r])
            for r in range(len(sequences))  # beam rows, and a phrase row where one was live
            if sum_logprobs[r] != float("-inf")
        ]
    best = max(
        finished,
        key=lambda f: length_normalised_score(f[0], options.length_offset + len(f[1]), options.length_penalty),
    )
    stats.generated = len(best[1])
    stats.decoder_seconds = time.perf_counter() - started
    return GenerationResult(
        tokens=[best[1]],
        token_logprobs=[best[2]],
        finished=[not unfinished],
        probe_logits=probe.logits,
        stats=stats,
    )
