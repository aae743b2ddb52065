import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny matrices: extra intra-op threads only add overhead (and spin when other processes load the CPUs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
