"""Every subcommand on a missing file, a malformed file and an unknown key: one line on stderr
naming what to change, exit code 2, no traceback, before anything expensive starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrun.cli import main
from rlrun.commands.train import train
from rlrun.config import load_config

MISSING = "/nonexistent/rlrun/x"


@pytest.fixture
def bad(tmp_path: Path) -> dict[str, str]:
    yaml = tmp_path / "broken.yaml"
    yaml.write_text("algo:\n  group_size: [1\n")
    jsonl = tmp_path / "broken.jsonl"
    jsonl.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?"\n')
    (tmp_path / "file").write_text("a file, not a directory\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "a\n{"step": 2}\n')
    return {"<yaml>": str(yaml), "<jsonl>": str(jsonl), "<run>": str(run),
            "<under a file>": str(tmp_path / "file" / "out.jsonl"),
            "<out>": str(tmp_path / "out.jsonl"),
            "run.output_dir=<dir>": f"run.output_dir={tmp_path / 'run-out'}",
            "run.output_dir=<under a file>": f"run.output_dir={tmp_path / 'file' / 'run'}"}


CASES = {
    "train missing": ["train", f"{MISSING}.yaml"],
    "train malformed": ["train", "<yaml>"],
    "train unknown key": ["train", "algo.grup_size=3"],
    "train unwritable output": ["train", "conf/demo.yaml", "run.output_dir=<under a file>"],
    "train plug-in that does not import": ["train", "conf/demo.yaml", "run.output_dir=<dir>",
                                           "reward.fns=[{fn: 'no_such_module:reward'}]"],
    "train warm-start mix the data lacks": ["train", "conf/demo.yaml", "run.output_dir=<dir>",
                                            "data.train=toy:arithmetic"],
    "sft missing": ["sft", f"{MISSING}.yaml"],
    "sft malformed": ["sft", "<yaml>"],
    "sft unknown key": ["sft", "sft.stepz=3"],
    "eval missing": ["eval", f"{MISSING}.yaml", "--model", "tiny"],
    "eval malformed": ["eval", "<yaml>", "--model", "tiny"],
    "eval unknown key": ["eval", "conf/demo.yaml", "--model", "tiny", "trainer.eval_k=[1]",
                         "trainer.evl_samples=2"],
    "eval missing model": ["eval", "conf/demo.yaml", "--model", MISSING],
    "check-rewards missing": ["check-rewards", f"{MISSING}.yaml"],
    "check-rewards malformed": ["check-rewards", "<yaml>"],
    "check-rewards unknown key": ["check-rewards", "conf/demo.yaml", "reward.fns=[{fn: builtin, "
                                  "wieght: 1}]"],
    "check-rewards missing data": ["check-rewards", "--data", f"{MISSING}.jsonl"],
    "config missing": ["config", "show", f"{MISSING}.yaml"],
    "config malformed": ["config", "show", "<yaml>"],
    "config unknown key": ["config", "show", "algo.grup_size=3"],
    "plan missing": ["plan", f"{MISSING}.yaml"],
    "plan malformed": ["plan", "<yaml>"],
    "plan unknown key": ["plan", "learner.num_wrkers=2"],
    "data missing": ["data", "inspect", f"{MISSING}.jsonl"],
    "data malformed": ["data", "convert", "<jsonl>", "--on-bad-row", "fail", "--out", "<out>"],
    "data convert unwritable": ["data", "convert", "toy:arithmetic", "--out", "<under a file>"],
    "judge missing": ["judge", f"{MISSING}.jsonl"],
    "judge unwritable out": ["judge", "<jsonl>", "--out", "<under a file>"],
    "report missing": ["report", MISSING],
    "report malformed": ["report", "<run>"],
}


@pytest.mark.parametrize("argv", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_and_exit_code_2(argv: list[str], bad: dict[str, str], capfd):
    # capfd: `rlrun train` reports from the driver process it starts (rlrun.interrupts).
    code = main([bad.get(a, a) for a in argv])
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith(f"rlrun {argv[0]}")


def test_a_fault_during_training_is_one_line_with_the_traceback_in_train_log(
    tmp_path: Path, monkeypatch, capsys
):
    import rlrun.training

    def fails(cfg):
        Path(cfg.run.output_dir).mkdir(parents=True)
        raise RuntimeError("learner rank 0 died during train: OOM\nremote traceback ...")

    monkeypatch.setattr(rlrun.training, "run_training", fails)
    # The driver's side of `rlrun train` (in this process, where the stand-in is).
    code = train(load_config("conf/demo.yaml", [f"run.output_dir={tmp_path / 'run'}"]))
    err = capsys.readouterr().err.strip().splitlines()
    log = tmp_path / "run" / "train.log"
    assert code == 1
    assert err == [f"rlrun train: RuntimeError: learner rank 0 died during train: OOM "
                   f"(traceback in {log})"]
    assert "Traceback" in log.read_text() and "remote traceback" in log.read_text()
