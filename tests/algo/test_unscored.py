"""Unscored samples (a reward of None, NaN in tensors): hand-worked advantages, the equal-group
filter, TRL's own handling of None rewards, and advantages that do not depend on the ranks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from trl_rewards import trl_advantages, trl_rewards_per_func

from rlrun import batching, step
from rlrun.algo import filter_equal_groups, group_advantages
from rlrun.config import load_config
from rlrun.records import Problem, Sample, ScoredSample
from rlrun.rewards import build_reward

NAN = math.nan
# group 0: one unscored sample; group 1: a single scored sample; group 2: all scored
REWARDS = torch.tensor([[1.0, NAN, 0.0, 1.0], [NAN, 2.0, NAN, NAN], [0.0, 0.0, 0.0, 3.0]])


def test_group_scale_hand_values() -> None:
    # group 0: scored 1, 0, 1: mean 2/3, squared deviations 1/9 + 4/9 + 1/9 = 2/3, unbiased
    #          var 1/3, std 0.577350; A = 1/3 / 0.577450 = 0.577250, -2/3 / 0.577450 = -1.154501
    # group 1: one scored sample has no std (NaN): every advantage 0
    # group 2: as without unscored samples: -0.75 / 1.5001 = -0.499967, 2.25 / 1.5001 = 1.499900
    expected = torch.tensor([
        [0.577250, 0.0, -1.154501, 0.577250],
        [0.0, 0.0, 0.0, 0.0],
        [-0.499967, -0.499967, -0.499967, 1.499900],
    ])
    torch.testing.assert_close(group_advantages(REWARDS, "group"), expected, atol=1e-5, rtol=0)


def test_batch_and_none_scale_hand_values() -> None:
    # none: only the group means over scored samples (2/3, 2, 0.75) are removed
    none = torch.tensor([
        [1 / 3, 0.0, -2 / 3, 1 / 3], [0.0, 0.0, 0.0, 0.0], [-0.75, -0.75, -0.75, 2.25]
    ])
    torch.testing.assert_close(group_advantages(REWARDS, "none"), none, atol=1e-6, rtol=0)
    # batch: the 8 scored rewards 1, 0, 1, 2, 0, 0, 0, 3 have mean 7/8, squared deviations
    #        2 * 0.015625 + 1.265625 + 4 * 0.765625 + 4.515625 = 8.875, unbiased var 8.875 / 7,
    #        std 1.125992; A = centred / 1.126092
    batch = torch.tensor([
        [0.296009, 0.0, -0.592018, 0.296009], [0.0] * 4, [-0.666020] * 3 + [1.998061]
    ])
    torch.testing.assert_close(group_advantages(REWARDS, "batch"), batch, atol=1e-5, rtol=0)


def test_no_score_in_a_group_gives_zero_advantages() -> None:
    rewards = torch.tensor([[NAN, NAN], [0.0, 1.0]])
    for scale in ("group", "batch", "none"):
        assert group_advantages(rewards, scale)[0].tolist() == [0.0, 0.0]


def test_filter_needs_two_different_scored_rewards() -> None:
    rewards = torch.tensor([
        [1.0, NAN, 0.0],  # two scored, different: kept
        [1.0, NAN, 1.0],  # scored ones equal
        [NAN, 2.0, NAN],  # one scored
        [NAN, NAN, NAN],  # none scored
        [0.5, 0.5, 0.25],
    ])
    assert filter_equal_groups(rewards).tolist() == [True, False, False, False, True]
    zero = (group_advantages(rewards, "group") == 0).all(dim=1)
    assert torch.equal(filter_equal_groups(rewards), ~zero)


# --- TRL parity: the same reward functions through TRL's code and through rlrun's -----------

def applies_to_odd(completions, id, **kwargs):
    """Scores completions of odd-numbered problems only (TRL's None elsewhere)."""
    pairs = zip(completions, id, strict=True)
    return [float(len(c) % 3) if int(i[1:]) % 2 else None for c, i in pairs]


def answers_unless_q(completions, **kwargs):
    """None for a completion starting with "q" (it cannot judge those)."""
    return [None if c.startswith("q") else float(c.count("a")) for c in completions]


PLUGINS = [applies_to_odd, answers_unless_q]
WEIGHTS = [1.0, 0.5]
G = 4


def _completions(seed: int, groups: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    letters = "aqbq"
    return [
        "".join(letters[j] for j in torch.randint(0, 4, (int(n),), generator=gen).tolist())
        for n in torch.randint(1, 6, (groups * G,), generator=gen).tolist()
    ]


def _rlrun_groups(completions: list[str], groups: int) -> list[batching.Group]:
    here = Path(__file__)
    cfg = load_config(None, [
        f"reward.fns=[{{name: odd, fn: '{here}:applies_to_odd', weight: 1.0}}, "
        f"{{name: letters, fn: '{here}:answers_unless_q', weight: 0.5}}]"
    ])
    problems = [Problem(id=f"p{k // G}", prompt="", kind="math", answer="0")
                for k in range(groups * G)]
    samples = [Sample([0], [k], c, [0.0], "stop", problem_id=p.id)
               for k, (p, c) in enumerate(zip(problems, completions, strict=True))]
    scored = build_reward(cfg, None).score(problems, samples)
    return [batching.Group(b, scored[b * G : (b + 1) * G]) for b in range(groups)]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("seed", [0, 1, 3])
def test_matches_trl_with_none_rewards(scale: str, seed: int) -> None:
    groups = 8
    completions = _completions(seed, groups)
    per_func = trl_rewards_per_func(
        PLUGINS, completions, {"id": [f"p{k // G}" for k in range(groups * G)]}
    )  # [N, 2], NaN where a function returned None
    unscored = torch.isnan(per_func).all(dim=1)  # [N]
    assert torch.isnan(per_func[~unscored]).any()  # a function that does not apply
    assert ((~unscored).view(-1, G).sum(dim=1) < 2).any()  # a group left without a signal
    theirs = trl_advantages(per_func, WEIGHTS, G, scale_rewards=scale)  # [N]
    ours = batching.to_train_samples(_rlrun_groups(completions, groups), scale)
    torch.testing.assert_close(
        torch.tensor([s.advantage for s in ours]), theirs, atol=1e-5, rtol=0
    )


def test_matches_trl_on_the_rewards_tensor() -> None:
    gen = torch.Generator().manual_seed(5)
    rewards = torch.randint(0, 3, (8, 4), generator=gen).float()
    rewards[torch.rand(8, 4, generator=gen) < 0.3] = NAN
    rewards[1] = NAN  # a group nobody scored
    rewards[2, 1:] = NAN  # a group with one score
    per_func = rewards.reshape(-1, 1)  # one reward function
    for scale in ("group", "batch", "none"):
        theirs = trl_advantages(per_func, [1.0], 4, scale_rewards=scale)
        torch.testing.assert_close(group_advantages(rewards, scale).flatten(), theirs,
                                   atol=1e-6, rtol=0)


# --- advantages are computed on the whole batch, before it is cut into rank shards -----------

def _scored_groups() -> list[batching.Group]:
    gen = torch.Generator().manual_seed(7)
    groups = []
    for b in range(8):
        scored = []
        for g in range(G):
            a, c = torch.rand(2, generator=gen).tolist()
            unscored = (b + g) % 5 == 0
            components = {"correctness": None if unscored else float(a > 0.5),
                          "brevity": round(c, 3)}
            reward = None if unscored else components["correctness"] + 0.1 * c
            sample = Sample([1], [b, g, 9 + b * G + g], "x", [0.0] * 3, "stop", problem_id=f"p{b}")
            scored.append(ScoredSample(sample, reward, components))
        groups.append(batching.Group(b, scored))
    return groups


@pytest.mark.parametrize("aggregation", ["sum", "normalize_then_sum"])
def test_advantages_do_not_depend_on_the_learner_world_size(aggregation: str) -> None:
    rollout = step.Rollout(_scored_groups(), data_position=0)
    seen = []
    for world in (1, 2, 4):
        cfg = load_config(None, [
            "algo.group_size=4", "algo.prompts_per_step=8", "algo.mini_batches=2", "algo.epochs=2",
            f"learner.num_workers={world}", f"reward.aggregation={aggregation}",
            "reward.fns=[{name: correctness, weight: 1.0}, {name: brevity, fn: 'm:f', "
            "weight: 0.1}]",
        ])
        batch = step.make_batch(rollout, version=0, step=1, cfg=cfg)
        assert len(batch.samples) == 32
        # every sample on every rank carries the advantage computed on the whole batch
        by_sample = {tuple(s.response_ids): s.advantage for s in batch.samples}
        for shard in batch.shards:
            for update in shard:
                for s in update.samples:
                    assert s.advantage == by_sample[tuple(s.response_ids)]
        assert sum(len(u.samples) for sh in batch.shards for u in sh) == 32 * 2
        seen.append(by_sample)
    assert seen[0] == seen[1] == seen[2]
    assert any(a != 0 for a in seen[0].values())
