"""Decode-time biasing for Whisper: n-gram shallow fusion (KenLM) and phrase boosting.

Both are logits processors of the shared decoding core (:mod:`burble.decoding.logits`), so greedy,
sampling, beam search, speculative verification, streaming and the server all use them alike.
"""

from burble.asr.fusion.boosting import Phrase, PhraseBooster, load_phrases, parse_phrase
from burble.asr.fusion.config import BiasingConfig, processor_factory
from burble.asr.fusion.lm import build_lm, install_kenlm_tools, load_lm
from burble.asr.fusion.normalize import LMTextNormalizer
from burble.asr.fusion.shallow_fusion import FusionOptions, ShallowFusion

__all__ = [
    "BiasingConfig", "FusionOptions", "LMTextNormalizer", "Phrase", "PhraseBooster", "ShallowFusion",
    "build_lm", "install_kenlm_tools", "load_lm", "load_phrases", "parse_phrase", "processor_factory",
]
