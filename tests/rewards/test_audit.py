"""Reward audit: reference/wrong completions, counts, worst rows and the summary line."""

import pytest

from rlrun.data import load_problems
from rlrun.rewards import RewardError, build_reward
from rlrun.rewards.audit import (
    audit_before_training,
    audit_texts,
    math_reference,
    math_wrong,
    perturb_answer,
    perturb_number,
    perturb_step,
    run_audit,
    step_audit,
    truncate_program,
)
from rlrun.rewards.steps import check_steps
from rlrun.sandbox import Judge

from .helpers import FIXTURES, config, math_problem, plugin


@pytest.mark.parametrize(
    ("answer", "wrong"),
    [("18", "19"), ("1,000", "1001"), ("-1", "0"), ("2.5", "3.5"),
     ("\\frac{1}{2}", "\\frac{1}{2}+1"), ("1" + "0" * 30, "1" + "0" * 29 + "1"),
     ("-0.5", "0.5")],
)
def test_perturb_answer_changes_the_value(answer, wrong):
    assert perturb_answer(answer) == wrong


def test_math_wrong_changes_only_the_extracted_answer():
    text = "9 * 2 = $18 a day\n#### 18"
    assert math_wrong(text, "18", "strict") == "9 * 2 = $18 a day\n#### 19"
    assert math_wrong("so \\boxed{\\frac{1}{2}} ok", "\\frac{1}{2}", "boxed") == (
        "so \\boxed{\\frac{1}{2}+1} ok")


def test_math_wrong_without_an_extractable_answer_writes_a_perturbed_one():
    assert math_wrong("no answer here", "18", "strict") == "#### 19"


@pytest.mark.parametrize(
    ("mode", "text"),
    [("strict", "#### 18"), ("flexible", "The answer is 18."),
     ("boxed", "The answer is $\\boxed{18}$."), ("math_verify", "The answer is $\\boxed{18}$.")],
)
def test_reference_without_a_worked_solution_is_written_for_the_extractor(mode, text):
    assert math_reference(math_problem("p", "18"), mode) == text


def test_truncate_program_keeps_the_first_half_and_a_lone_line_becomes_pass():
    assert truncate_program("a = 1\nb = 2\nc = 3\nprint(a)\n") == "a = 1\nb = 2\n"
    assert truncate_program("    return x + 1\n") == "    pass\n"


def test_problems_without_reference_are_skipped():
    p = math_problem("p", "1")
    p.answer = None
    assert audit_texts(p, "strict") is None


def _gsm8k():
    return load_problems(str(FIXTURES / "gsm8k_test_subset.jsonl")).problems


@pytest.mark.parametrize("mode", ["strict", "flexible"])
def test_gsm8k_subset_audit_passes_references_and_rejects_wrong(mode):
    problems = _gsm8k()
    report = run_audit(build_reward(config(f"reward.math_extractor={mode}"), None), problems)
    n = len(problems)
    assert report.summary() == f"reference: {n}/{n} passed, wrong: 0/{n} passed"
    assert report.reference_pass_rate == 1.0
    assert "worst rows" not in report.table()


def test_mismatched_extractor_fails_the_references_and_lists_them():
    problems = _gsm8k()[:5]
    report = run_audit(build_reward(config("reward.math_extractor=boxed"), None), problems)
    assert report.summary() == "reference: 0/5 passed, wrong: 0/5 passed"
    table = report.table(worst=3)
    assert "worst rows (3 of 5)" in table and "gsm8k-0" in table and "no_answer" in table
    assert report.count("reference", ("no_answer",)) == 5


def test_a_reward_that_pays_for_anything_shows_as_wrong_passes():
    problems = _gsm8k()[:4]
    cfg = config(f"reward.fns=[{{name: always, fn: '{plugin('always_one')}'}}]")
    report = run_audit(build_reward(cfg, None), problems)
    assert report.summary() == "reference: 4/4 passed, wrong: 4/4 passed"
    assert report.rows[1].status == "plugin"
    assert "worst rows (4 of 4)" in report.table()


def test_humaneval_subset_audit_in_the_sandbox():
    cfg = config()
    problems = load_problems(str(FIXTURES / "humaneval_subset.jsonl")).problems
    with Judge("process", 2, cfg.sandbox) as judge:
        report = run_audit(build_reward(cfg, judge.judge), problems)
    assert report.summary() == "reference: 8/8 passed, wrong: 0/8 passed"


def test_audit_before_training_raises_with_the_summary_and_the_way_out():
    problems = _gsm8k()
    cfg = config("reward.math_extractor=boxed", "reward.audit_limit=4")
    with pytest.raises(RewardError, match=r"reference: 0/4 passed.*audit_before_training=false"):
        audit_before_training(build_reward(cfg, None), problems)
    report = audit_before_training(build_reward(config("reward.audit_limit=4"), None), problems)
    assert report.summary() == "reference: 4/4 passed, wrong: 0/4 passed"


@pytest.mark.parametrize(
    ("written", "changed"),
    [("9", "10"), ("130,000", "130001"), ("1.50", "2.50"), ("25%", "26%"), (".5", "1.5"),
     ("⅓", "4/3"), ("75\\%", "76\\%")],
)
def test_perturb_number_adds_one_keeping_decimals_and_percent(written, changed):
    assert perturb_number(written) == changed


def test_perturb_step_keeps_a_latex_percent_sign():
    text = r"\frac{3}{4} \times 100\% = 75\%"
    assert perturb_step(text, check_steps(text)[0]) == r"\frac{3}{4} \times 100\% = 76\%"


def test_perturb_step_changes_the_result_wherever_the_step_writes_it():
    text = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = 18\n#### 18"
    first = check_steps(text)[0]
    assert perturb_step(text, first) == (
        "Janet sells 16 - 3 - 4 = <<16-3-4=10>>10 duck eggs a day.\nShe makes 9 * 2 = 18\n#### 18")
    assert perturb_step(text, check_steps(text)[2]) is None  # "#### 18" claims nothing


def test_step_audit_lists_reference_steps_that_do_not_verify():
    p = math_problem("typo", "12")
    p.reference = "She had 32 - 20 = 300 left.\nSo 300 - 288 = 12\n#### 12"
    audit = step_audit([p])
    assert (audit.steps, audit.checkable, audit.verified) == (3, 2, 1)
    assert [(w.problem_id, w.step, w.claims) for w in audit.wrong] == [
        ("typo", 0, ["32 - 20 = 300"])]
    assert "typo step 1: She had 32 - 20 = 300 left." in audit.table()
    # the verified step is perturbed and caught; the wrong one is not perturbed
    assert (audit.perturbed, audit.caught) == (1, 1)


def test_gsm8k_subset_step_audit_verifies_every_checkable_step_and_catches_every_perturbation():
    problems = _gsm8k()
    report = run_audit(build_reward(config("reward.step_rewards=true"), None), problems)
    steps = report.steps
    assert steps is not None and not steps.wrong and not steps.missed
    assert steps.verified == steps.checkable > 3 * len(problems)
    assert steps.perturbed >= steps.verified - 2 and steps.caught == steps.perturbed
    assert steps.summary() == (
        f"steps: {steps.verified}/{steps.verified} checkable reference steps verified, "
        f"perturbed: {steps.perturbed}/{steps.perturbed} caught at their step (100.00%)")
    assert "step audit of 50 worked solutions" in report.table()


def test_without_step_rewards_the_audit_has_no_step_section():
    report = run_audit(build_reward(config(), None), _gsm8k()[:3])
    assert report.steps is None and "step audit" not in report.table()
