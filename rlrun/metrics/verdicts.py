"""Sandbox metrics of one step: how many tests ended in each verdict, and tests per second."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from rlrun.records import VERDICT_STATUSES, ScoredSample


def sandbox_metrics(scored: Iterable[ScoredSample], judge_seconds: float) -> dict[str, float]:
    """`sandbox/<verdict>` counts over every test of every sample (all statuses, zeros
    included, so each curve is continuous) and `sandbox/tests_per_s` over `judge_seconds`.
    Empty when no sample was judged (math-only steps)."""
    counts = Counter(v.status for s in scored for v in s.verdicts)
    total = sum(counts.values())
    if not total:
        return {}
    out = {f"sandbox/{status}": float(counts.get(status, 0)) for status in VERDICT_STATUSES}
    out["sandbox/tests_per_s"] = total / judge_seconds if judge_seconds > 0 else 0.0
    return out
