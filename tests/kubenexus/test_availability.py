"""Per-NUMA-zone counting rules (the resource-topology-exporter's), on small hand-made nodes."""

from __future__ import annotations

import pytest

from kubenexus.topology.availability import (
    AllocatableResources,
    ContainerResources,
    DeviceSet,
    MemoryBlock,
    PodResources,
    has_exclusive_resources,
    hugepages_resource_name,
    pod_set_fingerprint,
    zone_resources,
)
from kubenexus.topology.model import HugePages, Machine, NodeTopology, NumaCell, ResourceAmount, ZoneResources
from kubenexus.topology.podfingerprint import METHOD_EXCLUDE_TERMINAL, METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint

GiB = 1 << 30


def node(*cells: NumaCell) -> NodeTopology:
    cpus = tuple(sorted(cpu for cell in cells for cpu in cell.cpus))
    return NodeTopology(
        machine=Machine(None, "x86_64", 2, len(cpus), len(cpus), cpus, ()),
        numa_cells=cells,
    )


TWO_CELLS = node(NumaCell(0, (0, 1, 2, 3), 64 * GiB), NumaCell(1, (4, 5, 6, 7), 64 * GiB))


def pod(name: str, *containers: ContainerResources) -> PodResources:
    return PodResources("default", name, containers)


def test_a_cell_with_nothing_allocatable_reports_its_cpus_as_reserved() -> None:
    # CPU manager policy none: the kubelet pins no CPUs; only node 1 has (GPU) devices.
    allocatable = AllocatableResources(devices=(DeviceSet("nvidia.com/gpu", ("GPU-a", "GPU-b"), (1,)),))

    result = zone_resources(TWO_CELLS, allocatable, [])

    assert result.zones == (
        ZoneResources(0, (ResourceAmount("cpu", 4, 0, 0),)),
        ZoneResources(1, (ResourceAmount("nvidia.com/gpu", 2, 2, 2),)),
    )
    assert result.warnings == ()


def test_a_cpu_less_memory_cell_is_an_empty_zone_not_a_missing_one() -> None:
    topology = node(NumaCell(0, (0, 1), 64 * GiB), NumaCell(2, (), 128 * GiB))

    result = zone_resources(topology, AllocatableResources(cpu_ids=(0, 1)), [])

    assert result.zones == (
        ZoneResources(0, (ResourceAmount("cpu", 2, 2, 2),)),
        ZoneResources(2, (ResourceAmount("cpu", 0, 0, 0),)),
    )


def test_more_held_than_allocatable_is_zero_available_with_a_warning() -> None:
    allocatable = AllocatableResources(devices=(DeviceSet("example.com/fpga", ("f0",), (0,)),))
    greedy = pod("greedy", ContainerResources("c", devices=(DeviceSet("example.com/fpga", ("f0", "f1"), (0,)),)))

    result = zone_resources(TWO_CELLS, allocatable, [greedy])

    assert result.zones[0].resources == (ResourceAmount("example.com/fpga", 1, 1, 0),)
    assert [w.message for w in result.warnings] == [
        "NUMA node 0: containers hold 2 example.com/fpga, more than the 1 allocatable; available is reported as 0"
    ]


def test_more_allocatable_than_discovered_raises_capacity_with_a_warning() -> None:
    allocatable = AllocatableResources(memory=(MemoryBlock("memory", 80 * GiB, (0,)),))

    result = zone_resources(TWO_CELLS, allocatable, [])

    assert result.zones[0].resources == (ResourceAmount("memory", 80 * GiB, 80 * GiB, 80 * GiB),)
    assert "more than the 68719476736 discovered" in result.warnings[0].message


def test_memory_capacity_is_allocatable_when_the_topology_does_not_know_it() -> None:
    topology = node(NumaCell(0, (0, 1), None))
    allocatable = AllocatableResources(memory=(MemoryBlock("memory", 10 * GiB, (0,)),))

    result = zone_resources(topology, allocatable, [])

    assert result.zones[0].resources == (ResourceAmount("memory", 10 * GiB, 10 * GiB, 10 * GiB),)
    assert result.warnings == ()


