"""`reward.audit_before_training`: a reward that rejects the data's own answers stops the run
before Ray starts."""

import sys

import pytest

from rlrun.config import load_config
from rlrun.rewards import RewardError
from rlrun.training import run_training


def test_a_reward_that_fails_the_references_stops_training_before_ray(tmp_path):
    # Toy references end in "#### n"; the boxed extractor finds no answer in any of them.
    cfg = load_config(None, [
        f"run.output_dir={tmp_path}", "data.train=toy:arithmetic", "data.toy_size=64",
        "data.val_size=8", "reward.audit_before_training=true", "reward.audit_limit=16",
        "reward.math_extractor=boxed",
    ])
    with pytest.raises(RewardError, match="audit_min_pass_rate"):
        run_training(cfg)
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()
