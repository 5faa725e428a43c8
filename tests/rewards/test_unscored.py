"""Samples a reward cannot score: a plug-in's None (TRL's convention), a sandbox failure, and
what the step, the logs, the audit and evaluation make of them."""

import json

import pytest

from rlrun import batching, records, step
from rlrun.config import load_config
from rlrun.data_order import DataOrder
from rlrun.engines import SamplingParams
from rlrun.evaluation import aggregate, evaluate
from rlrun.records import JudgeResult, Problem, Sample, StdioTest, Submission, Verdict
from rlrun.rewards import build_reward
from rlrun.rewards.audit import run_audit
from rlrun.rewards.plugins import call_plugin, load_plugin

from .helpers import config, math_problem, plugin, sample

P = [math_problem("p0", "1"), math_problem("p1", "2"), math_problem("p2", "3")]


def test_a_plugin_may_return_none_but_not_nan():
    fn = load_plugin(plugin("none_first"))
    samples = [sample(p, "x") for p in P]
    assert call_plugin(fn, "none_first", P, samples) == [None, 0.0, 0.0]


def test_a_none_component_adds_nothing_and_no_score_at_all_is_unscored():
    cfg = config(f"reward.fns=[{{name: first, fn: '{plugin('none_first')}', weight: 2.0}}]")
    scored = build_reward(cfg, None).score(P, [sample(p, "x") for p in P])
    assert [s.reward for s in scored] == [None, 0.0, 0.0]
    assert scored[0].components == {"first": None}
    # with the builtin correctness as a second function, the None leaves the sum (TRL's nansum)
    cfg = config(f"reward.fns=[{{name: first, fn: '{plugin('none_first')}', weight: 2.0}}, "
                 "{name: correctness, weight: 0.5}]")
    scored = build_reward(cfg, None).score(P, [sample(P[0], "#### 1")] + [
        sample(p, "#### 0") for p in P[1:]])
    assert scored[0].components == {"first": None, "correctness": 1.0}
    assert [s.reward for s in scored] == [0.5, 0.0, 0.0]


# --- a sandbox failure -------------------------------------------------------------------------

def code_problem(pid: str) -> Problem:
    return Problem(id=pid, prompt=f"echo {pid}", kind="code",
                   tests=records.Tests(stdio=[StdioTest("1\n", "1\n"), StdioTest("2\n", "2\n")]))


class FakeJudge:
    """Accepts every program but those containing BOOM, which get `sandbox_error` (what the
    sandbox pool reports once its retries are spent); records what it judged."""

    def __init__(self) -> None:
        self.judged: list[str] = []

    def __call__(self, subs: list[Submission]) -> list[JudgeResult]:
        self.judged += [s.code for s in subs]
        return [
            JudgeResult(s.id, "sandbox_error", 0, 2, [Verdict("sandbox_error", detail="lost")])
            if "BOOM" in s.code
            else JudgeResult(s.id, "accepted", 2, 2, [Verdict("accepted")] * 2)
            for s in subs
        ]


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_a_sandbox_error_is_an_unscored_sample_not_a_zero():
    cfg = config(
        "reward.fns=[{name: correctness, weight: 1.0}, "
        f"{{name: one, fn: '{plugin('always_one')}', weight: 0.5}}]",
        "reward.shaping.format_reward=0.25",
    )
    problems = [code_problem("c0"), code_problem("c1")]
    samples = [sample(problems[0], fenced("print(input())")),
               sample(problems[1], fenced("print(input())  # BOOM"))]
    judge = FakeJudge()
    ok, failed = build_reward(cfg, judge).evaluate(problems, samples)
    assert len(judge.judged) == 2
    assert ok.scored.reward == pytest.approx(1.0 + 0.5 + 0.25)
    # correctness is unknown, so neither the plug-in nor the format term stands in for it
    assert failed.scored.reward is None
    assert failed.scored.components == {"correctness": None, "one": 1.0, "format": 0.25}
    assert failed.correctness.status == "sandbox_error"
    assert [v.status for v in failed.scored.verdicts] == ["sandbox_error"]


