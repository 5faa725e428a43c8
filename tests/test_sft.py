"""Supervised warm-start: reference completions, TRL rows, and a real run inside Ray Train."""

from __future__ import annotations

import pytest

from rlrun.config import load_config
from rlrun.data.toy import arithmetic_problems, code_problems
from rlrun.records import Problem, Tests
from rlrun.sft import mix_by_kind, reference_completion, sft_rows


def test_math_reference_is_the_worked_answer() -> None:
    (p,) = arithmetic_problems(1, 0)
    assert reference_completion(p) == p.reference
    assert reference_completion(p).endswith(f"#### {p.answer}")


def test_code_reference_is_a_fenced_block_the_code_reward_extracts() -> None:
    from rlrun.rewards.code import extract_code

    (p,) = code_problems(1, 0)
    text = reference_completion(p)
    assert text.startswith("```python\n") and text.endswith("\n```")
    assert extract_code(text, "python")[0].strip() == p.reference


def test_harness_reference_carries_the_signature() -> None:
    p = Problem(
        id="h", prompt="def f(x):\n", kind="code", code_prefix="def f(x):\n",
        reference="    return x + 1\n", tests=Tests(harness="assert f(1) == 2", entry_point="f"),
    )
    assert reference_completion(p) == "```python\ndef f(x):\n    return x + 1\n```"


def test_mix_by_kind_sets_the_share_of_math_and_repeats_nothing_early() -> None:
    maths, codes = arithmetic_problems(50, 0), code_problems(50, 0)
    mixed = mix_by_kind(maths + codes, 0.9, seed=0)
    assert len(mixed) == 100
    assert sum(p.kind == "math" for p in mixed) == 90
    # 90 draws from 50 math problems: each one once before any comes a second time.
    counts = {p.id: sum(q.id == p.id for q in mixed) for p in maths}
    assert sorted(set(counts.values())) == [1, 2] and sum(counts.values()) == 90
    assert len({p.id for p in mixed if p.kind == "code"}) == 10
    assert mix_by_kind(maths + codes, 0.9, seed=0) == mixed
    assert [p.kind for p in mixed] != sorted(p.kind for p in mixed)  # shuffled, not in blocks


def test_mix_by_kind_names_the_key_when_a_kind_is_missing() -> None:
    with pytest.raises(ValueError, match=r"sft.math_fraction=0.5 .* code .* data.train has none"):
        mix_by_kind(arithmetic_problems(10, 0), 0.5, seed=0)
    assert len(mix_by_kind(arithmetic_problems(10, 0), 1.0, seed=0)) == 10


def test_problems_without_reference_are_left_out() -> None:
    cfg = load_config(None)
    problems = arithmetic_problems(3, 0) + [Problem(id="x", prompt="?", kind="math", answer="1")]
    rows = sft_rows(problems, cfg)
    assert len(rows) == 3
    assert rows[0]["prompt"].startswith(problems[0].prompt)
    assert "####" in rows[0]["prompt"]  # the answer-format instruction


# Low (2 of 64 sampled answers right): the step that first reaches an accuracy depends on the
# CPU's float kernels, and 0.1 took 25 steps on one machine and 55 on another.
TARGET = 0.03


@pytest.mark.slow
def test_sft_in_ray_train_stops_at_the_accuracy_target(tmp_path) -> None:
    """A real SFTTrainer run in a Ray Train worker: the target is met and the model loads."""
    import ray

    from rlrun.models import load_causal_lm, resolve_model_path
    from rlrun.sft import run_sft

    cfg = load_config(None, [
        f"run.output_dir={tmp_path}/run", "data.train=toy:arithmetic", "data.toy_size=400",
        "sft.enabled=true", "sft.lr=3e-3", "sft.batch_size=32", "sft.max_steps=400",
        "sft.eval_every=10", f"sft.target_accuracy={TARGET}", "trainer.eval_samples=2",
        "learner.num_cpus=1", "rollout.sampling.max_new_tokens=24",
    ])
    problems = arithmetic_problems(400, 0)
    train, val = problems[:368], problems[368:]
    path = resolve_model_path(cfg.model, str(tmp_path / "models"))
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        result = run_sft(cfg, path, train, val)
    finally:
        ray.shutdown()
    assert result.accuracy >= TARGET
    assert result.steps < 400
    assert result.history[-1]["accuracy"] == result.accuracy
    assert all(h["accuracy"] < TARGET for h in result.history[:-1])
    load_causal_lm(result.model_path)
