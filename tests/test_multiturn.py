"""Multi-turn rollouts with the code-repair environment, driven by a scripted policy on the tiny
model's byte tokenizer and judged by the real sandbox: what the engine is asked to continue,
what the learner receives, what the reward scores, and what no observation may contain."""

from __future__ import annotations

import dataclasses
import re
import sys

import pytest

from rlrun import batching
from rlrun.config import Config, load_config
from rlrun.data.toy import repair_problems
from rlrun.engines.base import SamplingParams
from rlrun.environments import EnvError, Feedback, load_environment
from rlrun.environments.code_repair import CodeRepair, split_tests
from rlrun.models import _tiny_tokenizer
from rlrun.multiturn import Episodes, ObservationTokens, episode_metrics
from rlrun.records import CallTest, JudgeResult, Problem, Sample, StdioTest, Verdict
from rlrun.records import Tests as TestSet
from rlrun.rewards import build_reward
from rlrun.sandbox import Judge
from rlrun.scoring import score_groups
from rlrun.training import run_training

PROGRAMS = {"upper": "print(input().upper())", "reverse": "print(input()[::-1])",
            "double": "s = input(); print(s + s)"}


def config(*overrides: str) -> Config:
    return load_config(None, ["env.name=code_repair", "env.max_turns=3", "env.max_tokens=2000",
                              "rollout.sampling.max_new_tokens=64", *overrides])


