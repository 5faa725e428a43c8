"""Evaluation of a policy on a set of problems: accuracy, unbiased pass@k, breakdowns, flips.

`evaluate` is pure: it is handed the `generate` and `score` callables of `rlrun.scoring`
(the rollout actors or a local engine, and the reward), so `rlrun eval`, validation inside
training and the tests share it and score as training does. A completion is correct when the
reward's correctness component is 1 (all tests passed / the answer matches).

docs/metrics.md ("Validation") defines the numbers. In short, per problem with n samples of
which c are correct: accuracy is the mean of c/n (the greedy accuracy when nothing was
sampled), pass@k the mean of 1 - C(n-c, k) / C(n, k); a completion the reward could not score
counts as not correct, stays out of reward_mean and is counted in `unscored`; a problem is
solved when its greedy completion is correct (if greedy ran), else when half its samples are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from rlrun.engines.base import SamplingParams
from rlrun.metrics.passk import pass_at_k
from rlrun.metrics.progress import track
from rlrun.records import Problem, ScoredSample
from rlrun.scoring import EpisodeFn, GenerateFn, ScoreFn, score_groups

BREAKDOWNS = ("kind", "source", "difficulty")


@dataclass
class ProblemResult:
    """Everything measured on one problem."""

    problem_id: str
    kind: str
    source: str | None = None
    difficulty: str | None = None
    n: int = 0  # sampled completions
    correct: int = 0  # correct among them (c)
    rewards: list[float | None] = field(default_factory=list)  # None: unscored
    responses: list[str] = field(default_factory=list)
    greedy_correct: bool | None = None
    greedy_reward: float | None = None
    greedy_response: str | None = None
    pass_at: dict[int, float] = field(default_factory=dict)
    # Multi-turn (`env.name`): for each sampled trajectory, the turn after which it was solved
    # (0: never); for the greedy one, likewise (None: single-turn); the most turns any took.
    solved_at: list[int] = field(default_factory=list)
    greedy_solved_at: int | None = None
    turns: int = 0

    @property
    def score(self) -> float:
        """Greedy correctness if greedy ran, else the fraction of correct samples."""
        if self.greedy_correct is not None:
            return float(self.greedy_correct)
        return self.correct / self.n if self.n else 0.0

    @property
    def solved(self) -> bool:
        return self.score >= 0.5

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProblemResult:
        pass_at = {int(k): float(v) for k, v in d.get("pass_at", {}).items()}
        return cls(**(d | {"pass_at": pass_at}))


@dataclass
class Flip:
    """A problem whose solved state differs between a baseline eval and this one."""

    problem_id: str
    before: float  # ProblemResult.score in the baseline
    after: float  # ProblemResult.score now

    @property
    def fixed(self) -> bool:
        return self.after > self.before


@dataclass
class EvalResult:
    problems: list[ProblemResult]
    k_list: list[int]
    samples: int
    greedy: bool
    seed: int

    def overall(self) -> dict[str, float]:
        return aggregate(self.problems, self.k_list)

    def breakdowns(self) -> dict[str, dict[str, dict[str, float]]]:
        """{"source": {"gsm8k": {...}, ...}, "difficulty": {...}, "kind": {...}} for every field
        that some problem carries."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name in BREAKDOWNS:
            groups: dict[str, list[ProblemResult]] = {}
            for r in self.problems:
                value = getattr(r, name)
                if value is not None:
                    groups.setdefault(str(value), []).append(r)
            if groups:
                out[name] = {v: aggregate(rs, self.k_list) for v, rs in sorted(groups.items())}
        return out

    def metrics(self, prefix: str = "val") -> dict[str, float]:
        """The overall numbers under flat metric names (val/accuracy, val/pass@1, ...), and on a
        set of several problem kinds each kind's too (val/math/accuracy, val/code/accuracy, ...):
        a mixed average can hide one kind improving while the other gets worse."""
        out = {f"{prefix}/{k}": v for k, v in self.overall().items() if k != "problems"}
        kinds = self.breakdowns().get("kind", {})
        if len(kinds) > 1:
            for kind, numbers in kinds.items():
                out |= {f"{prefix}/{kind}/{k}": v for k, v in numbers.items() if k != "problems"}
        return out

    def summary(self, flips: list[Flip] | None = None, **info: Any) -> dict[str, Any]:
        """A JSON-able digest (what eval*.json files and the run report hold)."""
        out: dict[str, Any] = dict(info) | {
            "samples": self.samples, "greedy": self.greedy, "k": self.k_list, "seed": self.seed,
            "overall": self.overall(), "breakdowns": self.breakdowns(),
        }
        if flips is not None:
            out["flips"] = [asdict(f) | {"fixed": f.fixed} for f in flips]
        return out


