"""`run_training(cfg)`: the driver of a GRPO run on Ray.

It runs, in order:

1. checks that need no cluster: output directory vs `run.resume`, the dataset, the model path;
2. `ray.init`: a local Ray, `run.ray_address`, or `$RAY_ADDRESS`, in namespace `run.namespace`
   (an address that does not answer fails within seconds);
3. placement: the cluster must hold every actor the config asks for (fails at once, naming the
   config keys, instead of waiting on a placement group forever); the rollout actors get a
   placement group of their own, the learner gets Ray Train's;
4. actors: the coordinator (which starts the rollout actors and the sandbox pool) and the
   learner (`TorchTrainer.fit` in a background thread; its ranks find the coordinator by name);
5. the loop: one `Coordinator.step` per training step, validation every `trainer.eval_every`
   steps, metrics to `MetricsLogger`; SIGTERM finishes the step in flight, checkpoints, exits;
6. a summary: final metrics, validation before/after, where the checkpoint is.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlrun.checkpoint import has_checkpoints, latest_checkpoint
from rlrun.cluster import ClusterError, check_address, check_fits, demands
from rlrun.config import Config, ConfigError, to_dict

PLACEMENT_TIMEOUT_S = 30.0


def run_dir_for(cfg: Config) -> str:
    """Local directory for metrics, samples and the report (run.output_dir unless remote)."""
    out = cfg.run.output_dir
    return os.path.join("runs", cfg.run.name) if "://" in out else out


def model_cache_dir() -> str:
    return os.environ.get("RLRUN_CACHE", os.path.join(Path.home(), ".cache", "rlrun", "models"))


def init_ray(cfg: Config) -> None:
    """Join `run.ray_address` / $RAY_ADDRESS, or start a local Ray with `run.num_cpus` CPUs."""
    import ray

    address = cfg.run.ray_address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        return
    if address:
        check_address(address)
        try:
            ray.init(address=address, namespace=cfg.run.namespace)
        except ray.exceptions.AuthenticationError as err:
            raise ClusterError(
                f"the Ray cluster at {address!r} (run.ray_address or $RAY_ADDRESS) rejected the "
                "connection: it uses token authentication, so export RAY_AUTH_MODE=token and "
                f"RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) with its token ({err.message})"
            ) from None
    else:
        # The dashboard serves the State API that Ray Train's placement-group cleaner polls;
        # without it the log fills with "Failed to query Ray Train Controller actor state".
        ray.init(num_cpus=cfg.run.num_cpus, namespace=cfg.run.namespace)


def _place_rollouts(cfg: Config, needs_sandbox: bool) -> Any:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    ds = demands(cfg, needs_sandbox)
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    check_fits(ds, ray.cluster_resources(), nodes)
    pg = placement_group(ds[0].bundles(), strategy="PACK", name="rlrun-rollout")
    ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        remove_placement_group(pg)
        raise ClusterError(
            f"the rollout actors' placement group ({cfg.rollout.num_actors} x "
            f"{ds[0].bundles()[0]}, from rollout.num_actors/num_cpus/num_gpus) was not placed "
            f"within {PLACEMENT_TIMEOUT_S:g}s; the cluster has {ray.available_resources()} free "
            "(other jobs may hold the rest)"
        )
    return pg


class _Fit(threading.Thread):
    """`TorchTrainer.fit()` in the background, keeping its result or error."""

    def __init__(self, trainer: Any) -> None:
        super().__init__(name="learner-fit", daemon=True)
        self.trainer, self.result, self.error = trainer, None, None

    def run(self) -> None:
        try:
            self.result = self.trainer.fit()
        except BaseException as err:  # noqa: BLE001 - re-raised on the driver thread
            self.error = err


def _wait(ref: Any, fit: _Fit) -> Any:
    """ray.get(ref), but fail at once if the learner job dies meanwhile."""
    import ray

    while True:
        ready, _ = ray.wait([ref], timeout=1.0)
        if ready:
            return ray.get(ready[0])
        if not fit.is_alive():
            raise RuntimeError(f"the learner (Ray Train) stopped: {fit.error!r}") from fit.error


def audit_rewards(cfg: Config, train: list, needs_sandbox: bool) -> None:
    """`reward.audit_before_training`: the reward must pass the data's own references."""
    from rlrun.rewards.audit import audit_before_training
    from rlrun.sandbox import Judge

    judge = Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox) if (
        needs_sandbox
    ) else None
    try:
        report = audit_before_training(cfg, train, judge.judge if judge else None)
    finally:
        if judge is not None:
            judge.close()
    print(f"rlrun train: reward audit: {report.summary()}", flush=True)


