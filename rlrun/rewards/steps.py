"""Step-level checking of math solutions: every arithmetic claim of every step, evaluated exactly.

A **step** is a non-blank line of the completion, stripped (GSM8K and instruct models write one
computation a line; a one-paragraph solution is one step). Its **claims** are the equalities it
writes down (docs/rewards.md, "Step rewards"):

- `a op b = c`, with + - * / (also `x`, `×`, `÷`, `·`, `⋅`, `∗`, `∕` between numbers,
  `\\times`, `\\cdot`, `\\div`), parentheses and unary minus; in a chain `a + b = c + d = e`
  each `=` is one claim (`5 + 3 = 8 = 9` claims 8 = 9 too);
- GSM8K's calculator annotations `<<48/2=24>>`, checked on their own; the text around them is
  checked as if they were not there (`48/2 = <<48/2=24>>24` asserts 48/2 = 24 twice).

Numbers may carry thousands commas (`80,000`), decimals (`1.5`, `.5`), an ignored currency sign
(`$`, `€`, `£`, LaTeX's `\\$`) and a percent sign (`%`, `\\%`); fractions are divisions (`3/4`),
and one written with `/` and no blanks is one number (`25 / 1/3 = 75`; a chain such as
`48/2/2/2` divides left to right); LaTeX's `\\frac{a}{b}` (`\\dfrac`, `\\tfrac`) is one operand,
`((a) / (b))`, and `\\text{...}` holds words.
LaTeX's math delimiters (`\\(`, `\\)`, `\\[`, `\\]`) and thin spaces are blanks, and so are
Markdown's bold (`**`, `__`) and a list marker that starts a line (`- 5 + 3 = 8` claims 5 + 3 =
8; `-5 + 3 = -2` starts with a signed number). A side of an `=` is the longest run of numbers,
operators and parentheses next to it, less a parenthesis that opens after it or closes before it
(`3 * 4 = 12 (so)`); words end a run, so `16 - 3 - 4 = 9 eggs` claims 16 - 3 - 4 = 9. An
equality outside a chain is a claim only when one side computes (an operator, not a bare
number): `60 = 1 hour` and `2 hours = 120 minutes` claim nothing; nor does a bare number that
ends a phrase, which names what the other side computes (`Half of 30 = 30 / 2 = 15` and `Week 2
= 35 + 35 = 70` claim only what follows).

Evaluation is exact (`fractions.Fraction`) by a hand-written tokenizer and recursive-descent
parser, never `eval`. An equality holds when both sides are equal, or when one side is a bare
number written with d >= 1 decimals within 10^-d of the other (`10/3 = 3.33`), or a percentage
within 10^-d points (`1/3 = 33%`). A percent is hundredths (`20% * 50 = 10`), or, on a written
result alone, a unit (`30/120*100 = 25%`, `45 + 21 + 28 = 94%`): either reading may make that
hold. On an operand it is hundredths only (`80 * 15% = 1,200` is wrong).

A claim is uncheckable, not wrong, past a limit (`MAX_DIGITS` digits in a number, `MAX_BITS`
bits in a value, `MAX_TOKENS` tokens or `MAX_DEPTH` nested parentheses on a side), on division
by zero, an exponent (`^`, `**`: unsupported, so `9^9^9^9` costs nothing), or a run that starts
right after a word or a symbol, or with an operator after one (`sqrt(16) + 2`, `√16 + 2`, `eggs
- 3`, `5! + 1`, `\\sqrt{16} + 2`) or after a parenthesis it does not open (`(2 * x) - 3`), a
run that is a factor of the words before it (`pages x 1/3`, `divided by 4 + 2`, `half of 20 +
6`, `20% of (50 + 10)`), and a value given in parts (`25 / 4 = 6 remainder 1`, `17 / 3 = 5 and
2/3`). The limits bound work per token: checking takes time linear in the text's length,
whatever the text. Training also leaves uncheckable a last line that the token limit cut off
(`rlrun.rewards.reward`).

A step is `wrong` when any claim is false (whether or not the final answer depends on it), else
`correct` when a claim was checked, else `uncheckable`. `check_steps(text)` returns one `Step`
per line; `last_tokens` finds the response token that ends each step, where training places the
step's reward part.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

StepVerdict = Literal["correct", "wrong", "uncheckable"]

MAX_DIGITS = 30  # digits in one number
MAX_BITS = 1024  # bits of an intermediate numerator or denominator
MAX_TOKENS = 64  # tokens on one side of an equality
MAX_DEPTH = 16  # nested parentheses and unary signs
MAX_STEPS = 512  # lines checked per completion; the rest are uncheckable
MAX_ANNOTATION = 200  # characters inside one <<...>>
MAX_CLAIM_TEXT = 120  # characters of a claim's text kept in its record

# A line from its first to its last non-blank character.
_STEP = re.compile(r"\S(?:[^\n]*\S)?")
# A Markdown list item's marker at a step's start ("- ", "* ", "+ ", "2. ", "2) "): the item's
# text follows it, so "- 5 + 3 = 8" claims 5 + 3 = 8, not -5 + 3 = 8 (CommonMark: a marker is
# followed by a blank; "-5 + 3" is a signed number).
_LIST_MARKER = re.compile(r"(?:[-*+•]|\d{1,9}[.)])[ \t]+")
# GSM8K's calculator annotations. Bounded and without nested quantifiers: linear time.
_ANNOTATION = re.compile(rf"<<([^<>\n]{{0,{MAX_ANNOTATION}}})>>")
_CURRENCY = frozenset("$€£")  # signs that carry no value: read as blanks
# A percent sign as written after a number, LaTeX's escaped one first ("20\\%" ends with "%").
PERCENT_SIGNS = ("\\%", "%")
# LaTeX's inline and display math, an escaped currency sign and thin spaces: blanks too.
_LATEX_BLANKS = ("\\(", "\\)", "\\[", "\\]", "\\$", "\\,", "\\;", "\\!")
# "⋅" (dot operator), "∗" (asterisk operator) and "∕" (division slash) are the math-symbol
# forms of "·", "*" and "/" that instruct models also write.
_OPS = {"+": "+", "-": "-", "−": "-", "–": "-", "*": "*", "/": "/", "×": "*", "÷": "/", "·": "*",
        "⋅": "*", "∗": "*", "∕": "/", "(": "(", ")": ")"}
# One-character tokens as (kind, operator); "^" is not evaluated: a run holding it is uncheckable.
_SYMBOLS = {"=": ("eq", ""), "^": ("bad", ""), **{ch: ("op", op) for ch, op in _OPS.items()}}
_LATEX_OPS = {"\\times": "*", "\\cdot": "*", "\\div": "/"}
_LATEX_FRACS = frozenset(["\\frac", "\\dfrac", "\\tfrac"])
_LATEX_TEXT = frozenset(["\\text", "\\textrm", "\\textbf", "\\mathrm", "\\mbox"])
_DIGITS = frozenset("0123456789")  # ASCII only: "²" is not a number here
_VULGAR = {"½": Fraction(1, 2), "⅓": Fraction(1, 3), "⅔": Fraction(2, 3), "¼": Fraction(1, 4),
           "¾": Fraction(3, 4), "⅕": Fraction(1, 5), "⅛": Fraction(1, 8)}
# Words that make the number after them an operand of something before them: in "15 pages x
# 1/3 = 5" the run next to "=" is not all the text computes. ("a total of 4 + 3 = 7" is.)
_OPERATOR_WORDS = frozenset(["x", "X", "times", "plus", "minus", "per", "by"])
# "of" after a number or one of these makes the run after it a factor: "20% of (50 + 10)",
# "half of 20 + 6". ("a total of 4 + 3 = 7" is whole.)
_MULTIPLIER_WORDS = frozenset(["half", "third", "thirds", "quarter", "quarters", "fourth",
                               "fourths", "fifth", "fifths", "twice", "double", "triple"])
# A word after an integer quotient that makes it one part of the answer: "25 / 4 = 6 remainder 1".
_REMAINDER_WORDS = frozenset(["remainder", "rem", "R", "r"])


class Uncheckable(Exception):
    """A side of a claim that cannot be evaluated within the limits."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # num | op | eq | word | bad
    start: int
    end: int
    op: str = ""  # the operator (+ - * / ( )) of an op token
    value: Fraction | None = None  # a num token's value (None: too many digits)
    decimals: int = 0  # digits written after the decimal point
    percent: bool = False
    word: str = ""  # a word token's text
    slash: bool = False  # an op token written "/" (not "÷", "∕" or "\\div")
    alpha: bool = False  # a word token of letters (or a LaTeX command)


