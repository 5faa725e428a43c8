"""benchmarks/trl_grpo.py refuses a reward aggregation it cannot hand to TRL."""

import sys
from pathlib import Path

import pytest

from rlrun.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trl_grpo import grpo_args  # noqa: E402


def test_normalize_then_sum_is_refused(tmp_path):
    cfg = load_config(None, ["reward.aggregation=normalize_then_sum"])
    with pytest.raises(ValueError, match="reward.aggregation=sum"):
        grpo_args(cfg, str(tmp_path))
