#!/usr/bin/env python
"""Write the independent biasing evaluation set (``benchmarks/data/biasing_independent.json``).

The tuning set (``benchmarks/data/biasing_tune.json``) and the LJ Speech set
(``burble/testing/data/biasing_set.json``) are held-out LJ Speech lines screened for names that
tiny.en misses, so weights chosen on one fit the other: same corpus, same era, same kind of
(mostly Anglo-American) name. This set shares nothing with them:

* the sentences are written for this set (not from LJ Speech or any corpus the LM is built on);
* the keywords are personal and place names from several languages' spelling conventions
  (Polish, Irish, Welsh, Hungarian, Basque, Vietnamese, Finnish, Czech, Turkish, Portuguese,
  Dutch, Japanese, Zulu, Greek, Icelandic, ...) and technical terms;
* there was no screen: every sentence written is kept, whatever tiny.en makes of it (so the
  plain-decoding recall is measured, not selected);
* the control sentences have no keyword, several of them with words that sound close to one
  (the false-insertion rate counts a hotword produced in any of them);
* it is never used to choose weights: ``benchmarks/fusion.py`` only reports on it.

Audio is Piper ``en_US-joe-medium`` with noise 0 (:func:`burble.testing.synthetic.piper_speech`),
so it is deterministic; the voice reads foreign names by English rules, as a user's colleague
might.

    python benchmarks/build_independent_set.py [--synthesize]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "data" / "biasing_independent.json"

# (text, keywords): every keyword occurs verbatim in its sentence.
KEYWORD_SENTENCES: list[tuple[str, tuple[str, ...]]] = [
    ("Wojciech Przybylski will chair the morning session in Gdansk.", ("Wojciech", "Przybylski", "Gdansk")),
    ("Please forward the invoice to Siobhan before Friday.", ("Siobhan",)),
    ("The ferry from Holyhead reaches Dun Laoghaire in about three hours.", ("Holyhead", "Dun Laoghaire")),
    ("Our new colleague Niamh Cassidy starts on the first of March.", ("Niamh", "Cassidy")),
    ("Gwenllian walked from Machynlleth to the coast in two days.", ("Gwenllian", "Machynlleth")),
    ("The contract was signed by Szabolcs Kertesz on behalf of the studio.", ("Szabolcs", "Kertesz")),
    ("Aitziber Etxeberria teaches linguistics at the university in Bilbao.", ("Aitziber", "Etxeberria")),
    ("Nguyen Thi Phuong presented the results of the rice trial.", ("Nguyen", "Phuong")),
    ("The choir from Jyvaskyla is conducted by Tuomas Heikkinen.", ("Jyvaskyla", "Tuomas", "Heikkinen")),
    ("Ask Zdenek whether the samples from Ostrava have arrived.", ("Zdenek", "Ostrava")),
    ("Mehmet Yilmaz booked the flight to Eskisehir for next week.", ("Yilmaz", "Eskisehir")),
    ("Joaquim Goncalves moved the bakery to a larger shop in Coimbra.", ("Joaquim", "Goncalves", "Coimbra")),
    ("The bridge near Zierikzee was designed by Maarten Schouten.", ("Zierikzee", "Maarten", "Schouten")),
    ("Ryunosuke left the manuscript with his editor in Sapporo.", ("Ryunosuke", "Sapporo")),
    ("Nomvula Dlamini runs the clinic outside Pietermaritzburg.", ("Nomvula", "Dlamini", "Pietermaritzburg")),
    ("The statue in Thessaloniki was restored by Eleni Papadopoulou.", ("Thessaloniki", "Eleni", "Papadopoulou")),
    ("Hallgrimur drove through Egilsstadir on the way to the fjords.", ("Hallgrimur", "Egilsstadir")),
    ("The lecture on glaciers was given by Ingibjorg Sigurdardottir.", ("Ingibjorg", "Sigurdardottir")),
    ("Our supplier in Wroclaw is a company run by Agnieszka Szczepanik.", ("Wroclaw", "Agnieszka", "Szczepanik")),
    ("Ciaran and Saoirse are painting the kitchen this weekend.", ("Ciaran", "Saoirse")),
    ("Dafydd ap Gruffydd appears in the second chapter of the book.", ("Dafydd", "Gruffydd")),
    ("Lakshmi Raghunathan reviewed the budget with the treasurer.", ("Lakshmi", "Raghunathan")),
    ("The orchestra played a symphony by Dvorak and a suite by Janacek.", ("Dvorak", "Janacek")),
    ("Xiaoling and Zhiwei met at the station in Hangzhou.", ("Xiaoling", "Zhiwei", "Hangzhou")),
    ("We restarted the Kubernetes cluster after the upgrade failed.", ("Kubernetes",)),
    ("The Grafana dashboard shows a spike in memory use every night.", ("Grafana",)),
    ("She wrote a Terraform module that creates the storage buckets.", ("Terraform",)),
    ("The nightly job runs an Ansible playbook on every server.", ("Ansible", "playbook")),
    ("Open the Jupyter notebook and run the first three cells.", ("Jupyter",)),
    ("Messages are queued in Kafka before the workers read them.", ("Kafka",)),
    ("The session cache lives in Redis and expires after an hour.", ("Redis",)),
    ("Every service describes its messages with protobuf schemas.", ("protobuf",)),
    ("The model was trained in PyTorch and exported for the phone.", ("PyTorch",)),
    ("We put memcached in front of the database to cut the latency.", ("memcached",)),
    ("The build failed because the Dockerfile pinned an old base image.", ("Dockerfile",)),
    ("Prometheus scrapes the exporter on port nine thousand.", ("Prometheus",)),
    ("The logs are shipped to Elasticsearch and searched from Kibana.", ("Elasticsearch", "Kibana")),
    ("Marisol Achterberg asked for the Kubernetes logs from Tuesday.", ("Marisol", "Achterberg", "Kubernetes")),
    ("Bartholomew Okonkwo fixed the Terraform state on Monday.", ("Bartholomew", "Okonkwo", "Terraform")),
    ("Oyelaran deployed the Grafana alerts before the holiday.", ("Oyelaran", "Grafana")),
]

CONTROL_SENTENCES: list[str] = [
    "Please bring the blue folder to the meeting tomorrow morning.",
    "The train was late because of a signal fault near the bridge.",
    "We need three more chairs for the back of the hall.",
    "The kettle in the kitchen has stopped working again.",
    "She planted tomatoes and beans along the garden fence.",
    "The terrace of the old farm looks over the river.",
    "Turn the dial slowly until the light turns green.",
    "The graphs on the second page show the monthly totals.",
    "He read the notebook from cover to cover on the flight.",
    "The workers queued outside the gate before the shift began.",
    "The cluster of houses near the hill has no shops.",
    "My neighbour fixed the gate with a piece of wire.",
    "The cache of old letters was found under the floor.",
    "The doctor asked him to rest for a week.",
    "They walked along the coast until the sun went down.",
    "The baker opens the shop at six every morning.",
    "We restarted the machine after the power came back.",
    "The storage room is full of boxes and old paint.",
    "Every evening the children play football in the park.",
    "The bus stops at the corner of the market square.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--synthesize", action="store_true", help="also synthesize every sentence (fills the cache)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from burble.testing.biasing import BiasingItem, save_biasing_set

    for text, keywords in KEYWORD_SENTENCES:
        missing = [k for k in keywords if k not in text]
        if missing:
            raise SystemExit(f"keywords {missing} not in {text!r}")
    items = [BiasingItem(f"ind-k{n:02d}", text, keywords) for n, (text, keywords) in enumerate(KEYWORD_SENTENCES, 1)]
    items += [BiasingItem(f"ind-c{n:02d}", text) for n, text in enumerate(CONTROL_SENTENCES, 1)]
    save_biasing_set(
        items,
        args.output,
        source="written for this set (benchmarks/build_independent_set.py); no LJ Speech line, no screen",
        voice="Piper en_US-joe-medium (noise 0)",
        names=len(KEYWORD_SENTENCES),
        keywords=sum(len(k) for _, k in KEYWORD_SENTENCES),
        controls=len(CONTROL_SENTENCES),
        use="evaluation only: never used to choose weights",
    )
    print(f"wrote {args.output}: {len(KEYWORD_SENTENCES)} keyword sentences + {len(CONTROL_SENTENCES)} controls")
    if args.synthesize:
        from burble.testing.synthetic import piper_speech

        for item in items:
            audio = piper_speech(item.text)
            print(f"{item.id} {len(audio) / 16000:.1f}s {item.text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
