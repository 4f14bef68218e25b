"""The kubelet's Topology Manager admit decision for one pod on one node.

Scopes as in ``scope_container.go`` (admit and allocate container by container, init containers first)
and ``scope_pod.go`` (one merged hint for the whole pod, then allocate every container against it);
policy ``none`` skips the merge but still allocates (``admitPolicyNone``). Rejections carry the reason
and message the kubelet puts on the pod (``admission.GetPodAdmitResult``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from placement.core.topology_manager.admission_inputs import (
    Container,
    MemoryManagerPolicy,
    NodeResources,
    Pod,
    TopologyScope,
)
from placement.core.topology_manager.bitmask import MAX_BIT
from placement.core.topology_manager.merge import NumaInfo, ProviderHints, TopologyHint, TopologyPolicy, policy_merge
from placement.core.topology_manager.providers import (
    AllocationError,
    NodeState,
    device_requests,
    guaranteed_cpus,
    memory_requests,
    pod_level_request,
)

TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
TOPOLOGY_MANAGER_UNAVAILABLE = "TopologyManagerUnavailable"
# ErrorTopologyAffinity in topologymanager/topology_manager.go
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"
# NewManager wrapping NewNUMAInfo's error (topology_manager.go, numa_info.go)
NO_NUMA_DISTANCES_MESSAGE = "cannot discover NUMA topology: error getting NUMA distances from cadvisor"
NUMA_ID_ABOVE_63 = f"is above {MAX_BIT}: the kubelet's NUMA masks cannot hold it (it panics)"
SPARSE_NUMA_DISTANCES_MESSAGE = (
    "prefer-closest-numa-nodes: the NUMA distances have no column for every node id (the kubelet panics merging)"
)


@dataclass(frozen=True)
class ContainerAffinity:
    container: str
    hint: TopologyHint


@dataclass(frozen=True)
class AdmissionResult:
    """What the kubelet would do with the pod: ``reason``/``message`` are empty when admitted."""

    admit: bool
    affinities: tuple[ContainerAffinity, ...] = ()  # the merged hint per container admitted so far
    reason: str = ""
    message: str = ""
    container: str = ""  # the container the kubelet stopped at


def admit(node: NodeResources, pod: Pod) -> AdmissionResult:
    """Predict the kubelet's admission of ``pod`` on ``node`` from the node's current free resources."""
    kubelet = node.kubelet
    numa_info = _numa_info(node)
    if kubelet.topology_policy is not TopologyPolicy.NONE and (
        len(numa_info.nodes) > kubelet.options.max_allowable_numa_nodes
    ):
        # NewManager refuses to start: such a kubelet admits nothing.
        return AdmissionResult(
            admit=False,
            reason=TOPOLOGY_MANAGER_UNAVAILABLE,
            message=f"unsupported on machines with more than {kubelet.options.max_allowable_numa_nodes} NUMA Nodes",
        )
    if kubelet.topology_policy is not TopologyPolicy.NONE and kubelet.options.prefer_closest_numa:
        # NewNUMAInfo needs every node's distances for prefer-closest-numa-nodes, else the kubelet does not start.
        if len(numa_info.distances) != len(numa_info.nodes):
            return AdmissionResult(admit=False, reason=TOPOLOGY_MANAGER_UNAVAILABLE, message=NO_NUMA_DISTANCES_MESSAGE)
        # A row indexed by NUMA id (sysfs lists one column per online node) is too short for sparse ids: the
        # kubelet starts, then panics (index out of range) in NUMADistances.CalculateAverageFor the first time
        # it weighs two masks of one width. Such a node admits nothing for long (docs/placement.md).
        width = max(numa_info.nodes, default=-1) + 1
        if any(len(r) < width for r in numa_info.distances):
            return AdmissionResult(
                admit=False, reason=TOPOLOGY_MANAGER_UNAVAILABLE, message=SPARSE_NUMA_DISTANCES_MESSAGE
            )
    if any(i > MAX_BIT for i in numa_info.nodes) and (
        kubelet.topology_policy is not TopologyPolicy.NONE
        or kubelet.memory_manager_policy is MemoryManagerPolicy.STATIC
    ):
        # bitmask.NewBitMask refuses ids above 63 and its callers drop the error: the kubelet panics on the nil
        # mask wherever it builds one (every merge; the Static memory manager's hints).
        return AdmissionResult(
            admit=False,
            reason=TOPOLOGY_MANAGER_UNAVAILABLE,
            message=f"NUMA node {max(numa_info.nodes)} {NUMA_ID_ABOVE_63}",
        )
    state = NodeState(node)
    if kubelet.topology_policy is TopologyPolicy.NONE or kubelet.scope is TopologyScope.CONTAINER:
        return _admit_containers(node, numa_info, state, pod)
    return _admit_pod(node, numa_info, state, pod)


def _numa_info(node: NodeResources) -> NumaInfo:
    if len(node.distances) != len(node.cells):
        return NumaInfo(nodes=tuple(sorted(c.id for c in node.cells)))
    ordered = sorted(zip(node.cells, node.distances, strict=True), key=lambda pair: pair[0].id)
    return NumaInfo(nodes=tuple(c.id for c, _ in ordered), distances=tuple(d for _, d in ordered))


def _container_hints(state: NodeState, pod: Pod, container: Container) -> list[ProviderHints]:
    """``containerScope.accumulateProvidersHints``: the device, CPU and memory manager, in the order
    container_manager_linux.go adds them as hint providers."""
    return [
        state.device_provider(device_requests(container)),
        state.cpu_provider(guaranteed_cpus(pod, container)),
        state.memory_provider(pod, memory_requests(container)),
    ]


def _pod_hints(state: NodeState, pod: Pod) -> list[ProviderHints]:
    """``podScope.accumulateProvidersHints``: the providers' ``GetPodTopologyHints``."""
    # getPodRequestedResources keys the pod's memory request by what the app containers ask for;
    # a resource only an init container requests is not part of the pod-level hint.
    memory_names = {name for c in pod.containers for name in memory_requests(c)}
    device_names = {name for c in pod.all_containers() for name in device_requests(c)}
    memory = {n: pod_level_request(pod, _request_of(memory_requests, n)) for n in sorted(memory_names)}
    devices = {n: pod_level_request(pod, _request_of(device_requests, n)) for n in sorted(device_names)}
    return [
        state.device_provider(devices),
        state.cpu_provider(pod_level_request(pod, lambda c: guaranteed_cpus(pod, c))),
        state.memory_provider(pod, memory),
    ]


