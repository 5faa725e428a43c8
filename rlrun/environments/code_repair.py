"""The built-in code-repair environment (`env.name: code_repair`): the model writes a program,
the sandbox runs it on the problem's visible tests, a failure goes back to the model, and it
tries again, until the visible tests pass or `env.max_turns` is reached.

The split: a problem's tests are cut once into visible and hidden ones. A dataset that carries
its own split keeps it (`Problem.meta["visible_tests"]`: the first that many stdio tests, as
CodeContests' public tests come before its private ones); any other problem shows its first
`env.visible_tests` stdio tests (or call tests, when it has no stdio tests). A harness (HumanEval
`check`) is always hidden.

The anti-gaming rule: the reward comes from the hidden tests only, on the final program, and no
hidden test's input or output ever appears in an observation. A program that special-cases the
inputs it was shown passes the visible tests and scores on the hidden ones what it deserves;
`env/visible_only` counts such final programs.

The observation after a failed turn (each quoted piece cut to `env.feedback_chars`):

    Visible test 2 of 3 failed: wrong answer.
    Input:
    3 4
    Expected output:
    12
    Your output:
    7
    Answer with a ```python code block.

whose last line repeats the first prompt's answer-format instruction (`data.code_instruction`)
(a call test shows `Call: f(*args)`, `Expected:` and `Your function:` with what it returned);
or, in place of the test's lines, the compiler's first lines, the runtime error's last lines
(a Python traceback from the program's own first frame, which names the exception), "time limit
exceeded (2.0 s)", "memory limit exceeded", "output limit exceeded", or "No ```python code
block found in your answer.".
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rlrun.data.prompts import instruction
from rlrun.environments.base import EnvError, Feedback
from rlrun.records import JudgeResult, Problem, Submission, Tests, Verdict
from rlrun.rewards.code import extract_code
from rlrun.sandbox.judge import HEAD, judged_tests

if TYPE_CHECKING:
    from rlrun.config import Config

_STATUS_TEXT = {
    "wrong_answer": "wrong answer",
    "runtime_error": "runtime error",
    "time_limit": "time limit exceeded",
    "memory_limit": "memory limit exceeded",
    "output_limit": "output limit exceeded",
    "compile_error": "compile error",
}


def split_tests(problem: Problem, default_visible: int) -> tuple[Tests, Tests]:
    """(visible, hidden) tests of `problem`, as the module docstring says."""
    tests = problem.tests
    if problem.kind != "code" or tests is None:
        raise EnvError(f"env.name=code_repair: problem {problem.id} is not a code problem with "
                       "tests; use code data (or no env.name for math)")
    shown = problem.meta.get("visible_tests", default_visible)
    if shown == 0:
        raise EnvError(f"env.name=code_repair: problem {problem.id} has no visible test in its "
                       "dataset's own split (CodeContests: no public_tests), so no feedback can "
                       "quote one; drop such problems")
    if tests.stdio:
        visible = replace(tests, stdio=tests.stdio[:shown], calls=[], harness=None)
        hidden = replace(tests, stdio=tests.stdio[shown:])
    else:
        visible = replace(tests, calls=tests.calls[:shown], harness=None)
        hidden = replace(tests, calls=tests.calls[shown:])
    if visible.count() == 0 or hidden.count() == 0:
        raise EnvError(
            f"env.name=code_repair: problem {problem.id} has {tests.count()} tests, too few to "
            f"show {shown} and keep one hidden; lower env.visible_tests or drop such problems")
    return visible, hidden


def _cut(text: str, chars: int, tail: bool = False) -> str:
    text = text.rstrip("\n")
    if len(text) <= chars:
        return text
    return "..." + text[-chars:] if tail else text[:chars] + "..."


def _own_frames(stderr: str) -> str:
    """A Python traceback from the program's first own frame on: the runner's frames above it
    say nothing about the program."""
    at = stderr.find('  File "main.py"')
    return stderr[at:] if at >= 0 else stderr


class CodeRepair:
    """One repair episode of one problem (the contract: `rlrun.environments.base`)."""

    def __init__(self, problem: Problem, cfg: Config) -> None:
        self.problem, self.cfg = problem, cfg
        visible, self.hidden = split_tests(problem, cfg.env.visible_tests)
        # What a submission runs and so what feedback can quote: `sandbox.max_tests` may judge a
        # subset of the visible tests, and the verdicts come in the subset's order.
        self.visible = judged_tests(problem, visible, cfg.sandbox.max_tests)

    def scored_problem(self) -> Problem:
        return replace(self.problem, tests=self.hidden)

    def submissions(self, response: str) -> list[Submission]:
        from rlrun.sandbox import make_submission

        code, language = self._program(response)
        if code is None:
            return []
        return [make_submission(replace(self.problem, tests=self.visible), code,
                                self.cfg.sandbox, language=language)]

    def observe(self, response: str, results: list[JudgeResult]) -> Feedback:
        language = self.problem.language
        if not results:
            return Feedback(f"No ```{language} code block found in your answer.\n"
                            + self._ask(), done=False, reward=0.0,
                            info={"no_program": 1.0, "visible_passed": 0.0})
        (result,) = results
        if result.status == "sandbox_error" or any(
                v.status == "sandbox_error" for v in result.tests):
            return Feedback("", done=True, judged=False)
        share = result.passed / result.total if result.total else 0.0
        if result.status == "accepted":
            return Feedback("", done=True, reward=1.0,
                            info={"no_program": 0.0, "visible_passed": 1.0})
        return Feedback(self._describe(result) + self._ask(), done=False, reward=share,
                        info={"no_program": 0.0, "visible_passed": 0.0})

    def _program(self, response: str) -> tuple[str | None, str]:
        tests = self.problem.tests
        bare = bool(tests and tests.harness and self.problem.code_prefix)
        return extract_code(response, self.problem.language, allow_bare=bare)

    def _ask(self) -> str:
        """The first prompt's answer-format instruction, asked again."""
        return instruction(self.problem, self.cfg.data)

    def _describe(self, result: JudgeResult) -> str:
        """What went wrong on the first visible test that failed."""
        chars = self.cfg.env.feedback_chars
        if result.status == "compile_error":
            first = result.tests[0] if result.tests else Verdict("compile_error")
            return ("Your program did not compile:\n"
                    + _cut(first.stderr_head or first.detail, chars) + "\n")
        index, verdict = next((i, v) for i, v in enumerate(result.tests)
                              if v.status != "accepted")
        lines = [f"Visible test {index + 1} of {result.total} failed: "
                 f"{_STATUS_TEXT.get(verdict.status, verdict.status)}"
                 + (f" ({self._time_limit()} s)." if verdict.status == "time_limit" else ".")]
        lines += self._case(index, chars)
        # A verdict keeps HEAD characters of the output and of stderr, so one that long may have
        # been cut there: quoted one shorter, it shows the "..." that says so.
        quoted = min(chars, HEAD - 1)
        if verdict.status == "wrong_answer" and self.visible.stdio:
            lines += ["Your output:", _cut(verdict.stdout_head, quoted)]
        elif verdict.status == "wrong_answer":
            # A call test's value is in the verdict's detail ("returned [1, 2]"); what the
            # function printed says nothing about it.
            lines += ["Your function:", _cut(verdict.detail, chars)]
        elif verdict.status == "runtime_error":
            lines += ["Error:", _cut(_own_frames(verdict.stderr_head) or verdict.detail, quoted,
                                     tail=True)]
        return "\n".join(lines) + "\n"

    def _time_limit(self) -> float:
        """The limit `make_submission` gives the program."""
        box = self.cfg.sandbox
        return min(self.problem.time_limit_s or box.time_limit_s, box.max_time_limit_s)

    def _case(self, index: int, chars: int) -> list[str]:
        """The input and expected output of the `index`-th test a submission runs."""
        if self.visible.stdio:
            test = self.visible.stdio[index]
            return ["Input:", _cut(test.input, chars), "Expected output:",
                    _cut(test.output, chars)]
        call = self.visible.calls[index]
        name = self.visible.fn_name or "the function"
        return [f"Call: {name}(*{_cut(repr(call.args), chars)})", "Expected:",
                _cut(repr(call.expected), chars)]
