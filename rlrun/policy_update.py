"""One GRPO learner step on one rank, in plain torch: log-probs, loss, optimizer updates.

`train_on_shard` is what a learner rank (`actors.learner.LearnerWorker`, a plain Ray actor)
runs each step; it needs no Ray, so a test can drive it directly. Log-probs are
`log_softmax(logits / temperature)` over the full vocabulary at the sampled tokens, exactly as
the rollout engines record them, so on-policy importance weights start at 1 up to numerics.

Notation used for tensor shapes: N sequences, T prompt+response positions, L response positions,
V vocabulary.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
import torch.utils.checkpoint
from torch import Tensor

from rlrun.algo import (
    LossNorm,
    ddp_loss,
    entropy_threshold,
    gather_entropies,
    grpo_loss,
    high_entropy_mask,
    merge_metrics,
)
from rlrun.batching import Shard, TrainSample
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
    # [N, L], 1 on the response tokens the loss counts (`TrainSample.loss_mask`): not padding,
    # not a `masked` sample's, not an environment observation (`TrainSample.env_mask`)
    mask: Tensor
    behaviour_logprobs: Tensor  # [N, L]
    advantages: Tensor  # [N]
    # [N, L] with step advantages (a sample without its own has its advantage on every token);
    # None when no sample has them
    token_advantages: Tensor | None = None


def collate(
    samples: list[TrainSample],
    pad_id: int,
    device: str | torch.device = "cpu",
    share_prompts: bool = False,
    dtype: torch.dtype = torch.float32,
) -> TensorBatch:
    """Pad `samples` into model rows; `share_prompts` packs responses to one prompt into a row.

    `dtype` is the model's (the additive attention mask must match it). Rows are laid out in
    Python lists and become tensors in one call each: a tensor per sample cost more than the
    model's forward pass on small models.
    """
    resp_len = max(max(len(s.response_ids) for s in samples), 1)
    response_ids, mask, behaviour = [], [], []
    for s in samples:
        r = len(s.response_ids)
        response_ids.append(list(s.response_ids) + [pad_id] * (resp_len - r))
        mask.append(s.loss_mask() + [0.0] * (resp_len - r))
        behaviour.append(list(s.behaviour_logprobs[:r]) + [0.0] * (resp_len - r))
    if share_prompts:
        input_ids, attention, positions, rows, index = _shared_prompt_rows(
            samples, pad_id, resp_len, dtype
        )
    else:
        input_ids, attention, rows, index = _plain_rows(samples, pad_id, resp_len)
        positions = None
    return TensorBatch(
        input_ids.to(device),
        attention.to(device),
        None if positions is None else positions.to(device),
        rows.to(device),
        index.to(device),  # [N, L]
        torch.tensor(response_ids, dtype=torch.long, device=device),  # [N, L]
        torch.tensor(mask, device=device),  # [N, L]
        torch.tensor(behaviour, device=device),  # [N, L]
        torch.tensor([s.advantage for s in samples], device=device),  # [N]
        _token_advantages(samples, resp_len, device),  # [N, L] or None
    )


def _token_advantages(
    samples: list[TrainSample], resp_len: int, device: str | torch.device
) -> Tensor | None:
    if all(s.token_advantages is None for s in samples):
        return None
    rows = []
    for s in samples:
        r = len(s.response_ids)
        own = s.token_advantages if s.token_advantages is not None else [s.advantage] * r
        rows.append(list(own[:r]) + [0.0] * (resp_len - r))
    return torch.tensor(rows, device=device)  # [N, L]


def _plain_rows(
    samples: list[TrainSample], pad_id: int, resp_len: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    input_ids, attention, index = [], [], []
    for s in samples:
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids.append(list(s.prompt_ids) + list(s.response_ids) + [pad_id] * (seq_len - p - r))
        attention.append([1] * (p + r) + [0] * (seq_len - p - r))
        # Logits at position t predict token t+1: response token j sits at p+j, predicted at p+j-1.
        index.append(list(range(p - 1, p - 1 + r)) + [0] * (resp_len - r))
    return (
        torch.tensor(input_ids, dtype=torch.long),  # [N, T]
        torch.tensor(attention, dtype=torch.long),  # [N, T]
        torch.arange(len(samples)),  # [N]
        torch.tensor(index, dtype=torch.long),  # [N, L]
    )


def _shared_prompt_rows(
    samples: list[TrainSample], pad_id: int, resp_len: int, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
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
    # Per position: its token, its position id, and its segment (0: the prompt, k: the row's
    # k-th response, -1: padding), from which the block mask follows.
    input_ids, positions, segments = [], [], []
    rows = [0] * len(samples)
    index = [[0] * resp_len for _ in samples]
    for k, (prompt, members) in enumerate(layout):
        p = len(prompt)
        ids, pos, seg = list(prompt), list(range(p)), [0] * p
        for n, i in enumerate(members, 1):
            response = samples[i].response_ids
            r = len(response)
            rows[i] = k
            if not r:
                continue
            start = len(ids)
            ids += response
            pos += range(p, p + r)
            seg += [n] * r
            # Token 0 is predicted by the prompt's last position, token j by response token j-1.
            index[i][:r] = [p - 1, *range(start, start + r - 1)]
        pad = seq_len - len(ids)
        input_ids.append(ids + [pad_id] * pad)
        positions.append(pos + [0] * pad)
        segments.append(seg + [-1] * pad)
    segment = torch.tensor(segments)  # [R, T]
    query, key = segment.unsqueeze(2), segment.unsqueeze(1)  # [R, T, 1], [R, 1, T]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()  # [T, T]
    # Every response sees the prompt and itself, never another response; padding positions
    # attend to themselves only, so no softmax row is empty.
    allowed = (causal & (query >= 0) & ((key == 0) | (key == query))) | torch.eye(
        seq_len, dtype=torch.bool
    )  # [R, T, T]
    blocked = torch.finfo(dtype).min
    attention = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, blocked)
    return (
        torch.tensor(input_ids, dtype=torch.long),  # [R, T]
        attention.unsqueeze(1),  # [R, 1, T, T]
        torch.tensor(positions, dtype=torch.long),  # [R, T]
        torch.tensor(rows, dtype=torch.long),  # [N]
        torch.tensor(index, dtype=torch.long),  # [N, L]
    )


# One chunk of response positions goes through the vocabulary at a time, sized in elements so
# that its fp32 copy is 64 MB (110 positions of Qwen2.5's 152k vocabulary) whatever V is: the
# handful of chunk-sized temporaries (fp32 copy, log_softmax, and in backward their gradients)
# stay a few hundred MB, where one pass over [N, L, V] in fp32 took ~1.8 GB per 1k response
# tokens. Much smaller chunks only add Python and kernel-launch overhead per chunk.
_LOGPROB_CHUNK_ELEMENTS = 2**24


# Below this many bytes of [R, T, V] logits the model's own output layer runs over every
# position (one matmul, cheapest on small vocabularies); above it the output layer runs only on
# the response positions, a chunk at a time, so no vocabulary-sized tensor of the batch exists:
# with Qwen2.5's 152k vocabulary 256 MB is 440 fp32 positions.
_FULL_LOGITS_BYTES = 2**28


def response_logprobs(
    model: torch.nn.Module, batch: TensorBatch, temperature: float, with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each response token, [N, L], and optionally the per-token entropy, [N, L],
    with gradient only when `entropy_grad` (the loss has an entropy term; for the metric alone
    backward would otherwise differentiate through it for nothing).

    The response positions go through `log_softmax` a chunk at a time, so no [N, L, V] tensor is
    made. When the batch's logits would be small (`_FULL_LOGITS_BYTES`) the model computes them
    whole and `_ChunkedLogprobs` picks the response positions: values are those of one pass over
    [N, L, V] bit for bit, and so are gradients wherever that pass's own were reproducible (on
    CPU, with one thread); backward writes the gradient over the logits, so the graph can be
    backpropagated once. Otherwise `_selective_head` runs the output layer on the response
    positions only, chunk by chunk, recomputing each chunk in backward.
    """
    shape = batch.response_ids.shape
    rows = batch.rows.unsqueeze(-1).expand(shape).reshape(-1)  # [N*L]
    positions = batch.response_index.reshape(-1)  # [N*L]
    targets = batch.response_ids.reshape(-1)  # [N*L]
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
              "position_ids": batch.position_ids}
    head = getattr(model, "module", model).get_output_embeddings()  # through DDP and PEFT
    full_bytes = batch.input_ids.numel() * head.out_features * head.weight.element_size()
    if full_bytes <= _FULL_LOGITS_BYTES:
        logits = model(**inputs).logits  # [R, T, V]
        logp, entropy = _ChunkedLogprobs.apply(
            logits, rows, positions, targets, temperature, with_entropy, entropy_grad
        )  # [N*L], [N*L] (or empty)
    else:
        with _selective_head(head, rows, positions, targets, temperature, with_entropy,
                             entropy_grad):
            logp, entropy = model(**inputs).logits  # [2, N*L]: what the patched head returned
    if not with_entropy:
        return logp.view(shape) * batch.mask, None
    entropy = entropy.view(shape)  # [N, L]
    return logp.view(shape) * batch.mask, entropy if entropy_grad else entropy.detach()


