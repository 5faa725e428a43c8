"""Every TRL 1.16 loss_type, both ratio levels, the entropy mask, the off-policy mask,
masked truncated completions and multi-turn env masks: the same tensors through TRL's own
`GRPOTrainer._compute_loss` and through rlrun's `grpo_loss` agree on the loss and on the
gradients of the log-probs and entropies.

The rlrun settings of each loss_type come from `rlrun.trl_names.TRL_NAMES`, the table that
config errors and `rlrun config show` print, so this also checks what that table tells users.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlrun.algo import LossNorm, entropy_threshold, grpo_loss, high_entropy_mask
from rlrun.batching import TrainSample, make_shards
from rlrun.config import AlgoConfig
from rlrun.policy_update import collate
from rlrun.trl_names import TRL_NAMES

LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"]
MAX_LEN = 9


def _rlrun_settings(loss_type: str) -> dict[str, str]:
    [row] = [r for r in TRL_NAMES if r.trl == "loss_type" and r.value == loss_type]
    pairs = (setting.split("=") for setting in row.rlrun.split())
    return {key.removeprefix("algo."): value for key, value in pairs}


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


# What each case turns on, in TRL's GRPOConfig terms.
VARIANTS = {
    "plain": {},
    "kl_is_entropy": {"beta": 0.04, "is_mode": "token_truncate", "entropy_coef": 0.01},
    "entropy_mask": {"top_entropy_quantile": 0.3, "entropy_coef": 0.02},
    "off_policy": {"off_policy_mask_threshold": 0.02},
    "everything": {"beta": 0.1, "is_mode": "token_mask", "entropy_coef": 0.01, "delta": 1.4,
                   "top_entropy_quantile": 0.5, "off_policy_mask_threshold": 0.02,
                   "use_bias_correction_kl": False},
}
# The newer loss types' own parameters, off TRL's defaults so that a mix-up would show.
LOSS_ARGS = {"sapo_temperature_pos": 1.5, "sapo_temperature_neg": 2.5, "vespo_k_pos": 1.5,
             "vespo_lambda_pos": 2.5, "vespo_k_neg": 2.5, "vespo_lambda_neg": 1.5}


def _trl_loss(trl_compute_loss, loss_type: str, level: str, v: dict, logprobs, old, behaviour,
              ref, entropy, mask, adv, is_ratio, **extra):
    """TRL's `_compute_loss` on the batch in the variant `v`: (loss, its log-probs leaf, its
    entropies leaf), backward done."""
    lp = logprobs.clone().requires_grad_(True)
    ent = entropy.clone().requires_grad_(True)
    loss = trl_compute_loss(
        logprobs=lp, old_logprobs=old, advantages=adv, mask=mask, loss_type=loss_type,
        epsilon=0.2, epsilon_high=_eps_high(loss_type), delta=_delta(loss_type, v),
        beta=v.get("beta", 0.0), ref_logprobs=ref,
        use_bias_correction_kl=v.get("use_bias_correction_kl", True),
        importance_sampling_ratio=is_ratio, entropies=ent,
        entropy_coef=v.get("entropy_coef", 0.0), max_completion_length=MAX_LEN,
        importance_sampling_level=level, top_entropy_quantile=v.get("top_entropy_quantile", 1.0),
        off_policy_mask_threshold=v.get("off_policy_mask_threshold"),
        sampling_logprobs=behaviour, **LOSS_ARGS, **extra,
    )
    loss.backward()
    return loss, lp, ent


def _rlrun_algo(loss_type: str, level: str, v: dict) -> AlgoConfig:
    """The rlrun settings of TRL's `loss_type` in the variant `v`."""
    eps_high = _eps_high(loss_type)
    cfg = replace(
        AlgoConfig(**_rlrun_settings(loss_type)), ratio_level=level, clip_low=0.2,
        clip_high=eps_high, cispo_cap=eps_high, dual_clip=_delta(loss_type, v),
        kl_coef=v.get("beta", 0.0), kl_bias_correction=v.get("use_bias_correction_kl", True),
        entropy_coef=v.get("entropy_coef", 0.0),
        entropy_mask_quantile=v.get("top_entropy_quantile", 1.0),
        off_policy_mask_threshold=v.get("off_policy_mask_threshold"), is_correction="none",
        is_cap=3.0, sapo_tau_pos=1.5, sapo_tau_neg=2.5, vespo_k_pos=1.5, vespo_lambda_pos=2.5,
        vespo_k_neg=2.5, vespo_lambda_neg=1.5,
    )
    if "is_mode" in v:
        is_level, mode = v["is_mode"].split("_")
        cfg = replace(cfg, is_correction=is_level, is_mode=mode)
    return cfg


