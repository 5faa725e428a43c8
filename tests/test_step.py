"""The pure step (`rlrun.step`) with a fake engine and a fake judge: no Ray, no model."""

import pytest

from rlrun import step
from rlrun.config import load_config
from rlrun.data_order import DataOrder
from rlrun.records import Problem, Sample, ScoredSample, Verdict


def problems(n: int = 10) -> list[Problem]:
    return [Problem(id=f"p{i}", prompt=f"q{i}", kind="math", answer=str(i)) for i in range(n)]


class FakeEngine:
    """Answers prompt `qI` with "I" on the k-th sample when k < I % 3 (so p0, p3, p6, p9 always
    fail and every other prompt has a mixed group), and records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int | None]] = []

    def generate(self, prompts, sampling):
        self.calls.append((list(prompts), sampling.seed))
        out = []
        for prompt in prompts:
            index = int(prompt[1:])
            out.append([
                Sample([1, 2], [3] * (k + 1), str(index) if k < index % 3 else "x",
                       [-0.5] * (k + 1), "stop", weight_version=7)
                for k in range(sampling.n)
            ])
        return out


def score(problems, samples):
    assert [p.id for p in problems] == [s.problem_id for s in samples]
    return [
        ScoredSample(s, float(s.response_text == p.answer),
                     {"correctness": float(s.response_text == p.answer)},
                     [Verdict("accepted" if s.response_text == p.answer else "wrong_answer")])
        for p, s in zip(problems, samples, strict=True)
    ]


def cfg(*overrides: str):
    return load_config(None, ["algo.group_size=4", "algo.prompts_per_step=4",
                              "run.seed=3", *overrides])


def collect(c, engine, order=None, judges_code=False):
    ps = problems()
    order = order or DataOrder(len(ps), c.run.seed)
    return step.collect(ps, [p.prompt for p in ps], order, engine.generate, score, c,
                        judges_code=judges_code), order


def test_collect_draws_in_data_order_and_groups_the_samples_by_prompt():
    c, engine = cfg(), FakeEngine()
    expected = DataOrder(10, 3).draw(4)
    rollout, order = collect(c, engine)
    assert [g.problem_index for g in rollout.groups] == expected
    assert rollout.data_position == order.position == 4
    # One generate call, seeded by the data position it drew at.
    assert engine.calls == [([f"q{i}" for i in expected], step.sampling_seed(3, 0))]
    for k, (g, index) in enumerate(zip(rollout.groups, expected, strict=True)):
        assert len(g.scored) == 4
        assert {s.sample.problem_id for s in g.scored} == {f"p{index}"}
        assert {s.sample.group_id for s in g.scored} == {k}  # data position of its prompt
        assert g.version == 7


def test_filtering_tops_up_with_new_prompts_until_the_batch_is_informative():
    c, engine = cfg("algo.filter_equal_groups=true", "algo.max_topup_rounds=4"), FakeEngine()
    rollout, order = collect(c, engine)
    # Every kept group has a reward spread (its prompt index is not a multiple of 3).
    assert len(rollout.groups) == 4
    assert all(g.problem_index % 3 for g in rollout.groups)
    assert [g.problem_index for g in rollout.groups] == [
        i for i in DataOrder(10, 3).draw(order.position) if i % 3
    ][:4]
    # Each round draws only what the batch still lacks, seeded by where it drew.
    assert sum(len(prompts) for prompts, _ in engine.calls) == order.position
    starts = [0]
    for prompts, _ in engine.calls[:-1]:
        starts.append(starts[-1] + len(prompts))
    assert [seed for _, seed in engine.calls] == [step.sampling_seed(3, s) for s in starts]
    assert 0 < rollout.metrics["train/all_equal_frac"] < 1


def test_top_up_rounds_are_bounded():
    c, engine = cfg("algo.filter_equal_groups=true", "algo.max_topup_rounds=0"), FakeEngine()
    rollout, _ = collect(c, engine)
    assert len(engine.calls) == 1
    assert len(rollout.groups) == sum(1 for g in rollout.groups if g.problem_index % 3)


def test_sandbox_counts_only_when_the_run_judges_code():
    c = cfg()
    plain, _ = collect(c, FakeEngine())
    judged, _ = collect(c, FakeEngine(), judges_code=True)
    assert not any(k.startswith("sandbox/") for k in plain.metrics)
    accepted = sum(s.reward for g in judged.groups for s in g.scored)
    assert judged.metrics["sandbox/accepted"] == accepted
    assert judged.metrics["sandbox/wrong_answer"] == 16 - accepted


def test_make_batch_drops_stale_groups_and_cuts_one_shard_per_rank():
    c = cfg("learner.num_workers=2", "algo.max_staleness=1", "algo.mini_batches=2")
    rollout, _ = collect(c, FakeEngine())
    batch = step.make_batch(rollout, version=8, step=5, cfg=c)  # samples are one version old
    assert batch.dropped == 0 and len(batch.samples) == 16
    assert len(batch.shards) == 2
    assert [len(u.samples) for u in batch.shards[0]] == [4, 4]
    stale = step.make_batch(rollout, version=9, step=5, cfg=c)
    assert stale.dropped == 16 and stale.samples == []
    assert stale.shards == [[], []]


def test_advantages_are_group_relative():
    c = cfg("algo.scale_rewards=none")
    rollout, _ = collect(c, FakeEngine())
    batch = step.make_batch(rollout, version=7, step=0, cfg=c)
    for g, k in zip(rollout.groups, range(0, 16, 4), strict=True):
        rewards = [s.reward for s in g.scored]
        mean = sum(rewards) / 4
        assert [s.advantage for s in batch.samples[k : k + 4]] == pytest.approx(
            [r - mean for r in rewards]
        )


def test_step_metrics_and_rows_describe_what_was_trained():
    c = cfg()
    rollout, _ = collect(c, FakeEngine())
    batch = step.make_batch(rollout, version=7, step=0, cfg=c)
    timings = {"perf/time_rollout": 1.0, "perf/time_train": 2.0, "perf/time_sync": 0.5}
    metrics = step.step_metrics(batch, rollout, {"loss/total": 0.1}, 7, timings)
    tokens = sum(2 + k + 1 for _ in range(4) for k in range(4))
    assert metrics["perf/train_tokens_per_s"] == tokens / 2.0
    assert metrics["train/samples"] == 16 and metrics["loss/total"] == 0.1
    assert metrics["perf/time_sync"] == 0.5 and metrics["async/staleness_max"] == 0
    rows = step.sample_rows(batch, [p.prompt for p in problems()])
    assert len(rows) == 16
    assert rows[0]["prompt"] == f"q{batch.groups[0].problem_index}"
    assert set(rows[0]) == {"problem_id", "prompt", "response", "reward", "advantage",
                            "components"}
    assert [r["advantage"] for r in rows] == [s.advantage for s in batch.samples]


class StepEngine:
    """Answers every prompt with byte tokens of two lines: a right step, then on odd samples a
    wrong one, then the answer line."""

    def generate(self, prompts, sampling):
        out = []
        for _ in prompts:
            rows = []
            for k in range(sampling.n):
                text = "2 + 3 = 5\n" + ("5 * 2 = 11\n" if k % 2 else "5 * 2 = 10\n") + "#### 10"
                ids = list(text.encode())
                rows.append(Sample([1, 2], ids, text, [-0.5] * len(ids), "stop"))
            out.append(rows)
        return out


def test_step_rewards_reach_the_samples_the_metrics_and_the_rows():
    from rlrun.rewards import build_reward

    c = cfg("reward.step_rewards=true", "algo.step_advantage=local", "algo.step_coef=0.5")
    ps = [Problem(id=f"p{i}", prompt=f"q{i}", kind="math", answer="10") for i in range(4)]
    reward = build_reward(c, None).using(decode=lambda ids: bytes(ids).decode())
    rollout = step.collect(ps, [p.prompt for p in ps], DataOrder(4, 3), StepEngine().generate,
                           reward.score, c)
    batch = step.make_batch(rollout, version=0, step=0, cfg=c)
    # every answer is right: outcome advantage 0; the wrong step holds the tokens after the
    # first step's last one (8) up to its own last (19): the newline 9 and the line 10..19
    right, wrong = batch.samples[0], batch.samples[1]
    assert right.advantage == wrong.advantage == 0.0
    assert right.token_advantages == [0.0] * len(right.response_ids)
    assert wrong.token_advantages == [0.0] * 9 + [-0.5] * 11 + [0.0] * 8
    metrics = step.step_metrics(batch, rollout, {}, 0, {})
    assert metrics["steps/per_completion"] == 3.0
    assert metrics["steps/checked_frac"] == pytest.approx(2 / 3)
    assert metrics["steps/wrong_frac"] == 0.25  # 8 of 32 checked steps
    assert metrics["steps/with_wrong_frac"] == 0.5
    assert metrics["steps/first_wrong"] == 2.0
    assert metrics["steps/first_wrong_rel"] == pytest.approx(2 / 3)
    rows = step.sample_rows(batch, [p.prompt for p in ps])
    assert rows[1]["steps"] == [
        {"text": "2 + 3 = 5", "verdict": "correct", "start": 0, "end": 9},
        {"text": "5 * 2 = 11", "verdict": "wrong", "start": 10, "end": 20},
        {"text": "#### 10", "verdict": "uncheckable", "start": 21, "end": 28},
    ]
