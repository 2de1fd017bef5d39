"""Text below every model: how written forms are read aloud.

- ``numbers``: English number words (cardinals, ordinals, years read in pairs) via ``num2words``,
  shared by the LM text normaliser (``burble.asr.fusion.normalize``), the forced aligner's
  pronunciations (``burble.metrics.pronounce``) and, later, TTS text normalisation.

This package imports nothing else from burble.
"""
