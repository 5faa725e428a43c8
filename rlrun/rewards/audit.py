"""Reward audit: score a dataset's own reference answers and deliberately wrong ones.

A reward that fails the reference solutions (an extractor that misses "$1,000", a harness that
rejects the canonical program) or pays for wrong ones teaches the model the wrong thing, so
`rlrun check-rewards` and `reward.audit_before_training` run this before any GPU time is spent
(docs/rewards.md).

- math: the reference completion is `problem.reference` (the worked solution), else the gold
  answer as the extractor reads it (`#### 18`, `The answer is 18.`, `$\\boxed{18}$`); the wrong
  one changes the extracted final answer (a number +1, any other answer with "+1" appended).
- code: the reference program in a fenced block of the problem's language; the wrong one is
  cut to the first half of its lines (a lone line becomes `pass`).

A row passes when every `reward.fns` component gives full marks (1.0; None is not full marks).
Shaping terms judge form, not correctness, and are left out.

With `reward.step_rewards`, math references are also checked step by step
(`rlrun.rewards.steps`), and each verified step with a bare number on the right of an equality
is perturbed on its own: that result +1 everywhere the step writes it (`<<16-3-4=10>>10`). A
perturbation is caught when its step's verdict is `wrong` and no earlier verdict changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal, localcontext

from rlrun.records import Problem, Sample
from rlrun.rewards.errors import RewardError
from rlrun.rewards.math import find_answer, normalize_number
from rlrun.rewards.reward import Reward
from rlrun.rewards.steps import PERCENT_SIGNS, Step, check_steps, evaluate

FULL_MARKS = 1.0 - 1e-9


def math_reference(problem: Problem, mode: str) -> str | None:
    """The completion an audit treats as correct for a math problem; None without an answer."""
    if problem.reference:
        return problem.reference
    return None if problem.answer is None else written_answer(problem.answer, mode)


def written_answer(answer: str, mode: str) -> str:
    """A minimal completion stating `answer` the way extractor `mode` reads it."""
    if mode == "strict":
        return f"#### {answer}"
    if mode == "flexible":
        return f"The answer is {answer}."
    return f"The answer is $\\boxed{{{answer}}}$."


def perturb_answer(answer: str) -> str:
    """A different answer of the same shape: numbers +1, anything else with "+1" appended."""
    number = normalize_number(answer)
    if number is None:
        return f"{answer}+1"
    with localcontext() as ctx:  # exact: the default 28 digits rounded 10**30 + 1 to 10**30
        ctx.prec = len(number) + 2
        return format(Decimal(number) + 1, "f")


def math_wrong(text: str, gold: str | None, mode: str) -> str:
    """`text` with the final answer the extractor reads replaced by a different one."""
    span = find_answer(text, mode)
    if span is None:
        return written_answer(perturb_answer(gold or "0"), mode)
    return text[: span.start] + perturb_answer(span.text) + text[span.end :]


def truncate_program(code: str) -> str:
    """The first half of a program's lines; a program of one line becomes `pass`."""
    lines = code.rstrip().splitlines()
    keep = lines[: len(lines) // 2]
    if not any(line.strip() for line in keep):
        first = next((line for line in lines if line.strip()), "")
        keep = [first[: len(first) - len(first.lstrip())] + "pass"]
    return "\n".join(keep) + "\n"


def _fence(code: str, language: str) -> str:
    return f"```{language}\n{code.rstrip()}\n```"


def audit_texts(problem: Problem, math_mode: str) -> tuple[str, str] | None:
    """(reference completion, wrong completion) for a problem; None when it has no reference."""
    if problem.kind == "math":
        ref = math_reference(problem, math_mode)
        if ref is None:
            return None
        return ref, math_wrong(ref, problem.answer, math_mode)
    if not problem.reference:
        return None
    return (
        _fence(problem.reference, problem.language),
        _fence(truncate_program(problem.reference), problem.language),
    )


def perturb_number(written: str) -> str:
    """A bare number as written in a step, +1, with its decimals and percent sign kept:
    "130,000" -> "130001", "1.50" -> "2.50", "25%" -> "26%"."""
    percent = next((p for p in PERCENT_SIGNS if written.endswith(p)), "")
    body = written.removesuffix(percent)
    value = evaluate(body)
    if value is None:
        raise ValueError(f"{written!r} is not a number")
    value += 1
    decimals = len(body.split(".")[1]) if "." in body else 0
    scaled = value * 10**decimals
    if scaled.denominator != 1:
        return f"{value.numerator}/{value.denominator}{percent}"  # "⅓" + 1 -> "4/3"
    return format(Decimal(f"{scaled.numerator}e-{decimals}"), "f") + percent  # exact, no rounding


def perturb_step(text: str, step: Step) -> str | None:
    """`text` with the result of `step`'s first holding claim changed wherever the step writes
    that value as a result; None when no holding claim has a bare number on its right."""
    spans = [c.value_span for c in step.claims if c.holds and c.value_span is not None]
    if not spans:
        return None
    value = evaluate(text[slice(*spans[0])])
    same = [s for s in spans if evaluate(text[slice(*s)]) == value]
    for start, end in sorted(set(same), reverse=True):
        text = text[:start] + perturb_number(text[start:end]) + text[end:]
    return text


@dataclass
class WrongStep:
    """A reference step that does not verify, or a perturbation that was not caught."""

    problem_id: str
    step: int  # 0-based index among the completion's steps
    text: str
    claims: list[str]  # the claims that do not hold (a missed perturbation: the step's claims)


@dataclass
class StepAudit:
    """The step audit of math references and of their perturbations (see the module doc)."""

    completions: int = 0
    steps: int = 0
    verified: int = 0  # reference steps whose claims hold
    wrong: list[WrongStep] = field(default_factory=list)  # reference steps with a false claim
    perturbed: int = 0
    caught: int = 0  # perturbations whose step is wrong, no earlier verdict changed
    missed: list[WrongStep] = field(default_factory=list)

    @property
    def checkable(self) -> int:
        return self.verified + len(self.wrong)

    @property
    def caught_rate(self) -> float:
        return self.caught / self.perturbed if self.perturbed else 0.0

    def summary(self) -> str:
        return (
            f"steps: {self.verified}/{self.checkable} checkable reference steps verified, "
            f"perturbed: {self.caught}/{self.perturbed} caught at their step "
            f"({self.caught_rate:.2%})"
        )

    def table(self, worst: int = 10) -> str:
        lines = [
            f"step audit of {self.completions} worked solutions: {self.steps} steps, "
            f"{self.checkable} checkable, {self.verified} verified, {len(self.wrong)} wrong",
            f"perturbed intermediate values: {self.perturbed}, caught at their step "
            f"{self.caught} ({self.caught_rate:.2%})",
        ]
        for title, rows in (("reference steps that do not verify", self.wrong),
                            ("perturbations not caught", self.missed)):
            if rows:
                lines.append(f"{title} ({min(worst, len(rows))} of {len(rows)}):")
                for r in rows[:worst]:
                    lines += [f"  {r.problem_id} step {r.step + 1}: {_short(r.text, 90)}",
                              f"      claims: {'; '.join(r.claims)}"]
        return "\n".join(lines)


def step_audit(problems: list[Problem]) -> StepAudit:
    """Check every math problem's worked solution step by step, and each perturbation of it."""
    audit = StepAudit()
    for p in problems:
        if p.kind != "math" or not p.reference:
            continue
        text = p.reference
        steps = check_steps(text)
        audit.completions += 1
        audit.steps += len(steps)
        for k, s in enumerate(steps):
            if s.verdict == "correct":
                audit.verified += 1
            elif s.verdict == "wrong":
                audit.wrong.append(WrongStep(
                    p.id, k, text[s.start : s.end], [c.text for c in s.claims if c.holds is False]
                ))
        for k, s in enumerate(steps):
            if s.verdict != "correct" or (changed := perturb_step(text, s)) is None:
                continue
            audit.perturbed += 1
            after = check_steps(changed)
            same_before = [x.verdict for x in after[:k]] == [x.verdict for x in steps[:k]]
            if len(after) == len(steps) and after[k].verdict == "wrong" and same_before:
                audit.caught += 1
            else:
                line = after[k] if k < len(after) else s
                audit.missed.append(WrongStep(
                    p.id, k, changed[line.start : line.end], [c.text for c in line.claims]
                ))
    return audit


@dataclass
class AuditRow:
    """One scored completion of the audit."""

    problem_id: str
    case: str  # reference | wrong
    score: float
    passed: bool
    status: str  # the builtin check's status (correct, no_answer, timeout, accepted, ...)
    extracted: str | None
    expected: str | None


@dataclass
class AuditReport:
    """Counts and rows of an audit; `summary()` is its one-line verdict."""

    rows: list[AuditRow] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # problems without a reference
    steps: StepAudit | None = None  # with reward.step_rewards: the step audit of the references

    def _case(self, case: str) -> list[AuditRow]:
        return [r for r in self.rows if r.case == case]

    def _passed(self, case: str) -> int:
        return sum(r.passed for r in self._case(case))

    @property
    def reference_total(self) -> int:
        return len(self._case("reference"))

    @property
    def reference_passed(self) -> int:
        return self._passed("reference")

    @property
    def reference_pass_rate(self) -> float:
        return self.reference_passed / self.reference_total if self.reference_total else 0.0

    def count(self, case: str, statuses: tuple[str, ...]) -> int:
        return sum(r.status in statuses for r in self._case(case))

    def summary(self) -> str:
        return (
            f"reference: {self.reference_passed}/{self.reference_total} passed, "
            f"wrong: {self._passed('wrong')}/{len(self._case('wrong'))} passed"
        )

    def table(self, worst: int = 10) -> str:
        """The audit as plain-text tables: counts per case, then the worst rows."""
        lines = [f"{'case':<10} {'total':>6} {'passed':>7} {'rate':>7} {'no answer':>10} "
                 f"{'timeouts':>9}"]
        for case in ("reference", "wrong"):
            rows, passed = self._case(case), self._passed(case)
            rate = f"{passed / len(rows):.1%}" if rows else "-"
            lines.append(
                f"{case:<10} {len(rows):>6} {passed:>7} {rate:>7} "
                f"{self.count(case, ('no_answer', 'no_code')):>10} "
                f"{self.count(case, ('timeout', 'time_limit')):>9}"
            )
        if self.skipped:
            lines.append(f"skipped (no reference answer or solution): {len(self.skipped)}")
        bad = [r for r in self._case("reference") if not r.passed]
        bad += [r for r in self._case("wrong") if r.passed]
        if bad:
            lines += ["", f"worst rows ({min(worst, len(bad))} of {len(bad)}):",
                      f"  {'problem':<24} {'case':<10} {'score':>6} {'status':<14} "
                      "extracted -> expected"]
            lines += [f"  {r.problem_id:<24} {r.case:<10} {r.score:>6.2f} {r.status:<14} "
                      f"{_short(r.extracted)} -> {_short(r.expected)}" for r in bad[:worst]]
        if self.steps is not None:
            lines += ["", self.steps.table(worst)]
        return "\n".join(lines)


def _short(text: str | None, limit: int = 40) -> str:
    if text is None:
        return "(none)"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _sample(problem: Problem, text: str, group: int) -> Sample:
    return Sample(prompt_ids=[], response_ids=[], response_text=text, behaviour_logprobs=[],
                  finish_reason="stop", problem_id=problem.id, group_id=group)


def run_audit(reward: Reward, problems: list[Problem], batch_size: int = 256) -> AuditReport:
    """Score every problem's reference and wrong completions with `reward`."""
    report = AuditReport()
    pairs: list[tuple[Problem, str, str]] = []
    for p in problems:
        texts = audit_texts(p, reward.cfg.reward.math_extractor)
        if texts is None:
            report.skipped.append(p.id)
        else:
            pairs.append((p, *texts))
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        batch_problems = [p for p, _, _ in chunk for _ in (0, 1)]
        batch_samples = [
            _sample(p, text, i) for i, (p, ref, wrong) in enumerate(chunk) for text in (ref, wrong)
        ]
        evaluations = reward.evaluate(batch_problems, batch_samples)
        for j, (problem, ev) in enumerate(zip(batch_problems, evaluations, strict=True)):
            check = ev.correctness
            fn_scores = [ev.scored.components[name] for name in reward.names]
            report.rows.append(AuditRow(
                problem_id=problem.id,
                case="reference" if j % 2 == 0 else "wrong",
                score=sum(
                    t.weight * c for t in reward.terms
                    if (c := ev.scored.components[t.name]) is not None
                ),
                passed=all(s is not None and s >= FULL_MARKS for s in fn_scores),
                status=check.status if check is not None else "plugin",
                extracted=check.extracted if check is not None else None,
                expected=problem.answer if problem.kind == "math" else "all tests pass",
            ))
    if reward.cfg.reward.step_rewards:
        report.steps = step_audit(problems)
    return report


def audit_before_training(reward: Reward, problems: list[Problem]) -> AuditReport:
    """The `reward.audit_before_training` check on the first `reward.audit_limit` problems;
    `RewardError` when the reference pass rate is below `reward.audit_min_pass_rate`."""
    cfg = reward.cfg
    report = run_audit(reward, problems[: cfg.reward.audit_limit])
    need = cfg.reward.audit_min_pass_rate
    if report.reference_total and report.reference_pass_rate < need:
        raise RewardError(
            f"reward audit before training failed ({report.summary()}; reward."
            f"audit_min_pass_rate={need}): the reward rejects the dataset's own answers. "
            "Run `rlrun check-rewards CONFIG` for the failing rows, or set "
            "reward.audit_before_training=false"
        )
    return report
