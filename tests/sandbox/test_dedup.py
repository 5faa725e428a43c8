"""Batch de-duplication: identical submissions collapse, anything that differs does not."""

from rlrun.records import JudgeResult, StdioTest, Submission, Verdict
from rlrun.records import Tests as Cases
from rlrun.sandbox.dedup import dedup, expand


def _sub(sub_id: str, code: str = "print(1)", **kw) -> Submission:
    tests = kw.pop("tests", None) or Cases(stdio=[StdioTest("", "1\n")])
    return Submission(id=sub_id, code=code, language="python", tests=tests, **kw)


def test_identical_programs_collapse_even_with_equal_but_distinct_tests_objects():
    subs = [_sub("a"), _sub("b"), _sub("c", code="print(2)"), _sub("d")]
    unique, owner = dedup(subs)
    assert [u.id for u in unique] == ["a", "c"]
    assert owner == [0, 0, 1, 0]


def test_differences_in_language_limits_or_tests_keep_submissions_apart():
    base = _sub("a")
    others = [
        Submission(id="b", code=base.code, language="cpp", tests=base.tests),
        _sub("c", time_limit_s=5.0),
        _sub("d", memory_limit_mb=64),
        _sub("e", tests=Cases(stdio=[StdioTest("", "2\n")])),
        _sub("f", tests=Cases(stdio=[StdioTest("", "1\n")], case_insensitive=True)),
    ]
    unique, owner = dedup([base, *others])
    assert len(unique) == 6
    assert owner == list(range(6))


def test_expand_gives_each_submission_its_own_id_and_verdict_objects():
    subs = [_sub("a"), _sub("b"), _sub("c", code="x")]
    unique, owner = dedup(subs)
    judged = [
        JudgeResult("a", "accepted", 1, 1, [Verdict("accepted", time_s=0.01)]),
        JudgeResult("c", "runtime_error", 0, 1, [Verdict("runtime_error")]),
    ]
    out = expand(subs, owner, judged)
    assert [(r.id, r.status) for r in out] == [
        ("a", "accepted"), ("b", "accepted"), ("c", "runtime_error")
    ]
    out[1].tests[0].detail = "changed"
    assert out[0].tests[0].detail == ""
