"""Every script in benchmarks/ runs: `python benchmarks/X.py --smoke` exits 0 and leaves
docs/benchmarks.md as it was.

FAST and SLOW name each script run here, HELPERS each module the scripts import and none runs;
a file in benchmarks/ that is in none of them fails test_every_benchmark_is_listed, so a new
script cannot be left out, and a listed script without a `--smoke` flag fails its smoke run
(argparse exits 2 on an unknown flag). A smoke run takes its data from tests/fixtures or
generates it, never from a dataset outside the repository, and builds its models in a
temporary $RLRUN_CACHE.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
DOCS = ROOT / "docs" / "benchmarks.md"
HELPERS = {"docs_section.py", "measure.py", "training_runs.py", "trl_grpo.py"}
FAST = ("gsm8k_rewards.py", "humaneval_judge.py", "sandbox_throughput.py")
# Ray clusters, training runs or several fresh interpreters each: more than a few seconds.
SLOW = ("learner_memory.py", "learner_tax.py", "partial_rollouts.py", "plan_accuracy.py",
        "rollout_engines.py", "step_rewards.py", "vs_trl.py", "weight_sync.py")
TIMEOUT_S = 300


def test_every_benchmark_is_listed():
    on_disk = {p.name for p in BENCHMARKS.glob("*.py")}
    listed = [*FAST, *SLOW, *HELPERS]
    assert len(listed) == len(set(listed)), "a name is in more than one of FAST, SLOW, HELPERS"
    unlisted = sorted(on_disk - set(listed))
    assert not unlisted, (
        f"{', '.join(f'benchmarks/{name}' for name in unlisted)}: add each to FAST or SLOW (a "
        "script with --smoke) or to HELPERS (a module the scripts import) in this file"
    )
    assert not set(listed) - on_disk, f"listed but not in benchmarks/: {set(listed) - on_disk}"


def test_helpers_are_not_scripts():
    for name in HELPERS:
        assert "__main__" not in (BENCHMARKS / name).read_text(), (
            f"benchmarks/{name} runs as a script: move it from HELPERS to FAST or SLOW and give "
            "it --smoke"
        )


@pytest.mark.parametrize("script", [
    *FAST, *(pytest.param(name, marks=pytest.mark.slow) for name in SLOW)
])
def test_smoke_run_exits_0_and_writes_no_docs(script, tmp_path):
    docs = DOCS.read_bytes() if DOCS.exists() else None
    env = {**os.environ, "RLRUN_CACHE": str(tmp_path / "models")}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--smoke"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"benchmarks/{script} --smoke exited {proc.returncode}\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    assert (DOCS.read_bytes() if DOCS.exists() else None) == docs, (
        f"benchmarks/{script} --smoke changed docs/benchmarks.md"
    )
