"""Group advantages and the equal-group filter: hand-worked values and TRL's formula."""

from __future__ import annotations

import pytest
import torch

from rlrun.algo import filter_equal_groups, group_advantages, scale_negative, step_advantages


def test_group_scale_hand_values() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 3.0]])
    # group 0: mean 0.5, unbiased var = 4 * 0.25 / 3 = 1/3, std = 0.577350
    #          A = +-0.5 / (0.577350 + 1e-4) = +-0.865876
    # group 1: all equal -> centred 0 -> A = 0 / (0 + 1e-4) = 0
    # group 2: mean 0.75, var = (3 * 0.5625 + 5.0625) / 3 = 2.25, std = 1.5
    #          A = -0.75 / 1.5001 = -0.499967, 2.25 / 1.5001 = 1.499900
    expected = torch.tensor(
        [
            [0.865876, -0.865876, -0.865876, 0.865876],
            [0.0, 0.0, 0.0, 0.0],
            [-0.499967, -0.499967, -0.499967, 1.499900],
        ]
    )
    torch.testing.assert_close(group_advantages(rewards, "group"), expected, atol=1e-5, rtol=0)


def test_batch_and_none_scale_hand_values() -> None:
    rewards = torch.tensor([[0.0, 1.0], [1.0, 3.0]])
    # centred by group means 0.5 and 2: [[-0.5, 0.5], [-1, 1]]
    # batch: mean 1.25, squared deviations 1.5625 + 0.0625 + 0.0625 + 3.0625 = 4.75,
    #        unbiased var 4.75 / 3 = 1.583333, std 1.258306 -> divide by 1.258406
    batch = torch.tensor([[-0.397328, 0.397328], [-0.794657, 0.794657]])
    torch.testing.assert_close(group_advantages(rewards, "batch"), batch, atol=1e-5, rtol=0)
    # none (Dr. GRPO): only the group mean is removed
    none = torch.tensor([[-0.5, 0.5], [-1.0, 1.0]])
    torch.testing.assert_close(group_advantages(rewards, "none"), none)


def test_group_of_one_has_zero_advantage() -> None:
    assert torch.equal(group_advantages(torch.tensor([[3.0], [1.0]]), "group"), torch.zeros(2, 1))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_matches_trl_scale_rewards(scale: str, trl_advantages) -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (6, 4), generator=gen).float() + torch.rand(6, 4, generator=gen)
    rewards[2] = 1.0  # one all-equal group
    ours = group_advantages(rewards, scale)  # [B, G]
    theirs = trl_advantages(rewards.flatten(), num_generations=4, scale_rewards=scale)  # [B*G]
    torch.testing.assert_close(ours.flatten(), theirs, atol=1e-6, rtol=1e-6)


def test_rejects_wrong_shape_and_scale() -> None:
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        group_advantages(torch.zeros(8), "group")
    with pytest.raises(ValueError, match="algo.scale_rewards"):
        group_advantages(torch.zeros(2, 2), "std")


def test_scale_negative_damps_only_the_negative_advantages() -> None:
    adv = torch.tensor([[-1.0, 0.0, 2.0], [0.5, -0.25, -4.0]])
    torch.testing.assert_close(
        scale_negative(adv, 0.25), torch.tensor([[-0.25, 0.0, 2.0], [0.5, -0.0625, -1.0]])
    )
    assert scale_negative(adv, 1.0) is adv  # GRPO unchanged
    assert (scale_negative(adv, 0.0) >= 0).all()  # only better-than-group samples remain
    with pytest.raises(ValueError, match="negative_advantage_scale"):
        scale_negative(adv, 1.5)


def test_filter_equal_groups() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.25]])
    assert filter_equal_groups(rewards).tolist() == [False, True, False, True]


def test_filtered_groups_are_exactly_the_zero_advantage_ones() -> None:
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (64, 4), generator=gen).float()
    keep = filter_equal_groups(rewards)
    zero = (group_advantages(rewards, "group") == 0).all(dim=1)
    assert keep.any() and (~keep).any()
    assert torch.equal(keep, ~zero)


def test_step_advantages_local_gives_each_token_its_own_steps_part() -> None:
    # Steps end at tokens 1 (part 0), 3 (part -1) and 5 (part 0); token 6 is after the last step.
    nan = float("nan")
    parts = torch.tensor([[nan, 0.0, nan, -1.0, nan, 0.0, nan]])
    got = step_advantages(torch.tensor([0.5]), parts, "local", 0.25)
    # A_it = 0.5 + 0.25 * part of t's step: the wrong step (tokens 2-3) gets 0.5 - 0.25
    assert got.tolist() == [[0.5, 0.5, 0.25, 0.25, 0.5, 0.5, 0.5]]


def test_step_advantages_min_carries_a_later_wrong_step_back_to_earlier_tokens() -> None:
    nan = float("nan")
    parts = torch.tensor([[nan, 1.0, nan, -1.0, nan, 1.0, nan],
                          [nan, nan, nan, nan, nan, nan, nan]])
    got = step_advantages(torch.tensor([-1.0, 2.0]), parts, "min", 0.5)
    # row 0: min of the parts of t's step and every later one: -1 up to token 3, then 1, then none
    assert got[0].tolist() == [-1.5, -1.5, -1.5, -1.5, -0.5, -0.5, -1.0]
    assert got[1].tolist() == [2.0] * 7  # no parts: the outcome advantage on every token


def test_step_advantages_with_coef_zero_or_zero_parts_are_the_outcome() -> None:
    parts = torch.tensor([[0.0, -1.0, 0.0], [float("nan"), 1.0, 0.0]])
    adv = torch.tensor([0.75, -0.5])
    assert torch.equal(step_advantages(adv, parts, "local", 0.0), adv[:, None].expand(2, 3))
    assert torch.equal(step_advantages(adv, torch.zeros(2, 3), "min", 3.0),
                       adv[:, None].expand(2, 3))


def test_step_advantages_reject_wrong_shapes_and_rules() -> None:
    with pytest.raises(ValueError, match="parts"):
        step_advantages(torch.zeros(2), torch.zeros(3, 4), "local", 0.1)
    with pytest.raises(ValueError, match="algo.step_advantage='sum'"):
        step_advantages(torch.zeros(1), torch.zeros(1, 4), "sum", 0.1)
