import pytest
import torch

from rlrun import batching
from rlrun.records import Sample, ScoredSample, TokenReward


def group(index: int, rewards: list[float], version: int = 0, length: int = 3) -> batching.Group:
    scored = [
        ScoredSample(
            Sample([1, 2], [5] * (length + j), "x", [-1.0] * (length + j), "stop", version,
                   problem_id=f"p{index}", group_id=index),
            reward=r,
            components={"correctness": r},
        )
        for j, r in enumerate(rewards)
    ]
    return batching.Group(index, scored)


def test_drop_stale_keeps_groups_within_max_staleness():
    groups = [group(0, [0, 1], version=3), group(1, [0, 1], version=4), group(2, [1, 0], 5)]
    kept, dropped = batching.drop_stale(groups, version=5, max_staleness=1)
    assert [g.problem_index for g in kept] == [1, 2]
    assert dropped == 2


def test_split_informative_separates_all_equal_groups():
    informative, flat = batching.split_informative([group(0, [1, 1]), group(1, [0, 1])])
    assert [g.problem_index for g in informative] == [1]
    assert [g.problem_index for g in flat] == [0]


def test_trim_groups_keeps_a_prefix_that_divides_evenly():
    groups = [group(i, [0, 1, 0]) for i in range(3)]  # 9 samples
    assert len(batching.trim_groups(groups, 2)) == 2  # 6 samples
    assert len(batching.trim_groups(groups, 3)) == 3
    assert batching.trim_groups(groups[:1], 2) == []


def test_advantages_are_group_relative():
    samples = batching.to_train_samples([group(0, [0.0, 1.0]), group(1, [2.0, 2.0])], "none")
    assert [s.advantage for s in samples] == [-0.5, 0.5, 0.0, 0.0]


def test_negative_advantages_are_damped_after_the_group_baseline():
    samples = batching.to_train_samples([group(0, [0.0, 1.0, 1.0, 0.0])], "none", 0.5)
    assert [s.advantage for s in samples] == [-0.25, 0.5, 0.5, -0.25]


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_shards_are_the_same_global_updates_for_any_world_size(mini_batches):
    groups = [group(i, [0.0, 1.0, 0.5, 0.25], length=i + 1) for i in range(4)]
    samples = batching.to_train_samples(groups, "group")
    common = dict(step=3, epochs=2, mini_batches=mini_batches, max_len=16, seed=0)
    one = batching.make_shards(samples, world_size=1, **common)
    two = batching.make_shards(samples, world_size=2, **common)
    assert len(one[0]) == len(two[0]) == 2 * mini_batches
    for u in range(2 * mini_batches):
        whole = one[0][u]
        halves = [two[0][u], two[1][u]]
        assert len(halves[0].samples) == len(halves[1].samples)
        assert halves[0].samples + halves[1].samples == whole.samples
        assert halves[0].norm == halves[1].norm == whole.norm
        assert whole.norm.total_tokens == sum(len(s.response_ids) for s in whole.samples)
        assert whole.norm.total_seqs == 16 // mini_batches


def test_shards_reject_a_batch_that_does_not_split():
    samples = batching.to_train_samples([group(0, [0.0, 1.0, 1.0])], "none")
    with pytest.raises(ValueError, match="learner.num_workers"):
        batching.make_shards(samples, step=0, world_size=2, epochs=1, mini_batches=1,
                             max_len=4, seed=0)


def test_batch_metrics_report_staleness_and_accuracy():
    m = batching.batch_metrics([group(0, [0.0, 1.0], version=2), group(1, [1.0, 1.0], 3)], 3)
    assert m["async/staleness_max"] == 1.0
    assert m["async/staleness_mean"] == 0.5
    assert m["train/accuracy"] == 0.75
    assert m["reward/mean"] == 0.75
    assert torch.isclose(torch.tensor(m["reward/correctness"]), torch.tensor(0.75))


def test_mask_truncated_keeps_cut_completions_out_of_the_loss_but_not_the_baseline():
    g = group(0, [0.0, 1.0, 1.0, 0.0])
    g.scored[1].sample.finish_reason = "length"
    off = batching.to_train_samples([g], "none")
    on = batching.to_train_samples([g], "none", mask_truncated=True)
    assert [s.masked for s in off] == [False] * 4
    assert [s.masked for s in on] == [False, True, False, False]
    # The cut completion's reward still sets its group's baseline.
    assert [s.advantage for s in on] == [s.advantage for s in off] == [-0.5, 0.5, 0.5, -0.5]
    [update] = batching.make_shards(on, step=0, world_size=1, epochs=1, mini_batches=1,
                                    max_len=16, seed=0)[0]
    assert update.norm.total_tokens == sum(len(s.response_ids) for s in on if not s.masked)
    assert update.norm.total_seqs == 4  # TRL: a masked sequence still counts as one


def _with_parts(g: batching.Group, parts: list[list[tuple[int, float]]]) -> batching.Group:
    for s, row in zip(g.scored, parts, strict=True):
        s.token_rewards = [TokenReward(p, v) for p, v in row]
    return g


def test_without_step_advantages_samples_carry_no_token_advantages():
    groups = [_with_parts(group(0, [0.0, 1.0]), [[(1, -1.0)], [(2, 0.0)]])]
    plain = batching.to_train_samples([group(0, [0.0, 1.0])], "group")
    samples = batching.to_train_samples(groups, "group")  # step_rule none: the parts are ignored
    assert [s.token_advantages for s in samples] == [None, None]
    assert [s.advantage for s in samples] == [s.advantage for s in plain]


def test_step_advantages_add_the_parts_around_the_outcome_advantage():
    # lengths 3 and 4; sample 0 has a wrong step ending at token 1 and a correct one at token 2
    groups = [_with_parts(group(0, [0.0, 1.0]), [[(1, -1.0), (2, 0.0)], []])]
    samples = batching.to_train_samples(groups, "none", step_rule="local", step_coef=0.5)
    assert [s.advantage for s in samples] == [-0.5, 0.5]  # the outcome advantage is unchanged
    assert samples[0].token_advantages == [-1.0, -1.0, -0.5]
    assert samples[1].token_advantages is None  # no parts: advantage on every token
    samples = batching.to_train_samples(groups, "none", step_rule="min", step_coef=0.5)
    assert samples[0].token_advantages == [-1.0, -1.0, -0.5]


def test_an_unscored_sample_gets_no_step_advantages():
    g = _with_parts(group(0, [0.0, 1.0, 1.0]), [[(0, -1.0)], [(0, -1.0)], []])
    g.scored[0].reward = None
    samples = batching.to_train_samples([g], "none", step_rule="local", step_coef=1.0)
    assert samples[0].token_advantages is None and samples[0].advantage == 0.0
    assert samples[1].token_advantages == [-1.0 + samples[1].advantage] + [samples[1].advantage] * 3