@dataclass
class Claim:
    """One equality a step writes down, and whether it holds."""

    text: str  # the equality as written, whitespace squeezed
    holds: bool | None  # None: a side could not be evaluated (see the module's limits)
    source: str  # "text" or "annotation" (a GSM8K <<...>>)
    # Character span of the right-hand side in the completion when it is a bare number (what
    # an audit perturbs); None otherwise.
    value_span: tuple[int, int] | None = None


@dataclass
class Step:
    """One line of a completion and the verdict on its arithmetic."""

    start: int  # character offset of its first non-blank character
    end: int  # one past its last non-blank character
    verdict: StepVerdict
    claims: list[Claim] = field(default_factory=list)


def split_steps(text: str) -> list[tuple[int, int]]:
    """The (start, end) character spans of the steps of `text`: its non-blank lines, stripped."""
    return [m.span() for m in _STEP.finditer(text)]


def check_steps(text: str) -> list[Step]:
    """Every step of `text` with its claims and verdict (the module docstring has the rules)."""
    steps = []
    for k, (start, end) in enumerate(split_steps(text)):
        claims = check_line(text, start, end) if k < MAX_STEPS else []
        steps.append(Step(start, end, step_verdict(claims), claims))
    return steps


def step_verdict(claims: list[Claim]) -> StepVerdict:
    """wrong if a claim is false, correct if one was checked, else uncheckable."""
    if any(c.holds is False for c in claims):
        return "wrong"
    if any(c.holds for c in claims):
        return "correct"
    return "uncheckable"


