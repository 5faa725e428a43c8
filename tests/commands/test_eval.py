"""`rlrun eval`: what --model may name, argument checks, and a full run on rollout actors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from rlrun import cli
from rlrun.checkpoint import record
from rlrun.commands.eval import _sample_counts, load_split, model_slug, parse_k, resolve_checkpoint
from rlrun.config import ConfigError, load_config
from tests.test_evaluation import fit_to_answers


def _hf_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_model_argument_forms(tmp_path: Path) -> None:
    cfg = load_config()
    hf = _hf_dir(tmp_path / "hf")
    assert resolve_checkpoint(str(hf), cfg) == str(hf)
    ckpt = tmp_path / "ckpt"
    _hf_dir(ckpt / "model")
    assert resolve_checkpoint(str(ckpt), cfg) == str(ckpt / "model")
    run = tmp_path / "run"
    for step in (5, 10):
        _hf_dir(run / "learner" / f"step_{step:06d}" / "model")
        record(str(run), step, keep=2)
    assert resolve_checkpoint(str(run), cfg) == str(run / "learner" / "step_000010" / "model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="--model .*empty.*config.json"):
        resolve_checkpoint(str(tmp_path / "empty"), cfg)


def test_model_slug() -> None:
    assert model_slug("runs/demo/learner/step_000020/model") == "step_000020"
    assert model_slug("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen2.5-0.5B-Instruct"
    assert model_slug("tiny") == "tiny"


def test_k_and_samples_checks() -> None:
    assert parse_k("10,1,5") == [1, 5, 10]
    for bad in ("1,x", "0", ""):
        with pytest.raises(ConfigError, match="--k"):
            parse_k(bad)
    cfg = load_config(None, ["trainer.eval_samples=3", "trainer.eval_k=[1,2]"])

    def counts(**kw) -> tuple[list[int], int]:
        args = argparse.Namespace(**({"k": None, "samples": None, "greedy": False} | kw))
        return _sample_counts(args, cfg)

    assert counts() == ([1, 2], 3)
    assert counts(k="1,5") == ([1, 5], 5)
    assert counts(greedy=True) == ([1, 2], 0)
    with pytest.raises(ConfigError, match="--samples >= 5"):
        counts(k="5", samples=2)
    with pytest.raises(ConfigError, match="--greedy"):
        counts(samples=0)


def test_test_split_of_a_local_file_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("")
    cfg = load_config(None, [f"data.train={data}"])
    with pytest.raises(ConfigError, match="no test split"):
        load_split(cfg, "test", None)


def test_test_split_of_toy_data_is_disjoint_from_train_and_val() -> None:
    cfg = load_config(None, ["data.toy_size=30", "data.val_size=5"])
    train, val = (load_split(cfg, s, None) for s in ("train", "val"))
    test = load_split(cfg, "test", None)
    assert len(test) == 5
    assert not {p.id for p in test} & {p.id for p in train + val}


@pytest.fixture
def ray_session():
    import ray

    yield
    ray.shutdown()


@pytest.mark.slow
def test_eval_of_a_trained_checkpoint_against_its_starting_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ray_session: None,
) -> None:
    monkeypatch.setenv("RLRUN_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(
        f"run: {{name: evaltest, output_dir: {run}, num_cpus: 2}}\n"
        "data: {train: 'toy:arithmetic', toy_size: 40, val_size: 4}\n"
        "rollout: {batch_size: 8, sampling: {max_new_tokens: 12}}\n"
        "metrics: {progress: 'off'}\n"
    )
    cfg = load_config(recipe)
    val = load_split(cfg, "val", None)
    base = resolve_checkpoint("tiny", cfg)
    fit_to_answers(base, val[:2], cfg.data, run / "learner" / "step_000005")
    record(str(run), 5, keep=1)

    common = ["--greedy", "--samples", "2", "--k", "1,2"]
    assert cli.main(["eval", str(recipe), "--model", "tiny", "--out", str(tmp_path / "b.jsonl"),
                     *common]) == 0
    first = capsys.readouterr().out
    assert cli.main(["eval", str(recipe), "--model", str(run), "--baseline",
                     str(tmp_path / "b.jsonl"), *common]) == 0
    second = capsys.readouterr().out

    for out in (first, second):
        assert "group" in out and "pass@2" in out and "source=toy:arithmetic" in out
    assert "flips against" not in first
    flips = second.split("flips against", 1)[1]
    assert "of 4 problems in both evals" in flips
    for p in val[:2]:
        assert f"fixed   {p.id}" in flips
    summary = json.loads((run / "eval_val_step_000005.json").read_text())
    assert summary["overall"]["greedy_accuracy"] >= 0.5
    assert {f["problem_id"] for f in summary["flips"] if f["fixed"]} >= {p.id for p in val[:2]}
    rows = (run / "eval_val_step_000005.jsonl").read_text().splitlines()
    assert len(rows) == 4