def _eps_high(loss_type: str) -> float:
    # CISPO's cap is TRL's epsilon_high; 1.3 binds on some tokens of the test batches.
    return 1.3 if loss_type == "cispo" else 0.28


def _delta(loss_type: str, v: dict) -> float | None:
    return v.get("delta") if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo") else None


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_matches_trl_compute_loss(
    loss_type: str, level: str, variant: str, trl_compute_loss, trl_importance_ratio
) -> None:
    v = VARIANTS[variant]
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(
        12, 7, seed=LOSS_TYPES.index(loss_type) * 10 + list(VARIANTS).index(variant)
    )
    quantile = v.get("top_entropy_quantile", 1.0)
    threshold = v.get("off_policy_mask_threshold")
    is_ratio = None
    if "is_mode" in v:
        is_ratio = trl_importance_ratio(old, behaviour, mask, v["is_mode"], clip_max=3.0)
    theirs, theirs_lp, theirs_ent = _trl_loss(trl_compute_loss, loss_type, level, v, logprobs,
                                              old, behaviour, ref, entropy, mask, adv, is_ratio)
    cfg = _rlrun_algo(loss_type, level, v)
    norm = LossNorm.from_mask(mask, MAX_LEN)
    keep = None
    if quantile < 1.0:
        keep = high_entropy_mask(entropy, mask, entropy_threshold(entropy[mask.bool()], quantile))
        norm = replace(norm, entropy_mask_tokens=float(keep.sum()))
        assert 0 < keep.sum() < mask.sum()  # the mask bites
    ours_lp = logprobs.clone().requires_grad_(True)
    ours_ent = entropy.clone().requires_grad_(True)
    ours, metrics = grpo_loss(
        ours_lp, old, adv, mask, cfg, norm, behaviour_logprobs=behaviour, ref_logprobs=ref,
        entropy=ours_ent, entropy_mask=keep,
    )
    ours.backward()
    if threshold is not None:
        assert 0 < metrics["loss/off_policy_drop_frac"] < 1  # the mask bites

    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, atol=1e-5, rtol=1e-5)
    if theirs_ent.grad is not None:
        torch.testing.assert_close(ours_ent.grad, theirs_ent.grad, atol=1e-5, rtol=1e-5)
    else:
        assert ours_ent.grad is None
    assert ours_lp.grad.abs().sum() > 0


@pytest.mark.parametrize("top_entropy_quantile", [1.0, 0.4])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "cispo"])
def test_mask_truncated_matches_trl(
    loss_type: str, top_entropy_quantile: float, trl_compute_loss
) -> None:
    """`algo.mask_truncated` through rlrun's own batch path (`make_shards` for the normalisers,
    `collate` for the mask) against TRL's `mask_truncated_completions`, which zeroes the
    completion mask of every truncated completion before `_compute_loss`."""
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(12, 7, seed=7)
    truncated = torch.tensor([i % 3 == 1 for i in range(12)])
    samples = [
        TrainSample([1], [5] * int(m.sum()), behaviour[i, : int(m.sum())].tolist(),
                    float(adv[i]), masked=bool(truncated[i]))
        for i, m in enumerate(mask)
    ]
    [update] = make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                           max_len=MAX_LEN, seed=0)[0]
    order = [next(i for i, s in enumerate(samples) if s is u) for u in update.samples]
    logprobs, old, behaviour, ref, entropy, adv = (
        t[order] for t in (logprobs, old, behaviour, ref, entropy, adv))
    ours_mask = collate(update.samples, pad_id=0).mask  # [N, L]
    theirs_mask = mask[order] * (~truncated[order]).unsqueeze(1).long()
    assert torch.equal(ours_mask, theirs_mask.float())
    eps_high = 1.3 if loss_type == "cispo" else 0.28

    theirs_lp = logprobs.clone().requires_grad_(True)
    theirs = trl_compute_loss(
        logprobs=theirs_lp, old_logprobs=old, advantages=adv, mask=theirs_mask,
        loss_type=loss_type, epsilon=0.2, epsilon_high=eps_high, beta=0.04, ref_logprobs=ref,
        entropies=entropy, entropy_coef=0.01, max_completion_length=MAX_LEN,
        top_entropy_quantile=top_entropy_quantile, sampling_logprobs=behaviour,
    )
    theirs.backward()

    cfg = replace(
        AlgoConfig(**_rlrun_settings(loss_type)), clip_low=0.2, clip_high=eps_high,
        cispo_cap=eps_high, kl_coef=0.04, entropy_coef=0.01,
        entropy_mask_quantile=top_entropy_quantile, is_correction="none", mask_truncated=True,
    )
    norm, keep = update.norm, None
    if top_entropy_quantile < 1.0:
        keep = high_entropy_mask(entropy, ours_mask,
                                 entropy_threshold(entropy[ours_mask.bool()], top_entropy_quantile))
        norm = replace(norm, entropy_mask_tokens=float(keep.sum()))
    ours_lp = logprobs.clone().requires_grad_(True)
    ours, _ = grpo_loss(ours_lp, old, adv, ours_mask, cfg, norm, behaviour_logprobs=behaviour,
                        ref_logprobs=ref, entropy=entropy, entropy_mask=keep)
    ours.backward()

    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, atol=1e-5, rtol=1e-5)
    assert ours_lp.grad[truncated[order]].abs().sum() == 0  # no gradient through a cut one
    assert ours_lp.grad.abs().sum() > 0


