"""Dataset adapters: one function per row format, turning a raw row into a `Problem`.

Every adapter has the signature `(row: dict, index: int) -> Problem` and raises `RowError`
naming the field when the row cannot be used. `FORMATS` maps each `data.format` name to its
adapter and to the columns it reads, which detection and error messages quote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlrun.data.adapters import harness, math, native, stdio
from rlrun.records import Problem

Adapter = Callable[[dict[str, Any], int], Problem]

ADAPTERS: dict[str, Adapter] = {
    "gsm8k": math.gsm8k,
    "math": math.math,
    "humaneval": harness.humaneval,
    "mbpp": harness.mbpp,
    "leetcode": harness.leetcode,
    "apps": stdio.apps,
    "code_contests": stdio.code_contests,
    "codeforces": stdio.codeforces,
    "plain": stdio.plain,
    "rlrun": native.rlrun,
}

# The columns each format reads, as users would recognise them from the dataset card.
COLUMNS: dict[str, str] = {
    "gsm8k": "question (or problem), answer (or solution) ending in '#### <n>'",
    "math": "problem (or question, query), answer, or a solution (or response) stating it: "
            "'#### n', \\boxed{...} or 'The answer is: n'",
    "humaneval": "task_id, prompt, entry_point, test",
    "mbpp": "text (or prompt), test_list, optional code and test_setup_code",
    "leetcode": "problem, tests = {functional: harness text}",
    "apps": "question, input_output = {inputs, outputs, fn_name?}",
    "code_contests": "description, public_tests / private_tests = {input: [], output: []}",
    "codeforces": "problem, tests = [{input, output}] or {inputs, outputs}",
    "plain": "problem_id, prompt, test_cases = [[input, output], ...]",
    "rlrun": "id, prompt, kind, ... as written by `rlrun data convert`",
}
