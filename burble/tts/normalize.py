"""Written English -> the words a reader says: numbers, money, abbreviations, symbols.

The codec LM is conditioned on phonemes, and espeak-ng would read "Dr." or "$3.50" its own way
(sometimes well, sometimes letter by letter). Normalising first makes the reading explicit,
testable and the same in training data and at synthesis time. Number words come from
:mod:`burble.text.numbers` (years in pairs, cardinals without "and"), as in the LM normaliser.

:func:`normalize_text` returns plain words with sentence punctuation kept (``, ; : . ? !``),
which the phonemizer turns into pauses. :func:`split_sentences` cuts text into the units one
generation speaks.
"""

from __future__ import annotations

import re
import unicodedata

from burble.text.numbers import cardinal_words, ordinal_words, spoken_number


class TTSInputError(ValueError):
    """Text that cannot be spoken (empty, or nothing pronounceable in it)."""


_ABBREVIATIONS = {
    "mr": "mister", "mrs": "missus", "ms": "miz", "dr": "doctor", "st": "saint", "jr": "junior",
    "sr": "senior", "prof": "professor", "gen": "general", "capt": "captain", "col": "colonel",
    "lt": "lieutenant", "sgt": "sergeant", "rev": "reverend", "hon": "honorable", "co": "company",
    "corp": "corporation", "inc": "incorporated", "ltd": "limited", "vs": "versus", "etc": "et cetera",
    "no": "number", "mt": "mount", "ft": "feet", "approx": "approximately", "dept": "department",
}
# Abbreviations that are only abbreviations before a name or number ("No. 5", "St. Paul").
_BEFORE_CAPITAL_OR_NUMBER = {"no", "st", "mt"}
_SYMBOLS = {"&": " and ", "%": " percent ", "+": " plus ", "=": " equals ", "@": " at ", "#": " number ",
            "°": " degrees ", "€": " euros ", "£": " pounds "}
_FOLD = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": ", ", "\u2014": ", ",
         "\u2026": "...", "\u00a0": " "}
_CURRENCY = re.compile(r"([$€£])\s?(\d[\d,]*)(?:\.(\d{1,2}))?\b")
_PERCENT = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s?%")
_TIME = re.compile(r"\b(\d{1,2}):(\d{2})\b(\s?[ap]\.?m\.?)?", re.IGNORECASE)
_DECIMAL = re.compile(r"\b(\d[\d,]*)\.(\d+)\b")
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\b\d[\d,]*\b")
_ABBREVIATION = re.compile(r"\b([A-Za-z]+)\.(?=\s+(\S))")
_SPACES = re.compile(r"\s+")
_SPEAKABLE = re.compile(r"[^a-z' ,;:.?!-]")
_CURRENCY_WORDS = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
                   "£": ("pound", "pounds", "penny", "pence")}


def _number(digits: str) -> str:
    digits = digits.replace(",", "")
    if len(digits) > 1 and digits.startswith("0"):
        return " ".join(w for d in digits for w in cardinal_words(int(d)))
    if len(digits) > 15:  # a serial number, not an amount
        return " ".join(w for d in digits for w in cardinal_words(int(d)))
    return " ".join(spoken_number(int(digits)))


def _currency(match: re.Match) -> str:
    one, many, cent, cents = _CURRENCY_WORDS[match.group(1)]
    whole = int(match.group(2).replace(",", ""))
    words = [" ".join(cardinal_words(whole)), one if whole == 1 else many]
    if match.group(3):
        fraction = int(match.group(3).ljust(2, "0"))
        if fraction:
            words += ["and", " ".join(cardinal_words(fraction)), cent if fraction == 1 else cents]
    return " " + " ".join(words) + " "


