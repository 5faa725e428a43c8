"""The step verifier on hand-written steps: what each line claims, and whether it holds."""

import json
import time
from fractions import Fraction

import pytest

from rlrun.rewards.steps import MAX_DIGITS, check_steps, evaluate, last_tokens, split_steps

from .helpers import FIXTURES


def verdict(line: str) -> str:
    (step,) = check_steps(line)
    return step.verdict


@pytest.mark.parametrize(
    "line",
    [
        "3 + 4 = 7",
        "He sprints 3*3 = 9 times",
        "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.",
        "So he runs 9*60=<<9*60=540>>540 meters",
        # chains: every "=" holds
        "3 + 4 = 7 = 10 - 3",
        "2 * (3 + 4) = 14 = 7 * 2 = 28 / 2",
        # thousands commas and currency
        "The cost came out to 80,000+50,000=$<<80000+50000=130000>>130,000",
        "The total is $864 + $2,592 + $432 + $7,344 = $11,232.",
        # percentages: hundredths, or a unit on a computed percentage
        "He gets 50 * 20% = 10 dollars back",
        "That is 30/120*100 = <<30/120*100=25>>25% of the class",
        "100% - 20% = 80% are left",
        # fractions and decimals, with rounding to the decimals written
        "3/4 * 364 = 273 yards",
        "1/3 + 1/6 = 1/2",
        "10/3 = 3.33 hours",
        "1.5 * 4 = 6.0",
        "Each costs .5 * 3 = 1.5",
        "¾ * 12 = 9 slices",
        "1½ * 2 = 3",
        # other ways to write an operator, and unary minus
        "3 x 4 = 12",
        "12 ÷ 4 × 2 = 6",
        "3 ⋅ 4 + 2 = 14",
        # a fraction written without blanks is one number: divided by a third
        "25 / 1/3 = 75",
        "12/4/3 = 1",
        "12 / 4 / 3 = 1",
        "48/2/2/2 = 6",  # a chain: no divisor in it is a fraction of its own
        "(4 + 8)/4/3 = 1",
        "<<1200/12/4/5=5>>5",
        "12 ÷ 4÷3 = 1",  # only "/" writes a fraction
        "60\\div 2\\div3 = 10",
        "3 ∗ 4 = 12",
        "12 ∕ 4 = 3",
        "120 – 80 - 15 = 25 more points",
        "5 - 10 = -5",
        "-(-3) + 1 = 4",
        # LaTeX math, a signed number after a symbol, words in parentheses around a claim
        "\\( 3 \\times 4 = 12 \\)",
        "\\[ 3 \\cdot 4 = 12 \\]",
        # LaTeX's fractions are divisions of their parts
        "\\[ \\frac{48}{2} + 10 = 34 \\]",
        "\\( \\frac{3}{4} \\times 12 = 9 \\)",
        "\\dfrac{6 + 2}{4} = 2",
        "\\frac{\\frac{1}{2}}{4} = 0.125",
        "6 \\div \\frac{3}{2} = 4",  # a fraction is one operand
        "\\frac{3}{4} \\div \\frac{1}{2} = \\frac{3}{2}",
        "12/\\frac{1}{2}/3 = 8",
        "3 \\times 4 = 12 \\text{ eggs}",
        "Total: -5 + 3 = -2",
        "3 * 4 = 12 (so)",
        # a Markdown list item: the marker is not a sign or an operator
        "- 5 + 3 = 8",
        "* 5 + 3 = 8",
        "2) 5 + 3 = 8",
        "- 3 - 5 = -2",
        "- -5 + 3 = -2",
        # Markdown's bold is not an operator
        "**5 + 3 = 8**",
        "1. **Eggs laid:** 16 - 3 - 4 = 9",
        "__5 + 3 = 8__",
        # a number that ends a phrase names what the next side computes: no claim of its own
        "15% of $80 = 0.15 × $80 = $12",
        "Half of 30 = 30 / 2 = 15",
        "Week 1 + Week 2 = 35 + 35 = 70 hours",
        # LaTeX's escaped dollar and percent signs, a thin space
        "\\( 9 \\times \\$2 = \\$18 \\)",
        "\\( 50 \\times 20\\% = 10 \\)",
        "\\( 9 \\times 2 = 18\\,\\text{hours} \\)",
        # a percentage rounded to whole points; percentage points summed
        "1/3 = 33%",
        "45 + 21 + 28 = 94%",
    ],
)
def test_correct_steps(line):
    assert verdict(line) == "correct", check_steps(line)


