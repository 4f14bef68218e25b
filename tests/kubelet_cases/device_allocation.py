"""Device manager tables from kubernetes/kubernetes ``pkg/kubelet/cm/devicemanager/topology_hints_test.go``
(the ``sets.Set[string]`` generation, Kubernetes 1.28 and later): ``TestTopologyAlignedAllocation`` and
``TestGetPreferredAllocationParameters``.

Devices are (id, NUMA nodes): ``makeNUMADevice(id, n)`` is ``(id, (n,))``, ``{ID: "Dev1"}`` is ``(id, ())``.
A hint is the ``makeSocketMask`` NUMA ids. A plugin's answer is the fixed list its mock returns.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from typing import NamedTuple

Devices = list[tuple[str, tuple[int, ...]]]


class AlignedCase(NamedTuple):
    description: str
    request: int
    devices: Devices
    hint: tuple[int, ...]
    answer: list[str] | None  # the plugin's; None: no GetPreferredAllocation
    preferred: list[str]  # must be among the devices allocated
    alignment: dict[int, int]  # devices allocated per NUMA node


class ParametersCase(NamedTuple):
    description: str
    request: int
    devices: Devices
    in_use: list[str]  # allocated to containers, the reusable ones included
    reusable: list[str]
    hint: tuple[int, ...]
    available: list[str]  # what the plugin is offered
    must_include: list[str]
    size: int


def _numa(ids: range, node: int) -> Devices:
    return [(f"Dev{i}", (node,)) for i in ids]


ALIGNED_ALLOCATION = [
    AlignedCase("Single Request, no alignment", 1, [("Dev1", ()), ("Dev2", ())], (0, 1), None, [], {}),
    AlignedCase("Request for 1, partial alignment", 1, [("Dev1", ()), ("Dev2", (1,))], (1,), None, [], {1: 1}),
    AlignedCase("Single Request, socket 0", 1, [("Dev1", (0,)), ("Dev2", (1,))], (0,), None, [], {0: 1}),
    AlignedCase("Single Request, socket 1", 1, [("Dev1", (0,)), ("Dev2", (1,))], (1,), None, [], {1: 1}),
    AlignedCase(
        "Request for 2, socket 0",
        2,
        [("Dev1", (0,)), ("Dev2", (1,)), ("Dev3", (0,)), ("Dev4", (1,))],
        (0,),
        None,
        [],
        {0: 2},
    ),
    AlignedCase(
        "Request for 2, socket 1",
        2,
        [("Dev1", (0,)), ("Dev2", (1,)), ("Dev3", (0,)), ("Dev4", (1,))],
        (1,),
        None,
        [],
        {1: 2},
    ),
    AlignedCase(
        "Request for 4, unsatisfiable, prefer socket 0",
        4,
        [(f"Dev{i}", ((i + 1) % 2,)) for i in range(1, 7)],
        (0,),
        None,
        [],
        {0: 3, 1: 1},
    ),
    AlignedCase(
        "Request for 4, unsatisfiable, prefer socket 1",
        4,
        [(f"Dev{i}", ((i + 1) % 2,)) for i in range(1, 7)],
        (1,),
        None,
        [],
        {0: 1, 1: 3},
    ),
    AlignedCase(
        "Request for 4, multisocket",
        4,
        [(f"Dev{i}", ((i - 1) % 4,)) for i in range(1, 9)],
        (1, 3),
        None,
        [],
        {1: 2, 3: 2},
    ),
    AlignedCase(
        "Request for 5, socket 0, preferred aligned accepted",
        5,
        _numa(range(100), 0) + _numa(range(100, 200), 1),
        (0,),
        ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
        ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
        {0: 5},
    ),
    AlignedCase(
        "Request for 5, socket 0, preferred aligned accepted, unaligned ignored",
        5,
        _numa(range(100), 0) + _numa(range(100, 200), 1),
        (0,),
        ["Dev0", "Dev19", "Dev83", "Dev150", "Dev186"],
        ["Dev0", "Dev19", "Dev83"],
        {0: 5},
    ),
    AlignedCase(
        "Request for 5, socket 1, preferred aligned accepted, bogus ignored",
        5,
        _numa(range(100), 1),
        (1,),
        ["Dev0", "Dev19", "Dev83", "bogus0", "bogus1"],
        ["Dev0", "Dev19", "Dev83"],
        {1: 5},
    ),
    AlignedCase(
        "Request for 5, multisocket, preferred accepted",
        5,
        _numa(range(3), 0) + _numa(range(3, 100), 1),
        (0,),
        ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
        ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
        {0: 3, 1: 2},
    ),
    AlignedCase(
        "Request for 5, multisocket, preferred unaligned accepted, bogus ignored",
        5,
        _numa(range(3), 0) + _numa(range(3, 100), 1),
        (0,),
        ["Dev0", "Dev1", "Dev2", "Dev42", "bogus0"],
        ["Dev0", "Dev1", "Dev2", "Dev42"],
        {0: 3, 1: 2},
    ),
]

PREFERRED_ALLOCATION_PARAMETERS = [
    ParametersCase(
        "Request for 1, socket 0, 0 already allocated, 0 reusable",
        1,
        _numa(range(4), 0),
        [],
        [],
        (0,),
        ["Dev0", "Dev1", "Dev2", "Dev3"],
        [],
        1,
    ),
    ParametersCase(
        "Request for 4, socket 0, 2 already allocated, 2 reusable",
        4,
        _numa(range(8), 0),
        ["Dev0", "Dev5"],
        ["Dev0", "Dev5"],
        (0,),
        [f"Dev{i}" for i in range(8)],
        ["Dev0", "Dev5"],
        4,
    ),
    ParametersCase(
        "Request for 4, socket 0, 4 already allocated, 2 reusable",
        4,
        _numa(range(8), 0),
        ["Dev0", "Dev5", "Dev4", "Dev1"],
        ["Dev0", "Dev5"],
        (0,),
        ["Dev0", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"],
        ["Dev0", "Dev5"],
        4,
    ),
    ParametersCase(
        "Request for 6, multisocket, 2 already allocated, 2 reusable",
        6,
        _numa(range(4), 0) + _numa(range(4, 8), 1),
        ["Dev1", "Dev6"],
        ["Dev1", "Dev6"],
        (0,),
        [f"Dev{i}" for i in range(8)],
        ["Dev0", "Dev1", "Dev2", "Dev3", "Dev6"],
        6,
    ),
    ParametersCase(
        "Request for 6, multisocket, 4 already allocated, 2 reusable",
        6,
        _numa(range(4), 0) + _numa(range(4, 8), 1),
        ["Dev0", "Dev1", "Dev6", "Dev7"],
        ["Dev1", "Dev6"],
        (0,),
        ["Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6"],
        ["Dev1", "Dev2", "Dev3", "Dev6"],
        6,
    ),
]