@contextlib.contextmanager
def _selective_head(
    head: torch.nn.Linear, rows: Tensor, positions: Tensor, targets: Tensor,
    temperature: float, with_entropy: bool, entropy_grad: bool,
) -> Iterator[None]:
    """While open, `head` (the model's output layer) maps the hidden states [R, T, H] to the
    log-probs of `targets` at (`rows`, `positions`) and their entropies, [2, M], instead of to
    [R, T, V] logits. It stays inside the model's forward, so DDP and FSDP2 see the output
    layer's weight used where they expect it."""

    def forward(hidden: Tensor) -> Tensor:
        picked = hidden[rows, positions]  # [M, H]
        logp, entropy = [], []
        for part in _chunks(targets.numel(), head.out_features):
            # Checkpointed: backward recomputes the chunk's [C, V] logits instead of keeping
            # every chunk's alive until then.
            chunk_logp, chunk_entropy = torch.utils.checkpoint.checkpoint(
                _head_chunk, picked[part], head.weight, head.bias, targets[part], temperature,
                with_entropy, entropy_grad, use_reentrant=False,
            )  # [C], [C]
            logp.append(chunk_logp)
            entropy.append(chunk_entropy if with_entropy else torch.zeros_like(chunk_logp))
        return torch.stack([torch.cat(logp), torch.cat(entropy)])  # [2, M]

    head.forward = forward
    try:
        yield
    finally:
        del head.forward  # back to the class's forward


