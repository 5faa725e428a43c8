"""Config loading: recipes, overrides, and the one-line errors for each class of mistake."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlrun.config import ConfigError, load_config, split_args, to_dict
from rlrun.config_yaml import render_base_yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "conf").glob("*.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_loads(path: Path) -> None:
    load_config(path)


def test_base_yaml_matches_the_schema() -> None:
    assert (ROOT / "conf" / "base.yaml").read_text() == render_base_yaml(), (
        "conf/base.yaml is stale: run `python -m rlrun.config_yaml > conf/base.yaml`"
    )


def test_base_yaml_holds_the_schema_defaults() -> None:
    assert to_dict(load_config(ROOT / "conf" / "base.yaml")) == to_dict(load_config())


def test_overrides_apply_and_interpolate() -> None:
    cfg = load_config(None, ["algo.group_size=16", "run.name=x", "rollout.sampling.stop=[a,b]"])
    assert cfg.algo.group_size == 16
    assert cfg.run.output_dir == "runs/x"
    assert cfg.rollout.sampling.stop == ["a", "b"]


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["algo.grup_size=3"], ["algo.grup_size", "unknown"]),
        (["algox.steps=3"], ["algox", "unknown"]),
        (["algo.group_size=abc"], ["algo.group_size", "abc"]),
        (["algo.clip_low=wide"], ["algo.clip_low", "wide"]),
        (["algo.group_size=1"], ["algo.group_size", "1"]),
        (["algo.max_staleness=-1"], ["algo.max_staleness", "-1", ">= 0"]),
        (
            ["algo.prompts_per_step=3", "algo.group_size=3", "learner.num_workers=2"],
            ["algo.prompts_per_step", "learner.num_workers"],
        ),
        (["rollout.engine=tgi"], ["rollout.engine", "hf, vllm"]),
        (["algo.dual_clip=0.5"], ["algo.dual_clip", "> 1"]),
        (["algo.max_staleness=2", "algo.is_correction=none"], ["algo.is_correction"]),
        (["rollout.sampling.top_p=1.5"], ["rollout.sampling.top_p"]),
        (["trainer.eval_samples=2", "trainer.eval_k=[1,4]"],
         ["trainer.eval_k", "[1, 4]", "trainer.eval_samples=2"]),
        (["trainer.eval_k=[0]"], ["trainer.eval_k", "1 <= k"]),
        (["sft.math_fraction=1.5"], ["sft.math_fraction", "[0, 1]"]),
        (["reward.fns=[{fn: not_a_dotpath}]"], ["reward.fns[0].fn", "module:function"]),
        (["bad-override"], ["key=value"]),
        (["reward.fns=[{fn: builtin}, {fn: builtin, wieght: 2}]"],
         ["reward.fns[1].wieght", "did you mean weight"]),
        (["algo.grup_size=3"], ["did you mean group_size"]),
        (["algo=3"], ["config key algo is a section", "3"]),
        (["trainer.early_stopping=on"], ["trainer.early_stopping is a section"]),
        (["learner.num_cpus=-1"], ["learner.num_cpus", ">= 0"]),
        (["sandbox.num_cpus=-0.5"], ["sandbox.num_cpus", ">= 0"]),
        (["model.tiny.num_heads=0"], ["model.tiny.num_heads", "> 0"]),
        (["model.tiny.num_heads=3"], ["model.tiny.num_heads", "divide", "hidden_size=64"]),
        (["data.val_size=-3"], ["data.val_size", ">= 0"]),
        (["run.num_cpus=0"], ["run.num_cpus", ">= 1"]),
        (["metrics.progress=sometimes"], ["metrics.progress", "auto, bar, off"]),
        (["metrics.health.window=1"], ["metrics.health.window", ">= 2"]),
        (["trainer.early_stopping.metric=val/acc"], ["trainer.early_stopping.metric",
                                                     "val/accuracy", "val/pass@1"]),
        (["trainer.early_stopping.metric=val/pass@4"], ["trainer.eval_k"]),
        (["reward.shaping.overlong_buffer=512"], ["reward.shaping.overlong_buffer",
                                                  "max_new_tokens="]),
    ],
)
def test_bad_config_fails_with_one_line_naming_the_key(overrides: list[str], names: list[str]):
    with pytest.raises(ConfigError) as info:
        load_config(None, overrides)
    message = str(info.value)
    assert "\n" not in message
    for name in names:
        assert name in message


def test_missing_and_invalid_recipe_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("algo:\n  group_size: [1\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_config(broken)


def test_recipe_errors_name_the_whole_key_path(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- algo\n- rollout\n")
    with pytest.raises(ConfigError, match=r"list.yaml must map sections .* not hold a list"):
        load_config(listed)
    typo = tmp_path / "typo.yaml"
    typo.write_text("reward:\n  fns:\n    - fn: builtin\n      wieght: 1\n")
    with pytest.raises(ConfigError, match=r"unknown config key reward\.fns\[0\]\.wieght"):
        load_config(typo)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("algo: 3\n")
    with pytest.raises(ConfigError, match="config key algo is a section of keys"):
        load_config(scalar)


def test_known_early_stopping_metrics_load() -> None:
    for metric in ("val/accuracy", "val/pass@4", "val/code/greedy_accuracy", "val/reward_mean"):
        cfg = load_config(None, [f"trainer.early_stopping.metric={metric}",
                                 "trainer.eval_k=[1,4]"])
        assert cfg.trainer.early_stopping.metric == metric


def test_split_args_separates_recipe_from_overrides() -> None:
    assert split_args(["conf/demo.yaml", "a.b=1"]) == ("conf/demo.yaml", ["a.b=1"])
    assert split_args(["a.b=1"]) == (None, ["a.b=1"])
    assert split_args([]) == (None, [])


def test_config_errors_come_back_before_heavy_imports() -> None:
    """A typo must fail at once: the CLI reports it without importing torch or Ray."""
    code = (
        "import sys\n"
        "from rlrun.cli import main\n"
        "rc = main(['config', 'show', 'algo.grup_size=3'])\n"
        "assert rc == 2, rc\n"
        "heavy = [m for m in ('torch', 'ray', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "unknown config key algo.grup_size" in out.stderr


def test_off_is_a_word_for_the_keys_that_offer_it(tmp_path) -> None:
    """YAML reads a bare `off` as false; `metrics.console=off` must still mean "off"."""
    cfg = load_config(None, ["metrics.console=off", "metrics.progress=off"])
    assert (cfg.metrics.console, cfg.metrics.progress) == ("off", "off")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("metrics:\n  console: off\n  progress: off\n")
    cfg = load_config(str(recipe), [])
    assert (cfg.metrics.console, cfg.metrics.progress) == ("off", "off")
    with pytest.raises(ConfigError, match="metrics.console"):
        load_config(None, ["metrics.console=on"])


def test_step_advantages_need_step_rewards() -> None:
    with pytest.raises(ConfigError, match=r"algo.step_advantage='local'.*reward.step_rewards=true"):
        load_config(overrides=["algo.step_advantage=local"])
    cfg = load_config(overrides=["algo.step_advantage=min", "reward.step_rewards=true"])
    assert (cfg.algo.step_advantage, cfg.algo.step_coef) == ("min", 0.1)
