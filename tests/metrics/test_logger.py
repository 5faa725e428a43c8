"""MetricsLogger: console line format, metrics.jsonl, TensorBoard events, samples, sink errors."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlrun.config import ConfigError, MetricsConfig
from rlrun.metrics import MetricsLogger, format_console_line

STEPS = 30  # steps the run_dir fixture (conftest.py) logs


def test_console_line_format_is_pinned() -> None:
    metrics = {
        "loss/kl": 0.00123456,
        "val/pass@1": 0.41,
        "optim/lr": 1e-05,
        "reward/correctness": 0.5,
        "reward/mean": 0.43,
        "sandbox/accepted": 12,
        "perf/rollout_tokens_per_s": 15234.7,
        "custom": float("nan"),
    }
    assert format_console_line(12, metrics) == (
        "step=12 reward: 0.43 pass@1: 0.41 reward/correctness: 0.5 loss/kl: 0.001235 "
        "optim/lr: 1e-05 perf/rollout_tokens_per_s: 1.523e+04 sandbox/accepted: 12 custom: nan"
    )


STEP = {
    "reward/mean": 0.5, "reward/std": 0.25, "train/accuracy": 0.375, "loss/kl": 0.01,
    "loss/policy": -0.1, "perf/time_step": 2.5, "perf/samples_per_s": 51.2,
    "perf/time_train": 1.0, "train/unscored": 0.0, "sandbox/sandbox_error": 0.0,
}


def test_the_short_console_line_tells_health_and_speed_and_lost_work_when_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = MetricsConfig(tensorboard=False, progress="off")  # console: short
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.log(7, STEP)
        logger.log(8, STEP | {"train/unscored": 3.0, "val/pass@1": 0.5, "val/pass@4": 0.75,
                              "val/accuracy": 0.5, "val/math/accuracy": 0.25})
    assert capsys.readouterr().out.splitlines() == [
        "step=7 reward: 0.5 train/accuracy: 0.375 loss/kl: 0.01 perf/samples_per_s: 51.2 "
        "perf/time_step: 2.5",
        "step=8 reward: 0.5 pass@1: 0.5 pass@4: 0.75 val/accuracy: 0.5 train/accuracy: 0.375 "
        "train/unscored: 3 loss/kl: 0.01 perf/samples_per_s: 51.2 perf/time_step: 2.5",
    ]
    # train.log has every metric whatever the console shows.
    assert (tmp_path / "train.log").read_text().splitlines()[0] == format_console_line(7, STEP)


def test_the_full_console_line_is_the_train_log_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = MetricsConfig(tensorboard=False, progress="off", console="full")
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.log(7, {"reward/mean": 0.5, "loss/kl": 0.01, "optim/lr": 1e-05})
    out = capsys.readouterr().out
    assert out == "step=7 reward: 0.5 loss/kl: 0.01 optim/lr: 1e-05\n"
    assert (tmp_path / "train.log").read_text() == out


def test_step_lines_go_to_train_log_even_off_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = MetricsConfig(tensorboard=False, progress="off", console="off")
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.log(0, {"reward/mean": 0.25})
        logger.log(1, {"reward/mean": 0.5})
    assert capsys.readouterr().out == ""
    assert (tmp_path / "train.log").read_text() == "step=0 reward: 0.25\nstep=1 reward: 0.5\n"


def test_jsonl_and_tensorboard_read_back(run_dir: Path) -> None:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert train[4]["optim/lr"] == 1e-5
    assert [r["step"] for r in rows if "val/accuracy" in r] == [10, 20, 30]

    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert events
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert "reward/mean" in acc.Tags()["scalars"]
    tb = acc.Scalars("reward/mean")
    assert [e.step for e in tb] == list(range(1, STEPS + 1))
    assert [e.value for e in tb] == pytest.approx([r["reward/mean"] for r in train], rel=1e-6)
    assert [e.step for e in acc.Scalars("val/pass@1")] == [10, 20, 30]
    assert "run:\n" in (run_dir / "config.yaml").read_text()


def test_non_finite_values_are_null_in_jsonl(tmp_path: Path) -> None:
    cfg = MetricsConfig(console="off", tensorboard=False, progress="off")
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.log(1, {"loss/policy": float("nan"), "optim/grad_norm": math.inf, "reward/mean": 1})
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row["loss/policy"] is None and row["optim/grad_norm"] is None and row["reward/mean"] == 1


def test_non_numbers_are_rejected_with_the_metric_name(tmp_path: Path) -> None:
    cfg = MetricsConfig(console="off", tensorboard=False, progress="off")
    with MetricsLogger(cfg, str(tmp_path)) as logger, pytest.raises(TypeError, match="reward/x"):
        logger.log(1, {"reward/x": "high"})


def test_log_samples_keeps_whole_groups_of_the_first_problems(tmp_path: Path) -> None:
    cfg = MetricsConfig(console="off", tensorboard=False, progress="off", sample_problems=2)
    rows = [{"problem_id": f"p{i // 3}", "prompt": "q", "response": f"r{i}", "reward": i,
             "components": {}} for i in range(9)]
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.log_samples(4, rows)
        with pytest.raises(ValueError, match="lacks reward, components"):
            logger.log_samples(5, [{"problem_id": "p", "prompt": "q", "response": "r"}])
    written = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [r["response"] for r in written] == [f"r{i}" for i in range(6)]
    assert {r["step"] for r in written} == {4}


@pytest.mark.parametrize(("key", "module"), [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_missing_optional_sink_package_names_the_key_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import <module>` fail
    cfg = MetricsConfig(console="off", tensorboard=False, progress="off", **{key: True})
    with pytest.raises(ConfigError) as err:
        MetricsLogger(cfg, str(tmp_path))
    message = str(err.value)
    assert f"metrics.{key}" in message and f"pip install {module}" in message
    assert "\n" not in message


def test_unknown_progress_mode_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="metrics.progress"):
        MetricsLogger(MetricsConfig(tensorboard=False, progress="fancy"), str(tmp_path))


def test_rewind_leaves_each_step_in_the_logs_once(tmp_path: Path) -> None:
    """A run resumed (or restarted) from the checkpoint of step 2 logs steps 2 and 3 again:
    metrics.jsonl, samples.jsonl and TensorBoard end up with each step once, the new value."""
    cfg = MetricsConfig(console="off", progress="off", sample_problems=0)

    def run(logger: MetricsLogger, steps: range, value: float) -> None:
        for s in steps:
            logger.log(s, {"reward/mean": value + s})
            logger.log_samples(s, [{"problem_id": "p", "prompt": "q", "response": "r",
                                    "reward": value, "components": {}}])

    with MetricsLogger(cfg, str(tmp_path)) as logger:
        run(logger, range(5), 0.0)
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "rew')  # the writer was killed mid-line
    with MetricsLogger(cfg, str(tmp_path)) as logger:
        logger.rewind(2)
        run(logger, range(2, 4), 10.0)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["reward/mean"]) for r in rows] == [(0, 0), (1, 1), (2, 12), (3, 13)]
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["reward"]) for r in samples] == [(0, 0), (1, 0), (2, 10), (3, 10)]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [
        (0, 0), (1, 1), (2, 12), (3, 13)]
