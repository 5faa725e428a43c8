"""SageMaker metric definitions: regexes that read rlrun's per-step console line.

The line (`step=12 reward: 0.43 pass@1: 0.41 loss/kl: 0.001 ...`) is printed by the driver
(`rlrun.metrics.format_console_line`); SageMaker scrapes the training job's log with one regex
per metric and charts the first group of each match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlrun.metrics.logger import STANDARD_METRICS, console_name

# A value as the console line prints it: 4 significant digits, exponent, nan or inf.
VALUE = r"([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf))"


def metric_definitions(names: Sequence[str] = STANDARD_METRICS) -> list[dict[str, str]]:
    """SageMaker `MetricDefinition`s (Name, Regex) that scrape these metrics off console lines."""
    return [
        {"Name": name, "Regex": rf"(?:^|\s){re.escape(console_name(name))}: {VALUE}"}
        for name in names
    ]
