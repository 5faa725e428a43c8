"""The configured reward: builtin correctness and plug-ins, weighted, plus shaping terms.

`build_reward(cfg, judge)` reads `reward.*`; `Reward.score(problems, samples)` returns one
`ScoredSample` per sample whose `components` hold every term by name (each `reward.fns` entry's
`name`, and `length` / `overlong` / `format` when enabled) and whose `reward` is
sum(weight * fn component) + sum(shaping components). The builtin correctness is the math
verifier for `kind: math` problems and the sandbox judge for `kind: code` problems.

With `reward.step_rewards`, each math sample's steps are checked too (`rlrun.rewards.steps`):
`ScoredSample.steps` holds every step's verdict and `token_rewards` a part at each step's last
token (`reward.step_correct`, `reward.step_wrong`, 0 for an uncheckable step). The parts do not
add to `reward`; `algo.step_advantage` decides what the advantage makes of them. Placing them
needs the engine's `decode` (`Reward.using`); without it the steps are checked but no
part is placed.

A component is None where it gives no score (TRL's convention for a reward function): it adds
nothing to the sum. The sample's `reward` is None (unscored) when no component scored it, or when
the builtin check could not judge it (a `sandbox_error`): its correctness is then unknown, not
inapplicable, so the other components must not stand in for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rlrun.config import Config, ConfigError
from rlrun.records import Problem, Sample, ScoredSample, StepCheck, TokenReward, Verdict
from rlrun.rewards.code import JudgeFn, judge_completions
from rlrun.rewards.errors import RewardError
from rlrun.rewards.math import check_answer
from rlrun.rewards.plugin_worker import PluginWorker
from rlrun.rewards.shaping import shaping_components
from rlrun.rewards.steps import check_steps, last_tokens

SHAPING_NAMES: tuple[str, ...] = ("length", "overlong", "format")
# token ids -> text as the engine decodes them: places step parts at tokens
Decode = Callable[[list[int]], str]


@dataclass
class Correctness:
    """The builtin check of one sample, with what an audit needs to explain it."""

    score: float | None  # None: the sandbox failed to judge the program
    extracted: str | None  # the math answer or code that was read; None: nothing found
    status: str  # math: correct | wrong | no_answer | timeout; code: a verdict status or no_code
    verdicts: list[Verdict]


@dataclass
class Evaluation:
    """A scored sample and, when a builtin term is configured, how its correctness came about."""

    scored: ScoredSample
    correctness: Correctness | None


@dataclass
class _Term:
    name: str
    weight: float
    spec: str
    fn: PluginWorker | None  # None: the builtin correctness


class Reward:
    """Scores batches of samples against their problems; see `build_reward`. Its plug-ins run
    in child processes: `close` (or leaving a `with` block) stops them."""

    def __init__(self, cfg: Config, judge: JudgeFn | None, terms: list[_Term],
                 decode: Decode | None = None) -> None:
        self.cfg = cfg
        self.judge = judge
        self.terms = terms
        self.decode = decode

    def using(self, judge: JudgeFn | None = None, decode: Decode | None = None) -> Reward:
        """This reward judging code with `judge` and placing step parts with `decode`: the
        plug-ins are built (and checked) before the sandbox and the tokenizer exist. The two
        share the plug-ins' processes; closing either stops them."""
        return Reward(self.cfg, judge, self.terms, decode)

    @property
    def names(self) -> list[str]:
        """Component names of the `reward.fns` terms, in config order."""
        return [t.name for t in self.terms]

    def score(self, problems: list[Problem], samples: list[Sample]) -> list[ScoredSample]:
        """One ScoredSample per sample; problems[i] is the problem of samples[i]."""
        return [e.scored for e in self.evaluate(problems, samples)]

    def evaluate(self, problems: list[Problem], samples: list[Sample]) -> list[Evaluation]:
        """Like `score`, also returning the builtin check's details for each sample."""
        if len(problems) != len(samples):
            raise RewardError(f"{len(problems)} problems for {len(samples)} samples: pass one each")
        for i, (p, s) in enumerate(zip(problems, samples, strict=True)):
            if p.id != s.problem_id:
                raise RewardError(
                    f"sample {i} is for problem {s.problem_id} but was paired with {p.id}"
                )
        needs_builtin = any(t.fn is None for t in self.terms)
        builtin = self.correctness(problems, samples) if needs_builtin else None
        columns: dict[str, list[float | None]] = {
            t.name: [c.score for c in builtin or []] if t.fn is None else t.fn(problems, samples)
            for t in self.terms
        }
        out: list[Evaluation] = []
        for i, (problem, sample) in enumerate(zip(problems, samples, strict=True)):
            components: dict[str, float | None] = {t.name: columns[t.name][i] for t in self.terms}
            total = sum(
                t.weight * c for t in self.terms if (c := components[t.name]) is not None
            )
            shaping = shaping_components(self.cfg, problem, sample)
            components.update(shaping)
            total += sum(shaping.values())
            check = builtin[i] if builtin is not None else None
            verdicts = check.verdicts if check is not None else []
            unscored = (check is not None and check.score is None) or all(
                c is None for c in components.values()
            )
            scored = ScoredSample(sample, None if unscored else total, components, verdicts)
            if self.cfg.reward.step_rewards and problem.kind == "math":
                scored.steps, scored.token_rewards = self.step_parts(sample)
            out.append(Evaluation(scored, check))
        return out

    def step_parts(self, sample: Sample) -> tuple[list[StepCheck], list[TokenReward]]:
        """The verdict on each step of a math sample, and its part at the step's last token.

        Two steps ending in one token (a token that spans a line break) leave one part there,
        the lower: a wrong step's part is never lost. A last line the token limit cut off
        ("48 + 32 = 8" of "= 80") is uncheckable: it is not what the model would have written.
        """
        text = sample.response_text
        steps = check_steps(text)
        if sample.finish_reason == "length" and steps and "\n" not in text[steps[-1].end:]:
            steps[-1] = replace(steps[-1], verdict="uncheckable")
        ends = [s.end for s in steps]
        tokens = (last_tokens(sample.response_ids, ends, self.decode)
                  if self.decode is not None else [-1] * len(steps))
        value = {"correct": self.cfg.reward.step_correct, "wrong": self.cfg.reward.step_wrong,
                 "uncheckable": 0.0}
        parts: dict[int, float] = {}
        for s, t in zip(steps, tokens, strict=True):
            if t >= 0:
                parts[t] = min(parts.get(t, value[s.verdict]), value[s.verdict])
        checks = [StepCheck(s.start, s.end, s.verdict, t) for s, t in zip(steps, tokens,
                                                                            strict=True)]
        return checks, [TokenReward(t, v) for t, v in sorted(parts.items())]

    def close(self) -> None:
        """Stop the plug-ins' processes."""
        for t in self.terms:
            if t.fn is not None:
                t.fn.close()

    def __enter__(self) -> Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def correctness(self, problems: list[Problem], samples: list[Sample]) -> list[Correctness]:
        """The builtin check of every sample: math verifier or sandbox judge by problem kind."""
        out: list[Correctness | None] = [None] * len(samples)
        code_idx: list[int] = []
        for i, (problem, sample) in enumerate(zip(problems, samples, strict=True)):
            if problem.kind == "code":
                code_idx.append(i)
                continue
            if problem.answer is None:
                raise RewardError(
                    f"problem {problem.id} (sample {i}) is a math problem without an answer: "
                    "the dataset row needs its gold answer"
                )
            res = check_answer(
                sample.response_text, problem.answer, self.cfg.reward.math_extractor,
                self.cfg.reward.math_timeout_s,
            )
            status = (
                "timeout" if res.timed_out else "no_answer" if res.extracted is None
                else "correct" if res.correct else "wrong"
            )
            out[i] = Correctness(1.0 if res.correct else 0.0, res.extracted, status, [])
        if code_idx:
            if self.judge is None:
                raise RewardError(
                    f"problem {problems[code_idx[0]].id} is a code problem but the reward has no "
                    "judge: build it with a sandbox Judge or SandboxPool"
                )
            outcomes = judge_completions(
                [problems[i] for i in code_idx], [samples[i].response_text for i in code_idx],
                self.judge, self.cfg,
            )
            for i, oc in zip(code_idx, outcomes, strict=True):
                status = (
                    "no_code" if oc.result is None else "sandbox_error" if oc.score is None
                    else oc.result.status
                )
                verdicts = oc.result.tests if oc.result is not None else []
                out[i] = Correctness(oc.score, oc.code, status, verdicts)
        return [c for c in out if c is not None]


