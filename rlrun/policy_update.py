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
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from rlrun.algo import ddp_loss, grpo_loss, merge_metrics
from rlrun.batching import Shard, TrainSample, Update
from rlrun.config import Config


@dataclass
class TensorBatch:
    """Model inputs for a micro-batch, and where each sample's response sits in them.

    Plain: one row per sample, right-padded. Shared-prompt: one row per distinct prompt holding
    the prompt once and then each of its responses, with a block attention mask (every response
    sees the prompt and itself, never another response) and positions restarting after the
    prompt, so each response gets the same logits as in a row of its own.
    """

    input_ids: Tensor  # [R, T] model rows
    attention_mask: Tensor  # [R, T] (plain) or additive [R, 1, T, T] (shared-prompt)
    position_ids: Tensor | None  # [R, T] (shared-prompt; plain rows count from 0)
    rows: Tensor  # [N], the row holding sample i
    response_index: Tensor  # [N, L], position in its row whose logits predict response token j
    response_ids: Tensor  # [N, L], the sampled tokens, pad past each response
    mask: Tensor  # [N, L], 1 on real response tokens
    behaviour_logprobs: Tensor  # [N, L]
    advantages: Tensor  # [N]


def collate(
    samples: list[TrainSample],
    pad_id: int,
    device: str | torch.device = "cpu",
    share_prompts: bool = False,
    dtype: torch.dtype = torch.float32,
) -> TensorBatch:
    """Pad `samples` into model rows; `share_prompts` packs responses to one prompt into a row.

    `dtype` is the model's (the additive attention mask must match it).
    """
    n = len(samples)
    resp_len = max(max(len(s.response_ids) for s in samples), 1)
    index = torch.zeros((n, resp_len), dtype=torch.long)  # [N, L]
    response_ids = torch.full((n, resp_len), pad_id, dtype=torch.long)  # [N, L]
    mask = torch.zeros((n, resp_len))  # [N, L]
    behaviour = torch.zeros((n, resp_len))  # [N, L]
    for i, s in enumerate(samples):
        r = len(s.response_ids)
        response_ids[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        mask[i, :r] = 1.0
        behaviour[i, :r] = torch.tensor(s.behaviour_logprobs[:r])
    if share_prompts:
        input_ids, attention, positions, rows = _shared_prompt_rows(samples, pad_id, index, dtype)
    else:
        input_ids, attention, rows = _plain_rows(samples, pad_id, index)
        positions = None
    advantages = torch.tensor([s.advantage for s in samples])  # [N]
    return TensorBatch(
        input_ids.to(device),
        attention.to(device),
        None if positions is None else positions.to(device),
        *(t.to(device) for t in (rows, index, response_ids, mask, behaviour, advantages)),
    )


def _plain_rows(
    samples: list[TrainSample], pad_id: int, index: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    input_ids = torch.full((len(samples), seq_len), pad_id, dtype=torch.long)  # [N, T]
    attention = torch.zeros((len(samples), seq_len), dtype=torch.long)  # [N, T]
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids)
        attention[i, : p + r] = 1
        # Logits at position t predict token t+1: response token j sits at p+j, predicted at p+j-1.
        index[i, :r] = torch.arange(p - 1, p - 1 + r)
    return input_ids, attention, torch.arange(len(samples))


def _shared_prompt_rows(
    samples: list[TrainSample], pad_id: int, index: Tensor, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # A row is capped at twice the longest plain sequence, so the dense [T, T] mask stays within
    # a small factor of the plain batch's attention however many responses a prompt has.
    cap = 2 * max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        by_prompt.setdefault(tuple(s.prompt_ids), []).append(i)
    layout: list[tuple[tuple[int, ...], list[int]]] = []
    for prompt, members in by_prompt.items():
        row: list[int] = []
        length = len(prompt)
        for i in members:
            r = len(samples[i].response_ids)
            if row and length + r > cap:
                layout.append((prompt, row))
                row, length = [], len(prompt)
            row.append(i)
            length += r
        layout.append((prompt, row))
    seq_len = max(len(p) + sum(len(samples[i].response_ids) for i in m) for p, m in layout)
    input_ids = torch.full((len(layout), seq_len), pad_id, dtype=torch.long)  # [R, T]
    positions = torch.zeros((len(layout), seq_len), dtype=torch.long)  # [R, T]
    # Padding positions attend to themselves only, so no softmax row is empty.
    allowed = torch.eye(seq_len, dtype=torch.bool).repeat(len(layout), 1, 1)  # [R, T, T]
    rows = torch.zeros(len(samples), dtype=torch.long)  # [N]
    for k, (prompt, members) in enumerate(layout):
        p = len(prompt)
        input_ids[k, :p] = torch.tensor(prompt)
        positions[k, :p] = torch.arange(p)
        allowed[k, :p, :p] = torch.ones(p, p, dtype=torch.bool).tril()
        start = p
        for i in members:
            response = samples[i].response_ids
            r = len(response)
            rows[i] = k
            if not r:
                continue
            end = start + r
            input_ids[k, start:end] = torch.tensor(response)
            positions[k, start:end] = torch.arange(p, p + r)
            allowed[k, start:end, :p] = True
            allowed[k, start:end, start:end] = torch.ones(r, r, dtype=torch.bool).tril()
            # Token 0 is predicted by the prompt's last position, token j by response token j-1.
            index[i, 0] = p - 1
            index[i, 1:r] = torch.arange(start, end - 1)
            start = end
    blocked = torch.finfo(dtype).min
    attention = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, blocked)
    return input_ids, attention.unsqueeze(1), positions, rows


def response_logprobs(
    model: torch.nn.Module, batch: TensorBatch, temperature: float, with_entropy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each response token, [N, L], and optionally the per-token entropy, [N, L]."""
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
    ).logits  # [R, T, V]
    picked = logits[batch.rows.unsqueeze(-1), batch.response_index].float()  # [N, L, V]
    logp_all = torch.log_softmax(picked / temperature, dim=-1)  # [N, L, V]
    logp = torch.gather(logp_all, 2, batch.response_ids.unsqueeze(-1)).squeeze(-1)  # [N, L]
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


# Attention kernels that take an arbitrary additive [R, 1, T, T] mask.
_BLOCK_MASK_ATTENTION = ("sdpa", "eager")


def shares_prompts(model: torch.nn.Module, cfg: Config) -> bool:
    """Whether micro-batches for `model` go in shared-prompt rows (see `TensorBatch`)."""
    if not cfg.learner.shared_prompt_forward:
        return False
    config = getattr(getattr(model, "module", model), "config", None)
    kernel = getattr(config, "_attn_implementation", None)
    if kernel in _BLOCK_MASK_ATTENTION:
        return True
    warnings.warn(
        f"learner.shared_prompt_forward needs sdpa or eager attention, and the policy uses "
        f"{kernel!r}: training on one row per sample instead (set "
        "learner.shared_prompt_forward=false to silence this)",
        stacklevel=2,
    )
    return False


def _batch(model: torch.nn.Module, samples: list[TrainSample], share: bool, pad_id: int,
           device: str | torch.device) -> TensorBatch:
    dtype = next(model.parameters()).dtype
    return collate(samples, pad_id, device, share_prompts=share, dtype=dtype)


@torch.no_grad()
def _fixed_logprobs(
    model: torch.nn.Module, shard: Shard, cfg: Config, pad_id: int, device: str | torch.device
) -> list[list[Tensor]]:
    """Log-probs of every micro-batch of every update under `model` as it is now, [N, L] each.

    Every epoch revisits the same samples, so each distinct sample goes through the model once
    (in the first epoch's order) and later micro-batches reuse its row.
    """
    share = shares_prompts(model, cfg)
    size = cfg.learner.micro_batch_size
    distinct = list({id(s): s for update in shard.updates for s in update.samples}.values())
    rows: dict[int, Tensor] = {}
    for i in range(0, len(distinct), size):
        samples = distinct[i : i + size]
        batch = _batch(model, samples, share, pad_id, device)
        logp = response_logprobs(model, batch, _temperature(cfg))[0]  # [N, L]
        for s, row in zip(samples, logp, strict=True):
            rows[id(s)] = row[: len(s.response_ids)]
    return [[_stack_rows(rows, mb, device) for mb in _micro_batches(update, size)]
            for update in shard.updates]


def _stack_rows(
    rows: dict[int, Tensor], samples: list[TrainSample], device: str | torch.device
) -> Tensor:
    """The [N, L] tensor `collate` would lay out for `samples`, zero past each response."""
    out = torch.zeros((len(samples), max(max(len(s.response_ids) for s in samples), 1)),
                      device=device)
    for i, s in enumerate(samples):
        out[i, : len(s.response_ids)] = rows[id(s)]
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
    share = shares_prompts(model, cfg)
    per_update, grad_norms, bad = [], [], 0
    for u, update in enumerate(shard.updates):
        optimizer.zero_grad(set_to_none=True)
        parts = []
        for m, samples in enumerate(_micro_batches(update, cfg.learner.micro_batch_size)):
            batch = _batch(model, samples, share, pad_id, device)
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
