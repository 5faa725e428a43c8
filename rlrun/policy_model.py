"""The learner's policy as it trains: how it is loaded, adapted, wrapped and sharded.

`build_policy(cfg, model_path, device, world)` runs on every learner rank (after the process
group exists) and returns a `Policy`:

1. load the model with the attention kernel `learner.attention`: full fine-tuning in
   `learner.master_dtype` (fp32 by default: AdamW steps at RL learning rates round away in
   bf16 weights), LoRA in `model.dtype` (the base is frozen, so bf16 costs it nothing);
2. LoRA (`learner.lora.rank > 0`): PEFT adapters on `learner.lora.target_modules`, kept in
   fp32; only they train;
3. gradient checkpointing (`learner.gradient_checkpointing`);
4. data parallelism: with `learner.strategy=ddp` a DDP wrapper when there is more than one rank
   (a full replica each); with `fsdp2`, `fully_shard` on every decoder layer and then the root,
   with `MixedPrecisionPolicy(param_dtype=model.dtype, reduce_dtype=float32)` and, with
   `learner.cpu_offload`, the shards and their optimizer state kept in host memory;
5. the reference for `algo.kl_coef > 0`: the base with the adapters switched off under LoRA (no
   second copy), else a frozen copy sharded like the policy.

The caller builds the optimizer afterwards, from `Policy.trainable()`, so its state lands
where the (sharded, moved) parameters live, also when it is restored from a checkpoint.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from rlrun.config import Config
from rlrun.models import DTYPES, load_causal_lm


@dataclass
class Policy:
    model: torch.nn.Module  # the (possibly PEFT-wrapped, possibly sharded) model
    train_module: torch.nn.Module  # what forward and backward run on: DDP, or `model`
    ref: torch.nn.Module | None  # frozen reference for the KL term
    compute_dtype: torch.dtype  # dtype the forward runs in
    master_dtype: torch.dtype  # dtype of the trained weights and optimizer state
    lora: bool

    def trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Forward passes in `compute_dtype` over higher-precision weights. FSDP2 casts the
        parameters itself, so only an unsharded policy needs torch.autocast."""
        sharded = self.train_module is self.model and _is_sharded(self.model)
        if self.compute_dtype == self.master_dtype or sharded:
            return contextlib.nullcontext()
        device = next(self.model.parameters()).device.type
        return torch.autocast(device, dtype=self.compute_dtype)


class AdaptersOff(torch.nn.Module):
    """The PEFT model with its adapters disabled: the base model, for the KL reference."""

    def __init__(self, peft_model: torch.nn.Module) -> None:
        super().__init__()
        self.peft_model = peft_model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self.peft_model.disable_adapter():
            return self.peft_model(*args, **kwargs)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.peft_model.get_output_embeddings()


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks (the `layers` ModuleList of a decoder-only LM), the unit FSDP2
    shards and gathers one at a time."""
    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, torch.nn.ModuleList):
            return list(module)
    raise ValueError(
        f"{type(model).__name__} has no `layers` ModuleList of decoder blocks: "
        "learner.strategy=fsdp2 supports decoder-only Hugging Face models"
    )


def _is_sharded(model: torch.nn.Module) -> bool:
    return any(hasattr(p, "device_mesh") for p in model.parameters())


def shard(model: torch.nn.Module, cfg: Config, world: int, device: torch.device) -> None:
    """FSDP2 in place: each decoder block, then the root (which holds embeddings and head)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mesh = init_device_mesh(device.type, (world,))
    options = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=DTYPES[cfg.model.dtype],
                                          reduce_dtype=torch.float32),
        "offload_policy": CPUOffloadPolicy() if cfg.learner.cpu_offload else OffloadPolicy(),
    }
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)


def _load(cfg: Config, model_path: str, dtype: str) -> torch.nn.Module:
    return load_causal_lm(model_path, dtype, attention=cfg.learner.attention)


def _add_adapters(model: torch.nn.Module, cfg: Config) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = cfg.learner.lora
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    # autocast_adapter_dtype keeps the adapters in fp32 over a bf16 base.
    return get_peft_model(model, config, autocast_adapter_dtype=True)


def build_policy(cfg: Config, model_path: str, device: torch.device, world: int) -> Policy:
    """The policy (and reference) for this rank; see the module docstring."""
    learner = cfg.learner
    lora = learner.lora.rank > 0
    model = _load(cfg, model_path, cfg.model.dtype if lora else learner.master_dtype)
    if lora:
        model = _add_adapters(model, cfg)
    if learner.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()  # a frozen embedding would cut the graph
    ref = None
    if cfg.algo.kl_coef > 0 and lora:
        ref = AdaptersOff(model)
    elif cfg.algo.kl_coef > 0:
        ref = _load(cfg, model_path, cfg.model.dtype).requires_grad_(False)
    sharded = learner.strategy == "fsdp2"
    if sharded:
        shard(model, cfg, world, device)
        if ref is not None and not lora:
            shard(ref, cfg, world, device)
    if not (sharded and learner.cpu_offload):
        model.to(device)
        if ref is not None and not lora:
            ref.to(device)
    train_module = model
    if not sharded and world > 1:
        train_module = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return Policy(model, train_module, ref.eval() if ref is not None else None,
                  DTYPES[cfg.model.dtype], DTYPES[learner.master_dtype], lora)
