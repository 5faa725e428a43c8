"""Stand-in for vllm/entrypoints/llm.py: `LLM`, an offline engine on one CPU model.

Generation samples one token at a time from the transformers model: greedy at temperature 0,
otherwise from softmax(top-k/top-p-masked logits / temperature) with a `torch.Generator` per
completion (the request's `seed` + k for its k-th of n completions, as vLLM's parallel
sampling seeds its children; unseeded requests share one stream seeded by `LLM(seed=...)`).
Log-probs follow `logprobs_mode`: "raw_logprobs" (vLLM's default) is log_softmax(logits),
"processed_logprobs" is log_softmax of what the sampler draws from (temperature 1 when
greedy). Stopping follows vLLM's order: EOS (kept in token_ids, finish_reason "stop"), a stop
token id, the length cap, then stop strings (text cut before the string unless
include_stop_str_in_output).

Sleep, weight transfer and `collective_rpc` behave as in vLLM 0.34 (entrypoints/rl/offline.py,
v1/engine/core.py, v1/executor/abstract.py); the TP workers are `vllm.v1.worker.gpu_worker.
Worker`s that all stand for the one model. Where vLLM would hang or crash the stand-in raises:
generating while asleep or during a weight-update session, and sleeping without
enable_sleep_mode (vLLM silently frees nothing).
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from vllm._stand_in import ModelConfig, ParallelConfig, SharedModel, WorkerConfig
from vllm.config.weight_transfer import WeightTransferConfig
from vllm.distributed.weight_transfer.base import (
    WeightTransferInitRequest,
    WeightTransferUpdateRequest,
)
from vllm.exceptions import VLLMValidationError
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, RequestOutput, WeightVersionSpan
from vllm.sampling_params import _SAMPLING_EPS, SamplingParams
from vllm.v1.worker.gpu_worker import Worker

_log = logging.getLogger(__name__)

# The EngineArgs fields (engine/arg_utils.py) the stand-in takes through **kwargs, with their
# EngineArgs defaults; tests/engines/test_vllm_api.py checks both against the real source.
_ENGINE_ARGS: dict[str, Any] = {
    "max_model_len": None,
    "max_num_seqs": None,
    "max_logprobs": 20,
    "logprobs_mode": "raw_logprobs",
    "disable_log_stats": False,
    "enable_sleep_mode": False,
    "weight_transfer_config": None,
    "distributed_executor_backend": None,
}
# What ModelConfig.get_diff_sampling_param (config/model.py) takes from generation_config.json.
_GENERATION_CONFIG_PARAMS = (
    "repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k",
    "top_p", "min_p", "max_new_tokens", "skip_special_tokens",
)
_LOGPROBS_MODES = ("raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs")
_EXECUTOR_BACKENDS = ("ray", "mp", "uni", "external_launcher")
_PAUSE_MODES = ("abort", "wait", "keep")
_SLEEP_TAGS = frozenset(("weights", "kv_cache"))
_STR_DTYPE_TO_TORCH_DTYPE = {
    "half": torch.float16,
    "float16": torch.float16,
    "float": torch.float32,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
}


def _resolve_dtype(dtype: str | torch.dtype, config_dtype: Any) -> torch.dtype:
    """vLLM's dtype rule on an Ampere-or-newer GPU: "auto" keeps the checkpoint's half
    precision and turns float32 into bfloat16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype.lower() != "auto":
        if dtype.lower() not in _STR_DTYPE_TO_TORCH_DTYPE:
            raise ValueError(f"Unknown dtype: {dtype!r}")
        return _STR_DTYPE_TO_TORCH_DTYPE[dtype.lower()]
    if isinstance(config_dtype, str):
        config_dtype = getattr(torch, config_dtype)
    if config_dtype in (torch.float16, torch.bfloat16):
        return config_dtype
    return torch.bfloat16


