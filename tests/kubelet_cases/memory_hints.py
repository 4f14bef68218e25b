"""Memory manager tables from kubernetes/kubernetes ``pkg/kubelet/cm/memorymanager/policy_static_test.go``
@ 1c9cf914f2f951313b8e9f7c321f5bd50b5e3d9f; the code under test is ``policy_static.go``
@ 030880a5dc5449403c6d1f0aa146a7dc21d6c6dc (``calculateHints``, ``getDefaultHint``, ``isAffinitySatisfyRequest``,
``extendTopologyManagerHint``, ``isAffinityViolatingNUMAAllocations``, ``updateMachineState``,
``updatePodReusableMemory``, ``getPodRequestedResources``).

A ``state.NUMANodeState`` is written as a ``NumaCellResources``: ``MemoryMap`` as pools of (Allocatable, Free),
``Cells`` as ``memory_group`` and ``NumberOfAssignments`` as ``memory_assignments``. ``Reserved``,
``SystemReserved`` and ``TotalMemSize`` are not inputs of any decision and are left out. Every container of the
upstream tables requests as much ``memory`` as ``hugepages-1Gi`` unless a case says otherwise
(``requirementsGuaranteed`` is 1Gi of each); the CPU requests play no part in the memory manager.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from placement.core.topology_manager import MemoryPool, NumaCellResources, QOSClass, TopologyHint
from tests.kubelet_cases.hints import ANY_NOT_PREFERRED, ANY_PREFERRED, nonpref, pref

MB = 1 << 20
GB = 1 << 30
MEMORY = "memory"
HP1G = "hugepages-1Gi"
HP2M = "hugepages-2Mi"

Requests = dict[str, int]


def cell(
    numa_id: int,
    pools: dict[str, tuple[int, int]],
    cells: tuple[int, ...] = (),
    assignments: int = 0,
) -> NumaCellResources:
    """``&state.NUMANodeState{MemoryMap: {resource: {Allocatable, Free}}, Cells, NumberOfAssignments}``."""
    memory = tuple(MemoryPool(name, allocatable, free) for name, (allocatable, free) in pools.items())
    return NumaCellResources(numa_id, 0, 0, memory, memory_group=cells, memory_assignments=assignments)


def guaranteed(size: int) -> Requests:
    return {MEMORY: size, HP1G: size}


# --- TestStaticPolicyGetTopologyHints --------------------------------------------------------------------
# (description, machine state, pod QoS, container requests, expected hints; None is a nil map)
GET_TOPOLOGY_HINTS: list[
    tuple[str, list[NumaCellResources], QOSClass, Requests, dict[str, list[TopologyHint]] | None]
] = [
    (
        "should not provide topology hints for non-guaranteed pods",
        [cell(0, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)}, (0,))],  # machineState is nil upstream
        QOSClass.BURSTABLE,
        guaranteed(GB),  # requirementsBurstable requests 1Gi of each
        None,
    ),
    (
        "should calculate new topology hints, when the container does not exist under assignments",
        [
            cell(0, {MEMORY: (1536 * MB, 0), HP1G: (GB, 0)}, (0, 1), 2),
            cell(1, {MEMORY: (1536 * MB, GB), HP1G: (GB, 0)}, (0, 1), 2),
            cell(2, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)}, (2,)),
            cell(3, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)}, (3,)),
        ],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        {
            MEMORY: [pref(2), pref(3), nonpref(2, 3)],
            HP1G: [pref(2), pref(3), nonpref(2, 3)],
        },
    ),
    (
        "should not return preferred hints with multiple NUMA nodes for the pod with resources satisfied by a single"
        " NUMA node",
        [
            cell(0, {MEMORY: (1536 * MB, 0), HP2M: (20 * MB, 0)}, (0, 1), 2),
            cell(1, {MEMORY: (1536 * MB, GB), HP2M: (20 * MB, 16 * MB)}, (0, 1), 2),
        ],
        QOSClass.GUARANTEED,
        {MEMORY: GB, HP2M: 16 * MB},
        {MEMORY: [nonpref(0, 1)], HP2M: [nonpref(0, 1)]},
    ),
]

# --- TestStaticPolicyAllocate ----------------------------------------------------------------------------
# (description, machine state, pod QoS, container requests, Topology Manager hint, expected error or "",
#  expected machine state; None where the case fails)
ALLOCATE: list[
    tuple[str, list[NumaCellResources], QOSClass, Requests, TopologyHint, str, list[NumaCellResources] | None]
] = [
    (
        "should do nothing for non-guaranteed pods",
        [cell(0, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)})],
        QOSClass.BURSTABLE,
        guaranteed(GB),
        ANY_NOT_PREFERRED,
        "",
        [cell(0, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)})],
    ),
    (
        "should calculate a default topology hint when no NUMA affinity was provided by the topology manager hint",
        [cell(0, {MEMORY: (1536 * MB, 1536 * MB), HP1G: (GB, GB)}, (0,))],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        ANY_NOT_PREFERRED,
        "",
        [cell(0, {MEMORY: (1536 * MB, 512 * MB), HP1G: (GB, 0)}, (0,), 2)],
    ),
    (
        "should fail when no NUMA affinity was provided under the topology manager hint and calculation of the"
        " default hint failed",
        [cell(0, {MEMORY: (1536 * MB, 512 * MB), HP1G: (GB, 0)}, (0,), 2)],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        ANY_NOT_PREFERRED,
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available",
        None,
    ),
    (
        "should fail when no NUMA affinity was provided under the topology manager preferred hint and default hint"
        " has preferred false",
        [
            cell(0, {MEMORY: (GB, 512 * MB), HP1G: (GB, GB)}, (0,), 1),
            cell(1, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (1,)),
            cell(2, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (2,)),
        ],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        ANY_PREFERRED,
        "[memorymanager] failed to find the default preferred hint",
        None,
    ),
    (
        "should fail when NUMA affinity provided under the topology manager hint did not satisfy container"
        " requirements and extended hint generation failed",
        [
            cell(0, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (0,)),
            cell(1, {MEMORY: (1536 * MB, 512 * MB), HP1G: (GB, GB)}, (1, 2), 1),
            cell(2, {MEMORY: (1536 * MB, 512 * MB), HP1G: (GB, GB)}, (1, 2), 1),
        ],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        nonpref(0),
        "[memorymanager] failed to find NUMA nodes to extend the current topology hint",
        None,
    ),
    (
        "should fail when the topology manager provided the preferred hint and extended hint has preferred false",
        [
            cell(0, {MEMORY: (GB, 512 * MB), HP1G: (GB, GB)}, (0,), 1),
            cell(1, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (1,)),
            cell(2, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (2,)),
        ],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        pref(1),
        "[memorymanager] failed to find the extended preferred hint",
        None,
    ),
    (
        "should succeed to allocate memory from multiple NUMA nodes",
        [cell(i, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (i,)) for i in range(4)],
        QOSClass.GUARANTEED,
        guaranteed(GB),
        ANY_PREFERRED,
        "",
        [
            cell(0, {MEMORY: (512 * MB, 0), HP1G: (GB, 0)}, (0, 1), 2),
            cell(1, {MEMORY: (512 * MB, 0), HP1G: (GB, GB)}, (0, 1), 2),
            cell(2, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (2,)),
            cell(3, {MEMORY: (512 * MB, 512 * MB), HP1G: (GB, GB)}, (3,)),
        ],
    ),
]

# --- TestStaticPolicyAllocateWithInitContainers / ...WithRestartableInitContainers -------------------------
# Every container asks for ``guaranteed(size)``; the Topology Manager hint is ``&TopologyHint{}`` throughout.
# (description, machine state, init containers as (name, GiB, restartPolicy Always), app containers as
#  (name, GiB), expected machine state)
InitSpec = list[tuple[str, int, bool]]
AppSpec = list[tuple[str, int]]

ALLOCATE_WITH_INIT_CONTAINERS: list[tuple[str, list[NumaCellResources], InitSpec, AppSpec, list[NumaCellResources]]] = [
    (
        "should re-use init containers memory, init containers requests 1Gi and 2Gi, apps containers 3Gi and 4Gi",
        [cell(0, {MEMORY: (7680 * MB, 7680 * MB), HP1G: (8 * GB, 8 * GB)}, (0,))],
        [("initContainer1", 1, False), ("initContainer2", 2, False)],
        [("container1", 3), ("container2", 4)],
        [cell(0, {MEMORY: (7680 * MB, 512 * MB), HP1G: (8 * GB, GB)}, (0,), 8)],
    ),
    (
        "should re-use init containers memory, init containers requests 4Gi and 3Gi, apps containers 2Gi and 1Gi",
        [cell(0, {MEMORY: (7680 * MB, 7680 * MB), HP1G: (8 * GB, 8 * GB)}, (0,))],
        [("initContainer1", 4, False), ("initContainer2", 3, False)],
        [("container1", 2), ("container2", 1)],
        [cell(0, {MEMORY: (7680 * MB, 3584 * MB), HP1G: (8 * GB, 4 * GB)}, (0,), 8)],
    ),
    (
        "should re-use init containers memory, init containers requests 7Gi and 4Gi, apps containers 4Gi and 3Gi",
        [cell(0, {MEMORY: (7680 * MB, 7680 * MB), HP1G: (8 * GB, 8 * GB)}, (0,))],
        [("initContainer1", 7, False), ("initContainer2", 4, False)],
        [("container1", 4), ("container2", 3)],
        [cell(0, {MEMORY: (7680 * MB, 512 * MB), HP1G: (8 * GB, GB)}, (0,), 8)],
    ),
    (
        # Upstream also seeds reusable memory of another pod ("pod0"), which Allocate drops; no counterpart here.
        "should re-use init containers memory, init containers requests 7Gi and 4Gi, apps containers 5Gi and 2Gi",
        [cell(0, {MEMORY: (10240 * MB, 10240 * MB), HP1G: (10 * GB, 10 * GB)}, (0,))],
        [("initContainer1", 7, False), ("initContainer2", 4, False)],
        [("container1", 5), ("container2", 2)],
        [cell(0, {MEMORY: (10240 * MB, 3072 * MB), HP1G: (10 * GB, 3 * GB)}, (0,), 8)],
    ),
    (
        "should not re-use restartable init containers memory",
        [cell(0, {MEMORY: (7 * GB, 7 * GB), HP1G: (7 * GB, 7 * GB)}, (0,))],
        [
            ("initContainer1", 1, False),
            ("restartableInitContainer2", 2, True),
            ("initContainer3", 3, False),
            ("restartableInitContainer4", 4, True),
        ],
        [("container1", 1)],
        [cell(0, {MEMORY: (7 * GB, 0), HP1G: (7 * GB, 0)}, (0,), 10)],
    ),
]

# --- Test_getPodRequestedResources -----------------------------------------------------------------------
# (description, init containers as (memory GiB, hugepages-1Gi GiB, restartPolicy Always), app containers as
#  (memory GiB, hugepages-1Gi GiB), expected pod-level requests)
POD_REQUESTED_RESOURCES: list[tuple[str, list[tuple[int, int, bool]], list[tuple[int, int]], Requests]] = [
    (
        "maximum resources of init containers > total resources of containers",
        [(1, 1, False), (4, 4, False)],
        [(1, 1), (2, 2)],
        {MEMORY: 4 * GB, HP1G: 4 * GB},
    ),
    (
        "maximum resources of init containers < total resources of containers",
        [(1, 1, False), (3, 3, False)],
        [(2, 2), (3, 3)],
        {MEMORY: 5 * GB, HP1G: 5 * GB},
    ),
    (
        "calculate different resources independently",
        [(1, 1, False), (3, 4, False)],
        [(2, 1), (3, 2)],
        {MEMORY: 5 * GB, HP1G: 4 * GB},
    ),
    (
        "maximum resources of init containers > total resources of long running containers, including restartable"
        " init containers",
        [(2, 2, True), (4, 4, False)],
        [(1, 1), (2, 2)],
        {MEMORY: 6 * GB, HP1G: 6 * GB},
    ),
    (
        "maximum resources of init containers < total resources of long running containers, including restartable"
        " init containers",
        [(2, 2, True), (4, 4, False)],
        [(2, 2), (3, 3)],
        {MEMORY: 7 * GB, HP1G: 7 * GB},
    ),
]
