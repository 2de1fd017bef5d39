"""``burble lm ...`` (build / query n-gram LMs, build KenLM's tools) and the biasing flags of decoding commands.

* ``burble lm build CORPUS -o LM.arpa|LM.bin --order N``: normalise a corpus and estimate a
  Kneser-Ney LM (KenLM's lmplz when installed, else kaldingram).
* ``burble lm install-kenlm``: build lmplz/build_binary/query from the kenlm source distribution.
* ``burble lm score LM "some text"``: per-word log10 probabilities, as fusion sees them.

:func:`add_biasing_arguments` / :func:`biasing_from_args` give ``transcribe``, ``stream`` and
``serve`` the same ``--lm``, ``--lm-alpha``, ``--lm-beta``, ``--hotwords``, ``--hotwords-file`` flags.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace


def add_lm_subparser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``burble lm`` and its subcommands."""
    parser = subparsers.add_parser(
        "lm",
        help="build and inspect n-gram language models for shallow fusion",
        description="Build and inspect n-gram LMs used for shallow fusion (see `burble transcribe --lm`).",
    )
    sub = parser.add_subparsers(dest="lm_command", metavar="LM_COMMAND")

    build = sub.add_parser(
        "build",
        help="estimate a Kneser-Ney LM from a text corpus",
        description=(
            "Normalise CORPUS (lower case, punctuation removed, numbers spelled out) and estimate a "
            "Kneser-Ney n-gram LM. Output ending in .arpa is ARPA text; anything else is KenLM binary."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    build.add_argument("corpus", help="text file, one sentence per line (.tsv: the last column)")
    build.add_argument("-o", "--output", required=True, help="LM.arpa or LM.bin")
    build.add_argument("--order", type=int, default=3, help="n-gram order")
    build.add_argument("--backend", choices=("auto", "kenlm", "kaldingram"), default="auto")
    build.add_argument("--text-column", type=int, default=None, help="tab-separated column holding the text")
    build.add_argument("--numbers", choices=("words", "keep", "drop"), default="words", help="digits in the corpus")
    build.add_argument("--keep-case", action="store_true", help="do not lower-case")
    build.add_argument("--memory", default="25%", help="lmplz -S")
    build.add_argument("--tmp-dir", default=None, help="lmplz -T")
    build.add_argument("--verbose", action="store_true")

    install = sub.add_parser(
        "install-kenlm",
        help="build KenLM's lmplz/build_binary from source (needs cmake + Boost)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    install.add_argument("--dest", default=None, help="directory for the binaries (default: $BURBLE_KENLM_BIN or ~/.cache/burble/kenlm/bin)")
    install.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    install.add_argument("--sdist", default=None, help="a local kenlm-*.tar.gz instead of downloading one")
    install.add_argument("--verbose", action="store_true")

    score = sub.add_parser("score", help="per-word LM log10 probabilities of a text")
    score.add_argument("lm", help="ARPA or KenLM binary model")
    score.add_argument("text", help="text to score (normalised like fusion does)")
    score.add_argument("--no-bos", action="store_true", help="do not start at <s>")
    parser.set_defaults(lm_parser=parser)


add_parser = add_lm_subparser  # burble/cli.py's command-module convention


def run(args: argparse.Namespace) -> int:
    from burble.asr.fusion.lm import build_lm, install_kenlm_tools, load_lm
    from burble.asr.fusion.normalize import LMTextNormalizer

    if args.lm_command == "build":
        normalizer = LMTextNormalizer(lowercase=not args.keep_case, numbers=args.numbers)
        try:
            path = build_lm(
                args.corpus, args.output, args.order, normalizer=normalizer, backend=args.backend,
                text_column=args.text_column, memory=args.memory, tmp_dir=args.tmp_dir, verbose=args.verbose,
            )
        except (OSError, RuntimeError, ValueError) as error:
            print(f"burble lm build: error: {error}", file=sys.stderr)
            return 1
        print(path)
        return 0
    if args.lm_command == "install-kenlm":
        try:
            path = install_kenlm_tools(args.dest, jobs=args.jobs, sdist=args.sdist, verbose=args.verbose)
        except (OSError, RuntimeError) as error:
            print(f"burble lm install-kenlm: error: {error}", file=sys.stderr)
            return 1
        print(path)
        return 0
    if args.lm_command == "score":
        import kenlm

        try:
            model = load_lm(args.lm)
        except (OSError, RuntimeError) as error:
            print(f"burble lm score: error: {error}", file=sys.stderr)
            return 1
        state = kenlm.State()
        (model.NullContextWrite if args.no_bos else model.BeginSentenceWrite)(state)
        total = 0.0
        for word in LMTextNormalizer()(args.text):
            out = kenlm.State()
            log10 = model.BaseScore(state, word, out)
            total += log10
            flag = "" if word in model else "\t(OOV)"
            print(f"{word}\t{log10:.4f}{flag}")
            state = out
        print(f"total\t{total:.4f}")
        return 0
    args.lm_parser.print_help()
    return 2


def add_biasing_arguments(parser: argparse.ArgumentParser) -> None:
    """``--lm``, ``--lm-alpha``, ``--lm-beta``, ``--hotwords``, ``--hotwords-file``, ``--hotword-weight``,
    ``--no-phonetic``, ``--phonetic-threshold``."""
    group = parser.add_argument_group("biasing (shallow fusion and phrase boosting)")
    group.add_argument("--lm", default=None, help="n-gram LM (ARPA or KenLM binary) for shallow fusion")
    group.add_argument("--lm-alpha", type=float, default=None, help="LM weight (natural-log units)")
    group.add_argument("--lm-beta", type=float, default=None, help="bonus per LM word")
    group.add_argument("--lm-score-eos", action="store_true", help="also score end of sentence at end of text")
    group.add_argument("--hotwords", nargs="+", default=None, metavar="PHRASE", help="phrases to boost (PHRASE or 'PHRASE<TAB>WEIGHT')")
    group.add_argument("--hotwords-file", default=None, help="phrases to boost, one per line, optional <TAB>weight")
    group.add_argument("--hotword-weight", type=float, default=None, help="bonus per matched token of phrases without a weight")
    group.add_argument(
        "--no-phonetic", action="store_true",
        help="do not replace words that sound like a hotword after the search (default: replace them, "
             "with espeak-ng's pronunciations, where espeak-ng is installed)",
    )
    group.add_argument("--phonetic-threshold", type=float, default=None,
                       help="least pronunciation similarity (0-1] for that replacement (default 0.75)")


def biasing_from_args(args: argparse.Namespace):
    """A :class:`~burble.asr.fusion.config.BiasingConfig` from :func:`add_biasing_arguments` flags.

    A malformed ``--hotwords`` item or hotwords file (missing, not text, a bad weight) is one line
    on stderr and exit status 2, the same for every command that takes these flags.
    """
    try:
        return _biasing_from_args(args)
    except ValueError as error:
        print(f"burble {getattr(args, 'command', None) or 'lm'}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _biasing_from_args(args: argparse.Namespace):
    from burble.asr.fusion.boosting import DEFAULT_WEIGHT, as_phrases
    from burble.asr.fusion.config import BiasingConfig

    weight = args.hotword_weight if args.hotword_weight is not None else DEFAULT_WEIGHT
    config = BiasingConfig(lm=args.lm, phrases=tuple(as_phrases(args.hotwords or [], weight)))
    fusion = config.fusion
    if args.lm_alpha is not None:
        fusion = replace(fusion, alpha=args.lm_alpha)
    if args.lm_beta is not None:
        fusion = replace(fusion, beta=args.lm_beta)
    if args.lm_score_eos:
        fusion = replace(fusion, score_eos=True)
    config = replace(config, fusion=fusion)
    if args.hotwords_file:
        config = config.with_hotwords_file(args.hotwords_file, weight)
    if getattr(args, "no_phonetic", False):
        config = replace(config, phonetic=None)
    elif getattr(args, "phonetic_threshold", None) is not None:
        from burble.asr.fusion.phonetic import PhoneticOptions

        config = replace(config, phonetic=PhoneticOptions(threshold=args.phonetic_threshold))
    return config
