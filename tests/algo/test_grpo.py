"""The GRPO loss: hand-worked values per mode, TRL's own `_compute_loss`, rank invariance."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from rlrun.algo import (
    LossNorm,
    ddp_loss,
    grpo_loss,
    merge_metrics,
    plan_minibatches,
)
from rlrun.config import AlgoConfig

# Two sequences, three positions; row 1's last position is padding. old log-probs are 0, so the
# PPO ratio r equals exp(logprobs). Advantages +1 and -2. Clip-higher: eps_low 0.2, eps_high 0.28.
RATIO = torch.tensor([[1.0, 1.5, 0.5], [1.5, 0.5, 1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -2.0])
MAX_LEN = 4
NORM = LossNorm(total_tokens=5.0, total_seqs=2.0, max_len=MAX_LEN)
BASE = AlgoConfig(clip_low=0.2, clip_high=0.28, is_correction="none")
# Per-token policy loss max(-A r, -A clip(r, 0.8, 1.28)):
#   row 0 (A=+1):  r=1 -> -1;  r=1.5 -> -1.28 (clipped high);  r=0.5 -> -0.5
#   row 1 (A=-2):  r=1.5 -> 3.0;  r=0.5 -> 2 * 0.8 = 1.6 (clipped low);  padding
#   sums: row 0 -2.78 over 3 tokens, row 1 4.6 over 2 tokens; all 1.82 over 5 tokens


def _loss(cfg: AlgoConfig, **kwargs):
    logprobs = RATIO.log().requires_grad_(True)
    loss, metrics = grpo_loss(logprobs, torch.zeros(2, 3), ADV, MASK, cfg, NORM, **kwargs)
    loss.backward()
    return loss.item(), metrics, logprobs.grad


@pytest.mark.parametrize(
    ("loss_agg", "expected"),
    [
        ("token_mean", 1.82 / 5),  # 0.364
        ("seq_mean_token_mean", (-2.78 / 3 + 4.6 / 2) / 2),  # (-0.926667 + 2.3) / 2 = 0.686667
        ("seq_mean_token_sum_norm", 1.82 / (2 * MAX_LEN)),  # 0.2275
    ],
)
def test_loss_aggregation_hand_values(loss_agg: str, expected: float) -> None:
    loss, metrics, _ = _loss(replace(BASE, loss_agg=loss_agg))
    assert loss == pytest.approx(expected, abs=1e-6)
    assert metrics["loss/policy"] == pytest.approx(expected, abs=1e-6)


def test_gradient_hand_values_token_mean() -> None:
    # d(-A r)/d log p = -A r where the unclipped term is active, 0 where the clip binds; / 5 tokens
    #   row 0: r=1 -> -1/5 = -0.2;  r=1.5 clipped -> 0;  r=0.5 (A>0, below range) -> -0.5/5 = -0.1
    #   row 1: r=1.5 (A<0, above range) -> 2 * 1.5 / 5 = 0.6;  r=0.5 clipped -> 0;  padding -> 0
    _, _, grad = _loss(BASE)
    torch.testing.assert_close(grad, torch.tensor([[-0.2, 0.0, -0.1], [0.6, 0.0, 0.0]]))


def test_clip_fractions_hand_values() -> None:
    _, metrics, _ = _loss(BASE)
    # one token clipped high (row 0, r=1.5, A>0), one clipped low (row 1, r=0.5, A<0), of 5
    assert metrics["loss/clip_frac_high"] == pytest.approx(0.2)
    assert metrics["loss/clip_frac_low"] == pytest.approx(0.2)
    assert metrics["loss/clip_frac"] == pytest.approx(0.4)
    assert metrics["loss/ratio_max"] == pytest.approx(1.5)
    # mean ratio over the 5 real tokens: (1 + 1.5 + 0.5 + 1.5 + 0.5) / 5 = 1.0
    assert metrics["loss/ratio_mean"] == pytest.approx(1.0)


def test_symmetric_clip_differs_from_clip_higher() -> None:
    # eps_high 0.2: row 0 r=1.5 is clipped to 1.2 instead of 1.28 -> sum 1.82 + 0.08 = 1.90
    loss, _, _ = _loss(replace(BASE, clip_high=0.2))
    assert loss == pytest.approx(1.90 / 5, abs=1e-6)


def test_dual_clip_hand_values() -> None:
    # c = 1.4: row 1 (A=-2) r=1.5 -> ratio capped at 1.4 -> max(2 * 1.4, 2 * 1.28) = 2.8 (was 3.0)
    #          row 0 (A=+1) r=1.5 stays clipped at 1.28; total 1.82 - 0.2 = 1.62 over 5 tokens
    loss, metrics, grad = _loss(replace(BASE, dual_clip=1.4))
    assert loss == pytest.approx(1.62 / 5, abs=1e-6)
    assert metrics["loss/dual_clip_frac"] == pytest.approx(0.2)
    assert grad[1, 0] == 0.0  # the capped token no longer pushes the gradient


def test_token_is_correction_hand_values() -> None:
    # raw weights [[1, 3, 0.5], [2, 1.5, pad]] capped at 2 -> [[1, 2, 0.5], [2, 1.5]]
    # weighted: row 0 [-1, -2.56, -0.25] = -3.81; row 1 [6.0, 2.4] = 8.4; (8.4 - 3.81) / 5 = 0.918
    raw = torch.tensor([[1.0, 3.0, 0.5], [2.0, 1.5, 5.0]])
    cfg = replace(BASE, is_correction="token", is_cap=2.0)
    loss, metrics, _ = _loss(cfg, behaviour_logprobs=-raw.log())
    assert loss == pytest.approx(0.918, abs=1e-6)
    # weight mean over real tokens (1 + 2 + 0.5 + 2 + 1.5) / 5 = 1.4, max 2
    assert metrics["loss/is_weight_mean"] == pytest.approx(1.4)
    assert metrics["loss/is_weight_max"] == pytest.approx(2.0)


def test_sequence_is_correction_hand_values() -> None:
    # row weights: 1 * 3 * 0.5 = 1.5 and 2 * 1.5 = 3 -> capped 2
    # weighted: -2.78 * 1.5 = -4.17, 4.6 * 2 = 9.2; (9.2 - 4.17) / 5 = 1.006
    raw = torch.tensor([[1.0, 3.0, 0.5], [2.0, 1.5, 5.0]])
    cfg = replace(BASE, is_correction="sequence", is_cap=2.0)
    loss, metrics, _ = _loss(cfg, behaviour_logprobs=-raw.log())
    assert loss == pytest.approx(1.006, abs=1e-6)
    assert metrics["loss/is_weight_mean"] == pytest.approx((1.5 + 2.0) / 2)
    # masked (MIS): row 1's weight 3 > 2 -> 0; only row 0 counts: -4.17 / 5 = -0.834
    loss, _, _ = _loss(replace(cfg, is_mode="mask"), behaviour_logprobs=-raw.log())
    assert loss == pytest.approx(-0.834, abs=1e-6)


def test_is_correction_needs_behaviour_logprobs() -> None:
    with pytest.raises(ValueError, match="algo.is_correction=token"):
        _loss(replace(BASE, is_correction="token"))


def test_kl_term_hand_values_and_bias_correction() -> None:
    # On-policy (r = 1 everywhere), advantages 0: only the KL term is left.
    # log pi = [0, -log 2], log ref = [-log 2, 0]; k3 = [0.193147, 0.306853] (see test_kl.py)
    # loss = 0.1 * (0.193147 + 0.306853) / 2 tokens = 0.025
    # d/d log pi of r * k3 = k3 + (1 - exp(ref - log pi)) at r = 1: [0.193147 + 0.5, 0.306853 - 1]
    # without the r factor only the second part: [0.5, -1]; both divided by 2 tokens, times 0.1
    log2 = math.log(2.0)
    for bias_correction, grad in [(True, [0.0346574, -0.0346574]), (False, [0.025, -0.05])]:
        cfg = replace(BASE, kl_coef=0.1, kl_estimator="k3", kl_bias_correction=bias_correction)
        logprobs = torch.tensor([[0.0, -log2]], requires_grad=True)
        loss, metrics = grpo_loss(
            logprobs, logprobs.detach(), torch.zeros(1), torch.ones(1, 2), cfg,
            LossNorm(2.0, 1.0, 2), ref_logprobs=torch.tensor([[-log2, 0.0]]),
        )
        loss.backward()
        assert loss.item() == pytest.approx(0.025, abs=1e-6)
        assert metrics["loss/kl"] == pytest.approx(0.25, abs=1e-6)
        torch.testing.assert_close(logprobs.grad, torch.tensor([grad]), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("estimator", "kl_mean"), [("k1", 0.0), ("k2", 0.240227)])
def test_other_kl_estimators(estimator: str, kl_mean: float) -> None:
    # k1 = [log 2, -log 2] averages to 0; k2 = (log 2)^2 / 2 for both tokens
    log2 = math.log(2.0)
    cfg = replace(BASE, kl_coef=1.0, kl_estimator=estimator, kl_bias_correction=False)
    lp = torch.tensor([[0.0, -log2]])
    loss, metrics = grpo_loss(
        lp, lp, torch.zeros(1), torch.ones(1, 2), cfg, LossNorm(2.0, 1.0, 2),
        ref_logprobs=torch.tensor([[-log2, 0.0]]),
    )
    assert loss.item() == pytest.approx(kl_mean, abs=1e-6)
    assert metrics["loss/kl"] == pytest.approx(kl_mean, abs=1e-6)


def test_kl_coef_zero_needs_no_reference() -> None:
    loss, metrics, _ = _loss(replace(BASE, kl_coef=0.0), ref_logprobs=None)
    assert "loss/kl" not in metrics
    with pytest.raises(ValueError, match="algo.kl_coef"):
        _loss(replace(BASE, kl_coef=0.01))


def test_entropy_bonus_hand_values() -> None:
    # entropy [[1, 2, 3], [4, 5, pad]] -> mean over 5 tokens = 15 / 5 = 3
    # loss = 0.364 - 0.01 * 3 = 0.334 (for every aggregation: the bonus is a token mean)
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]], requires_grad=True)
    loss, metrics, _ = _loss(replace(BASE, entropy_coef=0.01), entropy=entropy)
    assert loss == pytest.approx(0.364 - 0.03, abs=1e-6)
    assert metrics["loss/entropy"] == pytest.approx(3.0)
    torch.testing.assert_close(entropy.grad, -0.01 / 5 * MASK)
    with pytest.raises(ValueError, match="algo.entropy_coef"):
        _loss(replace(BASE, entropy_coef=0.01))


def test_shape_mismatch_is_named() -> None:
    with pytest.raises(ValueError, match="old_logprobs"):
        grpo_loss(torch.zeros(2, 3), torch.zeros(2, 4), ADV, MASK, BASE, NORM)
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), MASK, BASE, NORM)


# ---- TRL equivalence: the same numbers through TRL's installed GRPOTrainer._compute_loss ----

TRL_LOSS_TYPES = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",
}


def _random_batch(n: int, length: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, length, generator=gen) * 3  # [N, L]
    logprobs = old + 0.3 * torch.randn(n, length, generator=gen)  # ratios around 1, some clipped
    behaviour = old + 0.3 * torch.randn(n, length, generator=gen)
    ref = old + 0.5 * torch.randn(n, length, generator=gen)
    entropy = torch.rand(n, length, generator=gen) * 2
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    mask = (torch.arange(length) < lengths.unsqueeze(1)).long()  # [N, L]
    adv = torch.randn(n, generator=gen)
    return logprobs, old, behaviour, ref, entropy, mask, adv


TRL_CASES = [
    # (loss_type, epsilon, epsilon_high, delta, beta, use_bias_correction_kl, is_mode, entropy_coef)
    ("grpo", 0.2, None, None, 0.0, True, None, 0.0),
    ("bnpo", 0.2, None, None, 0.0, True, None, 0.0),
    ("dr_grpo", 0.2, None, None, 0.0, True, None, 0.0),
    ("dapo", 0.2, 0.28, None, 0.0, True, None, 0.0),
    ("dapo", 0.2, 0.28, 1.5, 0.04, True, "token_truncate", 0.01),
    ("grpo", 0.1, 0.3, 1.4, 0.04, False, "sequence_truncate", 0.0),
    ("dr_grpo", 0.2, 0.28, 2.0, 0.1, True, "token_mask", 0.02),
    ("bnpo", 0.2, None, 1.3, 0.0, True, "sequence_mask", 0.0),
    ("dapo", 0.2, None, None, 0.04, True, "sequence_mask", 0.05),
]


@pytest.mark.parametrize("case", TRL_CASES, ids=lambda c: "-".join(str(x) for x in c))
def test_matches_trl_compute_loss(case, trl_compute_loss, trl_importance_ratio) -> None:
    loss_type, eps, eps_high, delta, beta, bias_kl, is_mode, ent_coef = case
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(8, 6, seed=len(str(case)))
    max_len = 9
    is_ratio = None
    cfg = AlgoConfig(
        loss_agg=TRL_LOSS_TYPES[loss_type], clip_low=eps,
        clip_high=eps if eps_high is None else eps_high, dual_clip=delta, kl_coef=beta,
        kl_estimator="k3", kl_bias_correction=bias_kl, entropy_coef=ent_coef,
        is_correction="none", is_cap=3.0,
    )
    if is_mode is not None:
        is_ratio = trl_importance_ratio(old, behaviour, mask, is_mode, clip_max=3.0)
        level, mode = is_mode.split("_")
        cfg = replace(cfg, is_correction=level, is_mode=mode)

    theirs_lp = logprobs.clone().requires_grad_(True)
    theirs_ent = entropy.clone().requires_grad_(True)
    theirs = trl_compute_loss(
        logprobs=theirs_lp, old_logprobs=old, advantages=adv, mask=mask, loss_type=loss_type,
        epsilon=eps, epsilon_high=eps_high, delta=delta, beta=beta, ref_logprobs=ref,
        use_bias_correction_kl=bias_kl, importance_sampling_ratio=is_ratio,
        entropies=theirs_ent, entropy_coef=ent_coef, max_completion_length=max_len,
    )
    theirs.backward()

    ours_lp = logprobs.clone().requires_grad_(True)
    ours_ent = entropy.clone().requires_grad_(True)
    ours, _ = grpo_loss(
        ours_lp, old, adv, mask, cfg, LossNorm.from_mask(mask, max_len),
        behaviour_logprobs=behaviour, ref_logprobs=ref, entropy=ours_ent,
    )
    ours.backward()

    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad)
    if ent_coef:
        torch.testing.assert_close(ours_ent.grad, theirs_ent.grad)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_rank_loss_matches_trl_per_process_loss(loss_type, trl_compute_loss) -> None:
    # TRL with 2 processes: each computes its loss on its half, DDP averages the gradients.
    # `ddp_loss(share, 2)` must be exactly TRL's per-process loss for these loss types.
    logprobs, old, _, ref, _, mask, adv = _random_batch(8, 6, seed=3)
    cfg = AlgoConfig(loss_agg=TRL_LOSS_TYPES[loss_type], clip_high=0.28, is_correction="none",
                     kl_coef=0.04)
    norm = LossNorm.from_mask(mask, 9)
    for half in (slice(0, 4), slice(4, 8)):
        theirs = trl_compute_loss(
            logprobs=logprobs[half], old_logprobs=old[half], advantages=adv[half],
            mask=mask[half], loss_type=loss_type, epsilon_high=0.28, beta=0.04,
            ref_logprobs=ref[half], max_completion_length=9, num_processes=2,
            num_items_in_batch=float(mask.sum()),
        )
        share, _ = grpo_loss(
            logprobs[half], old[half], adv[half], mask[half], cfg, norm, ref_logprobs=ref[half]
        )
        torch.testing.assert_close(ddp_loss(share, world_size=2), theirs)


# ---- rank invariance: 1 rank vs 2 simulated ranks on the same global mini-batch ----

RANK_CFGS = [
    AlgoConfig(loss_agg="token_mean", is_correction="token", kl_coef=0.05, entropy_coef=0.01),
    AlgoConfig(loss_agg="seq_mean_token_mean", is_correction="sequence", clip_high=0.28),
    AlgoConfig(loss_agg="seq_mean_token_sum_norm", is_correction="none", dual_clip=3.0),
]


@pytest.mark.parametrize("cfg", RANK_CFGS, ids=lambda c: c.loss_agg)
def test_two_ranks_sum_to_one_rank(cfg: AlgoConfig) -> None:
    torch.manual_seed(0)
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(8, 6, seed=11)
    max_len = 6
    weight = torch.randn(6, requires_grad=True)  # a stand-in parameter the log-probs depend on

    def forward(idx):
        # log-probs depend on `weight`, so the test checks parameter gradients, as DDP sees them
        return logprobs[idx] + 0.1 * weight, entropy[idx] + 0.1 * weight

    def rank_loss(idx, norm):
        lp, ent = forward(idx)
        return grpo_loss(
            lp, old[idx], adv[idx], mask[idx], cfg, norm,
            behaviour_logprobs=behaviour[idx], ref_logprobs=ref[idx], entropy=ent,
        )

    everything = torch.arange(8)
    single, single_metrics = rank_loss(everything, LossNorm.from_mask(mask, max_len))
    (grad_single,) = torch.autograd.grad(single, weight)

    [mb] = plan_minibatches(mask, 1, 2, max_len, seed=0, step=0, epoch=0)
    assert mb.norm == LossNorm.from_mask(mask, max_len)
    shares, grads, metrics = [], [], []
    for shard in mb.shards:
        # each rank: two micro-batches, accumulated as backward() would accumulate them
        rank_grad = torch.zeros(6)
        for micro in shard.chunk(2):
            share, m = rank_loss(micro, mb.norm)
            rank_grad += torch.autograd.grad(ddp_loss(share, 2), weight)[0]
            shares.append(share)
            metrics.append(m)
        grads.append(rank_grad)
    ddp_averaged_grad = torch.stack(grads).mean(dim=0)  # what DDP's all-reduce(mean) produces

    torch.testing.assert_close(torch.stack(shares).sum(), single)
    torch.testing.assert_close(ddp_averaged_grad, grad_single)
    merged = merge_metrics(metrics)
    for key, value in single_metrics.items():
        assert merged[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_merge_metrics_sums_shares_and_maxes_maxima() -> None:
    merged = merge_metrics([{"loss/policy": 0.1, "loss/ratio_max": 1.2},
                            {"loss/policy": 0.2, "loss/ratio_max": 1.1}])
    assert merged == {"loss/policy": pytest.approx(0.3), "loss/ratio_max": 1.2}


def test_merged_ranks_add_their_shares_and_keep_rank_0s_replicated_values() -> None:
    merged = merge_metrics([
        {"loss/total": 0.25, "loss/ratio_max": 1.5, "optim/grad_norm": 2.0,
         "sync/logprob_gap_max/0": 0.01},
        {"loss/total": 0.5, "loss/ratio_max": 1.25, "optim/grad_norm": 2.0,
         "sync/logprob_gap_max/0": 0.03},
    ])
    assert merged == {"loss/total": 0.75, "loss/ratio_max": 1.5, "optim/grad_norm": 2.0,
                      "sync/logprob_gap_max/0": 0.03}


def test_merged_updates_are_the_mean_of_their_shares() -> None:
    merged = merge_metrics([{"loss/policy": 0.5, "loss/ratio_max": 1.2},
                            {"loss/policy": 0.25, "loss/ratio_max": 1.4}], mean=True)
    assert merged == {"loss/policy": 0.375, "loss/ratio_max": 1.4}



@pytest.mark.parametrize("policy_loss", ["clip", "cispo", "sapo", "vespo"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_token_advantages_equal_to_the_sequences_give_the_same_loss(policy_loss, ratio_level):
    cfg = replace(BASE, policy_loss=policy_loss, ratio_level=ratio_level, loss_agg="token_mean")
    loss, metrics, grad = _loss(cfg)
    same = ADV[:, None].expand(2, 3).clone()
    loss_t, metrics_t, grad_t = _loss(cfg, token_advantages=same)
    assert loss_t == pytest.approx(loss, abs=1e-7)
    torch.testing.assert_close(grad_t, grad)
    assert metrics_t == pytest.approx(metrics, abs=1e-7)


def test_token_advantages_move_only_their_tokens() -> None:
    # Row 0's middle token (r=1.5, clipped high with A=+1) gets A=-1 instead: the clip no
    # longer binds (A<0, r above the range), its loss is -A r = 1.5 and its gradient 1.5 / 5.
    token_adv = ADV[:, None].expand(2, 3).clone()
    token_adv[0, 1] = -1.0
    loss, metrics, grad = _loss(BASE, token_advantages=token_adv)
    assert loss == pytest.approx((1.82 + 1.28 + 1.5) / 5, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-0.2, 0.3, -0.1], [0.6, 0.0, 0.0]]))
    assert metrics["loss/clip_frac_high"] == pytest.approx(0.0)


def test_token_advantages_must_cover_every_position() -> None:
    with pytest.raises(ValueError, match="token_advantages has shape"):
        _loss(BASE, token_advantages=torch.zeros(2, 2))
