"""The memory manager model (static policy) against the kubelet's own test tables.

Tables: ``tests/kubelet_cases/memory_hints.py``, ported from kubernetes/kubernetes
``pkg/kubelet/cm/memorymanager/policy_static_test.go`` @ 1c9cf914f2f951313b8e9f7c321f5bd50b5e3d9f, checked
against ``policy_static.go`` @ 030880a5dc5449403c6d1f0aa146a7dc21d6c6dc. Case ids are the upstream descriptions.

Ported: ``TestStaticPolicyGetTopologyHints``, ``TestStaticPolicyAllocate``,
``TestStaticPolicyAllocateWithInitContainers``, ``TestStaticPolicyAllocateWithRestartableInitContainers`` and
``Test_getPodRequestedResources``, each case run through ``placement.core.topology_manager.providers``.
Not ported: cases whose container already has memory blocks in the state file (``regenerateHints`` and the
"should do nothing once container(s) already exist" Allocate cases: a pod being admitted has no allocations),
and ``TestStaticPolicyNew``/``Name``/``Start``/``RemoveContainer`` (policy construction, checkpoint validation
and container removal, which the admission model has no counterpart for).

The last tests are not upstream tables: whole-pod admissions for the single-vs-cross-NUMA rule
(kubernetes/kubernetes#123443, in the kubelet since 1.32) and for an init container's memory group.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from placement.core.topology_manager import (
    UNEXPECTED_ADMISSION_ERROR,
    Container,
    CpuManagerPolicy,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    Pod,
    QOSClass,
    TopologyHint,
    TopologyPolicy,
    admit,
)
from placement.core.topology_manager.providers import AllocationError, NodeState, memory_requests, pod_level_request
from tests.kubelet_cases import memory_hints as mh
from tests.kubelet_cases.hints import nonpref, pref

STATIC_MEMORY = KubeletConfig(memory_manager_policy=MemoryManagerPolicy.STATIC)


def _state(cells: list[NumaCellResources]) -> NodeState:
    return NodeState(NodeResources(tuple(cells), kubelet=STATIC_MEMORY))


def _container(name: str, requests: mh.Requests, *, restartable: bool = False) -> Container:
    hugepages = tuple((r, n) for r, n in requests.items() if r != mh.MEMORY)
    return Container(name, memory=requests.get(mh.MEMORY, 0), hugepages=hugepages, restartable=restartable)


MachineState = dict[int, tuple[dict[str, int], tuple[int, ...], int]]


def _machine_state(state: NodeState) -> MachineState:
    """Free bytes per memory type, ``Cells`` and ``NumberOfAssignments`` of every cell."""
    return {
        i: (
            {r: free for (cell_id, r), free in state.free_memory.items() if cell_id == i},
            tuple(sorted(state.memory_group[i])),
            state.memory_assignments[i],
        )
        for i in state.cell_ids
    }


def _expected_state(cells: list[NumaCellResources]) -> MachineState:
    return {
        c.id: ({p.resource: p.free for p in c.memory}, tuple(sorted(c.memory_group or (c.id,))), c.memory_assignments)
        for c in cells
    }


@pytest.mark.parametrize(
    ("description", "cells", "qos", "requests", "expected"),
    mh.GET_TOPOLOGY_HINTS,
    ids=[c[0] for c in mh.GET_TOPOLOGY_HINTS],
)
def test_get_topology_hints(
    description: str,
    cells: list[NumaCellResources],
    qos: QOSClass,
    requests: mh.Requests,
    expected: dict[str, list[TopologyHint]] | None,
) -> None:
    container = _container("container1", requests)
    pod = Pod((container,), qos=qos)
    hints = _state(cells).memory_provider(pod, memory_requests(container))
    # reflect.DeepEqual upstream: the hint order (IterateBitMasks) is part of the expectation.
    assert hints == expected


AllocateCase = tuple[
    str, list[NumaCellResources], QOSClass, mh.Requests, TopologyHint, str, list[NumaCellResources] | None
]


@pytest.mark.parametrize("case", mh.ALLOCATE, ids=[c[0] for c in mh.ALLOCATE])
def test_allocate(case: AllocateCase) -> None:
    _, cells, qos, requests, hint, error, expected = case
    container = _container("container1", requests)
    pod = Pod((container,), qos=qos)
    state = _state(cells)
    if error:
        with pytest.raises(AllocationError) as raised:
            state.allocate_memory(pod, memory_requests(container), hint, init_container=False)
        assert str(raised.value) == error
        return
    state.allocate_memory(pod, memory_requests(container), hint, init_container=False)
    assert expected is not None
    assert _machine_state(state) == _expected_state(expected)


@pytest.mark.parametrize(
    ("description", "cells", "init", "app", "expected"),
    mh.ALLOCATE_WITH_INIT_CONTAINERS,
    ids=[c[0] for c in mh.ALLOCATE_WITH_INIT_CONTAINERS],
)
def test_allocate_with_init_containers(
    description: str,
    cells: list[NumaCellResources],
    init: mh.InitSpec,
    app: mh.AppSpec,
    expected: list[NumaCellResources],
) -> None:
    init_containers = tuple(_container(n, mh.guaranteed(s * mh.GB), restartable=r) for n, s, r in init)
    app_containers = tuple(_container(n, mh.guaranteed(s * mh.GB)) for n, s in app)
    pod = Pod(app_containers, init_containers, QOSClass.GUARANTEED)
    state = _state(cells)
    for container in pod.all_containers():  # init containers first, as the upstream test loops
        regular_init = container in init_containers and not container.restartable  # isRegularInitContainer
        state.allocate_memory(pod, memory_requests(container), TopologyHint(None, False), init_container=regular_init)
    assert _machine_state(state) == _expected_state(expected)


@pytest.mark.parametrize(
    ("description", "init", "app", "expected"),
    mh.POD_REQUESTED_RESOURCES,
    ids=[c[0] for c in mh.POD_REQUESTED_RESOURCES],
)
def test_pod_requested_resources(
    description: str, init: list[tuple[int, int, bool]], app: list[tuple[int, int]], expected: mh.Requests
) -> None:
    def container(i: int, memory: int, hugepages: int, restartable: bool = False) -> Container:
        return _container(f"c{i}", {mh.MEMORY: memory * mh.GB, mh.HP1G: hugepages * mh.GB}, restartable=restartable)

    pod = Pod(
        tuple(container(i, m, h) for i, (m, h) in enumerate(app)),
        tuple(container(100 + i, m, h, r) for i, (m, h, r) in enumerate(init)),
        QOSClass.GUARANTEED,
    )

    def request_of(name: str) -> Callable[[Container], int]:
        return lambda c: memory_requests(c).get(name, 0)

    names = {name for c in pod.containers for name in memory_requests(c)}  # the app containers' resources
    actual = {name: pod_level_request(pod, request_of(name)) for name in names}
    assert actual == expected


# --- whole-pod admission (not upstream tables) ------------------------------------------------------------


def _two_cells(free_cpus: tuple[int, int], cpus: int, memory: int, cells: list[tuple[int, int, int]]) -> NodeResources:
    """Two cells with ``cpus`` CPUs and ``memory`` bytes allocatable; ``cells`` gives (free memory, group size,
    assignments) per cell, a group of 1 being the cell alone."""
    resources = tuple(
        NumaCellResources(
            i,
            cpus,
            free_cpus[i],
            (MemoryPool(mh.MEMORY, memory, free),),
            memory_group=(0, 1) if group == 2 else (i,),
            memory_assignments=assignments,
        )
        for i, (free, group, assignments) in enumerate(cells)
    )
    kubelet = KubeletConfig(
        topology_policy=TopologyPolicy.BEST_EFFORT,
        cpu_manager_policy=CpuManagerPolicy.STATIC,
        memory_manager_policy=MemoryManagerPolicy.STATIC,
    )
    return NodeResources(resources, ((10, 21), (21, 10)), kubelet=kubelet)


def test_cross_numa_hint_over_a_single_numa_cell_is_rejected() -> None:
    """kubernetes/kubernetes#123443: cell 0 already holds a single-NUMA allocation (512Mi of 1Gi used), so the
    memory manager offers no hint for 1280Mi; the CPU manager's {0,1} wins the merge, and Allocate refuses it
    (``isAffinityViolatingNUMAAllocations``) instead of spreading the memory over both cells."""
    node = _two_cells((1, 2), 2, 1024 * mh.MB, [(512 * mh.MB, 1, 1), (1024 * mh.MB, 1, 0)])
    pod = Pod((Container("pod2", cpu_millis=3000, memory=1280 * mh.MB),), qos=QOSClass.GUARANTEED)
    result = admit(node, pod)
    assert (result.admit, result.reason) == (False, UNEXPECTED_ADMISSION_ERROR)
    assert result.message == (
        "Allocate failed due to [memorymanager] preferred hint violates NUMA node allocation, which is unexpected"
    )


def test_init_container_memory_groups_the_cells_for_the_app_containers() -> None:
    """A regular init container's memory is allocated (and later reused on the same mask): spreading it over
    both cells makes them a group, so the app container can no longer get a single-NUMA memory hint."""
    gib = mh.GB
    node = _two_cells((8, 8), 8, 64 * gib, [(64 * gib, 1, 0), (64 * gib, 1, 0)])
    init = Container("init", memory=80 * gib)
    app = Container("app", memory=gib)
    result = admit(node, Pod((app,), (init,), QOSClass.GUARANTEED))
    assert result.admit
    assert [a.hint for a in result.affinities] == [pref(0, 1), nonpref(0, 1)]
