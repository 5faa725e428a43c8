"""The SageMaker metric definitions read the console line `rlrun train` prints."""

from __future__ import annotations

import re

from infra.sagemaker.metrics import metric_definitions
from rlrun.metrics import format_console_line
from rlrun.metrics.logger import STANDARD_METRICS


def test_metric_definitions_scrape_the_console_line() -> None:
    values = {"reward/mean": 0.25, "reward/correctness": 0.75, "val/pass@5": 0.5,
              "optim/lr": 2e-06, "loss/kl": -1.5e-07, "sandbox/accepted": 12}
    line = format_console_line(3, values)
    for d in metric_definitions(list(values)):
        match = re.search(d["Regex"], line)
        assert match, d
        assert float(match.group(1)) == values[d["Name"]]


def test_a_name_does_not_match_inside_a_longer_name() -> None:
    # `reward: ` must not be read from `train/reward: `, nor `kl` from `loss/kl`.
    line = format_console_line(1, {"reward/std": 0.5, "loss/kl": 0.1})
    (d,) = metric_definitions(["reward/mean"])
    assert re.search(d["Regex"], line) is None


def test_default_definitions_cover_the_namespace_within_sagemaker_limits() -> None:
    defs = metric_definitions()
    assert [d["Name"] for d in defs] == list(STANDARD_METRICS)
    for d in defs:
        re.compile(d["Regex"])
        assert len(d["Name"]) <= 255 and len(d["Regex"]) <= 500  # SageMaker's limits