class ScriptedPolicy:
    """Answers turn 1 with `first`; a later turn reads the expected output in the feedback and
    writes the program that makes it, or `stubborn`'s program when set. Records every context
    it was asked to continue."""

    def __init__(self, first: str = "```python\nprint(input().upper())\n```",
                 stubborn: str | None = None) -> None:
        self.tok = _tiny_tokenizer()
        self.first, self.stubborn = first, stubborn
        self.contexts: list[list[int]] = []

    def _sample(self, prompt_ids: list[int], text: str, version: int = 0) -> Sample:
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return Sample(prompt_ids, ids, text, [-0.5] * len(ids), "stop", weight_version=version,
                      engine=0)

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        ids = [self.tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return [[self._sample(p, self.first) for _ in range(sampling.n)] for p in ids]

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        out = []
        for s in samples:
            assert not s.response_ids  # a new turn continues the trajectory's ids
            self.contexts.append(s.prompt_ids)
            context = self.tok.decode(s.prompt_ids)
            if self.stubborn is not None:
                text = self.stubborn
            else:
                word, expected = re.findall(r"Input:\n(\w+)\nExpected output:\n(\w+)", context)[-1]
                name = next(n for n, p in PROGRAMS.items()
                            if {"upper": word.upper(), "reverse": word[::-1],
                                "double": word + word}[n] == expected)
                text = f"```python\n{PROGRAMS[name]}\n```"
            out.append(dataclasses.replace(self._sample([], text, version=1),
                                           prompt_ids=s.prompt_ids))
        return out


@pytest.fixture(scope="module")
def judge():
    with Judge("process", 2, config().sandbox) as j:
        yield j.judge


def run(problems: list[Problem], policy: ScriptedPolicy, judge, cfg: Config, n: int = 2):
    episodes = Episodes(CodeRepair, cfg, ObservationTokens(policy.tok, chat=False),
                        policy.extend, judge)
    sampling = SamplingParams(max_new_tokens=cfg.rollout.sampling.max_new_tokens, n=n, seed=3)
    prompts = [f"{p.prompt}\nAnswer with a ```python code block.\n" for p in problems]
    first = [[dataclasses.replace(s, problem_id=p.id) for s in group]
             for p, group in zip(problems, policy.generate(prompts, sampling), strict=True)]
    groups = episodes(problems, first, sampling)
    reward = build_reward(cfg, judge)
    return groups, score_groups(episodes.score(reward.score), problems, groups)


def test_a_failed_first_program_gets_the_visible_failure_and_the_fix_is_scored_on_hidden_tests(
        judge):
    cfg = config()
    problems = [p for p in repair_problems(30, seed=0) if p.meta["template"] == "reverse"][:2]
    policy = ScriptedPolicy()
    groups, scored = run(problems, policy, judge, cfg)
    s = scored[0][0]
    first, second = s.sample.turns
    visible = problems[0].tests.stdio[0]
    assert first.observation == (
        f"Visible test 1 of 1 failed: wrong answer.\nInput:\n{visible.input.strip()}\n"
        f"Expected output:\n{visible.output}\nYour output:\n{visible.input.strip().upper()}\n"
        "Answer with a ```python code block.")
    assert second.done and second.observation == ""
    assert second.info == {"no_program": 0.0, "visible_passed": 1.0}
    assert s.reward == 1.0 and s.sample.response_text == f"```python\n{PROGRAMS['reverse']}\n```"
    # The learner's sequence: turn 1, the observation's tokens, turn 2; only turns are the model's.
    tok = policy.tok
    obs = tok("\n" + first.observation + "\n", add_special_tokens=False)["input_ids"]
    turn1 = tok(policy.first, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    sample = s.sample
    assert sample.response_ids[: len(turn1)] == turn1
    assert sample.response_ids[len(turn1): len(turn1) + len(obs)] == obs
    assert sample.env_mask == [1] * len(turn1) + [0] * len(obs) + [1] * (
        len(sample.response_ids) - len(turn1) - len(obs))
    assert all(lp == 0.0 for lp, m in zip(sample.behaviour_logprobs, sample.env_mask,
                                          strict=True) if not m)
    assert first.end == len(turn1) and second.end == len(sample.response_ids)
    # The engine continued exactly the ids the learner trains on: nothing re-tokenized.
    assert policy.contexts[0] == sample.prompt_ids + sample.response_ids[: len(turn1) + len(obs)]
    # Turn 2 came from weight version 1: every token after turn 1 says so.
    assert sample.weight_version == 0 and sample.versions()[len(turn1) + len(obs):] == [1] * (
        len(sample.response_ids) - len(turn1) - len(obs))
    assert len(sample.env_mask) == len(sample.response_ids) == len(sample.behaviour_logprobs)


def test_no_hidden_test_appears_in_any_observation_or_prompt(judge):
    cfg = config("env.max_turns=3")
    problems = repair_problems(12, seed=1)
    # Every kind of failure: wrong answers, a crash, no program, a timeout.
    for first in ["```python\nprint(input().upper())\n```", "```python\nprint(1/0)\n```",
                  "no code here", "```python\nwhile True: pass\n```"]:
        policy = ScriptedPolicy(first=first, stubborn=first)
        groups, _ = run(problems, policy, judge, config("env.max_turns=2",
                                                         "sandbox.time_limit_s=0.5"), n=1)
        feedback = "".join(t.observation for g in groups for s in g for t in s.turns)
        assert feedback.count("Visible test 1 of 1 failed") + feedback.count("No ```python") >= 8
        seen = feedback + "".join(policy.tok.decode(c) for c in policy.contexts)
        for problem in problems:
            _, hidden = split_tests(problem, cfg.env.visible_tests)
            for test in hidden.stdio:  # as a line of its own, as feedback would quote it
                assert f"\n{test.input.strip()}\n" not in seen
                assert f"\n{test.output}\n" not in seen


def test_every_kind_of_failure_has_its_own_observation(judge):
    problem = repair_problems(1, seed=2)[0]
    env = CodeRepair(problem, config("sandbox.time_limit_s=0.5"))
    none = env.observe("no program", [])
    assert none.observation.startswith("No ```python code block found") and not none.done
    crash = env.observe("", judge(env.submissions("```python\nraise KeyError('k')\n```")))
    assert "failed: runtime error.\nInput:" in crash.observation
    assert "KeyError: 'k'" in crash.observation and "executor" not in crash.observation
    assert 'Error:\n  File "main.py", line 1' in crash.observation
    slow = env.observe("", judge(env.submissions("```python\nwhile True: pass\n```")))
    assert "failed: time limit exceeded (2.0 s)." in slow.observation
    broken = env.observe("", [JudgeResult("0", "sandbox_error", 0, 1,
                                          [Verdict("sandbox_error")])])
    assert broken.done and not broken.judged


def test_output_that_is_not_utf8_reaches_the_model_as_text(judge):
    problem = repair_problems(1, seed=2)[0]
    env = CodeRepair(problem, config())
    program = "```python\nimport sys\nsys.stdout.buffer.write(b'\\xff\\xfe?')\n```"
    feedback = env.observe("", judge(env.submissions(program)))
    assert "Your output:\n\ufffd\ufffd?" in feedback.observation
    tokens = ObservationTokens(_tiny_tokenizer(), chat=False)
    assert tokens.ids(feedback.observation, last_token=None)


def test_a_trajectory_whose_sandbox_call_failed_is_unscored_and_leaves_the_baseline(judge):
    calls = []

    def flaky(subs):
        calls.append(len(subs))
        if len(calls) == 2:  # turn 2's judging: the sandbox fails one trajectory
            results = judge(subs)
            results[0] = JudgeResult(results[0].id, "sandbox_error", 0, 1,
                                     [Verdict("sandbox_error")])
            return results
        return judge(subs)

    cfg = config()
    problems = [p for p in repair_problems(30, seed=0) if p.meta["template"] == "reverse"][:1]
    groups, scored = run(problems, ScriptedPolicy(stubborn="```python\nprint(input())\n```"),
                         flaky, cfg, n=4)
    rewards = [s.reward for s in scored[0]]
    assert rewards[0] is None and all(r is not None for r in rewards[1:])
    assert not scored[0][0].sample.turns[-1].judged
    samples = batching.to_train_samples([batching.Group(0, scored[0])], "group", 1.0)
    assert samples[0].advantage == 0.0  # out of the baseline, not a zero reward in it
    metrics = episode_metrics(scored[0])
    assert metrics["env/unjudged"] == 1.0


def test_turns_stop_at_the_turn_limit_and_the_token_budget(judge):
    problems = repair_problems(4, seed=3)
    stubborn = "```python\nprint(input())\n```"
    groups, scored = run(problems, ScriptedPolicy(first=stubborn, stubborn=stubborn), judge,
                         config("env.max_turns=4"), n=1)
    assert all(len(s.sample.turns) == 4 for g in scored for s in g)
    assert all(s.reward == 0.0 for g in scored for s in g)
    cfg = config("env.max_turns=4", "env.max_tokens=300")
    groups, _ = run(problems, ScriptedPolicy(first=stubborn, stubborn=stubborn), judge, cfg, n=1)
    for g in groups:
        assert len(g[0].response_ids) <= 300 and len(g[0].turns) < 4


def test_turn_cost_and_turn_rewards(judge):
    problems = [p for p in repair_problems(30, seed=0) if p.meta["template"] == "double"][:1]
    cfg = config("env.turn_cost=0.1", "env.turn_rewards=true", "algo.step_advantage=local")
    _, scored = run(problems, ScriptedPolicy(), judge, cfg, n=1)
    s = scored[0][0]
    assert s.reward == pytest.approx(0.9)
    assert [(r.position, r.value) for r in s.token_rewards] == [
        (t.end - 1, t.reward) for t in s.sample.turns] and [t.reward for t in
                                                          s.sample.turns] == [0.0, 1.0]


def test_episode_metrics_count_first_turn_and_final_solves(judge):
    problems = repair_problems(30, seed=0)
    _, scored = run(problems, ScriptedPolicy(), judge, config(), n=1)
    flat = [s for g in scored for s in g]
    uppers = sum(p.meta["template"] == "upper" for p in problems)
    m = episode_metrics(flat)
    assert m["env/solved_first_turn"] == pytest.approx(uppers / len(problems))
    assert m["env/solved"] == 1.0 and m["env/fix_rate"] == 1.0
    assert m["env/turns"] == pytest.approx((uppers + 2 * (len(problems) - uppers)) / len(problems))


def test_a_program_that_games_the_visible_test_is_paid_by_the_hidden_ones(judge):
    problem = [p for p in repair_problems(30, seed=0) if p.meta["template"] == "upper"][0]
    shown = problem.tests.stdio[0]
    gamed = f"```python\nprint({shown.output!r})\n```"
    _, scored = run([problem], ScriptedPolicy(first=gamed), judge, config(), n=1)
    s = scored[0][0]
    assert s.sample.turns[-1].info["visible_passed"] == 1.0 and s.reward == 0.0
    assert episode_metrics([s])["env/visible_only"] == 1.0


def test_feedback_shows_the_test_that_failed_when_max_tests_judges_a_subset():
    # The verdicts are in the order of the subset sandbox.max_tests ran; the feedback showed
    # the visible test at the same index instead.
    tests = TestSet(stdio=[StdioTest(f"in{i}", f"out{i}") for i in range(6)])
    problem = Problem("p", "q", "code", tests=tests, meta={"visible_tests": 5})
    env = CodeRepair(problem, config("sandbox.max_tests=2"))
    (sub,) = env.submissions("```python\nprint(1)\n```")
    ran = [t.input for t in sub.tests.stdio]
    assert len(ran) == 2 and ran != ["in0", "in1"]
    failed = JudgeResult("0", "wrong_answer", 1, 2, [Verdict("accepted"),
                                                     Verdict("wrong_answer", stdout_head="1")])
    observation = env.observe("", [failed]).observation
    want = ran[1]
    assert f"Input:\n{want}\nExpected output:\nout{want[2:]}" in observation, observation


def test_feedback_on_a_call_test_shows_what_the_function_returned(judge):
    tests = TestSet(fn_name="add", calls=[CallTest([1, 2], 3), CallTest([2, 2], 4)])
    env = CodeRepair(Problem("p", "q", "code", tests=tests), config())
    program = "```python\ndef add(a, b):\n    print('adding')\n    return a - b\n```"
    observation = env.observe("", judge(env.submissions(program))).observation
    assert "Call: add(*[1, 2])\nExpected:\n3\nYour function:\nreturned -1\n" in observation
    assert "adding" not in observation


def test_output_the_verdict_cut_shows_as_cut_whatever_env_feedback_chars(judge):
    problem = repair_problems(1, seed=2)[0]
    env = CodeRepair(problem, config("env.feedback_chars=400"))
    long = env.observe("", judge(env.submissions("```python\nprint('y' * 300)\n```")))
    assert "Your output:\n" + "y" * 255 + "...\n" in long.observation
    short = env.observe("", judge(env.submissions("```python\nprint('y' * 30)\n```")))
    assert "Your output:\n" + "y" * 30 + "\n" in short.observation


def test_split_keeps_a_datasets_own_split_and_needs_a_hidden_test():
    tests = TestSet(stdio=[StdioTest(str(i), str(i)) for i in range(5)])
    problem = Problem("p", "q", "code", tests=tests, meta={"visible_tests": 2})
    visible, hidden = split_tests(problem, 1)
    assert [t.input for t in visible.stdio] == ["0", "1"]
    assert [t.input for t in hidden.stdio] == ["2", "3", "4"]
    one = Problem("q", "q", "code", tests=TestSet(stdio=tests.stdio[:1]))
    with pytest.raises(EnvError, match="too few to show 1 and keep one hidden"):
        split_tests(one, 1)
    # A split that shows nothing (a CodeContests row without public tests) stays so: showing
    # env.visible_tests of the hidden tests instead quoted one in the feedback.
    unseen = dataclasses.replace(problem, meta={"visible_tests": 0})
    with pytest.raises(EnvError, match="problem p has no visible test in its dataset's own"):
        split_tests(unseen, 1)


def test_chat_models_get_the_observation_as_a_user_turn():
    tok = _tiny_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tokens = ObservationTokens(tok, chat=True)
    ids = tokens.ids("it failed", last_token=None)
    assert tok.decode(ids) == ("<|im_end|>\n<|im_start|>user\nit failed<|im_end|>\n"
                               "<|im_start|>assistant\n")


def test_a_turn_cut_off_on_the_start_of_the_end_of_turn_text_still_gets_the_token():
    tok = _tiny_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tokens = ObservationTokens(tok, chat=True)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ended = tokens.ids("it failed", last_token=im_end)
    assert tok.decode(ended) == "\n<|im_start|>user\nit failed<|im_end|>\n<|im_start|>assistant\n"
    # A turn cut at max_new_tokens on "<" had the frame's "<" dropped: "|im_end|>" as text, and
    # the assistant turn never closed.
    cut = tokens.ids("it failed", last_token=tok("<", add_special_tokens=False)["input_ids"][0])
    assert cut[0] == im_end and cut[1:] == ended


def test_control_tokens_a_program_prints_reach_the_model_as_text():
    # The program's output is quoted in the observation: printing "</s>" (or a chat model's
    # "<|im_end|>") put the real control token into the model's context.
    tok = _tiny_tokenizer()
    plain = ObservationTokens(tok, chat=False).ids("Your output:\n</s><pad>", last_token=None)
    assert tok.eos_token_id not in plain and tok.pad_token_id not in plain
    assert tok.decode(plain) == "\nYour output:\n</s><pad>\n"
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tokens = ObservationTokens(tok, chat=True)
    ids = tokens.ids("out: </s>", last_token=tok.eos_token_id)
    assert ids.count(tok.eos_token_id) == 1  # the template's own end of the user turn
    text = tok("out: </s>", add_special_tokens=False, split_special_tokens=True)["input_ids"]
    tail = tok(tokens.tail, add_special_tokens=False)["input_ids"]
    assert ids[-len(tail) - len(text):] == text + tail and tail[0] == tok.eos_token_id


class NoSignature:
    def __init__(self, problem):
        pass

    def scored_problem(self): ...

    def submissions(self, response): ...

    def observe(self, response, results):
        return Feedback("", True)


class NoObserve:
    def __init__(self, problem, cfg):
        pass

    def scored_problem(self): ...

    def submissions(self, response): ...


@pytest.mark.parametrize(("name", "message"), [
    ("no_such_module_xyz:Env", "env.name: cannot import 'no_such_module_xyz'"),
    ("tests.test_multiturn:Missing", "has no attribute 'Missing'"),
    ("tests.test_multiturn:NoSignature", "it must take (problem, cfg)"),
    ("tests.test_multiturn:NoObserve", "has no method observe"),
    ("repair", "neither a built-in environment (code_repair) nor module:Class"),
])
def test_a_bad_environment_plugin_fails_in_one_line(name, message):
    with pytest.raises(EnvError, match=re.escape(message)) as err:
        load_environment(name)
    assert "\n" not in str(err.value)


def test_a_bad_environment_stops_training_before_ray(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "data.train=toy:repair",
                             "data.toy_size=16", "data.val_size=4",
                             "env.name=tests.test_multiturn:NoSignature"])
    with pytest.raises(EnvError, match="it must take"):
        run_training(cfg)
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()
    # A problem the environment cannot be made for stops it there too.
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "data.train=toy:repair",
                             "data.toy_size=16", "data.val_size=4", "env.name=code_repair",
                             "env.visible_tests=4"])
    with pytest.raises(EnvError, match="too few to show 4"):
        run_training(cfg)


