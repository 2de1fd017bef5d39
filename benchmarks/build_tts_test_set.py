#!/usr/bin/env python
"""Write ``benchmarks/data/tts_test.json``: the sentences TTS is judged on and never trained on.

Two kinds of item:

* ``lj``: LJ Speech sentences (4-30 words) drawn with a fixed seed from the sentence pool, minus
  the ids every recipe already holds out;
* ``everyday``: sentences written for this set (appointments, weather, directions, numbers,
  questions), the kind of text a voice assistant or screen reader speaks.

Every recipe's sentence pool leaves out the ids of ``benchmarks/data/*.json``
(``burble.testing.synthetic.held_out_sentence_ids``), so the TTS recipe never trains on these.

Usage::

    python benchmarks/build_tts_test_set.py [--lj 120]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from burble.testing.synthetic import held_out_sentence_ids, read_sentences  # noqa: E402

EVERYDAY = [
    "Can you call me back after lunch?",
    "The train to Boston leaves from platform four at ten past nine.",
    "Please remember to water the plants while I am away.",
    "It will be sunny this morning, with showers later in the afternoon.",
    "Turn left at the second traffic light and park behind the bakery.",
    "My sister is moving to a new apartment next weekend.",
    "We need milk, eggs, bread and a bag of apples.",
    "The meeting has been moved to Thursday at three o'clock.",
    "Do you know where I left my keys?",
    "Your package will arrive between noon and four.",
    "I would like a cup of coffee with a little milk, please.",
    "The library closes early on Sundays.",
    "He forgot his umbrella and got soaked on the way home.",
    "Could you send me the report by the end of the day?",
    "The children are playing football in the park.",
    "Our flight was delayed by almost two hours.",
    "She plays the piano every evening before dinner.",
    "Please turn the music down, the baby is sleeping.",
    "The doctor said I should drink more water.",
    "This restaurant serves the best pizza in town.",
    "I am sorry, but I cannot make it to the party tonight.",
    "The battery is almost empty, so plug in the charger.",
    "We watched a funny movie and laughed the whole time.",
    "How much does a ticket to the museum cost?",
    "The kitchen needs a good clean before our guests arrive.",
    "Let me know when you get home safely.",
    "The bus was crowded, so we decided to walk.",
    "My phone keeps losing its connection in the basement.",
    "They are planning a trip to the mountains in July.",
    "The new shop on the corner sells fresh flowers.",
    "Please close the window, it is getting cold in here.",
    "I have an appointment with the dentist tomorrow morning.",
    "The cat jumped onto the table and knocked over a glass.",
    "Would you like to join us for a walk after dinner?",
    "The game starts at seven, so we should leave soon.",
    "He fixed the bicycle with a few simple tools.",
    "Our neighbours are having a garden party on Saturday.",
    "The soup is too hot to eat right now.",
    "I think we should take the shorter road through the village.",
    "Please write your name and address on the form.",
    "The printer on the second floor is out of paper again.",
    "We are going to paint the living room light blue.",
    "Can I pay with a card, or do you only take cash?",
    "The weather forecast says it might snow tonight.",
    "My brother works at a hospital near the river.",
    "Do not forget to lock the door when you leave.",
    "The store is open from nine in the morning until eight at night.",
    "I found a wallet on the street and took it to the police.",
    "The music was so loud that we could not hear each other.",
    "She has been learning Spanish for about a year.",
    "We ordered two salads and a large bottle of water.",
    "Is there a pharmacy somewhere near the station?",
    "The dog barks every time the doorbell rings.",
    "Let us meet in front of the cinema at half past six.",
    "Thank you for your help, I really appreciate it.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lj", type=int, default=120, help="LJ Speech sentences to hold out")
    parser.add_argument("--seed", type=int, default=1717)
    parser.add_argument("--sentences", type=Path, default=ROOT.parent / "shared" / "text" / "ljspeech_sentences.tsv")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "tts_test.json")
    args = parser.parse_args(argv)
    excluded = held_out_sentence_ids(ROOT)
    if args.out.is_file():  # rebuilding must not exclude this set's own earlier picks
        own = {item["id"] for item in json.loads(args.out.read_text())["items"]}
        excluded -= own
    pool = [(i, s) for i, s in read_sentences(args.sentences) if i not in excluded and 4 <= len(s.split()) <= 30]
    order = np.random.default_rng(args.seed).permutation(len(pool))[: args.lj]
    items = [{"id": pool[k][0], "text": pool[k][1], "kind": "lj"} for k in sorted(order)]
    items += [{"id": f"everyday-{n + 1:02d}", "text": text, "kind": "everyday"} for n, text in enumerate(EVERYDAY)]
    meta = {"source": "benchmarks/build_tts_test_set.py", "lj": args.lj, "everyday": len(EVERYDAY),
            "use": "TTS evaluation only: every recipe's sentence pool leaves these ids out"}
    args.out.write_text(json.dumps({"meta": meta, "items": items}, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {args.lj} LJ + {len(EVERYDAY)} everyday sentences")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
