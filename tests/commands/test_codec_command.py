"""``burble codec encode|decode|info``: a round trip through files, and one clear line for every
user mistake (exit code 2, no traceback).

Run in-process (``burble.cli.main``) on the throwaway codec of ``tests/codecs/codec_helpers.py``
(seeded random weights, the real vocoder), passed as a ``.safetensors`` path; one test runs the
shipped default and is skipped until its weights are there.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import soundfile as sf

from burble.cli import main

HELPERS = Path(__file__).resolve().parents[1] / "codecs" / "codec_helpers.py"
_spec = importlib.util.spec_from_file_location("codec_command_helpers", HELPERS)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    with helpers.one_thread():
        yield


@pytest.fixture(scope="module")
def codec_file(tmp_path_factory) -> str:
    return str(helpers.build_random_codec(tmp_path_factory.mktemp("codec") / "random.safetensors"))


@pytest.fixture(scope="module")
def wav_16k(tmp_path_factory) -> tuple[Path, float]:
    """1.5 s of examples/jfk.wav as a 16 kHz 16-bit WAV (so encode also resamples)."""
    from burble.audio.io import load_audio

    path = tmp_path_factory.mktemp("audio") / "speech.wav"
    audio = load_audio(helpers.JFK_WAV, 16000)[:24000]
    sf.write(path, audio, 16000, subtype="PCM_16")
    return path, 1.5


def one_error_line(capsys, code: int, *fragments: str) -> str:
    """The command failed with ``code`` 2 and said so in one ``burble codec: error:`` line."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("burble codec: error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_round_trip_writes_a_wav_as_long_as_the_input(codec_file, wav_16k, tmp_path, capsys):
    wav, seconds = wav_16k
    codes_path, out_path = tmp_path / "codes.npz", tmp_path / "out.wav"
    assert main(["codec", "encode", str(wav), "-o", str(codes_path), "--codec", codec_file]) == 0
    summary = capsys.readouterr().out.strip().splitlines()
    assert len(summary) == 1 and "33 frames x 4 books" in summary[0] and "861 bit/s" in summary[0] and "1.50 s" in summary[0]

    with np.load(codes_path, allow_pickle=False) as data:
        assert set(data.files) == {"codes", "codec", "sample_rate", "frame_rate", "num_samples", "codebook_size", "format"}
        assert data["codes"].dtype == np.int16 and data["codes"].shape == (4, 33)  # ceil(33075 / 1024)
        assert str(data["format"]) == "burble-codec-1" and str(data["codec"]) == str(Path(codec_file).resolve())
        assert int(data["sample_rate"]) == 22050 and int(data["num_samples"]) == 33075
        assert float(data["frame_rate"]) == pytest.approx(22050 / 1024) and int(data["codebook_size"]) == 1024

    assert main(["codec", "decode", str(codes_path), "-o", str(out_path)]) == 0  # the codec named in the file
    assert len(capsys.readouterr().out.strip().splitlines()) == 1
    info = sf.info(str(out_path))
    assert (info.samplerate, info.channels, info.subtype, info.format) == (22050, 1, "PCM_16", "WAV")
    assert info.frames == round(seconds * 22050)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npz", "out.wav"]  # no temporary left


def test_decode_through_another_vocoder(codec_file, wav_16k, tmp_path, capsys):
    codes_path = tmp_path / "codes.npz"
    assert main(["codec", "encode", str(wav_16k[0]), "-o", str(codes_path), "--codec", codec_file]) == 0
    outputs = {}
    for vocoder in ("universal", "low-latency"):
        outputs[vocoder] = tmp_path / f"{vocoder}.wav"
        assert main(["codec", "decode", str(codes_path), "-o", str(outputs[vocoder]), "--vocoder", vocoder]) == 0
    a, b = (sf.read(str(path))[0] for path in outputs.values())
    assert a.shape == b.shape and np.abs(a - b).max() > 1e-3  # another generator, another waveform
    capsys.readouterr()
    one_error_line(capsys, main(["codec", "decode", str(codes_path), "-o", str(tmp_path / "x.wav"), "--vocoder", "nope"]),
                   "unknown vocoder 'nope'")


