import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny ops (toy models, single verification steps):
    intra-op threads only add wake-up latency on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
