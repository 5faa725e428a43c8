"""The transformers engine: a hand-written batched sampling loop, for CPU runs and debugging.

Why not `model.generate`: the learner needs the exact log-prob of every sampled token under
`log_softmax(logits / temperature)` of the full vocabulary, stop strings must cut the tokens
where they cut the text, and finished rows should leave the batch. A loop over the model's
forward pass with a KV cache gives that control in a page of code:

1. tokenize every prompt, make `n` rows per prompt, sort rows by prompt length (less padding)
   and cut them into batches of `rollout.batch_size` rows;
2. per batch, left-pad the distinct prompts and prefill them once with explicit position ids
   (left padding must not shift positions), copy each prompt's cache to its rows, then
   repeat: sample one token per row, record its log-prob, retire rows that hit EOS, a stop
   string or `max_new_tokens`, and drop retired rows from the cache once an eighth of the
   batch has retired;
3. decode, cut at the stop string, and regroup the rows per prompt.

The KV cache writes into buffers sized for the whole generation (`preallocated_cache`).
One `torch.Generator` per call, seeded from `SamplingParams.seed`, makes a call reproducible.
"""

from __future__ import annotations

import inspect
import itertools
import threading
from typing import Any

import torch
from torch import Tensor

from rlrun.config import RolloutConfig
from rlrun.engines.base import (
    SamplingParams,
    check_weight_names,
    encode_prompts,
    extended,
    finish,
    first_stop,
    new_tokens,
)
from rlrun.models import load_causal_lm, load_tokenizer, local_model
from rlrun.records import Sample
from rlrun.weights.buckets import ParamMeta
from rlrun.weights.collective import GroupInfo, Receiver, WeightSyncError


