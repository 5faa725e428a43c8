"""A run killed mid-way resumes from its checkpoint and sees the same data order (a SIGTERM's
checkpoint: tests/test_training_signals.py).

Each run is a separate `rlrun train` process with its own local Ray, as a user would run it.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rlrun.checkpoint import LEARNER_DIR, RECORD, load_state
from rlrun.config import load_config
from rlrun.data import load_from_config
from rlrun.data_order import DataOrder
from tests.test_training import small_overrides

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def recipe(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("run:\n  name: resume-test\n")
    return path


@pytest.fixture
def env(tmp_path_factory):
    return dict(os.environ, RLRUN_CACHE=str(tmp_path_factory.mktemp("models")))


def start(recipe, overrides, env, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rlrun", "train", str(recipe), *overrides],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen,
    )


def driver_pid(proc: subprocess.Popen) -> int:
    """`rlrun train` runs the driver (and its local Ray) in a session of its own: its pid."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    while not children.read_text().split():
        time.sleep(0.1)
    return int(children.read_text().split()[0])


def wait_for(proc: subprocess.Popen, done) -> None:
    while not done():
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.5)


def steps_and_problems(samples_path) -> dict[int, list[str]]:
    """Problem ids per step, in order of first appearance, from samples.jsonl."""
    out: dict[int, list[str]] = {}
    with open(samples_path) as f:
        for line in f:
            row = json.loads(line)
            ids = out.setdefault(row["step"], [])
            if row["problem_id"] not in ids:
                ids.append(row["problem_id"])
    return out


# Multi-turn: the kill lands inside a step's turns; its trajectories are started over on resume.
MULTI_TURN = ["data.train=toy:repair", "env.name=code_repair", "env.max_turns=2"]


@pytest.mark.parametrize("extra", [[], MULTI_TURN], ids=["single-turn", "multi-turn"])
def test_resume_after_kill_reproduces_the_data_order(tmp_path, recipe, env, extra):
    out = tmp_path / "run"
    # Enough steps that the kill lands mid-run however fast this machine trains them.
    steps = 40
    overrides = small_overrides(out, steps=steps) + ["trainer.checkpoint_every=1", *extra]
    cfg = load_config(recipe, overrides)
    train, _ = load_from_config(cfg)
    order = DataOrder(len(train), cfg.run.seed)
    expected = {s: [train[i].id for i in order.draw(2)] for s in range(steps)}
    record = out / LEARNER_DIR / RECORD

    proc = start(recipe, overrides, env)
    driver = driver_pid(proc)
    wait_for(proc, lambda: record.is_file() and record.read_text().strip() and max(
        int(n.removeprefix("step_")) for n in json.loads(record.read_text())["checkpoints"]
    ) >= 2)
    os.killpg(driver, signal.SIGKILL)  # the driver and its Ray, all at once: a lost machine
    assert proc.wait() == 128 + signal.SIGKILL  # killed mid-run, not finished
    first = steps_and_problems(out / "samples.jsonl")
    assert first[0] == expected[0] and first[1] == expected[1]

    resumed = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", str(recipe), *overrides, "run.resume=true"],
        capture_output=True, text=True, env=env,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # The steps after the checkpoint ran twice (killed, then resumed); the logs hold each once,
    # from the resumed run, which drew the same problems.
    assert steps_and_problems(out / "samples.jsonl") == expected
    with open(out / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows if "reward/mean" in r] == list(range(steps))
    with open(out / "samples.jsonl") as f:
        per_step = Counter(json.loads(line)["step"] for line in f)
    assert len(set(per_step.values())) == 1, per_step
    state = load_state(out / LEARNER_DIR / f"step_{steps:06d}")
    assert (state.step, state.version, state.data_position) == (steps, steps, 2 * steps)
    if extra:  # every trajectory trained on went through the environment
        with open(out / "samples.jsonl") as f:
            assert all(json.loads(line)["turns"] for line in f)
