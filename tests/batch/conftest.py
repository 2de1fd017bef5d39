import pytest
import torch

import burble


@pytest.fixture(scope="package")
def asr():
    """tiny.en on one thread (restored afterwards): the batch tests decode many small windows."""
    threads = torch.get_num_threads()
    model = burble.load_model("tiny.en", threads=1)
    yield model
    torch.set_num_threads(threads)
