"""`run_training(cfg)`: the driver of a GRPO run on Ray, and rlrun's one Ray-aware module.

It runs, in order:

1. checks that need no cluster: output directory vs `run.resume`, the dataset, the model path;
2. `ray.init`: a local Ray, `run.ray_address`, or `$RAY_ADDRESS`, in namespace `run.namespace`
   (an address that does not answer fails within seconds); the optional SFT warm-start;
3. placement: the memory each role needs per GPU (`rlrun plan`, when the GPU type is known),
   then one placement group per actor group (rollout, learner, sandbox), each checked against
   the cluster first, so a run that cannot fit fails at once naming the config keys instead of
   waiting forever;
4. actor groups, each on its placement group: the rollout actors, the sandbox actors (when the
   data has code), the learner ranks (restored from the latest checkpoint on resume). Actor
   names carry the run's name and a tag of its own, so runs sharing a cluster never collide;
5. the loop, one step at a time: collect a scored batch (`rlrun.step`), train the learner on
   it, load the new weights into the rollout actors, log. With `algo.max_staleness` > 0 the
   next batch is collected while the learner trains. A learner rank that dies restarts the
   learner from its latest checkpoint (up to `learner.max_failures` times) and the loop
   rewinds to it; SIGTERM, SIGINT or SIGHUP finishes the step in flight, checkpoints, and
   ends the run (`rlrun.interrupts`); a step that cannot finish checkpoints the steps before it;
6. a summary: final metrics, validation before and after, where the checkpoint is.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlrun.checkpoint import (
    TrainState,
    absolute,
    has_checkpoints,
    is_file,
    is_uri,
    join,
    latest_checkpoint,
)
from rlrun.cluster import (
    ClusterError,
    Demand,
    check_address,
    check_fits,
    check_job_output_dir,
    demands,
    resolve_address,
)
from rlrun.config import Config, ConfigError, to_dict
from rlrun.interrupts import Interrupted, StopSignals

PLACEMENT_TIMEOUT_S = 30.0


def run_dir_for(cfg: Config) -> str:
    """Local directory for metrics, samples and the report (run.output_dir unless remote)."""
    out = cfg.run.output_dir
    return os.path.join("runs", cfg.run.name) if is_uri(out) else out


def init_ray(cfg: Config) -> None:
    """Join `run.ray_address` / $RAY_ADDRESS, or start a local Ray with `run.num_cpus` CPUs."""
    import ray

    address = cfg.run.ray_address or os.environ.get("RAY_ADDRESS") or None
    if ray.is_initialized():
        return
    if address:
        address = resolve_address(address)
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
        # "local": always a Ray of its own, never the cluster /tmp/ray/ray_current_cluster names.
        ray.init(address="local", num_cpus=cfg.run.num_cpus, namespace=cfg.run.namespace)


def check_memory(cfg: Config) -> None:
    """`rlrun plan`'s check, before any GPU is asked for: the GPU type from the cluster (Ray's
    accelerator_type), else this machine; one line naming the keys to change."""
    import ray

    from rlrun import plan

    gpu = None
    for resource in ray.cluster_resources():
        if resource.startswith("accelerator_type:"):
            gpu = plan.gpu_from_name(resource.split(":", 1)[1]) or gpu
    problems = plan.check_fits(cfg, gpu)
    if problems:
        raise ConfigError(f"{problems[0]} (rlrun plan shows every role)")


def check_cluster(cfg: Config, roles: list[str]) -> list[Demand]:
    """The demands of the actor groups in `roles`, checked against the cluster's totals and
    its largest node (`ClusterError` naming the keys otherwise)."""
    import ray

    colocated = cfg.placement.mode == "colocated"
    wanted = [d for d in demands(cfg, "sandbox" in roles)
              if d.role in roles or (colocated and d.role == "colocated")]
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    check_fits(wanted, ray.cluster_resources(), nodes)
    return wanted


def place(cfg: Config, roles: list[str], prefix: str) -> dict[str, Any]:
    """One ready placement group per actor group in `roles` ({role: group}), bundle i for
    actor i of the group."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    colocated = cfg.placement.mode == "colocated"
    wanted = check_cluster(cfg, roles)
    groups: dict[str, Any] = {}
    for d in wanted:
        # Sandbox actors spread over nodes; the rest pack, to keep their traffic local.
        strategy = "SPREAD" if d.role == "sandbox" else "PACK"
        groups[d.role] = placement_group(d.bundles(), strategy=strategy,
                                         name=f"{prefix}.{d.role}")
    refs = {groups[d.role].ready(): d for d in wanted}
    _, late = ray.wait(list(refs), num_returns=len(refs), timeout=PLACEMENT_TIMEOUT_S)
    if late:
        for group in groups.values():
            remove_placement_group(group)
        d = refs[late[0]]
        raise ClusterError(
            f"the {d.role} placement group ({d.count} x {d.bundles()[0]}, from {d.count_key} "
            f"and {d.role}.num_cpus/num_gpus) was not placed within {PLACEMENT_TIMEOUT_S:g}s; "
            f"the cluster has {ray.available_resources()} free (other jobs may hold the rest)"
        )
    if colocated:  # learner ranks and rollout actors share the bundles (and their GPUs)
        groups["learner"] = groups["rollout"] = groups.pop("colocated")
    return groups


