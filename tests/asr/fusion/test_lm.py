import math

import pytest

from burble.asr.fusion import lm as lm_module
from burble.asr.fusion.lm import build_lm, find_kenlm_tool, read_corpus
from burble.asr.fusion.normalize import LMTextNormalizer

kenlm = pytest.importorskip("kenlm", reason="LM querying needs the kenlm module (pip install kenlm)")

CORPUS = [
    "The prison was full in 1818.",
    "The prison was empty, and the debtors were gone.",
    "Newgate was the prison of the city of London.",
    "The debtors' side of Newgate was full.",
] * 3


def test_kaldingram_arpa_is_normalised_and_has_unk(tmp_path):
    path = build_lm(CORPUS, tmp_path / "lm.arpa", 3, backend="kaldingram")
    text = path.read_text()
    assert "\t<unk>\t" in text and "\teighteen\t" in text and "\tnewgate\t" in text
    assert "Newgate" not in text and "1818" not in text
    model = kenlm.Model(str(path))
    assert model.order == 3
    assert "newgate" in model and "zzyzx" not in model
    # <unk> has a real probability (not KenLM's -100 substitute for a missing entry).
    assert -10 < model.score("zzyzx", bos=False, eos=False) < -0.5
    # A seen sentence is more probable than its words shuffled.
    assert model.score("the prison was full") > model.score("full was prison the")


def test_kaldingram_probabilities_normalise(tmp_path):
    model = kenlm.Model(str(build_lm(CORPUS, tmp_path / "lm.arpa", 2, backend="kaldingram")))
    vocab = {w for line in CORPUS for w in LMTextNormalizer()(line)} | {"</s>"}
    state = kenlm.State()
    model.BeginSentenceWrite(state)
    total = sum(10 ** model.BaseScore(state, w, kenlm.State()) for w in vocab)
    assert total == pytest.approx(1.0, abs=1e-3)


def test_reads_a_tsv_column(tmp_path):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("id1\tHello there.\nid2\tGeneral Kenobi\n")
    assert list(read_corpus(corpus)) == ["Hello there.", "General Kenobi"]
    assert list(read_corpus(corpus, text_column=0)) == ["id1", "id2"]
    with pytest.raises(ValueError, match="column 5"):
        list(read_corpus(corpus, text_column=5))


def test_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        build_lm(tmp_path / "missing.txt", tmp_path / "lm.arpa")
    with pytest.raises(ValueError, match="no words"):
        build_lm(["...", "!!"], tmp_path / "lm.arpa", backend="kaldingram")
    with pytest.raises(ValueError, match="order"):
        build_lm(CORPUS, tmp_path / "lm.arpa", 9, backend="kaldingram")
    with pytest.raises(ValueError, match="backend"):
        build_lm(CORPUS, tmp_path / "lm.arpa", backend="srilm")
    monkeypatch.setattr(lm_module, "find_kenlm_tool", lambda name: None)
    with pytest.raises(RuntimeError, match="install-kenlm"):
        build_lm(CORPUS, tmp_path / "lm.arpa", backend="kenlm")
    with pytest.raises(RuntimeError, match="build_binary"):
        build_lm(CORPUS, tmp_path / "lm.bin", backend="kaldingram")
    with pytest.raises(FileNotFoundError):
        lm_module.load_lm(tmp_path / "nope.bin")


@pytest.mark.skipif(find_kenlm_tool("lmplz") is None, reason="KenLM's lmplz not built (burble lm install-kenlm)")
def test_lmplz_arpa_and_binary_agree(tmp_path):
    arpa = build_lm(CORPUS, tmp_path / "lm.arpa", 3, backend="kenlm")
    binary = build_lm(CORPUS, tmp_path / "lm.bin", 3, backend="kenlm")
    a, b = kenlm.Model(str(arpa)), kenlm.Model(str(binary))
    for sentence in ("the prison was full in eighteen eighteen", "newgate was the city", "zzyzx prison"):
        assert a.score(sentence) == pytest.approx(b.score(sentence), abs=1e-4)
    assert math.isfinite(a.score("zzyzx")) and a.score("zzyzx") > -20
