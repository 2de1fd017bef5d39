"""The decoder prompt of a Whisper window, as a pure function of the options.

``[<|startofprev|> previous...] <|startoftranscript|> [language task] [<|notimestamps|>] [prefix]``.
Nothing here reads or writes tokenizer state: the language and task come from the options each
time, so callers decoding different languages with one shared model cannot disturb each other.
"""

from __future__ import annotations

from typing import Optional, Sequence

from burble.asr.options import TranscribeOptions
from burble.asr.tokenizer import WhisperTokenizer


def prompt_language(tokenizer: WhisperTokenizer, options: TranscribeOptions) -> Optional[str]:
    """The language token's code: the option, English on multilingual models without one, ``None``
    on English-only models (they have no language tokens)."""
    if not tokenizer.multilingual:
        return None
    return options.language if options.language is not None else "en"


def sot_sequence(tokenizer: WhisperTokenizer, options: TranscribeOptions) -> tuple[int, ...]:
    """``<|startoftranscript|>`` and, on multilingual models, the language and task tokens."""
    return tokenizer.sot_sequence(prompt_language(tokenizer, options), options.task)


def build_prompt(
    tokenizer: WhisperTokenizer,
    n_text_ctx: int,
    previous_tokens: Sequence[int],
    options: TranscribeOptions,
    prefix: Optional[str] = None,
) -> list[int]:
    """The prompt of one window.

    Args:
      n_text_ctx: the decoder's context; previous text and prefix get at most half of it.
      previous_tokens: text tokens of what came before (previous-text conditioning).
      prefix: text the window's transcript must start with.
    """
    max_prompt = n_text_ctx // 2 - 1
    prompt: list[int] = []
    if previous_tokens:
        prompt.append(tokenizer.sot_prev)
        prompt.extend(previous_tokens[-max_prompt:])
    prompt.extend(sot_sequence(tokenizer, options))
    if options.without_timestamps:
        prompt.append(tokenizer.no_timestamps)
    if prefix:
        if not options.without_timestamps:
            prompt.append(tokenizer.timestamp_begin)
        prompt.extend(tokenizer.encode(" " + prefix.strip())[:max_prompt])
    return prompt