def release(groups: dict[str, Any]) -> None:
    """Remove the placement groups `place` made (colocated roles share one)."""
    from ray.util.placement_group import remove_placement_group

    for group in {id(g): g for g in groups.values()}.values():
        remove_placement_group(group)


def check_output_dir(cfg: Config) -> None:
    """The run directory can be written to: found now, not after Ray and the warm-start."""
    check_job_output_dir(cfg.run.output_dir, os.environ)
    run_dir = Path(run_dir_for(cfg))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-check-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"run.output_dir={cfg.run.output_dir!r}: cannot write to {run_dir} "
            f"({err.strerror}); choose a directory this user can write"
        ) from None


def audit_rewards(cfg: Config, reward: Any, train: list, needs_sandbox: bool) -> None:
    """`reward.audit_before_training`: `reward` must pass the data's own references (code
    judged in this process, before the sandbox actors exist)."""
    from rlrun.rewards.audit import audit_before_training
    from rlrun.sandbox import Judge

    judge = Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox) if (
        needs_sandbox
    ) else None
    reward.judge = judge.judge if judge else None
    try:
        report = audit_before_training(reward, train)
    finally:
        reward.judge = None
        if judge is not None:
            judge.close()
    print(f"rlrun train: reward audit: {report.summary()}", flush=True)


def warm_start(cfg: Config, model_path: str, train: list, val: list) -> str:
    """The SFT model this run starts RL from; trained once, reused on resume."""
    from rlrun.sft import run_sft

    done = join(absolute(cfg.run.output_dir), "sft", "model")
    if is_file(join(done, "config.json")):
        print(f"rlrun train: starting from the warm-started model in {done}", flush=True)
        return done
    print(f"rlrun train: supervised warm-start (SFT) of {model_path}: up to {cfg.sft.max_steps} "
          f"steps, until held-out accuracy {cfg.sft.target_accuracy}", flush=True)
    result = run_sft(cfg, model_path, train, val)
    print(
        f"sft done: steps: {result.steps} val/accuracy: {result.accuracy:.3f} "
        f"(target {cfg.sft.target_accuracy})",
        flush=True,
    )
    return result.model_path


def run_training(cfg: Config) -> dict[str, Any]:
    """Train as `cfg` says; returns the run summary (also printed). SIGTERM, SIGINT and SIGHUP
    stop it as `rlrun.interrupts` says."""
    started = time.time()
    with StopSignals() as stop:
        try:
            return _run(cfg, stop, started)
        except KeyboardInterrupt:
            raise Interrupted(stop.signal_name or "SIGINT", stop.phase) from None