def test_books_flag_sets_the_rows(codec_file, wav_16k, tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert main(["codec", "encode", str(wav_16k[0]), "-o", str(out), "--books", "8", "--codec", codec_file]) == 0
    assert "1723 bit/s" in capsys.readouterr().out
    with np.load(out) as data:
        assert data["codes"].shape == (8, 33)


@pytest.mark.parametrize("books", ["0", "9", "-1"])
def test_books_out_of_range_is_one_line(codec_file, wav_16k, tmp_path, capsys, books):
    code = main(["codec", "encode", str(wav_16k[0]), "-o", str(tmp_path / "c.npz"), "--books", books, "--codec", codec_file])
    one_error_line(capsys, code, "--books must be 1..8", f"got {books}")
    assert not (tmp_path / "c.npz").exists()


def test_missing_input_is_one_line(codec_file, tmp_path, capsys):
    code = main(["codec", "encode", str(tmp_path / "nope.wav"), "-o", str(tmp_path / "c.npz"), "--codec", codec_file])
    one_error_line(capsys, code, "nope.wav: no such file")


def test_corrupt_audio_is_one_line(codec_file, tmp_path, capsys):
    bad = tmp_path / "noise.wav"
    bad.write_bytes(np.random.default_rng(0).bytes(5000))
    code = main(["codec", "encode", str(bad), "-o", str(tmp_path / "c.npz"), "--codec", codec_file])
    one_error_line(capsys, code, "noise.wav: cannot decode audio")


def test_silent_audio_is_one_line(codec_file, tmp_path, capsys):
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(22050, np.float32), 22050)
    code = main(["codec", "encode", str(silent), "-o", str(tmp_path / "c.npz"), "--codec", codec_file])
    one_error_line(capsys, code, "silent.wav: the audio is silent")


def write_codes(path: Path, **changes) -> Path:
    fields = {"codes": np.zeros((4, 3), np.int16), "codec": np.array("x"), "sample_rate": np.array(22050),
              "frame_rate": np.array(22050 / 1024), "num_samples": np.array(3000), "codebook_size": np.array(1024),
              "format": np.array("burble-codec-1")}
    fields.update(changes)
    np.savez(path, **{k: v for k, v in fields.items() if v is not None})
    return path


@pytest.mark.parametrize("make,fragment", [
    (lambda p: p.write_bytes(np.random.default_rng(1).bytes(3000)) and p, "not a burble codec file"),
    (lambda p: (np.save(p.with_suffix(".npy"), np.zeros(3)), p.with_suffix(".npy").rename(p), p)[2], "not a burble codec file"),
    (lambda p: (np.savez(p, something=np.zeros(3)), p)[1], "it lacks codes, codec"),
    (lambda p: write_codes(p, format=np.array("other-1")), "format 'other-1'"),
    (lambda p: write_codes(p, codes=np.full((4, 3), 1024, np.int16)), "must lie in 0..1023"),
    (lambda p: write_codes(p, codes=np.zeros((9, 3), np.int16)), "books must be 1..8, got 9"),
    (lambda p: write_codes(p, codes=np.zeros((4, 3), np.float32)), "must be integers"),
    (lambda p: write_codes(p, codes=np.zeros(3, np.int16)), "(books, frames)"),
    (lambda p: write_codes(p, num_samples=np.array(99999)), "num_samples 99999 does not fit 3 frames"),
    (lambda p: write_codes(p, codebook_size=np.array(512)), "512 codes"),
    (lambda p: write_codes(p, codes=np.array([["a"]])), "must be integers"),
])
def test_bad_codes_files_are_one_line(codec_file, tmp_path, capsys, make, fragment):
    path = make(tmp_path / "bad.npz")
    code = main(["codec", "decode", str(path), "-o", str(tmp_path / "out.wav"), "--codec", codec_file])
    one_error_line(capsys, code, fragment)
    assert not (tmp_path / "out.wav").exists()


