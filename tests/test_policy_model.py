"""The learner's policy under each strategy, on CPU with gloo: FSDP2 computes the same loss and
gradients as DDP; LoRA trains only adapters; restored optimizer state sits
on the parameters' device; the pure-bf16 guard."""

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlrun import batching, checkpoint
from rlrun.config import ConfigError, load_config
from rlrun.models import load_tokenizer, resolve_model_path
from rlrun.policy_model import build_policy
from rlrun.policy_update import train_on_shard, warmup_schedule
from rlrun.weights.source import WeightSource


def samples() -> list[batching.TrainSample]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        n = 2 + i % 3
        response = torch.randint(3, 200, (n,), generator=gen).tolist()
        out.append(batching.TrainSample([40 + i % 2, 41, 42], response, [-5.5] * n,
                                        advantage=float(i % 4) - 1.5))
    return out


def config(strategy: str, world: int, *extra: str):
    # Four clipped updates (two epochs of two mini-batches) with plain SGD (below): the weight
    # change is lr times the sum of the clipped gradients, so it shows any gradient that
    # differs, and the pi_old pass before them runs too.
    return load_config(None, [f"learner.strategy={strategy}", f"learner.num_workers={world}",
                              "learner.micro_batch_size=2", "algo.epochs=2",
                              "algo.mini_batches=2", "algo.kl_coef=0.1", *extra])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_update(rank: int, world: int, strategy: str, port: int, path: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    cfg = config(strategy, world)
    policy = build_policy(cfg, path, torch.device("cpu"), world)
    optimizer = torch.optim.SGD(policy.trainable(), lr=0.1)
    shard = batching.make_shards(samples(), step=0, world_size=world, epochs=2, mini_batches=2,
                                 max_len=8, seed=0)[rank]
    # Copies: an unsharded source hands out the live parameters themselves.
    before = {k: v.clone() for k, v in WeightSource(policy.model, torch.float32)}
    metrics = train_on_shard(policy.train_module, optimizer, warmup_schedule(optimizer, 0),
                             shard, cfg, load_tokenizer(path).pad_token_id, world_size=world,
                             ref_model=policy.ref, compute_dtype=policy.compute_dtype)
    after = dict(WeightSource(policy.model, torch.float32))  # gathers: every rank takes part
    if rank == 0:
        deltas = {k: before[k] - after[k] for k in before}
        torch.save(deltas, f"{out}/deltas-{strategy}-{world}.pt")
    with open(f"{out}/metrics-{strategy}-{world}-{rank}.json", "w") as f:
        json.dump(metrics, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return resolve_model_path(load_config().model, str(tmp_path_factory.mktemp("models")))


def run(world: int, strategy: str, tiny: str, out) -> tuple[dict, dict]:
    mp.spawn(one_update, args=(world, strategy, free_port(), tiny, str(out)), nprocs=world)
    deltas = torch.load(out / f"deltas-{strategy}-{world}.pt")
    per_rank = [json.loads((out / f"metrics-{strategy}-{world}-{r}.json").read_text())
                for r in range(world)]
    loss = sum(m["loss/total"] for m in per_rank)  # ranks hold shares of the global loss
    return deltas, {"loss": loss, "grad_norm": per_rank[0]["optim/grad_norm"]}


@pytest.mark.slow
def test_fsdp2_gives_the_loss_and_gradients_of_ddp(tiny, tmp_path):
    # (1 rank and 2 DDP ranks making the same update is tests/actors/test_learner.py's.)
    ddp_moved, ddp = run(2, "ddp", tiny, tmp_path)
    fsdp_moved, fsdp = run(2, "fsdp2", tiny, tmp_path)
    assert fsdp["loss"] == pytest.approx(ddp["loss"], abs=1e-5)
    assert fsdp["grad_norm"] == pytest.approx(ddp["grad_norm"], rel=1e-5)
    assert list(fsdp_moved) == list(ddp_moved)
    for name, d in ddp_moved.items():
        torch.testing.assert_close(fsdp_moved[name], d, atol=1e-5, rtol=1e-5, msg=name)
    assert any(d.abs().max() > 1e-3 for d in ddp_moved.values())  # the updates did something


def test_lora_trains_only_adapters_and_its_checkpoint_holds_only_them(tiny, tmp_path):
    cfg = config("ddp", 1, "learner.lora.rank=4", "learner.lora.target_modules=[q_proj,v_proj]")
    policy = build_policy(cfg, tiny, torch.device("cpu"), 1)
    trainable = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert policy.ref is not None  # the base with adapters off: no second copy
    assert sum(p.numel() for p in policy.ref.parameters()) == sum(
        p.numel() for p in policy.model.parameters()
    )
    optimizer = torch.optim.AdamW(policy.trainable(), lr=1e-2)
    shard = batching.make_shards(samples(), step=0, world_size=1, epochs=1, mini_batches=1,
                                 max_len=8, seed=0)[0]
    train_on_shard(policy.train_module, optimizer, warmup_schedule(optimizer, 0), shard, cfg,
                   load_tokenizer(tiny).pad_token_id, ref_model=policy.ref)
    checkpoint.save_shards(tmp_path, policy.model, optimizer, rank=0)
    import torch.distributed.checkpoint as dcp

    saved = dcp.FileSystemReader(str(tmp_path / "dcp")).read_metadata().state_dict_metadata
    model_keys = [k for k in saved if k.startswith("model.")]
    assert model_keys and all("lora_" in k for k in model_keys)


def test_restored_optimizer_state_sits_where_the_parameters_are(tiny, tmp_path):
    cfg = config("ddp", 1, "learner.lr=1e-2")
    policy = build_policy(cfg, tiny, torch.device("cpu"), 1)
    optimizer = torch.optim.AdamW(policy.trainable(), lr=1e-2)
    scheduler = warmup_schedule(optimizer, 0)
    shard = batching.make_shards(samples(), step=0, world_size=1, epochs=1, mini_batches=1,
                                 max_len=8, seed=0)[0]
    train_on_shard(policy.train_module, optimizer, scheduler, shard, cfg,
                   load_tokenizer(tiny).pad_token_id, ref_model=policy.ref)
    checkpoint.save_shards(tmp_path, policy.model, optimizer, rank=0)
    checkpoint.save_state(tmp_path, checkpoint.TrainState(step=1), scheduler)
    fresh = build_policy(cfg, tiny, torch.device("cpu"), 1)
    fresh_opt = torch.optim.AdamW(fresh.trainable(), lr=1e-2)
    checkpoint.load_shards(tmp_path, fresh.model, fresh_opt, warmup_schedule(fresh_opt, 0), 0)
    for group in fresh_opt.param_groups:
        for p in group["params"]:
            state = fresh_opt.state[p]
            assert state, "the optimizer state was not restored"
            for value in state.values():
                if torch.is_tensor(value) and value.dim():
                    assert value.device == p.device


def test_adamw_on_bf16_weights_at_a_small_lr_is_refused():
    with pytest.raises(ConfigError, match="learner.master_dtype=float32"):
        load_config(None, ["learner.master_dtype=bfloat16", "learner.lr=1e-6"])
    # A learning rate bf16 can represent is allowed, and fp32 masters always are.
    load_config(None, ["learner.master_dtype=bfloat16", "learner.lr=5e-4"])
    load_config(None, ["model.dtype=bfloat16", "learner.lr=1e-6"])
