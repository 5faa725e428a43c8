"""Partial rollouts (`rlrun.partial`) with a fake engine whose completion lengths are known:
rounds, carried groups, per-token versions, stale restarts, resume. No Ray, no model."""


import pytest

from rlrun import batching, step
from rlrun.config import ConfigError, load_config
from rlrun.data_order import DataOrder
from rlrun.engines.base import extended, finish, new_tokens
from rlrun.partial import InFlight, PartialRollouts
from rlrun.records import Problem, Sample, ScoredSample

N = 12


def problems() -> list[Problem]:
    return [Problem(id=f"p{i}", prompt=f"q{i}", kind="math", answer="1") for i in range(N)]


def length(index: int, k: int) -> int:
    """Tokens the k-th sample of prompt qI runs to before it stops (prompt 5 runs long)."""
    return 40 if index == 5 else 1 + (index + 3 * k) % 7


class RoundEngine:
    """Emits token 10 + version until a sample reaches `length` (then EOS, 0); every token's
    log-prob is -(version + 1), so each token shows which weights sampled it."""

    def __init__(self) -> None:
        self.version = 0
        self.rounds: list[tuple[int, int]] = []  # (new prompts, continued samples) per round

    def run(self, sample: Sample, index: int, sampling) -> Sample:
        budget = new_tokens(sampling, len(sample.response_ids))
        left = length(index, sample.group_id) - len(sample.response_ids)
        if left <= budget:
            tokens, reason = [10 + self.version] * (left - 1) + [0], "stop"
        else:
            tokens = [10 + self.version] * budget
            reason = finish(sampling, len(sample.response_ids) + budget)
        return extended(sample, tokens, [-(self.version + 1.0)] * len(tokens), "1", reason,
                        self.version)

    def advance(self, prompts, sampling, paused, continuing):
        """One round: the engine's `group_id` holds each sample's place k in its group (the
        step gives the scored copy its data position instead)."""
        self.rounds.append((len(prompts), len(paused)))
        started = [[self.run(Sample([int(p[1:])], [], "", [], "paused",
                                    weight_version=self.version, group_id=k),
                             int(p[1:]), sampling) for k in range(sampling.n)]
                   for p in prompts]
        continued = [self.run(s, s.prompt_ids[0], continuing) for s in paused]
        return started, continued


def score(problems, samples):
    return [ScoredSample(s, float(len(s.response_ids) % 2), {"correctness": 1.0})
            for s in samples]


def cfg(*overrides: str):
    return load_config(None, ["algo.group_size=3", "algo.prompts_per_step=4", "run.seed=3",
                              "algo.max_staleness=2", "rollout.partial=true",
                              "rollout.partial_tokens=4", "rollout.sampling.max_new_tokens=48",
                              *overrides])


def pool(c, in_flight=None) -> PartialRollouts:
    ps = problems()
    return PartialRollouts(ps, [p.prompt for p in ps], DataOrder(N, c.run.seed), c, in_flight)


def test_a_long_group_is_carried_over_and_the_step_takes_the_finished_ones() -> None:
    c, engine = cfg(), RoundEngine()
    rollouts = pool(c)
    order = DataOrder(N, 3).draw(N)
    first = rollouts.collect(engine.advance, score, 0)
    # Four groups finished; prompt 5 (40 tokens, 10 rounds of 4) is still in flight if drawn.
    assert len(first.groups) == 4 and 5 not in [g.problem_index for g in first.groups]
    for g in first.groups:
        for k, s in enumerate(g.scored):
            assert len(s.sample.response_ids) == length(g.problem_index, k)
            assert s.sample.finish_reason == "stop"
    drawn = set(range(first.data_position))
    trained = {g.scored[0].sample.group_id for g in first.groups}
    assert trained | set(first.in_flight) == drawn and not trained & set(first.in_flight)
    assert first.metrics["async/in_flight_groups"] == len(first.in_flight)
    # The first round fills the pool: a quarter more groups than the batch takes (5 for 4).
    assert engine.rounds[0] == (5, 0)
    assert all(new == 0 for new, _ in engine.rounds[1:])
    assert order[:first.data_position] == [rollouts.order.index_at(p)
                                           for p in range(first.data_position)]


def test_tokens_record_the_weights_that_sampled_them_across_an_update() -> None:
    c, engine = cfg(), RoundEngine()
    rollouts = pool(c)
    for version in range(1, 8):
        # As with overlapping steps: the batch trained at `version` is generated while the
        # engines still hold the version before it.
        engine.version = version - 1
        rollout = rollouts.collect(engine.advance, score, version)
        for g in rollout.groups:
            assert version - g.version <= c.algo.max_staleness  # no token past the bound
        # Nothing in flight would be past it at the next version.
        assert all(version + 1 - g.oldest <= c.algo.max_staleness
                   for g in rollouts.pool if g.oldest is not None and g.finished is None)
        long = [g for g in rollout.groups if g.problem_index == 5]
        if long:
            break
    assert long, "the long prompt was drawn and finished"
    sample = long[0].scored[0].sample
    versions = sample.versions()
    assert len(versions) == 40 and len(set(versions)) == 2  # it spanned an update
    assert versions == sorted(versions)
    # Every token's behaviour log-prob is the one its own version reported.
    assert sample.behaviour_logprobs == [-(v + 1.0) for v in versions]
    assert sample.weight_version == versions[0]
    # Ten rounds of four tokens: the step where it reached the bound ran until it finished.
    assert rollout.metrics["async/partial_rounds"] > 1
    lags = batching.token_lag_metrics(long, version, c.algo.max_staleness)
    assert lags["async/token_lag_0"] == 0.0
    assert lags["async/token_lag_1"] + lags["async/token_lag_2"] == pytest.approx(1.0)


