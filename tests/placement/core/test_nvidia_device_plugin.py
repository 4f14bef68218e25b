"""The GPUs the kubelet hands a device-plugin pod, as the placement service predicts them
(``placement.core.nvidia_device_plugin``, wired into ``plan_on_node``, which plans pods alone and gang
members): what it reserves, annotates and charges is the device manager's and NVIDIA's plugin's choice,
not ours."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kubenexus.topology.model import DeviceLink, Gpu, NodeTopology, PathKind
from placement.core.device_manager import PreferredAllocationError
from placement.core.gang_plan import GangMember, GangPlan, NodeGpus, Workspace
from placement.core.gpu_sets import build_gpu_link_table, choose_gpu_set
from placement.core.gpuallocator import PairScores
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.nvidia_device_plugin import kubelet_gpus, preferred_allocation
from placement.core.pods import PendingPod, PodUsage
from placement.core.topology_manager import Container, NumaMask, Pod, QOSClass
from placement.core.vocabulary import RejectionKind, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangPlacement
from placement.state.reservations import Reservations
from tests.discovered_topologies import nvml_machine_topology
from tests.gang_fixtures import Cluster, member
from tests.machines.gpu_hardware import DGX_A100
from tests.machines.node_topologies import GIB, kubelet, nvswitch_node, pcie_node, with_usage

PANIC = "runtime error: invalid memory address or nil pointer dereference"


def _pod(cpus: int, gpus: int) -> Pod:
    container = Container("c", cpu_millis=cpus * 1000, memory=GIB, devices=(("nvidia.com/gpu", gpus),))
    return Pod(containers=(container,), qos=QOSClass.GUARANTEED)


def _hold(index: ClusterIndex, node: str, gpus: tuple[int, ...], cells: tuple[int, ...]) -> None:
    index.upsert_pod(PodUsage("ns", f"held-{node}", node, demand_of(_pod(1, len(gpus))), cells=cells, gpus=gpus))


def _free_gpus(index: ClusterIndex) -> Callable[[int], NodeGpus | None]:
    """Each node's GPUs as the gang coordinator hands them to the planner: the healthy ones no pod holds."""

    def gpus(row: int) -> NodeGpus | None:
        shape = index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy - index.busy_gpus(row))

    return gpus


