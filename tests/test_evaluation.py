"""Evaluation on the tiny model with toy problems, the real HF engine and the real reward.

The "trained" model is the tiny model fitted (a few supervised steps) to the answers of two
problems, saved the way training saves checkpoints (`<dir>/model/`); the
untrained tiny model is its baseline, so the flip list is known: those two problems go from
fail to pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlrun.config import Config, DataConfig, load_config
from rlrun.data.prompts import render_prompt
from rlrun.data.toy import arithmetic_problems
from rlrun.engines import SamplingParams, make_engine
from rlrun.evaluation import (
    EvalResult,
    ProblemResult,
    aggregate,
    common_problems,
    compare,
    evaluate,
    format_flips,
    format_table,
    read_jsonl,
    write_jsonl,
)
from rlrun.metrics.passk import pass_at_k
from rlrun.models import load_causal_lm, load_tokenizer, resolve_model_path
from rlrun.records import Problem
from rlrun.rewards import build_reward

TRAINED = 2  # problems the fitted model has learned


@pytest.fixture(scope="module")
def cfg() -> Config:
    return load_config(None, ["rollout.sampling.max_new_tokens=12", "rollout.batch_size=16"])


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    out = arithmetic_problems(4, seed=0)
    for i, p in enumerate(out):
        p.meta["difficulty"] = "easy" if i % 2 else "hard"
    return out


@pytest.fixture(scope="module")
def base_model(cfg: Config, tmp_path_factory: pytest.TempPathFactory) -> str:
    return resolve_model_path(cfg.model, str(tmp_path_factory.mktemp("cache")))


def fit_to_answers(base_model: str, problems: list[Problem], data: DataConfig, out: Path) -> Path:
    """Fit the model to answer `problems` with "#### <answer>" and save it as a training
    checkpoint (`out/model/`). Stops once teacher-forced argmax is right at every answer
    position, i.e. greedy decoding emits exactly the answer."""
    torch.manual_seed(0)
    tok, model = load_tokenizer(base_model), load_causal_lm(base_model)
    rows = []
    for p in problems:
        prompt = tok(render_prompt(p, data), add_special_tokens=False)["input_ids"]
        answer = tok(f"#### {p.answer}", add_special_tokens=False)["input_ids"]
        rows.append((prompt, answer + [tok.eos_token_id]))
    width = max(len(a) + len(b) for a, b in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, answer) in enumerate(rows):
        n = len(prompt) + len(answer)
        ids[i, :n] = torch.tensor(prompt + answer)
        labels[i, len(prompt) : n] = torch.tensor(answer)
        mask[i, :n] = 1
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(300):
        result = model(input_ids=ids, attention_mask=mask, labels=labels)
        target = labels[:, 1:]
        hits = result.logits[:, :-1].argmax(-1) == target
        if hits[target != -100].all():
            break
        result.loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out / "model")
    tok.save_pretrained(out / "model")
    return out


@pytest.fixture(scope="module")
def trained_checkpoint(
    cfg: Config, base_model: str, problems: list[Problem], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "step_000010"
    return fit_to_answers(base_model, problems[:TRAINED], cfg.data, out)


def _evaluate(cfg: Config, model_path: str, problems: list[Problem], **kw) -> EvalResult:
    engine = make_engine("hf", model_path, cfg.rollout, cfg.model.dtype)
    return evaluate(
        problems,
        engine.generate,
        build_reward(cfg, None).score,
        SamplingParams.from_config(cfg.rollout.sampling, seed=0),
        render=lambda p: render_prompt(p, cfg.data),
        **kw,
    )


def test_trained_checkpoint_against_its_starting_model(
    cfg: Config, base_model: str, trained_checkpoint: Path, problems: list[Problem],
    tmp_path: Path,
) -> None:
    base = _evaluate(cfg, base_model, problems, k_list=[1, 2], samples=2, greedy=True)
    baseline_file = write_jsonl(base, tmp_path / "base.jsonl")
    trained = _evaluate(cfg, str(trained_checkpoint / "model"), problems, k_list=[1, 2],
                        samples=2, greedy=True)

    # The fitted problems are now answered correctly by greedy decoding, with the worked answer.
    for r, p in zip(trained.problems[:TRAINED], problems[:TRAINED], strict=True):
        assert r.greedy_correct, r
        assert r.greedy_response.endswith(f"#### {p.answer}")
    flips = compare(trained, read_jsonl(baseline_file))
    fixed = {f.problem_id for f in flips if f.fixed}
    assert {p.id for p in problems[:TRAINED]} <= fixed
    for f in flips:
        assert (f.before, f.after) in ((0.0, 1.0), (1.0, 0.0))

    summary = trained.summary(flips, model="ckpt", split="val")
    table = format_table(summary)
    assert table.splitlines()[0].split() == [
        "group", "problems", "greedy_accuracy", "accuracy", "pass@1", "pass@2", "reward_mean"
    ]
    labels = [line.split()[0] for line in table.splitlines()[2:]]
    assert labels == ["all", "kind=math", "source=toy:arithmetic", "difficulty=easy",
                      "difficulty=hard"]
    overall = summary["overall"]
    assert overall["problems"] == len(problems)
    greedy_right = sum(bool(r.greedy_correct) for r in trained.problems)
    assert overall["greedy_accuracy"] == greedy_right / len(problems)
    assert json.loads(json.dumps(summary)) == summary

    text = format_flips(flips, common_problems(trained, base))
    assert text.splitlines()[0].startswith(f"{len(fixed)} fixed, ")
    assert text.splitlines()[0].endswith(f"of {len(problems)} problems in both evals")
    assert all(pid in text for pid in fixed)


def test_sampled_results_follow_the_unbiased_estimator(
    cfg: Config, trained_checkpoint: Path, problems: list[Problem]
) -> None:
    result = _evaluate(cfg, str(trained_checkpoint / "model"), problems, k_list=[1, 2, 4],
                       samples=4, greedy=False, batch_size=4)
    assert [r.problem_id for r in result.problems] == [p.id for p in problems]
    for r in result.problems:
        assert r.n == 4 and len(r.rewards) == len(r.responses) == 4
        assert r.greedy_correct is None
        assert r.correct == sum(reward >= 1.0 for reward in r.rewards)
        assert r.pass_at == {k: pass_at_k(4, r.correct, k) for k in (1, 2, 4)}
    metrics = result.metrics()
    assert metrics["val/accuracy"] == pytest.approx(
        sum(r.correct / 4 for r in result.problems) / len(problems)
    )
    assert set(metrics) == {"val/accuracy", "val/reward_mean", "val/pass@1", "val/pass@2",
                            "val/pass@4", "val/unscored"}
    assert metrics["val/unscored"] == 0


def test_pass_at_k_beyond_the_samples_is_refused(
    cfg: Config, base_model: str, problems: list[Problem]
) -> None:
    with pytest.raises(ValueError, match="trainer.eval_samples"):
        _evaluate(cfg, base_model, problems, k_list=[1, 5], samples=4)


def _row(pid: str, n: int, c: int, greedy: bool | None = None, **meta) -> ProblemResult:
    return ProblemResult(pid, "code", n=n, correct=c, rewards=[1.0] * c + [0.0] * (n - c),
                         greedy_correct=greedy, pass_at={1: c / n, 2: pass_at_k(n, c, 2)},
                         **meta)


def test_aggregate_and_breakdowns_by_hand() -> None:
    rows = [_row("a", 4, 1, source="apps"), _row("b", 4, 4, source="apps"),
            _row("c", 4, 0, source="cf", difficulty="800")]
    result = EvalResult(rows, [1, 2], samples=4, greedy=False, seed=0)
    overall = result.overall()
    # accuracy = (1/4 + 1 + 0) / 3; pass@2 = (1 - C(3,2)/C(4,2) = 0.5, 1, 0) / 3
    assert overall["accuracy"] == pytest.approx(1.25 / 3)
    assert overall["pass@2"] == pytest.approx(1.5 / 3)
    assert overall["reward_mean"] == pytest.approx(1.25 / 3)
    assert overall["unscored"] == 0
    groups = result.breakdowns()
    assert groups["source"]["apps"]["pass@2"] == pytest.approx(0.75)
    assert groups["difficulty"] == {"800": aggregate([rows[2]], [1, 2])}
    assert "unscored" not in format_table(result.summary()).splitlines()[0]


def test_unscored_completions_count_as_wrong_are_left_out_of_the_reward_and_counted() -> None:
    # Of a's 4 samples the sandbox judged 3 (1 right); b's greedy completion was not judged.
    a = ProblemResult("a", "code", n=4, correct=1, rewards=[1.0, None, 0.0, 0.0],
                      pass_at={1: 0.25})
    b = ProblemResult("b", "code", n=4, correct=2, rewards=[1.0, 1.0, 0.0, 0.0],
                      greedy_correct=False, greedy_reward=None, pass_at={1: 0.5})
    result = EvalResult([a, b], [1], samples=4, greedy=True, seed=0)
    overall = result.overall()
    assert overall["accuracy"] == pytest.approx((0.25 + 0.5) / 2)
    assert overall["reward_mean"] == pytest.approx((1 / 3 + 0.5) / 2)
    assert overall["unscored"] == 2
    assert result.metrics()["val/unscored"] == 2
    assert format_table(result.summary()).splitlines()[0].split()[-1] == "unscored"


def test_metrics_split_by_kind_only_on_a_mixed_set() -> None:
    code = [_row("a", 4, 1), _row("b", 4, 3)]
    math = ProblemResult("m", "math", n=4, correct=0, rewards=[0.0] * 4,
                         pass_at={1: 0.0, 2: 0.0})
    mixed = EvalResult(code + [math], [1, 2], samples=4, greedy=False, seed=0).metrics()
    assert mixed["val/accuracy"] == pytest.approx(1 / 3)
    assert mixed["val/code/accuracy"] == pytest.approx(0.5)
    assert mixed["val/math/accuracy"] == 0.0
    assert mixed["val/code/pass@2"] == pytest.approx(aggregate(code, [1, 2])["pass@2"])
    assert "val/code/problems" not in mixed
    only_code = EvalResult(code, [1, 2], samples=4, greedy=False, seed=0).metrics()
    assert not any(k.startswith("val/code/") for k in only_code)


def test_flips_use_greedy_when_both_evals_have_it_and_majority_otherwise() -> None:
    before = [_row("a", 4, 0, greedy=False), _row("b", 4, 4, greedy=True), _row("x", 4, 4)]
    after = [_row("a", 4, 1, greedy=True), _row("b", 4, 4, greedy=True)]
    assert [(f.problem_id, f.fixed) for f in compare(after, before)] == [("a", True)]
    # Sampled only: solved means at least half the samples pass (1/4 -> 2/4 flips, 0 -> 1 not).
    before = [_row("a", 4, 1), _row("b", 4, 0), _row("c", 4, 3)]
    after = [_row("a", 4, 2), _row("b", 4, 1), _row("c", 4, 1)]
    flips = compare(after, before)
    assert [(f.problem_id, f.fixed, f.before, f.after) for f in flips] == [
        ("a", True, 0.25, 0.5), ("c", False, 0.75, 0.25)
    ]


def test_jsonl_round_trip(tmp_path: Path) -> None:
    rows = [_row("a", 4, 1, greedy=True, source="apps")]
    path = write_jsonl(EvalResult(rows, [1, 2], 4, True, 0), tmp_path / "e.jsonl")
    assert read_jsonl(path) == rows
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1"):
        read_jsonl(path)
