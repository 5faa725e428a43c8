"""Stand-in for vllm/v1/executor/ray_utils.py: how vLLM 0.34 checks a placement group and picks
the bundles its TP workers go to when `distributed_executor_backend="ray"`.

The checks and their error texts are vLLM's (`initialize_ray_cluster`,
`get_bundles_for_indices`). Placing the workers is the stand-in's own: one zero-CPU actor per
TP rank holding `VLLM_RAY_PER_WORKER_GPUS` GPUs of its bundle, as vLLM's worker actors do, so
two engines that pick the same bundles compete for them. vLLM waits for its workers without a
timeout; the stand-in gives up after $RLRUN_VLLM_STAND_IN_TIMEOUT_S and says why.
"""

from __future__ import annotations

import os
from typing import Any

from vllm._stand_in import timeout_s

try:
    import ray
    from ray.util import placement_group_table
except ImportError:  # pragma: no cover - ray is a dependency of rlrun
    ray = None


def get_bundles_for_indices(
    placement_group: Any,
    bundle_indices: list[int],
    world_size: int,
) -> list[tuple[int, str, str]]:
    """(bundle index, node id, node ip) for the bundles named in VLLM_RAY_BUNDLE_INDICES."""
    assert len(bundle_indices) == world_size, (
        "VLLM_RAY_BUNDLE_INDICES must have the same size"
        f" as the world size, but got {bundle_indices=} "
        f"and {world_size=}"
    )
    assert len(set(bundle_indices)) == len(bundle_indices), (
        "VLLM_RAY_BUNDLE_INDICES cannot have duplicate values,"
        f" but got {bundle_indices=}"
    )
    pg_bundle_to_node = placement_group_table(placement_group)["bundles_to_node_id"]
    node_id_to_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    return [
        (bid, pg_bundle_to_node[bid], node_id_to_ip[pg_bundle_to_node[bid]])
        for bid in bundle_indices
    ]


def get_bundles_sorted_by_node(placement_group: Any) -> list[tuple[int, str, str]]:
    """(bundle index, node id, node ip) of every GPU bundle, the driver's node first."""
    bundle_to_node = placement_group_table(placement_group)["bundles_to_node_id"]
    node_id_to_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
    bundles = [
        (idx, bundle_to_node.get(idx), node_id_to_ip[bundle_to_node.get(idx)])
        for idx, bundle in enumerate(placement_group.bundle_specs)
        if bundle.get("GPU")
    ]
    driver_node = ray.get_runtime_context().get_node_id()
    bundles.sort(key=lambda item: (0 if item[1] == driver_node else 1, item[1]))
    return bundles


def initialize_ray_cluster(parallel_config: Any, ray_address: str | None = None) -> None:
    """Check the current placement group (or make one, as vLLM does outside any) and store it
    in `parallel_config.placement_group`."""
    if ray is None or not ray.is_initialized():
        raise RuntimeError(
            "the vllm stand-in does not start or join a Ray cluster (vLLM would call "
            "ray.init here); call ray.init first"
        )
    device_str = "GPU"
    current_placement_group = (
        parallel_config.placement_group or ray.util.get_current_placement_group()
    )
    if current_placement_group:
        device_bundles = 0
        for bundle in current_placement_group.bundle_specs:
            bundle_devices = bundle.get(device_str, 0)
            if bundle_devices > 1:
                raise ValueError(f"Placement group bundle cannot have more than 1 {device_str}.")
            if bundle_devices:
                device_bundles += 1
        if parallel_config.world_size > device_bundles:
            raise ValueError(
                f"The number of required {device_str}s exceeds the total "
                f"number of available {device_str}s in the placement group. "
                f"Required number of devices: {parallel_config.world_size}. "
                f"Total number of devices: {device_bundles}."
            )
    else:
        current_placement_group = ray.util.placement_group(
            [{device_str: 1.0} for _ in range(parallel_config.world_size)], strategy="PACK"
        )
        ray.get(current_placement_group.ready(), timeout=timeout_s(1800))
    parallel_config.placement_group = current_placement_group


def _place_workers(placement_group: Any, world_size: int) -> tuple[list[int], list[Any]]:
    """Pick the TP workers' bundles as RayExecutorV2 does and hold their GPUs with one actor
    per rank; returns the bundle indices by rank and the actors (kill them to release)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    indices_env = os.environ.get("VLLM_RAY_BUNDLE_INDICES", "")
    if indices_env:
        bundles = get_bundles_for_indices(
            placement_group, list(map(int, indices_env.split(","))), world_size
        )
    else:
        bundles = get_bundles_sorted_by_node(placement_group)
    bundle_ids = [bundle_id for bundle_id, _, _ in bundles[:world_size]]
    num_gpus = float(os.environ.get("VLLM_RAY_PER_WORKER_GPUS", "1.0"))

    class TPWorkerSlot:
        def ready(self) -> bool:
            return True

    slot = ray.remote(TPWorkerSlot)
    actors = [
        slot.options(
            num_cpus=0,
            num_gpus=num_gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=bundle_id
            ),
        ).remote()
        for bundle_id in bundle_ids
    ]
    wait_s = timeout_s()
    ready, _ = ray.wait([a.ready.remote() for a in actors], num_returns=len(actors),
                        timeout=wait_s)
    if len(ready) < len(actors):
        for actor in actors:
            ray.kill(actor)
        raise RuntimeError(
            f"TP workers for bundles {bundle_ids} could not all be placed within {wait_s:g} s: "
            "their GPUs are held by someone else (another engine in the same placement group "
            "without distinct VLLM_RAY_BUNDLE_INDICES?). vLLM 0.34 would hang here."
        )
    return bundle_ids, actors