def _pcie_tree_16() -> NodeTopology:
    """16 PCIe GPUs, 8 a socket, NVLink-bridged pairs on leaf switches (as ``benchmarks.gpu_sets``), policy
    none: go-gpuallocator's search for 5 of them runs past ``gpuallocator.SEARCH_LIMIT``."""
    base = pcie_node(policy="none")

    def link(a: int, b: int) -> DeviceLink:
        if a // 2 == b // 2:
            return DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, 12)
        path = PathKind.PXB if a // 4 == b // 4 else PathKind.NODE if a // 8 == b // 8 else PathKind.SYS
        return DeviceLink(f"GPU{a}", f"GPU{b}", path)

    gpus = tuple(
        Gpu(index=i, pci_bus_id=f"synthetic:GPU{i}", numa_node=i // 8, cpu_affinity=base.numa_cells[i // 8].cpus)
        for i in range(16)
    )
    links = tuple(link(a, b) for a in range(16) for b in range(a + 1, 16))
    return replace(base, gpus=gpus, links=links, nics=(), zone_resources=())


def test_the_plugin_fails_where_its_best_set_holds_padding() -> None:
    scores = PairScores.from_pairs({(3, 4): 420} | {(a, b): 20 for a in range(5) for b in range(a + 1, 5) if b < 3})
    with pytest.raises(PreferredAllocationError, match="nil pointer dereference"):
        preferred_allocation(scores, [0, 1, 2, 3, 4], [], 3)
    assert preferred_allocation(scores, [0, 1, 2, 3, 4], [], 2) == (3, 4)


def test_kubelet_gpus_on_a_dgx_a100_as_the_agent_discovers_it(tmp_path: Path) -> None:
    table = build_gpu_link_table(nvml_machine_topology(DGX_A100, tmp_path))
    every = frozenset(table.gpus)
    # No hint (policy none): the plugin pairs GPUs that share a PCIe switch (go-gpuallocator sees no NVLink
    # through NVSwitches) and answers with the first pair of its best partition.
    assert kubelet_gpus(table, every, _pod(8, 2), {}) == (0, 1)
    assert kubelet_gpus(table, every - {0}, _pod(8, 2), {}) == (2, 3)
    # A hint on NUMA node 5 (GPUs 6 and 7, NPS4): two aligned GPUs for two, taken whole.
    assert kubelet_gpus(table, every, _pod(8, 2), {"c": NumaMask.of(5)}) == (6, 7)
    # Three GPUs with a hint on node 5: both aligned ones, then the plugin's answer that must include them.
    # Its first best partition (each set with a PIX pair, 190) is {0, 1, 2}, {3, 6, 7}, {4, 5, pad}: GPU 3.
    assert kubelet_gpus(table, every, _pod(8, 3), {"c": NumaMask.of(5)}) == (3, 6, 7)


def test_the_reservation_holds_the_gpu_the_kubelet_gives_not_the_one_we_would_choose() -> None:
    index = ClusterIndex()
    index.upsert_topology("pcie", pcie_node())  # single-numa-node; bridges 0-2, 1-3, 4-5, 6-7
    _hold(index, "pcie", (0,), (0,))
    decision = Reservations(index).decide(PendingPod("ns", "one", _pod(4, 1)))
    assert decision.placement is not None
    assert (decision.node, decision.placement.cells) == ("pcie", (0,))
    # The kubelet pins the pod to cell 0 and asks the plugin for one of GPUs 1-3: every set of one scores
    # 0, so it takes the first. Our criterion would spare the 1-3 bridge and take GPU 2.
    assert decision.placement.gpus == (1,)
    shape = index.gpu_shape(index.slot_of("pcie") or 0)
    assert shape is not None
    assert choose_gpu_set(shape.table, shape.healthy - {0}, 1, numa_preference=frozenset({0})).gpus == (2,)  # type: ignore[union-attr]
    assert index.busy_gpus(index.slot_of("pcie") or 0) == {0, 1}


def test_a_node_where_the_plugin_would_panic_is_refused() -> None:
    index = ClusterIndex()
    index.upsert_topology("pcie", pcie_node(policy="none"))
    _hold(index, "pcie", (2, 3, 7), (0, 1))
    index.upsert_topology("h100", nvswitch_node(settings=kubelet("none", "pod")))
    decision = Reservations(index).decide(PendingPod("ns", "three", _pod(4, 3)), ["pcie", "h100"])
    # Free 0, 1, 4, 5, 6, no hint: the best partition's best set is the 4-5 bridge and a padding slot.
    assert decision.node == "h100"
    refusal = decision.rejections()["pcie"]
    assert refusal.kind is RejectionKind.KUBELET_TOPOLOGY
    assert refusal.message == (
        "kubelet UnexpectedAdmissionError: Allocate failed due to device plugin GetPreferredAllocation rpc failed "
        f"with err: {PANIC}, which is unexpected"
    )


def test_a_single_numa_intent_counts_the_cell_of_the_gpus_the_kubelet_gives() -> None:
    index = ClusterIndex()
    topology = nvswitch_node(cells=2, settings=kubelet("none", "pod"))
    cell0 = len(topology.numa_cells[0].cpus)
    index.upsert_topology("gpu-0", with_usage(topology, {0: {"cpu": cell0 - 2}}, fingerprint=None))
    intent = PodIntent(policy=NumaIntentPolicy.SINGLE_NUMA)
    decision = Reservations(index).decide(PendingPod("ns", "p", _pod(8, 1), intent=intent))
    # The CPUs land in cell 1 (cell 0 is full), the plugin gives GPU 0 in cell 0: two cells.
    assert decision.node is None
    assert decision.reasons()["gpu-0"] == "intent single-numa: the kubelet would use NUMA cells [0, 1]"


def test_gang_members_get_the_gpus_the_kubelet_gives_not_the_ones_we_would_choose() -> None:
    cluster = Cluster({"pcie": pcie_node()})  # single-numa-node; bridges 0-2, 1-3, 4-5, 6-7
    _hold(cluster.index, "pcie", (0,), (0,))
    for i in range(2):
        cluster.gangs.add_member(member(f"w{i}", "g", 2, gpus=1, cpus=4))
    placement = cluster.gangs.place("ns", "g")
    assert isinstance(placement, GangPlacement), placement
    # Both pinned to cell 0; the plugin takes the first GPU offered each time: GPU1, then GPU2. Our
    # criterion would spare the 1-3 bridge and take GPU2 first.
    assert [(p.cells, p.gpus) for p in placement.members] == [((0,), (1,)), ((0,), (2,))]
    shape = cluster.index.gpu_shape(cluster.index.slot_of("pcie") or 0)
    assert shape is not None
    assert choose_gpu_set(shape.table, shape.healthy - {0}, 1, numa_preference=frozenset({0})).gpus == (2,)  # type: ignore[union-attr]
    assert kubelet_gpus(shape.table, shape.healthy - {0}, _pod(4, 1), {"c": NumaMask.of(0)}) == (1,)
    assert cluster.index.busy_gpus(cluster.index.slot_of("pcie") or 0) == {0, 1, 2}


def test_a_node_where_the_plugin_would_panic_takes_no_gang_member() -> None:
    cluster = Cluster({"pcie": pcie_node(policy="none"), "h100": nvswitch_node(settings=kubelet("none", "pod"))})
    _hold(cluster.index, "pcie", (2, 3, 7), (0, 1))
    index = cluster.index
    slot = index.slot_of("pcie")
    assert slot is not None
    # Free 0, 1, 4, 5, 6, no hint: the best partition's best set is the 4-5 bridge and a padding slot.
    refused = Workspace(index.arrays(), _free_gpus(index)).place(GangMember(("ns", "w"), demand_of(_pod(4, 3))), slot)
    assert refused == (
        "kubelet UnexpectedAdmissionError: Allocate failed due to device plugin GetPreferredAllocation rpc failed "
        f"with err: {PANIC}, which is unexpected"
    )
    cluster.gangs.add_member(member("w", "g", 1, gpus=3, cpus=4))
    placement = cluster.gangs.place("ns", "g")
    assert isinstance(placement, GangPlacement), placement
    assert [p.node for p in placement.members] == ["h100"]


def test_a_gang_member_whose_gpus_the_plugin_search_cannot_answer_is_charged_by_count() -> None:
    cluster = Cluster({"pcie16": _pcie_tree_16()})
    index = cluster.index
    before = index.arrays()
    plan = cluster.plan([member("w", "g", 1, gpus=5, cpus=4)])
    assert isinstance(plan, GangPlan), plan
    (step,) = plan.members
    assert (step.cells, step.gpus) == ((0,), ())  # the CPUs' landing cell; the GPUs unpredicted
    workspace = Workspace(before, _free_gpus(index))
    again = workspace.place(GangMember(("ns", "w"), demand_of(_pod(4, 5))), step.row)
    assert not isinstance(again, str)
    # The same pod placed alone: no GPUs predicted either, and the same charges (five GPUs on cell 0).
    decision = Reservations(index).decide(PendingPod("ns", "w", _pod(4, 5)))
    assert decision.placement is not None
    assert (decision.node, decision.placement.cells, decision.placement.gpus) == ("pcie16", (0,), ())
    after = index.arrays()
    assert np.array_equal(workspace.arrays.cell_free[:, step.row], after.cell_free[:, step.row])
    gpu = after.column("nvidia.com/gpu")
    assert gpu is not None
    assert (after.cell_total[gpu, step.row] - after.cell_free[gpu, step.row]).tolist()[:2] == [5, 0]


def test_the_planners_memo_tells_identical_nodes_apart_by_their_free_gpus() -> None:
    cluster = Cluster({"a": pcie_node(), "b": pcie_node()})
    index = cluster.index
    _hold(index, "a", (0,), (0,))
    _hold(index, "b", (1,), (0,))
    workspace = Workspace(index.arrays(), _free_gpus(index))
    # Equal arrays (one GPU held on cell 0 of each), other free GPUs: the kubelet gives each its first free one.
    given = [workspace.place(GangMember(("ns", n), demand_of(_pod(4, 1))), index.slot_of(n) or 0) for n in "ab"]
    assert [p.gpus for p in given if not isinstance(p, str)] == [(1,), (0,)]


def test_every_feasible_node_is_tried_before_a_pod_is_left_waiting() -> None:
    """Twenty PCIe nodes with GPUs 0, 1, 4, 5, 6 free pass the vectorised filter and rank first, but the exact
    check refuses each (the plugin's best set for 3 GPUs holds a padding slot: it would fail); the node with
    GPUs 3-7 free ranks last and gets the pod: more nodes are tried than the best 16."""
    index = ClusterIndex()
    names = [f"pcie-{n:02d}" for n in range(20)]
    for name in [*names, "good"]:
        index.upsert_topology(name, pcie_node(policy="none"))
        _hold(index, name, (0, 1, 2) if name == "good" else (2, 3, 7), (0, 1))
    decision = Reservations(index).decide(PendingPod("ns", "three", _pod(4, 3)), [*names, "good"])
    assert decision.node == "good"
    refused = decision.rejections()
    assert sorted(refused) == names  # each tried by the exact check, each refused
    assert {r.kind for r in refused.values()} == {RejectionKind.KUBELET_TOPOLOGY}
