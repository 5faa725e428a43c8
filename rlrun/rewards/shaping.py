"""Reward shaping terms, each reported as its own component so a user sees what moved the reward.

- `length`: `-length_penalty_per_100` per 100 response tokens over `length_limit`, pro rata
  (150 tokens over with 0.1 per 100 gives -0.15).
- `overlong`: DAPO's soft overlong punishment (veRL `reward_manager/dapo.py`): with hard limit
  L_max = `rollout.sampling.max_new_tokens` (a multi-turn trajectory's `env.max_tokens`, over
  all its tokens) and buffer L_cache = `overlong_buffer`, a response of
  L tokens gets min(-(L - (L_max - L_cache)) / L_cache * `overlong_penalty`, 0), so the penalty
  grows linearly from 0 to -`overlong_penalty` over the last L_cache tokens.
- `format`: `+format_reward` when the completion states its answer in the expected form (a
  `#### n` / number / `\\boxed{}` the math extractor can read, or a fenced code block), and
  `-format_penalty` when it does not.
"""

from __future__ import annotations

from rlrun.config import Config, response_limit
from rlrun.records import Problem, Sample
from rlrun.rewards.code import extract_code
from rlrun.rewards.math import find_answer


def length_penalty(num_tokens: int, limit: int, per_100: float) -> float:
    """Penalty for `num_tokens` over `limit`: -per_100 for every 100 tokens, pro rata."""
    return -per_100 * max(0, num_tokens - limit) / 100.0


def overlong_penalty(num_tokens: int, max_len: int, buffer: int, factor: float) -> float:
    """DAPO soft overlong penalty (veRL's formula): 0 until max_len - buffer, -factor at max_len."""
    expected = max_len - buffer
    return min(-(num_tokens - expected) / buffer * factor, 0.0)


def well_formatted(problem: Problem, text: str, math_mode: str) -> bool:
    """Whether `text` gives its answer in the form the reward reads for this problem's kind."""
    if problem.kind == "math":
        return find_answer(text, math_mode) is not None
    return extract_code(text, problem.language)[0] is not None


def shaping_components(cfg: Config, problem: Problem, sample: Sample) -> dict[str, float]:
    """The enabled shaping terms for one sample, by component name."""
    shaping = cfg.reward.shaping
    out: dict[str, float] = {}
    num_tokens = len(sample.response_ids)
    if shaping.length_limit is not None:
        out["length"] = length_penalty(
            num_tokens, shaping.length_limit, shaping.length_penalty_per_100
        )
    if shaping.overlong_buffer is not None:
        out["overlong"] = overlong_penalty(
            num_tokens, response_limit(cfg), shaping.overlong_buffer,
            shaping.overlong_penalty,
        )
    if shaping.format_reward or shaping.format_penalty:
        ok = well_formatted(problem, sample.response_text, cfg.reward.math_extractor)
        out["format"] = shaping.format_reward if ok else -shaping.format_penalty
    return out
