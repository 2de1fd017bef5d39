"""Drafters for speculative decoding: cheap guesses of the next tokens, verified losslessly.

Every class here implements :class:`burble.decoding.speculative.Drafter`. A drafter only changes
how many target passes a decode takes, never its output: :func:`burble.decoding.generate.generate`
verifies each draft against the target (greedy or by rejection sampling).

* :class:`PromptLookupDrafter` copies what followed an earlier occurrence of the last n tokens
  (in the context, or in a hint such as a prompt text or a previous segment).
* :class:`PreviousHypothesisDrafter` replays an earlier hypothesis of the same audio (streaming
  re-decoding: most of the last partial transcript is still right).
* :class:`ModelDrafter` runs a smaller model sharing the tokenizer, with its own KV cache; the
  early-exit self-draft is a :class:`ModelDrafter` over a view of the target that runs only its
  first layers (the ASR model provides that view).

* :class:`FirstDraft` asks several drafters in turn and keeps the first non-empty draft (e.g. the
  previous hypothesis, then MTP heads where the hypothesis has nothing).

Copy-based drafters return one-hot drafts (``probs=None``): the verifier then accepts a token with
probability ``p(x)``, which is lossless whatever produced the token.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from burble.decoding.logits import sample_from
from burble.decoding.kv_cache import KVCache
from burble.decoding.model import AutoregressiveModel
from burble.decoding.speculative import Draft, Drafter, TargetRule

def _last_match(haystack: Sequence[int], pattern: Sequence[int], end: int) -> int:
    """Start of the last occurrence of ``pattern`` in ``haystack`` that starts before ``end``
    and is followed by at least one token; ``-1`` if none."""
    n = len(pattern)
    last = pattern[-1]
    pattern = list(pattern)
    for i in range(min(end, len(haystack) - n) - 1, -1, -1):
        # Cheap first check on the last token before comparing the whole slice.
        if haystack[i + n - 1] == last and list(haystack[i : i + n]) == pattern:
            return i
    return -1


class PromptLookupDrafter:
    """Prompt-lookup (n-gram) drafting: propose what followed an earlier match of the last n tokens.

    For ``n`` from ``ngram_max`` down to ``ngram_min`` the last ``n`` tokens are searched in the
    context (most recent earlier occurrence first), then in ``hint_tokens``; the first match
    proposes the (up to ``k``) tokens that followed it.

    Args:
      ngram_max: longest suffix to match (longer matches are more reliable).
      ngram_min: shortest suffix to match.
      hint_tokens: an extra token sequence to copy from (e.g. an expected text or a previous
        segment); searched after the context for each ``n``.
    """

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1, hint_tokens: Optional[Sequence[int]] = None) -> None:
        if ngram_min < 1 or ngram_max < ngram_min:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.hint_tokens = [int(t) for t in hint_tokens] if hint_tokens is not None else []

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        tokens = list(tokens)
        if k <= 0:
            return Draft([])
        for n in range(min(self.ngram_max, len(tokens)), self.ngram_min - 1, -1):
            pattern = tokens[-n:]
            # Earlier occurrences only: the suffix itself starts at len - n.
            i = _last_match(tokens, pattern, len(tokens) - n)
            if i >= 0:
                return Draft(tokens[i + n : i + n + k])
            if self.hint_tokens:
                i = _last_match(self.hint_tokens, pattern, len(self.hint_tokens))
                if i >= 0:
                    return Draft(self.hint_tokens[i + n : i + n + k])
        return Draft([])


class PreviousHypothesisDrafter:
    """Propose the continuation of an earlier hypothesis (e.g. the last partial transcript).

    The generated part of the sequence (after the prompt) is aligned with ``previous_tokens``:

    * while the generated tokens equal a prefix of the previous hypothesis, propose what follows;
    * after a divergence, re-synchronise on the last ``resync_ngram`` (down to 1) generated tokens:
      find them in the previous hypothesis (the occurrence nearest to the current position) and
      propose what followed; if they occur nowhere, propose nothing.

    Args:
      previous_tokens: the earlier hypothesis (generated tokens only, no prompt).
      prompt_length: where generation starts in the sequences passed to :meth:`propose`. By
        default the first call fixes it (``generate`` first calls with exactly the prompt), and a
        sequence that does not extend the last one seen starts a new decode.
      resync_ngram: longest suffix used to re-synchronise after a divergence.
    """

    def __init__(
        self, previous_tokens: Sequence[int], *, prompt_length: Optional[int] = None, resync_ngram: int = 3
    ) -> None:
        if resync_ngram < 1:
            raise ValueError("resync_ngram must be >= 1")
        if prompt_length is not None and prompt_length < 0:
            raise ValueError("prompt_length must be >= 0")
        self.previous = [int(t) for t in previous_tokens]
        self.prompt_length = prompt_length
        self.resync_ngram = resync_ngram
        self._start: Optional[int] = prompt_length
        self._prompt: list[int] = []
        self._last_len = 0

    def _generation_start(self, tokens: list[int]) -> int:
        if self.prompt_length is not None:
            return self.prompt_length
        new_decode = (
            self._start is None
            or len(tokens) < self._last_len
            or tokens[: self._start] != self._prompt
        )
        if new_decode:
            self._start = len(tokens)
            self._prompt = tokens[:]
        self._last_len = len(tokens)
        return self._start  # type: ignore[return-value]

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        tokens = list(tokens)
        if k <= 0 or not self.previous:
            return Draft([])
        start = self._generation_start(tokens)
        generated = tokens[start:]
        m = len(generated)
        previous = self.previous
        if previous[:m] == generated:
            return Draft(previous[m : m + k])
        for n in range(min(self.resync_ngram, m), 0, -1):
            pattern = generated[-n:]
            best = -1
            end = len(previous) - n  # the match must be followed by at least one token
            i = _last_match(previous, pattern, end)
            while i >= 0:
                # Alignment is nearly monotonic: prefer the occurrence ending nearest to position m.
                if best < 0 or abs(i + n - m) < abs(best + n - m):
                    best = i
                i = _last_match(previous, pattern, i)
            if best >= 0:
                return Draft(previous[best + n : best + n + k])
        return Draft([])


class ModelDrafter:
    """Draft with a smaller autoregressive model sharing the target's tokenizer.

    The drafter keeps its own :class:`KVCache` in sync with the context: on each call it keeps the
    longest common prefix of what it has cached and the new context (``cache.truncate``) and feeds
    only the rest, then drafts ``k`` tokens one at a time. Draft logits pass through the same
    ``rule`` as the target's (logits processors, temperature, top-k/top-p).

    Args:
      model: the draft model, e.g. a smaller Whisper decoder bound to the same audio, or the
        target's own first layers (early-exit self-draft).
      sample: ``False`` drafts the argmax of the rule's output (valid at any temperature; drafts
        are one-hot). ``True`` samples from the rule's probabilities and returns them as ``q``
        (only for sampling decodes, temperature > 0).
      generator: random source for ``sample=True``.
      return_probs: with ``sample=True``, return ``q`` (``False`` drops it: the sampled tokens are
        then verified as one-hot drafts, which is also lossless).
      eos_token_id: stop drafting after this token (nothing can follow it).
      max_length: capacity limit of the draft cache; ``None`` lets it grow as needed (up to what
        the model's ``new_cache`` grants: a model with a fixed context size caps it, and drafts
        near the end of that context get shorter).
    """

    def __init__(
        self,
        model: AutoregressiveModel,
        *,
        sample: bool = False,
        generator: Optional[torch.Generator] = None,
        return_probs: bool = True,
        eos_token_id: Optional[int] = None,
        max_length: Optional[int] = None,
    ) -> None:
        self.model = model
        self.sample = sample
        self.generator = generator
        self.return_probs = return_probs
        self.eos_token_id = eos_token_id
        self.max_length = max_length
        self.cache: Optional[KVCache] = None
        self._cached: list[int] = []  # tokens whose keys/values are in ``cache``
        self._granted: float = float("inf")  # capacity limit the model imposed on ``new_cache``
        self.forward_passes = 0

    def _ensure_capacity(self, needed: int) -> None:
        if self.cache is not None and (needed <= self.cache.max_length or self.cache.max_length >= self._granted):
            return
        if self.max_length is not None and needed > self.max_length:
            raise ValueError(f"draft context of {needed} tokens exceeds max_length={self.max_length}")
        capacity = max(needed, 2 * self.cache.max_length if self.cache is not None else 256)
        if self.max_length is not None:
            capacity = min(capacity, self.max_length)
        # A fresh cache (the model re-creates any cross-attention state); the context is re-fed.
        self.cache = self.model.new_cache(1, capacity)
        self._cached = []
        # A model may grant less than asked (its context size): then never ask again.
        self._granted = self.cache.max_length if self.cache.max_length < capacity else float("inf")

    def _feed(self, tokens: list[int]) -> torch.Tensor:
        assert self.cache is not None
        device = self.cache.keys[0].device if self.cache.keys else None
        logits = self.model.forward(torch.tensor([tokens], device=device), self.cache)
        self.forward_passes += 1
        self._cached.extend(tokens)
        return logits[0, -1]

    def _sync(self, tokens: list[int]) -> torch.Tensor:
        """Bring the cache to ``tokens`` and return the logits of the token after them."""
        assert self.cache is not None
        common = 0
        limit = min(len(self._cached), len(tokens) - 1)  # re-feed at least the last token for its logits
        while common < limit and self._cached[common] == tokens[common]:
            common += 1
        self.cache.truncate(common)
        del self._cached[common:]
        return self._feed(tokens[common:])

    def _choose(self, dist: torch.Tensor, check: bool) -> int:
        if not self.sample:
            return int(dist.argmax())
        # Checked once per draft: a greedy rule returns logits, which sampling would misread.
        if check and (bool((dist < 0).any()) or abs(float(dist.sum()) - 1.0) > 1e-4):
            raise ValueError(
                "ModelDrafter(sample=True) needs a sampling decode (temperature > 0): the rule did not return probabilities"
            )
        return int(sample_from(dist, self.generator))

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        tokens = [int(t) for t in tokens]
        if k <= 0 or not tokens:
            return Draft([])
        # Drafting k tokens feeds the context and the first k - 1 of them.
        self._ensure_capacity(len(tokens) + k - 1)
        assert self.cache is not None
        k = min(k, self.cache.max_length - len(tokens) + 1)  # at the end of the model's context
        if k <= 0:
            return Draft([])
        logits = self._sync(tokens)
        drafted: list[int] = []
        dists: list[torch.Tensor] = []
        for i in range(k):
            dist = rule(logits, tokens + drafted)
            token = self._choose(dist, check=i == 0)
            drafted.append(token)
            dists.append(dist)
            if i == k - 1 or token == self.eos_token_id:
                break
            logits = self._feed([token])
        probs = torch.stack(dists) if self.sample and self.return_probs else None
        return Draft(drafted, probs)

    def reset(self) -> None:
        """Forget the cached context (e.g. after re-binding the model to new audio)."""
        self.cache = None
        self._cached = []
        self._granted = float("inf")


class FirstDraft:
    """Ask ``drafters`` in order; the first non-empty draft is proposed.

    Args:
      drafters: tried in this order every pass (each keeps its own state).
    """

    def __init__(self, drafters: Sequence["Drafter"]) -> None:
        if not drafters:
            raise ValueError("FirstDraft needs at least one drafter")
        self.drafters = list(drafters)

    def propose(self, tokens: Sequence[int], k: int, rule: TargetRule) -> Draft:
        for drafter in self.drafters:
            draft = drafter.propose(tokens, k, rule)
            if draft.tokens:
                return draft
        return Draft([])