def check_line(text: str, start: int, end: int) -> list[Claim]:
    """The claims of `text[start:end]`, less a list marker at its start: its annotations', then
    its text's with them blanked."""
    if marker := _LIST_MARKER.match(text, start, end):
        start = marker.end()
    claims: list[Claim] = []
    surface = list(text[start:end])
    for m in _ANNOTATION.finditer(text, start, end):
        claims += _claims(text, m.start(1), m.end(1), "annotation")
        # The annotation's printed value follows it: "<<48/2=24>>24" writes 24 as the text.
        surface[m.start() - start : m.end() - start] = " " * (m.end() - m.start())
    # Blank the annotations in a copy: offsets stay those of `text`.
    blanked = text[:start] + "".join(surface) + text[end:]
    claims += _claims(blanked, start, end, "text")
    return claims


def last_tokens(ids: list[int], ends: list[int], decode: Callable[[list[int]], str]) -> list[int]:
    """For each ascending character offset in `ends`, the index of the token of `ids` that
    writes the character before it: the first k with len(decode(ids[:k + 1])) >= end. `decode`
    is the engine's (skip special tokens), so it reproduces `response_text`, and the tokens stay
    the sampled ones. A binary search per step from the previous step's token."""
    if not ids:
        return [-1] * len(ends)
    out, lo = [], 0
    for end in ends:
        left, hi = lo, len(ids) - 1  # lo is a found index, so lo <= hi
        while left < hi:
            mid = (left + hi) // 2
            if len(decode(ids[: mid + 1])) >= end:
                hi = mid
            else:
                left = mid + 1
        out.append(left)
        lo = left
    return out


def evaluate(expression: str) -> Fraction | None:
    """The exact value of an arithmetic expression (percent as hundredths); None when it is
    not one or is past the limits."""
    toks = _tokenize(expression, 0, len(expression))
    if not toks or any(t.kind not in ("num", "op") for t in toks):
        return None
    try:
        return _Parser(toks, percent_unit=False).parse()
    except Uncheckable:
        return None


