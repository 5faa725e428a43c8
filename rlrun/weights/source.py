"""Where weight syncs read the learner's weights: one full parameter at a time.

`WeightSource(model, dtype)` walks the policy's state dict in a fixed order and yields each
tensor whole, under its Hugging Face name and cast to the rollout engines' dtype:

- under FSDP2 a parameter is a sharded DTensor and making it whole (`full_tensor()`) is an
  all-gather that every learner rank must enter, so every rank iterates the source in step,
  and the sender on rank 0 never holds more than one parameter plus the bucket it fills;
- with LoRA (a PEFT model) the engines get merged weights, W + scale * B @ A, under the base
  model's names; the adapters themselves never travel;
- names lose the prefixes that DDP, FSDP2 and torch.compile add, so they match what the engines
  load.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from rlrun.weights.buckets import ParamMeta

_WRAPPER_PREFIXES = (
    "module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.",
)
_PEFT_PREFIX = "base_model.model."  # what PEFT puts before the base model's names


def plain_name(name: str) -> str:
    """`name` without the prefixes wrappers add, anywhere along the path."""
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def full(tensor: Tensor) -> Tensor:
    """The whole tensor: a DTensor's `full_tensor()` (a collective), anything else as is."""
    materialize = getattr(tensor, "full_tensor", None)
    return materialize() if materialize is not None else tensor


class WeightSource:
    """The policy's weights as the engines load them; see the module docstring."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype
        self.lora = hasattr(model, "peft_config")

    def _entries(self) -> Iterator[tuple[str, str, Tensor]]:
        """(engine name, state-dict key, tensor not yet made whole) of what travels."""
        for key, tensor in self.model.state_dict().items():
            name = plain_name(key)
            if self.lora:
                if ".lora_" in name:
                    continue
                name = name.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")
            yield name, key, tensor

    def metadata(self) -> list[ParamMeta]:
        """Name, dtype and shape of every tensor `__iter__` yields, in the same order; no
        collective, so any rank can ask."""
        dtype = str(self.dtype).removeprefix("torch.")
        return [ParamMeta(name, dtype, tuple(t.shape)) for name, _, t in self._entries()]

    def __iter__(self) -> Iterator[tuple[str, Tensor]]:
        state = self.model.state_dict() if self.lora else {}
        scales = self._lora_scales() if self.lora else {}
        for name, key, tensor in self._entries():
            value = full(tensor.detach())
            module = key.rsplit(".base_layer.", 1)[0]
            if key.endswith(".base_layer.weight") and module in scales:
                a = full(state[f"{module}.lora_A.default.weight"].detach())  # [r, in]
                b = full(state[f"{module}.lora_B.default.weight"].detach())  # [out, r]
                delta = scales[module] * (b.float() @ a.float())  # [out, in]
                value = (value.float() + delta).to(value.dtype)
            yield name, value.to(self.dtype)

    def _lora_scales(self) -> dict[str, float]:
        """alpha / rank of every adapted module, by its state-dict key prefix."""
        return {
            plain_name(name): module.scaling["default"]
            for name, module in self.model.named_modules()
            if hasattr(module, "lora_A") and "default" in getattr(module, "scaling", {})
        }
