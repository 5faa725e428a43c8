"""User reward plug-ins: loading, the TRL calling convention, and every way one can fail."""

import asyncio

import pytest

from rlrun.rewards import RewardError
from rlrun.rewards.plugins import call_plugin, load_plugin

from .helpers import PLUGINS, math_problem, plugin, sample

PROBLEMS = [math_problem("p0", "18"), math_problem("p1", "7"), math_problem("p2", "3")]
TEXTS = ["#### 18", "the answer is 7", "#### 4"]
SAMPLES = [sample(p, t, n_tokens=i + 1)
           for i, (p, t) in enumerate(zip(PROBLEMS, TEXTS, strict=True))]


def _call(name, problems=PROBLEMS, samples=SAMPLES):
    return call_plugin(load_plugin(plugin(name)), plugin(name), problems, samples)


def test_sync_plugin_gets_completions_and_dataset_columns():
    assert _call("echo_answer") == [1.0, 1.0, 0.0]
    assert _call("kwargs_seen") == [1.0, 2.0, 3.0]


def test_async_plugin():
    assert _call("async_length") == [float(len(t)) for t in TEXTS]


def test_async_plugin_inside_a_running_event_loop():
    async def main():
        return _call("async_length")

    assert asyncio.run(main()) == [float(len(t)) for t in TEXTS]


def test_module_form_imports_from_the_python_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS.parent))
    fn = load_plugin("plugins:brevity")
    assert call_plugin(fn, "plugins:brevity", PROBLEMS[:1], SAMPLES[:1]) == [1.0 / 8]


def test_builtin_without_kwargs_is_rejected_by_signature():
    with pytest.raises(RewardError, match="signature"):
        load_plugin("math:sqrt")


def test_raising_plugin_names_function_sample_index_and_problem():
    problems = PROBLEMS
    samples = [sample(problems[0], "ok"), sample(problems[1], "bad"), sample(problems[2], "ok")]
    with pytest.raises(RewardError) as err:
        _call("raises_on_bad", problems, samples)
    msg = str(err.value)
    assert "raises_on_bad" in msg and "sample 1" in msg and "p1" in msg and "ValueError" in msg


def test_wrong_length_names_both_counts():
    with pytest.raises(RewardError, match=r"wrong_length.*returned 4 values for 3 completions"):
        _call("wrong_length")


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("nan_second", "sample 1 (problem p1)"),
        ("inf_last", "sample 2 (problem p2)"),
        ("huge_int", "sample 1 (problem p1)"),  # too large for a float, and for repr
        ("text_value", "sample 0 (problem p0)"),
    ],
)
def test_non_finite_or_non_numeric_values_name_the_sample(name, where):
    with pytest.raises(RewardError) as err:
        _call(name)
    assert name in str(err.value) and where in str(err.value)
    assert "finite number" in str(err.value)


def test_a_scalar_instead_of_a_list_is_rejected():
    with pytest.raises(RewardError, match="not_a_list.*returned float"):
        _call("not_a_list")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_colon_here", "not module:function"),
        ("rlrun_no_such_module_xyz:fn", "cannot import 'rlrun_no_such_module_xyz'"),
        (f"{PLUGINS}:missing", "has no attribute 'missing'"),
        (f"{PLUGINS}:NOT_CALLABLE", "is a int, not a function"),
        (f"{PLUGINS}:no_kwargs", r"needs TRL's fn\(completions, \*\*kwargs\)"),
        ("/nonexistent/dir/rewards.py:fn", "no such file"),
    ],
)
def test_load_errors_name_the_key_and_the_problem(spec, match):
    with pytest.raises(RewardError, match=match) as err:
        load_plugin(spec, where="reward.fns.1.fn")
    assert str(err.value).startswith("reward.fns.1.fn:")
