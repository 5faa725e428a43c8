"""Multi-turn environments (`env.name`): the contract and the built-in code-repair environment."""

from rlrun.environments.base import EnvError, Environment, Feedback, load_environment

__all__ = ["EnvError", "Environment", "Feedback", "load_environment"]
