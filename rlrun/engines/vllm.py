"""The vLLM engine (GPU): `vllm.LLM` in this process, with weights reloaded in place.

Written against vLLM 0.34. vLLM is imported when the engine is built, so this module imports
on machines without it; building the engine there says how to install it.

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

Weights. `load_weights` calls the worker method `reload_weights` (vllm/v1/worker/gpu_worker.py
line 645) through `LLM.collective_rpc` with the state dict as `(name, tensor)` pairs: the
model's own `load_weights` maps Hugging Face names onto vLLM's fused layers and shards them
over tensor-parallel ranks, then post-load processing runs as after a cold start. The engine
core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the tensors reach the
worker as Python objects; the multiprocess core would send RPC arguments through msgpack,
which does not rebuild tensors. Generation is synchronous and guarded by a lock, so nothing
is in flight while weights change; the prefix cache is reset afterwards because its KV blocks
were computed with the old weights. The NCCL path into vLLM workers (vLLM's
`weight_transfer` API) belongs to the GPU weight-sync backend, not to this engine.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from torch import Tensor

from rlrun.config import RolloutConfig
from rlrun.engines.base import SamplingParams, check_weight_names, encode_prompts
from rlrun.models import DTYPES, load_tokenizer, state_dict_shapes
from rlrun.records import Sample

log = logging.getLogger(__name__)


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout.engine=vllm needs vLLM, which is not installed: pip install 'rlrun[vllm]' "
            "on a machine with an NVIDIA GPU, or use rollout.engine=hf"
        ) from err
    return vllm


class VLLMEngine:
    """Generation with vLLM on the GPUs Ray gave this process."""

    def __init__(
        self,
        model_path: str,
        cfg: RolloutConfig,
        dtype: str = "bfloat16",
        tokenizer_path: str | None = None,
    ) -> None:
        vllm = import_vllm()
        if dtype not in DTYPES:
            raise ValueError(f"model.dtype={dtype!r}: choose one of {', '.join(DTYPES)}")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model_path,
            tokenizer=tokenizer_path or model_path,
            dtype=dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            logprobs_mode="processed_logprobs",
        )
        # Prompts are tokenized here, as the HF engine does, and passed to vLLM as token ids.
        self.tokenizer = load_tokenizer(tokenizer_path or model_path)
        self.version = 0
        self._shapes = state_dict_shapes(model_path)
        self._lock = threading.Lock()
        self._warned_filters = False

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

    def generate(self, prompts: list[str], sampling: SamplingParams) -> list[list[Sample]]:
        if not prompts:
            return []
        if (sampling.top_k > 0 or sampling.top_p < 1.0) and not self._warned_filters:
            log.warning(
                "vLLM reports log-probs renormalised over the top-k/top-p tokens it keeps "
                "(top_k=%s, top_p=%s); the learner's are over the full vocabulary",
                sampling.top_k, sampling.top_p,
            )
            self._warned_filters = True
        prompt_ids = encode_prompts(self.tokenizer, prompts)
        params = [self._params(sampling, i) for i in range(len(prompts))]
        with self._lock:
            outputs = self.llm.generate(
                [{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False
            )
            version = self.version
        return [
            [self._completion(ids, out, version) for out in request.outputs]
            for ids, request in zip(prompt_ids, outputs, strict=True)
        ]

    def _params(self, sampling: SamplingParams, prompt_index: int) -> Any:
        # vLLM gives the k-th of n samples seed + k; spacing prompts n apart keeps every
        # sample's stream distinct, so equal prompts in one call do not get equal samples.
        seed = None if sampling.seed is None else sampling.seed + prompt_index * sampling.n
        return self._vllm.SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=sampling.include_stop_str,
            seed=seed,
            logprobs=0,
            skip_special_tokens=True,
        )

    @staticmethod
    def _completion(prompt_ids: list[int], out: Any, version: int) -> Sample:
        if out.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM ended a completion with finish_reason={out.finish_reason!r}")
        token_ids = list(out.token_ids)
        logprobs = [step[tok].logprob for step, tok in zip(out.logprobs, token_ids, strict=True)]
        return Sample(
            prompt_ids=list(prompt_ids),
            response_ids=token_ids,
            response_text=out.text,
            behaviour_logprobs=logprobs,
            finish_reason=out.finish_reason,
            weight_version=version,
        )
