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
from burble.decoding.schedule import DraftSchedule
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
    """Keeps each row's raw logits at its own absolute position, whichever pass produces them."""

    def __init__(self, indices: list[Optional[int]]) -> None:
        self.indices = indices
        self.logits: Optional[torch.Tensor] = None
        # Passes that start past every probe (almost all of them) skip the per-row scan.
        self._last = max((i for i in indices if i is not None), default=-1)

    def _keep(self, b: int, row_logits: torch.Tensor) -> None:
        if self.logits is None:
            self.logits = torch.full((len(self.indices), row_logits.shape[-1]), float("nan"), dtype=row_logits.dtype, device=row_logits.device)
        self.logits[b] = row_logits

    def see(self, starts: Sequence[int], logits: torch.Tensor) -> None:
        """A pass that fed row ``b`` at positions ``starts[b] ..`` returned ``logits`` ``(B, T, V)``."""
        if min(starts) > self._last:
            return
        for b, (index, start) in enumerate(zip(self.indices, starts)):
            if index is not None and start <= index < start + logits.shape[1]:
                self._keep(b, logits[b, index - start])

    def prefill(self, model: AutoregressiveModel, tokens: torch.Tensor, cache: KVCache) -> None:
        """Run a prompt's ``tokens`` into ``cache``, keeping only the logits this probe needs.

        A :class:`~burble.decoding.model.PrefillModel` projects just the probes' rows (if they
        lie in the prompt) instead of every prompt row: with Whisper's previous-text prompt (up
        to 224 tokens) that projection was the largest single cost of a window's decode.
        """
        start = cache.length
        prefill = getattr(model, "prefill", None)
        if prefill is None:
            self.see([start] * len(self.indices), model.forward(tokens, cache))
            return
        inside = sorted({i - start for i in self.indices if i is not None and start <= i < start + tokens.shape[1]})
        logits = prefill(tokens, cache, inside)
        for b, index in enumerate(self.indices):
            if index is not None and index - start in inside:
                self._keep(b, logits[b, inside.index(index - start)])


def _working_precision(logits: torch.Tensor) -> torch.Tensor:
    """fp32 for half-precision logits; fp64 logits stay fp64 (exact statistical tests)."""
    return logits if logits.dtype == torch.float64 else logits.float()


