"""Device manager tables from kubernetes/kubernetes ``pkg/kubelet/cm/devicemanager/topology_hints_test.go``
@ 04791b4906602ffda5ccf9bc4c84d3329f1d7080 (``numaNodes: []int{0, 1}``).

Devices are written as groups (resource, NUMA ids, total, free); ``makeNUMADevice(id, n)`` is a device of
group (n,), ``{ID: "Dev1"}`` (no topology) one of group ().

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from placement.core.topology_manager import DeviceGroup, TopologyHint
from tests.kubelet_cases.hints import nonpref, pref


def _g(resource: str, numa: tuple[int, ...], total: int, free: int | None = None) -> DeviceGroup:
    return DeviceGroup(resource, numa, total, total if free is None else free)


# getCommonTestCases: (description, device groups, requests, expected hints per resource)
TOPOLOGY_HINTS: list[tuple[str, list[DeviceGroup], dict[str, int], dict[str, list[TopologyHint] | None]]] = [
    ("Single Request, no alignment", [_g("testdevice", (), 2)], {"testdevice": 1}, {"testdevice": None}),
    (
        "Single Request, only one with alignment",
        [_g("testdevice", (), 1), _g("testdevice", (1,), 1)],
        {"testdevice": 1},
        {"testdevice": [pref(1)]},  # v1.37: masks over the device-bearing nodes only
    ),
    (
        "Single Request, one device per socket",
        [_g("testdevice", (0,), 1), _g("testdevice", (1,), 1)],
        {"testdevice": 1},
        {"testdevice": [pref(0), pref(1), nonpref(0, 1)]},
    ),
    (
        "Request for 2, one device per socket",
        [_g("testdevice", (0,), 1), _g("testdevice", (1,), 1)],
        {"testdevice": 2},
        {"testdevice": [pref(0, 1)]},
    ),
    (
        "Request for 2, 2 devices per socket",
        [_g("testdevice", (0,), 2), _g("testdevice", (1,), 2)],
        {"testdevice": 2},
        {"testdevice": [pref(0), pref(1), nonpref(0, 1)]},
    ),
    (
        "Request for 2, optimal on 1 NUMA node, forced cross-NUMA",  # Dev1, Dev2 held by another container
        [_g("testdevice", (0,), 2, 1), _g("testdevice", (1,), 2, 1)],
        {"testdevice": 2},
        {"testdevice": [nonpref(0, 1)]},
    ),
    (
        "2 device types, mixed configuration",
        [_g("testdevice1", (0,), 2), _g("testdevice1", (1,), 2), _g("testdevice2", (0,), 1)],
        {"testdevice1": 2, "testdevice2": 1},
        {"testdevice1": [pref(0), pref(1), nonpref(0, 1)], "testdevice2": [pref(0)]},  # v1.37, as above
    ),
    (
        "Single device type, more requested than available",
        [_g("testdevice", (0,), 2), _g("testdevice", (1,), 2)],
        {"testdevice": 6},
        {"testdevice": []},
    ),
]

# TestTopologyAlignedAllocation (cases without a GetPreferredAllocation plugin):
# (description, request, device groups of "resource", hint, expected devices taken per NUMA id)
ALIGNED_ALLOCATION: list[tuple[str, int, list[DeviceGroup], TopologyHint, dict[int, int]]] = [
    ("Single Request, no alignment", 1, [_g("resource", (), 2)], pref(0, 1), {}),
    ("Request for 1, partial alignment", 1, [_g("resource", (), 1), _g("resource", (1,), 1)], pref(1), {1: 1}),
    ("Single Request, socket 0", 1, [_g("resource", (0,), 1), _g("resource", (1,), 1)], pref(0), {0: 1}),
    ("Single Request, socket 1", 1, [_g("resource", (0,), 1), _g("resource", (1,), 1)], pref(1), {1: 1}),
    ("Request for 2, socket 0", 2, [_g("resource", (0,), 2), _g("resource", (1,), 2)], pref(0), {0: 2}),
    ("Request for 2, socket 1", 2, [_g("resource", (0,), 2), _g("resource", (1,), 2)], pref(1), {1: 2}),
    (
        "Request for 4, unsatisfiable, prefer socket 0",
        4,
        [_g("resource", (0,), 3), _g("resource", (1,), 3)],
        pref(0),
        {0: 3, 1: 1},
    ),
    (
        "Request for 4, unsatisfiable, prefer socket 1",
        4,
        [_g("resource", (0,), 3), _g("resource", (1,), 3)],
        pref(1),
        {0: 1, 1: 3},
    ),
    (
        "Request for 4, multisocket",
        4,
        [_g("resource", (n,), 2) for n in range(4)],
        pref(1, 3),
        {1: 2, 3: 2},
    ),
]