@pytest.mark.parametrize("delta", [None, 1.25, 1.4])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clip_fractions_match_trl(level: str, delta: float | None, trl_compute_loss) -> None:
    """loss/clip_frac_low, loss/clip_frac_high and loss/clip_frac are TRL's clip_ratio/low_mean,
    high_mean and region_mean: counted on the ratio after the dual-clip cap (TRL's `delta`), so
    with delta 1.25, below 1 + epsilon_high = 1.28, TRL counts no token as clipped high even
    where the raw ratio is above 1.28."""
    logprobs, old, _, _, _, mask, adv = _random_batch(32, 7, seed=3)
    if level == "sequence":  # a sequence's ratio averages its tokens': spread them wider
        logprobs = old + 3 * (logprobs - old)
    theirs_metrics: dict[str, list[float]] = {}
    theirs = trl_compute_loss(
        logprobs=logprobs, old_logprobs=old, advantages=adv, mask=mask, loss_type="grpo",
        epsilon=0.2, epsilon_high=0.28, delta=delta, max_completion_length=MAX_LEN,
        importance_sampling_level=level, metrics=theirs_metrics,
    )
    cfg = replace(AlgoConfig(**_rlrun_settings("grpo")), ratio_level=level, clip_low=0.2,
                  clip_high=0.28, dual_clip=delta, is_correction="none")
    ours, metrics = grpo_loss(logprobs, old, adv, mask, cfg, LossNorm.from_mask(mask, MAX_LEN))

    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    for name, trl_name in [("loss/clip_frac_low", "clip_ratio/low_mean"),
                           ("loss/clip_frac_high", "clip_ratio/high_mean"),
                           ("loss/clip_frac", "clip_ratio/region_mean")]:
        assert metrics[name] == pytest.approx(theirs_metrics[trl_name][0], abs=1e-6), name
    # The batch has raw ratios above 1 + epsilon_high with A > 0 at either level, so counting
    # on the raw ratio would log clipped-high tokens that TRL (with delta 1.25) does not.
    log_ratio = (logprobs - old) * mask
    raw = log_ratio.sum(-1) / mask.sum(-1) if level == "sequence" else log_ratio
    raw_high = (raw.exp() > 1.28) & (adv.unsqueeze(-1) > 0 if level == "token" else adv > 0)
    assert raw_high.any()
    assert (theirs_metrics["clip_ratio/high_mean"][0] == 0) == (delta == 1.25)


