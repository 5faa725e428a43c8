"""Rewards: math verification, code scoring from sandbox verdicts, shaping, user plug-ins.

`build_reward(cfg, judge)` is the entry point (the driver scores math in its own process and
code through the sandbox actors); `rlrun.rewards.audit` checks it on a dataset's own reference
answers before training.
"""

from rlrun.rewards.code import JudgeFn
from rlrun.rewards.errors import RewardError
from rlrun.rewards.reward import Reward, build_reward

__all__ = ["JudgeFn", "Reward", "RewardError", "build_reward"]
