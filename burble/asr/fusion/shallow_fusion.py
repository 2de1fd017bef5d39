"""Word-level shallow fusion of a KenLM n-gram model into Whisper decoding, as a logits processor.

Whisper emits byte-level BPE tokens; an n-gram LM scores words. A word is complete only when the
token after it is known, so the LM score of word ``w`` is charged to the token that *ends* it:

* every candidate next token that starts a new word (a leading space ``Ġ``), is punctuation that
  ends a word (``,`` ``.`` ``?`` ...; apostrophe pieces such as ``'s`` continue the word), or is a
  special/timestamp token (``>= eot``) completes the pending word (:mod:`burble.asr.fusion.words`);
* all of those candidates complete the *same* word, so they all receive the same bonus
  ``sum over LM words of (alpha * ln P_LM(word | history) + beta)``. One scalar per row is added to
  the columns of a precomputed boolean vocabulary mask (no per-token LM queries);
* continuation tokens get nothing: choosing them postpones the decision to the next boundary;
* end-of-text optionally also gets ``alpha * ln P_LM(</s> | history)`` (``score_eos``);
* optionally (``pending_penalty``) every word-piece token pays a provisional cost that the word's
  completion refunds, so a word's net charge is unchanged but a hypothesis cannot avoid the LM by
  never finishing a word.

Log base: KenLM returns log10 probabilities; they are multiplied by ``ln 10`` so the bonus is in
natural-log units like Whisper's log-probabilities.

The pending word's text goes through :class:`~burble.asr.fusion.normalize.LMTextNormalizer` (the
normaliser used to build the LM corpus), which may turn it into zero LM words (punctuation) or
several ("1818" -> "eighteen eighteen"); each LM word is scored in turn.

State per hypothesis: beam search reorders rows every step, so the KenLM state belongs to the
hypothesis' token prefix, not to the row; :class:`~burble.asr.fusion.prefix_state.PrefixTrie`
keeps it (one node per prefix, a row's node found from its parent among the last call's rows).

History: the LM starts from ``<s>``, then the explicit ``context`` text, then (with
``use_prompt_context``) the previous text Whisper is prompted with (between ``<|startofprev|>``
and ``<|startoftranscript|>``: long-form's previous windows, streaming's committed text), then
any forced prefix text of the prompt. So a streaming recogniser that prompts with its committed
text carries the LM history across chunks.

Scores and normalisation: ``apply`` adds the bonus to the logits like every other processor. For
greedy search and sampling this is exact (argmax and softmax are per-step). Beam search that takes
``log_softmax`` of the processed logits renormalises each step, which cancels most of a bonus
shared by all word-ending tokens; processors of this module therefore set ``adds_score = True``
and offer :meth:`ShallowFusion.score` so a search can add the bonus *after* ``log_softmax``
(classic shallow fusion: ``log p_AM + alpha log p_LM + beta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import torch

from burble.asr.fusion.normalize import LMTextNormalizer
from burble.asr.fusion.prefix_state import PrefixTrie
from burble.asr.fusion.words import is_boundary_piece, is_word_piece, word_boundary_mask, word_piece_mask
from burble.asr.tokenizer import WhisperTokenizer

if TYPE_CHECKING:
    import kenlm

LN10 = math.log(10.0)


@dataclass(frozen=True)
class FusionOptions:
    """How an n-gram LM is fused into decoding.

    Attributes:
      alpha: LM weight on natural-log word probabilities.
      beta: bonus per LM word (offsets the LM's bias towards short outputs).
      oov_log10: log10 probability used for words the LM does not know (``None``: KenLM's own
        ``<unk>`` probability).
      pending_penalty: provisional cost (natural log) of every word-piece token of a word not yet
        complete, refunded when the word completes, so the net charge of a word stays
        ``alpha * ln P + beta``. Without it a search that adds fusion scores after
        ``log_softmax`` can dodge the LM by never ending a word (gluing words together);
        about the LM's mean cost per token is a fair value.
      score_eos: also add ``alpha * ln P(</s> | history)`` to end-of-text (right for utterances
        that end a sentence, wrong for streaming windows that stop mid-sentence).
      use_prompt_context: take the LM history from the prompt's previous text.
      normalizer: maps Whisper words to LM words (must match the one the LM was built with).
    """

    # Chosen on the tuning set (benchmarks/data/biasing_tune.json) with tiny.en and an LJ Speech 3-gram.
    alpha: float = 0.3
    beta: float = 2.0
    pending_penalty: float = 0.0
    oov_log10: Optional[float] = None
    score_eos: bool = False
    use_prompt_context: bool = True
    normalizer: LMTextNormalizer = field(default_factory=LMTextNormalizer)


@dataclass
class _Hypothesis:
    """LM state after the completed words of a prefix, plus the word in progress."""

    state: "kenlm.State"
    pending: tuple[int, ...] = ()
    # Memo of completing ``pending`` now: (bonus, state after the word).
    completion: Optional[tuple[float, "kenlm.State"]] = None
    eos: Optional[float] = None


class ShallowFusion:
    """Adds ``alpha * ln P_LM(word | history) + beta`` for every word a hypothesis completes.

    Args:
      lm: a loaded ``kenlm.Model`` (see :func:`burble.asr.fusion.lm.load_lm`).
      tokenizer: the Whisper tokenizer of the decoded model.
      options: fusion weights and normalisation.
      sample_begin: prompt length (generated tokens start here).
      context: text that precedes everything (e.g. committed text of a stream).
      max_cache: cached prefixes kept before the cache is pruned to the live rows.
    """

    adds_score = True

    def __init__(
        self,
        lm: "kenlm.Model",
        tokenizer: WhisperTokenizer,
        options: FusionOptions = FusionOptions(),
        *,
        sample_begin: int = 0,
        context: str = "",
        max_cache: int = 20000,
    ) -> None:
        import kenlm

        self._kenlm = kenlm
        self.lm = lm
        self.tokenizer = tokenizer
        self.options = options
        self.sample_begin = sample_begin
        self.context = context
        self.max_cache = max_cache
        self._trie: PrefixTrie[_Hypothesis] = PrefixTrie(self._begin, self._advance, max_cache)
        # Per (vocab size, device): the word-boundary mask as float (and the pending-penalty row).
        self._masks: dict[tuple[int, torch.device], tuple[torch.Tensor, Optional[torch.Tensor]]] = {}

    # -- scoring ---------------------------------------------------------------------------------

    def word_log10(self, state: "kenlm.State", word: str) -> tuple[float, "kenlm.State"]:
        """KenLM's log10 P(word | state) (with the OOV override) and the state after it."""
        out = self._kenlm.State()
        log10 = self.lm.BaseScore(state, word, out)
        if self.options.oov_log10 is not None and word not in self.lm:
            log10 = self.options.oov_log10
        return log10, out

    def _complete(self, hyp: _Hypothesis) -> tuple[float, "kenlm.State"]:
        if hyp.completion is None:
            bonus = 0.0
            state = hyp.state
            if hyp.pending:
                for word in self.options.normalizer(self.tokenizer.decode(hyp.pending)):
                    log10, state = self.word_log10(state, word)
                    bonus += self.options.alpha * LN10 * log10 + self.options.beta
                if self.options.pending_penalty:
                    pieces = sum(is_word_piece(self.tokenizer.piece(t)) for t in hyp.pending)
                    bonus += self.options.pending_penalty * pieces  # the refund of the provisional cost
            hyp.completion = (bonus, state)
        return hyp.completion

    def _eos(self, hyp: _Hypothesis) -> float:
        if hyp.eos is None:
            bonus, state = self._complete(hyp)
            log10 = self.lm.BaseScore(state, "</s>", self._kenlm.State())
            hyp.eos = bonus + self.options.alpha * LN10 * log10
        return hyp.eos

    # -- prefix states ---------------------------------------------------------------------------

    def _advance(self, hyp: _Hypothesis, token: int) -> _Hypothesis:
        tokenizer = self.tokenizer
        if token >= tokenizer.eot:
            if token == tokenizer.sot_prev:
                return self._begin()  # previous text starts a fresh history
            if token == tokenizer.sot and not self.options.use_prompt_context:
                return self._begin()
            return _Hypothesis(self._complete(hyp)[1])
        if is_boundary_piece(tokenizer.piece(token)):
            return _Hypothesis(self._complete(hyp)[1], (token,))
        return _Hypothesis(hyp.state, hyp.pending + (token,))

    def _begin(self) -> _Hypothesis:
        state = self._kenlm.State()
        self.lm.BeginSentenceWrite(state)
        for word in self.options.normalizer(self.context):
            _, state = self.word_log10(state, word)
        return _Hypothesis(state)

    @property
    def _nodes(self) -> int:
        """Prefix-trie nodes created since the last pruning."""
        return len(self._trie)

    def hypothesis(self, row: Sequence[int]) -> _Hypothesis:
        """LM state of a full token row (prompt included), walked through the prefix trie."""
        return self._trie.walk(row).state

    def _device_masks(self, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The boundary mask as float, and the pending-penalty row, made once per vocab and device."""
        key = (vocab_size, device)
        if key not in self._masks:
            boundary = word_boundary_mask(self.tokenizer, vocab_size).to(device=device, dtype=torch.float32)
            penalty = None
            if self.options.pending_penalty:
                pieces = word_piece_mask(self.tokenizer, vocab_size).to(device=device, dtype=torch.float32)
                penalty = self.options.pending_penalty * pieces
            self._masks[key] = (boundary, penalty)
        return self._masks[key]

    # -- the processor ---------------------------------------------------------------------------

    def score(self, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Bonus ``(B, vocab_size)`` in natural-log units for each candidate next token of each row."""
        hyps = [node.state for node in self._trie.row_nodes(tokens)]
        word = torch.tensor([self._complete(h)[0] for h in hyps], dtype=torch.float32, device=tokens.device)
        boundary, penalty = self._device_masks(vocab_size, tokens.device)
        bonus = word[:, None] * boundary
        if penalty is not None:
            bonus -= penalty
        if self.options.score_eos and self.tokenizer.eot < vocab_size:
            bonus[:, self.tokenizer.eot] = torch.tensor([self._eos(h) for h in hyps], device=tokens.device)
        return bonus

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        logits.add_(self.score(tokens, logits.shape[-1]).to(logits.dtype))
