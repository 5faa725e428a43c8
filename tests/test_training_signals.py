"""`rlrun train` under the signals users and schedulers send, and with a reward that hangs.

Each run is a separate `rlrun train` process with its own local Ray, as a user would run it. In
the step loop the first SIGTERM, SIGINT or SIGHUP finishes the step, logs it, checkpoints and
ends the run; before the loop (the SFT warm-start) a signal ends it at once with one line. A
signal to the whole process group (`timeout`, `scancel`, a closed terminal) reaches the driver
once and leaves its Ray alone, so the checkpoint is still written.
"""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from rlrun.checkpoint import LEARNER_DIR, latest_checkpoint, load_state
from tests.rewards.helpers import plugin
from tests.test_training import small_overrides

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def env(tmp_path_factory):
    return dict(os.environ, RLRUN_CACHE=str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipe") / "recipe.yaml"
    path.write_text("run:\n  name: signal-test\n")
    return str(path)


def start(overrides, env, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rlrun", "train", *overrides],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen,
    )


def read_until(proc: subprocess.Popen, prefix: str) -> list[str]:
    """The output up to a line starting with `prefix` (after Ray's `(Actor pid=...)` tag)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if re.sub(r"^(\x1b\[\d+m)?\([^)]*\)(\x1b\[0m)? ", "", line).startswith(prefix):
            return lines
    raise AssertionError(f"the run ended before a line starting {prefix!r}:\n" + "".join(lines))


def train_steps(out) -> list[int]:
    with open(out / "metrics.jsonl") as f:
        return [r["step"] for r in map(json.loads, f) if "reward/mean" in r]


def test_sigint_stops_like_sigterm_and_the_resumed_run_logs_each_step_once(tmp_path, env, recipe):
    # SIGHUP takes the same handler (tests/test_interrupts.py).
    sig = signal.SIGINT
    out = tmp_path / "run"
    overrides = [recipe, *small_overrides(out, steps=12), "trainer.checkpoint_every=0"]
    proc = start(overrides, env)
    lines = read_until(proc, "step=1 ")
    proc.send_signal(sig)
    lines += proc.stdout.readlines()
    assert proc.wait() == 0, "".join(lines[-40:])
    assert any(f"stopped by {sig.name}" in line for line in lines)
    state = load_state(latest_checkpoint(str(out)))
    # The step in flight when the signal came finished and was logged before its checkpoint.
    assert 2 <= state.step < 12 and train_steps(out) == list(range(state.step))

    resumed = subprocess.run([sys.executable, "-m", "rlrun", "train", *overrides,
                              "run.resume=true"], capture_output=True, text=True, env=env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert train_steps(out) == list(range(12))


def test_sigterm_to_the_process_group_still_checkpoints(tmp_path, env, recipe):
    """What `timeout`, `scancel` and a closed terminal do: SIGTERM to every process of the
    group `rlrun train` was started in."""
    out = tmp_path / "run"
    proc = start([recipe, *small_overrides(out, steps=50), "trainer.checkpoint_every=0"], env,
                 start_new_session=True)
    lines = read_until(proc, "step=0 ")
    os.killpg(proc.pid, signal.SIGTERM)
    lines += proc.stdout.readlines()
    assert proc.wait() == 0, "".join(lines[-40:])
    assert any("stopped by SIGTERM" in line for line in lines)
    # The step in flight finished and is the one checkpoint (checkpoint_every=0).
    saved = sorted((out / LEARNER_DIR).glob("step_*"))
    assert len(saved) == 1
    state = load_state(saved[0])
    assert 1 <= state.step < 50 and state.data_position == 2 * state.step
    assert train_steps(out) == list(range(state.step))


def test_sigterm_during_the_sft_warm_start_ends_the_run_at_once_in_one_line(
    tmp_path, env, recipe
):
    out = tmp_path / "run"
    proc = start([recipe, *small_overrides(out, steps=4),
        "sft.enabled=true", "sft.max_steps=100000", "sft.eval_every=1",
        "sft.target_accuracy=1.0", "trainer.eval_samples=2",
    ], env)
    lines = read_until(proc, "rlrun train: supervised warm-start")
    # Into the SFT steps (100000 of them: it is still there): the first one's held-out line.
    lines += read_until(proc, "sft step=1 ")
    proc.send_signal(signal.SIGTERM)
    lines += proc.stdout.readlines()
    assert proc.wait() == 128 + signal.SIGTERM, "".join(lines[-40:])
    text = "".join(lines)
    assert "rlrun train: stopped by SIGTERM during the SFT warm-start" in text
    # Ray Train's own PlacementGroupCleaner actor may print a traceback of its monitor thread
    # when the cluster goes down under it (a race inside Ray, seen on a loaded machine); every
    # other line, rlrun's and its actors', must hold none.
    ours = [line for line in lines if "(PlacementGroupCleaner pid=" not in line]
    assert "Traceback" not in "".join(ours)
    assert not (out / LEARNER_DIR).exists()


def test_a_reward_plugin_that_hangs_stops_the_run_at_its_deadline_with_a_checkpoint(
    tmp_path, env, recipe
):
    out, told = tmp_path / "run", tmp_path / "hang-now"
    spec = plugin("hangs_once_told")
    proc = start([recipe, *small_overrides(out, steps=50),
        f"reward.fns=[{{name: correctness}}, {{name: stuck, fn: '{spec}'}}]",
        "reward.timeout_s=5", "trainer.checkpoint_every=0",
    ], env | {"RLRUN_TEST_HANG_FILE": str(told)})
    lines = read_until(proc, "step=1 ")
    told.touch()
    rest, _ = proc.communicate(timeout=300)
    output = "".join(lines) + rest
    assert proc.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("rlrun train: reward")]
    assert errors == [
        f"rlrun train: reward function '{spec}' (reward.fns[1].fn) made no progress for 5 s "
        "scoring a batch of 8 samples (reward.timeout_s); its Python stack is on stderr"
    ]
    assert "in hangs_once_told" in output or "hangs_once_told (" in output  # the stack
    # Every step before the stuck one is logged and in the checkpoint.
    step = load_state(latest_checkpoint(str(out))).step
    assert f"saving a checkpoint of step {step} before stopping" in output
    assert step >= 2 and train_steps(out) == list(range(step))
