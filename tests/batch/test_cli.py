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
