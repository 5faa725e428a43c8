"""Multi-turn trajectories: the environment's observation tokens (`TrainSample.env_mask` 0) are
out of the loss, its normalisers and its metrics, through the learner's own path
(`make_shards` for the normalisers, `collate` for the mask, then `grpo_loss`).

What pins it: given the same per-token values on its model tokens, a trajectory gives exactly
the loss, metrics and gradients of those model tokens laid out as a plain response of their own
(the observations cut out), for every aggregation, policy term, ratio level and mask, and its
observation tokens get no gradient. (The model's log-probs themselves depend on the
observations, which sit in the context; tests/test_policy_update.py checks that end to end.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from rlrun.algo import LossNorm, entropy_threshold, grpo_loss, high_entropy_mask
from rlrun.batching import TrainSample, make_shards
from rlrun.config import AlgoConfig
from rlrun.policy_update import collate

MAX_LEN = 12

# What each case turns on besides the policy term, ratio level and aggregation.
EXTRAS = {
    "plain": {"is_correction": "none"},
    "kl_token_is_entropy": {"kl_coef": 0.05, "entropy_coef": 0.01, "is_correction": "token",
                            "is_cap": 1.2},
    "masks_sequence_is": {"entropy_mask_quantile": 0.5, "entropy_coef": 0.02,
                          "off_policy_mask_threshold": 0.01, "is_correction": "sequence",
                          "is_mode": "mask", "is_cap": 1.5, "kl_coef": 0.1,
                          "kl_bias_correction": False},
    "step_advantages": {"is_correction": "token", "is_mode": "mask", "is_cap": 1.3},
}
VALUES = ("logprobs", "old", "ref", "entropy")


def _trajectories(
    n: int, seed: int, step: bool
) -> tuple[list[TrainSample], list[TrainSample], list[dict[str, torch.Tensor]]]:
    """n trajectories with observation spans inside their responses (behaviour log-prob 0
    there); the same model tokens as plain responses of their own; and each trajectory's
    per-token log-probs, pi_old, reference log-probs and entropies ([L_i] each). With `step`,
    per-token advantages, absurd on the observation tokens. Every fourth one is `masked`."""
    gen = torch.Generator().manual_seed(seed)
    full, alone, values = [], [], []
    for i in range(n):
        length = int(torch.randint(4, MAX_LEN + 1, (1,), generator=gen))
        env = torch.rand(length, generator=gen) < 0.6
        env[0] = True  # a trajectory starts with the model's turn
        old = -torch.rand(length, generator=gen) * 3
        row = {"logprobs": old + 0.3 * torch.randn(length, generator=gen), "old": old,
               "ref": old + 0.5 * torch.randn(length, generator=gen),
               "entropy": torch.rand(length, generator=gen) * 2}
        behaviour = torch.where(env, old + 0.3 * torch.randn(length, generator=gen), 0.0)
        adv = float(torch.randn(1, generator=gen))
        tokens = torch.where(env, adv + 0.5 * torch.randn(length, generator=gen), 50.0)
        ids = torch.randint(3, 200, (length,), generator=gen)
        masked = i % 4 == 3
        full.append(TrainSample([1, 2], ids.tolist(), behaviour.tolist(), adv, masked=masked,
                                token_advantages=tokens.tolist() if step else None,
                                env_mask=env.long().tolist()))
        alone.append(TrainSample([1, 2], ids[env].tolist(), behaviour[env].tolist(), adv,
                                 masked=masked,
                                 token_advantages=tokens[env].tolist() if step else None))
        values.append(row)
    return full, alone, values


@dataclass
class LearnerLoss:
    """What the learner computes on one update; leaves in the update's order, [N, L]."""

    samples: list[TrainSample]  # in the update's order
    norm: LossNorm
    loss: torch.Tensor
    metrics: dict[str, float]
    logprobs: torch.Tensor  # with .grad
    entropy: torch.Tensor  # with .grad (None without an entropy term)