class TargetRuleOf:
    """The :data:`~burble.decoding.speculative.TargetRule` of a row: its processor chain, then the
    sampling warpers (or, at temperature 0, the processed logits).

    Attributes:
      plain_temperature: ``T`` when the rule is nothing but ``softmax(logits / T)`` (no processor,
        top-k or top-p; ``T >= 1e-6``), else ``None``. A sampling drafter may then compute its
        ``q`` over the few rows it scores instead of running the rule over the whole vocabulary:
        verification is exact for any ``q`` the draft was sampled from, so this changes cost,
        never the output.
    """

    def __init__(self, chain: Sequence[LogitsProcessor], options: DecodingOptions, device: torch.device) -> None:
        self.chain = chain
        self.options = options
        self.device = device
        # (From 1e-6 up, logits / T cannot overflow float32: below it only warp()'s shift is safe.)
        plain = not chain and options.temperature >= 1e-6 and options.top_k == 0 and options.top_p >= 1.0
        self.plain_temperature: Optional[float] = options.temperature if plain else None

    def __call__(self, logits: torch.Tensor, prefix: Sequence[int]) -> torch.Tensor:
        processed = _working_precision(logits).clone().unsqueeze(0)
        if self.chain:  # drafters call this per drafted token: no prefix tensor when nothing reads it
            apply_processors(self.chain, processed, torch.tensor([list(prefix)], device=self.device))
        o = self.options
        if o.temperature == 0:
            return processed[0]
        return warp(processed[0], temperature=o.temperature, top_k=o.top_k, top_p=o.top_p)


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
    drafter: Optional[Drafter | Sequence[Drafter]] = None,
    probe_index: Optional[int | Sequence[Optional[int]]] = None,
    generator: Optional[torch.Generator] = None,
    on_tokens: Optional[Callable[[list[list[int]]], None]] = None,
    schedule: Optional[DraftSchedule] = None,
    prompt_lengths: Optional[Sequence[int]] = None,
    row_processors: Optional[Sequence[Sequence[LogitsProcessor]]] = None,
    row_max_new_tokens: Optional[Sequence[int]] = None,
) -> GenerationResult:
    """Decode a continuation of ``prompt`` with greedy search or sampling, optionally speculative.

    Args:
      model: the target model (see :class:`AutoregressiveModel`).
      prompt: ``(B, T0)`` token ids; rows of different lengths are right-padded (``prompt_lengths``).
      options: search options; ``beam_size`` must be 1 here (see :func:`burble.decoding.beam.beam_search`).
      processors: the logits-processor chain, applied to every position before any decision.
      drafter: a speculative drafter (batch 1), or one per row: each row drafts, and accepts, its
        own number of tokens (the model must be a :class:`~burble.decoding.model.RaggedModel`);
        ``None`` decodes one token per pass.
      probe_index: absolute position whose raw logits to return (Whisper's no-speech
        probability), or one per row.
      generator: random source for sampling.
      on_tokens: called after every pass with each row's newly generated tokens (end of sequence
        excluded), so a consumer can stream them (TTS turns them into audio as they come).
      schedule: chooses each pass's draft length (at most ``options.draft_length``) from the
        pass cost and the rows' acceptance, and learns both (:mod:`burble.decoding.schedule`);
        ``None`` drafts ``options.draft_length`` tokens every pass.
      prompt_lengths: each row's prompt length (rows of different streams: different previous
        text); the rows then stand at different lengths from the start (a ``RaggedModel``).
      row_processors: a processor chain per row instead of ``processors`` (rows whose prompts,
        hence whose processors' notion of where the text begins, differ).
      row_max_new_tokens: each row's own limit (at most ``options.max_new_tokens``): a row stops
        where it would stop decoded alone (a stream caps its decode by its audio's length).

    Returns:
      A :class:`GenerationResult`.
    """
    if options.beam_size != 1:
        raise ValueError("generate() does greedy/sampling; use beam_search() for beam_size > 1")
    batch, prompt_len = prompt.shape
    lengths = _prompt_lengths(prompt_lengths, prompt, model)
    drafters = _row_drafters(drafter, batch, model)
    if row_processors is not None and (processors or len(row_processors) != batch):
        raise ValueError("row_processors needs one chain per row (and no shared processors)")
    chains = list(row_processors) if row_processors is not None else [processors] * batch
    limits = [options.max_new_tokens] * batch if row_max_new_tokens is None else [int(n) for n in row_max_new_tokens]
    if len(limits) != batch or any(not 0 <= n <= options.max_new_tokens for n in limits):
        raise ValueError(f"row_max_new_tokens needs one limit in [0, {options.max_new_tokens}] per row")
    started = time.perf_counter()
    stats = SpeculativeStats()
    k_max = options.draft_length if drafters is not None else 0
    cache = model.new_cache(batch, prompt_len + options.max_new_tokens + k_max + 1)
    if batch > 1 and (drafters is not None or len(set(lengths)) > 1):
        cache.zero_()  # rows at different lengths: see KVCache.zero_
    indices = list(probe_index) if isinstance(probe_index, (list, tuple)) else [probe_index] * batch
    if len(indices) != batch:
        raise ValueError(f"{len(indices)} probe indices for {batch} rows")
    probe = _ProbeRecorder(indices)  # type: ignore[arg-type]
    eos = options.eos_token_id
    device = prompt.device

    rules = [TargetRuleOf(chain, options, device) for chain in chains] if drafters is not None else []

    if max(lengths) > 1:  # every row's prompt but its last token (a shorter row's extra slots are rewritten)
        probe.prefill(model, prompt[:, : max(lengths) - 1], cache)
        stats.target_passes += 1
    # Every row's tokens live in one preallocated buffer: ``history[b, :lengths[b]]`` is row b's
    # sequence so far and a pass writes its draft just after it, so each verified position's
    # prefix is a view (no ``torch.cat`` per position or per pass). Rows that drafted are mirrored
    # on the host for their drafters. Rows stay at one length unless their drafts are accepted
    # to different lengths; the cache then holds row b's keys at ``[0, lengths[b] - 1)``.
    history = torch.empty((batch, prompt_len + options.max_new_tokens + k_max + 1), dtype=prompt.dtype, device=device)
    history[:, :prompt_len] = prompt
    host_rows = [prompt[b, :n].tolist() for b, n in enumerate(lengths)] if drafters is not None else []
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logprobs: list[list[float]] = [[] for _ in range(batch)]
    finished = [False] * batch
    row_accepted, row_misses = [0] * batch, [0] * batch  # the rows' drafting so far (for the schedule)

    # A row is active until it finishes or reaches the length limit (row 0 may stop before others).
    while any(not done and len(row) < limit for done, row, limit in zip(finished, tokens, limits)):
        done_before = [done or len(row) >= limit for done, row, limit in zip(finished, tokens, limits)]
        drafts: list[list[int]] = [[] for _ in range(batch)]
        draft_probs: list[Optional[torch.Tensor]] = [None] * batch
        tree: Optional[DraftTree] = None
        rooms = [  # the longest draft each row may take
            0 if done else max(0, min(k_max, limit - len(row) - 1)) for done, row, limit in zip(done_before, tokens, limits)
        ]
        if schedule is not None and drafters is not None:
            acceptance = [schedule.row_acceptance(a, m) for a, m in zip(row_accepted, row_misses)]
            k = schedule.draft_length(acceptance, rooms, k_max)
            rooms = [min(room, k) for room in rooms]
        for b in range(batch if drafters is not None else 0):
            if rooms[b] <= 0:
                continue
            draft = drafters[b].propose(list(host_rows[b]), rooms[b], rules[b])  # type: ignore[index]
            tree_room = cache.max_length - lengths[0] if batch == 1 else 0  # a tree may have more nodes than k
            drafts[b], draft_probs[b], tree = _usable_draft(draft, rooms[b], options.temperature, model, tree_room)
        if tree is not None:
            n_accepted, emitted, emitted_logprobs = _verify_tree(
                model, tree, cache, history[:, : lengths[0]], chains[0], probe  # type: ignore[arg-type]
            )
            stats.target_passes += 1
            stats.record_round(max(tree.depths), n_accepted)
            accepted = [n_accepted]
        else:
            pass_started = time.perf_counter()
            accepted, emitted, emitted_logprobs = _verify_chain(
                model, drafts, draft_probs, cache, history, lengths, chains, probe, options, generator
            )
            stats.target_passes += 1
            if schedule is not None:
                schedule.observe_pass(batch, 1 + max(len(d) for d in drafts), time.perf_counter() - pass_started)
            for b, draft in enumerate(drafts):
                row_accepted[b] += accepted[b]
                row_misses[b] += accepted[b] < len(draft)
            if drafters is None or batch == 1:
                stats.record_round(len(drafts[0]), accepted[0])
            else:  # a round per drafting row
                for b in range(batch):
                    if not done_before[b]:
                        stats.record_round(len(drafts[b]), accepted[b])
        # Rows: the accepted draft, then the verifier's token (log-probs under the processed logits).
        counts = [len(row) for row in tokens] if on_tokens is not None else []
        for b in range(batch):
            if finished[b]:
                continue
            for token, logprob in zip(emitted[b], emitted_logprobs[b]):
                if len(tokens[b]) >= limits[b]:
                    break
                logprobs[b].append(logprob)
                if eos is not None and token == eos:
                    finished[b] = True
                    break
                tokens[b].append(token)
        if on_tokens is not None:
            on_tokens([row[n:] for row, n in zip(tokens, counts)])
        # Without drafts, finished rows keep feeding end-of-sequence so the batch stays at one
        # length; rows with drafters stand apart anyway, and a done row stays where it is.
        widths = [n + 1 for n in accepted]
        if drafters is not None and batch > 1:
            widths = [0 if done else w for w, done in zip(widths, done_before)]
        new = [[eos] * w if done else row[:w] for w, done, row in zip(widths, finished, emitted)]
        if len(set(widths)) == 1 and len(set(lengths)) == 1:  # one copy for the whole batch
            history[:, lengths[0] : lengths[0] + widths[0]] = torch.tensor(new, device=device)
        else:
            for b, row in enumerate(new):
                history[b, lengths[b] : lengths[b] + widths[b]] = torch.tensor(row, device=device)
        lengths = [n + w for n, w in zip(lengths, widths)]
        if len(set(lengths)) == 1:
            cache.truncate(lengths[0] - 1)  # roll back rejected drafts (ragged rows: by their starts)
        for host_row, row in zip(host_rows, new):
            host_row.extend(row)

    if schedule is not None and drafters is not None:
        schedule.observe_decode(sum(row_accepted), sum(row_misses))
    stats.generated = sum(len(t) for t in tokens)
    stats.decoder_seconds = time.perf_counter() - started
    return GenerationResult(
        tokens=tokens, token_logprobs=logprobs, finished=finished, probe_logits=probe.logits, stats=stats
    )


