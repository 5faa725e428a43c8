"""Judge-side comparison of what a program produced with what was expected.

Expected values never leave the judge process: stdout is compared here (`outputs_match`), and
call results come back as plain data (see `executor.encode_plain`) and are compared here with
strict types (`values_equal`), so an object with a custom `__eq__` has nothing to hide behind.
"""

from __future__ import annotations

import math
from typing import Any


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_close(got: str, want: str, tol: float) -> bool:
    if got == want:
        return True
    try:
        g, w = float(got), float(want)
    except ValueError:
        return False
    if math.isnan(g) or math.isnan(w):
        return False
    return g == w or abs(g - w) <= tol * max(1.0, abs(w))


def outputs_match(
    actual: str, expected: str, float_tolerance: float | None = None,
    case_insensitive: bool = False,
) -> bool:
    """Stdout equality, ignoring trailing whitespace on each line and trailing blank lines.

    With `float_tolerance`, lines are split into whitespace tokens and numeric tokens may differ
    by that much (absolute for |x| <= 1, relative above). `case_insensitive` lowercases both.
    """
    got, want = _lines(actual), _lines(expected)
    if case_insensitive:
        got, want = [s.lower() for s in got], [s.lower() for s in want]
    if got == want:
        return True
    if float_tolerance is None or len(got) != len(want):
        return False
    for g_line, w_line in zip(got, want, strict=True):
        g_tok, w_tok = g_line.split(), w_line.split()
        if len(g_tok) != len(w_tok):
            return False
        if not all(_tokens_close(g, w, float_tolerance) for g, w in zip(g_tok, w_tok, strict=True)):
            return False
    return True


_NUMBER = (int, float)


def values_equal(actual: Any, expected: Any, float_tolerance: float | None = None) -> bool:
    """Type-strict equality of two plain-data values (a call result against a dataset answer).

    bool never equals a number, as a dict key or set member too; int and float compare by value
    (within `float_tolerance` when given); a list or tuple result matches a list expected
    (datasets store JSON, which has no tuples); dict keys and set members must match exactly.
    Anything that is not exact plain data (a subclass, a custom object) is unequal.
    """
    ta, te = type(actual), type(expected)
    if ta is bool or te is bool:
        return ta is bool and te is bool and actual == expected
    if te in _NUMBER:
        if ta not in _NUMBER:
            return False
        if float_tolerance is None or (ta is int and te is int):
            return actual == expected
        try:
            return math.isclose(actual, expected, rel_tol=float_tolerance,
                                abs_tol=float_tolerance)
        except OverflowError:  # an int past float range (10**400) is close to no float
            return False
    if expected is None or te is str or te is bytes:
        return ta is te and actual == expected
    if te is list or te is tuple:
        if ta is not list and ta is not tuple:
            return False
        if te is tuple and ta is not tuple:
            return False
        return len(actual) == len(expected) and all(
            values_equal(a, e, float_tolerance) for a, e in zip(actual, expected, strict=True)
        )
    if te is dict:
        if ta is not dict or len(actual) != len(expected):
            return False
        keys = {_strict_key(k): k for k in actual}
        return all(_strict_key(k) in keys
                   and values_equal(actual[keys[_strict_key(k)]], v, float_tolerance)
                   for k, v in expected.items())
    if te is set or te is frozenset:
        return (ta is set or ta is frozenset) and _strict_key(actual) == _strict_key(expected)
    return False


def _strict_key(value: Any) -> Any:
    """`value` (hashable plain data: a dict key or set member) tagged with its kind, so that
    Python's `True == 1` (and `(True,) == (1,)`) does not make a bool match a number."""
    t = type(value)
    if t is bool:
        return ("bool", value)
    if t is int or t is float:
        return ("number", value)
    if t is tuple:
        return ("tuple", tuple(_strict_key(v) for v in value))
    if t is frozenset or t is set:
        return ("set", frozenset(_strict_key(v) for v in value))
    return (t.__name__, value)
