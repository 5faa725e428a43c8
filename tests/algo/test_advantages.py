"""Group advantages and the equal-group filter: hand-worked values and TRL's formula."""

from __future__ import annotations

import pytest
import torch

from rlrun.algo import filter_equal_groups, group_advantages, scale_negative


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
