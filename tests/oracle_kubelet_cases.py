"""The kubelet oracle's cases (tests/oracles/kubelet) fed to the project's admission model, and both answers
made comparable.

A case is what a node's kubelet is made of, as the kubelet reads it: cadvisor's ``MachineInfo`` (NUMA nodes
with cores and threads, memory, hugepages, distances), a ``KubeletConfiguration`` (v1beta1 field names), the
device plugins' devices (``pluginapi.Device``), and pods as the API serves them: the ``pods`` the kubelet
admitted before, in order, then ``pod``. The oracle admits every pod in turn through v1.37.2's Topology
Manager and its device, CPU and memory managers and answers, per pod, the managers' state before it (the
per-NUMA amounts the node reports) and ``PodAdmitResult`` with each container's affinity.

The project's side of each step: the pod through the service's own conversion (``pod_spec_from_object``,
``pod_model``), the node as the per-NUMA counts the model reads (``NodeResources``) built from the state the
oracle reports before that pod (the model never keeps state between pods: the service learns it from the
node's reports), and ``placement.core.topology_manager.admit``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.core.pods import pod_model, pod_spec_from_object
from placement.core.topology_manager import (
    AdmissionResult,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    Pod,
    TopologyPolicy,
    TopologyScope,
    admit,
    parse_policy_options,
)

Json = Any
TOPOLOGY_MANAGER = "topologymanager: "


@dataclass(frozen=True)
class Verdict:
    """One admission, comparable: affinities (container, NUMA ids or None for "any", preferred) only when
    admitted (a rejected pod's containers are not run)."""

    admit: bool
    reason: str
    message: str
    affinities: tuple[tuple[str, tuple[int, ...] | None, bool], ...] = ()


def kubelet_config(case: Mapping[str, Json]) -> KubeletConfig:
    """The model's view of the case's KubeletConfiguration (the defaults decodeCase applies)."""
    kubelet = case["kubelet"]
    return KubeletConfig(
        topology_policy=TopologyPolicy(kubelet.get("topologyManagerPolicy") or "none"),
        scope=TopologyScope(kubelet.get("topologyManagerScope") or "container"),
        options=parse_policy_options(kubelet.get("topologyManagerPolicyOptions") or {}),
        cpu_manager_policy=CpuManagerPolicy(kubelet.get("cpuManagerPolicy") or "none"),
        memory_manager_policy=MemoryManagerPolicy(kubelet.get("memoryManagerPolicy") or "None"),
    )


def node_resources(case: Mapping[str, Json], state: Mapping[str, Json]) -> NodeResources:
    """The node as the model reads it, from the managers' state the oracle reports (``NodeState``).

    Per NUMA node: every CPU (``cpus``, reserved ones included) and the CPU manager's free ones; the memory
    manager's allocatable and free amount per memory type, its ``Cells`` and ``NumberOfAssignments``; the
    devices grouped by resource and NUMA nodes, all of them counted (unhealthy ones too: "preferred" is
    judged on ``allDevices``), the healthy ones no pod holds free.
    """
    config = kubelet_config(case)
    cells = []
    for numa in state.get("numa") or ():
        pools = tuple(
            MemoryPool(name, table["allocatable"], table["free"])
            for name, table in sorted((numa.get("memory") or {}).items())
            if name == "memory" or table["total"] > 0
        )
        free = numa["free"] if config.cpu_manager_policy is CpuManagerPolicy.STATIC else numa["cpus"] - numa["reserved"]
        assigned = numa.get("assignments", 0)
        cells.append(
            NumaCellResources(
                id=numa["id"],
                cpus=numa["cpus"],
                free_cpus=free,
                memory=pools,
                memory_group=tuple(numa.get("cells") or ()) if assigned else (),
                memory_assignments=assigned,
            )
        )
    groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for device in state.get("devices") or ():
        key = (device["resource"], tuple(sorted(device.get("numa") or ())))
        counts = groups.setdefault(key, [0, 0, 0])  # total, free, healthy
        counts[0] += 1
        counts[1] += int(device["healthy"] and not device["inUse"])
        counts[2] += int(device["healthy"])
    distances = tuple(tuple(int(d) for d in numa.get("distances") or ()) for numa in case["machine"]["topology"])
    return NodeResources(
        cells=tuple(cells),
        distances=distances if all(distances) else (),
        devices=tuple(DeviceGroup(r, ids, *counts) for (r, ids), counts in groups.items()),
        kubelet=config,
    )


def model_pod(pod: Mapping[str, Json]) -> Pod:
    return pod_model(pod_spec_from_object(pod), "pod")


def model_verdict(result: AdmissionResult) -> Verdict:
    if not result.admit:
        return Verdict(False, result.reason, result.message)
    return Verdict(
        True,
        "",
        "",
        tuple(
            (a.container, None if a.hint.affinity is None else a.hint.affinity.ids, a.hint.preferred)
            for a in result.affinities
        ),
    )


KUBELET_PANIC = "KubeletPanic"  # not a kubelet reason: the oracle's step where upstream's code panicked


def oracle_verdict(step: Mapping[str, Json]) -> Verdict:
    if step.get("panic"):
        return Verdict(False, KUBELET_PANIC, step["panic"])
    if not step["admit"]:
        return Verdict(False, step["reason"], step["message"])
    return Verdict(
        True,
        "",
        "",
        tuple(
            (c["name"], None if c["affinity"] is None else tuple(c["affinity"]), c["preferred"])
            for c in step.get("containers") or ()
        ),
    )


def machine_node(case: Mapping[str, Json]) -> NodeResources:
    """The node before any pod, from the machine alone: what a kubelet that cannot start is judged on."""
    cells = []
    for numa in case["machine"]["topology"]:
        cpus = sum(len(core["thread_ids"]) for core in numa.get("cores") or ())
        cells.append(NumaCellResources(id=numa["node_id"], cpus=cpus, free_cpus=cpus))
    distances = tuple(tuple(int(d) for d in numa.get("distances") or ()) for numa in case["machine"]["topology"])
    return NodeResources(
        cells=tuple(cells), distances=distances if all(distances) else (), kubelet=kubelet_config(case)
    )


def unavailable_verdict(text: str) -> Verdict:
    """The oracle's answer for a Topology Manager that refused to start (the model's TopologyManagerUnavailable)."""
    return Verdict(False, "TopologyManagerUnavailable", text.removeprefix(TOPOLOGY_MANAGER))


def model_verdicts(case: Mapping[str, Json], answer: Mapping[str, Json]) -> list[Verdict]:
    """The model's verdict on each pod the oracle judged, from the state the oracle reports before it."""
    if answer.get("unavailable"):
        return [model_verdict(admit(machine_node(case), model_pod(case["pod"])))]
    pods: Sequence[Mapping[str, Json]] = [*case["pods"], case["pod"]][: len(answer["steps"])]
    return [
        model_verdict(admit(node_resources(case, step["node"]), model_pod(pod)))
        for pod, step in zip(pods, answer["steps"], strict=True)
    ]


def oracle_verdicts(answer: Mapping[str, Json]) -> list[Verdict]:
    if answer.get("unavailable"):
        return [unavailable_verdict(answer["unavailable"])]
    return [oracle_verdict(step) for step in answer["steps"]]
