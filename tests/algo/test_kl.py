"""KL estimators: hand-worked values, TRL's k3, and the (un)biasedness from Schulman's note."""

from __future__ import annotations

import math

import torch

from rlrun.algo import KL_ESTIMATORS, kl_k1, kl_k2, kl_k3

LOG2 = math.log(2.0)


def test_hand_values() -> None:
    logprobs = torch.tensor([[0.0, -LOG2]])
    ref = torch.tensor([[-LOG2, 0.0]])
    # k1 = logp - ref = [log 2, -log 2]
    torch.testing.assert_close(kl_k1(logprobs, ref), torch.tensor([[LOG2, -LOG2]]))
    # k2 = (log 2)^2 / 2 = 0.240227 for both
    k2 = kl_k2(logprobs, ref)
    torch.testing.assert_close(k2, torch.full((1, 2), 0.240227), atol=1e-6, rtol=0)
    # k3: log r = ref - logp = [-log 2, log 2], r = [0.5, 2]
    #     r - 1 - log r = [0.5 - 1 + 0.693147, 2 - 1 - 0.693147] = [0.193147, 0.306853]
    torch.testing.assert_close(
        kl_k3(logprobs, ref), torch.tensor([[0.193147, 0.306853]]), atol=1e-6, rtol=0
    )


def test_k3_is_trls_formula() -> None:
    gen = torch.Generator().manual_seed(0)
    per_token_logps = -torch.rand(4, 6, generator=gen) * 3
    ref_per_token_logps = -torch.rand(4, 6, generator=gen) * 3
    # trl/trainer/grpo_trainer.py, GRPOTrainer._compute_loss, "per_token_kl = ..."
    trl = (
        torch.exp(ref_per_token_logps - per_token_logps)
        - (ref_per_token_logps - per_token_logps)
        - 1
    )
    torch.testing.assert_close(kl_k3(per_token_logps, ref_per_token_logps), trl)


def test_estimators_zero_when_policies_agree() -> None:
    lp = -torch.rand(3, 5)
    for fn in KL_ESTIMATORS.values():
        assert torch.equal(fn(lp, lp), torch.zeros(3, 5))


def test_k1_and_k3_unbiased_k2_close_on_samples() -> None:
    # Two 5-way categoricals close to each other; y ~ pi_theta. E[k1] = E[k3] = KL exactly,
    # k2 is biased but close when the distributions are close (Schulman's note).
    gen = torch.Generator().manual_seed(0)
    theta = torch.log_softmax(torch.tensor([0.3, -0.2, 0.1, 0.0, -0.4]), dim=0)
    ref = torch.log_softmax(torch.tensor([0.1, 0.0, 0.2, -0.1, -0.3]), dim=0)
    true_kl = float((theta.exp() * (theta - ref)).sum())
    y = torch.multinomial(theta.exp(), 400_000, replacement=True, generator=gen)
    lp, lr = theta[y].unsqueeze(0), ref[y].unsqueeze(0)
    assert abs(float(kl_k1(lp, lr).mean()) - true_kl) < 0.1 * true_kl
    assert abs(float(kl_k3(lp, lr).mean()) - true_kl) < 0.05 * true_kl
    assert abs(float(kl_k2(lp, lr).mean()) - true_kl) < 0.1 * true_kl
    assert float(kl_k3(lp, lr).var()) < float(kl_k1(lp, lr).var())