def aggregate(results: Sequence[ProblemResult], k_list: Sequence[int]) -> dict[str, float]:
    """Overall numbers of a group of problems (see the module docstring)."""
    out: dict[str, float] = {"problems": len(results)}
    sampled = [r for r in results if r.n]
    greedy = [r for r in results if r.greedy_correct is not None]
    out["unscored"] = sum(x is None for r in sampled for x in r.rewards) + sum(
        r.greedy_reward is None for r in greedy)
    if greedy:
        out["greedy_accuracy"] = fmean(float(r.greedy_correct) for r in greedy)
    if sampled:
        out["accuracy"] = fmean(r.correct / r.n for r in sampled)
        means = [fmean(scored) for r in sampled if (scored := _scored(r.rewards))]
        if means:
            out["reward_mean"] = fmean(means)
        for k in k_list:
            out[f"pass@{k}"] = fmean(r.pass_at[k] for r in sampled)
    elif greedy:
        out["accuracy"] = out["greedy_accuracy"]
        if scored := _scored([r.greedy_reward for r in greedy]):
            out["reward_mean"] = fmean(scored)
    return out | _by_turn(sampled, greedy, k_list)


def _by_turn(sampled: Sequence[ProblemResult], greedy: Sequence[ProblemResult],
             k_list: Sequence[int]) -> dict[str, float]:
    """Multi-turn: turn<t>/accuracy, turn<t>/pass@k and turn<t>/greedy_accuracy, counting a
    trajectory as correct after turn t when it was solved by then, for t up to the most turns
    any trajectory took."""
    last = max([r.turns for r in [*sampled, *greedy]], default=0)
    if not last:
        return {}
    out: dict[str, float] = {}
    for t in range(1, last + 1):
        if sampled:
            counts = [(r.n, sum(0 < x <= t for x in r.solved_at)) for r in sampled]
            out[f"turn{t}/accuracy"] = fmean(c / n for n, c in counts)
            for k in k_list:
                out[f"turn{t}/pass@{k}"] = fmean(pass_at_k(n, c, k) for n, c in counts)
        if greedy:
            out[f"turn{t}/greedy_accuracy"] = fmean(
                0 < (r.greedy_solved_at or 0) <= t for r in greedy)
    return out


def _scored(rewards: list[float | None]) -> list[float]:
    return [r for r in rewards if r is not None]