def _request_of(requests: Callable[[Container], dict[str, int]], name: str) -> Callable[[Container], int]:
    return lambda container: requests(container).get(name, 0)


def _allocate(state: NodeState, pod: Pod, container: Container, hint: TopologyHint) -> None:
    """``allocateAlignedResources``: every hint provider's ``Allocate`` for one container, in the providers'
    order (device, CPU, memory): the first that fails names the error."""
    # Only run-to-completion init containers hand their resources on (cpusToReuse, devicesToReuse).
    init = container in pod.init_containers and not container.restartable
    state.allocate_devices(device_requests(container), hint.affinity, init_container=init)
    state.allocate_cpus(guaranteed_cpus(pod, container), hint.affinity, init_container=init)
    state.allocate_memory(pod, memory_requests(container), hint, init_container=init)


def _unexpected(error: AllocationError, container: Container, done: Sequence[ContainerAffinity]) -> AdmissionResult:
    return AdmissionResult(
        admit=False,
        affinities=tuple(done),
        reason=UNEXPECTED_ADMISSION_ERROR,
        message=f"Allocate failed due to {error}, which is unexpected",
        container=container.name,
    )


def _affinity_error(container: Container, done: Sequence[ContainerAffinity]) -> AdmissionResult:
    return AdmissionResult(
        admit=False,
        affinities=tuple(done),
        reason=TOPOLOGY_AFFINITY_ERROR,
        message=TOPOLOGY_AFFINITY_MESSAGE,
        container=container.name,
    )


def _admit_containers(node: NodeResources, numa_info: NumaInfo, state: NodeState, pod: Pod) -> AdmissionResult:
    kubelet = node.kubelet
    done: list[ContainerAffinity] = []
    for container in pod.all_containers():
        if kubelet.topology_policy is TopologyPolicy.NONE:
            hint = TopologyHint(None, False)  # admitPolicyNone: no merge, the providers allocate freely
        else:
            hint, admitted = policy_merge(
                kubelet.topology_policy, numa_info, kubelet.options, _container_hints(state, pod, container)
            )
            if not admitted:
                return _affinity_error(container, done)
        try:
            _allocate(state, pod, container, hint)
        except AllocationError as error:
            return _unexpected(error, container, done)
        done.append(ContainerAffinity(container.name, hint))
    return AdmissionResult(admit=True, affinities=tuple(done))


def _admit_pod(node: NodeResources, numa_info: NumaInfo, state: NodeState, pod: Pod) -> AdmissionResult:
    kubelet = node.kubelet
    hint, admitted = policy_merge(kubelet.topology_policy, numa_info, kubelet.options, _pod_hints(state, pod))
    containers = pod.all_containers()
    if not admitted:
        return _affinity_error(containers[0], [])
    done: list[ContainerAffinity] = []
    for container in containers:
        try:
            _allocate(state, pod, container, hint)
        except AllocationError as error:
            return _unexpected(error, container, done)
        done.append(ContainerAffinity(container.name, hint))
    return AdmissionResult(admit=True, affinities=tuple(done))
