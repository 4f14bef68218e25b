"""CPU manager tables from kubernetes/kubernetes ``pkg/kubelet/cm/cpumanager/topology_hints_test.go``
@ 025a5a1507f415da15fd2716c8f547cba36c8608.

- ``returnTestCases`` (used by TestGetTopologyHints and TestGetPodTopologyHints) on ``returnMachineInfo``:
  two NUMA nodes of 6 CPUs, node 0 = CPUs {0,1,2,6,7,8}, node 1 = {3,4,5,9,10,11}. The default CPU set is
  given here as free CPUs per node.
- ``TestPodGuaranteedCPUs``: pods as (init containers, app containers); a container is (cpus, sidecar).

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from placement.core.topology_manager import QOSClass, TopologyHint
from tests.kubelet_cases.hints import nonpref, pref

# (name, requested CPUs, free CPUs on (node 0, node 1), expected hints)
TOPOLOGY_HINTS: list[tuple[str, int, tuple[int, int], list[TopologyHint]]] = [
    (
        "Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1",
        2,
        (4, 6),
        [pref(0), pref(1), nonpref(0, 1)],
    ),
    ("Request 5 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 5, (4, 6), [pref(1), nonpref(0, 1)]),
    ("Request 7 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 7, (4, 6), [pref(0, 1)]),
    ("Request 11 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 11, (4, 6), []),
    ("Request 2 CPUs, 1 available on NUMA 0, 1 available on NUMA 1", 2, (1, 1), [nonpref(0, 1)]),
    ("Request more CPUs than available", 5, (3, 1), []),  # defaultCPUSet {0,1,2,3}
]

Spec = list[tuple[int, bool]]  # (whole CPUs requested = limit, restartPolicy Always)

# (name, QoS the pod gets, init containers, app containers, expected CPUs)
POD_GUARANTEED_CPUS: list[tuple[str, QOSClass, Spec, Spec, int]] = [
    (
        "TestCase01: if requestedCPU == 0, Pod is not Guaranteed Qos",
        QOSClass.BEST_EFFORT,
        [(0, False)],
        [(0, False)],
        0,
    ),
    ("TestCase02: if requestedCPU == 0, Pod is not Guaranteed Qos", QOSClass.BURSTABLE, [(0, False)], [(2, False)], 0),
    ("TestCase03: if requestedCPU == 0, Pod is not Guaranteed Qos", QOSClass.BURSTABLE, [(2, False)], [(0, False)], 0),
    ("TestCase04: Guaranteed Pod requests 2 CPUs", QOSClass.GUARANTEED, [(2, False)], [(2, False)], 2),
    ("TestCase05: Guaranteed Pod requests 5 CPUs", QOSClass.GUARANTEED, [(5, False)], [(5, False)], 5),
    (
        "TestCase06: The number of CPUs requested By app is bigger than the number of CPUs requested by init",
        QOSClass.GUARANTEED,
        [(2, False)],
        [(5, False)],
        5,
    ),
    (
        "TestCase07: The number of CPUs requested By init is bigger than the number of CPUs requested by app",
        QOSClass.GUARANTEED,
        [(5, False)],
        [(2, False)],
        5,
    ),
    (
        "TestCase08: Sum of CPUs requested by multiple containers",
        QOSClass.GUARANTEED,
        [(2, False), (4, False)],
        [(2, False), (4, False)],
        6,
    ),
    (
        "TestCase09: restartable init container + regular container",
        QOSClass.GUARANTEED,
        [(1, True)],
        [(1, False)],
        2,
    ),
    (
        "TestCase09: multiple restartable init containers",
        QOSClass.GUARANTEED,
        [(5, False), (1, True), (2, True), (3, True)],
        [(1, False)],
        7,
    ),
    (
        "TestCase11: multiple restartable and regular init containers",
        QOSClass.GUARANTEED,
        [(5, False), (1, True), (2, True), (5, False), (3, True)],
        [(1, False)],
        8,
    ),
    (
        "TestCase12: restartable init, regular init and regular container",
        QOSClass.GUARANTEED,
        [(10, True), (200, False)],
        [(100, False)],
        210,
    ),
]
