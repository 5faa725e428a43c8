"""Math adapters: GSM8K (`question`, `answer` ending in `#### n`) and MATH-style
(`problem` or `question`, with `answer` or a `solution` holding `\\boxed{...}`).

The gold answer goes to `Problem.answer`; the worked solution text to `Problem.reference`.
"""

from __future__ import annotations

import re
from typing import Any

from rlrun.data.adapters.common import first_text, optional_text, row_id, text
from rlrun.data.errors import RowError
from rlrun.records import Problem

_NUMBER_WITH_COMMAS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


def gsm8k(row: dict[str, Any], index: int) -> Problem:
    question = text(row, "question")
    solution = text(row, "answer")
    if "####" not in solution:
        raise RowError("answer", "does not end in '#### <answer>'")
    final = solution.rsplit("####", 1)[1].strip()
    if not final:
        raise RowError("answer", "has nothing after '####'")
    if _NUMBER_WITH_COMMAS.fullmatch(final):
        final = final.replace(",", "")
    return Problem(
        id=row_id(row, ("id",), "gsm8k", index),
        prompt=question.strip(),
        kind="math",
        answer=final,
        reference=solution,
        meta={"source": "gsm8k", "row": index},
    )


def last_boxed(solution: str) -> str | None:
    """The content of the last `\\boxed{...}` (or `\\fbox{...}`), braces matched."""
    start = max(solution.rfind("\\boxed"), solution.rfind("\\fbox"))
    if start < 0:
        return None
    brace = solution.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for pos in range(brace, len(solution)):
        char = solution[pos]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return solution[brace + 1 : pos].strip() or None
    return None


def math(row: dict[str, Any], index: int) -> Problem:
    _, statement = first_text(row, ("problem", "question"))
    solution = optional_text(row, "solution")
    answer = row.get("answer")
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        answer = str(answer)
    if not (isinstance(answer, str) and answer.strip()):
        if solution is None:
            raise RowError("answer", "is missing and there is no 'solution' to take it from")
        answer = last_boxed(solution)
        if answer is None:
            raise RowError("solution", "has no \\boxed{...} answer (and there is no 'answer')")
    meta: dict[str, Any] = {"source": "math", "row": index}
    for key in ("level", "type", "subject"):
        if row.get(key) is not None:
            meta[key] = row[key]
    return Problem(
        id=row_id(row, ("unique_id", "id", "problem_id"), "math", index),
        prompt=statement.strip(),
        kind="math",
        answer=answer.strip(),
        reference=solution,
        meta=meta,
    )
