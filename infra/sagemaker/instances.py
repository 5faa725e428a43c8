"""How many GPUs a SageMaker instance type has, so the head can tell a node that joined Ray
short of GPUs (a driver or container fault) from one that has them all.

RL placement needs every GPU the job pays for: a rollout engine or learner rank without its GPU
never starts. Types not listed here (new GPU families, Trainium, Inferentia) are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# GPU families: instance size -> GPUs (AWS instance type pages).
_ONE_TO_FOUR_TO_EIGHT = {
    "xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
    "12xlarge": 4, "24xlarge": 4, "48xlarge": 8,
}
GPU_FAMILIES: dict[str, dict[str, int]] = {
    "g5": _ONE_TO_FOUR_TO_EIGHT,  # A10G 24 GB
    "g6": _ONE_TO_FOUR_TO_EIGHT,  # L4 24 GB
    "g6e": _ONE_TO_FOUR_TO_EIGHT,  # L40S 48 GB
    "g4dn": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
             "12xlarge": 4},  # T4 16 GB
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},  # V100 16 GB
    "p3dn": {"24xlarge": 8},  # V100 32 GB
    "p4d": {"24xlarge": 8},  # A100 40 GB
    "p4de": {"24xlarge": 8},  # A100 80 GB
    "p5": {"4xlarge": 1, "48xlarge": 8},  # H100 80 GB
    "p5e": {"48xlarge": 8},  # H200
    "p5en": {"48xlarge": 8},  # H200
}
# General purpose, compute and memory optimised families: no GPU.
_CPU_FAMILY = re.compile(r"^(?:m|c|r|t|x|z)\d+[a-z]*$")
_TYPE = re.compile(r"^ml\.([a-z0-9-]+)\.([a-z0-9]+)$")


def gpu_count(instance_type: str) -> int | None:
    """GPUs of `instance_type` (`ml.g5.12xlarge` -> 4, `ml.c5.9xlarge` -> 0); None when the
    type is not one this table knows."""
    match = _TYPE.match(instance_type)
    if match is None:
        return None
    family, size = match.groups()
    if family in GPU_FAMILIES:
        return GPU_FAMILIES[family].get(size)
    return 0 if _CPU_FAMILY.match(family) else None


def short_of_gpus(types: Mapping[str, str], gpus: Mapping[str, float]) -> list[str]:
    """The hosts whose Ray node has fewer GPUs than their instance type, described as
    `algo-2 (ml.g5.12xlarge): 2 of 4 GPUs`. `types` maps host -> instance type, `gpus` host ->
    the GPUs its node brought to Ray; hosts of unknown type are not checked."""
    short = []
    for host, have in gpus.items():
        want = gpu_count(types[host]) if host in types else None
        if want is not None and have < want:
            short.append(f"{host} ({types[host]}): {have:g} of {want} GPUs")
    return short
