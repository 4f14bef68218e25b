"""The simulated cluster's ground truth: what every node has left, and the kubelet's verdict on a pod.

Every policy places into its own ``SimCluster``; the simulator applies each placement here, after the
kubelet's admission (``placement.core.topology_manager.admit``, the exact model) has accepted it on the
node's current state, so that a policy can never over-commit: ``apply`` refuses, loudly, anything the
node does not hold, and a node whose GPU model the pod's ``gpu_spec`` does not allow. GPUs are tracked
in thousandths (``gpu_left``): a free GPU has ``GPU_MILLI``, one held whole 0, a shared one what its pods
left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.core.gpu_sets import GpuLinkTable, build_gpu_link_table
from placement.core.topology_manager import (
    AdmissionResult,
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    NodeResources,
    NumaCellResources,
    NumaMask,
    Pod,
    QOSClass,
    TopologyPolicy,
    TopologyScope,
    admit,
)
from placement.core.topology_manager.providers import NodeState
from placement.core.vocabulary import GPU_MILLI, GPU_SHARE
from placement.sim.trace import MIB, TraceNode, TracePod, kubelet_policy, node_topology, socket_layout

GPU_RESOURCE = "nvidia.com/gpu"
MAX_GPUS = 8
MAX_CELLS = 2


class OvercommitError(AssertionError):
    """A placement the node cannot hold (or, by the pod's GPU models, may not) reached ``apply``: a
    simulator bug, never a policy outcome."""


def kubelet_pod(pod: TracePod) -> Pod:
    """The pod as the kubelet sees it: one container; a GPU share is a ``GPU_SHARE`` device request."""
    if pod.shares_gpu:
        devices: tuple[tuple[str, int], ...] = ((GPU_SHARE, pod.gpu_milli),)
    elif pod.gpus:
        devices = ((GPU_RESOURCE, pod.gpus),)
    else:
        devices = ()
    container = Container(name="main", cpu_millis=pod.cpu_milli, memory=pod.memory_mib * MIB, devices=devices)
    return Pod(containers=(container,), qos=QOSClass.GUARANTEED if pod.guaranteed else QOSClass.BURSTABLE)


def exclusive_cpus(pod: TracePod) -> int:
    """CPUs the static CPU manager pins: Guaranteed pods with an integral CPU request."""
    return pod.cpu_milli // 1000 if pod.guaranteed and pod.cpu_milli % 1000 == 0 else 0


@dataclass(frozen=True)
class Placed:
    """A pod on a node: what ``release`` gives back."""

    node: int
    gpus: tuple[int, ...]
    cpu_cells: tuple[int, ...]  # exclusive CPUs taken per cell, in cell order


class SimCluster:
    """Free resources of every node as arrays (one row per trace node, in trace order)."""

    def __init__(self, nodes: Sequence[TraceNode], *, numa: bool = True) -> None:
        count = len(nodes)
        self.nodes = list(nodes)
        self.names = [n.name for n in nodes]
        self.cpu_capacity = np.array([n.cpu_milli for n in nodes], dtype=np.float64)
        self.memory_capacity = np.array([n.memory_mib for n in nodes], dtype=np.float64)
        self.cpu_free = self.cpu_capacity.copy()
        self.memory_free = self.memory_capacity.copy()
        self.gpu_count = np.array([n.gpus for n in nodes], dtype=np.int64)
        self.models = np.array([n.model for n in nodes], dtype=np.str_)
        self._model_masks: dict[tuple[str, ...], npt.NDArray[np.bool_]] = {}
        # Thousandths left per GPU slot; slots past a node's GPUs hold 0 and never fit anything.
        self.gpu_left: npt.NDArray[np.float64] = np.zeros((count, MAX_GPUS))
        self.gpu_cell = np.zeros((count, MAX_GPUS), dtype=np.int64)
        self.sockets = np.zeros(count, dtype=np.int64)
        self.cell_cpus = np.zeros((count, MAX_CELLS), dtype=np.int64)
        self.cell_cpus_free = np.zeros((count, MAX_CELLS), dtype=np.int64)
        self.numa = numa
        self.policies = [TopologyPolicy(kubelet_policy(n.name, numa=numa)) for n in nodes]
        tables: dict[tuple[str, int, tuple[int, ...]], GpuLinkTable] = {}
        self.tables: list[GpuLinkTable] = []
        for row, node in enumerate(nodes):
            sockets, gpu_socket = socket_layout(node)
            self.sockets[row] = sockets
            self.gpu_left[row, : node.gpus] = GPU_MILLI
            self.gpu_cell[row, : node.gpus] = gpu_socket
            cpus = node.cpu_milli // 1000
            share = cpus // sockets  # as node_topology splits them: the last socket takes the remainder
            for s in range(sockets):
                self.cell_cpus[row, s] = share if s < sockets - 1 else cpus - (sockets - 1) * share
            key = (node.model, node.gpus, gpu_socket)
            if key not in tables:
                tables[key] = build_gpu_link_table(node_topology(node))
            self.tables.append(tables[key])
        self.cell_cpus_free[:] = self.cell_cpus
        self.gpu_capacity_milli = float(self.gpu_count.sum() * GPU_MILLI)

    # --- reading ------------------------------------------------------------------------------------------

    def fits(self, pod: TracePod) -> npt.NDArray[np.bool_]:
        """[N] node-level fit: the pod's GPU models, CPUs, memory, and enough GPUs with the pod's thousandths
        left each."""
        ok = (self.cpu_free >= pod.cpu_milli) & (self.memory_free >= pod.memory_mib)
        if pod.gpus:
            ok &= (self.gpu_left >= pod.gpu_milli).sum(axis=1) >= pod.gpus
        if pod.gpu_models:
            ok &= self.allowed_models(pod.gpu_models)
        return ok

    def allowed_models(self, models: tuple[str, ...]) -> npt.NDArray[np.bool_]:
        """[N] the nodes whose GPU model is one of ``models`` (read-only; one array per distinct spec)."""
        mask = self._model_masks.get(models)
        if mask is None:
            mask = self._model_masks[models] = np.isin(self.models, models)
            mask.flags.writeable = False
        return mask

    def free_gpus(self, row: int) -> frozenset[int]:
        """GPUs nothing holds any part of."""
        return frozenset(int(i) for i in np.flatnonzero(self.gpu_left[row] >= GPU_MILLI))

    def node_resources(self, row: int) -> NodeResources:
        """The node as its kubelet's resource managers see it now."""
        sockets = int(self.sockets[row])
        cells = tuple(
            NumaCellResources(id=s, cpus=int(self.cell_cpus[row, s]), free_cpus=int(self.cell_cpus_free[row, s]))
            for s in range(sockets)
        )
        devices: list[DeviceGroup] = []
        count = int(self.gpu_count[row])
        for s in range(sockets):
            in_cell = [g for g in range(count) if self.gpu_cell[row, g] == s]
            if not in_cell:
                continue
            whole = sum(1 for g in in_cell if self.gpu_left[row, g] >= GPU_MILLI)
            devices.append(DeviceGroup(GPU_RESOURCE, (s,), len(in_cell), whole))
            share_left = int(sum(self.gpu_left[row, g] for g in in_cell))
            devices.append(DeviceGroup(GPU_SHARE, (s,), GPU_MILLI * len(in_cell), share_left))
        kubelet = KubeletConfig(
            topology_policy=self.policies[row], scope=TopologyScope.POD, cpu_manager_policy=CpuManagerPolicy.STATIC
        )
        return NodeResources(cells=cells, devices=tuple(devices), kubelet=kubelet)

    def admit(self, row: int, pod: TracePod) -> AdmissionResult:
        return admit(self.node_resources(row), kubelet_pod(pod))

    # --- changing -----------------------------------------------------------------------------------------

    def apply(self, row: int, pod: TracePod, gpus: Sequence[int], cpu_cells: Sequence[int]) -> Placed:
        """Charge ``pod`` on ``row``: exclusive CPUs packed into ``cpu_cells`` first, as the static CPU
        manager does with the kubelet's hint (the rest from anywhere), and ``gpus`` by index."""
        if len(gpus) != pod.gpus or len(set(gpus)) != len(gpus):
            raise OvercommitError(f"{pod.name}: needs {pod.gpus} distinct GPUs, got {list(gpus)}")
        if pod.gpu_models and self.nodes[row].model not in pod.gpu_models:
            raise OvercommitError(
                f"{pod.name} may run on {'|'.join(pod.gpu_models)} only, not on {self.names[row]} "
                f"({self.nodes[row].model or 'no GPU model'})"
            )
        if self.cpu_free[row] < pod.cpu_milli or self.memory_free[row] < pod.memory_mib:
            raise OvercommitError(f"{pod.name} does not fit the CPUs or memory left on {self.names[row]}")
        if any(g >= self.gpu_count[row] or self.gpu_left[row, g] < pod.gpu_milli for g in gpus):
            raise OvercommitError(f"{pod.name}: GPUs {list(gpus)} of {self.names[row]} lack {pod.gpu_milli}")
        taken = [0] * MAX_CELLS
        wanted = exclusive_cpus(pod)
        if wanted:
            node = self.node_resources(row)
            state = NodeState(node)
            affinity = NumaMask.from_ids(cpu_cells) if cpu_cells else None
            state.allocate_cpus(wanted, affinity, init_container=False)  # raises when the CPUs are not there
            for s in range(int(self.sockets[row])):
                taken[s] = int(self.cell_cpus_free[row, s]) - state.free_cpus[s]
                self.cell_cpus_free[row, s] = state.free_cpus[s]
        self.cpu_free[row] -= pod.cpu_milli
        self.memory_free[row] -= pod.memory_mib
        for g in gpus:
            self.gpu_left[row, g] -= pod.gpu_milli
        return Placed(node=row, gpus=tuple(gpus), cpu_cells=tuple(taken))

    def release(self, pod: TracePod, placed: Placed) -> None:
        row = placed.node
        self.cpu_free[row] += pod.cpu_milli
        self.memory_free[row] += pod.memory_mib
        for g in placed.gpus:
            self.gpu_left[row, g] += pod.gpu_milli
        self.cell_cpus_free[row] += np.array(placed.cpu_cells, dtype=np.int64)

    def check(self) -> None:
        """Capacity is never exceeded and nothing is handed back twice."""
        if (self.cpu_free < 0).any() or (self.memory_free < 0).any() or (self.gpu_left < 0).any():
            raise OvercommitError("a node holds more than its capacity")
        if (self.cpu_free > self.cpu_capacity).any() or (self.gpu_left > GPU_MILLI).any():
            raise OvercommitError("a node got back more than it gave")
        if (self.cell_cpus_free < 0).any() or (self.cell_cpus_free > self.cell_cpus).any():
            raise OvercommitError("a NUMA cell's exclusive CPUs went out of range")
