"""sandbox/* metrics counted from the verdicts of scored samples."""

from __future__ import annotations

from rlrun.metrics.verdicts import sandbox_metrics
from rlrun.records import VERDICT_STATUSES, Sample, ScoredSample, Verdict


def _scored(*statuses: str) -> ScoredSample:
    sample = Sample([], [], "", [], "stop", problem_id="p")
    return ScoredSample(sample, 0.0, {}, [Verdict(status) for status in statuses])


def test_counts_every_verdict_and_the_rate() -> None:
    metrics = sandbox_metrics(
        [_scored("accepted", "accepted", "wrong_answer"), _scored("time_limit"), _scored()],
        judge_seconds=2.0,
    )
    assert metrics["sandbox/accepted"] == 2 and metrics["sandbox/wrong_answer"] == 1
    assert metrics["sandbox/time_limit"] == 1 and metrics["sandbox/sandbox_error"] == 0
    assert set(metrics) == {f"sandbox/{s}" for s in VERDICT_STATUSES} | {"sandbox/tests_per_s"}
    assert metrics["sandbox/tests_per_s"] == 2.0  # 4 tests in 2 s


def test_math_only_steps_have_no_sandbox_metrics() -> None:
    assert sandbox_metrics([_scored(), _scored()], judge_seconds=1.0) == {}
