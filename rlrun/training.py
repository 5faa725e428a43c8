"""`run_training(cfg)`: the driver of a GRPO run on Ray, written as a recipe.

`GRPORecipe.setup` builds everything, in order:

1. what needs no cluster (`rlrun.preflight`): the output directory, the reward with its
   plug-ins, the data, the model path, the reward audit;
2. the metric sinks, then Ray (a local Ray, `run.ray_address` or `$RAY_ADDRESS`) and whether
   the actor groups fit it, then the optional SFT warm-start (RL starts from its result);
3. one placement group per actor group, then the groups on them: the rollout actors, the
   sandbox actors (when the data has code), the learner ranks (restored from the latest
   checkpoint on resume), and the weight sync between the learner and the rollout actors.
   Actor names carry the run's name and a tag of its own, so runs sharing a cluster never
   collide.

`GRPORecipe.train` is the loop, one step at a time: collect a scored batch (`rlrun.step`),
train the learner on it, load the new weights into the rollout actors, log, checkpoint. With
`algo.max_staleness` > 0 the next batch is collected while the learner trains. A learner rank
that dies restarts the learner from its latest checkpoint (up to `learner.max_failures` times)
and the loop rewinds to it; SIGTERM, SIGINT or SIGHUP finishes the step in flight, checkpoints,
and ends the run (`rlrun.interrupts`); a step that cannot finish checkpoints the steps before
it. `finish` saves and validates the final weights, and `summary` reports the run.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rlrun import preflight, step
from rlrun.checkpoint import TrainState, is_uri, join, latest_checkpoint
from rlrun.config import Config, to_dict
from rlrun.engines.base import SamplingParams
from rlrun.interrupts import Interrupted, StopSignals
from rlrun.preflight import run_dir_for
from rlrun.records import Sample


def run_training(cfg: Config) -> dict[str, Any]:
    """Train as `cfg` says; returns the run summary (also printed). SIGTERM, SIGINT and SIGHUP
    stop it as `rlrun.interrupts` says."""
    started = time.time()
    with StopSignals() as stop:
        try:
            with GRPORecipe(cfg, stop) as recipe:
                recipe.setup()
                recipe.train()
                recipe.finish()
            return recipe.summary(time.time() - started)
        except KeyboardInterrupt:
            raise Interrupted(stop.signal_name or "SIGINT", stop.phase) from None


class GRPORecipe:
    """One GRPO run: `setup` builds it, `train` runs the loop, `finish` ends it; leaving the
    `with` block shuts the actor groups down and releases what they held."""

    def __init__(self, cfg: Config, stop: StopSignals) -> None:
        self.cfg = cfg
        self.stop = stop
        self.run_dir = run_dir_for(cfg)
        self.reward = self.logger = self.rollouts = self.sandbox = self.learner = None
        self.placement: dict[str, Any] = {}
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rollout")
        # The loop's progress: the state of the last logged step, the learner holding weights
        # newer than it (trained, not yet logged), whether it is checkpointed, validation
        # waiting for its row, and samples trained per step (a redone step counts once).
        self.state = TrainState()
        self.ahead, self.saved, self.halt = False, True, False
        self.pending: dict[str, float] = {}
        self.val_first: dict[str, float] = {}
        self.val_last: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.trained: dict[int, float] = {}
        self.failures = self.steps_run = 0
        self.loop_s = 0.0
        self.prefetch: Future | None = None

    # -- setup -------------------------------------------------------------------------------

    def setup(self) -> None:
        """Everything the loop needs, checked as early as it can be."""
        from actors.learner import LearnerGroup
        from actors.placement import check_cluster, init_ray, place
        from actors.rollout import RolloutGroup
        from actors.sandbox import SandboxPool
        from actors.weight_sync import make_weight_sync
        from rlrun.data import load_from_config
        from rlrun.data.prompts import render_prompt
        from rlrun.data_order import DataOrder
        from rlrun.metrics import MetricsLogger
        from rlrun.metrics.early_stopping import BestModel
        from rlrun.metrics.health import HealthMonitor
        from rlrun.models import load_tokenizer, model_cache_dir, resolve_model_path, share_model
        from rlrun.multiturn import Episodes, ObservationTokens
        from rlrun.partial import PartialRollouts
        from rlrun.rewards import build_reward
        from rlrun.sft import warm_start

        cfg = self.cfg
        # 1. What needs no cluster. The plug-ins are imported (in their own processes) and
        # their signatures checked first: one that cannot load fails before a model is read.
        preflight.check_output_dir(cfg)
        self.reward = build_reward(cfg, None)
        env_cls = preflight.environment(cfg)
        self.train_set, self.val_set = load_from_config(cfg)
        preflight.check_sft_mix(cfg, self.train_set)
        if env_cls is not None:
            preflight.check_environment(cfg, env_cls, self.train_set + self.val_set)
        model_path = resolve_model_path(cfg.model, model_cache_dir(), cfg.run.seed)
        observations = ObservationTokens(load_tokenizer(model_path), cfg.model.chat_template
                                         ) if env_cls is not None else None
        if is_uri(cfg.run.output_dir) and os.path.isdir(model_path):
            # Actors on other nodes, which share no file system with this one, fetch it there.
            model_path = share_model(model_path, join(cfg.run.output_dir, "base", "model"))
        self.judges_code = any(p.kind == "code" for p in self.train_set + self.val_set)
        if cfg.reward.audit_before_training and not cfg.run.resume:
            preflight.audit_rewards(cfg, self.reward, self.train_set)

        # 2. The metric sinks (an MLflow store, a W&B login) before Ray and a warm-start have
        # spent anything; Ray, whether the actor groups fit it, then the warm-start.
        self.logger = MetricsLogger(cfg.metrics, self.run_dir, to_dict(cfg),
                                    total_steps=cfg.trainer.steps)
        roles = ["rollout", "learner"] + (["sandbox"] if self.judges_code else [])
        init_ray(cfg)
        self.stop.take_back()
        check_cluster(cfg, roles)
        if cfg.sft.enabled:
            self.stop.phase = "during the SFT warm-start (rerun the same command to start it again)"
            model_path = warm_start(cfg, model_path, self.train_set, self.val_set)
        self.stop.phase = "while the actors started (nothing to checkpoint yet)"
        self.model_path = model_path
        tokenizer = load_tokenizer(model_path) if cfg.model.chat_template else None
        self.render = lambda p: render_prompt(p, cfg.data, tokenizer, chat=cfg.model.chat_template)
        self.prompts = [self.render(p) for p in self.train_set]

        # 3. A placement group per actor group, then the groups on them.
        prefix = f"{cfg.run.name}-{uuid.uuid4().hex[:6]}"
        self.placement = place(cfg, roles, prefix)
        self.rollouts = RolloutGroup(cfg, model_path, self.placement["rollout"], prefix)
        if self.judges_code:
            self.sandbox = SandboxPool(cfg.sandbox, prefix, self.placement["sandbox"])
        self.learner = LearnerGroup(cfg, model_path, self.placement["learner"], prefix)
        self.state = self.learner.start()
        self.weights = make_weight_sync(cfg, self.learner, self.rollouts)
        self.logger.rewind(self.state.step)  # resumed: later steps are logged anew
        if self.state.step:  # resumed: the rollout actors start from the restored weights
            self.sync(self.state.version)

        # The reward judges code on the sandbox actors and, with step rewards, places each
        # step's part at the token the engine decoded it from.
        decode = None
        if cfg.reward.step_rewards:
            decoder = tokenizer or load_tokenizer(model_path)
            decode = lambda ids: decoder.decode(ids, skip_special_tokens=True)  # noqa: E731
        judge = self.sandbox.judge if self.sandbox else None
        self.score = self.reward.using(judge=judge, decode=decode).score
        # Multi-turn: the turns after the first run on the rollout actors and the sandbox, and
        # the reward scores each trajectory's last turn as its environment says.
        self.episodes = None
        if observations is not None:
            self.episodes = Episodes(env_cls, cfg, observations, self.rollouts.extend, judge)
            self.score = self.episodes.score(self.score)
        self.order = DataOrder(len(self.train_set), cfg.run.seed,
                               position=self.state.data_position)
        self.partial = PartialRollouts(self.train_set, self.prompts, self.order, cfg,
                                       self.state.in_flight) if cfg.rollout.partial else None
        self.health = HealthMonitor.from_config(cfg)
        self.best = BestModel(cfg, self.run_dir, self.learner.export)

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> None:
        """Steps until `trainer.steps`, a stop signal, early stopping or the health monitor.
        Validation measures weight version v and is logged in row v (the row of the step that
        trains from version v), so row 0 holds the score before any update."""
        from actors.learner import LearnerFailed

        self.pending = self.val_first = self.val_last = self.validate()
        loop_start = time.perf_counter()
        self.stop.graceful = True
        try:
            while self.state.step < self.cfg.trainer.steps and not self.stopping():
                try:
                    self.step()
                except LearnerFailed as err:
                    self.recover(err)
                    continue
                self.after_step()
        except Exception:
            # A step that cannot finish (a reward past its deadline, an actor that keeps
            # failing): keep what the steps before it learned, then report the error.
            if not self.saved and not self.ahead:
                save_before_error(self.learner, self.state)
            raise
        self.loop_s = time.perf_counter() - loop_start

    def step(self) -> None:
        """One step: collect, batch, learn, sync, log, checkpoint."""
        cfg, state = self.cfg, self.state
        t0 = time.perf_counter()
        # 1-3. draw, generate, score (collected during the previous step when overlapping).
        rollout = self.prefetch.result() if self.prefetch else self.collect(state.version)
        self.prefetch = None
        t_rollout = time.perf_counter() - t0
        # 4. advantages over the groups recent enough, one shard per learner rank.
        batch = step.make_batch(rollout, state.version, state.step, cfg)
        if cfg.algo.max_staleness > 0 and state.step + 1 < cfg.trainer.steps and not (
                self.stopping()):
            self.prefetch = self.executor.submit(self.collect, state.version + 1)
        # 5. learn: every rank trains on its shard ...
        t1 = time.perf_counter()
        if self.colocated:  # level 2: the weights are replaced right after anyway
            self.rollouts.sleep(2)
        self.ahead = True
        learned = self.learner.train(batch.shards)
        t_train = time.perf_counter() - t1
        # 6. ... and every rollout actor takes the weights it made: the pair of the step.
        t2 = time.perf_counter()
        synced = self.sync(state.step + 1)
        t_sync = time.perf_counter() - t2
        done = TrainState(
            step=state.step + 1, version=state.step + 1, data_position=rollout.data_position,
            bad_steps=state.bad_steps + int(learned.get("train/bad_steps", 0)),
            in_flight=rollout.in_flight,
        )
        # 7. log ...
        timings = {"perf/time_rollout": t_rollout, "perf/time_train": t_train,
                   "perf/time_sync": t_sync, "perf/time_step": time.perf_counter() - t0} | synced
        metrics = step.step_metrics(batch, rollout, learned, state.version, timings,
                                    token_lags=cfg.algo.max_staleness if self.partial else 0)
        if self.sandbox is not None:
            metrics["sandbox/recreated"] = float(self.sandbox.stats()["recreated"])
        if done.bad_steps > cfg.trainer.max_bad_steps:
            self.halt = True
            metrics["train/stopped_bad_steps"] = float(done.bad_steps)
        metrics |= self.pending
        self.trained[state.step] = metrics["train/samples"]
        self.logger.log(state.step, metrics)
        self.logger.log_samples(state.step, step.sample_rows(batch, self.prompts))
        self.last, self.pending, self.state, self.ahead = metrics, {}, done, False
        self.steps_run += 1
        # 8. ... and checkpoint: a checkpointed step is always in the logs.
        every = cfg.trainer.checkpoint_every
        self.saved = every > 0 and done.step % every == 0
        if self.saved:
            self.learner.save(done)

    def after_step(self) -> None:
        """The health checks of the step just logged, and validation when it is due."""
        cfg = self.cfg
        for warning in self.health.check(self.state.step - 1, self.last):
            print(f"rlrun train: warning: {warning}", file=sys.stderr)
        self.halt = self.halt or self.health.should_stop
        every, version = cfg.trainer.eval_every, self.state.version
        if self.val_set and every > 0 and version % every == 0 and version < cfg.trainer.steps:
            self.pending = self.val_last = self.validate()

    def recover(self, err: Exception) -> None:
        """A learner rank died: restart the learner from its latest checkpoint and rewind the
        data order, the partial rollouts, the logs and the rollout actors' weights to it."""
        cfg = self.cfg
        if self.failures >= cfg.learner.max_failures:
            raise RuntimeError(
                f"{err}; the learner has failed {self.failures + 1} times "
                f"(learner.max_failures={cfg.learner.max_failures})"
            ) from None
        self.failures += 1
        print(f"rlrun train: {err}; restarting the learner from its latest checkpoint "
              f"({self.failures}/{cfg.learner.max_failures})", file=sys.stderr, flush=True)
        if self.prefetch is not None:
            self.prefetch.result()  # let the draw finish before rewinding the data order
            self.prefetch = None
        self.state, self.saved, self.ahead = self.learner.restart(), True, False
        self.order.position = self.state.data_position
        if self.partial is not None:
            self.partial.restart(self.state.in_flight)
        self.logger.rewind(self.state.step)
        print(f"rlrun train: learner restarted: rewound to step {self.state.step}",
              file=sys.stderr, flush=True)
        self.trained = {k: v for k, v in self.trained.items() if k < self.state.step}
        self.sync(self.state.version)

    def finish(self) -> None:
        """The final checkpoint (unless the last step saved it), the merged model of a LoRA
        run, and the final weights' validation."""
        cfg = self.cfg
        if not self.saved:
            self.learner.save(self.state)
        self.stop.graceful = False
        self.stop.phase = "after the final checkpoint"
        if cfg.learner.lora.rank:  # LoRA checkpoints hold adapters: the merged model goes here
            self.learner.export(join(cfg.run.output_dir, "final", "model"))
        if self.val_set and self.steps_run and not self.stop.requested.is_set():
            self.val_last = self.validate(log=True)
        self.versions = self.rollouts.versions()

    # -- the pieces the loop calls -----------------------------------------------------------

    @property
    def colocated(self) -> bool:
        return self.cfg.placement.mode == "colocated"

    def stopping(self) -> bool:
        """Early stopping, the health monitor, too many bad steps or a signal said stop."""
        return self.halt or self.stop.requested.is_set()

    def collect(self, version: int) -> step.Rollout:
        """Steps 1-3 of the batch the learner trains at weight `version`: draw, generate on
        the rollout actors, score."""
        if self.partial is not None:
            return self.partial.collect(self.advance, self.score, version,
                                        judges_code=self.judges_code)
        return step.collect(self.train_set, self.prompts, self.order, self.rollouts.generate,
                            self.score, self.cfg, judges_code=self.judges_code,
                            episodes=self.episodes)

    def advance(self, new: list[str], sampling: SamplingParams, paused: list[Sample],
                continuing: SamplingParams) -> tuple[list[list[Sample]], list[Sample]]:
        """One round of a partial rollout: new prompts and paused samples side by side."""
        started = self.rollouts.submit(new, sampling) if new else None
        extended = self.rollouts.submit_extend(paused, continuing) if paused else None
        return (self.rollouts.wait(started) if started else [],
                self.rollouts.wait(extended) if extended else [])

    def sync(self, version: int) -> dict[str, float]:
        """The learner's weights into every engine. Colocated, the engines slept through
        training: weights wake first, the KV cache once they are in."""
        if self.colocated:
            self.rollouts.wake_up(["weights"])
        metrics = self.weights.sync(version)
        if self.colocated:
            self.rollouts.wake_up(["kv_cache"])
        return metrics

    def validate(self, log: bool = False) -> dict[str, float]:
        """val/* of the rollout actors' current weights (greedy pass@1, sampled pass@k), kept
        by the best-model tracker, which may say stop; with `log`, logged in the current row."""
        from rlrun import evaluation

        cfg = self.cfg
        if not self.val_set:
            return {}
        metrics = evaluation.evaluate(
            self.val_set, self.rollouts.generate, self.score,
            SamplingParams.from_config(cfg.rollout.sampling, seed=cfg.run.seed),
            k_list=cfg.trainer.eval_k, samples=cfg.trainer.eval_samples, greedy=True,
            render=self.render,
            batch_size=max(1, cfg.rollout.batch_size // cfg.trainer.eval_samples),
            episodes=self.episodes,
        ).metrics("val")
        if log:
            self.logger.log(self.state.step, metrics)
        self.halt = self.best.update(self.state.version, metrics) or self.halt
        return metrics

    # -- the end -----------------------------------------------------------------------------

    def __enter__(self) -> GRPORecipe:
        return self

    def __exit__(self, *exc: object) -> None:
        """Shut the actor groups down, release their placement groups, stop the plug-ins."""
        if self.logger is not None:
            self.logger.close()
        self.executor.shutdown(wait=True, cancel_futures=True)
        for group in (self.learner, self.rollouts, self.sandbox):
            if group is not None:
                group.shutdown()
        if self.placement:
            from actors.placement import release

            release(self.placement)
        if self.reward is not None:
            self.reward.close()

    def summary(self, wall_s: float) -> dict[str, Any]:
        """The run's summary, printed and appended to train.log; with `metrics.report`, the
        report is written first."""
        from rlrun.metrics.summary import format_summary

        cfg, versions = self.cfg, self.versions
        summary: dict[str, Any] = {
            "steps": self.state.step,
            "stopped_by_signal": self.stop.signal_name if self.stop.requested.is_set() else None,
            "wall_s": round(wall_s, 1),
            # Trained samples per second of the step loop (validation inside it included).
            "samples_per_s": sum(self.trained.values()) / self.loop_s if self.loop_s else 0.0,
            "final": self.last,
            "val_initial": self.val_first,
            "val_final": self.val_last,
            "weight_version": versions[0] if versions else None,
            "rollout_versions": versions,
            "rollout_restarts": self.rollouts.restarts,
            "learner_restarts": self.failures,
            "run_dir": self.run_dir,
            "model_path": self.model_path,
            "checkpoint": str(latest_checkpoint(cfg.run.output_dir) or cfg.run.output_dir),
        }
        if cfg.metrics.report and os.path.isfile(os.path.join(self.run_dir, "metrics.jsonl")):
            from rlrun.metrics.report import write_report

            summary["report"] = write_report(self.run_dir)
        text = format_summary(summary)
        print(text, flush=True)
        with open(os.path.join(self.run_dir, "train.log"), "a", encoding="utf-8") as log:
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