def test_hugepage_capacity_comes_from_every_pool_of_the_cell() -> None:
    # arm64 with 64K base pages: 2Mi is not a size there; 32Mi and 512Mi are.
    pools = (HugePages(size_kib=32768, total=8), HugePages(size_kib=524288, total=4))
    topology = node(NumaCell(0, (0, 1), 64 * GiB, hugepages=pools))
    allocatable = AllocatableResources(
        memory=(MemoryBlock("hugepages-32Mi", 256 << 20, (0,)), MemoryBlock("hugepages-512Mi", 1 * GiB, (0,)))
    )

    result = zone_resources(topology, allocatable, [])

    assert result.zones[0].resources == (
        ResourceAmount("hugepages-32Mi", 256 << 20, 256 << 20, 256 << 20),
        ResourceAmount("hugepages-512Mi", 2 * GiB, 1 * GiB, 1 * GiB),
    )


def test_a_device_spanning_two_nodes_counts_on_both() -> None:
    allocatable = AllocatableResources(devices=(DeviceSet("example.com/nic", ("n0",), (0, 1)),))
    holder = pod("p", ContainerResources("c", devices=(DeviceSet("example.com/nic", ("n0",), (0, 1)),)))

    result = zone_resources(TWO_CELLS, allocatable, [holder])

    assert [z.resources for z in result.zones] == [(ResourceAmount("example.com/nic", 1, 1, 0),)] * 2


def test_kubelet_facts_the_topology_cannot_place_are_skipped_with_a_warning() -> None:
    allocatable = AllocatableResources(
        cpu_ids=(0, 1, 99),
        devices=(DeviceSet("example.com/x", ("x0",), (7,)), DeviceSet("example.com/y", ("y0",), (-1,))),
    )

    result = zone_resources(TWO_CELLS, allocatable, [])

    assert result.zones[0].resources == (ResourceAmount("cpu", 4, 2, 2),)
    assert [w.message for w in result.warnings] == [
        "allocatable: CPUs [99] are in no NUMA cell of the topology; they are not counted",
        "allocatable: example.com/x on NUMA nodes [7], which the topology does not have; not counted",
        # -1 is the API's "no affinity": not a disagreement, but not in any zone either
        "1 allocatable example.com/y devices have no NUMA affinity (their device plugin reports no topology); "
        "they are in no zone",
    ]


def test_a_duplicated_cell_is_one_zone() -> None:
    topology = node(NumaCell(0, (0, 1), 64 * GiB), NumaCell(0, (0, 1), 64 * GiB))

    result = zone_resources(topology, AllocatableResources(cpu_ids=(0,)), [])

    assert result.zones == (ZoneResources(0, (ResourceAmount("cpu", 2, 1, 1),)),)


@pytest.mark.parametrize(
    ("size_kib", "name"),
    [
        (2048, "hugepages-2Mi"),
        (1048576, "hugepages-1Gi"),
        (64, "hugepages-64Ki"),
        (32768, "hugepages-32Mi"),
        (16777216, "hugepages-16Gi"),
    ],
)
def test_hugepages_resource_names_are_the_kubelets(size_kib: int, name: str) -> None:
    assert hugepages_resource_name(size_kib) == name


EXCLUSIVE_CPU = pod("cpu", ContainerResources("c", cpu_ids=(3,)))
PINNED_MEMORY = pod("mem", ContainerResources("c", memory=(MemoryBlock("memory", GiB, (1,)),)))
AFFINE_DEVICE = pod("dev", ContainerResources("c", devices=(DeviceSet("nvidia.com/gpu", ("g",), (0,)),)))
SHARED_ONLY = pod("shared", ContainerResources("c", devices=(DeviceSet("rdma/shared", ("r",), ()),)))
NOTHING = pod("nothing", ContainerResources("c"))


def test_exclusive_resources_are_exclusive_cpus_pinned_memory_or_numa_affine_devices() -> None:
    assert [has_exclusive_resources(p) for p in (EXCLUSIVE_CPU, PINNED_MEMORY, AFFINE_DEVICE)] == [True] * 3
    assert [has_exclusive_resources(p) for p in (SHARED_ONLY, NOTHING)] == [False, False]


def test_the_fingerprint_method_selects_the_pods() -> None:
    pods = [EXCLUSIVE_CPU, SHARED_ONLY, PINNED_MEMORY, NOTHING, AFFINE_DEVICE]

    assert pod_set_fingerprint(pods) == pods_fingerprint(("default", p.name) for p in pods)
    assert pod_set_fingerprint(pods, method=METHOD_WITH_EXCLUSIVE_RESOURCES) == pods_fingerprint(
        [("default", "cpu"), ("default", "mem"), ("default", "dev")]
    )
    with pytest.raises(ValueError, match="unsupported pods fingerprint method 'exclude-terminal'"):
        pod_set_fingerprint(pods, method=METHOD_EXCLUDE_TERMINAL)