def build_reward(cfg: Config, judge: JudgeFn | None) -> Reward:
    """The reward `cfg.reward` describes; `judge` runs code (None is fine for math-only data,
    and until the sandbox exists: `Reward.using` gives the reward with it). Each plug-in is
    imported, and its signature checked, in its own process now."""
    names = [rfn.name for rfn in cfg.reward.fns]
    for i, rfn in enumerate(cfg.reward.fns):
        where = f"reward.fns[{i}]"
        if rfn.name in SHAPING_NAMES or rfn.name in names[:i]:
            raise ConfigError(
                f"config key {where}.name={rfn.name!r} is not allowed: component names must be "
                f"unique and not one of the shaping terms {', '.join(SHAPING_NAMES)}"
            )
    terms: list[_Term] = []
    try:
        for i, rfn in enumerate(cfg.reward.fns):
            fn = None if rfn.fn == "builtin" else PluginWorker(
                rfn.fn, f"reward.fns[{i}].fn", cfg.reward.timeout_s
            )
            terms.append(_Term(rfn.name, rfn.weight, rfn.fn, fn))
    except RewardError:
        Reward(cfg, judge, terms).close()
        raise
    return Reward(cfg, judge, terms)


def component_weights(cfg: Config) -> dict[str, float]:
    """The weight of every reward component by name: each `reward.fns` entry's, and 1 for each
    shaping term (TRL's `reward_weights`, the shaping terms being reward functions of their own)."""
    return {f.name: f.weight for f in cfg.reward.fns} | dict.fromkeys(SHAPING_NAMES, 1.0)
