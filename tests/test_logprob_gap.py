"""The weight-sync check, from the engines to the health check: an engine that holds the
learner's weights reports the learner's log-probs to round-off; one whose weights were never
delivered (it still claims the new version, as a silently failed sync would) is caught within
the step, by slot."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlrun import batching
from rlrun.algo import LossNorm, merge_metrics
from rlrun.config import ModelConfig, load_config
from rlrun.engines import SamplingParams
from rlrun.engines.hf import HFEngine
from rlrun.metrics.health import EngineWeightsMismatch, HealthMonitor
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path
from rlrun.policy_update import logprob_gaps, train_on_shard, warmup_schedule
from rlrun.records import Sample, ScoredSample

PROMPTS = ["1+1=", "2+3=", "abc", "print("]


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return resolve_model_path(ModelConfig(), str(tmp_path_factory.mktemp("models")))


def groups_from(engine: HFEngine, slot: int, version: int) -> list[batching.Group]:
    """Groups of 2 samples per prompt, as the rollout actor in `slot` returns them."""
    made = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, seed=3))
    return [batching.Group(i, [ScoredSample(dataclasses.replace(s, engine=slot,
                                                                weight_version=version),
                                            float(k % 2)) for k, s in enumerate(g)])
            for i, g in enumerate(made)]


def step_metrics(path: str, groups: list[batching.Group], version: int) -> dict[str, float]:
    cfg = load_config(None, ["algo.kl_coef=0", "learner.lr=1e-3"])
    samples = batching.to_train_samples(groups, "group", version=version)
    shard = batching.make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                                 max_len=8, seed=0)[0]
    model = load_causal_lm(path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learner.lr)
    pad = load_tokenizer(path).pad_token_id
    metrics = train_on_shard(model, optimizer, warmup_schedule(optimizer, 0), shard, cfg, pad)
    return merge_metrics([metrics])


def test_an_engine_without_the_learners_weights_stops_the_step_naming_it(tiny_path):
    learner_weights = load_causal_lm(tiny_path).state_dict()
    synced = HFEngine(tiny_path, load_config().rollout)
    stale = HFEngine(tiny_path, load_config().rollout)
    gen = torch.Generator().manual_seed(0)
    old = {k: v + 0.3 * torch.randn(v.shape, generator=gen) for k, v in learner_weights.items()}
    old["lm_head.weight"] = old["model.embed_tokens.weight"]  # tied in this model
    stale.load_weights(0, old)  # the weights before a sync that never arrived
    stale.version = 1  # ... which the engine does not know

    metrics = step_metrics(tiny_path, groups_from(synced, 0, 1) + groups_from(stale, 1, 1), 1)
    assert metrics["sync/logprob_gap_max/0"] < 1e-4
    assert metrics["sync/logprob_gap_max/1"] > 0.05
    assert metrics["sync/logprob_gap_max"] == metrics["sync/logprob_gap_max/1"]
    with pytest.raises(EngineWeightsMismatch) as err:
        HealthMonitor.from_config(load_config()).check(7, metrics)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("step 7: rollout engine 1 is not serving the learner's weights")
    assert "metrics.health.logprob_gap=0.05" in message


def test_samples_of_older_weights_are_not_checked(tiny_path):
    engine = HFEngine(tiny_path, load_config().rollout)
    metrics = step_metrics(tiny_path, groups_from(engine, 0, 1), version=2)
    assert not any(k.startswith("sync/") for k in metrics)


def test_partial_samples_are_checked_only_when_every_token_is_of_the_current_weights():
    def group(versions: list[int]) -> batching.Group:
        sample = Sample([1], [2, 3], "", [-1.0, -1.0], "stop", weight_version=versions[0],
                        token_versions=versions, engine=3)
        return batching.Group(0, [ScoredSample(sample, 1.0), ScoredSample(sample, 0.0)])

    mixed, current = group([4, 5]), group([5, 5])
    samples = batching.to_train_samples([mixed, current], "group", version=5)
    assert [s.engine for s in samples] == [-1, -1, 3, 3]


def test_vllm_with_top_k_or_top_p_is_not_checked():
    """vLLM renormalises its log-probs over the tokens top-k/top-p keep: not round-off."""
    metrics = {"sync/logprob_gap_max/0": 0.4, "sync/logprob_gap_max": 0.4}
    filtered = load_config(None, ["rollout.engine=vllm", "model.tiny.num_heads=2",
                                  "rollout.sampling.top_k=20"])
    assert HealthMonitor.from_config(filtered).check(1, metrics) == []
    with pytest.raises(EngineWeightsMismatch):
        HealthMonitor.from_config(load_config()).check(1, metrics)


def gaps_of(*samples_and_rows: tuple[batching.TrainSample, list[float]]) -> dict[str, float]:
    """`logprob_gaps` of one update holding the samples, with these learner log-prob rows."""
    samples = [s for s, _ in samples_and_rows]
    old = {id(s): torch.tensor(row) for s, row in samples_and_rows}
    return logprob_gaps([batching.Update(samples, LossNorm.from_mask(torch.ones(1, 1), 8))], old)


def test_the_gap_is_over_the_tokens_the_model_sampled():
    """An environment's observation tokens have behaviour log-prob 0, and the learner's row is
    0 there (they are out of the mask): counting them would dilute a stale engine's gap."""
    trajectory = batching.TrainSample([1], [5, 6, 7, 8], [-1.5, 0.0, 0.0, -2.0], 1.0, engine=2,
                                      env_mask=[1, 0, 0, 1])
    observations_only = batching.TrainSample([1], [5, 6], [0.0, 0.0], 1.0, engine=2,
                                             env_mask=[0, 0])
    gaps = gaps_of((trajectory, [-1.0, 0.0, 0.0, -1.0]), (observations_only, [0.0, 0.0]))
    assert gaps == {"sync/logprob_gap_max/2": 0.75, "sync/logprob_gap_max": 0.75}


def test_a_masked_sample_is_not_checked(tiny_path):
    """Under `algo.mask_truncated` a truncated completion's learner row is masked to zero: read
    as log-probs it would report its behaviour log-probs as a gap and stop a healthy run."""
    engine = HFEngine(tiny_path, load_config().rollout)
    groups = groups_from(engine, 0, 1)
    for g in groups:  # the second of each group was cut at the token limit
        for k, s in enumerate(g.scored):
            s.sample = dataclasses.replace(s.sample, finish_reason=("stop", "length")[k])
    samples = batching.to_train_samples(groups, "group", mask_truncated=True, version=1)
    assert any(s.masked for s in samples) and any(not s.masked for s in samples)
    shard = batching.make_shards(samples, step=0, world_size=1, epochs=1, mini_batches=1,
                                 max_len=8, seed=0)[0]
    model = load_causal_lm(tiny_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg = load_config(None, ["algo.kl_coef=0", "algo.mask_truncated=true"])
    metrics = train_on_shard(model, optimizer, warmup_schedule(optimizer, 0), shard, cfg,
                             load_tokenizer(tiny_path).pad_token_id)
    assert metrics["sync/logprob_gap_max/0"] < 1e-4
