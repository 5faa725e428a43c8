"""docs/metrics.md documents every metric of the standard namespace."""

from __future__ import annotations

import re
from pathlib import Path

from rlrun.metrics.logger import STANDARD_METRICS, metric_definitions

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _documented_as(name: str) -> str:
    if name.startswith("sandbox/") and name != "sandbox/tests_per_s":
        return "sandbox/<verdict>"
    if name.startswith("val/pass@"):
        return "val/pass@k"
    if name == "reward/correctness":
        return "reward/<component>"
    return name


def test_every_standard_metric_is_documented() -> None:
    text = DOC.read_text()
    missing = [n for n in STANDARD_METRICS if f"`{_documented_as(n)}`" not in text]
    assert not missing, f"add these to docs/metrics.md: {missing}"


def test_default_definitions_cover_the_namespace_with_valid_regexes() -> None:
    defs = metric_definitions()
    assert [d["Name"] for d in defs] == list(STANDARD_METRICS)
    for d in defs:
        re.compile(d["Regex"])
        assert len(d["Name"]) <= 255 and len(d["Regex"]) <= 500  # SageMaker's limits
