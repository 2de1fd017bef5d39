"""Normalised sentences -> IPA phoneme symbols (espeak-ng) -> the ids a codec LM reads.

espeak-ng (the ``espeak-ng`` program, ``apt install espeak-ng``) reads each clause in IPA.
The clause's punctuation is kept after its phonemes (a comma is followed by a space), and
the phoneme string is decomposed into Unicode code points (NFD), so stress marks and length
marks are symbols of their own. That is the phoneme layout of the Piper voices whose speech
trains burble's codec LM; the recipe renders its training speech *from these phonemes*, so
training and synthesis read the same symbols by construction.

:class:`PhonemeInventory` maps symbols to ids: ``^`` starts an utterance, ``$`` ends it, and
``_`` follows every phoneme. Symbols outside the inventory are dropped.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from typing import Sequence

from burble.tts.normalize import TTSInputError

BOS, EOS, PAD = "^", "$", "_"
_CLAUSE = re.compile(r"([^,;:.?!]+)([,;:.?!]*)")


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def _espeak_ipa(lines: Sequence[str], voice: str) -> list[str]:
    """One IPA line per input line (espeak-ng reads stdin line by line)."""
    if not espeak_available():
        raise TTSInputError("speech synthesis needs espeak-ng for phonemes (apt install espeak-ng)")
    run = functools.partial(subprocess.run, capture_output=True, text=True, check=True)
    out = run(["espeak-ng", "-q", "--ipa", "-v", voice], input="\n".join(lines) + "\n").stdout
    ipa = [line.strip() for line in out.splitlines() if line.strip()]
    if len(ipa) != len(lines):  # espeak split or joined a clause: ask one clause at a time
        ipa = [" ".join(x.strip() for x in run(["espeak-ng", "-q", "--ipa", "-v", voice, "--", line]).stdout.splitlines())
               for line in lines]
    return ipa


def phonemize(sentence: str, *, voice: str = "en-us") -> list[str]:
    """IPA symbols (NFD code points, spaces and punctuation included) of one normalised sentence."""
    clauses = [(m.group(1).strip(), m.group(2)[:1]) for m in _CLAUSE.finditer(sentence) if m.group(1).strip()]
    if not clauses:
        raise TTSInputError(f"nothing to phonemize in {sentence!r}")
    ipa = _espeak_ipa([c for c, _ in clauses], voice)
    symbols: list[str] = []
    for (_, punctuation), phones in zip(clauses, ipa):
        text = phones + punctuation
        if punctuation in ",;:" or not punctuation:
            text += " "
        symbols.extend(unicodedata.normalize("NFD", text))
    while symbols and symbols[-1] == " ":
        symbols.pop()
    return symbols


@dataclass(frozen=True)
class PhonemeInventory:
    """The phoneme symbols a codec LM knows, and their ids.

    Attributes:
      symbols: ``symbols[i]`` is the symbol with id ``i`` (``""`` for an unused id).
    """

    symbols: tuple[str, ...]

    @classmethod
    def from_id_map(cls, id_map: dict[str, Sequence[int] | int]) -> "PhonemeInventory":
        """From a Piper-style ``{symbol: [id]}`` map."""
        flat = {s: (ids if isinstance(ids, int) else ids[0]) for s, ids in id_map.items()}
        table = [""] * (max(flat.values()) + 1)
        for symbol, i in flat.items():
            table[i] = symbol
        return cls(tuple(table))

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols) if s}

    def __len__(self) -> int:
        return len(self.symbols)

    def ids(self, symbols: Sequence[str]) -> list[int]:
        """``^ _ p1 _ p2 _ ... $``: every known symbol followed by the pad; unknown ones dropped."""
        table = self._ids
        ids = [table[BOS], table[PAD]]
        for s in symbols:
            if s in table:
                ids += [table[s], table[PAD]]
        ids.append(table[EOS])
        return ids

    def text_to_ids(self, sentence: str, *, voice: str = "en-us") -> list[int]:
        ids = self.ids(phonemize(sentence, voice=voice))
        if len(ids) <= 3:
            raise TTSInputError(f"no known phonemes in {sentence!r}")
        return ids