# rlrun's metric of each TRL metric `_compute_loss` logs (TRL's name: rlrun's).
METRICS = {"entropy": "loss/entropy", "kl": "loss/kl", "clip_ratio/low_mean": "loss/clip_frac_low",
           "clip_ratio/high_mean": "loss/clip_frac_high",
           "clip_ratio/region_mean": "loss/clip_frac", "cispo_clip_ratio": "loss/cispo_cap_frac",
           "vespo/phi_seq_mean": "loss/vespo_weight_mean"}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_env_mask_matches_trl(
    loss_type: str, level: str, variant: str, trl_compute_loss, trl_importance_ratio
) -> None:
    """Multi-turn trajectories: spans of observation tokens inside the responses (behaviour
    log-prob 0 there) go through rlrun's batch path as `TrainSample.env_mask` (`make_shards`
    for the normalisers, `collate` for the mask; log-probs, pi_old and the reference's masked
    as `response_logprobs` returns them) and to TRL as its `tool_mask` (a rollout_func's
    `env_mask`, padded with 1 as TRL pads it), which `_compute_loss` multiplies into the
    completion mask, as the importance ratio and `num_items_in_batch` do. The same loss,
    gradients (none on observation tokens) and logged metrics."""
    v = VARIANTS[variant]
    # Seeds on which every mask bites (asserted below).
    seed = 400 + LOSS_TYPES.index(loss_type) * 10 + list(VARIANTS).index(variant)
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(12, 9, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    env = (torch.rand(mask.shape, generator=gen) < 0.6).long()  # [N, L]
    env[:, 0] = 1  # a trajectory starts with the model's turn
    tool_mask = torch.where(mask.bool(), env, 1)  # TRL pads its tool_mask with 1
    observation = mask.bool() & (env == 0)
    assert observation.any()
    behaviour = behaviour.masked_fill(observation, 0.0)
    samples = [TrainSample([1], [5] * int(m.sum()), behaviour[i, : int(m.sum())].tolist(),
                           float(adv[i]), env_mask=env[i, : int(m.sum())].tolist())
               for i, m in enumerate(mask)]
    [update] = make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                           max_len=MAX_LEN, seed=0)[0]
    order = [next(i for i, s in enumerate(samples) if s is u) for u in update.samples]
    batch = collate(update.samples, pad_id=0)  # as wide as the longest response
    width = batch.mask.shape[1]
    adv = adv[order]
    logprobs, old, behaviour, ref, entropy, mask, tool_mask, observation = (
        t[order, :width] for t in (logprobs, old, behaviour, ref, entropy, mask, tool_mask,
                                   observation))
    ours_mask = batch.mask  # [N, L]
    assert torch.equal(ours_mask, (mask * tool_mask).float())
    assert torch.equal(batch.behaviour_logprobs, behaviour * mask)

    quantile = v.get("top_entropy_quantile", 1.0)
    threshold = v.get("off_policy_mask_threshold")
    is_ratio = None
    if "is_mode" in v:
        is_ratio = trl_importance_ratio(old, behaviour, mask, v["is_mode"], clip_max=3.0,
                                        tool_mask=tool_mask)
    theirs_metrics: dict[str, list[float]] = {}
    theirs, theirs_lp, theirs_ent = _trl_loss(
        trl_compute_loss, loss_type, level, v, logprobs, old, behaviour, ref, entropy, mask,
        adv, is_ratio, metrics=theirs_metrics, tool_mask=tool_mask)
    cfg = _rlrun_algo(loss_type, level, v)
    norm, keep = update.norm, None
    assert norm.total_tokens == float((mask * tool_mask).sum())
    if quantile < 1.0:
        keep = high_entropy_mask(entropy, ours_mask,
                                 entropy_threshold(entropy[ours_mask.bool()], quantile))
        norm = replace(norm, entropy_mask_tokens=float(keep.sum()))
        assert 0 < keep.sum() < ours_mask.sum()  # the mask bites
    ours_lp = logprobs.clone().requires_grad_(True)
    ours_ent = entropy.clone().requires_grad_(True)
    ours, metrics = grpo_loss(
        ours_lp * ours_mask, old * ours_mask, batch.advantages, ours_mask, cfg, norm,
        behaviour_logprobs=batch.behaviour_logprobs, ref_logprobs=ref * ours_mask,
        entropy=ours_ent, entropy_mask=keep,
    )
    ours.backward()
    if threshold is not None:
        assert 0 < metrics["loss/off_policy_drop_frac"] < 1  # the mask bites

    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, atol=1e-5, rtol=1e-5)
    assert ours_lp.grad[observation].abs().sum() == 0
    assert ours_lp.grad.abs().sum() > 0
    if theirs_ent.grad is not None:
        torch.testing.assert_close(ours_ent.grad, theirs_ent.grad, atol=1e-5, rtol=1e-5)
        assert ours_ent.grad[observation].abs().sum() == 0
    else:
        assert ours_ent.grad is None
    compared = [name for name in METRICS if name in theirs_metrics]
    assert "entropy" in compared
    for name in compared:
        assert metrics[METRICS[name]] == pytest.approx(theirs_metrics[name][0], abs=1e-6), name
