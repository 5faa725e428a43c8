"""The rollout-engine interface: sampling parameters and the Engine protocol.

An engine returns `rlrun.records.Sample`s, the record the learner trains on. The contract every
engine keeps (docs/engines.md, "What the numbers mean"):

- `behaviour_logprobs[i]` is the log-prob of `response_ids[i]` under `log_softmax(logits /
  temperature)` over the full vocabulary, without top-k/top-p renormalisation; greedy decoding
  reports temperature-1 log-probs. The learner recomputes exactly this (as TRL and veRL do).
- `response_ids` holds what the model emitted, the EOS or the token that completed a stop string
  included (the model must learn to stop); `response_text` is decoded without special tokens and
  cut just before the stop string.
- `finish_reason` is "stop" (EOS or a stop string), "length" (`max_new_tokens`, which bounds the
  whole response across rounds) or, with `SamplingParams.round_tokens` (partial rollouts),
  "paused": `extend` continues it later, maybe under newer weights, each new token logged in
  `token_versions` with the version that sampled it.
- Prompts are tokenized with the tokenizer's own special tokens (a BOS where it adds one), minus
  a trailing EOS that some tokenizers append: the model continues the prompt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import Tensor

from rlrun.config import SamplingConfig
from rlrun.records import Sample


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # nucleus mass kept (1: off)
    top_k: int = 0  # most likely tokens kept (0: off)
    max_new_tokens: int = 64
    stop: list[str] = field(default_factory=list)  # completion ends at the first of these
    include_stop_str: bool = False  # keep the stop string that ended a completion in its text
    n: int = 1  # completions per prompt
    seed: int | None = None  # same seed, same prompts, same weights -> same completions
    # Partial rollouts: at most this many new tokens per sample in one call; a sample that
    # reaches it unfinished ends "paused". None: generate until stop or max_new_tokens.
    round_tokens: int | None = None

    def __post_init__(self) -> None:
        rules = [
            ("temperature", self.temperature >= 0, ">= 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("top_k", self.top_k >= 0, ">= 0 (0: off)"),
            ("max_new_tokens", self.max_new_tokens >= 1, ">= 1"),
            ("n", self.n >= 1, ">= 1"),
            ("round_tokens", self.round_tokens is None or self.round_tokens >= 1, ">= 1"),
        ]
        for name, ok, rule in rules:
            if not ok:
                raise ValueError(f"sampling {name}={getattr(self, name)} must be {rule}")
        if any(not s for s in self.stop):
            raise ValueError(f"sampling stop={self.stop!r}: stop strings must be non-empty")

    @classmethod
    def from_config(
        cls, cfg: SamplingConfig, n: int = 1, seed: int | None = None
    ) -> SamplingParams:
        return cls(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_new_tokens=cfg.max_new_tokens,
            stop=list(cfg.stop),
            include_stop_str=cfg.include_stop_str,
            n=n,
            seed=seed,
        )


class Engine(Protocol):
    version: int

    def generate(
        self, prompts: list[str], sampling: SamplingParams
    ) -> list[list[Sample]]:
        """`sampling.n` completions for each prompt, in prompt order."""
        ...

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        """Continue each paused sample under the current weights (`sampling.n` is ignored: one
        continuation per sample), in order."""
        ...

    def load_weights(self, version: int, weights: dict[str, Tensor]) -> None:
        """Replace every weight in place (names as in the Hugging Face state dict)."""
        ...

    def state_dict_keys(self) -> list[str]:
        """The names `load_weights` expects."""
        ...


class WeightsMismatchError(ValueError):
    """A state dict whose names or shapes do not match the engine's model."""


def check_weight_names(
    expected: dict[str, tuple[int, ...]], weights: dict[str, Tensor], version: int
) -> None:
    """Raise unless `weights` has exactly the expected names and shapes."""
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = sorted(
        f"{k} {tuple(weights[k].shape)} (model has {expected[k]})"
        for k in set(expected) & set(weights)
        if tuple(weights[k].shape) != expected[k]
    )

    def few(names: list[str]) -> str:
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    parts = [f"{what} {len(names)}: {few(names)}" for what, names in
             [("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)] if names]
    if not parts:
        return
    raise WeightsMismatchError(
        f"weights for version {version} do not match the rollout model ("
        + "; ".join(parts)
        + "): send the full Hugging Face state dict of the same architecture, without "
        "DDP/FSDP prefixes"
    )


def new_tokens(sampling: SamplingParams, done: int) -> int:
    """How many tokens a call may add to a response that has `done` tokens."""
    left = sampling.max_new_tokens - done
    return left if sampling.round_tokens is None else min(left, sampling.round_tokens)


def finish(sampling: SamplingParams, total: int) -> str:
    """The finish reason of a response of `total` tokens that ended without a stop."""
    return "length" if total >= sampling.max_new_tokens else "paused"


def extended(sample: Sample, tokens: list[int], logprobs: list[float], text: str,
             reason: str, version: int) -> Sample:
    """`sample` continued by `tokens` sampled under weight `version`."""
    versions = sample.versions() + [version] * len(tokens)
    return dataclasses.replace(
        sample,
        response_ids=sample.response_ids + tokens,
        behaviour_logprobs=sample.behaviour_logprobs + logprobs,
        token_versions=sample.compact(versions),
        response_text=text,
        finish_reason=reason,
    )


def first_stop(text: str, stops: list[str], include: bool = False) -> int | None:
    """Offset at which to cut `text`: the stop string that ends first wins, ties go to the
    earlier one in `stops` (vLLM's rule), or None when no stop string occurs. The cut is before
    the stop string, or after it when `include`."""
    best: tuple[int, int] | None = None  # (end, start)
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at + len(stop) < best[0]):
            best = (at + len(stop), at)
    if best is None:
        return None
    return best[0] if include else best[1]


def encode_prompts(tokenizer: Any, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt, with the tokenizer's BOS but without a trailing EOS."""
    with_special = tokenizer(prompts, add_special_tokens=True)["input_ids"]
    plain = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    out = []
    for ids, bare in zip(with_special, plain, strict=True):
        if eos is not None and len(ids) > len(bare) and ids and ids[-1] == eos:
            ids = ids[:-1]
        out.append(list(ids))
    return out
