"""The learner group: 1 rank and 2 DDP ranks (gloo) make the same update; a restarted group
continues from the checkpoint it saved; a dead rank is a `LearnerFailed`, not a hang; a busy
rank still answers `ping`."""

import pytest
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group

from actors.learner import LearnerFailed, LearnerGroup
from rlrun import batching, checkpoint
from rlrun.config import load_config
from rlrun.models import resolve_model_path
from rlrun.weights.object_store import ObjectStoreReceiver

pytestmark = pytest.mark.slow

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


def config(tmp_path, world: int, *extra: str):
    return load_config(None, [
        "algo.mini_batches=2", "algo.epochs=2", "learner.lr=1e-2", f"learner.num_workers={world}",
        "learner.micro_batch_size=1", "learner.num_cpus=0.5", f"run.output_dir={tmp_path}",
        *extra,
    ])


class Learner:
    """A LearnerGroup on a placement group of its own, shut down on exit."""

    def __init__(self, cfg, path: str) -> None:
        self.pg = placement_group([{"CPU": 0.5}] * cfg.learner.num_workers)
        ray.get(self.pg.ready(), timeout=60)
        self.group = LearnerGroup(cfg, path, self.pg, "test")

    def __enter__(self) -> LearnerGroup:
        return self.group

    def __exit__(self, *exc) -> None:
        self.group.shutdown()
        remove_placement_group(self.pg)


def shards(cfg, step: int = 0):
    return batching.make_shards(
        samples(), step=step, world_size=cfg.learner.num_workers, epochs=cfg.algo.epochs,
        mini_batches=cfg.algo.mini_batches, max_len=8, seed=0,
    )


def weights(group: LearnerGroup, version: int) -> dict[str, torch.Tensor]:
    update = group.publish(version)
    return ObjectStoreReceiver().receive(update)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = load_config(None, [])
    return resolve_model_path(cfg.model, str(tmp_path_factory.mktemp("models")))


def test_one_rank_and_two_ranks_make_the_same_update(ray_cluster, tmp_path, tiny):
    results = {}
    for world in (1, 2):
        cfg = config(tmp_path / f"w{world}", world)
        with Learner(cfg, tiny) as group:
            assert group.start() == checkpoint.TrainState()
            results[world] = (group.train(shards(cfg)), weights(group, 1))
    (one, w1), (two, w2) = results[1], results[2]
    # The global gradient (DDP-averaged shares times world size) has the same norm; Adam is
    # blind to a gradient scale, so this is the check that catches a world-size factor.
    assert two["optim/grad_norm"] == pytest.approx(one["optim/grad_norm"], rel=1e-5)
    # Loss shares of the two ranks add up to the one-rank loss (merged by the group).
    assert two["loss/total"] == pytest.approx(one["loss/total"], abs=1e-6)
    assert one["train/bad_steps"] == 0
    # Same weights after 4 Adam updates, up to float summation order (Adam turns the noise of
    # near-zero gradients into steps of up to lr, hence the absolute tolerance).
    for name, w in w1.items():
        torch.testing.assert_close(w2[name], w, atol=1e-4, rtol=1e-4)


def test_a_restarted_group_continues_from_its_checkpoint_on_another_world_size(
    ray_cluster, tmp_path, tiny
):
    state = checkpoint.TrainState(step=1, version=1, data_position=8, bad_steps=0)
    cfg = config(tmp_path, 2, "learner.strategy=fsdp2")
    with Learner(cfg, tiny) as group:
        group.start()
        group.train(shards(cfg))
        group.save(state)
        saved = weights(group, 1)
        expected = group.train(shards(cfg, step=1))
        assert group.restart() == state  # every rank reloads its shards of step 1
        assert group.train(shards(cfg, step=1)) == expected  # bit for bit
    one = config(tmp_path, 1, "run.resume=true")
    with Learner(one, tiny) as group:
        assert group.start() == state  # the 2-rank checkpoint, resharded onto 1 rank
        for name, w in weights(group, 1).items():
            torch.testing.assert_close(w, saved[name])
        assert group.train(shards(one, step=1))["optim/grad_norm"] == pytest.approx(
            expected["optim/grad_norm"], rel=1e-5
        )


def test_a_rank_that_dies_mid_step_is_a_learner_failure(ray_cluster, tmp_path, tiny):
    cfg = config(tmp_path, 2)
    with Learner(cfg, tiny) as group:
        group.start()
        ray.kill(group.workers[1])
        with pytest.raises(LearnerFailed, match="died during train"):
            group.train(shards(cfg))


def test_a_rank_busy_in_a_step_answers_ping(ray_cluster, tmp_path, tiny):
    """A rank blocked inside a step (here in the gradient all-reduce its peer never joins)
    answers `ping` on a thread of its own, so the group tells a slow rank from a dead one."""
    cfg = config(tmp_path, 2)
    with Learner(cfg, tiny) as group:
        group.start()
        busy = group.workers[0].train.remote(shards(cfg)[0])
        ready, _ = ray.wait([busy], timeout=3)
        assert not ready  # still in the step
        assert ray.get(group.workers[0].ping.remote(), timeout=10)
        assert group._dead() == []