def test_truncated_codes_file_is_one_line(codec_file, wav_16k, tmp_path, capsys):
    good = tmp_path / "good.npz"
    assert main(["codec", "encode", str(wav_16k[0]), "-o", str(good), "--codec", codec_file]) == 0
    capsys.readouterr()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(good.read_bytes()[:300])
    one_error_line(capsys, main(["codec", "decode", str(cut), "-o", str(tmp_path / "o.wav"), "--codec", codec_file]),
                   "not a burble codec file")
    assert zipfile.is_zipfile(good)


def test_missing_codes_file_and_unknown_codec_are_one_line(codec_file, wav_16k, tmp_path, capsys):
    one_error_line(capsys, main(["codec", "decode", str(tmp_path / "none.npz"), "-o", str(tmp_path / "o.wav")]),
                   "none.npz: no such file")
    one_error_line(capsys, main(["codec", "encode", str(wav_16k[0]), "-o", str(tmp_path / "c.npz"), "--codec", "no-such"]),
                   "cannot load codec 'no-such'")
    not_a_codec = tmp_path / "junk.safetensors"
    not_a_codec.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    one_error_line(capsys, main(["codec", "info", "--codec", str(not_a_codec)]), "cannot load codec")
    one_error_line(capsys, main(["codec", "encode", str(wav_16k[0]), "-o", str(tmp_path / "no" / "dir" / "c.npz"),
                                 "--codec", codec_file]), "cannot write")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(codec_file, wav_16k, tmp_path, capsys, monkeypatch):
    """Writes go to a temporary file renamed into place: killed half way (here: an error after
    some bytes are out), the output keeps its old content and nothing else is left behind."""
    out = tmp_path / "codes.npz"
    out.write_bytes(b"old")

    def half_then_die(file, **fields):
        file.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # what Ctrl-C raises mid-write

    monkeypatch.setattr(np, "savez", half_then_die)
    with pytest.raises(KeyboardInterrupt):
        main(["codec", "encode", str(wav_16k[0]), "-o", str(out), "--codec", codec_file])
    assert out.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["codes.npz"]


def test_info_describes_the_codec(codec_file, capsys):
    assert main(["codec", "info", "--codec", codec_file]) == 0
    out = capsys.readouterr().out
    assert "frame rate   21.53 Hz" in out and "8 of 1024 codes (10 bits each); default 4" in out
    assert "1: 215, 2: 431, 3: 646, 4: 861 (default), 5: 1077, 6: 1292, 7: 1507, 8: 1723 bit/s" in out
    assert "HiFi-GAN V1 universal" in out
    assert "211.6 ms algorithmic" in out and "87.1 ms with the approximate" in out  # = Codec.algorithmic_latency
    assert "available" in out


def test_no_action_prints_help(capsys):
    assert main(["codec"]) == 2
    assert "encode" in capsys.readouterr().err


def test_the_shipped_default_codec_runs(wav_16k, tmp_path, capsys):
    from burble.codecs.codec import DEFAULT_CODEC, WEIGHTS_DIR

    if not (WEIGHTS_DIR / f"{DEFAULT_CODEC}.safetensors").is_file():
        pytest.skip(f"burble/codecs/weights/{DEFAULT_CODEC}.safetensors is not there yet (training)")
    assert main(["codec", "info"]) == 0
    assert f"codec        {DEFAULT_CODEC}" in capsys.readouterr().out
    codes, out = tmp_path / "c.npz", tmp_path / "o.wav"
    assert main(["codec", "encode", str(wav_16k[0]), "-o", str(codes)]) == 0
    assert main(["codec", "decode", str(codes), "-o", str(out)]) == 0
    assert sf.info(str(out)).frames == 33075
