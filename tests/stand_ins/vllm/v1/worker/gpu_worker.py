"""Stand-in for vllm/v1/worker/gpu_worker.py: the worker methods `LLM.collective_rpc` reaches.

A stand-in `LLM` with tensor_parallel_size=t has t of these, one per TP rank, all standing for
the same CPU model (rank 0 writes it). Their weight-update session rules and error texts are
vLLM's: no transfer engine without `weight_transfer_config`, one session at a time, updates
only inside a session, and a failed update ends the session but leaves the update
incomplete. Two checks are the stand-in's own, turning crashes into errors: updating weights
whose memory is asleep (vLLM: illegal memory access).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from vllm._stand_in import WorkerConfig, load_weights
from vllm.distributed.weight_transfer.base import WeightTransferEngine
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

# distributed/weight_transfer/factory.py registers these backends.
_BACKENDS = ("nccl", "ipc", "sparse_nccl", "sharded_rdt", "nccl_m2n", "modelexpress")
_SLEEP_TAGS = frozenset(("weights", "kv_cache"))


class _UnavailableEngine(WeightTransferEngine):
    """A registered backend the stand-in cannot run on CPU: refused at init, as early as can be."""

    def init_transfer_engine(self, init_info: Any) -> None:
        backend = self.config.backend
        if backend == "ipc":
            raise RuntimeError(
                "ipc weight transfer needs CUDA (it shares GPU memory by CUDA IPC handles); "
                "the vllm stand-in runs on CPU: use backend 'nccl'"
            )
        raise NotImplementedError(f"the vllm stand-in does not implement backend {backend!r}")

    def parse_init_info(self, init_dict: dict[str, Any]) -> Any:
        self.init_transfer_engine(None)

    def start_weight_update(self) -> None:
        self.init_transfer_engine(None)

    def finish_weight_update(self) -> None:
        self.init_transfer_engine(None)

    def receive_weights(self, update_info: Any) -> None:
        self.init_transfer_engine(None)

    def shutdown(self) -> None:
        pass


class Worker:
    """One TP rank of a stand-in engine."""

    def __init__(
        self,
        vllm_config: WorkerConfig,
        local_rank: int,
        rank: int,
        distributed_init_method: str,
        is_driver_worker: bool = False,
    ) -> None:
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.local_rank = local_rank
        self.rank = rank
        self.distributed_init_method = distributed_init_method
        self.is_driver_worker = is_driver_worker
        self.device = torch.device("cpu")
        self.weight_transfer_engine: WeightTransferEngine | None = None
        self._weight_update_active = False
        self._incomplete_weight_updates: set[bool] = set()
        self._asleep: set[str] = set()

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        """Bind the shared model and build the weight-transfer engine, as vLLM does at the end
        of loading (an unknown backend fails here, inside `LLM(...)`)."""
        if load_dummy_weights:
            raise NotImplementedError("the vllm stand-in does not implement dummy weights")
        config = self.vllm_config.weight_transfer_config
        if config is None:
            return
        if config.backend not in _BACKENDS:
            raise ValueError(
                f"Invalid weight transfer backend: {config.backend}. "
                f"Available engines: {list(_BACKENDS)}"
            )
        engine_cls = NCCLWeightTransferEngine if config.backend == "nccl" else _UnavailableEngine
        self.weight_transfer_engine = engine_cls(
            config, self.vllm_config, self.device, self.get_model()
        )

    def get_model(self) -> torch.nn.Module:
        return self.vllm_config.shared.model

    def sleep(self, level: int = 1) -> None:
        """Level 1 keeps the weights (offloaded to host memory in vLLM) and drops the KV cache;
        level 2 discards the weights: they come back as zeros, so a generation that runs on
        them before a weight update shows it."""
        if level == 2 and self.rank == 0:
            with self.vllm_config.shared.lock, torch.no_grad():
                for param in self.get_model().parameters():
                    param.zero_()
        self._asleep |= _SLEEP_TAGS

    def wake_up(self, tags: list[str] | None = None) -> None:
        if tags is None:
            self._asleep.clear()
        else:
            self._asleep -= set(tags)

    def reload_weights(
        self,
        weights_iterator: Iterable[tuple[str, torch.Tensor]] | None = None,
        weights_path: str | None = None,
        is_checkpoint_format: bool = True,
    ) -> None:
        """Load checkpoint-format (Hugging Face name, full tensor) pairs into the model."""
        if weights_path is not None or weights_iterator is None:
            raise NotImplementedError("the vllm stand-in reloads from weights_iterator only")
        if not is_checkpoint_format:
            raise NotImplementedError(
                "the vllm stand-in has no kernel-format (fused) weights; "
                "pass is_checkpoint_format=True with Hugging Face names"
            )
        self._check_weights_awake("reload_weights")
        with self.vllm_config.shared.lock:
            load_weights(self.get_model(), weights_iterator, write=self.rank == 0)

    def _check_weights_awake(self, what: str) -> None:
        if "weights" in self._asleep:
            raise RuntimeError(
                f"{what} while the engine's 'weights' memory is asleep: vLLM 0.34 would crash "
                "with an illegal memory access. Call wake_up(tags=['weights']) first."
            )

    def _check_weight_transfer_engine(self) -> None:
        if self.weight_transfer_engine is None:
            raise RuntimeError(
                "Weight transfer not configured. "
                "Please set weight_transfer_config to enable weight transfer."
            )

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Parse `init_info` for the backend and join the trainer's group."""
        self._check_weight_transfer_engine()
        assert self.weight_transfer_engine is not None
        typed_init_info = self.weight_transfer_engine.parse_init_info(init_info)
        self.weight_transfer_engine.init_transfer_engine(typed_init_info)

    def shutdown_weight_transfer_engine(self) -> None:
        """Release a trainer connection without shutting down inference."""
        if self._weight_update_active:
            raise RuntimeError("Cannot release a trainer connection during a weight update")
        if self.weight_transfer_engine is not None:
            self.weight_transfer_engine.shutdown()

    def has_incomplete_weight_update(self) -> bool:
        return bool(self._incomplete_weight_updates)

    def start_weight_update(self) -> None:
        """Start a new weight update session."""
        self._check_weight_transfer_engine()
        assert self.weight_transfer_engine is not None
        if self._weight_update_active:
            raise RuntimeError(
                "start_weight_update called while a weight update is already "
                "active. Call finish_weight_update first."
            )
        self._incomplete_weight_updates.add(False)
        self.weight_transfer_engine.start_weight_update()
        self._weight_update_active = True

    def update_weights(self, update_info: dict | list[dict]) -> None:
        """Receive one weight update chunk from the trainer."""
        self._check_weight_transfer_engine()
        assert self.weight_transfer_engine is not None
        if not self._weight_update_active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        try:
            self._check_weights_awake("update_weights")
            if isinstance(update_info, list):
                parallel_config = self.parallel_config
                local_update_info = update_info[
                    parallel_config.data_parallel_index * parallel_config.world_size + self.rank
                ]
            else:
                local_update_info = update_info
            self.weight_transfer_engine.update_weights(local_update_info)
        except BaseException:
            self._weight_update_active = False
            raise

    def finish_weight_update(self) -> None:
        """Finish the current weight update session."""
        self._check_weight_transfer_engine()
        assert self.weight_transfer_engine is not None
        if not self._weight_update_active:
            raise RuntimeError(
                "finish_weight_update called without a matching start_weight_update."
            )
        self.weight_transfer_engine.finish_weight_update()
        self._weight_update_active = False
        self._incomplete_weight_updates.discard(False)

    def shutdown(self) -> None:
        if self.weight_transfer_engine is not None:
            self.weight_transfer_engine.shutdown()
