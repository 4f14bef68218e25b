"""The kubelet device manager's ``devicesToAllocate`` and ``Allocate`` (``placement.core.device_manager``),
on upstream's own tables (``tests/kubelet_cases/device_allocation.py``) and on what they leave out: the
hint-less path, the plugin's errors, and the reuse of init containers' devices."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from placement.core.device_manager import (
    DeviceAllocationError,
    PreferredAllocationError,
    allocate_pod,
    devices_to_allocate,
    filter_by_affinity,
)
from placement.core.topology_manager import Container, NumaMask, Pod
from tests.kubelet_cases.device_allocation import (
    ALIGNED_ALLOCATION,
    PREFERRED_ALLOCATION_PARAMETERS,
    AlignedCase,
    ParametersCase,
)

RESOURCE = "resource"


@pytest.mark.parametrize("case", ALIGNED_ALLOCATION, ids=lambda case: case.description)
def test_upstream_topology_aligned_allocation(case: AlignedCase) -> None:
    numa = dict(case.devices)
    answer = case.answer
    allocated = devices_to_allocate(
        resource=RESOURCE,
        required=case.request,
        available=frozenset(numa),
        numa_nodes=numa,
        affinity=NumaMask.of(*case.hint),
        preferred=None if answer is None else (lambda available, must_include, size: answer),
    )
    assert len(allocated) == case.request
    assert allocated >= set(case.preferred)
    per_node: dict[int, int] = {}
    for device in allocated:
        for node in numa[device][:1]:
            per_node[node] = per_node.get(node, 0) + 1
    assert per_node == case.alignment


@pytest.mark.parametrize("case", PREFERRED_ALLOCATION_PARAMETERS, ids=lambda case: case.description)
def test_upstream_preferred_allocation_parameters(case: ParametersCase) -> None:
    calls: list[tuple[list[str], list[str], int]] = []

    def record(offered: Sequence[str], included: Sequence[str], asked: int) -> Sequence[str]:
        calls.append((sorted(offered), sorted(included), asked))
        return []

    numa = dict(case.devices)
    devices_to_allocate(
        resource=RESOURCE,
        required=case.request,
        available=frozenset(numa) - set(case.in_use),
        numa_nodes=numa,
        affinity=NumaMask.of(*case.hint),
        preferred=record,
        reusable=frozenset(case.reusable),
    )
    # Upstream's test compares ``available`` twice and never checks mustInclude; both are checked here.
    assert calls == [(sorted(case.available), sorted(case.must_include), case.size)]


def _numa(count: int, *, per_node: int) -> dict[int, tuple[int, ...]]:
    return {gpu: (gpu // per_node,) for gpu in range(count)}


def test_without_a_hint_the_plugin_chooses_among_every_available_device() -> None:
    calls: list[tuple[Sequence[int], Sequence[int], int]] = []

    def plugin(offered: Sequence[int], included: Sequence[int], size: int) -> Sequence[int]:
        calls.append((offered, included, size))
        return [6, 7]

    numa = _numa(8, per_node=4)
    chosen = devices_to_allocate(
        resource=RESOURCE, required=2, available=frozenset(range(8)), numa_nodes=numa, affinity=None, preferred=plugin
    )
    assert chosen == {6, 7}
    assert calls == [(list(range(8)), [], 2)]
    # A hint naming every node is not "no hint": the devices without NUMA affinity are left out.
    numa[7] = ()
    chosen = devices_to_allocate(
        resource=RESOURCE,
        required=2,
        available=frozenset(range(8)),
        numa_nodes=numa,
        affinity=NumaMask.of(0, 1),
        preferred=plugin,
    )
    assert calls[-1] == (list(range(7)), [], 2)
    assert chosen == {6, 0}  # the plugin's 7 is not aligned: the rest comes from the aligned devices


def test_aligned_devices_are_taken_whole_before_the_plugin_picks_the_rest() -> None:
    calls: list[tuple[Sequence[int], Sequence[int], int]] = []

    def plugin(offered: Sequence[int], included: Sequence[int], size: int) -> Sequence[int]:
        calls.append((offered, included, size))
        return [*included, 4]

    chosen = devices_to_allocate(
        resource=RESOURCE,
        required=3,
        available=frozenset({1, 2, 4, 5, 6}),
        numa_nodes=_numa(8, per_node=4),
        affinity=NumaMask.of(0),
        preferred=plugin,
    )
    assert chosen == {1, 2, 4}
    assert calls == [([1, 2, 4, 5, 6], [1, 2], 3)]
    # Exactly as many as are aligned: they are all taken and the plugin is not asked.
    chosen = devices_to_allocate(
        resource=RESOURCE,
        required=2,
        available=frozenset({1, 2, 4, 5, 6}),
        numa_nodes=_numa(8, per_node=4),
        affinity=NumaMask.of(0),
        preferred=plugin,
    )
    assert chosen == {1, 2}
    assert len(calls) == 1


def test_devices_without_numa_affinity_come_last() -> None:
    numa = {0: (0,), 1: (1,), 2: ()}
    hint = NumaMask.of(0)
    chosen = devices_to_allocate(
        resource=RESOURCE, required=2, available=frozenset(numa), numa_nodes=numa, affinity=hint, preferred=None
    )
    assert chosen == {0, 1}
    assert filter_by_affinity(frozenset(numa), numa, hint) == (frozenset({0}), frozenset({1}), frozenset({2}))
    # No device of the resource reports a NUMA node: the hint is ignored (deviceHasTopologyAlignment).
    none: dict[int, tuple[int, ...]] = dict.fromkeys(numa, ())
    assert filter_by_affinity(frozenset(numa), none, hint) == (frozenset(), frozenset(), frozenset(numa))


def test_failures_are_the_kubelets() -> None:
    numa = _numa(4, per_node=2)
    with pytest.raises(DeviceAllocationError, match="requested number of devices unavailable for resource"):
        devices_to_allocate(
            resource=RESOURCE, required=3, available=frozenset({0, 1}), numa_nodes=numa, affinity=None, preferred=None
        )

    def broken(offered: Sequence[int], included: Sequence[int], size: int) -> Sequence[int]:
        raise PreferredAllocationError("connection reset")

    with pytest.raises(DeviceAllocationError, match="GetPreferredAllocation rpc failed with err: connection reset"):
        devices_to_allocate(
            resource=RESOURCE, required=1, available=frozenset(numa), numa_nodes=numa, affinity=None, preferred=broken
        )


def _pod(*containers: tuple[str, int, str]) -> Pod:
    """Containers as (name, devices, kind): kind "init", "sidecar" or "app"."""

    def make(name: str, count: int, kind: str) -> Container:
        return Container(name, devices=((RESOURCE, count),), restartable=kind == "sidecar")

    return Pod(
        init_containers=tuple(make(*c) for c in containers if c[2] != "app"),
        containers=tuple(make(*c) for c in containers if c[2] == "app"),
    )


def test_a_pod_reuses_its_init_containers_devices_but_not_a_sidecars() -> None:
    numa = _numa(8, per_node=4)
    plain = dict.fromkeys(["init", "side", "app"], NumaMask.of(1))
    held = allocate_pod(
        _pod(("init", 2, "init"), ("app", 1, "app")),
        RESOURCE,
        available=frozenset(range(8)),
        numa_nodes=numa,
        affinities=plain,
        preferred=None,
    )
    assert held == {4, 5}  # the app container takes one of the init container's two devices
    held = allocate_pod(
        _pod(("side", 2, "sidecar"), ("app", 1, "app")),
        RESOURCE,
        available=frozenset(range(8)),
        numa_nodes=numa,
        affinities=plain,
        preferred=None,
    )
    assert held == {4, 5, 6}  # a sidecar keeps running: its devices are its own