def _prompt_lengths(prompt_lengths: Optional[Sequence[int]], prompt: torch.Tensor, model: AutoregressiveModel) -> list[int]:
    """Each row's prompt length; rows of different lengths need a model that places rows apart."""
    batch, width = prompt.shape
    if prompt_lengths is None:
        lengths = [width] * batch
    else:
        lengths = [int(n) for n in prompt_lengths]
        if len(lengths) != batch or any(not 1 <= n <= width for n in lengths):
            raise ValueError(f"prompt_lengths needs one length in [1, {width}] per row ({batch} rows)")
    if min(lengths, default=0) < 1:
        raise ValueError("the prompt needs at least one token")
    if len(set(lengths)) > 1 and not hasattr(model, "forward_rows"):
        raise ValueError("prompts of different lengths need a model with forward_rows (RaggedModel)")
    return lengths


def _row_drafters(
    drafter: Optional[Drafter | Sequence[Drafter]], batch: int, model: AutoregressiveModel
) -> Optional[list[Drafter]]:
    """One drafter per row (or ``None``); a ragged batch needs a model that places rows apart."""
    if drafter is None:
        return None
    if not isinstance(drafter, (list, tuple)):
        if batch != 1:
            raise ValueError("a batch of more than one row needs one drafter per row (a sequence of drafters)")
        return [drafter]  # type: ignore[list-item]
    if len(drafter) != batch:
        raise ValueError(f"{len(drafter)} drafters for {batch} rows")
    if batch > 1 and not hasattr(model, "forward_rows"):
        raise ValueError("batched speculative decoding needs a model with forward_rows (RaggedModel)")
    return list(drafter)


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
    drafts: list[list[int]],
    draft_probs: list[Optional[torch.Tensor]],
    cache: KVCache,
    history: torch.Tensor,
    lengths: list[int],
    chains: list[Sequence[LogitsProcessor]],
    probe: _ProbeRecorder,
    options: DecodingOptions,
    generator: Optional[torch.Generator],
) -> tuple[list[int], list[list[int]], list[list[float]]]:
    """One pass over each row's ``[last token] + draft``; returns per row the accepted draft
    length, the emitted tokens and their log-probs.

    Rows at one length run the plain ``forward`` (the cache is cut back to that length first);
    rows at different lengths (drafts accepted to different lengths) run ``forward_rows``, each
    from its own position. Rows with shorter drafts are padded with their last token: the logits
    past a row's draft are never read.
    """
    device = history.device
    width = 1 + max(len(d) for d in drafts)
    for b, draft in enumerate(drafts):
        end = lengths[b] + width - 1
        if draft:
            history[b, lengths[b] : lengths[b] + len(draft)] = torch.tensor(draft, device=device)
        if lengths[b] + len(draft) < end:
            history[b, lengths[b] + len(draft) : end] = history[b, lengths[b] - 1]
    uniform = len(set(lengths)) == 1
    if uniform:
        length = lengths[0]
        cache.truncate(length - 1)
        step_input = history[:, length - 1 : length - 1 + width]
        logits = model.forward(step_input, cache)
        probe.see([length - 1] * len(lengths), logits)
    else:
        starts = torch.tensor([n - 1 for n in lengths], device=device)
        step_input = torch.stack([history[b, n - 1 : n - 1 + width] for b, n in enumerate(lengths)])
        logits = model.forward_rows(step_input, cache, starts)  # type: ignore[attr-defined]
        probe.see([n - 1 for n in lengths], logits)

    processed = _working_precision(logits).clone()
    shared = all(chain is chains[0] for chain in chains)
    if uniform and shared:
        for j in range(width):
            apply_processors(chains[0], processed[:, j], history[:, : lengths[0] + j])
    elif any(chains):
        # Rows whose verified positions have prefixes of one length and one chain share a call
        # (the chain is batched; Whisper's timestamp rules cost ~1 ms a call).
        groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for b, draft in enumerate(drafts):
            for j in range(len(draft) + 1 if not uniform else width):
                groups.setdefault((lengths[b] + j, id(chains[b])), []).append((b, j))
        for (prefix_length, _), cells in groups.items():
            rows = torch.tensor([b for b, _ in cells], device=device)
            columns = torch.tensor([j for _, j in cells], device=device)
            chosen = processed[rows, columns]
            apply_processors(chains[cells[0][0]], chosen, history[rows, :prefix_length])
            processed[rows, columns] = chosen

    if not any(drafts):  # plain decoding: every row's next token at once, on the device
        if options.temperature == 0:
            verified = processed[:, 0].argmax(dim=-1)
        else:
            probs = warp(processed[:, :1], temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)
            verified = sample_from(probs[:, 0], generator)
        emitted, logprobs = _emitted_with_logprobs(processed, [], verified)
        return [0] * len(drafts), emitted, logprobs
    if options.temperature != 0:
        probs = warp(processed, temperature=options.temperature, top_k=options.top_k, top_p=options.top_p)
    accepted: list[int] = []
    emitted, logprobs = [], []
    for b, draft in enumerate(drafts):
        rows = processed[b, : len(draft) + 1]
        if options.temperature == 0:
            n, token = verify_greedy(draft, rows)
        else:
            n, token = verify_sampling(draft, draft_probs[b], probs[b, : len(draft) + 1], generator)
        row_emitted, row_logprobs = _emitted_with_logprobs(processed[b : b + 1], draft[:n], token)
        accepted.append(n)
        emitted += row_emitted
        logprobs += row_logprobs
    return accepted, emitted, logprobs


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
    probe.see([start], logits[:, rows])
    emitted, logprobs = _emitted_with_logprobs(processed[:, rows], [tree.tokens[n] for n in path], verified)
    cache.compact(start + 1, [start + 1 + node for node in path])
    cache.truncate(start + 1 + len(path))
    return len(path), emitted, logprobs
