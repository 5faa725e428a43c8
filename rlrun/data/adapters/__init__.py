"""Dataset adapters: one function per row format, turning a raw row into a `Problem`.

Every adapter has the signature `(row: dict, index: int) -> Problem` and raises `RowError`
naming the field when the row cannot be used. `ROW_FORMATS` maps each `data.format` name to
its adapter and to the columns it reads, which detection and error messages quote.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlrun.data.adapters import harness, math, native, stdio
from rlrun.records import Problem

Adapter = Callable[[dict[str, Any], int], Problem]

# Each format's adapter and its columns, as users recognise them from the dataset card.
ROW_FORMATS: dict[str, tuple[Adapter, str]] = {
    "gsm8k": (math.gsm8k, "question (or problem), answer (or solution) ending in '#### <n>'"),
    "math": (math.math, "problem (or question, query), answer, or a solution (or response) "
             "stating it: '#### n', \\boxed{...} or 'The answer is: n'"),
    "humaneval": (harness.humaneval, "task_id, prompt, entry_point, test"),
    "mbpp": (harness.mbpp, "text (or prompt), test_list, optional code and test_setup_code"),
    "leetcode": (harness.leetcode, "problem, tests = {functional: harness text}"),
    "apps": (stdio.apps, "question, input_output = {inputs, outputs, fn_name?}"),
    "code_contests": (stdio.code_contests,
                      "description, public_tests / private_tests / generated_tests = "
                      "{input: [], output: []}"),
    "codeforces": (stdio.codeforces, "problem, tests = [{input, output}] or {inputs, outputs}"),
    "plain": (stdio.plain, "problem_id, prompt, test_cases = [[input, output], ...]"),
    "rlrun": (native.rlrun, "id, prompt, kind, ... as written by `rlrun data convert`"),
}
ADAPTERS: dict[str, Adapter] = {name: adapter for name, (adapter, _) in ROW_FORMATS.items()}
COLUMNS: dict[str, str] = {name: columns for name, (_, columns) in ROW_FORMATS.items()}
