"""Stand-in for vllm/distributed/utils.py: `StatelessProcessGroup`, the TCPStore rendezvous that
vLLM's weight-transfer groups are built on.

As in vLLM, rank 0 hosts the store at (host, port) and its constructor blocks until all
`world_size` ranks have connected, so the trainer and every engine must enter concurrently.
The store wait is capped by $RLRUN_VLLM_STAND_IN_TIMEOUT_S (see vllm/_stand_in.py).
"""

from __future__ import annotations

import dataclasses
import pickle
import socket
from collections import deque
from datetime import timedelta
from typing import Any

import torch

from vllm._stand_in import timeout_s


@dataclasses.dataclass
class StatelessProcessGroup:
    """A metadata store plus the rank and world size of a group outside torch's global one."""

    rank: int
    world_size: int
    store: torch._C._distributed_c10d.Store

    data_expiration_seconds: int = 3600  # 1 hour

    # dst rank -> counter
    send_dst_counter: dict[int, int] = dataclasses.field(default_factory=dict)
    # src rank -> counter
    recv_src_counter: dict[int, int] = dataclasses.field(default_factory=dict)
    broadcast_send_counter: int = 0
    broadcast_recv_src_counter: dict[int, int] = dataclasses.field(default_factory=dict)

    # A deque to store the data entries, with key and timestamp.
    entries: deque[tuple[str, float]] = dataclasses.field(default_factory=deque)

    def __post_init__(self) -> None:
        assert self.rank < self.world_size
        self.send_dst_counter = {i: 0 for i in range(self.world_size)}
        self.recv_src_counter = {i: 0 for i in range(self.world_size)}
        self.broadcast_recv_src_counter = {i: 0 for i in range(self.world_size)}

    def broadcast_obj(self, obj: Any | None, src: int) -> Any:
        """Broadcast an object from a source rank to all other ranks (through the store)."""
        if self.rank == src:
            key = f"broadcast_from/{src}/{self.broadcast_send_counter}"
            self.store.set(key, pickle.dumps(obj))
            self.broadcast_send_counter += 1
            return obj
        key = f"broadcast_from/{src}/{self.broadcast_recv_src_counter[src]}"
        recv_obj = pickle.loads(self.store.get(key))
        self.broadcast_recv_src_counter[src] += 1
        return recv_obj

    @staticmethod
    def create(
        host: str,
        port: int,
        rank: int,
        world_size: int,
        data_expiration_seconds: int = 3600,
        store_timeout: int = 300,
        listen_socket: socket.socket | None = None,
    ) -> StatelessProcessGroup:
        """Join (rank > 0) or host (rank 0) the TCPStore at (host, port)."""
        store = torch.distributed.TCPStore(
            host,
            port,
            world_size,
            is_master=rank == 0,
            timeout=timedelta(seconds=timeout_s(store_timeout)),
            wait_for_workers=True,
            master_listen_fd=listen_socket.fileno() if listen_socket is not None else None,
            use_libuv=False,
        )
        return StatelessProcessGroup(
            rank=rank,
            world_size=world_size,
            store=store,
            data_expiration_seconds=data_expiration_seconds,
        )