def _check_stop_strings(
    output_text: str, new_char_count: int, stop: list[str], include_in_output: bool
) -> tuple[str, int] | None:
    """vLLM's check_stop_strings (v1/engine/detokenizer.py): the stop string completing
    earliest in the new text, and the length to cut the text to (-1: no cut)."""
    if not new_char_count or not stop:
        return None
    best: tuple[int, int, str] | None = None
    for stop_str in stop:
        stop_index = output_text.find(stop_str, 1 - new_char_count - len(stop_str))
        if stop_index == -1:
            continue
        end = stop_index + len(stop_str)
        if best is None or end < best[0]:
            best = (end, stop_index, stop_str)
    if best is None:
        return None
    end, stop_index, stop_str = best
    if include_in_output:
        return stop_str, end if end < len(output_text) else -1
    return stop_str, stop_index


def _apply_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask all but the top-k logits, then all but the smallest set of highest-probability
    tokens whose mass reaches top_p (always keeping the most likely one), as vLLM does."""
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = cumulative <= 1 - top_p
        drop[-1] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop),
                                    float("-inf"))
    return logits


def _run_on_workers(workers: list[Worker], call: Callable[[Worker], Any], timeout: float | None,
                    method: Any) -> list[Any]:
    """Run `call` on every worker at once (one thread per TP rank), as the multiprocess and
    Ray executors do; a missed `timeout` is their TimeoutError."""
    results: list[Any] = [None] * len(workers)
    errors: list[BaseException | None] = [None] * len(workers)

    def run(i: int) -> None:
        try:
            results[i] = call(workers[i])
        except BaseException as err:  # re-raised on the caller's thread below
            errors[i] = err

    # Daemon threads: a worker stuck in a collective must not keep the interpreter alive.
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"RPC call to {method} timed out.")
    for err in errors:
        if err is not None:
            raise err
    return results


def _release(actors: list[Any]) -> None:
    if actors and "ray" in sys.modules:
        import ray

        for actor in actors:
            try:
                ray.kill(actor)
            except Exception as err:  # the cluster may already be gone at interpreter exit
                _log.debug("could not release a TP worker slot: %s", err)


class LLM:
    """An offline engine: `generate`, sleep/wake and vLLM's native weight-transfer API."""

    def __init__(
        self,
        model: str,
        *,
        tokenizer: str | None = None,
        trust_remote_code: bool = False,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool = False,
        **kwargs: Any,
    ) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        unknown = sorted(set(kwargs) - set(_ENGINE_ARGS))
        if unknown:
            raise TypeError(
                f"the vllm stand-in does not take {', '.join(map(repr, unknown))}: of vLLM's "
                f"EngineArgs it implements only {', '.join(sorted(_ENGINE_ARGS))}"
            )
        args = {**_ENGINE_ARGS, **kwargs}
        if isinstance(args["weight_transfer_config"], dict):
            args["weight_transfer_config"] = WeightTransferConfig(**args["weight_transfer_config"])
        if args["logprobs_mode"] not in _LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode must be one of {_LOGPROBS_MODES}, "
                             f"got {args['logprobs_mode']!r}")
        if not 0 <= seed <= 2**32 - 1:
            raise ValueError(f"seed must be in [0, 2**32 - 1], got {seed}")
        if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        backend = args["distributed_executor_backend"]
        if backend is not None and backend not in _EXECUTOR_BACKENDS:
            raise ValueError(f"distributed_executor_backend must be one of "
                             f"{_EXECUTOR_BACKENDS} or None, got {backend!r}")

        self.worker_bundle_indices: list[int] | None = None
        self._slot_actors: list[Any] = []
        parallel = ParallelConfig(world_size=tensor_parallel_size, rank=0)
        self._select_executor(parallel, backend)
        self._finalizer = weakref.finalize(self, _release, self._slot_actors)

        hf_config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
        torch_dtype = _resolve_dtype(
            dtype, getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
        )
        self.tokenizer = AutoTokenizer.from_pretrained(
            tokenizer or model, trust_remote_code=trust_remote_code
        )
        hf_model = AutoModelForCausalLM.from_pretrained(
            model, dtype=torch_dtype, trust_remote_code=trust_remote_code
        ).eval()
        derived = getattr(hf_config, "max_position_embeddings", None) or 2048
        max_model_len = args["max_model_len"]
        if max_model_len is None or max_model_len == -1:
            max_model_len = derived
        elif max_model_len > derived:
            raise ValueError(
                f"User-specified max_model_len ({max_model_len}) is greater than the derived "
                f"max_model_len (max_position_embeddings={derived} or model_max_length=None "
                "in model's config.json). To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
            )
        self.model_config = ModelConfig(
            model=model,
            dtype=torch_dtype,
            max_model_len=int(max_model_len),
            logprobs_mode=args["logprobs_mode"],
            max_logprobs=args["max_logprobs"],
            enable_sleep_mode=args["enable_sleep_mode"],
            seed=seed,
        )
        self._shared = SharedModel(model=hf_model)
        self._workers = []
        for rank in range(tensor_parallel_size):
            config = WorkerConfig(
                parallel_config=ParallelConfig(world_size=tensor_parallel_size, rank=rank,
                                               placement_group=parallel.placement_group),
                model_config=self.model_config,
                weight_transfer_config=args["weight_transfer_config"],
                shared=self._shared,
            )
            worker = Worker(config, local_rank=rank, rank=rank, distributed_init_method="",
                            is_driver_worker=rank == 0)
            worker.load_model()
            self._workers.append(worker)

        # transformers 5.x renamed `past_key_values` to `cache`; rlrun allows either.
        forward_params = inspect.signature(hf_model.forward).parameters
        self._cache_kw = "cache" if "cache" in forward_params else "past_key_values"
        self._eos_token_id = self.tokenizer.eos_token_id
        generation_eos = getattr(hf_model.generation_config, "eos_token_id", None)
        if isinstance(generation_eos, int):
            generation_eos = [generation_eos]
        self._generation_eos = set(generation_eos or ()) - {self._eos_token_id}
        # Unseeded requests draw from one stream seeded by `seed`, as vLLM's workers seed
        # their global RNG with it: two engines with equal seeds sample alike.
        self._generator = torch.Generator().manual_seed(seed)
        self.request_counter = itertools.count()
        self._weight_version = "default"
        self._sleeping_tags: set[str] = set()
        self._paused = False

    def _select_executor(self, parallel: ParallelConfig, backend: str | None) -> None:
        # config/parallel.py checks the GPU count before looking at Ray.
        world_size = parallel.world_size
        gpu_count = torch.cuda.device_count()
        if world_size > 1 and backend != "ray" and gpu_count < world_size:
            raise ValueError(
                f"World size ({world_size}) is larger than the number of "
                f"available GPUs ({gpu_count}) in this node. If this is "
                "intentional and you are using:\n"
                "- ray, set '--distributed-executor-backend ray'.\n"
                "- multiprocessing, set '--nnodes' appropriately."
            )
        if backend == "ray":
            from vllm.v1.executor.ray_utils import _place_workers, initialize_ray_cluster

            initialize_ray_cluster(parallel)
            self.worker_bundle_indices, actors = _place_workers(
                parallel.placement_group, world_size
            )
            self._slot_actors.extend(actors)

    # --- generation -------------------------------------------------------------------------

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the sampling fields of the model's generation_config.json, as
        vLLM's default generation_config="auto" gives."""
        from transformers import GenerationConfig

        try:
            config = GenerationConfig.from_pretrained(self.model_config.model).to_diff_dict()
        except OSError:  # no generation_config.json
            config = {}
        diff = {p: config[p] for p in _GENERATION_CONFIG_PARAMS if config.get(p) is not None}
        if "max_new_tokens" in diff:
            diff["max_tokens"] = diff.pop("max_new_tokens")
        return SamplingParams(**diff)

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def get_world_size(self, include_dp: bool = True) -> int:
        return len(self._workers)

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: Any | None = None,
        priority: int | Sequence[int] | None = None,
        tokenization_kwargs: dict[str, Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Complete each prompt (a str, {"prompt": str} or {"prompt_token_ids": [...]}); the
        outputs come back in prompt order."""
        for name, value in (("lora_request", lora_request), ("priority", priority),
                            ("tokenization_kwargs", tokenization_kwargs),
                            ("mm_processor_kwargs", mm_processor_kwargs)):
            if value is not None:
                raise NotImplementedError(f"the vllm stand-in does not implement {name}")
        self._check_can_generate()
        if isinstance(prompts, str | dict):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(
                    f"The lengths of prompts ({len(prompts)}) "
                    f"and params ({len(params)}) must be the same."
                )
        requests = []
        for prompt, sp in zip(prompts, params, strict=True):
            text, ids = self._prompt_ids(prompt)
            self._check_prompt(ids)
            requests.append((text, ids, self._validated(sp)))
        outputs = []
        with self._shared.lock:
            for text, ids, sp in requests:
                request_id = str(next(self.request_counter))
                completions = [self._complete(ids, sp, k) for k in range(sp.n)]
                outputs.append(RequestOutput(
                    request_id=request_id, prompt=text, prompt_token_ids=ids,
                    prompt_logprobs=None, outputs=completions, finished=True,
                    num_cached_tokens=0,
                ))
        return outputs

    def _check_can_generate(self) -> None:
        if self._paused or self._sleeping_tags:
            raise RuntimeError(
                f"generate while the engine sleeps (asleep: {sorted(self._sleeping_tags)}, "
                f"scheduling paused: {self._paused}): vLLM would queue the request until "
                "wake_up, which a synchronous caller never reaches. Call wake_up first."
            )
        if any(w._weight_update_active for w in self._workers):
            raise RuntimeError(
                "generate during a weight update (start_weight_update without "
                "finish_weight_update): vLLM would run on half-loaded weights"
            )

    def _prompt_ids(self, prompt: Any) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, list(self.tokenizer(prompt).input_ids)
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            ids = [int(t) for t in prompt["prompt_token_ids"]]
            return prompt.get("prompt"), ids
        if isinstance(prompt, dict) and "prompt" in prompt:
            return prompt["prompt"], list(self.tokenizer(prompt["prompt"]).input_ids)
        raise TypeError(f"unsupported prompt: {prompt!r}")

    def _validated(self, params: SamplingParams) -> SamplingParams:
        num_logprobs = params.logprobs
        if num_logprobs:
            vocab = len(self.tokenizer)
            max_logprobs = vocab if self.model_config.max_logprobs == -1 else (
                self.model_config.max_logprobs)
            num_logprobs = vocab if num_logprobs == -1 else num_logprobs
            if num_logprobs > max_logprobs:
                raise VLLMValidationError(
                    f"Requested sample logprobs of {num_logprobs}, which is greater than max "
                    f"allowed: {max_logprobs}",
                    parameter="logprobs", value=num_logprobs,
                )
        return params

    def _check_prompt(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise VLLMValidationError("The decoder prompt cannot be empty")
        vocab = self._shared.model.config.vocab_size
        if max(prompt_ids) >= vocab or min(prompt_ids) < 0:
            raise VLLMValidationError(f"Token id {max(prompt_ids)} is out of vocabulary")
        max_len = self.model_config.max_model_len
        if len(prompt_ids) >= max_len:
            raise VLLMValidationError(
                f"The decoder prompt (length {len(prompt_ids)}) plus the number of requested "
                f"output tokens (at least 1) is longer than the maximum model length of "
                f"{max_len}. Make sure that `max_model_len` is no smaller than the number of "
                "text tokens (prompt + requested output tokens)."
            )

    @torch.inference_mode()
    def _complete(self, prompt_ids: list[int], params: SamplingParams, index: int
                  ) -> CompletionOutput:
        generator = (self._generator if params.seed is None
                     else torch.Generator().manual_seed(params.seed + index))
        model = self._shared.model
        max_model_len = self.model_config.max_model_len
        max_tokens = (max_model_len - len(prompt_ids) if params.max_tokens is None
                      else params.max_tokens)
        eos = None if params.ignore_eos else self._eos_token_id
        stop_ids = set(params.stop_token_ids or ())
        if not params.ignore_eos:
            stop_ids |= self._generation_eos
        # What min_tokens holds back: every stop token, EOS included even with ignore_eos.
        all_stop_ids = sorted(stop_ids | self._generation_eos | {self._eos_token_id})

        tokens: list[int] = []
        entries: list[dict[int, Logprob]] = []
        cumulative = 0.0
        text = ""
        finish_reason: str | None = None
        stop_reason: int | str | None = None
        past = None
        inputs = torch.tensor([prompt_ids])
        while finish_reason is None:
            out = model(input_ids=inputs, use_cache=True, logits_to_keep=1,
                        **{self._cache_kw: past})
            past = getattr(out, self._cache_kw)
            logits = out.logits[0, -1].float()
            token, values = self._sample(logits, params, generator,
                                         all_stop_ids if len(tokens) < params.min_tokens else [])
            tokens.append(token)
            inputs = torch.tensor([[token]])
            if params.logprobs is not None:
                entries.append(self._logprob_entry(values, token, params.logprobs))
                cumulative += float(values[token])

            stop_terminated = False
            if token == eos:
                finish_reason, stop_terminated = "stop", True
            elif token in stop_ids:
                finish_reason, stop_reason, stop_terminated = "stop", token, True
            elif len(prompt_ids) + len(tokens) >= max_model_len or len(tokens) >= max_tokens:
                finish_reason = "length"
            if params.detokenize:
                shown = tokens[:-1] if stop_terminated and not params.include_stop_str_in_output \
                    else tokens
                new_text = self.tokenizer.decode(
                    shown, skip_special_tokens=params.skip_special_tokens
                )
                if params.stop and len(tokens) > params.min_tokens:
                    match = _check_stop_strings(new_text, len(new_text) - len(text),
                                                list(params.stop),
                                                params.include_stop_str_in_output)
                    if match is not None:
                        stop_reason, cut = match
                        finish_reason = "stop"
                        if cut != -1:
                            new_text = new_text[:cut]
                text = new_text
        return CompletionOutput(
            index=index,
            text=text,
            token_ids=tokens,
            cumulative_logprob=None if params.logprobs is None else cumulative,
            logprobs=None if params.logprobs is None else entries,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            weight_versions=[WeightVersionSpan(self._weight_version, 0, len(tokens))],
        )

    def _sample(self, logits: torch.Tensor, params: SamplingParams, generator: torch.Generator,
                blocked: list[int]) -> tuple[int, torch.Tensor]:
        """Draw one token; return it and the values `logprobs_mode` reports."""
        mode = self.model_config.logprobs_mode
        raw = logits
        processed = logits.clone()
        if blocked:
            processed[blocked] = float("-inf")
        if params.temperature < _SAMPLING_EPS:
            token = int(torch.argmax(processed))
        else:
            if params.temperature != 1.0:
                processed = processed / params.temperature
            processed = _apply_top_k_top_p(processed, params.top_k, params.top_p)
            probs = torch.softmax(processed, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator))
        values = {
            "raw_logits": raw,
            "raw_logprobs": torch.log_softmax(raw, dim=-1),
            "processed_logits": processed,
            "processed_logprobs": torch.log_softmax(processed, dim=-1),
        }[mode]
        return token, values

    def _logprob_entry(self, values: torch.Tensor, token: int, num: int) -> dict[int, Logprob]:
        def logprob(tok: int) -> Logprob:
            return Logprob(
                logprob=float(values[tok]),
                rank=int((values > values[tok]).sum()) + 1,
                decoded_token=self.tokenizer.decode([tok]),
            )

        entry = {token: logprob(token)}
        count = values.numel() if num == -1 else num
        if count > 0:
            for tok in torch.topk(values, count).indices.tolist():
                entry.setdefault(tok, logprob(tok))
        return entry

    # --- workers ----------------------------------------------------------------------------

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        """Run a worker method (or `method(worker, *args, **kwargs)`) on every TP worker; one
        result per worker. Like vLLM's UniProcExecutor, TP=1 ignores `timeout`."""
        kwargs = kwargs or {}

        def call(worker: Worker) -> Any:
            if isinstance(method, str):
                return getattr(worker, method)(*args, **kwargs)
            return method(worker, *args, **kwargs)

        if len(self._workers) == 1:
            return [call(self._workers[0])]
        return _run_on_workers(self._workers, call, timeout, method)

    def apply_model(self, func: Callable[[torch.nn.Module], Any]) -> list[Any]:
        return self.collective_rpc(lambda worker: func(worker.get_model()))

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        """The stand-in keeps no prefix cache; resetting always succeeds."""
        return True

    def sleep(self, level: int = 1, mode: str = "abort", reset_connector: bool = True) -> None:
        """Pause scheduling (level 0); also drop the KV cache and offload the weights (level 1)
        or discard them (level 2)."""
        if mode not in _PAUSE_MODES:
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "wait" and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0":
            raise ValueError("'wait' mode can't be used in inproc-engine mode")
        if level >= 1 and not self.model_config.enable_sleep_mode:
            raise RuntimeError(
                "sleep(level>=1) needs LLM(enable_sleep_mode=True): without it vLLM 0.34 "
                "keeps every byte on the GPU and reports success"
            )
        self._paused = True
        if level < 1:
            return
        if "weights" in self._sleeping_tags:
            _log.warning("Executor is already sleeping.")
            return
        self.collective_rpc("sleep", kwargs={"level": level})
        self._sleeping_tags |= _SLEEP_TAGS

    def wake_up(self, tags: list[str] | None = None) -> bool:
        """Wake the given tags ("weights", "kv_cache", "scheduling"; None: all); True once the
        engine is fully awake. A tag that is not asleep is a warning, and nothing wakes."""
        if tags is not None and "scheduling" in tags:
            tags = [t for t in tags if t != "scheduling"]
        if tags is None or tags:
            self._executor_wake_up(tags)
        fully_awake = not self._sleeping_tags
        if fully_awake:
            self._paused = False
        return fully_awake

    def _executor_wake_up(self, tags: list[str] | None) -> None:
        if not self._sleeping_tags:
            _log.warning("Executor is not sleeping.")
            return
        for tag in tags or ():
            if tag not in self._sleeping_tags:
                _log.warning("Tag %s is not in sleeping tags %s", tag, self._sleeping_tags)
                return
        self.collective_rpc("wake_up", kwargs={"tags": tags})
        if tags:
            self._sleeping_tags -= set(tags)
        else:
            self._sleeping_tags.clear()

    # --- weight transfer (entrypoints/rl/offline.py) -----------------------------------------

    def init_weight_transfer_engine(self, request: WeightTransferInitRequest | dict) -> None:
        """Join the trainer's weight-transfer group; `request` is {"init_info": {...}}."""
        init_info_dict = request["init_info"] if isinstance(request, dict) else request.init_info
        self.collective_rpc("init_weight_transfer_engine", kwargs={"init_info": init_info_dict})

    def shutdown_weight_transfer_engine(self) -> None:
        self.collective_rpc("shutdown_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self.collective_rpc("start_weight_update")

    def update_weights(self, request: WeightTransferUpdateRequest | dict) -> None:
        """Receive one round of weights; `request` is {"update_info": {...}}."""
        update_info_dict = (
            request["update_info"] if isinstance(request, dict) else request.update_info
        )
        self.collective_rpc("update_weights", kwargs={"update_info": update_info_dict})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.collective_rpc("finish_weight_update")
        if weight_version is not None:
            self._weight_version = weight_version

    def update_weight_version(self, new_version: str) -> None:
        self._weight_version = new_version

    def get_weight_version(self) -> str:
        return self._weight_version
