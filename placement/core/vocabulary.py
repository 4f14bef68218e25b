"""The placement core's vocabulary: resource names, the per-node arrays decisions read, a pod's demand, and
the target workload the fragmentation measure weighs against.

Every core module speaks these terms and imports them from here; this module imports only the kubelet's
model (``topology_manager``) and the published resource names, so nothing in the core imports in a circle.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from kubenexus.topology import nrt
from placement.core.topology_manager import Container, Pod, QOSClass, TopologyPolicy
from placement.core.topology_manager.providers import (
    device_requests,
    guaranteed_cpus,
    memory_requests,
    pod_level_request,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
SmallIntArray = npt.NDArray[np.int8]
CellIdArray = npt.NDArray[np.int16]
MemoryGroupArray = npt.NDArray[np.uint8]

GPU_RESOURCE = nrt.GPU_RESOURCE  # the device plugin's whole GPUs, as the agent publishes them
MAX_NUMA = 8  # the kubelet's default max-allowable-numa-nodes; masks stay at 255
CPU = "cpu"
MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"
# A pod that shares a GPU asks for thousandths of one GPU under this name (the Alibaba trace's own resource);
# one GPU offers GPU_MILLI of it, and a shared GPU holds pods whose shares add up to at most that.
GPU_SHARE = "alibabacloud.com/gpu-milli"
GPU_MILLI = 1000


class PolicyCode(enum.IntEnum):
    NONE = 0
    BEST_EFFORT = 1
    RESTRICTED = 2
    SINGLE_NUMA_NODE = 3


class ScopeCode(enum.IntEnum):
    CONTAINER = 0
    POD = 1


POLICY_CODES = {
    TopologyPolicy.NONE.value: PolicyCode.NONE,
    TopologyPolicy.BEST_EFFORT.value: PolicyCode.BEST_EFFORT,
    TopologyPolicy.RESTRICTED.value: PolicyCode.RESTRICTED,
    TopologyPolicy.SINGLE_NUMA_NODE.value: PolicyCode.SINGLE_NUMA_NODE,
}


class RejectionKind(enum.StrEnum):
    """Why a node cannot take a pod, for programs: set where the reason arises, carried to the wire."""

    UNKNOWN_NODE = "unknown-node"  # no topology report for this node name
    NO_TOPOLOGY = "no-topology"  # the node reported no NUMA cells
    INSUFFICIENT_RESOURCES = "insufficient-resources"  # free amounts do not fit
    KUBELET_TOPOLOGY = "kubelet-topology"  # the node's kubelet Topology Manager would refuse the pod
    INTENT = "intent"  # the pod's own NUMA intent cannot be met here
    ISOLATION = "isolation"  # the cells it would use are held by an isolated pod
    HELD_FOR_GANG = "held-for-gang"  # kept free for a pod group that has waited too long
    # kube-scheduler's own constraints. The node itself refuses the pod, and evicting pods would not help
    # (its name, selector and affinity, taints, cordon, readiness: UnschedulableAndUnresolvable upstream):
    NODE_CONSTRAINT = "node-constraint"
    # Pods already placed are in the way (host ports, inter-pod anti-affinity, topology spread): evicting
    # some may help (Unschedulable upstream).
    POD_CONSTRAINT = "pod-constraint"


class Rejected(NamedTuple):
    """Why a node cannot take a pod: a sentence for people, its kind for programs."""

    message: str
    kind: RejectionKind


def is_memory_resource(name: str) -> bool:
    return name == MEMORY or name.startswith(HUGEPAGES_PREFIX)


@dataclass(frozen=True)
class NodeArrays:
    """What the vectorised decision reads, one row per index slot (see ``ClusterIndex.arrays``).

    ``cell_total`` is what the kubelet judges "preferred" on: every CPU of the cell, allocatable memory
    and hugepages, every device; ``cell_free`` what it judges "possible" on. Slots past a node's cell
    count hold zeros and ``cell_ids`` -1.
    """

    resources: tuple[str, ...]  # axis 0 of the resource arrays
    cell_total: FloatArray  # [R, N, K]
    cell_free: FloatArray  # [R, N, K]
    node_allocatable: FloatArray  # [R, N]; cpu in millicores
    node_free: FloatArray  # [R, N]: allocatable minus the requests of every pod we know on the node
    numa_count: SmallIntArray  # [N]; 0 for a free slot
    policy: SmallIntArray  # [N] PolicyCode
    scope: SmallIntArray  # [N] ScopeCode
    cpu_static: BoolArray  # [N]
    memory_static: BoolArray  # [N]
    cell_ids: CellIdArray  # [N, K] kernel NUMA ids, -1 past the node's cells
    cell_claimed: BoolArray  # [N, K] a pod placed by us uses the cell
    cell_isolated: BoolArray  # [N, K] an isolated pod placed by us holds the cell
    # [N, K] the Static memory manager's NUMA groups (its machine state's ``Cells`` of the cells whose
    # ``NumberOfAssignments`` > 0) as bitmasks over cell positions, from the pods we know (whose cells we
    # know) on a Static node: 0 for a cell holding no memory of such a pod; else the cells its memory is
    # grouped with, itself included (only its own bit: a single-NUMA assignment). See
    # ``feasibility.memory_groups``.
    memory_group: MemoryGroupArray
    unaligned_gpus: npt.NDArray[np.int16]  # [N] healthy GPUs without a NUMA node: in node_allocatable, in no cell
    bandwidth: npt.NDArray[np.float32]  # [N, K] HMAT local read bandwidth, MB/s; 0 where unknown
    spanning_bandwidth: npt.NDArray[np.float32]  # [N] mean over the cells where known; 0 where none is
    local_distance: npt.NDArray[np.float32]  # [N, K] SLIT distance of each cell to itself; 0 where unknown
    spanning_distance: npt.NDArray[np.float32]  # [N] mean SLIT distance over every ordered pair of cells
    # [N] the most thousandths left on any one GPU (GPU_MILLI on a free GPU): a share must fit on ONE GPU,
    # which the node's summed GPU_SHARE cannot tell. None where the caller tracks no sharing.
    gpu_share_free: FloatArray | None = None
    # [N, G] thousandths left on each of the node's GPUs (0 past its GPUs, and for a GPU taken or unhealthy),
    # and the workload the fragmentation score measures against; scoring only.
    gpu_left: npt.NDArray[np.int16] | None = None
    workload: TargetWorkload | None = None
    # [N] each node's GPU model, as a code into ``gpu_model_names`` (-1: unknown); set only where the workload
    # names GPU models (``TargetWorkload.constrained``), for the fragmentation measure.
    gpu_model: IntArray | None = None
    gpu_model_names: tuple[str, ...] = ()

    def workload_of(self, row: int) -> TargetWorkload | None:
        """The target workload's tables for the node of ``row`` (its GPU model's)."""
        if self.workload is None or not self.workload.constrained:
            return self.workload
        code = -1 if self.gpu_model is None else int(self.gpu_model[row])
        return self.workload.for_model(self.gpu_model_names[code] if code >= 0 else None)

    def column(self, resource: str) -> int | None:
        try:
            return self.resources.index(resource)
        except ValueError:
            return None


@dataclass(frozen=True)
class PodDemand:
    """A pod's requests as the resource managers count them at pod level (``pod_level_request``)."""

    node_requests: tuple[tuple[str, float], ...]  # node-level fit, the pod's overhead included; cpu in millicores
    exclusive_cpus: int  # CPU manager hints: Guaranteed pods with integral CPUs only
    memory_requests: tuple[tuple[str, float], ...]  # memory and hugepages, bytes
    device_requests: tuple[tuple[str, float], ...]  # device-plugin resources, counts
    guaranteed: bool
    containers: int  # how many containers the kubelet admits one by one (init containers included)
    source: Pod | None = None  # the pod itself, for the exact model