def test_the_step_counts_unscored_samples_and_gives_them_no_advantage():
    cfg = load_config(None, ["algo.group_size=4", "algo.prompts_per_step=2", "run.seed=0"])
    problems = [code_problem("c0"), code_problem("c1")]
    reward = build_reward(cfg, FakeJudge())

    def generate(prompts, sampling):
        # group "c0": two failures of the sandbox and two judged programs, one of them empty of
        # code (no_code_reward 0); group "c1": three failures, so a single scored sample
        texts = {"echo c0": ["BOOM", "BOOM", "print(input())", "no code"],
                 "echo c1": ["BOOM", "BOOM", "BOOM", "print(input())"]}
        return [[Sample([1], [k + 1], fenced(t) if t != "no code" else t, [0.0], "stop")
                 for k, t in enumerate(texts[p])] for p in prompts]

    rollout = step.collect(problems, [p.prompt for p in problems], DataOrder(2, 0), generate,
                           reward.score, cfg, judges_code=True)
    assert rollout.metrics["train/unscored"] == 5.0
    assert rollout.metrics["sandbox/sandbox_error"] == 5.0
    batch = step.make_batch(rollout, version=0, step=0, cfg=cfg)
    advantages = {}
    for g in batch.groups:
        first = sum(len(h.scored) for h in batch.groups[: batch.groups.index(g)])
        advantages[g.scored[0].sample.problem_id] = [
            s.advantage for s in batch.samples[first : first + len(g.scored)]
        ]
    # c0: the two scored rewards 1 and 0 are the whole group statistic: mean 0.5, std
    # sqrt(0.5) = 0.707107, A = +-0.5 / 0.707207 = +-0.707007; the unscored samples get 0
    assert advantages["c0"] == pytest.approx([0.0, 0.0, 0.707007, -0.707007], abs=1e-5)
    assert advantages["c1"] == [0.0] * 4  # one scored sample carries no signal
    _, flat = batching.split_informative(batch.groups)
    assert [g.scored[0].sample.problem_id for g in flat] == ["c1"]
    # the logs: rewards over the scored samples only, and valid JSON
    metrics = batching.batch_metrics(batch.groups, version=0)
    assert metrics["reward/mean"] == pytest.approx(2 / 3)
    assert metrics["reward/correctness"] == pytest.approx(2 / 3)
    assert metrics["train/accuracy"] == pytest.approx(2 / 3)
    rows = step.sample_rows(batch, [p.prompt for p in problems])
    text = "\n".join(json.dumps(r, allow_nan=False) for r in rows)
    logged = [json.loads(line) for line in text.splitlines()]
    assert [r["reward"] for r in logged].count(None) == 5
    assert all(r["advantage"] == 0.0 for r in logged if r["reward"] is None)


def test_the_audit_does_not_pass_a_reference_the_sandbox_could_not_judge():
    problem = code_problem("c0")
    problem.reference = "print(input())  # BOOM"
    report = run_audit(build_reward(config(), FakeJudge()), [problem])
    reference = [r for r in report.rows if r.case == "reference"]
    assert [(r.passed, r.status) for r in reference] == [(False, "sandbox_error")]
    assert report.reference_passed == 0


def test_evaluation_counts_an_unscored_completion_as_not_correct():
    problems = [code_problem("c0")]

    def generate(prompts, sampling):
        texts = [fenced("print(input())"), fenced("BOOM"), fenced("BOOM"), "no code"]
        return [[Sample([], [], t, [], "stop") for t in texts]]

    result = evaluate(problems, generate, build_reward(config(), FakeJudge()).score,
                      SamplingParams(), k_list=[1, 2], samples=4)
    row = result.problems[0]
    assert (row.n, row.correct) == (4, 1)
    assert row.rewards == [1.0, None, None, 0.0]
    assert row.pass_at[1] == pytest.approx(0.25)
    assert aggregate(result.problems, [1])["reward_mean"] == pytest.approx(0.5)
    json.dumps(row.to_dict(), allow_nan=False)



def test_the_run_report_ranks_only_scored_samples():
    from rlrun.metrics.report import _samples_html, pick_samples

    row = {"step": 1, "problem_id": "c0", "prompt": "p", "response": "r"}
    rows = [row | {"reward": None, "components": {"correctness": None, "format": 0.25}},
            row | {"reward": 0.5, "components": {"correctness": 0.5, "brevity": None}}]
    assert [r["reward"] for r in pick_samples(rows)["best"]] == [0.5]
    assert "correctness=0.5, brevity=none" in _samples_html(rows)
    assert "No scored sample" in _samples_html(rows[:1])