def evaluate(
    problems: list[Problem],
    generate: GenerateFn,
    score: ScoreFn,
    sampling: SamplingParams,
    k_list: Sequence[int] = (1,),
    samples: int = 4,
    greedy: bool = False,
    render: Callable[[Problem], str] | None = None,
    batch_size: int = 64,
    progress: str = "off",
    correct_component: str = "correctness",
    episodes: EpisodeFn | None = None,
) -> EvalResult:
    """Generate `samples` sampled completions with `sampling` (and one greedy one if `greedy`)
    per problem, score them, and measure accuracy and pass@k for every k in `k_list`.

    `render` turns a problem into the prompt text (default: the problem's prompt string).
    A completion is correct when its `correct_component` is 1; one the component could not
    score (a sandbox failure) is not correct. With `episodes` (a multi-turn environment) each
    completion is a trajectory, and the numbers after each turn come too (turn<t>/...).
    """
    k_list = sorted(set(k_list))
    if not problems:
        raise ValueError("evaluate got no problems: check the dataset and split")
    if samples < 0 or (samples == 0 and not greedy):
        raise ValueError(f"samples={samples}: sample at least 1 completion or use greedy")
    if samples and k_list and (k_list[0] < 1 or k_list[-1] > samples):
        raise ValueError(
            f"pass@k for k={k_list} needs 1 <= k <= samples={samples} completions per problem "
            "(rlrun eval --samples, or trainer.eval_samples >= max(trainer.eval_k))"
        )
    render = render or _plain_prompt
    results: list[ProblemResult] = []
    batches = [problems[i : i + batch_size] for i in range(0, len(problems), batch_size)]
    for batch in track(batches, len(batches), "eval batches", progress):
        prompts = [render(p) for p in batch]
        rows = [_blank(p) for p in batch]
        if greedy:
            greedy_sampling = replace(sampling, n=1, temperature=0.0, top_p=1.0, top_k=0)
            for row, (one,) in zip(rows, _attempts(batch, prompts, greedy_sampling, generate,
                                                   score, episodes), strict=True):
                row.greedy_correct = _correct(one, correct_component)
                row.greedy_reward = _float(one.reward)
                row.greedy_response = one.sample.response_text
                if one.sample.turns:
                    row.greedy_solved_at = _solved_at(one, correct_component)
                    row.turns = max(row.turns, len(one.sample.turns))
        if samples:
            for row, scored in zip(rows, _attempts(batch, prompts, replace(sampling, n=samples),
                                                   generate, score, episodes), strict=True):
                row.n = samples
                row.correct = sum(_correct(s, correct_component) for s in scored)
                row.rewards = [_float(s.reward) for s in scored]
                row.responses = [s.sample.response_text for s in scored]
                row.pass_at = {k: pass_at_k(row.n, row.correct, k) for k in k_list}
                if scored and scored[0].sample.turns:
                    row.solved_at = [_solved_at(s, correct_component) for s in scored]
                    row.turns = max([row.turns] + [len(s.sample.turns) for s in scored])
        results.extend(rows)
    return EvalResult(results, k_list if samples else [], samples, greedy, sampling.seed or 0)


def _attempts(problems: list[Problem], prompts: list[str], sampling: SamplingParams,
              generate: GenerateFn, score: ScoreFn,
              episodes: EpisodeFn | None) -> list[list[ScoredSample]]:
    """`sampling.n` completions (or trajectories) per problem, scored."""
    done = generate(prompts, sampling)
    if len(done) != len(problems) or any(len(row) != sampling.n for row in done):
        raise ValueError(
            f"generate returned {[len(row) for row in done]} completions per problem for "
            f"{len(problems)} problems; expected {sampling.n} each"
        )
    if episodes is not None:
        done = episodes(problems, done, sampling)
    return score_groups(score, problems, [[replace(s, problem_id=p.id) for s in row]
                                          for p, row in zip(problems, done, strict=True)])


def _solved_at(scored: ScoredSample, component: str) -> int:
    """The turn after which a trajectory was solved: its last, if correct; else 0."""
    return len(scored.sample.turns) if _correct(scored, component) else 0


def _correct(scored: ScoredSample, component: str) -> bool:
    if component not in scored.components:
        raise ValueError(
            f"reward component {component!r} not found (components: "
            f"{', '.join(scored.components) or 'none'}): accuracy needs a builtin reward.fns "
            "entry (fn: builtin)"
        )
    value = scored.components[component]
    return value is not None and value >= 1.0 - 1e-9


def _float(reward: float | None) -> float | None:
    return None if reward is None else float(reward)


def _plain_prompt(problem: Problem) -> str:
    if not isinstance(problem.prompt, str):
        raise ValueError(
            f"problem {problem.id} has a chat prompt: pass render= to turn it into text"
        )
    return problem.prompt


