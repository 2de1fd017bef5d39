"""One description of "how to bias decoding" for the CLI, the Python API and the WebSocket ``start`` message.

:class:`BiasingConfig` names an n-gram LM (path + :class:`FusionOptions`) and/or boosted phrases;
:func:`processor_factory` turns it into the per-window processor factory that the per-call
``extra_processors`` argument of ``WhisperASR`` takes (called with the prompt length of each window);
:func:`phonetic_matcher` gives the post-search correction of the same phrases (on by default where
espeak-ng is installed) that batch transcription and streaming apply to their words.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from burble.asr.fusion.boosting import BoostOptions, PhraseBooster
from burble.asr.fusion.phrases import DEFAULT_WEIGHT, Phrase, as_phrases, load_phrases
from burble.asr.fusion.lm import load_lm
from burble.asr.fusion.phonetic import PhoneticMatcher, PhoneticOptions, espeak_available, single_token_words
from burble.asr.fusion.shallow_fusion import FusionOptions, ShallowFusion
from burble.asr.tokenizer import WhisperTokenizer

ProcessorFactory = Callable[[int], list]
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BiasingConfig:
    """Shallow fusion and phrase boosting settings.

    Attributes:
      lm: path of an ARPA or KenLM binary LM (``None``: no fusion).
      fusion: fusion weights and normalisation.
      phrases: boosted phrases with their per-token weights.
      case_variants: boost Capitalized, Title Case and lower-case forms of each phrase too.
      context: text preceding the audio (fusion history), e.g. a stream's committed text.
      boost: how phrases are tokenized and compete in beam search (:class:`BoostOptions`).
      phonetic: after the search, replace word runs that sound like a phrase with it
        (:class:`~burble.asr.fusion.phonetic.PhoneticMatcher`; ``None``: off). On by default: on
        the independent biasing set it lifts keyword recall from 76.9% to 82.1% with no false
        insertion in the controls (BENCHMARKS.md, issue 19).
    """

    lm: Optional[str] = None
    fusion: FusionOptions = field(default_factory=FusionOptions)
    phrases: tuple[Phrase, ...] = ()
    case_variants: bool = True
    context: str = ""
    boost: BoostOptions = field(default_factory=BoostOptions)
    phonetic: Optional[PhoneticOptions] = field(default_factory=PhoneticOptions)

    @property
    def enabled(self) -> bool:
        return self.lm is not None or bool(self.phrases)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BiasingConfig":
        """From JSON-like options (e.g. a WebSocket ``start`` message)::

            {"lm": "lm.bin", "lm_alpha": 0.5, "lm_beta": 1.0, "hotwords": ["Akerman", "Newgate\\t3"],
             "hotword_weight": 2.0, "phonetic": true, "context": "..."}
        """
        known = {"lm", "lm_alpha", "lm_beta", "lm_oov_log10", "lm_score_eos", "hotwords", "hotword_weight",
                 "case_variants", "phonetic", "context"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown biasing options: {sorted(unknown)} (known: {sorted(known)})")
        fusion = FusionOptions()
        updates = {
            name: data[key]
            for key, name in (("lm_alpha", "alpha"), ("lm_beta", "beta"), ("lm_oov_log10", "oov_log10"),
                              ("lm_score_eos", "score_eos"))
            if key in data
        }
        hotwords = data.get("hotwords") or []
        if isinstance(hotwords, str):
            raise ValueError("hotwords must be a list of phrases")
        return cls(
            lm=data.get("lm"),
            fusion=replace(fusion, **updates),
            phrases=tuple(as_phrases(hotwords, float(data.get("hotword_weight", DEFAULT_WEIGHT)))),
            case_variants=bool(data.get("case_variants", True)),
            phonetic=PhoneticOptions() if data.get("phonetic", True) else None,
            context=str(data.get("context", "")),
        )

    def with_hotwords_file(self, path: str | Path, default_weight: float = DEFAULT_WEIGHT) -> "BiasingConfig":
        return replace(self, phrases=self.phrases + tuple(load_phrases(path, default_weight)))


@lru_cache(maxsize=4)
def _cached_lm(path: str):
    return load_lm(path)


@lru_cache(maxsize=32)
def _cached_booster(
    phrases: tuple[Phrase, ...], tokenizer: WhisperTokenizer, case_variants: bool, options: BoostOptions
) -> PhraseBooster:
    # A server gives every session the same server-wide phrases: compile their automaton once.
    # Sharing is safe: each window decodes with ``for_window``'s copy, which has its own cache.
    return PhraseBooster(phrases, tokenizer, case_variants=case_variants, options=options)


def processor_factory(
    config: BiasingConfig, tokenizer: WhisperTokenizer, *, lm: Any = None
) -> Optional[ProcessorFactory]:
    """``sample_begin -> [ShallowFusion?, PhraseBooster?]`` for a call's ``extra_processors``.

    Args:
      config: what to apply.
      tokenizer: the recogniser's tokenizer.
      lm: an already loaded ``kenlm.Model`` to fuse (default: load ``config.lm``, cached per path).

    Returns:
      ``None`` when the config enables nothing.
    """
    if not config.enabled and lm is None:
        return None
    model = lm if lm is not None else (_cached_lm(str(config.lm)) if config.lm is not None else None)
    booster = _cached_booster(tuple(config.phrases), tokenizer, config.case_variants, config.boost) if config.phrases else None

    def build(sample_begin: int) -> list:
        chain: list = []
        if model is not None:
            chain.append(ShallowFusion(model, tokenizer, config.fusion, sample_begin=sample_begin, context=config.context))
        if booster is not None:
            chain.append(booster.for_window(sample_begin))
        return chain

    return build


@lru_cache(maxsize=32)
def _cached_matcher(phrases: tuple[str, ...], tokenizer: WhisperTokenizer, options: PhoneticOptions) -> PhoneticMatcher:
    # Built once per phrase list (its phrases are phonemized here); its word cache is shared.
    return PhoneticMatcher(phrases, options, common=single_token_words(tokenizer))


_warned_no_espeak = False


def phonetic_matcher(config: BiasingConfig, tokenizer: WhisperTokenizer) -> Optional[PhoneticMatcher]:
    """The phonetic post-matcher of ``config``'s phrases (``None``: no phrases, off, or no espeak-ng).

    Without espeak-ng the phrases are still boosted in the search; a warning says once that the
    post-matching is skipped.
    """
    global _warned_no_espeak
    if config.phonetic is None or not config.phrases:
        return None
    if not espeak_available():
        if not _warned_no_espeak:
            logger.warning("espeak-ng is not installed: hotwords are boosted but not phonetically matched (apt install espeak-ng)")
            _warned_no_espeak = True
        return None
    texts = tuple(dict.fromkeys(" ".join(p.text.split()) for p in config.phrases))
    return _cached_matcher(texts, tokenizer, config.phonetic)
