"""Stand-in for vllm/distributed/weight_transfer/base.py: the request types `LLM` takes and the
engine base class that parses them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.config.weight_transfer import WeightTransferConfig

WeightTransferUpdatePayload = dict[str, Any] | list[dict[str, Any]]


@dataclass
class WeightTransferInitInfo(ABC):  # noqa: B024
    """Base class for backend-specific initialization info."""


@dataclass
class WeightTransferUpdateInfo(ABC):  # noqa: B024
    """Base class for backend-specific weight update info."""


@dataclass
class WeightTransferInitRequest:
    """API-level weight transfer initialization request."""

    init_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class WeightTransferUpdateRequest:
    """API-level weight update request."""

    update_info: WeightTransferUpdatePayload = field(default_factory=dict)


class WeightTransferEngine(ABC):
    """Worker-side transport of trainer weights into one worker's model."""

    init_info_cls: type
    update_info_cls: type

    supports_draft_weight_update: bool = True

    def __init__(
        self,
        config: WeightTransferConfig,
        vllm_config: Any,
        device: torch.device,
        model: torch.nn.Module,
    ) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self.device = device
        self.model = model

    def parse_init_info(self, init_dict: dict[str, Any]) -> Any:
        """Build the typed init info; a bad key is a ValueError, as in vLLM."""
        try:
            return self.init_info_cls(**init_dict)
        except TypeError as e:
            raise ValueError(f"Invalid init_info for {self.__class__.__name__}: {e}") from e

    def parse_update_info(self, update_dict: dict[str, Any]) -> Any:
        """Build the typed update info; a bad key is a ValueError, as in vLLM."""
        try:
            return self.update_info_cls(**update_dict)
        except TypeError as e:
            raise ValueError(f"Invalid update_info for {self.__class__.__name__}: {e}") from e

    @abstractmethod
    def init_transfer_engine(self, init_info: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def start_weight_update(self) -> None:
        raise NotImplementedError

    @abstractmethod
    def finish_weight_update(self) -> None:
        raise NotImplementedError

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """Receive one weight update chunk and load it into the model."""
        self.receive_weights(self.parse_update_info(update_info))

    @abstractmethod
    def receive_weights(self, update_info: Any) -> None:
        raise NotImplementedError

    @abstractmethod
    def shutdown(self) -> None:
        raise NotImplementedError