def _tokenize(text: str, start: int, end: int) -> list[_Tok]:
    toks: list[_Tok] = []
    # LaTeX's "\frac{a}{b}" reads as "((a) / (b))", one operand ("6 \div \frac{3}{2}" divides
    # by the fraction), and "\text{ of }" as its words. `braces` holds, for each "{" open
    # inside a fraction or a text, what it opened: "num", "den", "text" or "" (any other
    # group, "{,}"); `opening` is the part the next "{" opens.
    braces: list[str] = []
    opening = ""
    frac_at = start  # where the last "\\frac" starts: its "(" covers it, for the claim's text
    i = start
    while i < end:
        ch = text[i]
        if ch == "{" and (opening or braces):
            braces.append(opening)
            if opening == "num":
                toks += [_Tok("op", frac_at, i + 1, "("), _Tok("op", i, i + 1, "(")]
            elif opening == "den":
                toks.append(_Tok("op", i, i + 1, "("))
            elif not opening:
                toks.append(_Tok("word", i, i + 1, word=ch))
            opening = ""
            i += 1
        elif ch == "}" and braces:
            part = braces.pop()
            if part == "num" and i + 1 < end and text[i + 1] == "{":
                toks += [_Tok("op", i, i + 1, ")"), _Tok("op", i, i + 1, "/")]
                opening = "den"
            elif part == "num":
                toks += [_Tok("op", i, i + 1, ")"), _Tok("bad", i, i + 1)]
            elif part == "den":
                toks += [_Tok("op", i, i + 1, ")"), _Tok("op", i, i + 1, ")")]
            elif not part:
                toks.append(_Tok("word", i, i + 1, word=ch))
            i += 1
        elif opening:
            # "\frac" and its "{a}{b}" are not written together: not arithmetic.
            toks.append(_Tok("bad", i, i + 1))
            opening = ""
        elif ch.isspace() or ch in _CURRENCY:
            i += 1
        elif ch == "\\" and text.startswith(_LATEX_BLANKS, i, end):
            i += 2
        elif ch in _DIGITS or ch in _VULGAR or (
            ch == "." and i + 1 < end and text[i + 1] in _DIGITS
        ):
            tok, i = _number(text, i, end)
            toks.append(tok)
        elif ch in "*_" and text.startswith(ch * 2, i, end):
            # Markdown's bold ("**5 + 3 = 8**", "**Step 1:** 5 * 4 = 20") is a blank; "**"
            # between operands ("2**10") is an exponent, which is not evaluated.
            j = i + 2
            while j < end and text[j] == ch:
                j += 1
            if ch == "*" and _between_operands(toks, text, j, end):
                toks.append(_Tok("bad", i, j))
            i = j
        elif ch in _SYMBOLS:
            kind, op = _SYMBOLS[ch]
            toks.append(_Tok(kind, i, i + 1, op, slash=ch == "/"))
            i += 1
        else:
            # Letters make a word; punctuation stands alone ("7." ends a run, "3:2" splits one).
            alpha = ch == "\\" or ch.isalpha()
            j = i + 1
            while alpha and j < end and text[j].isalpha():
                j += 1
            word = text[i:j]
            if word in _LATEX_FRACS:
                if j < end and text[j] == "{":
                    opening, frac_at = "num", i
                else:
                    # "\frac12": a shorthand whose parts this reader does not split.
                    toks.append(_Tok("bad", i, j))
            elif word in _LATEX_TEXT and j < end and text[j] == "{":
                opening = "text"
            elif word in _LATEX_OPS:
                toks.append(_Tok("op", i, j, _LATEX_OPS[word]))
            elif word in ("x", "X") and _between_operands(toks, text, j, end):
                toks.append(_Tok("op", i, j, "*"))
            else:
                toks.append(_Tok("word", i, j, word=word, alpha=alpha))
            i = j
    return toks


def _between_operands(toks: list[_Tok], text: str, after: int, end: int) -> bool:
    # "3 x 4", "2**10": between a number (or a closing parenthesis) and a number or "(".
    if not toks or not (toks[-1].kind == "num" or toks[-1].op == ")"):
        return False
    j = after
    while j < end and (text[j].isspace() or text[j] in _CURRENCY):
        j += 1
    return j < end and (text[j] in _DIGITS or text[j] in "(.")


