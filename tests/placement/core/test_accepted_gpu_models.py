"""``accepted_gpu_models``: the GPU models a pod's required rules leave it, for the fragmentation measure's
workload; and the models a bound pod's object carries into its usage."""

from __future__ import annotations

from typing import Any

import pytest

from placement.core.constraints.constraint_types import (
    GpuRequirements,
    NodeAffinity,
    NodeSelectorTerm,
    Operator,
    PodConstraints,
    Requirement,
)
from placement.core.constraints.gpu_labels import GPU_PRODUCT_LABEL, accepted_gpu_models
from placement.core.pods import pod_usage

A100, H100, L4 = "NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"


def _in(*models: str, key: str = GPU_PRODUCT_LABEL, operator: Operator = Operator.IN) -> Requirement:
    return Requirement(key, operator, models)


def _required(*terms: tuple[Requirement, ...]) -> NodeAffinity:
    return NodeAffinity(required=tuple(NodeSelectorTerm(match_expressions=term) for term in terms))


@pytest.mark.parametrize(
    ("constraints", "models"),
    [
        (PodConstraints(), ()),
        (PodConstraints(gpu=GpuRequirements(models=(H100, A100))), (A100, H100)),
        (PodConstraints(node_selector=((GPU_PRODUCT_LABEL, L4), ("zone", "a"))), (L4,)),
        (PodConstraints(node_affinity=_required((_in(H100),), (_in(A100, L4),))), (A100, H100, L4)),  # terms ORed
        (PodConstraints(node_affinity=_required((_in(H100, A100), _in(A100, L4)))), (A100,)),  # ANDed in a term
        (PodConstraints(node_affinity=_required((_in(H100),), (_in("a", key="zone"),))), ()),  # a term leaves any
        (PodConstraints(node_affinity=_required((_in(H100, operator=Operator.NOT_IN),))), ()),
        (
            PodConstraints(
                gpu=GpuRequirements(models=(H100, A100)), node_affinity=_required((_in(A100, L4),), (_in(A100),))
            ),
            (A100,),
        ),
        (PodConstraints(gpu=GpuRequirements(models=(H100,)), node_selector=((GPU_PRODUCT_LABEL, L4),)), ()),
    ],
)
def test_the_models_a_pods_rules_accept(constraints: PodConstraints, models: tuple[str, ...]) -> None:
    assert accepted_gpu_models(constraints) == models


def _bound(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    gpu = {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    return {
        "metadata": {"namespace": "team", "name": "train", "annotations": annotations or {}},
        "spec": {"nodeName": "g", "containers": [{"name": "main", "resources": gpu}], **spec},
        "status": {"phase": "Running"},
    }


def test_a_bound_pod_carries_the_models_its_rules_accept() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [H100, A100]}]}
                ]
            }
        }
    }
    usage = pod_usage(_bound({"affinity": affinity}))
    assert usage is not None
    assert usage.gpu_models == (A100, H100)
    usage = pod_usage(_bound({}, {"gpu.scheduling.kubenexus.io/models": L4}))
    assert usage is not None
    assert usage.gpu_models == (L4,)
    # Rules that do not parse leave the bound pod counted, as any model's.
    broken = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}
    usage = pod_usage(_bound({"affinity": broken}))
    assert usage is not None
    assert usage.gpu_models == ()
