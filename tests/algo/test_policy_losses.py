"""GSPO, CISPO, SAPO, VESPO, LUSPO's aggregation and the two masks: hand-worked values and
gradients (a detached weight must not carry gradient)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from rlrun.algo import (
    LossNorm,
    entropy_threshold,
    gather_entropies,
    grpo_loss,
    high_entropy_mask,
    off_policy_mask,
    sequence_log_ratio,
)
from rlrun.config import AlgoConfig

# The batch of tests/algo/test_grpo.py: two sequences, three positions, row 1's last position
# is padding; old log-probs are 0, so the ratio r is exp(logprobs). Advantages +1 and -2.
RATIO = torch.tensor([[1.0, 1.5, 0.5], [1.5, 0.5, 1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -2.0])
NORM = LossNorm(total_tokens=5.0, total_seqs=2.0, max_len=4)
BASE = AlgoConfig(clip_low=0.2, clip_high=0.28, is_correction="none")
LOG15, LOG05 = math.log(1.5), math.log(0.5)  # 0.405465, -0.693147


def _loss(cfg: AlgoConfig, norm: LossNorm = NORM, **kwargs):
    logprobs = RATIO.log().requires_grad_(True)
    loss, metrics = grpo_loss(logprobs, torch.zeros(2, 3), ADV, MASK, cfg, norm, **kwargs)
    loss.backward()
    return loss.item(), metrics, logprobs.grad


# ---- GSPO: one ratio per sequence --------------------------------------------------------


def test_sequence_log_ratio_is_the_mean_over_real_tokens() -> None:
    got = sequence_log_ratio(RATIO.log(), MASK)
    want = torch.tensor([[math.log(0.75) / 3], [math.log(0.75) / 2]])  # log(1*1.5*0.5) / |y|
    torch.testing.assert_close(got, want)


def test_gspo_hand_values_and_gradient_to_every_token() -> None:
    # s_0 = 0.75^(1/3) = 0.908560, s_1 = 0.75^(1/2) = 0.866025, both inside [0.8, 1.28]:
    #   row 0 (A=+1): -0.908560 on each of 3 tokens;  row 1 (A=-2): 2 * 0.866025 = 1.732051 on 2
    #   token_mean: (-2.725681 + 3.464102) / 5 = 0.147684
    # d/d log p_t: the row's loss sum (-3 s_0, 4 s_1) times d s/d log p_t = s / |y|, over 5:
    #   row 0: -3 s_0 / 3 / 5 = -0.181712 each;  row 1: 4 s_1 / 2 / 5 = 0.346410 each
    cfg = replace(BASE, ratio_level="sequence")
    loss, metrics, grad = _loss(cfg)
    assert loss == pytest.approx(0.147684, abs=1e-6)
    torch.testing.assert_close(
        grad, torch.tensor([[-0.181712, -0.181712, -0.181712], [0.346410, 0.346410, 0.0]]),
        atol=1e-6, rtol=0,
    )
    # ratio metrics count sequences: mean (0.908560 + 0.866025) / 2
    assert metrics["loss/ratio_mean"] == pytest.approx(0.887293, abs=1e-6)
    assert metrics["loss/clip_frac"] == 0.0
    # GRPO's per-sequence mean: (-0.908560 + 1.732051) / 2 = 0.411745
    loss, _, _ = _loss(replace(cfg, loss_agg="seq_mean_token_mean"))
    assert loss == pytest.approx(0.411745, abs=1e-6)


def test_luspo_aggregation_hand_values() -> None:
    # seq_mean_token_sum = sum of all token losses / S. Token-level clip (test_grpo.py): row
    # sums -2.78 and 4.6 -> 1.82 / 2 = 0.91; with GSPO's ratio -2.725681 + 3.464102 -> 0.369211
    loss, _, _ = _loss(replace(BASE, loss_agg="seq_mean_token_sum"))
    assert loss == pytest.approx(0.91, abs=1e-6)
    loss, _, _ = _loss(replace(BASE, loss_agg="seq_mean_token_sum", ratio_level="sequence"))
    assert loss == pytest.approx(0.369211, abs=1e-6)


# ---- CISPO --------------------------------------------------------------------------------


def test_cispo_hand_values_and_detached_weight() -> None:
    # weight sg(min(r, 1.2)): row 0 [1, 1.2, 0.5], row 1 [1.2, 0.5]; loss -w A log p:
    #   row 0: [0, -1.2 * 0.405465, -0.5 * -0.693147] = [0, -0.486558, 0.346574]
    #   row 1: [2 * 1.2 * 0.405465, 2 * 0.5 * -0.693147] = [0.973116, -0.693147]
    #   token_mean: 0.139985 / 5 = 0.027997
    loss, metrics, grad = _loss(replace(BASE, policy_loss="cispo", cispo_cap=1.2))
    assert loss == pytest.approx(0.027997, abs=1e-6)
    # gradient -w A / 5 only: the weight's own dependence on log p is cut
    torch.testing.assert_close(grad, torch.tensor([[-0.2, -0.24, -0.1], [0.48, 0.2, 0.0]]))
    # the cap bound one positive-advantage token of 5 (row 0, r = 1.5)
    assert metrics["loss/cispo_cap_frac"] == pytest.approx(0.2)
    assert "loss/clip_frac" not in metrics


# ---- SAPO ---------------------------------------------------------------------------------


def test_sapo_hand_values_and_gradient() -> None:
    # tau_pos 2 (row 0, A=+1): gate (4/2) sigma(2 (r - 1)) = [1, 2 sigma(1), 2 sigma(-1)], sums
    #   to 3 (sigma(x) + sigma(-x) = 1): row 0 loss -3
    # tau_neg 4 (row 1, A=-2): gate sigma(4 (r - 1)) = [sigma(2), sigma(-2)], sums to 1: row 1 +2
    #   token_mean: (-3 + 2) / 5 = -0.2;  seq_mean_token_mean: (-3 / 3 + 2 / 2) / 2 = 0
    cfg = replace(BASE, policy_loss="sapo", sapo_tau_pos=2.0, sapo_tau_neg=4.0)
    loss, _, grad = _loss(cfg)
    assert loss == pytest.approx(-0.2, abs=1e-6)
    # d/d log p = -A 4 sigma (1 - sigma) r / 5:
    #   row 0: r=1 -> -1 / 5 = -0.2;  r=1.5 -> -4 * 0.196612 * 1.5 / 5 = -0.235934;
    #          r=0.5 -> -4 * 0.196612 * 0.5 / 5 = -0.078645
    #   row 1: r=1.5 -> 2 * 4 * 0.104994 * 1.5 / 5 = 0.251985;  r=0.5 -> 0.083995
    torch.testing.assert_close(
        grad, torch.tensor([[-0.2, -0.235934, -0.078645], [0.251985, 0.083995, 0.0]]),
        atol=1e-6, rtol=0,
    )
    loss, _, _ = _loss(replace(cfg, loss_agg="seq_mean_token_mean"))
    assert loss == pytest.approx(0.0, abs=1e-6)


def test_sapo_zero_advantage_takes_the_negative_temperature() -> None:
    # As TRL: A > 0 uses tau_pos, every other token tau_neg. With A = 0 the loss is 0 either
    # way, so compare the gates through a positive and a zero advantage of equal ratio.
    from rlrun.algo import sapo_policy_loss

    ratio = torch.tensor([[1.5], [1.5]])
    loss = sapo_policy_loss(ratio, torch.tensor([[1.0], [-1.0]]), tau_pos=2.0, tau_neg=4.0)
    torch.testing.assert_close(loss, torch.tensor([[-2 / (1 + math.exp(-1.0))],
                                                   [1 / (1 + math.exp(-2.0))]]))


# ---- VESPO --------------------------------------------------------------------------------


def test_vespo_hand_values_and_detached_weight() -> None:
    # w = prod of each row's ratios = 0.75 for both rows. phi = exp(lambda + k log w - lambda w):
    #   row 0 (A >= 0, k 2, lambda 3): exp(3 - 2.25) * 0.75^2 = 1.190813
    #   row 1 (A < 0,  k 3, lambda 2): exp(2 - 1.5) * 0.75^3 = 0.695554
    # loss -phi A log p: row 0 -1.190813 * (0.405465 - 0.693147) = 0.342577
    #                    row 1 2 * 0.695554 * (0.405465 - 0.693147) = -0.400197
    #   token_mean: -0.057620 / 5 = -0.011524
    loss, metrics, grad = _loss(replace(BASE, policy_loss="vespo"))
    assert loss == pytest.approx(-0.011524, abs=1e-6)
    # gradient -phi A / 5 only (phi is a fixed weight): row 0 -0.238163, row 1 0.278222
    torch.testing.assert_close(
        grad, torch.tensor([[-0.238163] * 3, [0.278222, 0.278222, 0.0]]), atol=1e-6, rtol=0
    )
    assert metrics["loss/vespo_weight_mean"] == pytest.approx((1.190813 + 0.695554) / 2)


def test_vespo_folds_in_token_importance_weights_instead_of_multiplying() -> None:
    # behaviour weights [[1, 3, 0.5], [2, 1.5]] capped at 2 -> row products 1 and 3, so w is
    # 0.75 and 2.25: row 1's phi = exp(2 + 3 log 2.25 - 4.5) = 0.934999; row 1's loss is
    # 2 * 0.934999 * -0.287682 = -0.537968, and the weights multiply nothing else:
    # (0.342577 - 0.537968) / 5 = -0.039078
    raw = torch.tensor([[1.0, 3.0, 0.5], [2.0, 1.5, 5.0]])
    cfg = replace(BASE, policy_loss="vespo", is_correction="token", is_cap=2.0)
    loss, _, _ = _loss(cfg, behaviour_logprobs=-raw.log())
    assert loss == pytest.approx(-0.039078, abs=1e-6)
    with pytest.raises(ValueError, match="is_correction=token or none"):
        _loss(replace(cfg, is_correction="sequence"), behaviour_logprobs=-raw.log())


# ---- the off-policy sequence mask ---------------------------------------------------------


def test_off_policy_mask_drops_drifted_negative_sequences() -> None:
    # behaviour log-probs 0: drift log pi_b - log pi = -log r. Row 1 (A<0): mean of
    # [-0.405465, 0.693147] = 0.143841. Row 0 (A>0) is never dropped.
    behaviour = torch.zeros(2, 3)
    cfg = replace(BASE, off_policy_mask_threshold=0.1)
    loss, metrics, grad = _loss(cfg, behaviour_logprobs=behaviour)
    # 0.143841 > 0.1: row 1 dropped, the normaliser stays 5 tokens: -2.78 / 5 = -0.556
    assert loss == pytest.approx(-0.556, abs=1e-6)
    assert metrics["loss/off_policy_drop_frac"] == pytest.approx(0.5)
    assert torch.all(grad[1] == 0.0)
    loss, metrics, _ = _loss(replace(cfg, off_policy_mask_threshold=0.2),
                             behaviour_logprobs=behaviour)
    assert loss == pytest.approx(0.364, abs=1e-6)  # kept: test_grpo.py's token_mean value
    assert metrics["loss/off_policy_drop_frac"] == 0.0
    with pytest.raises(ValueError, match="off_policy_mask_threshold"):
        _loss(cfg)


def test_off_policy_mask_unscored_token_counts_as_no_drift() -> None:
    # drift [0 (NaN), 0.3] -> mean 0.15: dropped at 0.1, kept at 0.2
    args = (torch.tensor([[-1.0]]), torch.zeros(1, 2), torch.tensor([[math.nan, 0.3]]),
            torch.ones(1, 2))
    assert off_policy_mask(*args, threshold=0.1).item() == 0.0
    assert off_policy_mask(*args, threshold=0.2).item() == 1.0
    positive = (torch.tensor([[1.0]]), *args[1:])
    assert off_policy_mask(*positive, threshold=0.0).item() == 1.0


# ---- the high-entropy token mask ----------------------------------------------------------

ENTROPY = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]])  # 99 is padding


def _entropy_mask(quantile: float):
    threshold = entropy_threshold(ENTROPY[MASK.bool()], quantile)
    keep = high_entropy_mask(ENTROPY, MASK, threshold)
    return threshold, keep, replace(NORM, entropy_mask_tokens=float(keep.sum()))


def test_entropy_threshold_hand_values() -> None:
    # top 40% of [1, 2, 3, 4, 5]: the 0.6 quantile, rank 0.6 * 4 = 2.4 -> 3 + 0.4 = 3.4
    threshold, keep, _ = _entropy_mask(0.4)
    assert threshold.item() == pytest.approx(3.4)
    torch.testing.assert_close(keep, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    # quantile 0 keeps only the highest; 1 keeps every real token, never padding
    assert _entropy_mask(0.0)[1].sum() == 1 and _entropy_mask(0.0)[1][1, 1] == 1
    torch.testing.assert_close(_entropy_mask(1.0)[1], MASK)
    assert entropy_threshold(torch.zeros(0), 0.2).item() == math.inf


@pytest.mark.parametrize("size", [1, 2, 7, 1000, 4097])
@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_entropy_threshold_is_torch_quantile(size: int, quantile: float) -> None:
    values = torch.rand(size, generator=torch.Generator().manual_seed(size)) * 5
    assert entropy_threshold(values, quantile) == torch.quantile(values, 1 - quantile)


def test_entropy_mask_trains_only_high_entropy_tokens() -> None:
    # kept: row 1's two tokens -> policy term 4.6 / 5 = 0.92 (normaliser unchanged, as TRL);
    # entropy bonus over the kept tokens: 0.01 * (4 + 5) / 2 = 0.045 -> 0.875
    _, keep, norm = _entropy_mask(0.4)
    entropy = ENTROPY.clone().requires_grad_(True)
    cfg = replace(BASE, entropy_mask_quantile=0.4, entropy_coef=0.01)
    loss, metrics, grad = _loss(cfg, norm, entropy=entropy, entropy_mask=keep)
    assert loss == pytest.approx(0.875, abs=1e-6)
    assert metrics["loss/entropy"] == pytest.approx(3.0)  # the metric still covers every token
    assert metrics["loss/entropy_mask_frac"] == pytest.approx(0.4)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, 0.0], [0.6, 0.0, 0.0]]))
    torch.testing.assert_close(entropy.grad, -0.01 / 2 * keep)
    with pytest.raises(ValueError, match="entropy_mask_quantile"):
        _loss(cfg, entropy=ENTROPY)


def test_entropy_mask_leaves_the_kl_term_on_every_token() -> None:
    # Quantile 0 keeps one token; the KL term still averages over all 5 (test_grpo.py's k1
    # of log pi - log ref with ref = log pi - 1: KL 1 per token, times beta 0.5 -> 0.5).
    _, keep, norm = _entropy_mask(0.0)
    cfg = replace(BASE, entropy_mask_quantile=0.0, kl_coef=0.5, kl_estimator="k1",
                  kl_bias_correction=False)
    loss, metrics, _ = _loss(cfg, norm, ref_logprobs=RATIO.log() - 1, entropy_mask=keep)
    # policy: only row 1's r=0.5 token (entropy 5) -> 1.6 / 5 = 0.32; KL: 0.5 * 5 / 5 = 0.5
    assert loss == pytest.approx(0.82, abs=1e-6)
    assert metrics["loss/kl"] == pytest.approx(1.0)


def test_gather_entropies_on_one_rank_is_the_identity() -> None:
    values = torch.tensor([1.0, 2.0])
    assert gather_entropies(values, world_size=1) is values


# ---- defaults -----------------------------------------------------------------------------


def test_defaults_leave_the_new_options_off() -> None:
    algo = AlgoConfig()
    assert (algo.policy_loss, algo.ratio_level) == ("clip", "token")
    assert algo.entropy_mask_quantile == 1.0 and algo.off_policy_mask_threshold is None
    # and compute test_grpo.py's numbers bit for bit
    explicit = replace(BASE, policy_loss="clip", ratio_level="token")
    assert _loss(BASE)[0] == _loss(explicit)[0] == pytest.approx(0.364, abs=1e-6)


def test_one_token_completions_still_count_tokens() -> None:
    # A micro-batch of one-token completions is [N, 1] like a sequence-level ratio; the metrics
    # must still count tokens: the only real token has ratio 1.5 (row 1 is an empty response).
    logprobs = torch.tensor([[math.log(1.5)], [math.log(0.5)]])
    mask = torch.tensor([[1.0], [0.0]])
    norm = LossNorm(total_tokens=1.0, total_seqs=2.0, max_len=1)
    _, metrics = grpo_loss(logprobs, torch.zeros(2, 1), ADV, mask, BASE, norm)
    assert metrics["loss/ratio_mean"] == pytest.approx(1.5)
    assert metrics["loss/clip_frac_high"] == pytest.approx(1.0)
    cfg = replace(BASE, policy_loss="vespo", is_correction="sequence")
    with pytest.raises(ValueError, match="is_correction=token or none"):
        grpo_loss(logprobs, torch.zeros(2, 1), ADV, mask, cfg, norm,
                  behaviour_logprobs=torch.zeros(2, 1))
