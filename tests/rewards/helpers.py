"""Shared helpers for the reward tests: fixture paths, configs, samples."""

from pathlib import Path

from rlrun.config import Config, load_config
from rlrun.records import Problem, Sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rewards"
PLUGINS = FIXTURES / "plugins.py"


def plugin(name: str) -> str:
    return f"{PLUGINS}:{name}"


def sample(problem: Problem, text: str, n_tokens: int = 0) -> Sample:
    return Sample([], list(range(n_tokens)), text, [0.0] * n_tokens, "stop", problem_id=problem.id)


def math_problem(pid: str, answer: str) -> Problem:
    return Problem(id=pid, prompt=f"question {pid}", kind="math", answer=answer)


def config(*overrides: str) -> Config:
    return load_config(overrides=list(overrides))