def warm_start(cfg: Config, model_path: str, train: list, val: list) -> str:
    """The SFT model this run starts RL from; trained once, reused on resume."""
    from rlrun.sft import run_sft

    done = (Path(cfg.run.output_dir) / "sft" / "model").resolve()
    if (done / "config.json").is_file():
        print(f"rlrun train: starting from the warm-started model in {done}", flush=True)
        return str(done)
    result = run_sft(cfg, model_path, train, val)
    print(
        f"sft done: steps: {result.steps} val/accuracy: {result.accuracy:.3f} "
        f"(target {cfg.sft.target_accuracy})",
        flush=True,
    )
    return result.model_path


def _track_best(
    stopping: Any, version: int, val: dict[str, float], run_dir: str, coordinator: Any
) -> bool:
    """Feed one validation to early stopping; keep the best model in run_dir/best/model and
    mark it in run_dir/best.json. Returns whether patience is used up."""
    import ray

    decision = stopping.update(version, val)
    if decision.message:
        print(f"rlrun train: early stopping: {decision.message}", flush=True)
    if decision.improved:
        saved = ray.get(coordinator.save_model.remote(os.path.join(run_dir, "best", "model")))
        best = {"weight_version": saved, "metric": stopping.cfg.metric,
                "value": decision.best_value, "model": os.path.join("best", "model")}
        Path(run_dir, "best.json").write_text(json.dumps(best) + "\n")
    return decision.stop