def test_eval_reports_accuracy_and_pass_at_k_after_each_turn(judge):
    from rlrun.evaluation import evaluate, format_table

    cfg = config("env.max_turns=2")
    problems = repair_problems(12, seed=5)
    policy = ScriptedPolicy()
    episodes = Episodes(CodeRepair, cfg, ObservationTokens(policy.tok, chat=False),
                        policy.extend, judge)
    result = evaluate(problems, policy.generate, episodes.score(build_reward(cfg, judge).score),
                      SamplingParams(max_new_tokens=64, seed=1), k_list=[1, 2], samples=2,
                      greedy=True, episodes=episodes,
                      render=lambda p: f"{p.prompt}\nAnswer with a ```python code block.\n")
    m = result.metrics("val")
    uppers = sum(p.meta["template"] == "upper" for p in problems) / len(problems)
    assert m["val/turn1/accuracy"] == pytest.approx(uppers)
    assert m["val/turn1/pass@2"] == pytest.approx(uppers)
    assert m["val/turn2/accuracy"] == m["val/turn2/greedy_accuracy"] == m["val/accuracy"] == 1.0
    table = format_table(result.summary()).splitlines()
    assert [line.split()[:3] for line in table if line.startswith("after turn")] == [
        ["after", "turn", "1"], ["after", "turn", "2"]]
    assert table[4].split()[3:] == ["-", "1.000", "1.000", "1.000", "1.000", "-"]  # turn 2


def test_sft_transcripts_pair_a_real_failure_with_the_reference_and_hide_the_hidden_tests(judge):
    from rlrun.sft import reference_completion, repair_rows

    cfg = config()
    problems = repair_problems(20, seed=6)
    frame = ObservationTokens(_tiny_tokenizer(), chat=False).frame
    rows = repair_rows(problems, cfg, CodeRepair, judge, lambda p: f"{p.id}: {p.prompt}\n",
                       frame)
    assert 5 <= len(rows) < len(problems)  # a borrowed attempt that solves a problem is skipped
    for row in rows:
        problem = next(p for p in problems if row["prompt"].startswith(f"{p.id}: "))
        assert row["completion"] == reference_completion(problem)
        assert "Visible test 1 of 1 failed: wrong answer." in row["prompt"]
        _, hidden = split_tests(problem, cfg.env.visible_tests)
        assert all(f"\n{t.input.strip()}\n" not in row["prompt"] for t in hidden.stdio)