@pytest.mark.parametrize(
    "line",
    [
        "3 + 4 = 8",
        "3 + 4 = 7 = 10 - 2",  # a chain with one false link
        "16 - 3 - 4 = <<16-3-4=8>>9 eggs",  # the annotation is wrong, the text right
        "16 - 3 - 4 = <<16-3-4=9>>10 eggs",  # the text is wrong
        "80,000+50,000=$130,001",
        "He gets 50 * 20% = 11 dollars back",
        "30/120*100 = 26%",
        "10/3 = 3.35",
        "10/3 = 3",  # an integer is exact: rounding needs the decimals written
        "2 * (3 + 4) = 20",
        "So, Suzzane has $32 - $20 = $300 left.",  # a typo in a GSM8K reference
        "5 + 3 = 8 = 9",  # a bare link in a chain is a claim too
        # wrapped as LaTeX math or followed by words in parentheses, still checked
        "\\( 3 \\times 4 = 13 \\)",
        "3 ⋅ 4 + 2 = 15",
        "\\frac{48}{2} = 25",
        "6 \\div \\frac{3}{2} = 1",
        "500/ 1/10 = 50",  # a GSM8K reference that meant 500 x 1/10
        "12 / 4/3 = 1",
        "3 * 4 = 13 (so)",
        "- 5 + 3 = -2",  # a list item: 5 + 3 is claimed
        "-5 + 3 = 8",  # no blank after the minus: a signed number, not a list marker
        "**Step 1:** 5 * 4 = 21",
        "Half of 30 = 30 / 2 = 16",
        # a percent on an operand is hundredths: the step forgot to divide by 100
        "$80 × 15% = $1,200",
        "6/24 = 24%",
    ],
)
def test_wrong_steps(line):
    assert verdict(line) == "wrong", check_steps(line)


@pytest.mark.parametrize(
    "line",
    [
        "She sells the remainder at the farmers' market.",
        "#### 18",
        "2 hours = 120 minutes",  # a conversion, no arithmetic on the left
        "60 = 1 hour",  # bare numbers on both sides assert no arithmetic
        "16 eggs - 3 eggs = 13 eggs",  # the left side starts after a word
        "15 pages x 1/3 = 5 pages",  # the run is the right operand of "x"
        "sqrt(16) + 2 = 6",  # a function of the run
        "2x + 3 = 7",  # algebra
        "250=(5/2)x",
        "2^10 = 1024",  # exponents are not supported
        "2**10 = 1024",
        "(2)**3 = 8",
        "2 ** 10 = 1024",
        "5/0 = 1",
        "x = 5 + y",
        # the run starts after a symbol that is part of what is computed
        "\\[ \\sqrt{16} + 2 = 6 \\]",
        "√16 + 2 = 6",
        # a LaTeX fraction with other than numbers in it, or not written as \\frac{a}{b}
        "\\frac{x}{2} = 5",
        "2\\frac{1}{2} = 2.5",
        "\\frac12 = 0.5",
        "5 / 2 = 2\\frac12",
        "\\frac 12 \\times 4 = 2",
        "\\frac{3}{4",
        "The total is 5! + 1 = 121",
        "180° - 90 - 30 = 60",
        "4² + 1 = 17",
        # the run starts after a parenthesis that closes a group with a word in it
        "(2 * x) - 3 = 15",
        "(7 * V) + (4 * 5) = $69",
        # a quotient with a remainder, a mixed number
        "25 ÷ 4 = 6 remainder 1",
        "25 ÷ 4 = 6 with a remainder of 1",
        "17 / 3 = 5 and 2/3",
        # the run is a factor of what comes before it
        "20% of ($50 + $10) = $12",
        "\\frac{1}{3} of 30 + 2 = 12",
        "\\frac{1}{2} \\text{ of } 20 + 5 = 15",
        "Half of 20 + 6 = 16",
        "120 divided by 4 + 2 = 32",
    ],
)
def test_uncheckable_steps(line):
    assert verdict(line) == "uncheckable", check_steps(line)