def _number(text: str, i: int, end: int) -> tuple[_Tok, int]:
    """A number at text[i]: digits with thousands commas or plain digits, an optional decimal
    part or vulgar fraction ("1½"), and percent sign. Past MAX_DIGITS digits its value is None."""
    if text[i] in _VULGAR:
        j = i + 1 + (i + 1 < end and text[i + 1] == "%")
        return _Tok("num", i, j, value=_VULGAR[text[i]], percent=j == i + 2), j
    j = i
    while j < end and text[j] in _DIGITS:
        j += 1
    int_digits = text[i:j]
    # Thousands groups: ",ddd" repeated after 1-3 leading digits, the last group not followed by
    # another digit ("1,0000" is 1 and 0000, "3,4" is 3 and 4).
    if 1 <= len(int_digits) <= 3:
        groups = []  # joined once: adding each to a string would take quadratic time
        while (
            j + 4 <= end and text[j] == "," and set(text[j + 1 : j + 4]) <= _DIGITS
            and not (j + 4 < end and text[j + 4] in _DIGITS)
        ):
            groups.append(text[j + 1 : j + 4])
            j += 4
        int_digits += "".join(groups)
    frac_digits = ""
    if j + 1 < end and text[j] == "." and text[j + 1] in _DIGITS:
        k = j + 1
        while k < end and text[k] in _DIGITS:
            k += 1
        frac_digits = text[j + 1 : k]
        j = k
    vulgar = _VULGAR.get(text[j], 0) if j < end and not frac_digits else 0
    j += vulgar != 0
    sign = next((p for p in PERCENT_SIGNS if text.startswith(p, j, end)), "")
    j += len(sign)
    digits = len(int_digits) + len(frac_digits)
    value = None
    if digits <= MAX_DIGITS:
        scale = 10 ** len(frac_digits)
        value = Fraction(int(int_digits or "0") * scale + int(frac_digits or "0"), scale) + vulgar
    return _Tok("num", i, j, value=value, decimals=len(frac_digits), percent=bool(sign)), j


def _claims(text: str, start: int, end: int, source: str) -> list[Claim]:
    toks = _tokenize(text, start, end)
    claims = []
    for k in (k for k, t in enumerate(toks) if t.kind == "eq"):
        # The runs of arithmetic tokens toks[i:k] and toks[k + 1:j] on either side of the "=".
        i, j = k, k + 1
        while i > 0 and _arith(toks[i - 1]):
            i -= 1
        while j < len(toks) and _arith(toks[j]):
            j += 1
        # A parenthesis that opens after the right side ("= 13 (so)") or closes before the left
        # side ("(so) 3 * 4") belongs to the words, not to the arithmetic.
        while j > k + 1 and toks[j - 1].op == "(":
            j -= 1
        while i < k and toks[i].op == ")":
            i += 1
        chained = i > 0 and toks[i - 1].kind == "eq"
        if i < k and j > k + 1 and (
                claim := _check(text, toks, (i, k), (k + 1, j), source, chained)):
            claims.append(claim)
    return claims


def _arith(t: _Tok) -> bool:
    return t.kind in ("num", "op", "bad")


def _computes(toks: list[_Tok]) -> bool:
    # An operator other than a parenthesis, or an unsupported one: the side does arithmetic.
    return any((t.kind == "op" and t.op not in "()") or t.kind == "bad" for t in toks)


def _check(
    text: str, toks: list[_Tok], left: tuple[int, int], right: tuple[int, int], source: str,
    chained: bool,
) -> Claim | None:
    lhs, rhs = toks[left[0] : left[1]], toks[right[0] : right[1]]
    if not (chained or _computes(lhs) or _computes(rhs)):
        return None  # "60 = 1 hour": no arithmetic asserted (in "5 + 3 = 8 = 9", "8 = 9" is)
    if len(lhs) == 1 and lhs[0].kind == "num" and left[0] > 0 and (
            toks[left[0] - 1].alpha or toks[left[0] - 1].word == "}"):
        # A bare number that ends a phrase names what the other side computes: "Half of 30 =
        # 30 / 2", "Week 2 = 35 + 35", "\\text{ of } 50 = 0.2 \\times 50".
        return None
    written = " ".join(text[lhs[0].start : rhs[-1].end].split())
    if len(written) > MAX_CLAIM_TEXT:
        written = written[: MAX_CLAIM_TEXT - 3] + "..."
    value_span = (rhs[0].start, rhs[0].end) if len(rhs) == 1 and rhs[0].kind == "num" else None
    try:
        _guard_start(toks, left[0])
        _guard_end(toks, right[1])
        holds: bool | None = _equal(lhs, rhs)
    except Uncheckable:
        holds = None
    return Claim(written, holds, source, value_span)


