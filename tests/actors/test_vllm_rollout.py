"""rlrun's vLLM engine end to end on CPU against the stand-in vLLM 0.34 (tests/stand_ins,
whose signatures tests/engines/test_vllm_api.py checks against the real source): tensor
parallelism on {GPU: 1} bundles, the native weight-transfer calls of the collective backend
at each engine's own rank offset, and a replacement engine that reuses its bundles."""

import os
from pathlib import Path

import pytest
import ray
import torch

from actors.learner import LearnerGroup
from actors.placement import place, release
from actors.rollout import RolloutGroup
from actors.weight_sync import CollectiveSync, make_weight_sync
from rlrun import batching
from rlrun.config import load_config
from rlrun.engines import SamplingParams
from rlrun.engines.hf import HFEngine
from rlrun.models import resolve_model_path
from rlrun.weights.object_store import ObjectStoreReceiver

pytestmark = pytest.mark.slow

STAND_INS = Path(__file__).resolve().parents[1] / "stand_ins"
PROMPTS = ["1+1=", "2+3=", "abc", "print("]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=6)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray with 5 logical GPUs whose workers import the stand-in as `vllm`."""
    path = os.pathsep.join([str(STAND_INS), os.environ.get("PYTHONPATH", "")])
    ray.init(address="local", num_cpus=2, num_gpus=5, include_dashboard=False, log_to_driver=False,
             namespace="rlrun-test-vllm",
             runtime_env={"env_vars": {"PYTHONPATH": path,
                                       "RLRUN_VLLM_STAND_IN_TIMEOUT_S": "30"}})
    yield resolve_model_path(load_config().model, str(tmp_path_factory.mktemp("models")))
    ray.shutdown()


def config(tmp_path, *extra: str):
    return load_config(None, [
        "rollout.engine=vllm", "rollout.num_actors=2", "rollout.tensor_parallel_size=2",
        "rollout.num_gpus=2", "rollout.num_cpus=0.25", "learner.num_gpus=1",
        "learner.num_cpus=0.5", "learner.lr=5e-2", "weights.backend=collective",
        "weights.timeout_s=30", f"run.output_dir={tmp_path}", *extra,
    ])


def bundles_of(actor) -> list[int]:
    """The placement-group bundles the engine's tensor-parallel workers took."""
    return ray.get(actor.__ray_call__.remote(lambda self: self.engine.llm.worker_bundle_indices),
                   timeout=60)


def greedy_ids(groups) -> list[list[list[int]]]:
    return [[s.response_ids for s in g] for g in groups]


def test_tp_engines_take_their_bundles_and_receive_weights_at_their_own_offsets(
    cluster, tmp_path
):
    cfg = config(tmp_path)
    groups = place(cfg, ["rollout", "learner"], "vllm-test")
    rollouts = learner = None
    try:
        rollouts = RolloutGroup(cfg, cluster, groups["rollout"], "vllm-test")
        learner = LearnerGroup(cfg, cluster, groups["learner"], "vllm-test")
        learner.start()
        # One {GPU: 1} bundle per tensor-parallel rank; engine i takes bundles 2i and 2i+1.
        assert [bundles_of(a) for a in rollouts.pool.actors] == [[0, 1], [2, 3]]
        sync = make_weight_sync(cfg, learner, rollouts)
        assert isinstance(sync, CollectiveSync)

        before = rollouts.generate(PROMPTS, GREEDY)
        gen = torch.Generator().manual_seed(0)
        samples = [batching.TrainSample([40, 41], torch.randint(3, 200, (4,), generator=gen)
                                        .tolist(), [-5.0] * 4, 1.0 if i % 2 else -1.0)
                   for i in range(8)]
        learner.train(batching.make_shards(samples, step=0, world_size=1, epochs=1,
                                           mini_batches=1, max_len=8, seed=0))
        # World 1 + 2 + 2: the engines hold ranks 1-2 and 3-4 (vLLM's stock trainer would have
        # given both offset 1, and the stand-in refuses a rank claimed twice).
        metrics = sync.sync(1)
        assert metrics["perf/sync_bytes"] > 0
        assert rollouts.versions() == [1, 1]
        after = rollouts.generate(PROMPTS, GREEDY)
        update = learner.publish(0)
        reference = HFEngine(cluster, cfg.rollout)
        reference.load_weights(1, ObjectStoreReceiver().receive(update))
        assert greedy_ids(after) == greedy_ids(reference.generate(PROMPTS, GREEDY))
        assert greedy_ids(after) != greedy_ids(before)

        # A replacement engine takes its predecessor's bundles and joins the next sync.
        ray.kill(rollouts.pool.actors[1])
        rollouts.pool.replace(1, 0)
        assert bundles_of(rollouts.pool.actors[1]) == [2, 3]
        sync.sync(2)
        assert rollouts.versions() == [2, 2]
    finally:
        for group in (learner, rollouts):
            if group is not None:
                group.shutdown()
        release(groups)
