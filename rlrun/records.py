"""Records that cross module and process boundaries: problems, tests, samples, verdicts.

Every record is a plain dataclass of plain data, so it pickles cheaply across Ray and
serialises to JSON with `to_dict` / `from_dict` for `rlrun data convert` and `rlrun judge`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["math", "code"]
Language = Literal["python", "cpp"]
VerdictStatus = Literal[
    "accepted",
    "wrong_answer",
    "runtime_error",
    "time_limit",
    "memory_limit",
    "output_limit",
    "compile_error",
    "sandbox_error",
]
VERDICT_STATUSES: tuple[str, ...] = VerdictStatus.__args__  # type: ignore[attr-defined]


@dataclass
class StdioTest:
    """One stdin/stdout case: the program reads `input`, its stdout must match `output`."""

    input: str
    output: str


@dataclass
class CallTest:
    """One call-based case (APPS/TACO `fn_name` style): `fn_name(*args)` must equal `expected`.

    `args` and `expected` are plain JSON data; the sandbox compares with strict types.
    """

    args: list[Any]
    expected: Any


@dataclass
class Tests:
    """All tests of one code problem. Any combination of the three kinds may be present."""

    stdio: list[StdioTest] = field(default_factory=list)
    fn_name: str | None = None
    calls: list[CallTest] = field(default_factory=list)
    # An assert-style harness (HumanEval `check(candidate)`, MBPP asserts, LeetCode functional).
    harness: str | None = None
    # The name the harness calls the candidate by (HumanEval `entry_point`).
    entry_point: str | None = None
    # Comparison options for stdio tests.
    float_tolerance: float | None = None
    case_insensitive: bool = False

    def count(self) -> int:
        """Number of separately scored tests (a harness counts as one)."""
        return len(self.stdio) + len(self.calls) + (1 if self.harness else 0)


@dataclass
class Problem:
    """One task the model is trained or evaluated on."""

    id: str
    prompt: str | list[dict[str, str]]
    kind: Kind
    answer: str | None = None
    tests: Tests | None = None
    language: Language = "python"
    time_limit_s: float | None = None
    memory_limit_mb: int | None = None
    # Text placed before the completion when a harness runs it (HumanEval's signature).
    code_prefix: str = ""
    # A known-good solution (math: worked answer text; code: program), used by SFT and audits.
    reference: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Problem:
        d = dict(d)
        tests = d.get("tests")
        if tests is not None:
            tests = dict(tests)
            tests["stdio"] = [StdioTest(**t) for t in tests.get("stdio", [])]
            tests["calls"] = [CallTest(**t) for t in tests.get("calls", [])]
            d["tests"] = Tests(**tests)
        return cls(**d)


@dataclass
class Verdict:
    """The outcome of one test. `sandbox_error` means the judge failed, not the program."""

    status: VerdictStatus
    time_s: float = 0.0
    memory_mb: float = 0.0
    stdout_head: str = ""
    stderr_head: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        # Every field is a scalar, so a shallow copy is asdict's result without its recursion,
        # which cost `rlrun judge` a fifth of its own CPU time per test.
        return dict(vars(self))


@dataclass
class Submission:
    """A program to judge against a problem's tests."""

    id: str
    code: str
    language: Language
    tests: Tests
    time_limit_s: float = 2.0
    memory_limit_mb: int = 512


@dataclass
class JudgeResult:
    """All verdicts of one submission. `status` is `accepted` only if every test passed."""

    id: str
    status: VerdictStatus
    passed: int
    total: int
    tests: list[Verdict]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "passed": self.passed,
            "total": self.total,
            "tests": [v.to_dict() for v in self.tests],
        }


@dataclass
class Turn:
    """One model turn of a multi-turn trajectory and the environment's answer to it."""

    response: str  # the turn's decoded text, as `Sample.response_text` is for one turn
    end: int  # index in `Sample.response_ids` just past the turn's last model token
    observation: str = ""  # what the environment answered ("" after the last turn)
    done: bool = False  # the environment ended the episode after this turn
    judged: bool = True  # False: the environment could not judge it (a sandbox failure)
    reward: float | None = None  # the environment's reward for the turn (`env.turn_rewards`)
    info: dict[str, float] = field(default_factory=dict)  # the environment's own numbers


@dataclass
class Sample:
    """One completion, from the rollout engine that produced it to the learner that trains on it.

    The engine fills in everything but `problem_id` and `group_id`, which the training step
    attaches when it groups completions by the prompt they answer.
    """

    prompt_ids: list[int]
    response_ids: list[int]  # [L], the generated tokens (an EOS that ended them included)
    response_text: str  # decoded, without special tokens, cut before a stop string
    # Log-probability of each response token under the policy that sampled it, [L].
    behaviour_logprobs: list[float]
    # "stop": EOS or a stop string; "length": max_new_tokens reached; "paused": a partial
    # rollout's round ended first (`rollout.partial`), the sample continues in a later round.
    finish_reason: Literal["stop", "length", "paused"]
    weight_version: int = 0  # weight version of the engine that produced its first token
    # [L] with partial rollouts: the weight version each token was sampled with (a later round
    # may run under newer weights); empty: every token came from `weight_version`.
    token_versions: list[int] = field(default_factory=list)
    problem_id: str = ""
    group_id: int = 0
    engine: int = -1  # the rollout actor slot that produced it (-1: not a rollout actor)
    # [L] in a multi-turn trajectory: 1 on tokens the model sampled, 0 on the observation
    # tokens an environment put between its turns (TRL's `env_mask`); those carry a behaviour
    # log-prob of 0 and stay out of the loss. Empty: the model sampled every token.
    env_mask: list[int] = field(default_factory=list)
    # Multi-turn: every turn, in order; `response_text` is the last turn's text. Empty: one turn.
    turns: list[Turn] = field(default_factory=list)

    def versions(self) -> list[int]:
        """The weight version of each response token, [L]."""
        return self.token_versions or [self.weight_version] * len(self.response_ids)

    def compact(self, versions: list[int]) -> list[int]:
        """`token_versions` for per-token `versions`: empty while `weight_version` made every
        token."""
        return [] if set(versions) <= {self.weight_version} else versions


@dataclass
class StepCheck:
    """The verdict on one step (line) of a math completion (`reward.step_rewards`)."""

    start: int  # character span of the step in `response_text`
    end: int
    verdict: str  # correct | wrong | uncheckable (rlrun.rewards.steps)
    token: int = -1  # index in `response_ids` of the step's last token (-1: not known)


@dataclass
class TokenReward:
    """A part of a sample's reward placed at one response token (a step's last token)."""

    position: int  # index in `response_ids`
    value: float


@dataclass
class ScoredSample:
    """A sample with its total reward, the components that made it up, and code verdicts.

    None is no score (TRL's convention): a component that does not apply to the sample, and a
    `reward` the sample could not be given (see `rlrun.rewards.reward`). `token_rewards` are
    parts placed at token positions, apart from `reward` (which they do not add to): the
    advantage combines them with the group-relative outcome (`algo.step_advantage`).
    """

    sample: Sample
    reward: float | None
    components: dict[str, float | None] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    steps: list[StepCheck] = field(default_factory=list)  # with reward.step_rewards, math only
    token_rewards: list[TokenReward] = field(default_factory=list)  # ordered by position
