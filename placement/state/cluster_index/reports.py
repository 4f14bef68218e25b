"""Nodes' reports into slots: a node's topology written into its slot's arrays, a removed node's slot freed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kubenexus.topology.labels import decode_node_metadata, local_read_bandwidth
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import GPU_RESOURCE, cell_resources, decode_nrt
from placement.core.foreign_nrt import SOURCE as FOREIGN_NRT
from placement.core.gpu_sets import build_gpu_link_table
from placement.core.vocabulary import (
    CPU,
    GPU_MILLI,
    GPU_SHARE,
    MAX_NUMA,
    POLICY_CODES,
    PolicyCode,
    ScopeCode,
    is_memory_resource,
)
from placement.state.cluster_index.index_records import (
    _MILLI,
    GpuShape,
    _Node,
)
from placement.state.cluster_index.pod_charges import IndexPods


class IndexReports(IndexPods):
    """The reports role: slots taken, written and freed."""

    def upsert_node(self, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        """A Node's labels and annotations (labels mode); raises ``TopologyDecodeError`` on a bad model."""
        self.upsert_topology(name, decode_node_metadata(labels, annotations))

    def upsert_nrt(self, obj: Mapping[str, Any]) -> None:
        """A NodeResourceTopology object (NRT mode); the object name is the node name."""
        topology = decode_nrt(obj)
        self.upsert_topology(str(obj["metadata"]["name"]), topology)

    def upsert_topology(self, name: str, topology: NodeTopology) -> None:
        """The latest report for ``name``, from either mode: replaces the node's totals and availability."""
        with self.lock:
            self.changes += 1
            node = self._nodes.get(name)
            if node is None:
                if not self._free_slots:
                    self._allocate(self._capacity * 2)
                node = _Node(name=name, slot=self._free_slots.pop())
                self._nodes[name] = node
                self._slot_by_name[name] = node.slot
                self._slot_names[node.slot] = self._name_array[node.slot] = name
                self.membership += 1
                self.facts.attach(name, node.slot)
                # Pods listed before the node's report: charged from now on (``_reconcile`` below decides
                # whether this report already accounts for them).
                node.pods.update(self._waiting.pop(name, {}))
            self._write_report(node, topology)
            self._reconcile(node)
            self._rebuild(node)
            self.dra.set_topology(name, topology)

    def remove_node(self, name: str) -> None:
        with self.lock:
            self.changes += 1
            node = self._nodes.pop(name, None)
            if node is None:
                return
            del self._slot_by_name[name]
            if node.pods:
                # Its pods are kept by name, charged again if a report brings the node back; a fresh
                # report must account for them anew.
                for entry in node.pods.values():
                    entry.accounted = False
                self._waiting[name] = node.pods
            self._clear_slot(node.slot)
            self._slot_names[node.slot] = None
            self._name_array[node.slot] = ""
            self.membership += 1
            self.facts.detach(node.slot)
            self.dra.set_topology(name, None)
            self._free_slots.append(node.slot)

    def _clear_slot(self, slot: int) -> None:
        for array in (self.cell_total, self.reported_free, self.cell_free):
            array[:, slot, :] = 0
        self.node_allocatable[:, slot] = 0
        self.node_free[:, slot] = 0
        for scalar in (self.numa_count, self.policy, self.scope, self.cpu_static, self.memory_static):
            scalar[slot] = 0
        self.cell_ids[slot] = -1
        self.cell_claimed[slot] = False
        self.cell_isolated[slot] = False
        self.memory_group[slot] = 0
        self.unaligned_gpus[slot] = 0
        self.bandwidth[slot] = 0
        self.spanning_bandwidth[slot] = 0
        self.local_distance[slot] = 0
        self.spanning_distance[slot] = 0
        self.gpu_share_free[slot] = 0
        self.gpu_left[slot] = 0
        self.slot_changes[slot] = self.changes

    def _write_report(self, node: _Node, topology: NodeTopology) -> None:
        slot = node.slot
        self._clear_slot(slot)
        cells = sorted(topology.numa_cells, key=lambda c: c.id)
        self.numa_count[slot] = min(len(cells), np.iinfo(np.int8).max)
        kubelet = topology.kubelet
        if kubelet is not None:
            self.policy[slot] = POLICY_CODES.get(kubelet.topology_manager_policy, PolicyCode.NONE)
            self.scope[slot] = ScopeCode.POD if kubelet.topology_manager_scope == "pod" else ScopeCode.CONTAINER
            self.cpu_static[slot] = kubelet.cpu_manager_policy == "static"
            self.memory_static[slot] = kubelet.memory_manager_policy == "Static"
        in_arrays = len(cells) <= MAX_NUMA  # a wider machine is decided on node-level amounts only
        for position, cell in enumerate(cells):
            for amount in cell_resources(topology, cell):
                column = self._column(amount.name)
                scale = _MILLI if amount.name == CPU else 1.0
                self.node_allocatable[column, slot] += amount.allocatable * scale
                if not in_arrays:
                    continue
                # "Preferred" is judged on every CPU and every device, but on allocatable memory.
                total = amount.allocatable if is_memory_resource(amount.name) else amount.capacity
                self.cell_total[column, slot, position] = total
                self.reported_free[column, slot, position] = min(amount.available, total)
            if in_arrays:
                self.cell_ids[slot, position] = cell.id
                self.bandwidth[slot, position] = local_read_bandwidth(topology, cell.id) or 0
        if in_arrays:
            known = self.bandwidth[slot][self.bandwidth[slot] > 0]
            self.spanning_bandwidth[slot] = known.mean() if known.size else 0
        if topology.distances is not None and in_arrays:
            pairs = [[topology.distances.get(a.id, b.id) or 0 for b in cells] for a in cells]
            for position in range(len(cells)):
                self.local_distance[slot, position] = pairs[position][position]
            flat = [d for row in pairs for d in row]
            # The kubelet's CalculateAverageFor: every ordered pair, self-distances included.
            self.spanning_distance[slot] = sum(flat) / len(flat) if flat and all(flat) else 0
        unaligned = sum(1 for gpu in topology.gpus if gpu.numa_node is None and gpu.healthy)
        gpu = self._column(GPU_RESOURCE)
        if unaligned:
            self.node_allocatable[gpu, slot] += unaligned
            self.unaligned_gpus[slot] = unaligned
        # Every GPU also offers GPU_MILLI thousandths to pods that share one, in the same cells.
        share = self._column(GPU_SHARE)
        self.node_allocatable[share, slot] = GPU_MILLI * self.node_allocatable[gpu, slot]
        self.cell_total[share, slot] = GPU_MILLI * self.cell_total[gpu, slot]
        self.reported_free[share, slot] = GPU_MILLI * self.reported_free[gpu, slot]
        node.fingerprint = topology.pods_fingerprint
        node.note = next((w.message for w in topology.warnings if w.source == FOREIGN_NRT), None)
        node.gpus = self._gpu_shape(topology)
        self._widen_gpus(len(node.gpus.healthy) if node.gpus is not None else 0)
        self.generation[slot] += 1

    def _gpu_shape(self, topology: NodeTopology) -> GpuShape | None:
        if not topology.gpus:
            return None
        names = {f"GPU{gpu.index}" for gpu in topology.gpus}
        key = (
            tuple((g.index, g.numa_node, g.healthy) for g in topology.gpus),
            tuple(link for link in topology.links if link.a in names and link.b in names),
        )
        shape = self._gpu_shapes.get(key)
        if shape is None:
            shape = GpuShape(
                table=build_gpu_link_table(topology),
                numa_of={g.index: g.numa_node for g in topology.gpus},
                healthy=frozenset(g.index for g in topology.gpus if g.healthy),
            )
            self._gpu_shapes[key] = shape
        return shape
