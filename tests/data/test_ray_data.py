"""Ray Data conversion gives the same problems and bad rows as `load_problems`."""

import json
import subprocess
import sys

import pytest
import ray

from rlrun.data import DataError, load_problems


@pytest.fixture(scope="module")
def ray_local():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.mark.slow
def test_sharded_jsonl_matches_load_problems(ray_local, fixtures, tmp_path):
    from rlrun.data.ray_data import problem_of, ray_dataset

    rows = [
        {"problem_id": f"p{i}", "prompt": f"Print {i}.", "test_cases": [["", str(i)]]}
        for i in range(30)
    ]
    for i in range(0, 30, 7):
        del rows[i]["test_cases"]
    path = tmp_path / "plain.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = load_problems(str(path))
    ds = ray_dataset(str(path), shard_bytes=300, with_bad_rows=True)
    got = sorted(ds.take_all(), key=lambda r: r["index"])
    assert [r["index"] for r in got] == list(range(30))
    assert [problem_of(r) for r in got if not r["error"]] == expected.problems
    assert [r["error"] for r in got if r["error"]] == [b.reason for b in expected.bad_rows]
    usable = ray_dataset(str(path), shard_bytes=300)
    assert usable.count() == len(expected.problems)


@pytest.mark.slow
def test_fail_mode_names_the_row(ray_local, fixtures):
    from rlrun.data.ray_data import ray_dataset

    with pytest.raises(Exception, match="row 2: field 'test_cases"):
        ray_dataset(str(fixtures / "plain.jsonl"), on_bad_row="fail").take_all()


@pytest.mark.slow
def test_hub_ids_are_refused_before_ray_starts():
    from rlrun.data.ray_data import ray_dataset

    with pytest.raises(DataError, match="not a local file or folder"):
        ray_dataset("some-org/some-dataset")


def test_importing_the_data_layer_does_not_import_ray():
    code = "import sys, rlrun.data; print('ray' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr


@pytest.mark.slow
def test_ray_dataset_is_reachable_from_the_package():
    import rlrun.data
    from rlrun.data import ray_data

    assert rlrun.data.ray_dataset is ray_data.ray_dataset