class HFEngine:
    """Generation with a Hugging Face causal LM in this process (CPU, or one GPU)."""

    def __init__(
        self,
        model_path: str,
        cfg: RolloutConfig,
        dtype: str = "float32",
        tokenizer_path: str | None = None,
    ) -> None:
        self.device = torch.device(
            "cuda" if cfg.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        )
        # A model at a URI is fetched here once, not again by each loader.
        model_path = local_model(model_path)
        self.tokenizer = load_tokenizer(local_model(tokenizer_path or model_path))
        self.model = load_causal_lm(model_path, dtype).to(self.device)
        self.batch_size = cfg.batch_size
        self.version = 0
        self.pad_id = self.tokenizer.pad_token_id
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {i for i in [*eos, self.tokenizer.eos_token_id] if i is not None}
        self._shapes = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        # transformers 5 renamed `past_key_values` to `cache`; an unknown name would be
        # swallowed by **kwargs and every step would silently run without its history.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        # generate and load_weights must not interleave (an actor may serve calls on threads).
        self._lock = threading.Lock()
        self._receiver: Receiver | None = None
        self._asleep: set[str] = set()  # sleep-mode tags not yet woken up
        self._dropped = False  # the weights were dropped (sleep level 2)

    def state_dict_keys(self) -> list[str]:
        return list(self._shapes)

    def load_weights(self, version: int, weights: dict[str, Tensor]) -> None:
        check_weight_names(self._shapes, weights, version)
        with self._lock:
            self.model.load_state_dict(weights, strict=True)
            self.version = version

    # The collective backend's receiving side (rlrun.weights.collective), under the names of
    # vLLM's weight-transfer API so both engines answer the same calls.

    def init_weight_transfer(self, info: GroupInfo) -> None:
        self.close_weight_transfer()
        self._receiver = Receiver(info)

    def start_weight_update(self, version: int) -> None:
        self._open_receiver().start(version)

    def update_weights(self, metas: list[ParamMeta]) -> None:
        self._open_receiver().update(metas)

    def finish_weight_update(self, version: int, checksums: list[int]) -> None:
        self.load_weights(version, self._open_receiver().finish(version, checksums))

    # Colocated placement (the driver frees the device for the learner): vLLM's sleep-mode
    # semantics, so the HF engine is the CPU twin of that choreography.

    def sleep(self, level: int) -> None:
        """Level 1 moves the weights to host memory; level 2 drops them (the next update
        replaces them). Nothing generates until `wake_up`."""
        with self._lock:
            if level == 2:
                for param in self.model.parameters():
                    param.data = torch.empty(0, dtype=param.dtype, device=self.device)
            elif self.device.type == "cuda":
                self.model.to("cpu")
            self._asleep = {"weights", "kv_cache"}
            self._dropped = level == 2

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Bring back `tags` ("weights", "kv_cache"; None: both). Weights dropped at level 2
        come back as zeros of the right shape, to be overwritten by the next update."""
        with self._lock:
            for tag in tags or ["weights", "kv_cache"]:
                if tag == "weights" and "weights" in self._asleep:
                    if self._dropped:
                        for name, param in self.model.named_parameters():
                            param.data = torch.zeros(self._shapes[name], dtype=param.dtype,
                                                     device=self.device)
                    self.model.to(self.device)
                self._asleep.discard(tag)

    def close_weight_transfer(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def _open_receiver(self) -> Receiver:
        if self._receiver is None:
            raise WeightSyncError("no weight group joined: init_weight_transfer first")
        return self._receiver

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        if not prompts:
            return []
        fresh = [
            Sample(prompt_ids=ids, response_ids=[], response_text="", behaviour_logprobs=[],
                   finish_reason="paused", weight_version=self.version)
            for ids in encode_prompts(self.tokenizer, prompts)
            for _ in range(sampling.n)
        ]
        done = self.extend(fresh, sampling)
        return [done[p * sampling.n : (p + 1) * sampling.n] for p in range(len(prompts))]

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        if not samples:
            return []
        # Rows with the same context stay adjacent (a stable sort), so each is prefilled once.
        order = sorted(range(len(samples)),
                       key=lambda r: len(samples[r].prompt_ids) + len(samples[r].response_ids))
        generator = torch.Generator(device=self.device)
        if sampling.seed is None:
            generator.seed()
        else:
            generator.manual_seed(sampling.seed)

        done: dict[int, Sample] = {}
        with self._lock, torch.inference_mode():
            if self._asleep:
                raise RuntimeError(f"generate while asleep ({', '.join(sorted(self._asleep))})"
                                   ": wake_up first")
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                outs = self._generate_batch([samples[r] for r in batch], sampling, generator)
                done.update(zip(batch, outs, strict=True))
        return [done[r] for r in range(len(samples))]

    def _generate_batch(
        self, rows: list[Sample], sampling: SamplingParams, generator: torch.Generator
    ) -> list[Sample]:
        """Each row continued from its prompt and the response it has so far (rows with the
        same context are adjacent)."""
        contexts = [s.prompt_ids + s.response_ids for s in rows]
        # Prefill each distinct context once, then copy its cache to each of its rows: with
        # GRPO's n samples per prompt most of the prefill would otherwise be repeated.
        runs = [(ids, len(list(group))) for ids, group in itertools.groupby(contexts)]
        prompts = [ids for ids, _ in runs]
        counts = torch.tensor([count for _, count in runs], device=self.device)
        budgets = [new_tokens(sampling, len(s.response_ids)) for s in rows]
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, ids in enumerate(prompts):
            input_ids[u, width - len(ids) :] = torch.tensor(ids)
            mask[u, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, W], 0 at each prompt's first token
        cache = preallocated_cache(self.model.config, width + max(budgets))
        logits = self._forward(input_ids, mask, positions, cache, logits_to_keep=1)  # [U, V]
        expand = torch.repeat_interleave(torch.arange(len(prompts), device=self.device), counts)
        cache.batch_select_indices(expand)
        logits, mask = logits[expand], mask[expand]  # [B, V], [B, W]
        next_pos = positions[expand, -1] + 1  # [B]
        batch = len(rows)

        tokens_out: list[list[int]] = [list(s.response_ids) for s in rows]
        new_out: list[list[int]] = [[] for _ in rows]
        logprobs_out: list[list[float]] = [[] for _ in rows]
        reasons = [""] * batch
        stop_at: list[int | None] = [None] * batch  # char offset at which the text is cut
        in_cache = list(range(batch))  # rows in the cache, in cache order
        finished = [False] * batch
        # A stop string that completes at this step ends in the newest token, so it lies within
        # the last few tokens: decode only those (every token is at least one byte, a character
        # at most four), and the whole text once one shows up there. Decoding the whole text at
        # every step made stop strings cost as much as the model on a tiny one.
        window = 4 * max(map(len, sampling.stop), default=0) + 8
        for _ in range(max(budgets)):
            tokens, logprobs = sample_tokens(logits.float(), sampling, generator)  # [A], [A]
            for b, tok, lp in zip(in_cache, tokens.tolist(), logprobs.tolist(), strict=True):
                if finished[b]:
                    continue
                tokens_out[b].append(tok)
                new_out[b].append(tok)
                logprobs_out[b].append(lp)
                if tok in self.eos_ids:
                    reasons[b], finished[b] = "stop", True
                elif sampling.stop and any(
                    stop in self._decode(tokens_out[b][-window:]) for stop in sampling.stop
                ) and (at := first_stop(self._decode(tokens_out[b]), sampling.stop,
                                        sampling.include_stop_str)) is not None:
                    reasons[b], stop_at[b], finished[b] = "stop", at, True
                elif len(new_out[b]) == budgets[b]:
                    reasons[b], finished[b] = finish(sampling, len(tokens_out[b])), True
            keep = [k for k, b in enumerate(in_cache) if not finished[b]]
            if not keep:
                break
            # Dropping rows copies the cache, so wait until an eighth of the batch is done;
            # until then finished rows ride along and their tokens are ignored.
            if (len(in_cache) - len(keep)) * 8 >= len(in_cache):
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask, next_pos, tokens = mask[index], next_pos[index], tokens[index]
                in_cache = [in_cache[k] for k in keep]
            mask = torch.cat([mask, mask.new_ones((len(in_cache), 1))], dim=1)
            logits = self._forward(tokens[:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

        out = []
        for b, row in enumerate(rows):
            text = self._decode(tokens_out[b])
            if stop_at[b] is not None:
                text = text[: stop_at[b]]
            out.append(extended(row, new_out[b], logprobs_out[b], text, reasons[b],
                                self.version))
        return out

    def _forward(self, input_ids: Tensor, mask: Tensor, positions: Tensor, cache: Any,
                 **options: Any) -> Tensor:
        """The next-token logits of every row [rows, V], after extending `cache` by `input_ids`
        (explicit positions: left padding must not shift them)."""
        return self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                          use_cache=True, **options, **{self._cache_kwarg: cache}).logits[:, -1, :]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def preallocated_cache(config: Any, capacity: int) -> Any:
    """A `DynamicCache` whose full-attention layers write into buffers of `capacity` tokens.

    The stock layer concatenates its keys and values with each new token, copying the whole
    cache every step (a third of the CPU time at 64 new tokens); other layer kinds (sliding
    window, linear attention) are left as transformers builds them.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs):
            if not self.is_initialized:
                batch, heads, _, _ = key_states.shape
                self.device = key_states.device
                self.k_buf = key_states.new_empty((batch, heads, capacity, key_states.shape[-1]))
                self.v_buf = value_states.new_empty(
                    (batch, heads, capacity, value_states.shape[-1])
                )
                self.length = 0
                self.is_initialized = True
            new = key_states.shape[-2]
            self.k_buf[:, :, self.length : self.length + new] = key_states
            self.v_buf[:, :, self.length : self.length + new] = value_states
            self.length += new
            self.keys, self.values = self._views()
            return self.keys, self.values

        def batch_select_indices(self, indices: Tensor) -> None:
            if self.is_initialized:
                self.k_buf = self._select(self.k_buf, indices)
                self.v_buf = self._select(self.v_buf, indices)
                self.keys, self.values = self._views()

        def _select(self, buf: Tensor, indices: Tensor) -> Tensor:
            # Copy only the filled part of the rows kept.
            out = buf.new_empty((len(indices), *buf.shape[1:]))
            out[:, :, : self.length] = buf[indices, :, : self.length]
            return out

        def _views(self) -> tuple[Tensor, Tensor]:
            return self.k_buf[:, :, : self.length], self.v_buf[:, :, : self.length]

    cache = DynamicCache(config=config)
    cache.layers = [
        PreallocatedLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache


def sample_tokens(
    logits: Tensor, sampling: SamplingParams, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """One token per row and its log-prob under log_softmax(logits / temperature).

    Top-k and top-p shape what is drawn, never the reported log-prob (see engines.base).
    Shapes: logits [A, V] float32 -> tokens [A] long, logprobs [A] float32.
    """
    if sampling.temperature == 0:
        tokens = logits.argmax(dim=-1)  # [A]
        logprobs = torch.log_softmax(logits, dim=-1)  # [A, V]
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits / sampling.temperature  # [A, V]
    logprobs = torch.log_softmax(scaled, dim=-1)  # [A, V]
    drawn = scaled
    if 0 < sampling.top_k < scaled.shape[-1]:
        kth = torch.topk(drawn, sampling.top_k, dim=-1).values[:, -1:]  # [A, 1]
        drawn = drawn.masked_fill(drawn < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(drawn, dim=-1, descending=True)  # [A, V]
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # [A, V]
        # Smallest prefix whose mass reaches top_p; the most likely token is always kept.
        cut = mass_before >= sampling.top_p
        cut[:, 0] = False
        drawn = drawn.masked_fill(cut.scatter(-1, sorted_idx, cut), float("-inf"))
    probs = torch.softmax(drawn, dim=-1)  # [A, V]
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [A]
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
