"""Checks a run makes before anything expensive starts, each failing in one line that names
what to change.

In the order the driver runs them: the output directory (fresh, or `run.resume`; writable),
the SFT data mix, the multi-turn environment of every problem (`env.name`), the reward
against the data's own references (`reward.audit_before_training`),
and, once Ray is up, whether the actor groups fit the cluster (`check_demands`) and each role's
memory fits its GPU (`check_memory`, `rlrun plan`'s check). Ray itself stays in `actors/`:
these functions take what the cluster reported.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rlrun.checkpoint import has_checkpoints, is_uri
from rlrun.cluster import Demand, check_fits, check_job_output_dir, demands
from rlrun.config import Config, ConfigError
from rlrun.environments import EnvError, Environment, load_environment
from rlrun.records import Problem
from rlrun.rewards.reward import Reward


def run_dir_for(cfg: Config) -> str:
    """Local directory for metrics, samples and the report (run.output_dir unless remote)."""
    out = cfg.run.output_dir
    return os.path.join("runs", cfg.run.name) if is_uri(out) else out


def check_output_dir(cfg: Config) -> None:
    """A fresh run's directory holds no checkpoints (else `run.resume`), and the run directory
    can be written to: found now, not after Ray and the warm-start."""
    if has_checkpoints(cfg.run.output_dir) and not cfg.run.resume:
        raise ConfigError(
            f"run.output_dir={cfg.run.output_dir!r} already holds checkpoints of an earlier "
            "run: set run.resume=true to continue it, or choose another run.output_dir / run.name"
        )
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


def check_sft_mix(cfg: Config, train: list[Problem]) -> None:
    """`sft.math_fraction` can be met by the training data (before Ray and the model, not
    inside the warm-start)."""
    from rlrun.sft import mix_problem

    if cfg.sft.enabled and cfg.sft.math_fraction is not None and (
            problem := mix_problem(train, cfg.sft.math_fraction)):
        raise ConfigError(problem)


def audit_rewards(cfg: Config, reward: Reward, train: list[Problem]) -> None:
    """`reward.audit_before_training`: the reward must pass the data's own references (code
    judged in this process, before the sandbox actors exist)."""
    from rlrun.rewards.audit import audit_before_training
    from rlrun.sandbox import Judge

    judge = Judge(cfg.sandbox.backend, cfg.sandbox.workers_per_actor, cfg.sandbox) if any(
        p.kind == "code" for p in train) else None
    try:
        report = audit_before_training(reward.using(judge=judge.judge if judge else None), train)
    finally:
        if judge is not None:
            judge.close()
    print(f"rlrun train: reward audit: {report.summary()}", flush=True)


def check_demands(cfg: Config, roles: list[str], totals: dict[str, float],
                  nodes: list[dict[str, float]]) -> list[Demand]:
    """The demands of the actor groups in `roles`, checked against the cluster's `totals` and
    its live `nodes` (`ClusterError` naming the keys otherwise)."""
    colocated = cfg.placement.mode == "colocated"
    wanted = [d for d in demands(cfg, "sandbox" in roles)
              if d.role in roles or (colocated and d.role == "colocated")]
    check_fits(wanted, totals, nodes)
    return wanted


def check_memory(cfg: Config, resources: Iterable[str]) -> None:
    """`rlrun plan`'s check, before any GPU is asked for: the GPU type from the cluster's
    resources (Ray's accelerator_type), else this machine's."""
    from rlrun import plan

    gpu = None
    for resource in resources:
        if resource.startswith("accelerator_type:"):
            gpu = plan.gpu_from_name(resource.split(":", 1)[1]) or gpu
    problems = plan.check_fits(cfg, gpu)
    if problems:
        raise ConfigError(f"{problems[0]} (rlrun plan shows every role)")


def environment(cfg: Config) -> type[Environment] | None:
    """The environment class `env.name` names (None: single-turn), imported and its signature
    checked: a plug-in that cannot load fails before any data or model is read."""
    return load_environment(cfg.env.name) if cfg.env.name else None


def check_environment(cfg: Config, env_cls: type[Environment], problems: list[Problem]) -> None:
    """`env_cls` made once for every problem, so that a problem it cannot be made for (a
    code-repair problem with too few tests to split) fails before Ray starts."""
    for problem in problems:
        try:
            env_cls(problem, cfg)
        except EnvError:
            raise
        except Exception as err:
            raise EnvError(f"env.name={cfg.env.name}: making the environment of problem "
                           f"{problem.id} raised {type(err).__name__}: {err}") from err
