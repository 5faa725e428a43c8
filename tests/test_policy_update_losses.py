"""The learner step with the new loss modes: the entropy mask's threshold comes from a no-grad
pass over the whole update, all-gathered over ranks, so 1 and 2 DDP ranks make the same update."""

from __future__ import annotations

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlrun import batching
from rlrun.config import load_config
from rlrun.models import load_tokenizer, resolve_model_path
from rlrun.policy_model import build_policy
from rlrun.policy_update import train_on_shard, warmup_schedule

MODES = {
    "entropy_mask_gspo_sapo": ["algo.entropy_mask_quantile=0.4", "algo.entropy_coef=0.01",
                               "algo.ratio_level=sequence", "algo.policy_loss=sapo",
                               "algo.loss_agg=seq_mean_token_mean"],
    "cispo_off_policy_luspo": ["algo.policy_loss=cispo", "algo.off_policy_mask_threshold=0.01",
                               "algo.loss_agg=seq_mean_token_sum", "algo.kl_coef=0.1"],
    "vespo": ["algo.policy_loss=vespo", "algo.entropy_mask_quantile=0.7"],
    "mask_truncated_entropy_mask": ["algo.mask_truncated=true", "algo.entropy_mask_quantile=0.5",
                                    "algo.loss_agg=token_mean"],
}


def samples(masked: bool = False) -> list[batching.TrainSample]:
    """Eight samples; with `masked`, every third is kept out of the loss (`masked=True` is what
    `to_train_samples` sets on a truncated completion under `algo.mask_truncated`)."""
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        n = 2 + i % 3
        response = torch.randint(3, 200, (n,), generator=gen).tolist()
        behaviour = (-5.5 + 0.5 * torch.randn(n, generator=gen)).tolist()
        out.append(batching.TrainSample([40 + i % 2, 41, 42], response, behaviour,
                                        advantage=float(i % 4) - 1.5,
                                        masked=masked and i % 3 == 1))
    return out


def config(world: int, mode: str):
    # Two mini-batches of two micro-batches per rank: the threshold spans micro-batches too.
    return load_config(None, [f"learner.num_workers={world}", "learner.micro_batch_size=2",
                              "algo.mini_batches=2", *MODES[mode]])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return resolve_model_path(load_config().model, str(tmp_path_factory.mktemp("models")))


def test_entropy_mask_keeps_the_top_fraction_of_the_update(tiny):
    cfg = config(1, "entropy_mask_gspo_sapo")
    policy = build_policy(cfg, tiny, torch.device("cpu"), 1)
    optimizer = torch.optim.SGD(policy.trainable(), lr=0.1)
    shard = batching.make_shards(samples(), step=0, world_size=1, epochs=1, mini_batches=2,
                                 max_len=8, seed=0)[0]
    metrics = train_on_shard(policy.train_module, optimizer, warmup_schedule(optimizer, 0), shard,
                             cfg, load_tokenizer(tiny).pad_token_id)
    # 40% of each update's tokens, up to ties and the interpolated threshold
    assert 0.3 <= metrics["loss/entropy_mask_frac"] <= 0.5
    assert metrics["optim/grad_norm"] > 0


def test_a_masked_sample_changes_nothing_in_the_update(tiny):
    """Its advantage and its tokens' entropies are out of the loss and the entropy quantile."""
    cfg = config(1, "mask_truncated_entropy_mask")
    pad_id = load_tokenizer(tiny).pad_token_id
    deltas = []
    for flip in (False, True):
        torch.manual_seed(0)
        policy = build_policy(cfg, tiny, torch.device("cpu"), 1)
        optimizer = torch.optim.SGD(policy.trainable(), lr=0.1)
        batch = samples(masked=True)
        if flip:
            for s in batch:
                if s.masked:
                    s.advantage, s.response_ids = -10 * s.advantage, [7] * len(s.response_ids)
        shard = batching.make_shards(batch, step=0, world_size=1, epochs=1, mini_batches=2,
                                     max_len=8, seed=0)[0]
        before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        train_on_shard(policy.train_module, optimizer, warmup_schedule(optimizer, 0), shard, cfg,
                       pad_id)
        deltas.append({n: before[n] - p.detach() for n, p in policy.model.named_parameters()})
    for name, d in deltas[0].items():
        torch.testing.assert_close(deltas[1][name], d, atol=1e-6, rtol=1e-5, msg=name)
    assert any(d.abs().max() > 1e-4 for d in deltas[0].values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_step(rank: int, world: int, port: int, path: str, out: str) -> None:
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    for mode in MODES:
        cfg = config(world, mode)
        policy = build_policy(cfg, path, torch.device("cpu"), world)
        optimizer = torch.optim.SGD(policy.trainable(), lr=0.1)
        masked = "algo.mask_truncated=true" in MODES[mode]
        shard = batching.make_shards(samples(masked), step=0, world_size=world, epochs=1,
                                     mini_batches=2, max_len=8, seed=0)[rank]
        before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        metrics = train_on_shard(policy.train_module, optimizer, warmup_schedule(optimizer, 0),
                                 shard, cfg, load_tokenizer(path).pad_token_id, world_size=world,
                                 ref_model=policy.ref)
        if rank == 0:
            deltas = {n: before[n] - p.detach() for n, p in policy.model.named_parameters()}
            torch.save(deltas, f"{out}/deltas-{mode}-{world}.pt")
        with open(f"{out}/metrics-{mode}-{world}-{rank}.json", "w") as f:
            json.dump(metrics, f)
    if world > 1:
        dist.destroy_process_group()


@pytest.mark.slow
def test_one_and_two_ddp_ranks_make_the_same_update(tiny, tmp_path):
    one_step(0, 1, 0, tiny, str(tmp_path))
    mp.spawn(one_step, args=(2, free_port(), tiny, str(tmp_path)), nprocs=2)
    for mode in MODES:
        per_rank = [json.loads((tmp_path / f"metrics-{mode}-2-{r}.json").read_text())
                    for r in (0, 1)]
        single = json.loads((tmp_path / f"metrics-{mode}-1-0.json").read_text())
        # ranks hold shares of the global loss (and of the masked fractions)
        for key in ("loss/total", "loss/entropy_mask_frac", "loss/off_policy_drop_frac"):
            if key in single:
                assert sum(m[key] for m in per_rank) == pytest.approx(single[key], abs=1e-5), (
                    mode, key)
        assert 0 < single.get("loss/entropy_mask_frac", 0.5) < 1, mode  # the masks bite
        assert single.get("loss/off_policy_drop_frac", 0.5) > 0, mode
        one = torch.load(tmp_path / f"deltas-{mode}-1.pt")
        two = torch.load(tmp_path / f"deltas-{mode}-2.pt")
        for name, d in one.items():
            torch.testing.assert_close(two[name], d, atol=1e-5, rtol=1e-4, msg=f"{mode} {name}")
        assert any(d.abs().max() > 1e-4 for d in one.values()), mode
