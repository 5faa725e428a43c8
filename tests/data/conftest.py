"""Shared paths for the data-layer tests."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
