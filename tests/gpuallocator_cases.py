"""go-gpuallocator's own test machines and cases (github.com/NVIDIA/go-gpuallocator v0.6.0,
``gpuallocator/common_test.go`` and ``gpuallocator/besteffort_test.go``).

The machines are written as upstream links them: a PCIe class per pair (``P2PLink*``) and NVLinks
(``*NVLINKLink*``), scored as ``calculateGPUPairScore`` scores them.
"""

from __future__ import annotations

from placement.core.gpuallocator import PairScores

CROSS_CPU, SAME_CPU, HOST_BRIDGE, SINGLE_SWITCH = 10, 20, 30, 50  # P2PLink* scores
NVLINK = 100


def _node(pcie: dict[tuple[int, int], int], nvlinks: dict[tuple[int, int], int]) -> PairScores:
    pairs = set(pcie) | set(nvlinks)
    return PairScores.from_pairs({pair: pcie.get(pair, 0) + NVLINK * nvlinks.get(pair, 0) for pair in pairs})


def rtx8000_4x() -> PairScores:
    """``New4xRTX8000Node``: bridges 0-3 and 1-2 (two links each, no PCIe class listed for them)."""
    return _node(
        {(0, 1): SAME_CPU, (0, 2): CROSS_CPU, (1, 3): CROSS_CPU, (2, 3): SAME_CPU},
        {(0, 3): 2, (1, 2): 2},
    )


def _dgx1(pcie_in_socket: dict[tuple[int, int], int], nvlinks: dict[tuple[int, int], int]) -> PairScores:
    pcie = {(a, b): CROSS_CPU for a in range(4) for b in range(4, 8)}
    pcie.update(pcie_in_socket)
    return _node(pcie, nvlinks)


def dgx1_pascal() -> PairScores:
    """``NewDGX1PascalNode``: one NVLink on each hybrid cube-mesh edge."""
    return _dgx1(
        {
            (0, 1): HOST_BRIDGE,
            (0, 2): SINGLE_SWITCH,
            (0, 3): HOST_BRIDGE,
            (1, 2): HOST_BRIDGE,
            (1, 3): SINGLE_SWITCH,
            (2, 3): HOST_BRIDGE,
            (4, 5): HOST_BRIDGE,
            (4, 6): SINGLE_SWITCH,
            (4, 7): HOST_BRIDGE,
            (5, 6): HOST_BRIDGE,
            (5, 7): SINGLE_SWITCH,
            (6, 7): HOST_BRIDGE,
        },
        dict.fromkeys(
            [
                (0, 1),
                (0, 2),
                (0, 3),
                (0, 4),
                (1, 2),
                (1, 3),
                (1, 5),
                (2, 3),
                (2, 6),
                (3, 7),
                (4, 5),
                (4, 6),
                (4, 7),
                (5, 6),
                (5, 7),
                (6, 7),
            ],
            1,
        ),
    )


def dgx1_volta() -> PairScores:
    """``NewDGX1VoltaNode``: the cube mesh with doubled links on half the edges."""
    return _dgx1(
        {
            (0, 1): SINGLE_SWITCH,
            (0, 2): HOST_BRIDGE,
            (0, 3): HOST_BRIDGE,
            (1, 2): HOST_BRIDGE,
            (1, 3): HOST_BRIDGE,
            (2, 3): SINGLE_SWITCH,
            (4, 5): SINGLE_SWITCH,
            (4, 6): HOST_BRIDGE,
            (4, 7): HOST_BRIDGE,
            (5, 6): HOST_BRIDGE,
            (5, 7): HOST_BRIDGE,
            (6, 7): SINGLE_SWITCH,
        },
        {
            (0, 1): 1,
            (0, 2): 1,
            (0, 3): 2,
            (0, 4): 2,
            (1, 2): 2,
            (1, 3): 1,
            (1, 5): 2,
            (2, 3): 2,
            (2, 6): 1,
            (3, 7): 1,
            (4, 5): 1,
            (4, 6): 1,
            (4, 7): 2,
            (5, 6): 2,
            (5, 7): 1,
            (6, 7): 2,
        },
    )


# TestBestEffortAllocate on the DGX-1 Volta: (description, available, required, size, result as a set).
BEST_EFFORT_ALLOCATE: list[tuple[str, list[int], list[int], int, set[int]]] = [
    ("Single NVLINK, prefer same switch", [0, 2, 4, 5], [], 2, {4, 5}),
    ("Single NVLINK, prefer same socket", [0, 4, 5, 6], [], 2, {5, 6}),
    ("Prefer dual NVLINK same socket", [0, 3, 1], [], 2, {0, 3}),
    ("Prefer dual NVLINK cross socket", [0, 1, 4], [], 2, {0, 4}),
    ("Must include with allocation size 1", list(range(8)), [4], 1, {4}),
    ("Must include with allocation size 2", list(range(8)), [4], 2, {4, 7}),
    ("Must include with allocation size 4", list(range(8)), [4], 4, {4, 5, 6, 7}),
    ("Must include with unavailable device", [1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], 4, set()),
    ("Must include with full set specified", list(range(8)), [0, 2, 4, 6], 4, {0, 2, 4, 6}),
    ("Must include with too many devices specified", list(range(8)), [1, 2, 3, 4, 5, 6], 4, set()),
    ("Required too many devices than available", [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], 1, set()),
]

# The TestBestEffort<Machine>GPUAlloc<N> tests: an Allocator hands out sets one after another, each from
# the GPUs still free in index order (``DeviceSet.SortedSlice``). (machine, request, the sets in turn).
SEQUENTIAL_ALLOCATIONS: list[tuple[str, int, list[set[int]]]] = [
    ("rtx8000_4x", 1, [{0}, {1}, {2}, {3}, set()]),
    ("rtx8000_4x", 2, [{0, 3}, {1, 2}, set()]),
    ("rtx8000_4x", 4, [{0, 1, 2, 3}, set()]),
    ("dgx1_pascal", 1, [{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, set()]),
    ("dgx1_pascal", 2, [{0, 2}, {1, 3}, {4, 6}, {5, 7}, set()]),
    ("dgx1_pascal", 4, [{0, 1, 2, 3}, {4, 5, 6, 7}, set()]),
    ("dgx1_pascal", 8, [set(range(8)), set()]),
    ("dgx1_volta", 1, [{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, set()]),
    ("dgx1_volta", 2, [{0, 3}, {1, 2}, {4, 7}, {5, 6}, set()]),
    ("dgx1_volta", 4, [{0, 1, 2, 3}, {4, 5, 6, 7}, set()]),
    ("dgx1_volta", 8, [set(range(8)), set()]),
]

MACHINES = {"rtx8000_4x": rtx8000_4x, "dgx1_pascal": dgx1_pascal, "dgx1_volta": dgx1_volta}
