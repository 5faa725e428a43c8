"""What a learner checkpoint holds, how every rank writes and reads it, and which ones count.

A checkpoint is `run.output_dir/learner/step_NNNNNN/` (layout in docs/training.md): `model/`
(Hugging Face format with the tokenizer; not with LoRA), `dcp/` (trained weights, with LoRA the
adapters, and optimizer state, sharded by every rank with `torch.distributed.checkpoint` so a
run resumes on any number of ranks), `rng/rank_R.pt` (each rank's RNG states) and `state.json`
(`TrainState` and the learning-rate schedule).

`run.output_dir` may be a URI (`s3://...`): ranks then write into a local scratch directory and
upload it. A checkpoint counts only once the driver has listed it in `learner/checkpoints.json`
(`record`), after every rank finished writing, so an interrupted save is never resumed from.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

LEARNER_DIR = "learner"  # the sub-directory of run.output_dir that holds checkpoints
RECORD = "checkpoints.json"  # the list of complete checkpoints, oldest first


@dataclass
class TrainState:
    step: int = 0  # steps completed
    version: int = 0  # weight version of the saved model
    data_position: int = 0  # DataOrder position after the last trained batch
    bad_steps: int = 0  # optimizer updates skipped for non-finite gradients so far
    # Partial rollouts: data positions of the groups still in flight after the last trained
    # batch (drawn, not trained); a resumed run starts them over.
    in_flight: list[int] = field(default_factory=list)


def checkpoint_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def is_uri(path: str) -> bool:
    return "://" in path


def join(base: str, *parts: str) -> str:
    """`base/part/...` for a local path or a URI."""
    return "/".join([base.rstrip("/"), *parts]) if is_uri(base) else str(Path(base, *parts))


def absolute(path: str) -> str:
    """`path` as every process reaches it, whatever its working directory: a URI as it is, a
    local path made absolute."""
    return path if is_uri(path) else os.path.abspath(path)


def is_file(path: str) -> bool:
    """Whether a file is at `path` (a local path or a URI)."""
    import pyarrow.fs

    fs, root = _fs(path)
    return fs.get_file_info(root).type == pyarrow.fs.FileType.File


def _fs(path: str) -> tuple[Any, str]:
    import pyarrow.fs

    uri = path if is_uri(path) else str(Path(path).resolve())
    return pyarrow.fs.FileSystem.from_uri(uri)


@contextlib.contextmanager
def writable(path: str) -> Iterator[Path]:
    """A local directory to write checkpoint files into: `path` itself, or for a URI a scratch
    directory uploaded to it on exit."""
    if not is_uri(path):
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
        return
    import pyarrow.fs

    with tempfile.TemporaryDirectory(prefix="rlrun-ckpt-", ignore_cleanup_errors=True) as scratch:
        yield Path(scratch)
        fs, root = _fs(path)
        pyarrow.fs.copy_files(scratch, root, destination_filesystem=fs)


@contextlib.contextmanager
def readable(path: str) -> Iterator[Path]:
    """A local directory holding the checkpoint at `path` (downloaded first for a URI)."""
    if not is_uri(path):
        yield Path(path)
        return
    import pyarrow.fs

    with tempfile.TemporaryDirectory(prefix="rlrun-ckpt-", ignore_cleanup_errors=True) as scratch:
        fs, root = _fs(path)
        pyarrow.fs.copy_files(root, scratch, source_filesystem=fs)
        yield Path(scratch)


def _trained_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The model entries that train (all of them, or only LoRA adapters) and the optimizer."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    if len(trained) < len(list(model.parameters())):  # a frozen base: keep only the adapters
        model_state = {k: v for k, v in model_state.items() if k in trained}
    return {"model": model_state, "optimizer": optim_state}


def save_shards(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int
) -> None:
    """Every rank: its part of the trained weights (with LoRA: the adapters) and optimizer
    state, and its RNG states."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_trained_state(model, optimizer), checkpoint_id=str(path / "dcp"))
    (path / "rng").mkdir(parents=True, exist_ok=True)
    torch.save(_rng_state(), path / "rng" / f"rank_{rank}.pt")


