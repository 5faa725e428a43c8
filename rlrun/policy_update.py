"""One GRPO learner step on one rank, in plain torch: log-probs, loss, optimizer updates.

`train_on_shard` is what a Ray Train worker runs each step; it needs no Ray, so a test can
drive it directly. Log-probs are `log_softmax(logits / temperature)` over the full vocabulary
at the sampled tokens, exactly as the rollout engines record them, so on-policy importance
weights start at 1 up to numerics.

Notation used for tensor shapes: N sequences, T prompt+response positions, L response positions,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rlrun.algo import ddp_loss, grpo_loss, merge_metrics
from rlrun.batching import Shard, TrainSample, Update
from rlrun.config import Config


@dataclass
class TensorBatch:
    input_ids: Tensor  # [N, T], prompt then response, right-padded
    attention_mask: Tensor  # [N, T]
    response_index: Tensor  # [N, L], position in input_ids[:, 1:] predicting response token j
    mask: Tensor  # [N, L], 1 on real response tokens
    behaviour_logprobs: Tensor  # [N, L]
    advantages: Tensor  # [N]


def collate(
    samples: list[TrainSample], pad_id: int, device: str | torch.device = "cpu"
) -> TensorBatch:
    n = len(samples)
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp_len = max(max(len(s.response_ids) for s in samples), 1)
    input_ids = torch.full((n, seq_len), pad_id, dtype=torch.long)  # [N, T]
    attention = torch.zeros((n, seq_len), dtype=torch.long)  # [N, T]
    index = torch.zeros((n, resp_len), dtype=torch.long)  # [N, L]
    mask = torch.zeros((n, resp_len))  # [N, L]
    behaviour = torch.zeros((n, resp_len))  # [N, L]
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids)
        attention[i, : p + r] = 1
        # Logits at position t predict token t+1: response token j sits at p+j, predicted at p+j-1.
        index[i, :r] = torch.arange(p - 1, p - 1 + r)
        mask[i, :r] = 1.0
        behaviour[i, :r] = torch.tensor(s.behaviour_logprobs[:r])
    advantages = torch.tensor([s.advantage for s in samples])  # [N]
    tensors = (input_ids, attention, index, mask, behaviour, advantages)
    return TensorBatch(*(t.to(device) for t in tensors))


def response_logprobs(
    model: torch.nn.Module, batch: TensorBatch, temperature: float, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each response token, [N, L], and optionally the per-token entropy, [N, L]."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logits = logits[:, :-1].float() / temperature  # [N, T-1, V]
    index = batch.response_index.unsqueeze(-1).expand(-1, -1, logits.shape[-1])  # [N, L, V]
    picked = torch.gather(logits, 1, index)  # [N, L, V]
    logp_all = torch.log_softmax(picked, dim=-1)  # [N, L, V]
    targets = torch.gather(batch.input_ids[:, 1:], 1, batch.response_index)  # [N, L]
    logp = torch.gather(logp_all, 2, targets.unsqueeze(-1)).squeeze(-1)  # [N, L]
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # [N, L]
    return logp * batch.mask, entropy


def _micro_batches(update: Update, size: int) -> list[list[TrainSample]]:
    return [update.samples[i : i + size] for i in range(0, len(update.samples), size)]


def _temperature(cfg: Config) -> float:
    # Greedy sampling (temperature 0) has no distribution to divide by; use the plain model's.
    t = cfg.rollout.sampling.temperature
    return t if t > 0 else 1.0


@torch.no_grad()
def _fixed_logprobs(
    model: torch.nn.Module, shard: Shard, cfg: Config, pad_id: int, device: torch.device
) -> list[list[Tensor]]:
    """Log-probs of every micro-batch of every update under `model` as it is now."""
    out = []
    for update in shard.updates:
        out.append([
            response_logprobs(model, collate(mb, pad_id, device), _temperature(cfg))[0]
            for mb in _micro_batches(update, cfg.learner.micro_batch_size)
        ])
    return out


def train_on_shard(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    shard: Shard,
    cfg: Config,
    pad_id: int,
    world_size: int = 1,
    ref_model: torch.nn.Module | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Run `algo.epochs * algo.mini_batches` optimizer updates of this rank's shard.

    Returns this rank's metric shares (sum them over ranks with `rlrun.algo.merge_metrics`),
    averaged over updates, plus `optim/grad_norm`, `optim/lr` and `train/bad_steps` (updates
    skipped because the gradient was NaN or inf; grad norms are the same on every rank after
    DDP's all-reduce, so every rank skips the same updates).
    """
    algo = cfg.algo
    temperature = _temperature(cfg)
    model.train()
    # pi_old is the policy before this step's first update (every epoch uses it for the ratio).
    # With a single update it is the policy being differentiated, so the forward pass of the
    # update itself provides it (detached) and the extra no-grad pass is skipped.
    single = len(shard.updates) == 1
    old = None if single else _fixed_logprobs(model, shard, cfg, pad_id, device)
    ref = None if ref_model is None else _fixed_logprobs(ref_model, shard, cfg, pad_id, device)
    params = [p for p in model.parameters() if p.requires_grad]
    per_update, grad_norms, bad = [], [], 0
    for u, update in enumerate(shard.updates):
        optimizer.zero_grad(set_to_none=True)
        parts = []
        for m, samples in enumerate(_micro_batches(update, cfg.learner.micro_batch_size)):
            batch = collate(samples, pad_id, device)
            logp, entropy = response_logprobs(
                model, batch, temperature, with_entropy=algo.entropy_coef > 0
            )
            old_logp = logp.detach() if old is None else old[u][m]
            loss, metrics = grpo_loss(
                logp, old_logp, batch.advantages, batch.mask, algo, update.norm,
                behaviour_logprobs=batch.behaviour_logprobs,
                ref_logprobs=ref[u][m] if ref is not None else None,
                entropy=entropy,
            )
            ddp_loss(loss, world_size).backward()
            parts.append(metrics)
        max_norm = cfg.learner.grad_clip if cfg.learner.grad_clip > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if math.isfinite(grad_norm):
            optimizer.step()
            grad_norms.append(grad_norm)
        else:
            bad += 1
        # The schedule counts updates, skipped or not, so every rank stays on the same lr.
        scheduler.step()
        per_update.append(merge_metrics(parts))
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    n = max(len(per_update), 1)
    metrics = {}
    for part in per_update:
        for key, value in part.items():
            metrics[key] = max(metrics.get(key, value), value) if key.endswith("_max") else (
                metrics.get(key, 0.0) + value / n
            )
    metrics["optim/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else math.nan
    metrics["optim/lr"] = float(scheduler.get_last_lr()[0])
    metrics["train/bad_steps"] = float(bad)
    return metrics


def warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_steps` optimizer updates, then constant."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    )
