"""Math extraction, normalisation, LaTeX equivalence and the verifier's hard timeout."""

import json
import time

import pytest

from rlrun.rewards.audit import math_wrong
from rlrun.rewards.math import (
    check_answer,
    extract_answer,
    find_answer,
    normalize_number,
)

from .helpers import FIXTURES


def math_correct(text: str, gold: str, mode: str, timeout_s: float) -> bool:
    return check_answer(text, gold, mode, timeout_s).correct


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("1,000", "1000"),
        ("1,000.00", "1000"),
        ("$18", "18"),
        ("18.", "18"),
        ("+5", "5"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("0.50", "0.5"),
        ("-3.25", "-3.25"),
        (".5", "0.5"),
        ("1{,}000", "1000"),
        ("1\\,000", "1000"),
        ("\\$5", "5"),
        ("007", "7"),
        ("\u22125", "-5"),  # a Unicode minus
        ("1 000", "1000"),
        ("1\\!000", "1000"),
    ],
)
def test_normalize_number_canonical_forms(written, canonical):
    assert normalize_number(written) == canonical


# Commas and spaces separate groups of three digits only: "-2, 3" is two answers, not -23.
@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1/2", "--1", "\\frac{1}{2}", "-2, 3",
                                  "12,34", "1,2,3", "2 3"])
def test_normalize_number_rejects_non_numbers(text):
    assert normalize_number(text) is None


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("so the total is\n#### 18", "18"),
        ("#### $1,000", "1000"),
        ("#### 1,000.00", "1000"),
        ("#### 18 dollars", "18"),
        ("#### 18.", "18"),
        ("#### +7", "7"),
        ("#### -0", "0"),
        ("#### 2,125", "2,125"),
        ("first #### 3 then corrected #### 4", "4"),
    ],
)
def test_strict_reads_the_last_hash_answer_with_normalisation(text, gold):
    assert math_correct(text, gold, "strict", 1.0)


def test_strict_needs_the_hash_marker():
    assert extract_answer("The answer is 18.", "strict") is None
    assert extract_answer("#### .", "strict") is None
    assert not math_correct("The answer is 18.", "18", "strict", 1.0)


def test_strict_and_flexible_read_only_the_last_300_characters_like_verl():
    text = "#### 18\n" + "x" * 400
    assert extract_answer(text, "strict") is None
    assert extract_answer(text, "flexible") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She pays $1,000.00 in total.", "1000"),
        ("12-3=9 apples left", "9"),
        ("so -4 degrees", "-4"),
        ("The answer is 18 dollars.", "18"),
        ("it is +5.", "5"),
        ("3, 4, and 5", "5"),
        ("We get 50%", "50"),
        ("so it is \u22125", "-5"),
        ("so it is -.5", "-0.5"),
    ],
)
def test_flexible_reads_the_last_number(text, expected):
    assert extract_answer(text, "flexible") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{18}", "18"),
        ("\\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{\\$1,000}", "1000"),
        ("\\fbox{7}", "7"),
    ],
)
def test_boxed_takes_the_last_box_with_nested_braces(text, expected):
    assert extract_answer(text, "boxed") == expected


def test_boxed_without_a_closing_brace_is_no_answer():
    assert extract_answer("\\boxed{\\frac{1}{2}", "boxed") is None


def test_boxed_skips_an_unclosed_last_box_for_an_earlier_closed_one():
    assert extract_answer("\\boxed{3} and \\boxed{4", "boxed") == "3"
    assert extract_answer("\\boxed{\\boxed{5}", "boxed") == "5"
    assert extract_answer("\\boxed{1 \\boxed{2} } \\boxed{", "boxed") == "2"


@pytest.mark.timeout(60)
def test_many_unclosed_boxes_are_read_in_linear_time():
    # Each unclosed \boxed{ was scanned to the end of the text: 14,000 of them took minutes.
    text = "\\boxed{" * 14_000
    start = time.monotonic()
    assert extract_answer(text, "boxed") is None
    assert time.monotonic() - start < 5


@pytest.mark.timeout(60)
@pytest.mark.parametrize("boxed", [
    "1" * 100_000 + " !",  # _strip_units' pattern split a digit run every way
    "1" + " " * 100_000 + "!",  # and its two runs of spaces around the unit
])
def test_long_runs_in_a_boxed_answer_do_not_backtrack(boxed):
    start = time.monotonic()
    assert not math_correct("\\boxed{" + boxed + "}", "1", "boxed", 1.0)
    assert time.monotonic() - start < 5


@pytest.mark.timeout(60)
def test_normalize_number_does_not_backtrack_on_a_long_digit_run():
    start = time.monotonic()
    assert normalize_number("1" * 100_000 + "x") is None
    assert time.monotonic() - start < 5


