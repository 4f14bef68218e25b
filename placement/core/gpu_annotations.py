"""What a pod asks of its node's GPUs, read from its annotations.

Keys::

    gpu.scheduling.kubenexus.io/min-memory   each GPU's memory at least: a Kubernetes quantity, e.g. 40Gi or
                                             80G (decimal: 80G is what an "80 GB" card's 81559 MiB exceeds)
    gpu.scheduling.kubenexus.io/models       the GPU models accepted: GPU Feature Discovery product names,
                                             comma-separated, e.g. NVIDIA-H100-80GB-HBM3,NVIDIA-H200

Annotations only: a label value cannot hold the comma of a list. The values are validated on every pod,
so a typo is refused whatever the pod asks for; the requirements apply to a pod that asks for GPUs
(``placement.core.pods``), judged by ``placement.core.constraints.gpu_labels``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from placement.core.annotations import GPU_MIN_MEMORY_KEY, GPU_MODELS_KEY, InvalidValue
from placement.core.constraints.constraint_types import GpuRequirements
from placement.core.constraints.selectors import label_value_error
from placement.core.quantity import quantity_value

MIB = 2**20
# No GPU comes near: the largest hold a few hundred GiB. A larger value is a mistake (a unit slip, 80Ti for
# 80Gi), refused rather than left to make the pod unschedulable everywhere.
MAX_MIN_MEMORY = Decimal(2) ** 44  # 16Ti
MAX_MODELS = 32
_MEMORY_ACCEPTED = "a positive Kubernetes quantity of memory per GPU up to 16Ti, e.g. 40Gi or 80G"
_MODELS_ACCEPTED = (
    f"up to {MAX_MODELS} GPU Feature Discovery product names (nvidia.com/gpu.product label values) "
    "separated by ',', e.g. NVIDIA-H100-80GB-HBM3,NVIDIA-A100-SXM4-80GB"
)


class GpuAnnotationError(InvalidValue):
    """A GPU requirement annotation the placement service refuses."""


def parse_gpu_requirements(annotations: Mapping[str, str]) -> GpuRequirements | None:
    """The pod's GPU requirements; None when it states none. Raises ``GpuAnnotationError`` on the first
    invalid value."""
    memory = annotations.get(GPU_MIN_MEMORY_KEY)
    models = annotations.get(GPU_MODELS_KEY)
    if memory is None and models is None:
        return None
    mib = 0 if memory is None else _min_memory_mib(memory)
    return GpuRequirements(
        min_memory="" if memory is None else memory.strip(),
        min_memory_mib=mib,
        models=() if models is None else _models(models),
    )


def _min_memory_mib(value: str) -> int:
    amount = quantity_value(value)
    if amount is None or not amount.is_finite():
        raise GpuAnnotationError(GPU_MIN_MEMORY_KEY, value, _MEMORY_ACCEPTED, "not a Kubernetes quantity")
    if amount <= 0:
        raise GpuAnnotationError(GPU_MIN_MEMORY_KEY, value, _MEMORY_ACCEPTED, "must be positive")
    if amount > MAX_MIN_MEMORY:
        raise GpuAnnotationError(GPU_MIN_MEMORY_KEY, value, _MEMORY_ACCEPTED, "more than any GPU holds")
    return math.ceil(amount / MIB)  # GFD reports whole MiB: 1.5Gi is 1536 MiB, 1G is 954 MiB (953.67 up)


def _models(value: str) -> tuple[str, ...]:
    names: list[str] = []
    for item in value.split(","):
        name = item.strip()
        if not name:
            raise GpuAnnotationError(GPU_MODELS_KEY, value, _MODELS_ACCEPTED, "empty entry")
        if label_value_error(GPU_MODELS_KEY, name) is not None:
            raise GpuAnnotationError(GPU_MODELS_KEY, value, _MODELS_ACCEPTED, f"{name!r} is not a label value")
        if name not in names:
            names.append(name)
    if len(names) > MAX_MODELS:
        raise GpuAnnotationError(GPU_MODELS_KEY, value, _MODELS_ACCEPTED, f"{len(names)} models")
    return tuple(names)
