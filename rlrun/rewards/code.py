"""Code rewards: pull the program out of a completion, judge it, turn verdicts into a score.

Extraction (`extract_code`), in order:

1. the last closed fenced block tagged with the expected language (```python / ```py /
   ```python3, ```cpp / ```c++ / ```cc / ```cxx);
2. otherwise the last closed fenced block of any tag; its language is the fence's when the tag
   names a known language, else the expected one;
3. otherwise, only when `allow_bare` (HumanEval-style problems whose prompt is a signature and
   docstring, so a completion is the function body), the whole completion as it stands.

An unclosed fence (a completion cut at the token limit) is not code. Scoring (`score_result`):
`compile_error` -> `reward.compile_error_reward`; otherwise the fraction of tests passed
(`reward.code_scoring: fraction`) or 1/0 (`all_or_nothing`). A `sandbox_error` (left after the
sandbox's own retries) is the judge's failure, not the program's: the completion gets no score
(None), so the step leaves it out of its group's statistics instead of training on a wrong 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rlrun.config import Config
from rlrun.records import JudgeResult, Problem, Submission
from rlrun.rewards.errors import RewardError

JudgeFn = Callable[[list[Submission]], list[JudgeResult]]

LANGUAGE_TAGS: dict[str, str] = {
    "python": "python", "py": "python", "python3": "python", "py3": "python",
    "cpp": "cpp", "c++": "cpp", "cc": "cpp", "cxx": "cpp",
}

_TAG = re.compile(r"[ \t]*([\w+#.-]*)")


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, body) of every fenced block, in order: an opening ```, the tag at the start of the
    rest of its line, the body up to the next ```. What the pattern
    ```[ \\t]*([\\w+#.-]*)[^\\n]*\\n(.*?)``` finds, in linear time: the pattern scanned to
    the end of the line from every ``` in it, so one long line of backticks took seconds."""
    blocks, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:  # no later opening has a line break after it either
            break
        close = text.find("```", newline + 1)
        if close < 0:  # nor a closing fence after its line
            break
        tag = _TAG.match(text, start + 3, newline)
        blocks.append((tag.group(1) if tag else "", text[newline + 1:close]))
        pos = close + 3
    return blocks


def _clean(body: str) -> str | None:
    # Keep the first line's indentation: a HumanEval body starts indented under the signature.
    body = body.rstrip()
    while body.startswith("\n") or body.startswith("\r"):
        body = body[1:]
    return body if body.strip() else None


def extract_code(text: str, language: str, allow_bare: bool = False) -> tuple[str | None, str]:
    """The program in `text` and its language; `(None, language)` when there is none."""
    blocks = [(tag.lower(), body) for tag, body in _fenced_blocks(text)]
    for tag, body in reversed(blocks):
        if LANGUAGE_TAGS.get(tag) == language:
            code = _clean(body)
            if code is not None:
                return code, language
    for tag, body in reversed(blocks):
        code = _clean(body)
        if code is not None:
            return code, LANGUAGE_TAGS.get(tag, language)
    if allow_bare and "```" not in text:
        return _clean(text), language
    return None, language


def score_result(result: JudgeResult, scoring: str, compile_error_reward: float) -> float:
    """The correctness score of one judged program."""
    if result.status == "compile_error":
        return compile_error_reward
    if scoring == "all_or_nothing":
        return 1.0 if result.status == "accepted" else 0.0
    if result.total <= 0:
        raise RewardError(f"submission {result.id}: the judge ran 0 tests, so it has no score")
    return result.passed / result.total


@dataclass
class CodeOutcome:
    """What the code reward saw for one completion."""

    score: float | None  # None: the sandbox failed to judge it
    code: str | None
    language: str
    result: JudgeResult | None  # None when no code was found


def score_judged(result: JudgeResult, cfg: Config) -> float | None:
    """`score_result` under `cfg.reward`; None when any test hit a `sandbox_error`."""
    if result.status == "sandbox_error" or any(v.status == "sandbox_error" for v in result.tests):
        return None
    return score_result(result, cfg.reward.code_scoring, cfg.reward.compile_error_reward)


def judge_completions(
    problems: list[Problem], texts: list[str], judge: JudgeFn, cfg: Config
) -> list[CodeOutcome]:
    """Extract, judge (one `judge` call for the whole batch) and score each completion."""
    from rlrun.sandbox import make_submission

    outcomes: list[CodeOutcome] = []
    subs: list[Submission] = []
    where: list[int] = []
    for i, (problem, text) in enumerate(zip(problems, texts, strict=True)):
        if problem.tests is None or problem.tests.count() == 0:
            raise RewardError(
                f"problem {problem.id} (sample {i}) is a code problem without tests: "
                "the dataset row needs tests to score code"
            )
        bare = bool(problem.tests.harness and problem.code_prefix)
        code, language = extract_code(text, problem.language, allow_bare=bare)
        outcomes.append(CodeOutcome(cfg.reward.no_code_reward, code, language, None))
        if code is not None:
            sub = make_submission(problem, code, cfg.sandbox, language=language, sub_id=str(i))
            subs.append(sub)
            where.append(i)
    results = judge(subs) if subs else []
    if len(results) != len(subs):
        raise RewardError(f"the judge returned {len(results)} results for {len(subs)} submissions")
    for i, result in zip(where, results, strict=True):
        outcomes[i].score = score_judged(result, cfg)
        outcomes[i].result = result
    return outcomes
