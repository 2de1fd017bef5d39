"""Speech out: text -> phonemes -> codec tokens (a codec LM on the shared decoding core) -> audio.

* :mod:`burble.tts.normalize`: written English -> spoken words (numbers, money, abbreviations), sentences;
* :mod:`burble.tts.phonemes`: espeak-ng IPA phonemes and the voice's phoneme inventory;
* :mod:`burble.tts.model`: the codec LM (``CodecLM``) and its per-utterance ``AutoregressiveModel`` view;
* :mod:`burble.tts.synthesizer`: ``load(voice)`` -> ``Synthesizer`` with ``synthesize`` and ``stream``;
* :mod:`burble.tts.pipeline`: the streaming synthesis pipeline (text source -> TTS stage -> audio sinks).

The voice is trained by ``recipes/tts`` and ships in ``burble/tts/weights``.
"""

from __future__ import annotations

from burble.lazy import lazy_exports

_EXPORTS = {
    "load": "burble.tts.synthesizer", "available_voices": "burble.tts.synthesizer",
    "Synthesizer": "burble.tts.synthesizer", "SynthesisOptions": "burble.tts.synthesizer",
    "Synthesis": "burble.tts.synthesizer", "TTSInputError": "burble.tts.normalize",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