def _blank(problem: Problem) -> ProblemResult:
    meta = problem.meta or {}
    labels = {k: None if meta.get(k) is None else str(meta[k]) for k in ("source", "difficulty")}
    return ProblemResult(problem_id=problem.id, kind=problem.kind, **labels)


def compare(
    result: EvalResult | Sequence[ProblemResult], baseline: EvalResult | Sequence[ProblemResult]
) -> list[Flip]:
    """Problems (present in both) whose solved state changed from the baseline to `result`."""
    old = {r.problem_id: r for r in _rows(baseline)}
    return [
        Flip(r.problem_id, old[r.problem_id].score, r.score)
        for r in _rows(result)
        if r.problem_id in old and old[r.problem_id].solved != r.solved
    ]


def common_problems(
    result: EvalResult | Sequence[ProblemResult], baseline: EvalResult | Sequence[ProblemResult]
) -> int:
    return len({r.problem_id for r in _rows(result)} & {r.problem_id for r in _rows(baseline)})


def _rows(result: EvalResult | Sequence[ProblemResult]) -> Sequence[ProblemResult]:
    return result.problems if isinstance(result, EvalResult) else result


def write_jsonl(result: EvalResult, path: str | Path) -> Path:
    """One JSON row per problem (`ProblemResult.to_dict`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in result.problems:
            f.write(json.dumps(r.to_dict()) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[ProblemResult]:
    """Per-problem rows written by `write_jsonl` (a `--baseline` file)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(ProblemResult.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError) as err:
                raise ValueError(
                    f"{path} line {line_no} is not a per-problem eval row written by `rlrun eval "
                    f"--out` ({err})"
                ) from None
    return rows


def _columns(rows: list[dict[str, float]]) -> list[str]:
    order = ["problems", "greedy_accuracy", "accuracy"]
    order += sorted({k for r in rows for k in r if k.startswith("pass@")}, key=lambda k: int(k[5:]))
    order.append("reward_mean")
    cols = [c for c in order if any(c in r for r in rows)]
    return cols + ["unscored"] * any(r.get("unscored") for r in rows)  # only when there were any


def format_table(summary: dict[str, Any]) -> str:
    """The overall row, the overall numbers after each turn of a multi-turn environment
    (`after turn t`), and every breakdown of `EvalResult.summary()`, as a text table."""
    overall = summary["overall"]
    named = [("all", {k: v for k, v in overall.items() if not k.startswith("turn")})]
    turns = sorted({int(k[4:].split("/")[0]) for k in overall if k.startswith("turn")})
    named += [(f"after turn {t}", {k.split("/", 1)[1]: v for k, v in overall.items()
                                   if k.startswith(f"turn{t}/")}) for t in turns]
    for name, groups in summary.get("breakdowns", {}).items():
        named += [(f"{name}={value}", row) for value, row in groups.items()]
    cols = _columns([row for _, row in named])
    widths = [max(8, len(c)) for c in cols]
    width = max(len(n) for n, _ in named)
    titles = "  ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True))
    header = f"{'group':<{width}}  {titles}"
    lines = [header, "-" * len(header)]
    for label, row in named:
        cells = []
        for c, w in zip(cols, widths, strict=True):
            v = row.get(c)
            cells.append(f"{'-':>{w}}" if v is None else f"{v:>{w}d}" if c == "problems"
                         else f"{v:>{w}.3f}")
        lines.append(f"{label:<{width}}  " + "  ".join(cells))
    return "\n".join(lines)


def format_flips(flips: Sequence[Flip], compared: int) -> str:
    """`2 fixed, 1 broken of 64 problems in both evals` and one line per flip."""
    fixed = [f for f in flips if f.fixed]
    broken = [f for f in flips if not f.fixed]
    lines = [f"{len(fixed)} fixed, {len(broken)} broken of {compared} problems in both evals"]
    width = max((len(f.problem_id) for f in flips), default=0)
    for f in fixed + broken:
        label = "fixed " if f.fixed else "broken"
        lines.append(f"  {label}  {f.problem_id:<{width}}  {f.before:.2f} -> {f.after:.2f}")
    return "\n".join(lines)