def run_training(cfg: Config) -> dict[str, Any]:
    """Train as `cfg` says; returns the run summary (also printed)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    from actors.coordinator import NAME, Coordinator
    from actors.learner import make_trainer
    from rlrun.data import load_from_config
    from rlrun.metrics import MetricsLogger
    from rlrun.metrics.early_stopping import EarlyStopping
    from rlrun.metrics.health import HealthMonitor
    from rlrun.models import resolve_model_path

    started = time.time()
    # 1. fail early on what needs no cluster.
    if has_checkpoints(cfg.run.output_dir) and not cfg.run.resume:
        raise ConfigError(
            f"run.output_dir={cfg.run.output_dir!r} already holds checkpoints of an earlier "
            "run: set run.resume=true to continue it, or choose another run.output_dir / run.name"
        )
    train, val = load_from_config(cfg)
    model_path = resolve_model_path(cfg.model, model_cache_dir(), cfg.run.seed)
    needs_sandbox = any(p.kind == "code" for p in train + val)
    if cfg.reward.audit_before_training and not cfg.run.resume:
        audit_rewards(cfg, train, needs_sandbox)

    # 2. Ray, then the optional supervised warm-start: RL starts from its result.
    init_ray(cfg)
    if cfg.sft.enabled:
        model_path = warm_start(cfg, model_path, train, val)
    # 3. placement.
    rollout_pg = _place_rollouts(cfg, needs_sandbox)
    # 4. actors: the coordinator first, so learner ranks can find it by name.
    coordinator = Coordinator.options(
        name=NAME, namespace=cfg.run.namespace, num_cpus=0,
        max_concurrency=8 + 2 * cfg.learner.num_workers,
    ).remote(to_dict(cfg), model_path, train, rollout_pg)
    fit = _Fit(make_trainer(cfg, model_path))
    fit.start()

    run_dir = run_dir_for(cfg)
    logger = MetricsLogger(cfg.metrics, run_dir, to_dict(cfg), total_steps=cfg.trainer.steps)
    health = HealthMonitor.from_config(cfg)
    stopping = EarlyStopping(cfg.trainer.early_stopping)
    stop = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:
        stop.set()
        coordinator.request_stop.remote()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)

    # 5. the loop. Validation measures weight version v and is logged in row v (the row of the
    # step that trains from version v), so row 0 holds the score before any update.
    every = cfg.trainer.eval_every
    val_first: dict[str, float] = {}
    val_last: dict[str, float] = {}
    last: dict[str, float] = {}
    step, trained, loop_s = -1, 0.0, 0.0
    try:
        pending = _wait(coordinator.validate.remote(val), fit) if val else {}
        if pending:
            _track_best(stopping, 0, pending, run_dir, coordinator)
        val_first = val_last = pending
        loop_start = time.perf_counter()
        while (result := _wait(coordinator.step.remote(), fit)) is not None:
            step, metrics = result["step"], result["metrics"] | pending
            trained += metrics.get("train/samples", 0.0)
            logger.log(step, metrics)
            logger.log_samples(step, result["samples"])
            for warning in health.check(step, metrics):
                print(f"rlrun train: warning: {warning}", file=sys.stderr)
            if health.should_stop:
                coordinator.request_stop.remote()
            last, pending, version = metrics, {}, step + 1
            if val and every > 0 and version % every == 0 and version < cfg.trainer.steps:
                pending = val_last = _wait(coordinator.validate.remote(val), fit)
                if _track_best(stopping, version, val_last, run_dir, coordinator):
                    coordinator.request_stop.remote()
        loop_s = time.perf_counter() - loop_start
        if val and step >= 0 and not stop.is_set():
            val_last = _wait(coordinator.validate.remote(val), fit)
            logger.log(step + 1, val_last)
            _track_best(stopping, step + 1, val_last, run_dir, coordinator)
        versions = ray.get(coordinator.rollout_versions.remote())
        restarts = ray.get(coordinator.rollout_restarts.remote())
        fit.join()
        if fit.error is not None:
            raise RuntimeError(f"the learner (Ray Train) failed: {fit.error}") from fit.error
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        logger.close()
        ray.get(coordinator.shutdown.remote())
        ray.kill(coordinator)
        remove_placement_group(rollout_pg)

    # 6. summary.
    summary: dict[str, Any] = {
        "steps": step + 1,
        "stopped_by_signal": stop.is_set(),
        "wall_s": round(time.time() - started, 1),
        # Trained samples per second of the step loop (validation inside it included).
        "samples_per_s": trained / loop_s if loop_s > 0 else 0.0,
        "final": last,
        "val_initial": val_first,
        "val_final": val_last,
        "weight_version": versions[0] if versions else None,
        "rollout_versions": versions,
        "rollout_restarts": restarts,
        "run_dir": run_dir,
        "model_path": model_path,
        "checkpoint": str(latest_checkpoint(cfg.run.output_dir) or cfg.run.output_dir),
    }
    if cfg.metrics.report and os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
        from rlrun.metrics.report import write_report

        summary["report"] = write_report(run_dir)
    text = format_summary(summary)
    print(text, flush=True)
    with open(os.path.join(run_dir, "train.log"), "a", encoding="utf-8") as log:
        log.write(text + "\n")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    def fmt(d: dict[str, float]) -> str:
        return " ".join(f"{k}: {v:.4g}" for k, v in sorted(d.items()) if isinstance(v, float)
                        and math.isfinite(v)) or "-"

    before, after = summary["val_initial"], summary["val_final"]
    moved = [
        f"{key} {before[key]:.3f} -> {after[key]:.3f} ({after[key] - before[key]:+.3f})"
        for key in ("val/accuracy", "val/reward_mean")
        if key in before and key in after
    ]
    lines = [
        f"done: {summary['steps']} steps in {summary['wall_s']}s "
        f"({summary['samples_per_s']:.1f} samples/s)"
        + (" (stopped by SIGTERM)" if summary["stopped_by_signal"] else ""),
        *([f"  held-out: {', '.join(moved)}"] if moved else []),
        f"  val before: {fmt(summary['val_initial'])}",
        f"  val after:  {fmt(summary['val_final'])}",
        f"  reward (last step): {summary['final'].get('reward/mean', float('nan')):.4g}",
        f"  weight version: {summary['weight_version']}  rollout restarts: "
        f"{summary['rollout_restarts']}",
        f"  checkpoint: {summary['checkpoint']}",
        f"  run dir: {summary['run_dir']}",
    ]
    return "\n".join(lines)
