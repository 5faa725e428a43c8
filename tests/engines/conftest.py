"""Shared fixtures: the tiny model built once per session, and one torch thread.

One intra-op thread: the tiny model's matmuls are far too small to split, and on a shared
machine spinning OpenMP workers make every call many times slower.
"""

from __future__ import annotations

import pytest
import torch

from rlrun.config import ModelConfig
from rlrun.models import resolve_model_path


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