def test_a_group_past_the_bound_starts_over() -> None:
    c, engine = cfg("rollout.partial_tokens=2"), RoundEngine()
    rollouts = pool(c)
    rollouts.collect(engine.advance, score, 1)
    carried = [g.position for g in rollouts.pool if g.samples]
    assert carried
    engine.version = 5  # a learner rewound and replayed: the pool is far behind
    rollout = rollouts.collect(engine.advance, score, 6)
    assert rollout.metrics["async/restarted_samples"] >= 3 * len(carried)
    for g in rollout.groups:
        assert g.version == 5


def test_a_resumed_pool_starts_its_groups_over_at_their_data_positions() -> None:
    c, engine = cfg("rollout.partial_tokens=2"), RoundEngine()
    first = pool(c).collect(engine.advance, score, 0)
    assert first.in_flight
    resumed = pool(c, first.in_flight)
    resumed.order.position = first.data_position
    assert [g.position for g in resumed.pool] == first.in_flight
    assert all(g.samples is None for g in resumed.pool)
    nxt = resumed.collect(RoundEngine().advance, score, 1)
    # The carried prompts are started again before anything newly drawn.
    assert set(first.in_flight) <= {g.scored[0].sample.group_id for g in nxt.groups} | {
        g.position for g in resumed.pool}
    assert resumed.pool == [] or min(g.position for g in resumed.pool) >= min(first.in_flight)



def test_filtering_drops_flat_groups_from_the_pool() -> None:
    c, engine = cfg("algo.filter_equal_groups=true", "algo.max_topup_rounds=3"), RoundEngine()

    def flat_unless_odd(problems, samples):
        return [ScoredSample(s, float(int(p.id[1:]) % 2 and s.group_id % 2 == 0 and
                                      len(s.response_ids) % 2), {"correctness": 0.0})
                for p, s in zip(problems, samples, strict=True)]

    rollout = pool(c).collect(engine.advance, flat_unless_odd, 0)
    assert rollout.metrics["train/all_equal_frac"] > 0
    assert batching.split_informative(rollout.groups)[1] == []


def test_the_rounds_are_bounded() -> None:
    c = cfg("rollout.partial_tokens=40", "algo.max_topup_rounds=0",
            "algo.filter_equal_groups=true")
    engine = RoundEngine()

    def flat(problems, samples):
        return [ScoredSample(s, 0.0, {"correctness": 0.0}) for s in samples]

    rollout = pool(c).collect(engine.advance, flat, 0)
    assert rollout.groups == []
    assert rollout.metrics["async/partial_rounds"] == 4  # (0 + 2) * ceil(48 / 40) at most
    assert len(engine.rounds) == 4


def test_partial_rollouts_need_staleness() -> None:
    with pytest.raises(ConfigError, match=r"rollout.partial.*algo.max_staleness >= 1"):
        load_config(None, ["rollout.partial=true"])
    with pytest.raises(ConfigError, match="rollout.partial_tokens"):
        load_config(None, ["rollout.partial_tokens=0"])


def test_token_lag_metrics_by_hand() -> None:
    def sample(versions: list[int]) -> ScoredSample:
        return ScoredSample(Sample([1], [5] * len(versions), "", [0.0] * len(versions), "stop",
                                   weight_version=versions[0], token_versions=versions), 1.0)

    groups = [batching.Group(0, [sample([3, 3, 4, 5]), sample([5, 5, 5, 5])])]
    # lags at version 5: 2, 2, 1, 0, 0, 0, 0, 0 -> mean 5/8; shares 5/8, 1/8, 2/8
    assert batching.token_lag_metrics(groups, 5, 2) == {
        "async/token_staleness_mean": 5 / 8, "async/token_lag_0": 5 / 8,
        "async/token_lag_1": 1 / 8, "async/token_lag_2": 2 / 8,
    }
    # the last share holds every lag at or past it
    assert batching.token_lag_metrics(groups, 6, 1)["async/token_lag_1"] == 1.0
    metrics = step.step_metrics(step.Batch(groups, [], [], 0), step.Rollout(groups, 0), {},
                                5, {}, token_lags=2)
    assert metrics["async/token_lag_2"] == 2 / 8


def test_when_more_groups_finished_than_the_batch_holds_the_oldest_go_first() -> None:
    c, engine = cfg(), RoundEngine()
    rollouts = pool(c)

    def finished(position: int, version: int) -> InFlight:
        samples = [Sample([1], [0], "", [-1.0], "stop", weight_version=version)] * 3
        return InFlight(position, position, samples,
                        batching.Group(position, score(None, samples)))

    # Five finished groups for a batch of four: the version-1 ones would be past the bound
    # (2) if they waited for version 4.
    rollouts.pool = [finished(0, 3), finished(1, 1), finished(2, 3), finished(3, 1),
                     finished(4, 2)]
    rollouts.order.position = 5
    rollout = rollouts.collect(engine.advance, score, 3)
    assert [g.problem_index for g in rollout.groups] == [1, 3, 4, 0]
    assert rollout.in_flight == [2] and engine.rounds == []
