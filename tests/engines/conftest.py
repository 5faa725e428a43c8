"""Shared fixtures: the tiny model built once per session, and one torch thread.

The tiny model has 2 heads of 32 (the default has 4 of 16): vLLM's CPU attention has no
head size below 32, and every engine is tested on the same weights.

One intra-op thread: the tiny model's matmuls are far too small to split, and on a shared
machine spinning OpenMP workers make every call many times slower.
"""

from __future__ import annotations

import pytest
import torch

from rlrun.config import ModelConfig, TinyModelConfig
from rlrun.models import resolve_model_path


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    model = ModelConfig(tiny=TinyModelConfig(num_heads=2))
    return resolve_model_path(model, str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
