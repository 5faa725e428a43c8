"""Math adapters: GSM8K (a question and a worked solution ending in `#### n`) and MATH-style
(a problem with an `answer` column, or a worked solution that states it).

Datasets are republished under other column names (GSM8K as `problem` / `solution`, MetaMath as
`query` / `response` ending in "The answer is: n"), so the final answer is found from the
solution's content (`final_answer`: `#### n`, `\\boxed{...}`, "The answer is: n"), in whichever
of the known text columns holds it. The gold answer goes to `Problem.answer`; the worked
solution text to `Problem.reference`.
"""

from __future__ import annotations

import re
from typing import Any

from rlrun.data.adapters.common import extra_meta, first_text, row_id
from rlrun.data.errors import RowError
from rlrun.records import Problem

_NUMBER_WITH_COMMAS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")


# MetaMath's last line; without the colon the phrase is as often the start of a sentence.
_ANSWER_IS = re.compile(r"^\s*The answer is:\s*(.+?)\s*\.?\s*$")


def _plain_number(answer: str) -> str:
    """`1,234` -> `1234`: thousands separators are not part of the value."""
    return answer.replace(",", "") if _NUMBER_WITH_COMMAS.fullmatch(answer) else answer


def final_answer(solution: str) -> str | None:
    """The final answer a worked solution states: after its last `####` (GSM8K), in its last
    `\\boxed{...}` (MATH), or after "The answer is:" on its last line (MetaMath); None if
    none."""
    if "####" in solution:
        return _plain_number(solution.rsplit("####", 1)[1].strip()) or None
    boxed = last_boxed(solution)
    if boxed is not None:
        return boxed
    lines = solution.strip().splitlines()
    found = _ANSWER_IS.search(lines[-1]) if lines else None
    return _plain_number(found.group(1).strip()) if found else None


def gsm8k(row: dict[str, Any], index: int) -> Problem:
    _, question = first_text(row, ("question", "problem"))
    column, solution = first_text(row, ("answer", "solution"))
    if "####" not in solution:
        raise RowError(column, "does not end in '#### <answer>'")
    final = final_answer(solution)
    if final is None:
        raise RowError(column, "has nothing after '####'")
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
    _, statement = first_text(row, ("problem", "question", "query"))
    answer = row.get("answer")
    if isinstance(answer, int | float) and not isinstance(answer, bool):
        answer = str(answer)
    column = next((c for c in ("solution", "response")
                   if isinstance(row.get(c), str) and row[c].strip()), None)
    solution = row[column] if column else None
    if solution is None and isinstance(answer, str) and "####" in answer:
        column, solution, answer = "answer", answer, None  # GSM8K's answer: a worked solution
    if not (isinstance(answer, str) and answer.strip()):
        if solution is None:
            raise RowError("answer", "is missing and there is no 'solution' to take it from")
        answer = final_answer(solution)
        if answer is None:
            raise RowError(column or "solution", "states no final answer ('#### n', "
                           "\\boxed{...} or 'The answer is: n') and there is no 'answer'")
    return Problem(
        id=row_id(row, ("unique_id", "id", "problem_id"), "math", index),
        prompt=statement.strip(),
        kind="math",
        answer=answer.strip(),
        reference=solution,
        meta={"source": "math", "row": index} | extra_meta(row, ("level", "type", "subject")),
    )
