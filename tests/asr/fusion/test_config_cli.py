import argparse

import pytest

from burble.asr.fusion import cli
from burble.asr.fusion.boosting import Phrase, PhraseBooster
from burble.asr.fusion.config import BiasingConfig, processor_factory
from burble.asr.fusion.shallow_fusion import FusionOptions, ShallowFusion
from burble.cli import main


def test_config_from_websocket_style_dict():
    config = BiasingConfig.from_dict(
        {"lm": "lm.bin", "lm_alpha": 0.3, "lm_beta": 2.0, "hotwords": ["Akerman", "Newgate\t4"], "hotword_weight": 1.5}
    )
    assert config.lm == "lm.bin" and config.fusion.alpha == 0.3 and config.fusion.beta == 2.0
    assert config.phrases == (Phrase("Akerman", 1.5), Phrase("Newgate", 4.0))
    assert config.enabled and not BiasingConfig().enabled
    with pytest.raises(ValueError, match="unknown biasing options"):
        BiasingConfig.from_dict({"hotwrods": ["x"]})
    with pytest.raises(ValueError, match="list"):
        BiasingConfig.from_dict({"hotwords": "Akerman"})


def test_factory_builds_fresh_processors_per_window(tokenizer, lm):
    assert processor_factory(BiasingConfig(), tokenizer) is None
    factory = processor_factory(BiasingConfig(phrases=(Phrase("Akerman"),)), tokenizer)
    (booster,) = factory(3)
    assert isinstance(booster, PhraseBooster) and booster.sample_begin == 3
    factory = processor_factory(BiasingConfig(lm="unused-when-lm-given", phrases=(Phrase("Akerman"),)), tokenizer, lm=lm)
    first, second = factory(3), factory(7)
    assert isinstance(first[0], ShallowFusion) and first[0].sample_begin == 3 and second[0].sample_begin == 7
    assert first[1].automaton is second[1].automaton and first[1]._cache is not second[1]._cache


def test_sessions_with_the_same_phrases_share_one_automaton(tokenizer):
    # A server builds a factory per session from its server-wide phrases.
    same = [processor_factory(BiasingConfig(phrases=(Phrase("Akerman"), Phrase("Neild"))), tokenizer)(3)[0] for _ in range(2)]
    other = processor_factory(BiasingConfig(phrases=(Phrase("Akerman", 9.0),)), tokenizer)(3)[0]
    assert same[0].automaton is same[1].automaton and same[0]._cache is not same[1]._cache
    assert other.automaton is not same[0].automaton and list(other.phrases) == [Phrase("Akerman", 9.0)]


def test_biasing_flags(tmp_path):
    parser = argparse.ArgumentParser()
    cli.add_biasing_arguments(parser)
    hotwords = tmp_path / "hw.txt"
    hotwords.write_text("Neild\t5\n")
    args = parser.parse_args(
        ["--lm", "x.bin", "--lm-alpha", "0.2", "--hotwords", "Akerman", "--hotword-weight", "3", "--hotwords-file", str(hotwords)]
    )
    config = cli.biasing_from_args(args)
    assert config.lm == "x.bin" and config.fusion.alpha == 0.2 and config.fusion.beta == FusionOptions().beta
    assert config.phrases == (Phrase("Akerman", 3.0), Phrase("Neild", 5.0))
    assert config.phonetic is not None and config.phonetic.threshold == 0.75  # on by default
    assert cli.biasing_from_args(parser.parse_args(["--hotwords", "Akerman", "--no-phonetic"])).phonetic is None
    assert cli.biasing_from_args(parser.parse_args(["--hotwords", "Akerman", "--phonetic-threshold", "0.9"])).phonetic.threshold == 0.9


def test_lm_command_builds_and_scores(tmp_path, capsys):
    pytest.importorskip("kenlm")
    # Through the real entry point: ``burble lm`` must be a registered command.
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The prison was full.\nThe prison was empty.\nNewgate was a prison.\n" * 3)
    out = tmp_path / "lm.arpa"
    assert main(["lm", "build", str(corpus), "-o", str(out), "--order", "2", "--backend", "kaldingram"]) == 0
    assert out.is_file()
    assert main(["lm", "score", str(out), "The prison, Zzyzx!"]) == 0
    printed = capsys.readouterr().out
    assert "prison\t" in printed and "zzyzx\t" in printed and "(OOV)" in printed and "total\t" in printed
    assert main(["lm", "build", str(tmp_path / "missing.txt"), "-o", str(out)]) == 1
    assert main(["lm"]) == 2


@pytest.mark.parametrize(
    "content, message",
    [(None, "hotwords file not found"), (b"Akerman\tlots\n", "hw.txt:1: bad phrase weight"), (b"\xff\xfe\x00x", "not a UTF-8")],
)
def test_bad_hotwords_file_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    parser = argparse.ArgumentParser()
    cli.add_biasing_arguments(parser)
    path = tmp_path / "hw.txt"
    if content is not None:
        path.write_bytes(content)
    args = parser.parse_args(["--hotwords-file", str(path)])
    args.command = "stream"
    with pytest.raises(SystemExit) as exit_info:
        cli.biasing_from_args(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("burble stream: error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_boost_options_reach_the_booster(tokenizer):
    from burble.asr.fusion.boosting import BoostOptions
    from burble.asr.fusion.tokenizations import TokenizationOptions

    options = BoostOptions(tokenizations=TokenizationOptions(max_splits=1), lane_margin=None)
    (booster,) = processor_factory(BiasingConfig(phrases=(Phrase("Akerman"),), boost=options), tokenizer)(3)
    assert booster.options == options
    (default,) = processor_factory(BiasingConfig(phrases=(Phrase("Akerman"),)), tokenizer)(3)
    assert default.options == BoostOptions() and default.automaton is not booster.automaton