def _head_chunk(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, temperature: float,
    with_entropy: bool, entropy_grad: bool,
) -> tuple[Tensor, Tensor | None]:
    logits = torch.nn.functional.linear(hidden, weight, bias)  # [C, V]
    return _chunk_logprobs(logits, targets, temperature, with_entropy, entropy_grad)


def _chunk_logprobs(
    picked: Tensor, targets: Tensor, temperature: float, with_entropy: bool,
    entropy_grad: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of `targets` and entropy for a chunk of positions' logits, [C, V] -> [C], [C].

    The same ops, in the same order, as the unchunked formula; each is row by row, so a chunk's
    rows come out bit-identical to the same rows of the whole [N, L, V].
    """
    logp_all = torch.log_softmax(picked.float() / temperature, dim=-1)  # [C, V]
    logp = torch.gather(logp_all, 1, targets.unsqueeze(-1)).squeeze(-1)  # [C]
    if not with_entropy:
        return logp, None
    source = logp_all if entropy_grad else logp_all.detach()  # [C, V]
    return logp, -(source.exp() * source).sum(-1)  # [C], [C]


def _chunk_rows(vocab: int) -> int:
    return max(1, _LOGPROB_CHUNK_ELEMENTS // vocab)


def _chunks(total: int, vocab: int) -> list[slice]:
    size = _chunk_rows(vocab)
    return [slice(i, i + size) for i in range(0, total, size)]


class _ChunkedLogprobs(torch.autograd.Function):
    """`_chunk_logprobs` over every response position, chunk by chunk, in forward and backward.

    Autograd keeps only the model's logits (in the model's dtype) and the indices. Backward
    recomputes each chunk from them and then writes the gradient over the logits: they are read
    for the last time there, so backward holds one [R, T, V] tensor where the unchunked formula
    held its logits' gradient and several [N, L, V] fp32 tensors. Per-chunk autograd (or
    checkpointing) would instead keep every chunk's fp32 softmax, [N, L, V] in all, or make a
    zero-filled [R, T, V] gradient per chunk.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        logits: Tensor,
        rows: Tensor,
        positions: Tensor,
        targets: Tensor,
        temperature: float,
        with_entropy: bool,
        entropy_grad: bool,
    ) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(logits, rows, positions, targets)
        ctx.temperature, ctx.entropy_grad = temperature, with_entropy and entropy_grad
        ctx.set_materialize_grads(False)
        logp = logits.new_empty(targets.shape, dtype=torch.float32)  # [M]
        entropy = logits.new_empty(targets.shape if with_entropy else 0, dtype=torch.float32)
        for part in _chunks(targets.numel(), logits.shape[-1]):
            picked = logits[rows[part], positions[part]]  # [C, V]
            chunk_logp, chunk_entropy = _chunk_logprobs(
                picked, targets[part], temperature, with_entropy
            )  # [C], [C]
            logp[part] = chunk_logp
            if chunk_entropy is not None:
                entropy[part] = chunk_entropy
        if not ctx.entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        grad_logp: Tensor | None,
        grad_entropy: Tensor | None,
    ) -> tuple[Tensor | None, None, None, None, None, None, None]:
        if getattr(ctx, "spent", False):
            raise RuntimeError(
                "response_logprobs: backward ran once already and wrote its gradient over the "
                "logits it needs; a second backward (retain_graph=True) needs a fresh forward"
            )
        logits, rows, positions, targets = ctx.saved_tensors
        if not ctx.entropy_grad:
            grad_entropy = None
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None, None, None
        # [R, T, V]: the logits' own storage, unless they are a leaf someone else may hold.
        ctx.spent = logits.grad_fn is not None
        grad = logits.detach() if ctx.spent else torch.empty_like(logits)
        length, vocab = logits.shape[1:]
        # Responses sharing a prompt are all predicted from its last position, so positions
        # repeat: go position by position, each one's samples in sample order.
        unique, owner = torch.unique(rows * length + positions, return_inverse=True)  # [U], [M]
        order = torch.argsort(owner, stable=True)  # [M]
        ends = torch.bincount(owner, minlength=unique.numel()).cumsum(0).tolist()  # U ints
        read = torch.zeros(grad.shape[:2], dtype=torch.bool, device=grad.device)  # [R, T]
        read[unique // length, unique % length] = True
        grad[~read] = 0
        step = _chunk_rows(vocab)
        for part in _chunks(unique.numel(), vocab):
            first, last = part.start, min(part.stop, unique.numel()) - 1
            where = (unique[first : last + 1] // length, unique[first : last + 1] % length)
            original = logits[where]  # [C, V]
            chunk_grad = torch.zeros_like(original)  # [C, V]
            begin = ends[first - 1] if first else 0
            for start in range(begin, ends[last], step):
                members = order[start : min(start + step, ends[last])]  # [K] samples
                local = owner[members] - first  # [K] their rows of `original`
                picked = original[local].requires_grad_()  # [K, V]
                with torch.enable_grad():
                    logp, entropy = _chunk_logprobs(
                        picked, targets[members], ctx.temperature, grad_entropy is not None
                    )  # [K], [K]
                outputs, grads = [], []
                if grad_logp is not None:
                    outputs.append(logp)
                    grads.append(grad_logp[members])
                if grad_entropy is not None:
                    outputs.append(entropy)
                    grads.append(grad_entropy[members])
                (sample_grad,) = torch.autograd.grad(outputs, picked, grads)  # [K, V]
                # The indexing's own backward in the unchunked formula: the same sums, in the
                # same order (with one thread; with several, neither order is fixed on CPU).
                chunk_grad.index_put_((local,), sample_grad, accumulate=True)
            grad[where] = chunk_grad
        return grad, None, None, None, None, None, None


def _micro_batches(samples: list[TrainSample], cfg: Config) -> list[list[TrainSample]]:
    """`samples` cut into micro-batches of at most `learner.micro_batch_size` sequences and, if
    set, `learner.max_tokens_per_micro_batch` prompt+response tokens (a longer sequence goes
    alone), in order."""
    size, budget = cfg.learner.micro_batch_size, cfg.learner.max_tokens_per_micro_batch
    out: list[list[TrainSample]] = []
    tokens = 0
    for s in samples:
        n = len(s.prompt_ids) + len(s.response_ids)
        if not out or len(out[-1]) >= size or (budget is not None and tokens + n > budget):
            out.append([])
            tokens = 0
        out[-1].append(s)
        tokens += n
    return out


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
           device: str | torch.device, dtype: torch.dtype | None = None) -> TensorBatch:
    """Collated `samples`; the block mask in `dtype`, the dtype attention runs in (the
    parameters' unless autocast or FSDP2 mixed precision computes in another)."""
    dtype = dtype or next(model.parameters()).dtype
    return collate(samples, pad_id, device, share_prompts=share, dtype=dtype)


def _gradient_sync(model: torch.nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
    """Whether this backward all-reduces: only the last micro-batch of an update does, under
    DDP (`no_sync`) and FSDP2 (`set_requires_gradient_sync`) alike."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(enabled)
    elif hasattr(model, "no_sync") and not enabled:
        return model.no_sync()
    return contextlib.nullcontext()


def _autocast(
    model: torch.nn.Module, dtype: torch.dtype | None
) -> contextlib.AbstractContextManager:
    """Forward passes in `dtype` over higher-precision weights, unless FSDP2 (whose mixed
    precision policy casts the parameters itself) or the weights already are in `dtype`."""
    param = next(model.parameters())
    if dtype is None or dtype == param.dtype or hasattr(param, "device_mesh"):
        return contextlib.nullcontext()
    return torch.autocast(param.device.type, dtype=dtype)


@torch.no_grad()
def _fixed_logprobs(
    model: torch.nn.Module, shard: Shard, cfg: Config, pad_id: int, device: str | torch.device,
    dtype: torch.dtype | None = None, skip: frozenset[int] = frozenset(),
) -> dict[int, Tensor]:
    """Log-probs under `model` as it is now of every distinct sample of `shard` whose `id` is
    not in `skip`, keyed by `id`, [L] each (its response's length).

    Every epoch revisits the same samples, so each distinct sample goes through the model once
    (in the first epoch's order) and later micro-batches take its row (`_stack_rows`).
    """
    share = shares_prompts(model, cfg)
    distinct = list({id(s): s for update in shard for s in update.samples
                     if id(s) not in skip}.values())
    rows: dict[int, Tensor] = {}
    for samples in _micro_batches(distinct, cfg) if distinct else []:
        batch = _batch(model, samples, share, pad_id, device, dtype)
        with _autocast(model, dtype):
            logp = response_logprobs(model, batch, _temperature(cfg))[0]  # [N, L]
        _keep_rows(rows, samples, logp)
    return rows


@torch.no_grad()
def _entropy_threshold(
    model: torch.nn.Module, micro_batches: list[list[TrainSample]], norm: LossNorm, cfg: Config,
    pad_id: int, world_size: int, device: str | torch.device, dtype: torch.dtype | None = None,
) -> tuple[dict[int, Tensor], Tensor, LossNorm]:
    """For `algo.entropy_mask_quantile`: the entropy of each sample of this update (keyed by
    `id`, [L] each) under `model` as it is now, the threshold over the whole global mini-batch
    (all ranks), and `norm` with the count of tokens at or above it.

    Every micro-batch's mask needs the threshold before its loss, so one no-grad pass over the
    update's samples comes first: the price of the option is that forward pass per update.
    """
    share = shares_prompts(model, cfg)
    rows: dict[int, Tensor] = {}
    for samples in micro_batches:
        batch = _batch(model, samples, share, pad_id, device, dtype)
        with _autocast(model, dtype):
            entropy = response_logprobs(model, batch, _temperature(cfg), with_entropy=True)[1]
        _keep_rows(rows, samples, entropy)
    # A sample kept out of the loss (`algo.mask_truncated`) has no tokens in the quantile either,
    # nor has an environment's observation.
    counted = [_model_tokens(rows[id(s)], s) for samples in micro_batches for s in samples
               if not s.masked]
    local = torch.cat(counted) if counted else torch.zeros(0, device=device)  # [K]
    everything = gather_entropies(local, world_size)  # [K over all ranks]
    threshold = entropy_threshold(everything, cfg.algo.entropy_mask_quantile)
    kept = float((everything >= threshold).sum().item())
    return rows, threshold, replace(norm, entropy_mask_tokens=kept)


def _model_tokens(row: Tensor, sample: TrainSample) -> Tensor:
    """`row` [L], one value per response token of `sample`, cut to the tokens the model
    sampled (`TrainSample.env_mask`; all of them without one)."""
    if not sample.env_mask:
        return row
    return row[torch.tensor(sample.env_mask, dtype=torch.bool, device=row.device)]


def _keep_rows(rows: dict[int, Tensor], samples: list[TrainSample], logp: Tensor) -> None:
    """Each sample's row of `logp` [N, L], cut to its response, into `rows` by `id`."""
    for s, row in zip(samples, logp.detach(), strict=True):
        rows[id(s)] = row[: len(s.response_ids)]


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
    compute_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Run `algo.epochs * algo.mini_batches` optimizer updates of this rank's shard.

    `model` is the module forward and backward run on (DDP, FSDP2 or plain); gradients are
    all-reduced once per update, on its last micro-batch. `compute_dtype` is the dtype forward
    passes run in when it differs from the weights' (fp32 master weights, bf16 compute).

    Returns this rank's metric shares (merge them over ranks with `rlrun.algo.merge_metrics`),
    averaged over updates, plus `optim/grad_norm`, `optim/lr` and `train/bad_steps` (updates
    skipped because the gradient was NaN or inf; grad norms are the same on every rank after
    the all-reduce, so every rank skips the same updates).
    """
    algo = cfg.algo
    temperature = _temperature(cfg)
    model.train()
    # pi_old is the policy before this step's first update (every epoch uses it for the ratio).
    # The first update differentiates that very policy, so its own forward pass gives pi_old
    # of its samples (detached: bit for bit what a no-grad pass over the same micro-batch
    # gives) and the no-grad pass covers only the samples it does not hold; with a single
    # update per batch there is no such pass at all.
    first = frozenset(id(s) for s in shard[0].samples) if shard else frozenset()
    old = _fixed_logprobs(model, shard, cfg, pad_id, device, compute_dtype, skip=first)
    ref = None if ref_model is None else _fixed_logprobs(
        ref_model, shard, cfg, pad_id, device, compute_dtype
    )
    # The optimizer's own parameters: after a no-grad forward FSDP2 leaves the root module's
    # parameters unsharded, and `model.parameters()` would hand out those stand-ins, whose
    # gradients stay empty (they land on the sharded parameters).
    params = [p for group in optimizer.param_groups for p in group["params"]]
    share = shares_prompts(model, cfg)
    per_update, grad_norms, bad = [], [], 0
    for u, update in enumerate(shard):
        optimizer.zero_grad(set_to_none=True)
        parts = []
        micro_batches = _micro_batches(update.samples, cfg)
        norm, entropy_rows, threshold = update.norm, None, None
        if algo.entropy_mask_quantile < 1.0:
            entropy_rows, threshold, norm = _entropy_threshold(
                model, micro_batches, update.norm, cfg, pad_id, world_size, device, compute_dtype
            )
        for m, samples in enumerate(micro_batches):
            batch = _batch(model, samples, share, pad_id, device, compute_dtype)
            with _gradient_sync(model, m == len(micro_batches) - 1):
                with _autocast(model, compute_dtype):
                    # The entropy is always a metric (`loss/entropy`), a loss term only with
                    # algo.entropy_coef.
                    logp, entropy = response_logprobs(
                        model, batch, temperature, with_entropy=True,
                        entropy_grad=algo.entropy_coef != 0,
                    )
                if u == 0:
                    _keep_rows(old, samples, logp)
                entropy_mask = None if entropy_rows is None else high_entropy_mask(
                    _stack_rows(entropy_rows, samples, device), batch.mask, threshold
                )
                loss, metrics = grpo_loss(
                    logp, _stack_rows(old, samples, device), batch.advantages, batch.mask, algo,
                    norm, behaviour_logprobs=batch.behaviour_logprobs,
                    ref_logprobs=None if ref is None else _stack_rows(ref, samples, device),
                    entropy=entropy, entropy_mask=entropy_mask,
                    token_advantages=batch.token_advantages,
                )
                ddp_loss(loss, world_size).backward()
            parts.append(metrics)
        max_norm = cfg.learner.grad_clip if cfg.learner.grad_clip > 0 else math.inf
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        # Under FSDP2 the norm is a DTensor over the shards; its value is the global norm.
        grad_norm = float(total.full_tensor() if hasattr(total, "full_tensor") else total)
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
    metrics = merge_metrics(per_update, mean=True)
    metrics["optim/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else math.nan
    metrics["optim/lr"] = float(scheduler.get_last_lr()[0])
    metrics["train/bad_steps"] = float(bad)
    return metrics | logprob_gaps(shard, old)


def logprob_gaps(shard: Shard, old: dict[int, Tensor]) -> dict[str, float]:
    """The weight-sync check: per rollout engine, the largest mean absolute difference between
    the log-probs the engine reported for a sample's tokens and the learner's log-probs of the
    same tokens (`old`, the learner's current weights), over the samples the engine made with
    those very weights (`TrainSample.engine`), on the tokens the model sampled (an environment's
    observation tokens have no engine log-prob). On-policy this is round-off; an engine that
    did not receive the last weights shows the distance between two policies. A `masked` sample
    has no learner log-probs (its row of `old` is the masked one, all zero), so it is left out."""
    gaps: dict[str, float] = {}
    for update in shard:
        for s in update.samples:
            if s.engine < 0 or s.masked or not s.response_ids:
                continue
            diff = _model_tokens(old[id(s)].cpu() - torch.tensor(s.behaviour_logprobs), s)  # [K]
            if not diff.numel():
                continue
            gap = float(diff.abs().mean())
            key = f"sync/logprob_gap_max/{s.engine}"
            gaps[key] = max(gaps.get(key, 0.0), gap)
    if gaps:
        gaps["sync/logprob_gap_max"] = max(gaps.values())
    return gaps


def warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup_steps` optimizer updates, then constant."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    )
