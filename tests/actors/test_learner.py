"""The learner's update on 1 rank and on 2 DDP ranks (Ray Train, gloo) is the same update."""

import sys

import pytest
import ray
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from actors.learner import make_trainer, storage_path
from rlrun import batching
from rlrun.config import from_dict, load_config, to_dict
from rlrun.models import resolve_model_path

pytestmark = pytest.mark.slow

# Ray Train workers cannot import this test module by name: ship its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


RAY_NAMESPACE = "rlrun-test-learner"


def samples() -> list[batching.TrainSample]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(8):
        n = 2 + i % 3
        response = torch.randint(3, 200, (n,), generator=gen).tolist()
        out.append(batching.TrainSample([40 + i, 41, 42], response, [-5.5] * n,
                                        advantage=float(i % 4) - 1.5))
    return out


def update_loop(config: dict) -> None:
    import ray.train

    from rlrun.models import load_causal_lm, load_tokenizer
    from rlrun.policy_update import train_on_shard, warmup_schedule

    cfg = from_dict(config["cfg"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    shards = batching.make_shards(
        config["samples"], step=0, world_size=world, epochs=cfg.algo.epochs,
        mini_batches=cfg.algo.mini_batches, max_len=8, seed=0, data_position=0, version=0,
    )
    model = load_causal_lm(config["path"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learner.lr)
    scheduler = warmup_schedule(optimizer, 0)
    policy = ray.train.torch.prepare_model(model)
    metrics = train_on_shard(policy, optimizer, scheduler, shards[rank], cfg,
                             load_tokenizer(config["path"]).pad_token_id, world_size=world)
    result = {"metrics": metrics, "weights": {k: v.clone() for k, v in model.state_dict().items()}}
    torch.save(result, f"{config['out']}/rank{rank}-of-{world}.pt")
    ray.train.report({})


def run(world: int, cfg, path: str, out: str) -> None:
    TorchTrainer(
        update_loop,
        train_loop_config={"cfg": to_dict(cfg), "samples": samples(), "path": path, "out": out},
        scaling_config=ScalingConfig(num_workers=world, resources_per_worker={"CPU": 0.5}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=f"w{world}", storage_path=out),
    ).fit()


def test_one_rank_and_two_ranks_make_the_same_update(ray_cluster, tmp_path):
    cfg = load_config(None, ["algo.mini_batches=2", "algo.epochs=2", "learner.lr=1e-2",
                             "learner.num_workers=2", "learner.micro_batch_size=1"])
    path = resolve_model_path(cfg.model, str(tmp_path / "models"))
    run(1, cfg, path, str(tmp_path))
    run(2, cfg, path, str(tmp_path))
    one = torch.load(tmp_path / "rank0-of-1.pt")
    two = [torch.load(tmp_path / f"rank{r}-of-2.pt") for r in (0, 1)]
    # The global gradient (DDP-averaged shares times world size) has the same norm; Adam is
    # blind to a gradient scale, so this is the check that catches a world-size factor.
    for rank in (0, 1):
        assert two[rank]["metrics"]["optim/grad_norm"] == pytest.approx(
            one["metrics"]["optim/grad_norm"], rel=1e-5
        )
    # Same weights after 4 Adam updates, up to float summation order (Adam turns the noise of
    # near-zero gradients into steps of up to lr, hence the absolute tolerance).
    for name, w in one["weights"].items():
        torch.testing.assert_close(two[0]["weights"][name], w, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(two[1]["weights"][name], two[0]["weights"][name])
    # Loss shares of the two ranks add up to the one-rank loss.
    total = two[0]["metrics"]["loss/total"] + two[1]["metrics"]["loss/total"]
    assert total == pytest.approx(one["metrics"]["loss/total"], abs=1e-6)
    assert one["metrics"]["train/bad_steps"] == 0


def test_the_learner_job_stores_checkpoints_under_the_output_dir(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}/out", "learner.max_failures=3"])
    trainer = make_trainer(cfg, "unused")
    assert trainer.run_config.storage_path == storage_path(cfg.run.output_dir)
    assert trainer.run_config.storage_path.startswith("/")
    assert trainer.run_config.failure_config.max_failures == 3
    assert storage_path("s3://bucket/run") == "s3://bucket/run"
