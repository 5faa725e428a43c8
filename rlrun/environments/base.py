"""The environment contract of multi-turn rollouts (`env.name`), and how one is loaded.

An environment is made once per trajectory, as `Env(problem, cfg)`, from the problem the
trajectory answers and the run's `Config`. The first prompt is the problem's own (rendered as in
a single-turn run). After each model turn the rollout asks it two things:

1. `submissions(response)`: the programs the sandbox must run for this turn (an empty list when
   the turn needs none). The rollout judges the submissions of every active trajectory in one
   batched call to the sandbox pool, so an environment never holds the sandbox itself;
2. `observe(response, results)`: given the judge's results for those submissions, in order, a
   `Feedback`: the observation text that becomes the next user turn, whether the episode is
   done, and optionally the turn's reward and numbers of its own.

`scored_problem()` is the problem the run's reward scores the final turn's response against
(the built-in code-repair environment: the problem with its hidden tests only). The reward is
the run's `reward.*` as in single-turn training, so its components, shaping and unscored rule
hold for trajectories too.

Everything an environment returns is plain data; it runs in the driver, between turns.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rlrun.errors import InputError
from rlrun.imports import import_object
from rlrun.records import JudgeResult, Problem, Submission

if TYPE_CHECKING:
    from rlrun.config import Config


class EnvError(InputError):
    """An environment that cannot be loaded, or cannot be made for a problem."""


@dataclass
class Feedback:
    """An environment's answer to one model turn."""

    observation: str  # text of the next user turn ("" when done)
    done: bool  # the episode ends after this turn
    # False: the turn could not be judged (the sandbox failed): the trajectory gets no score,
    # so it stays out of its group's baseline instead of counting as a wrong answer.
    judged: bool = True
    # The turn's own reward, placed at its last token with env.turn_rewards.
    reward: float | None = None
    info: dict[str, float] = field(default_factory=dict)  # numbers logged as env/<key>


class Environment(Protocol):
    """What `env.name: module:Class` must provide (see the module docstring)."""

    def __init__(self, problem: Problem, cfg: Config) -> None: ...

    def scored_problem(self) -> Problem:
        """The problem the reward scores the final response against."""
        ...

    def submissions(self, response: str) -> list[Submission]:
        """What the sandbox must run for the model's turn `response`."""
        ...

    def observe(self, response: str, results: list[JudgeResult]) -> Feedback:
        """The answer to `response`, given the results of its submissions."""
        ...


METHODS = ("scored_problem", "submissions", "observe")


def load_environment(name: str) -> type[Environment]:
    """The environment class `env.name` names (a built-in or `module:Class`), checked for the
    contract's constructor and methods, so a bad plug-in fails before anything starts."""
    from rlrun.environments.code_repair import CodeRepair

    builtin: dict[str, type[Environment]] = {"code_repair": CodeRepair}
    if name in builtin:
        return builtin[name]
    if ":" not in name:
        raise EnvError(
            f"env.name={name!r} is neither a built-in environment ({', '.join(builtin)}) nor "
            "module:Class (example: my_envs:Wordle)")
    cls = import_object(name, "env.name", "environment class",
                        "module:Class (example: my_envs:Wordle)", EnvError)
    if not inspect.isclass(cls):
        raise EnvError(f"env.name: {name!r} is a {type(cls).__name__}, not a class")
    missing = [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise EnvError(
            f"env.name: {name!r} has no method {', '.join(missing)}; an environment needs "
            f"{', '.join(METHODS)} (docs/environments.md)")
    try:
        inspect.signature(cls).bind("problem", "cfg")
    except TypeError:
        raise EnvError(
            f"env.name: {name!r} is constructed as {name.rpartition(':')[2]}"
            f"{inspect.signature(cls)}; it must take (problem, cfg)") from None
    return cls
