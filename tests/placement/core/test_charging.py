"""The one charging rule: what a placed pod takes from its node and its NUMA cells."""

from __future__ import annotations

import numpy as np

from placement.core.charging import charge_cells, charge_node
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import (
    CPU,
    GPU_MILLI,
    GPU_RESOURCE,
    GPU_SHARE,
    MEMORY,
    FloatArray,
    PodDemand,
    demand_of,
)

RESOURCES = (CPU, MEMORY, GPU_RESOURCE, GPU_SHARE)
GIB = 1024**3


def _demand(*, cpus: int, gpus: int = 0, share: int = 0, qos: QOSClass = QOSClass.GUARANTEED) -> PodDemand:
    devices = ((GPU_RESOURCE, gpus),) if gpus else ((GPU_SHARE, share),) if share else ()
    return demand_of(Pod((Container("main", cpus * 1000, 4 * GIB, devices=devices),), qos=qos))


def _free() -> FloatArray:
    free = np.zeros((len(RESOURCES), 2))
    free[0], free[1], free[2], free[3] = 16, 64 * GIB, 4, 4 * GPU_MILLI
    return free


def test_known_gpus_are_charged_on_the_cells_they_sit_on_with_all_their_thousandths() -> None:
    free = _free()
    charge_cells(free, RESOURCES, _demand(cpus=4, gpus=2), cells=[0], gpu_cells=[1, None])
    assert free[:, 0].tolist() == [12, 60 * GIB, 4, 4 * GPU_MILLI]  # CPUs and memory on the pod's cell
    assert free[:, 1].tolist() == [16, 64 * GIB, 3, 3 * GPU_MILLI]  # one GPU on cell 1; one outside the cells


def test_unknown_gpus_are_charged_on_every_cell_the_pod_uses() -> None:
    free = _free()
    charge_cells(free, RESOURCES, _demand(cpus=2, gpus=1), cells=[0, 1])
    assert free[2].tolist() == [3, 3]
    assert free[3].tolist() == [3 * GPU_MILLI, 3 * GPU_MILLI]


def test_a_shared_gpu_is_charged_by_its_thousandths_and_a_burstable_pod_pins_nothing() -> None:
    free = _free()
    charge_cells(free, RESOURCES, _demand(cpus=2, share=250, qos=QOSClass.BURSTABLE), cells=[1], gpu_cells=[1])
    assert free[:, 1].tolist() == [16, 64 * GIB, 4, 4 * GPU_MILLI - 250]
    assert free[:, 0].tolist() == _free()[:, 0].tolist()


def test_the_node_loses_its_requests_and_a_whole_gpu_for_sharing_too() -> None:
    free = np.array([32_000.0, 128.0 * GIB, 8, 8 * GPU_MILLI])
    charge_node(free, RESOURCES, _demand(cpus=4, gpus=2))
    assert free.tolist() == [28_000, 124 * GIB, 6, 6 * GPU_MILLI]