def _time(match: re.Match) -> str:
    hours, minutes = int(match.group(1)), int(match.group(2))
    words = cardinal_words(hours)
    if minutes == 0:
        words = words + ([] if match.group(3) else ["o'clock"])
    elif minutes < 10:
        words = words + ["oh"] + cardinal_words(minutes)
    else:
        words = words + cardinal_words(minutes)
    if match.group(3):
        # "p.m." at a sentence end also ends the sentence.
        words = words + [match.group(3).strip().lower()[0] + " m" + ("." if match.group(3).endswith(".") else "")]
    return " " + " ".join(words) + " "


def _decimal(match: re.Match) -> str:
    whole = _number(match.group(1))
    return f" {whole} point {' '.join(w for d in match.group(2) for w in cardinal_words(int(d)))} "


def _abbreviation(match: re.Match) -> str:
    word, following = match.group(1), match.group(2)
    key = word.lower()
    if key not in _ABBREVIATIONS:
        return match.group(0)
    if key in _BEFORE_CAPITAL_OR_NUMBER and not (following[0].isupper() or following[0].isdigit()):
        return match.group(0)  # "the end of the st." is a sentence end, not "saint"
    return _ABBREVIATIONS[key]


def normalize_text(text: str) -> str:
    """Lower-case words and sentence punctuation for ``text``; raises :class:`TTSInputError` if
    nothing speakable is left.

    >>> normalize_text("Dr. Smith paid $3.50 on May 3rd, 1999.")
    'doctor smith paid three dollars and fifty cents on may third, nineteen ninety nine.'
    """
    if not isinstance(text, str):
        raise TTSInputError(f"text must be a string, got {type(text).__name__}")
    text = "".join(_FOLD.get(c, c) for c in text)
    text = _ABBREVIATION.sub(_abbreviation, text)
    text = _CURRENCY.sub(_currency, text)
    text = _PERCENT.sub(lambda m: f"{m.group(1)} percent", text)
    text = _TIME.sub(_time, text)
    text = _DECIMAL.sub(_decimal, text)
    text = _ORDINAL.sub(lambda m: " " + " ".join(ordinal_words(int(m.group(1)))) + " ", text)
    text = _NUMBER.sub(lambda m: " " + _number(m.group(0)) + " ", text)
    text = "".join(_SYMBOLS.get(c, c) for c in text)
    # Accents fold to their letters ("café" -> "cafe"); anything not Latin is dropped below.
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    text = text.replace('"', " ").replace("(", ", ").replace(")", ", ").replace("/", " ")
    text = _SPEAKABLE.sub(" ", text)
    text = re.sub(r"\s*([,;:.?!])", r"\1", _SPACES.sub(" ", text)).strip()
    text = re.sub(r"([,;:])[,;:.?!]+", r"\1", text)  # ", ," and ",." from removed brackets
    text = re.sub(r"^[,;:.?!\s-]+", "", text)
    if not re.search(r"[a-z]", text):
        raise TTSInputError("the text has nothing to speak (no letters or numbers after normalisation)")
    return text


_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")


def split_sentences(text: str, *, max_chars: int = 300) -> list[str]:
    """Normalised sentences of ``text``, each at most ``max_chars`` long (a longer sentence is cut
    at its last clause break before the limit, else at a word break).

    Raises :class:`TTSInputError` for text with nothing to speak.
    """
    if not isinstance(text, str) or not text.strip():
        raise TTSInputError("the text is empty")
    normalized = normalize_text(text)
    sentences: list[str] = []
    for sentence in _SENTENCE_END.split(normalized):
        while len(sentence) > max_chars:
            cut = max(sentence.rfind(p, 0, max_chars) for p in ",;:")
            if cut <= 0:
                cut = sentence.rfind(" ", 0, max_chars)
            if cut <= 0:
                cut = max_chars
            head, sentence = sentence[: cut + 1].strip(), sentence[cut + 1:].strip()
            if re.search(r"[a-z]", head):
                sentences.append(head)
        if re.search(r"[a-z]", sentence):
            sentences.append(sentence)
    return sentences