def test_numbers_past_28_digits_are_compared_exactly():
    # Decimal's default context rounded both to 28 digits, so a wrong answer matched.
    gold = "1234567890123456789012345678901"
    assert normalize_number(gold) == gold
    assert normalize_number("-000" + gold + ".5000") == "-" + gold + ".5"
    assert not math_correct("#### 1234567890123456789012345678999", gold, "strict", 1.0)
    assert not math_correct("\\boxed{0.00000000000000000000000000000001}", "0", "boxed", 1.0)
    assert math_correct("#### " + gold, gold, "strict", 1.0)


def test_a_list_of_answers_or_a_term_is_not_a_number():
    assert math_correct("\\boxed{-2, 3}", "-2, 3", "boxed", 1.0)
    assert not math_correct("\\boxed{-23}", "-2, 3", "boxed", 1.0)
    assert not math_correct("\\boxed{23}", "2, 3", "boxed", 1.0)
    # A word is a unit; one letter against the number is a term.
    assert math_correct("\\boxed{5cm}", "5", "boxed", 1.0)
    assert not math_correct("\\boxed{2x}", "2", "boxed", 1.0)
    assert not math_correct("\\boxed{3i}", "3", "boxed", 1.0)


def test_boxed_compares_non_numbers_as_text_without_spaces():
    assert math_correct("\\boxed{\\frac{1}{ 2}}", "\\frac{1}{2}", "boxed", 1.0)
    assert not math_correct("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", "boxed", 1.0)


def test_find_answer_locates_the_span_it_read():
    text = "a 5 b #### 1,234 dollars"
    span = find_answer(text, "strict")
    assert span is not None and text[span.start : span.end] == "1,234"


def test_unknown_mode_names_the_config_key():
    with pytest.raises(ValueError, match="reward.math_extractor"):
        extract_answer("#### 1", "loose")


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("The answer is $\\boxed{0.5}$.", "\\frac{1}{2}"),
        ("$\\boxed{2\\sqrt{2}}$", "\\sqrt{8}"),
        ("$\\boxed{[1,2)}$", "[1,2)"),
        ("$\\boxed{\\{2,1\\}}$", "\\{1,2\\}"),
        ("$\\boxed{50\\%}$", "\\frac{1}{2}"),
        ("$\\boxed{\\dfrac{3}{4}}$", "0.75"),
    ],
)
def test_math_verify_accepts_equivalent_latex(text, gold):
    assert math_correct(text, gold, "math_verify", 10.0)


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        ("$\\boxed{\\frac{1}{3}}$", "\\frac{1}{2}"),
        ("$\\boxed{(1,2]}$", "[1,2)"),
        ("$\\boxed{\\{1,3\\}}$", "\\{1,2\\}"),
    ],
)
def test_math_verify_rejects_different_answers(text, gold):
    assert not math_correct(text, gold, "math_verify", 10.0)


def test_math_verify_pathological_expression_is_killed_at_the_timeout_and_recovers():
    # Comparing these power towers makes sympy compute for far longer than a second.
    res = check_answer("$\\boxed{9^{9^{9^{9^{9}}}}}$", "9^{9^{9^{9}}}", "math_verify", 1.0)
    assert res.timed_out and not res.correct
    # The killed verifier process is replaced: the next check works.
    assert math_correct("$\\boxed{4}$", "4", "math_verify", 10.0)


@pytest.mark.slow
def test_math_verify_answer_that_needs_gigabytes_fails_at_the_memory_bound_not_the_timeout():
    # sympy builds 2^(2^33) digit by digit: without a bound the process passes 1.5 GB within
    # 30 s and is only stopped by the timeout; with it, a MemoryError ends the check first.
    res = check_answer("$\\boxed{2^{2^{33}}}$", "1", "math_verify", 120.0)
    assert not res.timed_out and not res.correct
    assert math_correct("$\\boxed{4}$", "4", "math_verify", 10.0)


def _gsm8k_rows():
    with open(FIXTURES / "gsm8k_test_subset.jsonl") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("mode", ["strict", "flexible"])
def test_gsm8k_gold_solutions_pass_and_changed_answers_fail(mode):
    rows = _gsm8k_rows()
    for row in rows:
        gold = row["answer"].split("####")[-1].strip()
        assert math_correct(row["answer"], gold, mode, 1.0), row["answer"][-60:]
        wrong = math_wrong(row["answer"], gold, "strict")
        assert wrong != row["answer"]
        assert not math_correct(wrong, gold, mode, 1.0), wrong[-60:]
