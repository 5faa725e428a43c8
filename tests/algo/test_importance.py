"""Importance weights vs behaviour log-probs: hand-worked values and TRL's vLLM IS correction."""

from __future__ import annotations

import math

import pytest
import torch

from rlrun.algo import sequence_is_weights, token_is_weights

# Raw token weights pi_old / pi_behaviour; the third token of row 1 is padding.
RAW = torch.tensor([[1.0, 3.0, 0.5], [2.0, 1.5, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
OLD = torch.zeros(2, 3)
BEHAVIOUR = OLD - RAW.log()  # so that exp(old - behaviour) = RAW


def test_token_truncate_hand_values() -> None:
    # min(w, 2); padding has log-ratio 0 after masking -> weight 1
    expected = torch.tensor([[1.0, 2.0, 0.5], [2.0, 1.5, 1.0]])
    torch.testing.assert_close(token_is_weights(OLD, BEHAVIOUR, MASK, cap=2.0), expected)


def test_token_truncate_with_floor() -> None:
    expected = torch.tensor([[1.0, 2.0, 0.8], [2.0, 1.5, 1.0]])
    got = token_is_weights(OLD, BEHAVIOUR, MASK, cap=2.0, floor=0.8)
    torch.testing.assert_close(got, expected)


def test_token_mask_hand_values() -> None:
    # weights above the cap become 0 (the 3.0 token); the rest pass unchanged
    expected = torch.tensor([[1.0, 0.0, 0.5], [2.0, 1.5, 1.0]])
    torch.testing.assert_close(token_is_weights(OLD, BEHAVIOUR, MASK, 2.0, mode="mask"), expected)


def test_sequence_hand_values() -> None:
    # products over real tokens: row 0: 1 * 3 * 0.5 = 1.5; row 1: 2 * 1.5 = 3 (padding's 5 excluded)
    torch.testing.assert_close(
        sequence_is_weights(OLD, BEHAVIOUR, MASK, cap=2.0), torch.tensor([[1.5], [2.0]])
    )
    torch.testing.assert_close(
        sequence_is_weights(OLD, BEHAVIOUR, MASK, 2.0, mode="mask"), torch.tensor([[1.5], [0.0]])
    )


def test_nan_behaviour_logprob_means_no_correction() -> None:
    behaviour = BEHAVIOUR.clone()
    behaviour[0, 1] = math.nan
    w = token_is_weights(OLD, behaviour, MASK, cap=2.0)
    assert w[0, 1] == 1.0 and not torch.isnan(w).any()


def test_weights_carry_no_gradient() -> None:
    old = torch.zeros(2, 3, requires_grad=True)
    assert not token_is_weights(old, BEHAVIOUR, MASK, 2.0).requires_grad
    assert not sequence_is_weights(old, BEHAVIOUR, MASK, 2.0).requires_grad


def test_unknown_mode_is_named() -> None:
    with pytest.raises(ValueError, match="algo.is_mode"):
        token_is_weights(OLD, BEHAVIOUR, MASK, 2.0, mode="clip")


@pytest.mark.parametrize(
    ("trl_mode", "level", "mode"),
    [
        ("token_truncate", "token", "truncate"),
        ("token_mask", "token", "mask"),
        ("sequence_truncate", "sequence", "truncate"),
        ("sequence_mask", "sequence", "mask"),
    ],
)
@pytest.mark.parametrize(("cap", "floor"), [(3.0, None), (1.5, 0.5)])
def test_matches_trl_vllm_importance_sampling(
    trl_mode: str, level: str, mode: str, cap: float, floor: float | None, trl_importance_ratio
) -> None:
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 7, generator=gen) * 2
    behaviour = old + 0.4 * torch.randn(6, 7, generator=gen)
    behaviour[1, 2] = math.nan
    mask = (torch.arange(7) < torch.tensor([7, 5, 3, 7, 1, 6]).unsqueeze(1)).float()
    fn = token_is_weights if level == "token" else sequence_is_weights
    ours = fn(old, behaviour, mask, cap, floor, mode)
    theirs = trl_importance_ratio(old, behaviour, mask, trl_mode, clip_max=cap, clip_min=floor)
    torch.testing.assert_close(ours, theirs)