def demand_of(pod: Pod) -> PodDemand:
    """The pod-level requests the kubelet's pod scope would see; the node-level fit counts the same totals and
    the pod's overhead on top."""
    containers = pod.all_containers()
    memory_names = sorted({name for c in containers for name in memory_requests(c)})
    device_names = sorted({name for c in containers for name in device_requests(c)})

    def level(per_container: Callable[[Container], int]) -> int:
        return pod_level_request(pod, per_container)

    memory = tuple((n, float(level(_amount_of(memory_requests, n)))) for n in memory_names)
    devices = tuple((n, float(level(_amount_of(device_requests, n)))) for n in device_names)
    cpu_millis = float(level(lambda c: c.cpu_millis))
    node_requests = ((CPU, cpu_millis),) if cpu_millis else ()
    return PodDemand(
        node_requests=_with_overhead(node_requests + memory + devices, pod.overhead),
        exclusive_cpus=level(lambda c: guaranteed_cpus(pod, c)),
        memory_requests=memory,
        device_requests=devices,
        guaranteed=pod.qos is QOSClass.GUARANTEED,
        containers=len(containers),
        source=pod,
    )


def _with_overhead(
    requests: tuple[tuple[str, float], ...], overhead: tuple[tuple[str, int], ...]
) -> tuple[tuple[str, float], ...]:
    """``PodRequests`` with the pod's overhead added: for the node-level fit only, never per container."""
    if not overhead:
        return requests
    totals = dict(requests)
    for name, amount in overhead:
        totals[name] = totals.get(name, 0.0) + amount
    return tuple((name, amount) for name, amount in totals.items() if amount > 0)


