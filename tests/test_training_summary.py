"""The summary `rlrun train` prints and appends to train.log."""

from rlrun.metrics.summary import format_summary


def test_run_summary_leads_with_the_held_out_change() -> None:
    summary = {
        "steps": 100, "wall_s": 363.9, "samples_per_s": 56.3, "stopped_by_signal": False,
        "val_initial": {"val/accuracy": 0.2461, "val/reward_mean": 0.25},
        "val_final": {"val/accuracy": 0.5391, "val/reward_mean": 0.55},
        "final": {"reward/mean": 0.48}, "weight_version": 100, "rollout_restarts": 0,
        "learner_restarts": 0,
        "checkpoint": "runs/demo/learner/step_000100", "run_dir": "runs/demo",
    }
    lines = format_summary(summary).splitlines()
    assert lines[1] == (
        "  held-out: val/accuracy 0.246 -> 0.539 (+0.293), val/reward_mean 0.250 -> 0.550 (+0.300)"
    )
    summary["val_initial"] = summary["val_final"] = {}
    assert not any("held-out" in line for line in format_summary(summary).splitlines())
    # A multi-turn run also says what the first attempt alone did.
    summary["val_initial"] = {"val/accuracy": 0.375, "val/turn1/accuracy": 0.2539}
    summary["val_final"] = {"val/accuracy": 0.707, "val/turn1/accuracy": 0.3438}
    assert format_summary(summary).splitlines()[1] == (
        "  held-out: val/accuracy 0.375 -> 0.707 (+0.332), val/turn1/accuracy 0.254 -> 0.344 "
        "(+0.090)")
