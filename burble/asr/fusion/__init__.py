"""Decode-time biasing for Whisper: n-gram shallow fusion (KenLM) and phrase boosting.

Both are logits processors of the shared decoding core (:mod:`burble.decoding.logits`), so greedy,
sampling, beam search, speculative verification, streaming and the server all use them alike.
"""

from __future__ import annotations

from burble.lazy import lazy_exports

# Loaded on first use: the CLI's argument parsers import this package and need no torch.
_EXPORTS = {
    "BoostOptions": "burble.asr.fusion.boosting", "Phrase": "burble.asr.fusion.boosting",
    "PhraseBooster": "burble.asr.fusion.boosting", "TokenizationOptions": "burble.asr.fusion.tokenizations",
    "PhoneticMatcher": "burble.asr.fusion.phonetic", "PhoneticOptions": "burble.asr.fusion.phonetic",
    "load_phrases": "burble.asr.fusion.boosting", "parse_phrase": "burble.asr.fusion.boosting",
    "BiasingConfig": "burble.asr.fusion.config", "processor_factory": "burble.asr.fusion.config",
    "build_lm": "burble.asr.fusion.lm", "install_kenlm_tools": "burble.asr.fusion.lm", "load_lm": "burble.asr.fusion.lm",
    "LMTextNormalizer": "burble.asr.fusion.normalize",
    "FusionOptions": "burble.asr.fusion.shallow_fusion", "ShallowFusion": "burble.asr.fusion.shallow_fusion",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
