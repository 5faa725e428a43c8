"""Every new loss mode gives one global mini-batch the same loss and gradient on 1 and 2 ranks:
simulated ranks with micro-batches, and two real gloo processes whose entropy threshold is
all-gathered through the process group."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from rlrun.algo import (
    LossNorm,
    ddp_loss,
    entropy_threshold,
    gather_entropies,
    grpo_loss,
    high_entropy_mask,
    merge_metrics,
    plan_minibatches,
)
from rlrun.config import AlgoConfig

MODES = {
    "gspo": AlgoConfig(ratio_level="sequence", loss_agg="seq_mean_token_mean",
                       is_correction="token", clip_high=0.28),
    "cispo": AlgoConfig(policy_loss="cispo", cispo_cap=1.2, is_correction="token", kl_coef=0.05),
    "sapo": AlgoConfig(policy_loss="sapo", loss_agg="seq_mean_token_mean",
                       is_correction="sequence"),
    "vespo": AlgoConfig(policy_loss="vespo", is_correction="token", entropy_coef=0.01),
    "luspo": AlgoConfig(loss_agg="seq_mean_token_sum", ratio_level="sequence",
                        is_correction="none"),
    "off_policy": AlgoConfig(off_policy_mask_threshold=0.02, is_correction="token"),
    "entropy_mask": AlgoConfig(entropy_mask_quantile=0.3, entropy_coef=0.01, kl_coef=0.05),
    "all_at_once": AlgoConfig(ratio_level="sequence", policy_loss="cispo", cispo_cap=1.1,
                              entropy_mask_quantile=0.5, entropy_coef=0.02,
                              off_policy_mask_threshold=0.02, loss_agg="seq_mean_token_sum_norm"),
}


def _random_batch(n: int, length: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, length, generator=gen) * 3  # [N, L]
    logprobs = old + 0.3 * torch.randn(n, length, generator=gen)
    behaviour = old + 0.3 * torch.randn(n, length, generator=gen)
    ref = old + 0.5 * torch.randn(n, length, generator=gen)
    entropy = torch.rand(n, length, generator=gen) * 2
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    mask = (torch.arange(length) < lengths.unsqueeze(1)).float()  # [N, L]
    adv = torch.randn(n, generator=gen)
    return logprobs, old, behaviour, ref, entropy, mask, adv


def _with_entropy_mask(cfg: AlgoConfig, norm: LossNorm, entropies: torch.Tensor):
    """The threshold over `entropies` (the whole mini-batch's) and `norm` with its count."""
    if cfg.entropy_mask_quantile == 1.0:
        return None, norm
    threshold = entropy_threshold(entropies, cfg.entropy_mask_quantile)
    return threshold, replace(norm, entropy_mask_tokens=float((entropies >= threshold).sum()))


@pytest.mark.parametrize("mode", list(MODES))
def test_two_simulated_ranks_sum_to_one_rank(mode: str) -> None:
    cfg = MODES[mode]
    logprobs, old, behaviour, ref, entropy, mask, adv = _random_batch(8, 6, seed=11)
    weight = torch.randn(6, requires_grad=True)  # a stand-in parameter the log-probs depend on

    def rank_loss(idx, norm, threshold):
        lp, ent = logprobs[idx] + 0.1 * weight, entropy[idx] + 0.1 * weight
        keep = None if threshold is None else high_entropy_mask(ent, mask[idx], threshold)
        return grpo_loss(
            lp, old[idx], adv[idx], mask[idx], cfg, norm, behaviour_logprobs=behaviour[idx],
            ref_logprobs=ref[idx], entropy=ent, entropy_mask=keep,
        )

    global_entropies = (entropy + 0.1 * weight).detach()[mask.bool()]
    threshold, norm = _with_entropy_mask(cfg, LossNorm.from_mask(mask, 6), global_entropies)
    single, single_metrics = rank_loss(torch.arange(8), norm, threshold)
    (grad_single,) = torch.autograd.grad(single, weight)

    [mb] = plan_minibatches(mask, 1, 2, 6, seed=0, step=0, epoch=0)
    shares, grads, metrics = [], [], []
    for shard in mb.shards:
        rank_grad = torch.zeros(6)
        for micro in shard.chunk(2):
            share, m = rank_loss(micro, norm, threshold)
            rank_grad += torch.autograd.grad(ddp_loss(share, 2), weight)[0]
            shares.append(share)
            metrics.append(m)
        grads.append(rank_grad)

    torch.testing.assert_close(torch.stack(shares).sum(), single)
    torch.testing.assert_close(torch.stack(grads).mean(dim=0), grad_single)
    merged = merge_metrics(metrics)
    for key, value in single_metrics.items():
        assert merged[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert grad_single.abs().sum() > 0


# ---- two real gloo ranks ------------------------------------------------------------------

N, L, D, V = 8, 6, 4, 7  # sequences, positions, feature width, vocabulary


def _data():
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(N, L, D, generator=gen)  # [N, L, D]
    tokens = torch.randint(0, V, (N, L), generator=gen)  # [N, L]
    mask = (torch.arange(L) < torch.randint(1, L + 1, (N, 1), generator=gen)).float()  # [N, L]
    advantages = torch.randn(N, generator=gen)  # [N]
    behaviour_noise = 0.2 * torch.randn(N, L, generator=gen)
    old_noise = 0.1 * torch.randn(N, L, generator=gen)
    return features, tokens, mask, advantages, behaviour_noise, old_noise


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(D, V)


def _forward(model, features, tokens):
    logp_all = torch.log_softmax(model(features), dim=-1)  # [n, L, V]
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [n, L]
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # [n, L]
    return logp, entropy


def _step(model, cfg: AlgoConfig, rank: int, world_size: int):
    """One optimizer step on this rank: the loss shares' sum, the threshold, the gradients."""
    features, tokens, mask, advantages, behaviour_noise, old_noise = _data()
    with torch.no_grad():
        old, _ = _forward(model, features, tokens)  # [N, L]
    behaviour, ref, old = old + behaviour_noise, old - 0.3, old + old_noise
    [mb] = plan_minibatches(mask, 1, world_size, max_len=L, seed=0, step=0, epoch=0)
    shard = mb.shards[rank]
    norm, threshold = mb.norm, torch.tensor(float("nan"))
    if cfg.entropy_mask_quantile < 1.0:
        # The learner's no-grad pass: this rank's entropies, then everyone's.
        with torch.no_grad():
            _, entropy = _forward(model, features[shard], tokens[shard])
        everything = gather_entropies(entropy[mask[shard].bool()], world_size)
        threshold, norm = _with_entropy_mask(cfg, norm, everything)
    total = torch.zeros(())
    for micro in shard.chunk(2):
        logprobs, entropy = _forward(model, features[micro], tokens[micro])
        keep = None
        if cfg.entropy_mask_quantile < 1.0:
            keep = high_entropy_mask(entropy, mask[micro], threshold)
        share, _ = grpo_loss(
            logprobs, old[micro], advantages[micro], mask[micro], cfg, norm,
            behaviour_logprobs=behaviour[micro], ref_logprobs=ref[micro], entropy=entropy,
            entropy_mask=keep,
        )
        ddp_loss(share, world_size).backward()
        total += share.detach()
    if world_size > 1:
        dist.all_reduce(total)
    return total, threshold, [p.grad.detach().clone() for p in model.parameters()]


def _rank_main(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)
    try:
        results = {}
        for mode, cfg in MODES.items():
            model = DistributedDataParallel(_model())
            results[mode] = _step(model, cfg, rank, world_size)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()  # neither rank tears gloo down while the other still talks to it
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_in_every_mode(tmp_path) -> None:
    mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for mode, cfg in MODES.items():
        loss, threshold, grads = _step(_model(), cfg, rank=0, world_size=1)
        for rank in (0, 1):
            got_loss, got_threshold, got_grads = torch.load(tmp_path / f"rank{rank}.pt")[mode]
            torch.testing.assert_close(got_loss, loss, rtol=1e-5, atol=1e-7, msg=mode)
            torch.testing.assert_close(got_threshold, threshold, equal_nan=True, msg=mode)
            for got, want in zip(got_grads, grads, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, msg=mode)
        assert any(g.abs().sum() > 0 for g in grads), mode
