"""Fixtures shared by the test modules (the session hygiene lives in the repository's root ``conftest.py``)."""

import pytest
import torch


@pytest.fixture
def float64():
    """torch's default dtype set to float64 for one test (the root conftest restores the session's after it)."""
    torch.set_default_dtype(torch.float64)
    yield torch.float64


@pytest.fixture
def generator():
    """A factory of seeded CPU generators: ``generator(seed)``."""
    from tests.helpers import generator as make

    return make