def _amount_of(requests: Callable[[Container], dict[str, int]], name: str) -> Callable[[Container], int]:
    return lambda container: requests(container).get(name, 0)


# --- the target workload of the fragmentation measure ---------------------------------------------------


@dataclass(frozen=True, order=True)
class PodShape:
    """What the measure reads of a pod: CPUs (millicores), GPUs (whole ones, or thousandths of one), and the
    GPU models it accepts (``nvidia.com/gpu.product`` values; () any model, and a CPU-only pod names none)."""

    cpu_milli: float
    gpu_milli: int  # per GPU: GPU_MILLI for whole GPUs, less for a share of one GPU, 0 without GPUs
    gpus: int  # whole GPUs; 1 for a share; 0 without GPUs
    gpu_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.gpus < 0 or not 0 <= self.gpu_milli <= GPU_MILLI:
            raise ValueError(f"invalid pod shape {self}")
        if (self.gpus == 0) != (self.gpu_milli == 0) or (self.gpu_milli < GPU_MILLI and self.gpus > 1):
            raise ValueError(f"a pod shares ONE GPU or asks whole GPUs, not {self}")
        if self.gpu_models and not self.gpus:
            raise ValueError(f"a pod asking no GPU accepts no GPU model, not {self}")


def shape_of(demand: PodDemand) -> PodShape:
    """The shape of a pod's pod-level requests."""
    cpu = dict(demand.node_requests).get(CPU, 0.0)
    devices = dict(demand.device_requests)
    whole = int(devices.get(GPU_RESOURCE, 0))
    share = int(devices.get(GPU_SHARE, 0))
    if whole:
        return PodShape(cpu, GPU_MILLI, whole)
    if share:
        return PodShape(cpu, min(share, GPU_MILLI), 1)
    return PodShape(cpu, 0, 0)


# Before a service has seen any pod: mostly whole-GPU pods of 1 to 8 GPUs with 8 CPUs per GPU, some pods
# sharing half a GPU and some CPU-only pods. A learning model (``placement.state.workload``) moves away from
# it as pods arrive.
DEFAULT_SHAPES: Mapping[PodShape, float] = {
    PodShape(8000, GPU_MILLI, 1): 0.40,
    PodShape(16000, GPU_MILLI, 2): 0.10,
    PodShape(32000, GPU_MILLI, 4): 0.10,
    PodShape(64000, GPU_MILLI, 8): 0.10,
    PodShape(4000, 500, 1): 0.10,
    PodShape(4000, 0, 0): 0.20,
}