def response_decoder(tokenizer: Any) -> Any:
    """Token ids -> text as the rollout engines decode a response (no special tokens)."""
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def _run(cfg: Config, stop: StopSignals, started: float) -> dict[str, Any]:
    """Step 1 of `run_training`, then the rest with the reward built."""
    from rlrun.data import load_from_config
    from rlrun.models import model_cache_dir, resolve_model_path, share_model
    from rlrun.rewards import build_reward
    from rlrun.sft import mix_problem

    # 1. fail early on what needs no cluster.
    if has_checkpoints(cfg.run.output_dir) and not cfg.run.resume:
        raise ConfigError(
            f"run.output_dir={cfg.run.output_dir!r} already holds checkpoints of an earlier "
            "run: set run.resume=true to continue it, or choose another run.output_dir / run.name"
        )
    check_output_dir(cfg)
    # The plug-ins are imported (in their own processes) and their signatures checked first:
    # a plug-in that cannot load fails before a model is built or read.
    reward = build_reward(cfg, None)
    try:
        train, val = load_from_config(cfg)
        if cfg.sft.enabled and cfg.sft.math_fraction is not None and (
                problem := mix_problem(train, cfg.sft.math_fraction)):
            raise ConfigError(problem)  # before Ray and the model, not inside the warm-start
        model_path = resolve_model_path(cfg.model, model_cache_dir(), cfg.run.seed)
        if is_uri(cfg.run.output_dir) and os.path.isdir(model_path):
            # Actors on other nodes, which share no file system with this one, fetch it there.
            model_path = share_model(model_path, join(cfg.run.output_dir, "base", "model"))
        needs_sandbox = any(p.kind == "code" for p in train + val)
        if cfg.reward.audit_before_training and not cfg.run.resume:
            audit_rewards(cfg, reward, train, needs_sandbox)
        return _train(cfg, stop, reward, train, val, model_path, needs_sandbox, started)
    finally:
        reward.close()


