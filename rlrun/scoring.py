"""The one scoring path: how training, validation and `rlrun eval` call the engines and the
reward, and how a batch of groups is scored.

`GenerateFn` is what the rollout actors (`RolloutGroup.generate`) and a local engine offer;
`ScoreFn` is what a `Reward` offers (`Reward.score`); `EpisodeFn` runs a multi-turn
environment's later turns (`rlrun.multiturn.Episodes`). `score_groups` flattens the groups into
one call, so the judge sees the whole batch at once, and regroups the result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from rlrun.engines.base import SamplingParams
from rlrun.records import Problem, Sample, ScoredSample

# generate(prompts, sampling) -> sampling.n samples per prompt, in prompt order
GenerateFn = Callable[[list[str], SamplingParams], list[list[Sample]]]
# score(problems, samples) -> one scored sample per sample; problems[i] belongs to samples[i]
ScoreFn = Callable[[list[Problem], list[Sample]], list[ScoredSample]]
# episodes(problems, first turns, sampling) -> the multi-turn trajectories that grow from them,
# in the same nesting (`rlrun.multiturn.Episodes`)
EpisodeFn = Callable[[list[Problem], list[list[Sample]], SamplingParams], list[list[Sample]]]


def score_groups(score: ScoreFn, problems: list[Problem],
                 groups: list[list[Sample]]) -> list[list[ScoredSample]]:
    """`groups[i]` (samples answering `problems[i]`) scored in one call, in the same nesting."""
    flat_problems = [p for p, samples in zip(problems, groups, strict=True) for _ in samples]
    flat_samples = [s for samples in groups for s in samples]
    scored = score(flat_problems, flat_samples) if flat_samples else []
    return regroup(scored, map(len, groups))


def regroup(items: list[Any], sizes: Iterable[int]) -> list[list[Any]]:
    """`items` (a flattened batch) cut back into consecutive runs of `sizes`."""
    rest = iter(items)
    return [list(itertools.islice(rest, n)) for n in sizes]
