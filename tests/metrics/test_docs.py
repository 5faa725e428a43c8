"""docs/metrics.md documents every metric of the standard namespace."""

from __future__ import annotations

from pathlib import Path

from rlrun.metrics.logger import STANDARD_METRICS

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