@dataclass(frozen=True)
class TargetWorkload:
    """The shapes and their frequencies, folded into the tables the vectorised measure reads.

    The tables are those of nodes whose GPU model is ``node_model``: a shape that names GPU models
    (``PodShape.gpu_models``) without it cannot run there and loses all the node's GPUs, as a shape asking
    too many GPUs does (the FGD simulator's ``NoAccess``). ``for_model`` gives the tables of another model;
    without a shape naming models, every model's tables are these.
    """

    shapes: tuple[tuple[PodShape, float], ...]  # frequency (summing to 1), most frequent first
    cpu_levels: FloatArray  # [C] distinct CPU requests, ascending: a node's CPU bucket is how many fit
    # [C+1, GPU_MILLI+1]: of a GPU with v thousandths left on a node in CPU bucket c, what is lost to the
    # shapes asking one GPU or part of one: v x (1 - the frequency of those whose CPUs fit and that ask
    # at most v); the shapes asking no GPU or several, or that cannot run on the node's model, lose it all.
    lost: FloatArray
    # [C+1, W+1]: the frequency of the shapes asking 2+ whole GPUs, at most w, whose CPUs fit.
    whole_table: FloatArray
    node_model: str | None = None
    constrained: bool = False  # some shape names GPU models: the tables differ by the node's model
    _models: dict[str | None, TargetWorkload] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, weights: Mapping[PodShape, float], *, node_model: str | None = None) -> TargetWorkload:
        """From shapes and non-negative weights (any scale); at least one weight must be positive. The tables
        are for nodes of ``node_model`` (None: a node whose model is unknown)."""
        items = [(shape, float(weight)) for shape, weight in weights.items() if weight > 0]
        total = sum(weight for _, weight in items)
        if not items or not np.isfinite(total):
            raise ValueError("a target workload needs at least one shape with a finite positive weight")
        shapes = tuple(sorted(((s, w / total) for s, w in items), key=lambda item: (-item[1], item[0])))
        cpu_levels = np.unique([s.cpu_milli for s, _ in shapes]).astype(np.float64)
        # One GPU, whole or shared, is one rule: any GPU with that much left; several whole GPUs another.
        single = np.zeros((len(cpu_levels) + 1, GPU_MILLI + 1))
        multi = np.zeros((len(cpu_levels) + 1, max(s.gpus for s, _ in shapes) + 1))
        for shape, frequency in shapes:
            if shape.gpu_models and node_model not in shape.gpu_models:
                continue  # it cannot run on such a node: it loses every GPU there
            c = int(np.searchsorted(cpu_levels, shape.cpu_milli)) + 1
            if shape.gpus == 1:
                single[c, shape.gpu_milli] += frequency
            elif shape.gpus > 1:
                multi[c, shape.gpus] += frequency
        usable = single.cumsum(axis=0).cumsum(axis=1)
        return cls(
            shapes=shapes,
            cpu_levels=cpu_levels,
            lost=np.arange(GPU_MILLI + 1) * (1.0 - usable),
            whole_table=multi.cumsum(axis=0).cumsum(axis=1),
            node_model=node_model,
            constrained=any(s.gpu_models for s, _ in shapes),
        )

    def for_model(self, model: str | None) -> TargetWorkload:
        """The tables for nodes of GPU model ``model`` (None: unknown); built once per model and kept."""
        if not self.constrained or model == self.node_model:
            return self
        tables = self._models.get(model)
        if tables is None:
            tables = self._models[model] = TargetWorkload.of(dict(self.shapes), node_model=model)
        return tables


DEFAULT_WORKLOAD = TargetWorkload.of(DEFAULT_SHAPES)