def test_a_number_too_large_is_uncheckable_not_wrong():
    big = "9" * (MAX_DIGITS + 1)
    (step,) = check_steps(f"{big} + 1 = 2")
    assert step.verdict == "uncheckable"
    assert [c.holds for c in step.claims] == [None]
    # ... and so is an intermediate value that grows past the limit
    factor = "9" * MAX_DIGITS
    assert verdict(" * ".join([factor] * 12) + " = 1") == "uncheckable"
    # a number at the limit is evaluated
    assert verdict(f"{factor} - 1 = {'9' * (MAX_DIGITS - 1)}8") == "correct"


def test_wrong_arithmetic_counts_even_when_the_answer_does_not_depend_on_it():
    text = "Ann has 3 + 4 = 8 hats.\nShe has 5 cats.\n5 * 1 = 5\n#### 5"
    assert [s.verdict for s in check_steps(text)] == ["wrong", "uncheckable", "correct",
                                                      "uncheckable"]


def test_a_step_is_wrong_when_any_of_its_claims_is():
    (step,) = check_steps("First 2 + 2 = 4, then 4 * 3 = 13.")
    assert [c.holds for c in step.claims] == [True, False]
    assert step.verdict == "wrong"


def test_claims_name_their_source_and_the_value_an_audit_can_change():
    text = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day."
    (step,) = check_steps(text)
    assert [(c.source, c.text, c.holds) for c in step.claims] == [
        ("annotation", "16-3-4=9", True), ("text", "16 - 3 - 4 = 9", True)]
    assert [text[slice(*c.value_span)] for c in step.claims] == ["9", "9"]
    assert text.index("<<") < step.claims[0].value_span[0] < text.index(">>")


def test_steps_are_the_non_blank_lines():
    text = "  3 + 4 = 7  \n\nso 7\n\t#### 7\n"
    spans = split_steps(text)
    assert [text[a:b] for a, b in spans] == ["3 + 4 = 7", "so 7", "#### 7"]
    assert [(s.start, s.end) for s in check_steps(text)] == spans


def test_evaluate_is_exact_and_evaluates_nothing_else():
    assert evaluate("2*(3+4)") == 14
    assert evaluate("1/3 + 1/6") == Fraction(1, 2)
    assert evaluate("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate("50%") == Fraction(1, 2)
    assert evaluate("-(-3)") == 3
    for text in ("2^3", "2**3", "(1", "1)", "1 +", "__import__('os').system('true')", ""):
        assert evaluate(text) is None, text


@pytest.mark.parametrize(
    "text",
    [
        "9^9^9^9^9 = 1",
        "2**10**10**10 = 5",
        "9" * 200_000 + " * 2 = 3",
        "(" * 100_000 + "1" + ")" * 100_000 + " = 1 + 0",
        "-" * 100_000 + "1 = 1 + 0",
        "1+" * 100_000 + "1 = 2",
        "= 1 + 1 " * 20_000,
        "<<" * 50_000 + "1+1=2" + ">>" * 50_000,
        "1,000 " * 50_000 + "+ 1 = 2",
        "3 + 4 = 7\n" * 50_000,
    ],
)
def test_text_built_to_hang_a_naive_evaluator_returns_fast(text):
    start = time.perf_counter()
    steps = check_steps(text)
    assert time.perf_counter() - start < 5.0
    assert steps and all(s.verdict in ("correct", "uncheckable") for s in steps)


def test_every_checkable_step_of_the_gsm8k_sample_verifies():
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k_test_subset.jsonl").open()]
    steps = [s for r in rows for s in check_steps(r["answer"])]
    assert {s.verdict for s in steps} == {"correct", "uncheckable"}
    assert sum(s.verdict == "correct" for s in steps) > len(rows) * 3


def _bytes_decode(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def test_last_tokens_finds_the_token_that_ends_each_step():
    text = "3 + 4 = 7\nso 7 * 2 = 15\n#### 15"
    ids = list(text.encode())
    ends = [s.end for s in check_steps(text)]
    # one byte per token: a step's last token is its last character
    assert last_tokens(ids, ends, _bytes_decode) == [e - 1 for e in ends]


def test_last_tokens_with_tokens_of_several_characters():
    words = ["3 +", " 4 =", " 7", "\nso", " 7*2", "=14", "\n####", " 14"]
    vocab = {i: w for i, w in enumerate(words)}
    text = "".join(words)
    ends = [s.end for s in check_steps(text)]
    got = last_tokens(list(vocab), ends, lambda ids: "".join(vocab[i] for i in ids))
    assert got == [2, 5, 7]  # " 7", "=14", " 14"
    assert last_tokens([], ends, _bytes_decode) == [-1, -1, -1]
