"""benchmarks/vs_trl.py: how TRL's optimizer steps become steps comparable with rlrun's."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from vs_trl import batch_steps  # noqa: E402


def test_a_step_is_a_generation_batch_and_its_updates():
    # Two batches of 4 updates: the first optimizer step of each also generates.
    step_s = [3.0, 0.5, 0.5, 0.5, 2.5, 0.5, 0.5, 0.5]
    assert batch_steps(step_s, 4) == [4.5, 4.0]
    assert batch_steps(step_s, 1) == step_s
    assert batch_steps(step_s[:7], 4) == [4.5]  # an unfinished batch is no step
