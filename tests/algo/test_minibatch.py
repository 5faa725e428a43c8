"""Mini-batch plans, and a real 2-process gloo DDP run matching 1 process gradient for gradient."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from rlrun.algo import LossNorm, ddp_loss, grpo_loss, plan_minibatches
from rlrun.config import AlgoConfig

MASK = (torch.arange(5) < torch.tensor([5, 1, 3, 2, 4, 5, 2, 1]).unsqueeze(1)).float()  # [8, 5]


def test_plan_partitions_every_sample_once_per_epoch() -> None:
    plan = plan_minibatches(MASK, mini_batches=2, world_size=2, max_len=5, seed=0, step=3, epoch=1)
    assert len(plan) == 2
    assert all(len(mb.shards) == 2 and all(len(s) == 2 for s in mb.shards) for mb in plan)
    assert sorted(torch.cat([mb.indices for mb in plan]).tolist()) == list(range(8))


def test_plan_norms_count_the_whole_mini_batch() -> None:
    for mb in plan_minibatches(MASK, 4, 2, max_len=7, seed=1, step=0, epoch=0):
        assert mb.norm == LossNorm(float(MASK[mb.indices].sum()), 2.0, 7)
    # tokens over all mini-batches add up to the rollout batch's: 5+1+3+2+4+5+2+1 = 23
    plan = plan_minibatches(MASK, 4, 1, max_len=7, seed=1, step=0, epoch=0)
    assert sum(mb.norm.total_tokens for mb in plan) == 23.0


def test_plan_is_deterministic_and_varies_with_step_and_epoch() -> None:
    def order(**kw):
        return torch.cat([mb.indices for mb in plan_minibatches(MASK, 2, 2, 5, **kw)]).tolist()

    assert order(seed=0, step=0, epoch=0) == order(seed=0, step=0, epoch=0)
    seen = {tuple(order(seed=s, step=t, epoch=e)) for s in (0, 1) for t in (0, 1) for e in (0, 1)}
    assert len(seen) == 8


def test_plan_without_shuffle_keeps_order() -> None:
    plan = plan_minibatches(MASK, 2, 2, 5, seed=0, step=0, epoch=0, shuffle=False)
    assert [s.tolist() for mb in plan for s in mb.shards] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_plan_rejects_uneven_split_naming_the_keys() -> None:
    with pytest.raises(ValueError, match="algo.mini_batches=3.*learner.num_workers=1"):
        plan_minibatches(MASK, 3, 1, 5, seed=0, step=0, epoch=0)


# ---- a real 2-rank DDP run over gloo -------------------------------------------------------

CFG = AlgoConfig(loss_agg="token_mean", is_correction="token", kl_coef=0.05, clip_high=0.28)
N, L, D, V = 8, 6, 4, 7  # sequences, positions, feature width, vocabulary


def _data():
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(N, L, D, generator=gen)  # [N, L, D]
    tokens = torch.randint(0, V, (N, L), generator=gen)  # [N, L]
    mask = (torch.arange(L) < torch.randint(1, L + 1, (N, 1), generator=gen)).float()  # [N, L]
    advantages = torch.randn(N, generator=gen)  # [N]
    return features, tokens, mask, advantages


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(D, V)


def _token_logprobs(model, features, tokens):
    logp = torch.log_softmax(model(features), dim=-1)  # [n, L, V]
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [n, L]


def _step_gradients(model, rank: int, world_size: int) -> list[torch.Tensor]:
    """One optimizer step's gradients on this rank: plan, micro-batch, backward ddp_loss."""
    features, tokens, mask, advantages = _data()
    with torch.no_grad():
        old = _token_logprobs(model, features, tokens)  # [N, L]
    behaviour = old + 0.2 * torch.randn(N, L, generator=torch.Generator().manual_seed(1))
    ref = old - 0.3
    old = old + 0.1 * torch.randn(N, L, generator=torch.Generator().manual_seed(2))
    [mb] = plan_minibatches(mask, 1, world_size, max_len=L, seed=0, step=0, epoch=0)
    for micro in mb.shards[rank].chunk(2):
        logprobs = _token_logprobs(model, features[micro], tokens[micro])
        share, _ = grpo_loss(
            logprobs, old[micro], advantages[micro], mask[micro], CFG, mb.norm,
            behaviour_logprobs=behaviour[micro], ref_logprobs=ref[micro],
        )
        ddp_loss(share, world_size).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _rank_main(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world_size)
    try:
        model = DistributedDataParallel(_model())
        grads = _step_gradients(model, rank, world_size)
        torch.save(grads, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()  # neither rank tears gloo down while the other still talks to it
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process(tmp_path) -> None:
    single = _step_gradients(_model(), rank=0, world_size=1)
    mp.spawn(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"rank{rank}.pt")
        for got, want in zip(grads, single, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert any(g.abs().sum() > 0 for g in single)
