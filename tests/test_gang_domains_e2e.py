"""A gang that requires one rack, end to end: pods created through kmock's emulated API, the binder, the
real gRPC service; nodes published by the agent's own code with a rack label beside them.

Racks: r1 and r2 hold one H100 node each (room for four 2-GPU members), r3 four L40S nodes (room for two
each). The packed planner alone would take the two H100 nodes, in two racks; a gang that requires one
rack goes to r3. The rack label is NVIDIA Topograph's ``network.topology.nvidia.com/leaf``, one of the
default rack level's keys. Verified against the emulator only: no real kube-apiserver or kube-scheduler
runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, REQUIRED_TOPOLOGY_KEY
from placement.core.domains import RACK_KEY, TOPOGRAPH_BLOCK_KEY, TOPOGRAPH_LEAF_KEY
from tests.conftest import wait_until
from tests.machines.node_topologies import l40s_node, nvswitch_node
from tests.shim_cluster import ShimEmulator, pod_object, publish_nodes, replica
from tests.test_shim_e2e import assert_no_double_booking, create_pods

pytestmark = pytest.mark.slow

RACKS = {"h100-a": "r1", "h100-b": "r2", "l40s-1": "r3", "l40s-2": "r3", "l40s-3": "r3", "l40s-4": "r3"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ShimEmulator, Path]]:
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        machines = {name: nvswitch_node() if name.startswith("h100") else l40s_node() for name in RACKS}
        labels = {name: {TOPOGRAPH_LEAF_KEY: rack} for name, rack in RACKS.items()}
        publish_nodes(emulator, kubeconfig, machines, labels)
        yield emulator, kubeconfig


def _gang(group: str, size: int) -> list[dict[str, object]]:
    labels = {GROUP_NAME_KEY: group, MIN_AVAILABLE_KEY: str(size), REQUIRED_TOPOLOGY_KEY: "rack"}
    return [pod_object(f"{group}-{i}", gpus=2, labels=labels) for i in range(size)]


def test_a_gang_requiring_one_rack_is_bound_inside_one_rack(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        create_pods(kubeconfig, _gang("train", 8))
        wait_until(lambda: len(emulator.bindings) == 8, timeout_s=30, what="eight bindings")
    finally:
        leader.kill()
    names = [f"train-{i}" for i in range(8)]
    assert_no_double_booking(emulator, names)
    nodes = {emulator.pod("default", name)["spec"]["nodeName"] for name in names}
    assert {RACKS[node] for node in nodes} == {"r3"}
    assert nodes == {"l40s-1", "l40s-2", "l40s-3", "l40s-4"}


def test_a_gang_no_rack_can_hold_waits_with_the_reason(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        create_pods(kubeconfig, _gang("wide", 10))  # the cluster has room for 16; the largest rack for 8
        reason = (
            "can never fit the cluster as it is: requires every member in one rack "
            f"({RACK_KEY}, {TOPOGRAPH_LEAF_KEY}, {TOPOGRAPH_BLOCK_KEY}): no rack has room for 10 member(s) of "
            "4 CPUs, 16 GiB memory, 2 nvidia.com/gpu; the largest holds 8"
        )

        def told() -> bool:
            return any(reason in e["message"] for e in emulator.events("wide-9"))

        wait_until(told, timeout_s=30, what="the waiting event naming the rack")
        assert {e["reason"] for e in emulator.events("wide-9")} == {"WaitingForPodGroup"}
        assert emulator.bindings == []
    finally:
        leader.kill()
