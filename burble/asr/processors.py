"""The logits-processor chain of one Whisper window: suppression, the blank rule, the timestamp grammar.

:func:`logit_screen` says when the chain lets greedy decoding screen its logits in int8.

A caller's own processors (shallow fusion, phrase boosting) join per call through a
:data:`ProcessorFactory`; the model holds none of its own, so two callers never share biasing.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.tokenizer import TIME_PRECISION
from burble.asr.whisper.model import WhisperTextModel
from burble.asr.whisper.rules import TimestampRules
from burble.decoding.logits import LogitsProcessor, SuppressAtBegin, SuppressTokens
from burble.kernels.screened_projection import ScreenPolicy

# Builds extra processors for one window, given the prompt length (sample_begin).
ProcessorFactory = Callable[[int], Sequence[LogitsProcessor]]


def suppressed_tokens(whisper: LoadedWhisper, options: TranscribeOptions) -> list[int]:
    """Tokens never sampled: the options' list (``-1``: the non-speech symbols) and the specials."""
    tokenizer = whisper.tokenizer
    ids: set[Optional[int]] = set()
    for token in options.suppress_tokens:
        if token >= 0:
            ids.add(token)
        elif token == -1:
            ids.update(whisper.suppress_ids or tokenizer.non_speech_tokens)
    ids.update(
        [tokenizer.transcribe, tokenizer.translate, tokenizer.sot, tokenizer.sot_prev,
         tokenizer.special.get("<|startoflm|>"), tokenizer.no_speech]
    )
    return sorted(i for i in ids if i is not None)


def window_processors(
    whisper: LoadedWhisper, prompt: list[int], options: TranscribeOptions, extra: Optional[ProcessorFactory] = None
) -> list[LogitsProcessor]:
    """The chain for one window; ``extra`` (one caller's biasing) gets the prompt length."""
    sample_begin = len(prompt)
    chain: list[LogitsProcessor] = [SuppressTokens(suppressed_tokens(whisper, options))]
    if options.suppress_blank:
        chain.append(SuppressAtBegin(whisper.suppress_ids_begin, sample_begin))
    if prompt[-1] != whisper.tokenizer.no_timestamps and not options.without_timestamps:
        index = round(options.max_initial_timestamp / TIME_PRECISION)
        chain.append(TimestampRules(whisper.tokenizer, sample_begin, index))
    if extra is not None:
        chain.extend(extra(sample_begin))
    return chain


def logit_screen(
    whisper: LoadedWhisper, text_model: WhisperTextModel, chain: Sequence[LogitsProcessor]
) -> Optional[ScreenPolicy]:
    """The int8 logit screen's policy for a greedy window under ``chain``, or ``None`` if it could change a token.

    The screen keeps the argmax exact over any set of tokens that holds every *free* token or
    none (:mod:`burble.kernels.screened_projection`). Whisper's own chain only masks such sets:
    ``SuppressTokens`` a fixed list (ignored by the screen), ``SuppressAtBegin`` the blank and
    end-of-text (kept exact), the timestamp grammar all text at once or ranges of the specials
    and timestamps (all kept exact; its rule 5 compares their exact log-sum-exp with the exact
    best text logit). Any other processor (shallow fusion, phrase boosting) adds scores to single
    tokens, so with one in the chain the screen stays off.
    """
    exact = set(range(whisper.tokenizer.eot, text_model.vocab_size))
    ignored: set[int] = set()
    for processor in chain:
        if isinstance(processor, SuppressTokens):
            ignored.update(processor.token_ids)
        elif isinstance(processor, SuppressAtBegin):
            exact.update(processor.token_ids)
        elif not isinstance(processor, TimestampRules):
            return None
    return text_model.screen_policy(exact=sorted(exact), ignored=sorted(ignored))
