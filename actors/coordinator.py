"""The coordinator actor: owns the training step and hands the learner ranks their shards.

One step, as `Coordinator.step` runs it:

1. draw      the next prompts in the seeded data order (`rlrun.data_order`);
2. generate  `algo.group_size` completions per prompt on the rollout actors;
3. judge     score them (code through the sandbox pool, math with the verifier);
   with `algo.filter_equal_groups`, groups whose rewards are all equal are dropped and more
   prompts are drawn, up to `algo.max_topup_rounds` times;
4. advantages  group-relative advantages, stale groups dropped, the batch cut into rank shards;
5. learn     every learner rank pulls its shard (`get_shard`) and reports back (`finish`);
6. sync      forward the weights rank 0 published to every rollout actor;
7. log       return the step's metrics to the driver.

With `algo.max_staleness` = k > 0, steps 1-3 for the next batch run in a background thread
while 5 runs, so generation overlaps training; its samples are one version old when trained
on, groups more than k versions old are dropped, and the learner corrects with the behaviour
log-probs. With k = 0 every step generates with the weights of the step before.

The learner is a separate Ray Train job: on every (re)start its rank 0 calls `attach` with the
state of the checkpoint it restored (or a fresh state), so after a learner restart the
coordinator rewinds to the checkpoint's step, data position and weights.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import ray

from actors.rollout import RolloutPool
from rlrun import batching
from rlrun.algo import merge_metrics
from rlrun.checkpoint import TrainState
from rlrun.config import from_dict
from rlrun.data_order import DataOrder
from rlrun.records import VERDICT_STATUSES, Problem, Sample
from rlrun.weights import WeightUpdate
from rlrun.weights.object_store import hold_weights

NAME = "coordinator"  # named actor in run.namespace: learner ranks find it by this name


@dataclass
class Rollout:
    """Steps 1-3 of one batch."""

    groups: list[batching.Group]
    data_position: int
    metrics: dict[str, float] = field(default_factory=dict)


class LearnerRestarted(Exception):
    """The learner re-attached (it restarted from a checkpoint) while a step was in flight."""


@ray.remote
class Coordinator:
    def __init__(
        self,
        config: dict,
        model_path: str,
        problems: list[Problem],
        rollout_placement: Any = None,
    ) -> None:
        from rlrun.data.prompts import render_prompt
        from rlrun.models import load_tokenizer
        from rlrun.rewards import build_reward

        self.cfg = cfg = from_dict(config)
        self.model_path = model_path
        self.problems = problems
        tokenizer = load_tokenizer(model_path) if cfg.model.chat_template else None
        self.render = lambda p: render_prompt(p, cfg.data, tokenizer, chat=cfg.model.chat_template)
        self.prompts = [self.render(p) for p in problems]
        self.pool = RolloutPool(cfg, model_path, rollout_placement)
        self.sandbox = None
        if any(p.kind == "code" for p in problems):
            from actors.sandbox import SandboxPool

            self.sandbox = SandboxPool(cfg.sandbox)
        self.reward = build_reward(cfg, self.sandbox.judge if self.sandbox else None)
        self.order = DataOrder(len(problems), cfg.run.seed)
        self.step_idx = 0
        self.version = 0
        self.bad_steps = 0
        self.update: WeightUpdate | None = None
        self.cv = threading.Condition()
        self.generation = 0  # learner attachments so far
        self.shards: list[batching.Shard] | None = None
        self.results: dict[int, dict[str, float]] = {}
        self.finished = False
        self.stop_requested = False
        self.prefetch: Future | None = None
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rollout")

    # ----- driver side ---------------------------------------------------------------------

    def step(self) -> dict[str, Any] | None:
        """Run one training step; None once `trainer.steps` are done or a stop was requested."""
        while True:
            self._wait_attached()
            if self.stop_requested or self.step_idx >= self.cfg.trainer.steps:
                self._finish()
                return None
            try:
                return self._step()
            except LearnerRestarted:
                continue  # attach() rewound the state; run that step again

    def _step(self) -> dict[str, Any]:
        cfg, algo = self.cfg, self.cfg.algo
        step, version, world = self.step_idx, self.version, self.cfg.learner.num_workers
        t0 = time.perf_counter()

        # 1-3. draw, generate, judge (done during the previous learn when max_staleness > 0).
        rollout = self.prefetch.result() if self.prefetch else self._rollout()
        self.prefetch = None
        if algo.max_staleness > 0 and step + 1 < cfg.trainer.steps and not self.stop_requested:
            self.prefetch = self.executor.submit(self._rollout)
        t_rollout = time.perf_counter() - t0

        # 4. advantages over the groups recent enough, cut into one shard per learner rank.
        groups, dropped = batching.drop_stale(rollout.groups, version, algo.max_staleness)
        groups = batching.trim_groups(groups, algo.mini_batches * world)
        samples = batching.to_train_samples(
            groups, algo.scale_rewards, algo.negative_advantage_scale
        )
        shards = self._shards(samples, step, rollout.data_position)

        # 5. learn: the ranks pull their shards and train; rank 0 publishes the new weights.
        t1 = time.perf_counter()
        results = self._learn(shards)
        t_train = time.perf_counter() - t1

        # 6. sync the rollout actors to the new version.
        t2 = time.perf_counter()
        self.version = step + 1
        self.pool.load_weights(self.version, self.update)
        t_sync = time.perf_counter() - t2

        # 7. log.
        learner = merge_metrics(
            {k: v for k, v in r.items() if k.startswith("loss/")} for r in results.values()
        )
        learner |= {k: v for k, v in results[0].items() if not k.startswith("loss/")}
        self.bad_steps += int(learner.get("train/bad_steps", 0))
        tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
        metrics = (
            batching.batch_metrics(groups, version)
            | rollout.metrics
            | learner
            | {
                "async/dropped_samples": float(dropped),
                "train/samples": float(len(samples)),
                "perf/time_rollout": t_rollout,
                "perf/time_train": t_train,
                "perf/time_sync": t_sync,
                "perf/train_tokens_per_s": tokens / t_train if t_train > 0 else 0.0,
            }
        )
        rows = [
            {
                "problem_id": s.sample.problem_id,
                "prompt": self.prompts[g.problem_index],
                "response": s.sample.response_text,
                "reward": s.reward,
                "components": dict(s.components),
            }
            for g in groups
            for s in g.scored
        ]
        self.step_idx = step + 1
        if self.bad_steps > cfg.trainer.max_bad_steps:
            self.stop_requested = True
            metrics["train/stopped_bad_steps"] = float(self.bad_steps)
        return {"step": step, "metrics": metrics, "samples": rows}

    def _rollout(self) -> Rollout:
        from rlrun.engines import SamplingParams

        cfg, algo = self.cfg, self.cfg.algo
        groups: list[batching.Group] = []
        seen = equal = tokens = 0
        t_generate = t_reward = 0.0
        verdicts: Counter[str] = Counter()
        for _ in range(algo.max_topup_rounds + 1):
            # 1. draw
            start = self.order.position
            indices = self.order.draw(algo.prompts_per_step - len(groups))
            problems = [self.problems[i] for i in indices]
            # 2. generate (the seed follows the data position, so a resumed run samples alike)
            t0 = time.perf_counter()
            sampling = SamplingParams.from_config(
                cfg.rollout.sampling, n=algo.group_size, seed=cfg.run.seed * 1_000_003 + start
            )
            completions = self.pool.generate([self.prompts[i] for i in indices], sampling)
            t_generate += time.perf_counter() - t0
            # 3. judge
            t0 = time.perf_counter()
            flat_problems, flat_samples = [], []
            for k, (problem, comps) in enumerate(zip(problems, completions, strict=True)):
                for c in comps:
                    flat_problems.append(problem)
                    flat_samples.append(Sample(
                        problem_id=problem.id, group_id=start + k,
                        prompt_ids=list(c.prompt_ids), response_ids=list(c.token_ids),
                        response_text=c.text, logprobs=list(c.logprobs),
                        weight_version=c.weight_version,
                        finish_reason="length" if c.finish_reason == "length" else "stop",
                    ))
                    tokens += len(c.token_ids)
            scored = self.reward.score(flat_problems, flat_samples)
            t_reward += time.perf_counter() - t0
            verdicts.update(v.status for s in scored for v in s.verdicts)
            G = algo.group_size
            new = [
                batching.Group(indices[k], scored[k * G : (k + 1) * G])
                for k in range(len(indices))
            ]
            informative, flat = batching.split_informative(new)
            seen += len(new)
            equal += len(flat)
            groups += informative if algo.filter_equal_groups else new
            if len(groups) >= algo.prompts_per_step or not algo.filter_equal_groups:
                break
        metrics = {
            "train/all_equal_frac": equal / max(seen, 1),
            "perf/time_generate": t_generate,
            "perf/time_reward": t_reward,
            "perf/rollout_tokens_per_s": tokens / t_generate if t_generate > 0 else 0.0,
        }
        if self.sandbox is not None:
            metrics["sandbox/recreated"] = float(self.sandbox.stats().get("recreated", 0))
            metrics["sandbox/tests_per_s"] = sum(verdicts.values()) / t_reward if t_reward else 0.0
            metrics |= {f"sandbox/{status}": float(verdicts[status]) for status in VERDICT_STATUSES}
        return Rollout(groups, self.order.position, metrics)

    def _shards(
        self, samples: list[batching.TrainSample], step: int, position: int
    ) -> list[batching.Shard]:
        world, every = self.cfg.learner.num_workers, self.cfg.trainer.checkpoint_every
        save = every > 0 and (step + 1) % every == 0
        if not samples:
            return [batching.Shard(step, [], position, self.version, save) for _ in range(world)]
        return batching.make_shards(
            samples, step=step, world_size=world, epochs=self.cfg.algo.epochs,
            mini_batches=self.cfg.algo.mini_batches,
            max_len=self.cfg.rollout.sampling.max_new_tokens, seed=self.cfg.run.seed,
            data_position=position, version=self.version, checkpoint=save,
        )

    def _learn(self, shards: list[batching.Shard]) -> dict[int, dict[str, float]]:
        with self.cv:
            generation = self.generation
            self.shards, self.results = shards, {}
            self.cv.notify_all()
            while len(self.results) < len(shards):
                self.cv.wait(timeout=1.0)
                if self.generation != generation:
                    raise LearnerRestarted
            return dict(self.results)

    def validate(self, problems: list[Problem]) -> dict[str, float]:
        """val/* metrics of the current rollout weights on `problems`: greedy pass@1 and
        sampled accuracy / pass@k."""
        from rlrun.engines import SamplingParams
        from rlrun.evaluation import evaluate, reward_scorer

        cfg = self.cfg

        def generate(prompts: list[str], n: int, greedy: bool) -> list[list[Any]]:
            sampling = SamplingParams.from_config(cfg.rollout.sampling, n=n, seed=cfg.run.seed)
            if greedy:
                sampling.temperature = 0.0
            return self.pool.generate(prompts, sampling)

        result = evaluate(
            problems, generate, reward_scorer(self.reward), k_list=cfg.trainer.eval_k,
            samples=cfg.trainer.eval_samples, greedy=True, seed=cfg.run.seed, render=self.render,
            batch_size=max(1, cfg.rollout.batch_size // cfg.trainer.eval_samples),
        )
        return result.metrics("val")

    def save_model(self, path: str) -> int:
        """Write the weights the rollout actors now use as a Hugging Face model at `path`
        (replacing what is there); returns their version."""
        import shutil
        import tempfile
        from pathlib import Path

        from rlrun.models import load_causal_lm, load_tokenizer
        from rlrun.weights import make_receiver

        model = load_causal_lm(self.model_path, self.cfg.model.dtype)
        if self.update is not None:
            model.load_state_dict(make_receiver(self.update.backend).receive(self.update))
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        model.save_pretrained(scratch)
        load_tokenizer(self.model_path).save_pretrained(scratch)
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
        return self.update.version if self.update is not None else 0

    def request_stop(self) -> None:
        """Finish the step in flight, checkpoint it, then stop (SIGTERM, spot interruption)."""
        self.stop_requested = True

    def rollout_versions(self) -> list[int]:
        return self.pool.versions()

    def rollout_restarts(self) -> int:
        return self.pool.restarts

    def kill_rollout_actor(self, slot: int) -> None:
        """Kill one rollout actor (fault-injection for tests and drills)."""
        ray.kill(self.pool.actors[slot])

    def _finish(self) -> None:
        with self.cv:
            self.finished = True
            self.cv.notify_all()

    def shutdown(self) -> None:
        self._finish()
        if self.prefetch is not None:
            self.prefetch.cancel()
        self.executor.shutdown(wait=True)
        self.pool.shutdown()
        if self.sandbox is not None:
            self.sandbox.shutdown()

    # ----- learner side --------------------------------------------------------------------

    def attach(self, state: dict[str, int], update: WeightUpdate | None) -> None:
        """A learner (re)started from `state` (a TrainState) with the weights in `update`."""
        restored = TrainState(**state)
        if self.prefetch is not None:
            self.prefetch.result()  # let the background draw finish before rewinding the order
            self.prefetch = None
        if update is not None:
            self.update = update
            self.pool.load_weights(update.version, update)
        with self.cv:
            self.generation += 1
            self.step_idx, self.version = restored.step, restored.version
            self.order.position = restored.data_position
            self.bad_steps = restored.bad_steps
            self.shards, self.results = None, {}
            self.cv.notify_all()

    def hold(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Own a state dict rank 0 publishes, so it outlives any learner worker."""
        return hold_weights(state_dict)

    def _wait_attached(self) -> None:
        with self.cv:
            while self.generation == 0:
                self.cv.wait(timeout=1.0)

    def get_shard(self, rank: int, step: int) -> batching.Shard | None:
        """Rank `rank`'s shard of step `step`, once it is ready; None when training is over."""
        with self.cv:
            while not self.finished and not (self.shards and self.shards[rank].step == step):
                self.cv.wait(timeout=1.0)
            if self.shards and self.shards[rank].step == step:
                return self.shards[rank]
            return None

    def finish(
        self, rank: int, step: int, metrics: dict[str, float], update: WeightUpdate | None
    ) -> None:
        """Rank `rank` trained step `step`; rank 0 passes the weights it published."""
        with self.cv:
            if not self.shards or self.shards[rank].step != step:
                return  # a report from before a learner restart
            if update is not None:
                self.update = update
            self.results[rank] = metrics
            self.cv.notify_all()