def _learner_loss(
    samples: list[TrainSample], values: list[dict[str, torch.Tensor]], cfg: AlgoConfig
) -> LearnerLoss:
    """The loss on `samples` as one update: the normalisers from `make_shards`, the mask from
    `collate`; log-probs, pi_old and the reference's masked as `response_logprobs` returns
    them; the entropy threshold over the tokens the mask counts."""
    [update] = make_shards(samples, step=3, world_size=1, epochs=1, mini_batches=1,
                           max_len=MAX_LEN, seed=1)[0]
    order = [next(i for i, s in enumerate(samples) if s is u) for u in update.samples]
    batch = collate(update.samples, pad_id=0)
    per_token = {name: torch.zeros(batch.mask.shape) for name in VALUES}  # [N, L] each
    for row, i in enumerate(order):
        for name in VALUES:
            per_token[name][row, : len(samples[i].response_ids)] = values[i][name]
    logprobs = per_token["logprobs"].requires_grad_(True)
    entropy = per_token["entropy"].requires_grad_(True)
    norm, keep = update.norm, None
    if cfg.entropy_mask_quantile < 1.0:
        threshold = entropy_threshold(entropy.detach()[batch.mask.bool()],
                                      cfg.entropy_mask_quantile)
        keep = high_entropy_mask(entropy, batch.mask, threshold)
        norm = replace(norm, entropy_mask_tokens=float(keep.sum()))
    loss, metrics = grpo_loss(
        logprobs * batch.mask, per_token["old"] * batch.mask, batch.advantages, batch.mask, cfg,
        norm, behaviour_logprobs=batch.behaviour_logprobs,
        ref_logprobs=per_token["ref"] * batch.mask, entropy=entropy, entropy_mask=keep,
        token_advantages=batch.token_advantages,
    )
    loss.backward()
    return LearnerLoss(update.samples, norm, loss, metrics, logprobs, entropy)


def _model_token_rows(t: torch.Tensor, samples: list[TrainSample]) -> torch.Tensor:
    """Each sample's row of `t` [N, L] at its model tokens, left-aligned, zero past them."""
    rows = [row[: len(s.env_mask)][torch.tensor(s.env_mask, dtype=torch.bool)]
            for row, s in zip(t, samples, strict=True)]
    out = torch.zeros(len(rows), max(r.numel() for r in rows))
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out


@pytest.mark.parametrize("extras", list(EXTRAS))
@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean",
                                      "seq_mean_token_sum_norm", "seq_mean_token_sum"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
@pytest.mark.parametrize("policy_loss", ["clip", "cispo", "sapo", "vespo"])
def test_a_trajectory_trains_as_its_model_tokens_alone(
    policy_loss: str, ratio_level: str, loss_agg: str, extras: str
) -> None:
    settings = dict(EXTRAS[extras])
    if policy_loss == "vespo" and settings.get("is_correction") == "sequence":
        settings["is_correction"] = "token"  # VESPO folds token weights in; it refuses these
    cfg = replace(AlgoConfig(), policy_loss=policy_loss, ratio_level=ratio_level,
                  loss_agg=loss_agg, clip_high=0.28, cispo_cap=1.3,
                  dual_clip=1.4 if policy_loss == "clip" else None, **settings)
    full, alone, values = _trajectories(8, seed=list(EXTRAS).index(extras),
                                        step=extras == "step_advantages")
    cut = [{name: row[name][torch.tensor(s.env_mask, dtype=torch.bool)] for name in VALUES}
           for row, s in zip(values, full, strict=True)]
    ours = _learner_loss(full, values, cfg)
    theirs = _learner_loss(alone, cut, cfg)

    # The same shuffle (it depends on the number of samples only), so rows line up.
    assert [s.advantage for s in ours.samples] == [s.advantage for s in theirs.samples]
    assert ours.norm == theirs.norm  # the normalisers count model tokens only
    assert ours.norm.total_tokens == sum(sum(s.env_mask) for s in full if not s.masked)
    torch.testing.assert_close(ours.loss, theirs.loss, rtol=1e-6, atol=1e-7)
    assert ours.metrics.keys() == theirs.metrics.keys()
    for key, value in ours.metrics.items():
        assert value == pytest.approx(theirs.metrics[key], rel=1e-5, abs=1e-7), key
    torch.testing.assert_close(_model_token_rows(ours.logprobs.grad, ours.samples),
                               theirs.logprobs.grad, rtol=1e-5, atol=1e-7)
    observation = torch.zeros(ours.logprobs.shape, dtype=torch.bool)  # [N, L]
    for i, s in enumerate(ours.samples):
        observation[i, : len(s.env_mask)] = torch.tensor(s.env_mask) == 0
    assert observation.any()
    assert ours.logprobs.grad[observation].abs().sum() == 0
    assert ours.logprobs.grad.abs().sum() > 0
    if theirs.entropy.grad is None:
        assert ours.entropy.grad is None
    else:
        torch.testing.assert_close(_model_token_rows(ours.entropy.grad, ours.samples),
                                   theirs.entropy.grad, rtol=1e-5, atol=1e-7)
        assert ours.entropy.grad[observation].abs().sum() == 0