def _train(cfg: Config, stop: StopSignals, reward: Any, train: list, val: list,
           model_path: str, needs_sandbox: bool, started: float) -> dict[str, Any]:
    """Steps 2-6 of `run_training`."""
    from actors.learner import LearnerFailed, LearnerGroup
    from actors.rollout import RolloutGroup
    from actors.sandbox import SandboxPool
    from actors.weight_sync import make_weight_sync
    from rlrun import evaluation, step
    from rlrun.data.prompts import render_prompt
    from rlrun.data_order import DataOrder
    from rlrun.engines import SamplingParams
    from rlrun.metrics import MetricsLogger
    from rlrun.metrics.early_stopping import EarlyStopping
    from rlrun.metrics.health import HealthMonitor
    from rlrun.models import load_tokenizer
    from rlrun.partial import PartialRollouts
    from rlrun.records import Sample

    # 2. The metric sinks first: one that cannot start (an MLflow store, a W&B login) fails
    # before Ray and a warm-start have spent anything.
    run_dir = run_dir_for(cfg)
    logger = MetricsLogger(cfg.metrics, run_dir, to_dict(cfg), total_steps=cfg.trainer.steps)
    rollouts = sandbox = learner = None
    groups: dict[str, Any] = {}
    executor = ThreadPoolExecutor(1, thread_name_prefix="rollout")
    signalled = stop.requested
    try:
        # Ray, whether the actor groups fit it (before a warm-start that can take hours), then
        # the optional supervised warm-start: RL starts from its result.
        roles = ["rollout", "learner"] + (["sandbox"] if needs_sandbox else [])
        init_ray(cfg)
        stop.take_back()
        check_cluster(cfg, roles)
        if cfg.sft.enabled:
            stop.phase = "during the SFT warm-start (rerun the same command to start it again)"
            model_path = warm_start(cfg, model_path, train, val)
        stop.phase = "while the actors started (nothing to checkpoint yet)"
        tokenizer = load_tokenizer(model_path) if cfg.model.chat_template else None
        if cfg.reward.step_rewards:  # step parts go to the token that ends each step
            decoder = tokenizer or load_tokenizer(model_path)
            reward.decode = response_decoder(decoder)

        def render(problem: Any) -> str:
            return render_prompt(problem, cfg.data, tokenizer, chat=cfg.model.chat_template)

        prompts = [render(p) for p in train]

        # 3. placement: memory per GPU (rlrun plan), then a placement group per actor group,
        # checked against the cluster first.
        check_memory(cfg)
        prefix = f"{cfg.run.name}-{uuid.uuid4().hex[:6]}"
        groups = place(cfg, roles, prefix)

        # 4. actor groups, each on its own placement group.
        rollouts = RolloutGroup(cfg, model_path, groups["rollout"], prefix)
        if needs_sandbox:
            sandbox = SandboxPool(cfg.sandbox, prefix, groups["sandbox"])
        learner = LearnerGroup(cfg, model_path, groups["learner"], prefix)
        state = learner.start()
        weights = make_weight_sync(cfg, learner, rollouts)
        colocated = cfg.placement.mode == "colocated"

        def sync(version: int) -> dict[str, float]:
            """The learner's weights into every engine. Colocated, the engines slept through
            training: weights wake first, the KV cache once they are in."""
            if colocated:
                rollouts.wake_up(["weights"])
            metrics = weights.sync(version)
            if colocated:
                rollouts.wake_up(["kv_cache"])
            return metrics

        logger.rewind(state.step)  # resumed: the steps after the checkpoint are logged anew
        if state.step:  # resumed: the rollout actors start from the restored weights
            sync(state.version)
        reward.judge = sandbox.judge if sandbox else None
        order = DataOrder(len(train), cfg.run.seed, position=state.data_position)
        partial = PartialRollouts(train, prompts, order, cfg, state.in_flight) \
            if cfg.rollout.partial else None

        def advance(new: list[str], sampling: SamplingParams, paused: list[Sample],
                    continuing: SamplingParams) -> tuple[list[list[Sample]], list[Sample]]:
            """One round of a partial rollout: new prompts and paused samples side by side."""
            started = rollouts.submit(new, sampling) if new else None
            extended = rollouts.submit_extend(paused, continuing) if paused else None
            return (rollouts.wait(started) if started else [],
                    rollouts.wait(extended) if extended else [])

        def collect(version: int) -> step.Rollout:
            """Steps 1-3 of the batch the learner trains at weight `version`: draw, generate on
            the rollout actors, score."""
            if partial is not None:
                return partial.collect(advance, reward.score, version,
                                       judges_code=needs_sandbox)
            return step.collect(train, prompts, order, rollouts.generate, reward.score, cfg,
                                judges_code=needs_sandbox)

        def validate() -> dict[str, float]:
            """val/* of the rollout actors' current weights: greedy pass@1, sampled pass@k."""
            result = evaluation.evaluate(
                val,
                evaluation.sampling_generate(rollouts.generate, cfg.rollout.sampling,
                                             cfg.run.seed),
                evaluation.reward_scorer(reward), k_list=cfg.trainer.eval_k,
                samples=cfg.trainer.eval_samples, greedy=True, seed=cfg.run.seed,
                render=render,
                batch_size=max(1, cfg.rollout.batch_size // cfg.trainer.eval_samples),
            )
            return result.metrics("val")

        # 5. the loop. Validation measures weight version v and is logged in row v (the row of
        # the step that trains from version v), so row 0 holds the score before any update.
        health = HealthMonitor.from_config(cfg)
        stopping = EarlyStopping(cfg.trainer.early_stopping)
        every, ckpt_every = cfg.trainer.eval_every, cfg.trainer.checkpoint_every
        val_first: dict[str, float] = {}
        val_last: dict[str, float] = {}
        last: dict[str, float] = {}
        # Samples trained per step: a step redone after a learner restart counts once.
        trained: dict[int, float] = {}
        loop_s, failures, steps_run, saved = 0.0, 0, 0, True
        ahead = False  # the learner holds weights newer than `state` (trained, not yet logged)
        halt = False  # early stopping, the health monitor or too many bad steps said stop
        prefetch: Future | None = None

        def track_best(version: int, metrics: dict[str, float]) -> bool:
            """Early stopping; keeps the best model in run.output_dir/best/model (for a URI:
            uploaded there) and best.json in the run directory."""
            decision = stopping.update(version, metrics)
            if decision.message:
                print(f"rlrun train: early stopping: {decision.message}", flush=True)
            if decision.improved:
                # Absolute: the learner rank that writes it runs in a directory of its own,
                # maybe on another node.
                model = join(absolute(cfg.run.output_dir), "best", "model")
                learner.export(model)
                best = {"weight_version": version, "metric": stopping.cfg.metric,
                        "value": decision.best_value,
                        # relative to the run directory when that is where the model is
                        "model": model if is_uri(model) else os.path.join("best", "model")}
                Path(run_dir, "best.json").write_text(json.dumps(best) + "\n")
            return decision.stop

        pending = validate() if val else {}
        if pending:
            track_best(state.version, pending)
        val_first = val_last = pending
        loop_start = time.perf_counter()
        stop.graceful = True
        try:
            while state.step < cfg.trainer.steps and not (halt or signalled.is_set()):
                t0 = time.perf_counter()
                # 1-3. draw, generate, score (collected during the previous step when
                # overlapping).
                rollout = prefetch.result() if prefetch else collect(state.version)
                prefetch = None
                t_rollout = time.perf_counter() - t0
                # 4. advantages over the groups recent enough, one shard per learner rank.
                batch = step.make_batch(rollout, state.version, state.step, cfg)
                if cfg.algo.max_staleness > 0 and state.step + 1 < cfg.trainer.steps and not (
                    halt or signalled.is_set()
                ):
                    prefetch = executor.submit(collect, state.version + 1)
                try:
                    # 5. learn: every rank trains on its shard ...
                    t1 = time.perf_counter()
                    if colocated:  # level 2: the weights are replaced right after anyway
                        rollouts.sleep(2)
                    ahead = True
                    learned = learner.train(batch.shards)
                    t_train = time.perf_counter() - t1
                    # 6. ... and every rollout actor takes the weights it made: the pair of
                    # the step.
                    t2 = time.perf_counter()
                    synced = sync(state.step + 1)
                    t_sync = time.perf_counter() - t2
                    done = TrainState(
                        step=state.step + 1, version=state.step + 1,
                        data_position=rollout.data_position,
                        bad_steps=state.bad_steps + int(learned.get("train/bad_steps", 0)),
                        in_flight=rollout.in_flight,
                    )
                    # 7. log ...
                    timings = {"perf/time_rollout": t_rollout, "perf/time_train": t_train,
                               "perf/time_sync": t_sync,
                               "perf/time_step": time.perf_counter() - t0} | synced
                    metrics = step.step_metrics(
                        batch, rollout, learned, state.version, timings,
                        token_lags=cfg.algo.max_staleness if partial else 0,
                    )
                    if sandbox is not None:
                        metrics["sandbox/recreated"] = float(sandbox.stats()["recreated"])
                    if done.bad_steps > cfg.trainer.max_bad_steps:
                        halt = True
                        metrics["train/stopped_bad_steps"] = float(done.bad_steps)
                    metrics |= pending
                    trained[state.step] = metrics["train/samples"]
                    logger.log(state.step, metrics)
                    logger.log_samples(state.step, step.sample_rows(batch, prompts))
                    last, pending, state, ahead = metrics, {}, done, False
                    steps_run += 1
                    # 8. ... and checkpoint: a checkpointed step is always in the logs.
                    saved = ckpt_every > 0 and state.step % ckpt_every == 0
                    if saved:
                        learner.save(state)
                except LearnerFailed as err:
                    if failures >= cfg.learner.max_failures:
                        raise RuntimeError(
                            f"{err}; the learner has failed {failures + 1} times "
                            f"(learner.max_failures={cfg.learner.max_failures})"
                        ) from None
                    failures += 1
                    print(f"rlrun train: {err}; restarting the learner from its latest "
                          f"checkpoint ({failures}/{cfg.learner.max_failures})",
                          file=sys.stderr, flush=True)
                    if prefetch is not None:
                        prefetch.result()  # let the draw finish before rewinding the data order
                        prefetch = None
                    state, saved, ahead = learner.restart(), True, False
                    order.position = state.data_position
                    if partial is not None:
                        partial.restart(state.in_flight)
                    logger.rewind(state.step)
                    print(f"rlrun train: learner restarted: rewound to step {state.step}",
                          file=sys.stderr, flush=True)
                    trained = {k: v for k, v in trained.items() if k < state.step}
                    sync(state.version)
                    continue
                for warning in health.check(state.step - 1, last):
                    print(f"rlrun train: warning: {warning}", file=sys.stderr)
                halt = halt or health.should_stop
                if val and every > 0 and state.version % every == 0 and \
                        state.version < cfg.trainer.steps:
                    pending = val_last = validate()
                    halt = halt or track_best(state.version, val_last)
        except Exception:
            # A step that cannot finish (a reward past its deadline, an actor that keeps
            # failing): keep what the steps before it learned, then report the error.
            if not saved and not ahead:
                save_before_error(learner, state)
            raise
        loop_s = time.perf_counter() - loop_start
        if not saved:  # the final (or signal-requested) stop
            learner.save(state)
        stop.graceful = False
        stop.phase = "after the final checkpoint"
        if cfg.learner.lora.rank:  # LoRA checkpoints hold adapters: the merged model goes here
            learner.export(join(cfg.run.output_dir, "final", "model"))
        if val and steps_run and not signalled.is_set():
            val_last = validate()
            logger.log(state.step, val_last)
            track_best(state.version, val_last)
        versions = rollouts.versions()
        restarts = rollouts.restarts
    finally:
        logger.close()
        executor.shutdown(wait=True, cancel_futures=True)
        for group in (learner, rollouts, sandbox):
            if group is not None:
                group.shutdown()
        release(groups)

    # 6. summary.
    summary: dict[str, Any] = {
        "steps": state.step,
        "stopped_by_signal": stop.signal_name if signalled.is_set() else None,
        "wall_s": round(time.time() - started, 1),
        # Trained samples per second of the step loop (validation inside it included).
        "samples_per_s": sum(trained.values()) / loop_s if loop_s > 0 else 0.0,
        "final": last,
        "val_initial": val_first,
        "val_final": val_last,
        "weight_version": versions[0] if versions else None,
        "rollout_versions": versions,
        "rollout_restarts": restarts,
        "learner_restarts": failures,
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


def save_before_error(learner: Any, state: TrainState) -> None:
    """Checkpoint `state` on the way out of a failed step; a learner that cannot save is
    reported, and the error that stopped the run still goes up."""
    print(f"rlrun train: saving a checkpoint of step {state.step} before stopping",
          file=sys.stderr, flush=True)
    try:
        learner.save(state)
    except Exception as err:  # noqa: BLE001 - the original error matters more
        print(f"rlrun train: the checkpoint could not be saved: {err}", file=sys.stderr)


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
        + (f" (stopped by {summary['stopped_by_signal']})" if summary["stopped_by_signal"] else ""),
        *([f"  held-out: {', '.join(moved)}"] if moved else []),
        f"  val before: {fmt(summary['val_initial'])}",
        f"  val after:  {fmt(summary['val_final'])}",
        f"  reward (last step): {summary['final'].get('reward/mean', float('nan')):.4g}",
        f"  weight version: {summary['weight_version']}  rollout restarts: "
        f"{summary['rollout_restarts']}  learner restarts: {summary['learner_restarts']}",
        f"  checkpoint: {summary['checkpoint']}",
        f"  run dir: {summary['run_dir']}",
    ]
    return "\n".join(lines)