def _guard_start(toks: list[_Tok], j: int) -> None:
    """A run right after a word or a symbol ("sqrt(16) + 2", "x2 + 1", "√16 + 2"), starting
    with an operator after a word ("eggs - 3 = ...") or a symbol ("5! + 1", "\\frac{48}{2} + 10",
    "180° - 90"; a signed number after a symbol, as in "Total: -5 + 3", is whole) or after an
    operator word ("pages x 1/3 = 5") is not the whole of what the text computes."""
    if j == 0:
        return
    before, first = toks[j - 1], toks[j]
    if before.op == ")" and first.kind == "op" and first.op != "(":
        # The run was cut after a parenthesis that closes a group with a word in it: "(2 * x)
        # - 3", "(7 * V) + (4 * 5)".
        raise Uncheckable("a run that starts with an operator after a closing parenthesis")
    if before.kind != "word":
        return
    if before.end == first.start:
        raise Uncheckable("a run attached to a word or a symbol")
    signed = (first.op in ("-", "+") and j + 1 < len(toks) and toks[j + 1].kind == "num"
              and toks[j + 1].start == first.end)
    if first.kind == "op" and first.op != "(" and (before.alpha or not signed):
        raise Uncheckable("a run that starts with an operator after a word or a symbol")
    if before.word in _OPERATOR_WORDS:
        raise Uncheckable(f"a run after {before.word!r}")
    if before.word == "of" and j >= 2 and (
            toks[j - 2].kind == "num" or toks[j - 2].op == ")"
            or toks[j - 2].word.lower() in _MULTIPLIER_WORDS):
        raise Uncheckable("a run after a multiplier's 'of'")


def _guard_end(toks: list[_Tok], j: int) -> None:
    """A run followed by a one-letter word ("(5/2)x", "= 2x + 1") is a product with a variable;
    one followed by a remainder ("= 6 remainder 1", "= 6 with a remainder of 1") or by the rest
    of a mixed number ("= 5 and 2/3") is one part of a value."""
    if j < len(toks) and toks[j].alpha and len(toks[j].word) == 1 \
            and toks[j].start == toks[j - 1].end:
        raise Uncheckable("a run attached to a variable")
    if any(t.word in _REMAINDER_WORDS for t in toks[j : j + 4]):
        raise Uncheckable("a quotient with a remainder")
    if j + 2 < len(toks) and toks[j].word == "and" and toks[j + 1].kind == "num" \
            and toks[j + 2].op == "/":
        raise Uncheckable("a mixed number")


def _equal(lhs: list[_Tok], rhs: list[_Tok]) -> bool:
    for percent_unit in (False, True) if _percent_unit(lhs, rhs) else (False,):
        a = _Parser(lhs, percent_unit).parse()
        b = _Parser(rhs, percent_unit).parse()
        if a == b or _rounded(lhs, a, b, percent_unit) or _rounded(rhs, b, a, percent_unit):
            return True
    return False


def _percent_unit(lhs: list[_Tok], rhs: list[_Tok]) -> bool:
    """Whether a percent sign may be read as a unit: on a written result only ("30/120*100 =
    25%", "45 + 21 + 28 = 94%"); in "80 x 15% = 1,200" it is hundredths, and the step wrong."""
    return any(len(side) == 1 and side[0].percent and not any(t.percent for t in other)
               for side, other in ((lhs, rhs), (rhs, lhs)))


