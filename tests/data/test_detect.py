"""Format detection from columns and, where columns are shared, from values."""

import pytest

from rlrun.data.detect import detect_format
from rlrun.data.errors import DataError


@pytest.mark.parametrize(
    ("row", "fmt"),
    [
        ({"id": "a", "prompt": "p", "kind": "math", "answer": "1"}, "rlrun"),
        ({"task_id": "t", "prompt": "p", "entry_point": "f", "test": "t"}, "humaneval"),
        ({"text": "t", "code": "c", "test_list": []}, "mbpp"),
        ({"description": "d", "public_tests": {}}, "code_contests"),
        ({"question": "q", "input_output": "{}"}, "apps"),
        ({"problem_id": "p", "prompt": "p", "test_cases": []}, "plain"),
        ({"problem": "p", "tests": [{"input": "1", "output": "1"}]}, "codeforces"),
        ({"problem": "p", "tests": {"inputs": [], "outputs": []}}, "codeforces"),
        ({"problem": "p", "tests": {"functional": "check(f)"}}, "leetcode"),
        ({"problem": "p", "tests": "{'functional': 'check(f)'}"}, "leetcode"),
        ({"question": "q", "answer": "x\n#### 3"}, "gsm8k"),
        ({"question": "q", "answer": "3"}, "math"),
        ({"problem": "p", "solution": "\\boxed{1}"}, "math"),
    ],
)
def test_detects(row, fmt):
    assert detect_format([row], "src") == fmt


def test_optional_columns_seen_in_later_rows_count():
    rows = [{"question": "q", "answer": "no marker"}, {"question": "q", "answer": "a\n#### 1"}]
    assert detect_format(rows, "src") == "gsm8k"


def test_unknown_columns_name_them_and_the_override():
    with pytest.raises(DataError) as err:
        detect_format([{"foo": 1, "bar": 2}], "my.jsonl")
    message = str(err.value)
    assert "my.jsonl" in message and "['bar', 'foo']" in message
    assert "data.format" in message and "gsm8k: question (or problem), answer" in message


def test_no_object_rows():
    with pytest.raises(DataError, match="no JSON-object rows"):
        detect_format([[1, 2], "x"], "src")