def test_collate_and_make_shards_leave_observations_out() -> None:
    """The mask is the env mask of each unmasked sample, padded, in both layouts; the token
    count is its sum."""
    samples = [TrainSample([1, 2], [5, 6, 7, 8, 9], [0.0] * 5, 1.0, env_mask=[1, 0, 0, 1, 1]),
               TrainSample([1, 2], [5, 6, 7], [0.0] * 3, -1.0, env_mask=[1, 0, 1]),
               TrainSample([3], [5, 6], [0.0] * 2, 0.5),
               TrainSample([3], [5, 6, 7, 8], [0.0] * 4, 0.5, masked=True,
                           env_mask=[1, 1, 0, 1])]
    expected = torch.tensor([[1, 0, 0, 1, 1], [1, 0, 1, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]],
                            dtype=torch.float32)
    assert torch.equal(collate(samples, pad_id=0).mask, expected)
    assert torch.equal(collate(samples, pad_id=0, share_prompts=True).mask, expected)
    [[update]] = make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                             max_len=8, seed=0)
    assert update.norm == LossNorm(total_tokens=7.0, total_seqs=4.0, max_len=8)


def test_an_empty_env_mask_is_an_all_ones_one() -> None:
    """Bit for bit: the same mask tensor, the same normalisers, the same loss and gradients."""
    _, alone, values = _trajectories(8, seed=5, step=False)
    ones = [replace(s, env_mask=[1] * len(s.response_ids)) for s in alone]
    cut = [{name: row[name][: len(s.response_ids)] for name in VALUES}
           for row, s in zip(values, alone, strict=True)]
    assert torch.equal(collate(alone, 0).mask, collate(ones, 0).mask)
    assert collate(alone, 0).mask.dtype == collate(ones, 0).mask.dtype
    cfg = replace(AlgoConfig(), kl_coef=0.1, entropy_coef=0.01, entropy_mask_quantile=0.5,
                  ratio_level="sequence", loss_agg="seq_mean_token_mean")
    empty, full = _learner_loss(alone, cut, cfg), _learner_loss(ones, cut, cfg)
    assert empty.norm == full.norm
    assert torch.equal(empty.loss, full.loss)
    assert empty.metrics == full.metrics
    assert torch.equal(empty.logprobs.grad, full.logprobs.grad)
    assert torch.equal(empty.entropy.grad, full.entropy.grad)


def test_an_env_mask_needs_one_entry_per_response_token() -> None:
    with pytest.raises(ValueError, match="env_mask has 2 entries for 3 response tokens"):
        TrainSample([1], [5, 6, 7], [0.0] * 3, 1.0, env_mask=[1, 0])
