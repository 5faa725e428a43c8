"""GPUs per SageMaker instance type, and the hosts whose Ray node came up short of them."""

from __future__ import annotations

import pytest

from infra.sagemaker.instances import gpu_count, short_of_gpus


@pytest.mark.parametrize(("instance_type", "gpus"), [
    ("ml.g5.xlarge", 1), ("ml.g5.12xlarge", 4), ("ml.g5.48xlarge", 8), ("ml.g6e.12xlarge", 4),
    ("ml.g4dn.12xlarge", 4), ("ml.p3.16xlarge", 8), ("ml.p4d.24xlarge", 8),
    ("ml.p4de.24xlarge", 8), ("ml.p5.48xlarge", 8), ("ml.p5.4xlarge", 1),
    ("ml.c5.9xlarge", 0), ("ml.m5.large", 0), ("ml.r6i.4xlarge", 0), ("ml.c6gn.16xlarge", 0),
    ("ml.trn1.32xlarge", None), ("ml.g5.3xlarge", None), ("g5.12xlarge", None),
])
def test_gpu_count(instance_type: str, gpus: int | None) -> None:
    assert gpu_count(instance_type) == gpus


def test_short_of_gpus_names_each_host_with_what_it_has_and_what_its_type_has() -> None:
    types = {"algo-1": "ml.g5.12xlarge", "algo-2": "ml.g5.12xlarge", "algo-3": "ml.c5.xlarge",
             "algo-4": "ml.trn1.32xlarge"}
    gpus = {"algo-1": 4.0, "algo-2": 2.0, "algo-3": 0.0, "algo-4": 0.0, "algo-5": 0.0}
    assert short_of_gpus(types, gpus) == ["algo-2 (ml.g5.12xlarge): 2 of 4 GPUs"]
    assert short_of_gpus({}, gpus) == []
