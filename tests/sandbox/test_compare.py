"""Stdout and typed value comparison (pure, no sandbox)."""

from rlrun.sandbox.compare import outputs_match, values_equal


def test_trailing_whitespace_per_line_and_at_end_is_ignored() -> None:
    assert outputs_match("1 2  \n3\t\n\n\n", "1 2\n3")
    assert outputs_match("a\r\nb\r\n", "a\nb\n")
    assert not outputs_match(" 1\n", "1\n")
    assert not outputs_match("1\n\n2\n", "1\n2\n")
    assert not outputs_match("12", "1 2")


def test_float_tolerance_only_when_asked() -> None:
    assert not outputs_match("0.3333333\n", "0.333333333\n")
    assert outputs_match("0.3333333\n", "0.333333333\n", float_tolerance=1e-6)
    assert outputs_match("1000000.5 x\n", "1000000.6 x\n", float_tolerance=1e-6)
    assert not outputs_match("0.5\n", "0.6\n", float_tolerance=1e-6)
    assert not outputs_match("nan\n", "nan1\n", float_tolerance=1e-6)
    assert not outputs_match("1 2\n", "1\n", float_tolerance=1e-6)


def test_case_insensitive() -> None:
    assert not outputs_match("YES\n", "yes\n")
    assert outputs_match("YES\n", "yes\n", case_insensitive=True)


def test_values_are_compared_with_strict_types() -> None:
    assert values_equal([1, 2], [1, 2])
    assert values_equal((1, 2), [1, 2])
    assert values_equal(2.0, 2)
    assert not values_equal(True, 1)
    assert not values_equal(1, True)
    assert not values_equal("1", 1)
    assert not values_equal(None, 0)
    assert not values_equal([1, 2], (1, 2))
    assert values_equal({"a": [1]}, {"a": [1]})
    assert not values_equal({"a": 1}, {"a": 1, "b": 2})
    assert values_equal(0.1 + 0.2, 0.3, float_tolerance=1e-9)
    assert not values_equal(0.1 + 0.2, 0.3)


def test_a_bool_is_not_a_number_as_a_dict_key_or_set_member() -> None:
    # Python's True == 1 let {True} match an expected {1} and {True: "a"} match {1: "a"}.
    assert not values_equal({True}, {1})
    assert not values_equal(frozenset({False}), {0})
    assert not values_equal({(True, 2)}, {(1, 2)})
    assert not values_equal({True: "a"}, {1: "a"})
    assert not values_equal({(1, False): 0}, {(1, 0): 0})
    assert not values_equal({1: "a"}, {True: "a"})
    assert values_equal({1, 2}, {1, 2}) and values_equal(frozenset({True}), {True})
    assert values_equal({1: [1.0], "b": (2,)}, {1: [1], "b": [2]})
    assert values_equal({(1, "x"): None}, {(1, "x"): None})
    assert not values_equal({1: "a"}, {2: "a"}) and not values_equal({1: "a"}, {1: "a", 2: "b"})
    assert not values_equal({1, 2}, {1, 3})


def test_an_int_past_float_range_is_unequal_not_an_error() -> None:
    # A program's return value: math.isclose raised OverflowError on it, which crashed the judge.
    assert not values_equal(10**400, 1.5, float_tolerance=1e-6)
    assert not values_equal([10**400], [1.5], float_tolerance=1e-6)
    assert not values_equal(1.5, 10**400, float_tolerance=1e-6)
    assert values_equal(10**400, 10**400, float_tolerance=1e-6)


def test_custom_objects_never_equal() -> None:
    class Anything:
        def __eq__(self, other: object) -> bool:
            return True

    assert not values_equal(Anything(), 1)
    assert not values_equal(Anything(), [1])
    assert not values_equal([Anything()], [1])
