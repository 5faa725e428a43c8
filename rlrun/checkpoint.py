"""What a learner checkpoint holds, and how it is written to and read from a directory.

A checkpoint directory (one per saved step, written by Ray Train under
`run.output_dir/learner/step_NNNNNN/`) holds:

- `model/`: the policy in Hugging Face format with its tokenizer (loadable by transformers and
  vLLM with `from_pretrained(".../model")`);
- `optimizer.pt`: optimizer and learning-rate schedule state;
- `rng.pt`: torch, numpy and Python RNG states of rank 0;
- `state.json`: `TrainState` (step, weight version, data position, skipped steps).

Ray Train copies the directory to storage and only then records it in its run snapshot, so an
interrupted save never becomes the checkpoint a resumed run starts from.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

LEARNER_DIR = "learner"  # Ray Train run name, i.e. the sub-directory of run.output_dir
SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's record of the saved checkpoints


@dataclass
class TrainState:
    step: int = 0  # steps completed
    version: int = 0  # weight version of the saved model
    data_position: int = 0  # DataOrder position after the last trained batch
    bad_steps: int = 0  # optimizer updates skipped for non-finite gradients so far


def checkpoint_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def save(
    path: str | Path,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
) -> None:
    path = Path(path)
    model.save_pretrained(path / "model", safe_serialization=True)
    tokenizer.save_pretrained(path / "model")
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
               path / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                "python": random.getstate()}, path / "rng.pt")
    (path / "state.json").write_text(json.dumps(asdict(state), indent=2))


def load_state(path: str | Path) -> TrainState:
    return TrainState(**json.loads((Path(path) / "state.json").read_text()))


def load_into(
    path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> TrainState:
    """Restore model weights, optimizer, schedule and RNG from `path`; return its TrainState."""
    from safetensors.torch import load_file

    path = Path(path)
    weights: dict[str, torch.Tensor] = {}
    for part in sorted((path / "model").glob("*.safetensors")):  # large models save shards
        weights.update(load_file(str(part)))
    # Tied embeddings are saved once; strict=False lets the tied head keep pointing at them.
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any(not k.endswith("lm_head.weight") for k in missing):
        raise ValueError(
            f"checkpoint {path} does not match the model in model.path "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    opt = torch.load(path / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    return load_state(path)


def has_checkpoints(output_dir: str) -> bool:
    """Whether a previous run left Ray Train checkpoints in `output_dir` (local or s3://)."""
    import pyarrow.fs

    fs, root = pyarrow.fs.FileSystem.from_uri(_uri(output_dir))
    info = fs.get_file_info(f"{root.rstrip('/')}/{LEARNER_DIR}/{SNAPSHOT}")
    return info.type != pyarrow.fs.FileType.NotFound


def latest_checkpoint(output_dir: str) -> Path | None:
    """The newest complete local checkpoint directory under `output_dir`, or None."""
    root = Path(output_dir) / LEARNER_DIR
    done = [p for p in root.glob("step_*") if (p / "state.json").is_file()]
    return max(done, key=lambda p: load_state(p).step, default=None)


def _uri(output_dir: str) -> str:
    return output_dir if "://" in output_dir else str(Path(output_dir).resolve())
