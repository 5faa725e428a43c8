"""build_reward / Reward.score: components by name, weights, shaping, config and pairing errors."""

import dataclasses

import pytest

from rlrun import records
from rlrun.config import ConfigError
from rlrun.records import Problem, StdioTest
from rlrun.rewards import RewardError, build_reward
from rlrun.sandbox import Judge

from .helpers import config, math_problem, plugin, sample

P = [math_problem("a", "18"), math_problem("b", "1,000")]


def test_builtin_math_correctness_is_the_default_component():
    reward = build_reward(config(), None)
    scored = reward.score(P, [sample(P[0], "#### 18"), sample(P[1], "#### 999")])
    assert [s.reward for s in scored] == [1.0, 0.0]
    assert [s.components for s in scored] == [{"correctness": 1.0}, {"correctness": 0.0}]
    assert scored[0].sample.response_text == "#### 18"


def test_weighted_builtin_and_plugins_plus_shaping():
    cfg = config(
        "reward.fns=[{name: correctness, weight: 2.0}, "
        f"{{name: has_answer, fn: '{plugin('echo_answer')}', weight: 0.5}}]",
        "reward.shaping.length_limit=0", "reward.shaping.length_penalty_per_100=1.0",
    )
    reward = build_reward(cfg, None)
    scored = reward.score(P, [sample(P[0], "#### 18", 50), sample(P[1], "#### 1,001", 0)])
    assert scored[0].components == pytest.approx(
        {"correctness": 1.0, "has_answer": 1.0, "length": -0.5})
    assert scored[0].reward == pytest.approx(2.0 + 0.5 - 0.5)
    assert scored[1].components["correctness"] == 0.0
    assert scored[1].reward == pytest.approx(0.0)


def test_plugin_failure_propagates_from_score():
    cfg = config(f"reward.fns=[{{name: x, fn: '{plugin('nan_second')}'}}]")
    with pytest.raises(RewardError, match="sample 1 \\(problem b\\)"):
        build_reward(cfg, None).score(P, [sample(P[0], "x"), sample(P[1], "y")])


def test_bad_plugin_fails_when_the_reward_is_built():
    cfg = config(f"reward.fns=[{{name: x, fn: '{plugin('missing')}'}}]")
    with pytest.raises(RewardError, match=r"reward\.fns\[0\]\.fn"):
        build_reward(cfg, None)


@pytest.mark.parametrize("name", ["length", "format", "overlong"])
def test_component_names_cannot_shadow_shaping_terms(name):
    with pytest.raises(ConfigError, match=r"reward\.fns\[0\]\.name"):
        build_reward(config(f"reward.fns=[{{name: {name}}}]"), None)


def test_duplicate_component_names_are_rejected():
    with pytest.raises(ConfigError, match=r"reward\.fns\[1\]\.name"):
        build_reward(config("reward.fns=[{name: c}, {name: c}]"), None)


def test_overlong_buffer_must_fit_the_token_limit():
    with pytest.raises(ConfigError, match="reward.shaping.overlong_buffer"):
        config("reward.shaping.overlong_buffer=100", "rollout.sampling.max_new_tokens=64")
    config("reward.shaping.overlong_buffer=64", "rollout.sampling.max_new_tokens=64")


def test_samples_must_be_paired_with_their_problems():
    reward = build_reward(config(), None)
    with pytest.raises(RewardError, match="sample 0 is for problem b"):
        reward.score([P[0]], [sample(P[1], "#### 18")])
    with pytest.raises(RewardError, match="2 problems for 1 samples"):
        reward.score(P, [sample(P[0], "#### 18")])


def test_math_problem_without_answer_names_it():
    p = Problem(id="q", prompt="?", kind="math")
    with pytest.raises(RewardError, match="problem q"):
        build_reward(config(), None).score([p], [sample(p, "#### 1")])


def test_code_without_a_judge_is_an_error():
    p = Problem(id="c", prompt="?", kind="code", tests=records.Tests(stdio=[StdioTest("", "1\n")]))
    with pytest.raises(RewardError, match="no judge"):
        build_reward(config(), None).score([p], [sample(p, "```python\nprint(1)\n```")])


def test_mixed_batch_scores_math_and_code_with_verdicts():
    cfg = config("reward.no_code_reward=-1.0")
    tests = records.Tests(stdio=[StdioTest("", "1\n")])
    code = Problem(id="c", prompt="?", kind="code", tests=tests)
    problems = [P[0], code, code]
    texts = ["#### 18", "```python\nprint(1)\n```", "no code"]
    with Judge("process", 1, cfg.sandbox) as judge:
        scored = build_reward(cfg, judge.judge).score(
            problems, [sample(p, t) for p, t in zip(problems, texts, strict=True)])
    assert [s.reward for s in scored] == [1.0, 1.0, -1.0]
    assert [v.status for v in scored[1].verdicts] == ["accepted"]
    assert scored[2].verdicts == []


def _tokens(problem, text):
    ids = list(text.encode())
    return records.Sample([], ids, text, [0.0] * len(ids), "stop", problem_id=problem.id)


def test_step_rewards_place_a_part_at_each_steps_last_token():
    reward = build_reward(config("reward.step_rewards=true", "reward.step_correct=0.5"),
                          None).using(decode=lambda ids: bytes(ids).decode())
    text = "3 + 4 = 8\nso 8 * 2 = 16\n#### 16"
    (scored,) = reward.score([P[0]], [_tokens(P[0], text)])
    assert scored.reward == 0.0 and scored.components == {"correctness": 0.0}  # parts apart
    assert [(s.verdict, text[s.start : s.end]) for s in scored.steps] == [
        ("wrong", "3 + 4 = 8"), ("correct", "so 8 * 2 = 16"), ("uncheckable", "#### 16")]
    assert [s.token for s in scored.steps] == [8, 22, 30]
    assert scored.token_rewards == [records.TokenReward(8, -1.0), records.TokenReward(22, 0.5),
                                    records.TokenReward(30, 0.0)]


def test_a_last_line_the_token_limit_cut_off_is_not_a_wrong_step():
    reward = build_reward(config("reward.step_rewards=true"), None).using(
        decode=lambda ids: bytes(ids).decode())
    cut = dataclasses.replace(_tokens(P[0], "3 + 4 = 7\n48 + 32 = 8"), finish_reason="length")
    ended = dataclasses.replace(cut, finish_reason="stop")
    at_a_line_break = dataclasses.replace(_tokens(P[0], "3 + 4 = 7\n48 + 32 = 8\n"),
                                          finish_reason="length")
    verdicts = [[s.verdict for s in scored.steps]
                for scored in reward.score([P[0]] * 3, [cut, ended, at_a_line_break])]
    assert verdicts == [["correct", "uncheckable"], ["correct", "wrong"], ["correct", "wrong"]]


def test_step_rewards_without_a_decoder_check_steps_but_place_no_parts():
    reward = build_reward(config("reward.step_rewards=true"), None)
    (scored,) = reward.score([P[0]], [sample(P[0], "3 + 4 = 8\n#### 18")])
    assert [(s.verdict, s.token) for s in scored.steps] == [("wrong", -1), ("uncheckable", -1)]
    assert scored.token_rewards == [] and scored.reward == 1.0


def test_without_step_rewards_nothing_is_checked():
    (scored,) = build_reward(config(), None).score([P[0]], [sample(P[0], "3 + 4 = 8\n#### 18")])
    assert scored.steps == [] and scored.token_rewards == []