def _rounded(side: list[_Tok], written: Fraction, exact: Fraction, percent_unit: bool) -> bool:
    """A bare number written with d >= 1 decimals within 10^-d of the exact value (rounded or
    truncated); a percentage also with d = 0, in points ("1/3 = 33%")."""
    if len(side) != 1 or side[0].kind != "num":
        return False
    tok = side[0]
    points = tok.percent and not percent_unit  # hundredths, rounded to the points written
    if tok.decimals == 0 and not points:
        return False
    tolerance = Fraction(1, 10**tok.decimals)
    if points:
        tolerance /= 100
    return abs(written - exact) < tolerance


_BINARY: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
}


class _Parser:
    """expr := term (("+" | "-") term)*;  term := unary (("*" | "/") unary)*;
    unary := "-" unary | "+" unary | primary;  primary := number | "(" expr ")"."""

    def __init__(self, toks: list[_Tok], percent_unit: bool) -> None:
        if len(toks) > MAX_TOKENS:
            raise Uncheckable(f"more than {MAX_TOKENS} tokens")
        self.toks = toks
        self.pos = 0
        self.depth = 0
        self.percent_unit = percent_unit

    def parse(self) -> Fraction:
        value = self._expr()
        if self.pos != len(self.toks):
            raise Uncheckable("not an arithmetic expression")
        return value

    def _peek(self) -> str:
        if self.pos < len(self.toks):
            t = self.toks[self.pos]
            return t.op if t.kind == "op" else t.kind
        return ""

    def _expr(self) -> Fraction:
        return self._left_assoc(("+", "-"), self._term)

    def _term(self) -> Fraction:
        return self._left_assoc(("*", "/"), self._unary)

    def _left_assoc(self, ops: tuple[str, str], operand: Callable[[], Fraction]) -> Fraction:
        """operand (op operand)*, with `op` one of `ops`, evaluated left to right."""
        value = operand()
        while (op := self._peek()) in ops:
            self.pos += 1
            rhs = operand()
            if op == "/" and rhs == 0:
                raise Uncheckable("division by zero")
            value = _bounded(_BINARY[op](value, rhs))
        return value

    def _unary(self) -> Fraction:
        if (op := self._peek()) in ("-", "+"):
            self.pos += 1
            value = self._nested(self._unary)
            return -value if op == "-" else value
        return self._primary()

    def _primary(self) -> Fraction:
        kind = self._peek()
        if kind == "num":
            value = self._number()
            # A fraction written without blanks is one number, so "25 / 1/3 = 75" divides by a
            # third, as its writer spaced it (GSM8K's references write it so); "12/4/3/2",
            # "12 / 4 / 3" and "12 ÷ 4÷3" still divide left to right.
            if self._tight_fraction():
                self.pos += 1
                divisor = self._number()
                if divisor == 0:
                    raise Uncheckable("division by zero")
                value = _bounded(value / divisor)
            return value
        if kind == "(":
            self.pos += 1
            value = self._nested(self._expr)
            if self._peek() != ")":
                raise Uncheckable("unbalanced parentheses")
            self.pos += 1
            return value
        raise Uncheckable("not an arithmetic expression")

    def _number(self) -> Fraction:
        t = self.toks[self.pos]
        self.pos += 1
        if t.value is None:
            raise Uncheckable(f"a number of more than {MAX_DIGITS} digits")
        return t.value / 100 if t.percent and not self.percent_unit else t.value

    def _tight_fraction(self) -> bool:
        """Whether "/" and a number follow the number just read, with no blank between, and
        that number is not itself the divisor of such a "/" (in "48/2/2/2" none is a fraction
        of its own: the chain divides left to right)."""
        toks, i = self.toks, self.pos
        return (i + 1 < len(toks) and toks[i].slash and toks[i + 1].kind == "num"
                and toks[i - 1].end == toks[i].start and toks[i].end == toks[i + 1].start
                and not (i >= 2 and toks[i - 2].slash and toks[i - 2].end == toks[i - 1].start))

    def _nested(self, parse: Callable[[], Fraction]) -> Fraction:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Uncheckable(f"more than {MAX_DEPTH} nested parentheses or signs")
        value = parse()
        self.depth -= 1
        return value


def _bounded(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise Uncheckable(f"an intermediate value past {MAX_BITS} bits")
    return value