def save_state(path: Path, state: TrainState, scheduler: Any) -> None:
    """Rank 0: the training position and the schedule."""
    record = {"state": asdict(state), "scheduler": scheduler.state_dict()}
    (path / "state.json").write_text(json.dumps(record, indent=2))


def export_hf(
    path: Path, model: torch.nn.Module, weights: dict[str, torch.Tensor], tokenizer: Any
) -> None:
    """Write `weights` (whole tensors under Hugging Face names, e.g. from a
    `rlrun.weights.source.WeightSource`) as a Hugging Face model directory with `model`'s config
    and the tokenizer: loadable by transformers and vLLM."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cpu = {name: t.to("cpu") for name, t in weights.items()}
    base.save_pretrained(path, state_dict=cpu, safe_serialization=True)
    tokenizer.save_pretrained(path)


def load_state(path: str | Path) -> TrainState:
    return TrainState(**json.loads((Path(path) / "state.json").read_text())["state"])


def load_shards(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
    rank: int,
) -> TrainState:
    """Every rank: restore model, optimizer, schedule and this rank's RNG from `path` (written
    by any number of ranks); returns the TrainState."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    saved = _trained_state(model, optimizer)
    dcp.load(saved, checkpoint_id=str(path / "dcp"))
    set_state_dict(model, optimizer, model_state_dict=saved["model"],
                   optim_state_dict=saved["optimizer"],
                   options=StateDictOptions(strict=False))  # LoRA: adapters only
    record = json.loads((path / "state.json").read_text())
    scheduler.load_state_dict(record["scheduler"])
    rng = path / "rng" / f"rank_{rank}.pt"
    # A rank that did not exist in the saved run starts from rank 0's streams.
    _set_rng_state(torch.load(rng if rng.is_file() else path / "rng" / "rank_0.pt",
                              weights_only=False))
    return TrainState(**record["state"])


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _read_record(output_dir: str) -> list[str]:
    import pyarrow.fs

    fs, root = _fs(join(output_dir, LEARNER_DIR, RECORD))
    if fs.get_file_info(root).type == pyarrow.fs.FileType.NotFound:
        return []
    with fs.open_input_stream(root) as f:
        return list(json.loads(f.read().decode())["checkpoints"])


def record(output_dir: str, step: int, keep: int) -> None:
    """List the checkpoint of `step` as complete, and delete all but the newest `keep`."""
    names = [n for n in _read_record(output_dir) if n != checkpoint_dir_name(step)]
    names.append(checkpoint_dir_name(step))
    dropped, names = names[:-keep], names[-keep:]
    text = json.dumps({"checkpoints": names}, indent=2)
    target = join(output_dir, LEARNER_DIR, RECORD)
    if is_uri(output_dir):
        fs, root = _fs(target)
        with fs.open_output_stream(root) as f:  # one PUT: readers see the old or the new list
            f.write(text.encode())
    else:
        scratch = f"{target}.tmp"
        Path(scratch).write_text(text)
        os.replace(scratch, target)
    for name in dropped:
        fs, root = _fs(join(output_dir, LEARNER_DIR, name))
        fs.delete_dir(root)


def has_checkpoints(output_dir: str) -> bool:
    """Whether a previous run left complete checkpoints in `output_dir` (local or URI)."""
    return bool(_read_record(output_dir))


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest complete checkpoint under `output_dir` (a local path or URI), or None.

    Recorded but broken (its state.json empty or cut short, as a full disk leaves it on a file
    system that reports the failed write late): the one recorded before it, with a warning.
    """
    for name in reversed(_read_record(output_dir)):
        path = join(output_dir, LEARNER_DIR, name)
        if not _state_broken(path):
            return path
        print(f"warning: checkpoint {path} has no readable state.json; using an older one",
              file=sys.stderr)
    return None


def _state_broken(path: str) -> bool:
    """Whether the checkpoint at `path` holds a state.json that does not parse into a
    TrainState (a directory holding only an exported model has none, and is not broken)."""
    import pyarrow.fs

    fs, root = _fs(join(path, "state.json"))
    if fs.get_file_info(root).type != pyarrow.fs.FileType.File:
        return False
    with fs.open_input_stream(root) as f:
        text = f.read().decode(errors="replace")
    try:
        TrainState(**json.loads(text)["state"])
    except (json.JSONDecodeError, KeyError, TypeError):
        return True
    return False
