"""`reward.aggregation: normalize_then_sum` (TRL's multi_objective_aggregation): hand-worked
values, TRL's own code on the same reward functions, and which groups carry a signal."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from trl_rewards import trl_advantages, trl_rewards_per_func

from rlrun import batching, step
from rlrun.algo import normalize_then_sum_advantages, normalized_sum
from rlrun.config import ConfigError, load_config
from rlrun.records import Problem, Sample, ScoredSample
from rlrun.rewards import build_reward

NAN = math.nan
# Two groups of 3, components (c1, c2) with weights (1, 0.5). Group 1's first sample is unscored.
COMPONENTS = torch.tensor([
    [[1.0, 0.0], [0.0, 2.0], [0.0, NAN]],
    [[NAN, NAN], [NAN, 3.0], [NAN, 3.0]],
])
WEIGHTS = torch.tensor([1.0, 0.5])


def test_hand_values() -> None:
    # group 0, c1 = 1, 0, 0: mean 1/3, unbiased std sqrt((4/9 + 1/9 + 1/9) / 2) = 0.577350,
    #          z = 0.666667 / 0.577450 = 1.154500, -0.333333 / 0.577450 = -0.577250 (twice)
    #          c2 = 0, 2 (third not scored): mean 1, std sqrt(2) = 1.414214,
    #          z = -1 / 1.414314 = -0.707057, +0.707057, NaN
    #          sum: 1.154500 - 0.5 * 0.707057 = 0.800972, -0.577250 + 0.353528 = -0.223722,
    #          -0.577250 + (nothing) = -0.577250
    # group 1, c1 scores nobody; c2 = 3, 3 has std 0, z = 0: sums NaN (unscored), 0, 0
    total = torch.tensor([[0.800972, -0.223722, -0.577250], [NAN, 0.0, 0.0]])
    torch.testing.assert_close(normalized_sum(COMPONENTS, WEIGHTS), total, atol=1e-5, rtol=0,
                               equal_nan=True)
    # over the batch, the 5 scored sums have mean 0 and unbiased variance
    # (0.641556 + 0.050052 + 0.333218) / 4 = 0.256207, std 0.506169: A = sum / 0.506269;
    # the unscored sample gets 0
    advantages = torch.tensor([[1.582110, -0.441902, -1.140207], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(normalize_then_sum_advantages(COMPONENTS, WEIGHTS), advantages,
                               atol=1e-5, rtol=0)


def test_rejects_mismatched_weights() -> None:
    with pytest.raises(ValueError, match=r"\[B, G, K\]"):
        normalized_sum(COMPONENTS, torch.ones(3))


# --- TRL parity --------------------------------------------------------------------------------

def counts_a(completions, **kwargs):
    """None for completions that start with "q" and have no "a"."""
    return [None if c[0] == "q" and "a" not in c else float(c.count("a")) for c in completions]


def short(completions, **kwargs):
    """None for completions starting with "q", else 1 for short ones."""
    return [None if c.startswith("q") else float(len(c) < 4) for c in completions]


def sometimes(completions, id, **kwargs):
    """Scores only even-numbered problems."""
    pairs = zip(completions, id, strict=True)
    return [None if int(i[1:]) % 2 else float(len(c) % 2) for c, i in pairs]


PLUGINS = [counts_a, short, sometimes]
FN_WEIGHTS = [1.0, 0.5, 2.0]
G = 4


def _completions(seed: int, groups: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    return [
        "".join("aqbq"[j] for j in torch.randint(0, 4, (int(n),), generator=gen).tolist())
        for n in torch.randint(1, 7, (groups * G,), generator=gen).tolist()
    ]


def _cfg(*overrides: str):
    here = Path(__file__)
    fns = ", ".join(f"{{name: {f.__name__}, fn: '{here}:{f.__name__}', weight: {w}}}"
                    for f, w in zip(PLUGINS, FN_WEIGHTS, strict=True))
    return load_config(None, [f"reward.fns=[{fns}]", "reward.aggregation=normalize_then_sum",
                              *overrides])


def _groups(cfg, completions: list[str], groups: int) -> list[batching.Group]:
    problems = [Problem(id=f"p{k // G}", prompt="", kind="math", answer="0")
                for k in range(groups * G)]
    samples = [Sample([0], [k], c, [0.0], "stop", problem_id=p.id)
               for k, (p, c) in enumerate(zip(problems, completions, strict=True))]
    scored = build_reward(cfg, None).score(problems, samples)
    return [batching.Group(b, scored[b * G : (b + 1) * G]) for b in range(groups)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_trl_normalize_then_sum(seed: int) -> None:
    groups = 8
    completions = _completions(seed, groups)
    per_func = trl_rewards_per_func(
        PLUGINS, completions, {"id": [f"p{k // G}" for k in range(groups * G)]}
    )  # [N, 3]
    unscored = torch.isnan(per_func).all(dim=1)  # [N]
    assert unscored.any() and torch.isnan(per_func[~unscored]).any()
    theirs = trl_advantages(per_func, FN_WEIGHTS, G,
                            multi_objective_aggregation="normalize_then_sum")  # [N]
    cfg = _cfg()
    ours = batching.to_train_samples(
        _groups(cfg, completions, groups), "group", weights=step.normalize_weights(cfg)
    )
    torch.testing.assert_close(
        torch.tensor([s.advantage for s in ours]), theirs, atol=1e-5, rtol=0
    )


def test_sum_is_trls_sum_then_normalize_on_the_same_functions() -> None:
    completions = _completions(4, 8)
    per_func = trl_rewards_per_func(PLUGINS, completions, {"id": [f"p{k // G}" for k in range(32)]})
    theirs = trl_advantages(per_func, FN_WEIGHTS, G)
    cfg = _cfg("reward.aggregation=sum")
    assert step.normalize_weights(cfg) is None
    ours = batching.to_train_samples(_groups(cfg, completions, 8), "group")
    torch.testing.assert_close(torch.tensor([s.advantage for s in ours]), theirs,
                               atol=1e-5, rtol=0)


# --- which groups carry a signal ---------------------------------------------------------------

def _group(index: int, components: list[dict[str, float]], weights: dict[str, float]):
    return batching.Group(index, [
        ScoredSample(Sample([0], [k], "x", [0.0], "stop", problem_id=f"p{index}"),
                     sum(weights[n] * v for n, v in c.items()), c)
        for k, c in enumerate(components)
    ])


def test_a_group_is_informative_when_its_normalised_sums_differ() -> None:
    weights = {"a": 1.0, "b": 0.5}
    # equal rewards 1 and 1, but the components move apart: z-scores (+z, -z) and (-z, +z),
    # weighted 1 and 0.5, differ, so the group carries a signal under normalize_then_sum only
    crossed = _group(0, [{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 2.0}], weights)
    # components that do not vary within the group: every z-score is 0
    flat = _group(1, [{"a": 1.0, "b": 3.0}, {"a": 1.0, "b": 3.0}], weights)
    informative, equal = batching.split_informative([crossed, flat], weights)
    assert [g.problem_index for g in informative] == [0]
    assert [g.problem_index for g in equal] == [1]
    informative, _ = batching.split_informative([crossed, flat])  # sum: the rewards are equal
    assert informative == []
    # with equal weights the crossed z-scores cancel exactly
    even = {"a": 1.0, "b": 1.0}
    balanced = _group(2, [{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 1.0}], even)
    assert batching.split_informative([balanced], even) == ([], [balanced])


def test_the_shaping_terms_are_components_of_weight_one() -> None:
    cfg = load_config(None, ["reward.fns=[{name: correctness, weight: 2.0}]",
                             "reward.aggregation=normalize_then_sum"])
    assert step.normalize_weights(cfg) == {
        "correctness": 2.0, "length": 1.0, "overlong": 1.0, "format": 1.0
    }


def test_aggregation_is_checked_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match=r"^config key reward\.aggregation='mean' .*sum, "
                                          "normalize_then_sum$"):
        load_config(None, ["reward.aggregation=mean"])
    with pytest.raises(ConfigError, match=r"^config key algo\.scale_rewards='none' .*"
                                          "normalize_then_sum"):
        load_config(None, ["reward.aggregation=normalize_then_sum", "algo.scale_rewards=none"])
    assert load_config(None, []).reward.aggregation == "sum"
