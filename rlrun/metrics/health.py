"""Health checks for the known ways a GRPO run goes wrong, said in the log while it happens
(thresholds and remedies: docs/metrics.md).

- No learning signal / entropy collapse: most groups have all-equal rewards, zero advantages.
- Reward hacking: the training reward climbs while the validation metric stays flat.
- Length blow-up: mean response length keeps growing, or many responses hit max_new_tokens.
- Non-finite gradients: skipped updates, `train/bad_steps` (without it, a NaN/inf `loss/policy`
  or `optim/grad_norm` counts as one); past `trainer.max_bad_steps` the run should stop
  (`should_stop`).
- Weights that did not arrive: a rollout engine whose log-probs of tokens it sampled with the
  learner's current weights differ from the learner's (`sync/logprob_gap_max/<slot>`) by more
  than `metrics.health.logprob_gap` serves other weights (TRL's issue 5312: never synced under
  vLLM's sleep mode). Its samples are another policy's, so this raises `EngineWeightsMismatch`
  naming the engine, and the run stops.

Each condition warns when it starts and again only after it has cleared, so a persistent
problem does not flood the log.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import fmean

from rlrun.config import Config, ConfigError, HealthConfig

FINITE_KEYS = ("loss/policy", "optim/grad_norm")
GAP_PREFIX = "sync/logprob_gap_max/"


class EngineWeightsMismatch(RuntimeError):
    """A rollout engine's log-probs say it does not hold the learner's weights."""


class HealthMonitor:
    """Feed it every step's metrics (training steps and validation results alike)."""

    def __init__(
        self,
        cfg: HealthConfig | None = None,
        max_bad_steps: int = 3,
        val_metric: str = "val/accuracy",
        check_logprob_gap: bool = True,
    ) -> None:
        self.cfg = cfg or HealthConfig()
        if self.cfg.window < 2:
            raise ConfigError(
                f"config key metrics.health.window={self.cfg.window} is not allowed: must be >= 2 "
                "(trends compare the first and second half of the window)"
            )
        self.max_bad_steps = max_bad_steps
        self.val_metric = val_metric
        self.check_logprob_gap = check_logprob_gap
        self.bad_steps = 0
        self._reward: deque[tuple[int, float]] = deque(maxlen=self.cfg.window)
        self._length: deque[tuple[int, float]] = deque(maxlen=self.cfg.window)
        self._val: list[tuple[int, float]] = []
        self._active: set[str] = set()

    @classmethod
    def from_config(cls, cfg: Config) -> HealthMonitor:
        metric = cfg.trainer.early_stopping.metric or "val/accuracy"
        sampling = cfg.rollout.sampling
        # vLLM renormalises its log-probs over the top-k/top-p tokens it keeps, the learner's
        # are over the whole vocabulary: the gap is then not round-off (rlrun.engines.vllm).
        filtered = cfg.rollout.engine == "vllm" and (sampling.top_k > 0 or sampling.top_p < 1)
        return cls(cfg.metrics.health, cfg.trainer.max_bad_steps, val_metric=metric,
                   check_logprob_gap=not filtered)

    @property
    def should_stop(self) -> bool:
        return self.bad_steps > self.max_bad_steps

    def check(self, step: int, metrics: dict[str, float]) -> list[str]:
        """Warnings for this step, each naming the metric and what to change; raises
        `EngineWeightsMismatch` for an engine that does not hold the learner's weights."""
        if self.check_logprob_gap:
            self._logprob_gaps(step, metrics)
        found: dict[str, str] = {}
        skipped = metrics.get("train/bad_steps")
        if skipped is not None and math.isfinite(skipped):
            if skipped > 0:
                found["bad_step"] = self._bad_step(
                    int(skipped), f"train/bad_steps={skipped:g}: optimizer update(s) had a NaN/inf "
                    "gradient"
                )
        else:
            for key in FINITE_KEYS:
                if key in metrics and not math.isfinite(metrics[key]):
                    found["bad_step"] = self._bad_step(1, f"{key} is {metrics[key]}")
                    break
        tracked = ((self._reward, "reward/mean"), (self._length, "response/len_mean"),
                   (self._val, self.val_metric))
        for series, key in tracked:
            if key in metrics and math.isfinite(metrics[key]):
                series.append((step, metrics[key]))
        checks = {
            "all_equal": ("train/all_equal_frac", self._all_equal(metrics)),
            "reward_hacking": ("reward/mean", self._reward_hacking()),
            "length_growth": ("response/len_mean", self._length_growth()),
            "truncation": ("response/truncated_frac", self._truncation(metrics)),
        }
        found |= {name: msg for name, (_, msg) in checks.items() if msg}
        # A bad step is reported every time; the other conditions only when they start. A
        # condition whose metric is absent from this call (e.g. a validation-only log) keeps
        # its state.
        new = [m for name, m in found.items() if name == "bad_step" or name not in self._active]
        unseen = {name for name, (key, _) in checks.items() if key not in metrics}
        self._active = {n for n in found if n != "bad_step"} | (self._active & unseen)
        return [f"step {step}: {m}" for m in new]

    def _logprob_gaps(self, step: int, metrics: dict[str, float]) -> None:
        limit = self.cfg.logprob_gap
        for key in sorted(k for k in metrics if k.startswith(GAP_PREFIX)):
            if not metrics[key] <= limit:  # NaN counts too
                raise EngineWeightsMismatch(
                    f"step {step}: rollout engine {key.removeprefix(GAP_PREFIX)} is not serving "
                    f"the learner's weights: its log-probs of tokens it sampled with them differ "
                    f"from the learner's by {metrics[key]:.3g} per token ({key} > "
                    f"metrics.health.logprob_gap={limit:g}); check its weight sync "
                    f"(weights.backend)"
                )

    def _bad_step(self, count: int, what: str) -> str:
        self.bad_steps += count
        msg = (
            f"{what}; skipped ({self.bad_steps} skipped so far, "
            f"trainer.max_bad_steps={self.max_bad_steps})"
        )
        if self.should_stop:
            msg += (
                "; stopping the run: lower learner.lr, keep learner.grad_clip > 0, or use "
                "model.dtype=float32"
            )
        return msg

    def _all_equal(self, metrics: dict[str, float]) -> str | None:
        frac = metrics.get("train/all_equal_frac")
        if frac is None or not frac > self.cfg.all_equal_frac:
            return None
        msg = (
            f"train/all_equal_frac={frac:.2f} > {self.cfg.all_equal_frac}: most groups have "
            "identical rewards, so their advantages are zero and teach nothing"
        )
        acc = metrics.get("train/accuracy")
        if acc is not None and acc <= 0.05:
            return msg + (
                "; nearly every answer is wrong: use easier problems, a larger model, or an "
                "SFT warm-start (sft.enabled=true)"
            )
        if acc is not None and acc >= 0.95:
            return msg + "; nearly every answer is right: use harder problems"
        return msg + (
            "; the policy may have collapsed (entropy collapse): raise "
            "rollout.sampling.temperature or rollout.sampling.top_k, or set "
            "algo.filter_equal_groups=true"
        )

    def _halves(self, series: deque[tuple[int, float]]) -> tuple[float, float] | None:
        if len(series) < self.cfg.window or len(series) < 2:
            return None
        values = [v for _, v in series]
        half = len(values) // 2
        return fmean(values[:half]), fmean(values[-half:])

    def _reward_hacking(self) -> str | None:
        halves = self._halves(self._reward)
        if halves is None:
            return None
        first_step = self._reward[0][0]
        val = [v for s, v in self._val if s >= first_step]
        if len(val) < 2:
            return None
        before, after = halves
        if after - before < self.cfg.reward_rise or abs(val[-1] - val[0]) > self.cfg.val_flat:
            return None
        return (
            f"reward/mean rose {before:.3g} -> {after:.3g} over the last {len(self._reward)} "
            f"steps while {self.val_metric} stayed at {val[0]:.3g} -> {val[-1]:.3g}: the reward "
            "may be exploitable; inspect samples.jsonl and run `rlrun check-rewards`"
        )

    def _length_growth(self) -> str | None:
        halves = self._halves(self._length)
        if halves is None:
            return None
        before, after = halves
        if before <= 0 or after < self.cfg.length_growth * before:
            return None
        return (
            f"response/len_mean grew {before:.0f} -> {after:.0f} tokens over the last "
            f"{len(self._length)} steps: consider reward.shaping.length_limit or "
            "reward.shaping.overlong_buffer"
        )

    def _truncation(self, metrics: dict[str, float]) -> str | None:
        frac = metrics.get("response/truncated_frac")
        if frac is None or not frac > self.cfg.truncated_frac:
            return None
        return (
            f"response/truncated_frac={frac:.2f} > {self.cfg.truncated_frac}: many responses hit "
            "rollout.sampling.max_new_tokens; raise it or penalise length "
            "(reward.shaping.overlong_buffer)"
        )
