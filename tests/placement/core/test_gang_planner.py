"""The joint gang planner on fixture clusters: fewest nodes, locality, NUMA alignment, exact admission."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from kubenexus.topology.labels import FABRIC_CLIQUE_KEY
from placement.core.gang_plan import GangMember, GangPlan, GangUnplaceable, NodeGpus, Workspace, member_capacity
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PendingPod, PodUsage
from placement.core.vocabulary import demand_of
from placement.state.gang_coordinator import DEFAULT_RACK_KEY, DEFAULT_ZONE_KEY
from tests.gang_fixtures import Cluster, assert_admitted_in_order, member
from tests.machines.node_topologies import cpu_node, kubelet, nvswitch_node, pcie_node


def _mixed() -> Cluster:
    nodes = {f"h100-{n}": nvswitch_node(cells=2) for n in range(3)}
    nodes |= {f"pcie-{n}": pcie_node() for n in range(2)}
    nodes |= {f"cpu-{n}": cpu_node() for n in range(2)}
    return Cluster(nodes)


def _plan(
    cluster: Cluster,
    members: list[PendingPod],
    policy: SpreadPolicy = SpreadPolicy.PACKED,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> GangPlan:
    plan = cluster.plan(members, policy, labels)
    assert isinstance(plan, GangPlan), plan
    return plan


def _reserve(cluster: Cluster, plan: GangPlan, members: list[PendingPod]) -> None:
    name_of = cluster.index.name_of
    cluster.reservations.reserve_all(
        [
            PodUsage(m.namespace, m.name, name_of(s.row) or "", demand_of(m.pod), s.cells, s.gpus)
            for s, m in zip(plan.members, members, strict=True)
        ]
    )


def test_sixteen_members_land_on_the_fewest_nodes_each_in_one_numa_cell() -> None:
    cluster = _mixed()
    members = [member(f"w{i}", "llm", 16, gpus=1, cpus=8) for i in range(16)]
    plan = _plan(cluster, members)
    assert len(plan.rows()) == 2
    index = cluster.index
    for step in plan.members:
        shape = index.gpu_shape(step.row)
        assert shape is not None
        assert len(step.cells) == 1
        assert step.pinned
        assert {shape.numa_of[g] for g in step.gpus} == set(step.cells)
    per_node = Counter(index.name_of(step.row) for step in plan.members)
    assert sorted(per_node.values()) == [8, 8]
    # Reserve it as planned: replaying member by member, the exact kubelet model admits each one there.
    _reserve(cluster, plan, members)
    assert_admitted_in_order(cluster, [m.key for m in members], {m.key: m.pod for m in members})


def test_planner_charges_members_exactly_as_the_index_charges_reservations() -> None:
    cluster = _mixed()
    members = [member(f"w{i}", "g", 5, gpus=3, cpus=20, memory_gib=100) for i in range(5)]
    index = cluster.index
    before = index.arrays()
    plan = _plan(cluster, members)

    def gpus(row: int) -> NodeGpus | None:
        shape = index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy)

    workspace = Workspace(before, gpus)
    for step, m in zip(plan.members, members, strict=True):
        again = workspace.place(GangMember(m.key, demand_of(m.pod)), step.row, prefer=step.cells)
        assert not isinstance(again, str)
        assert (again.cells, again.gpus) == (step.cells, step.gpus)
    _reserve(cluster, plan, members)
    after = index.arrays()
    rows = list(plan.rows())
    assert np.array_equal(workspace.arrays.cell_free[:, rows], after.cell_free[:, rows])
    assert np.array_equal(workspace.arrays.node_free[:, rows], after.node_free[:, rows])
    assert np.array_equal(workspace.arrays.cell_claimed[rows], after.cell_claimed[rows])


def test_a_member_that_would_hit_topology_affinity_error_is_never_planned_there() -> None:
    # 2 GPUs and 60 CPUs each, on 2 cells of 96 CPUs: after two members the node still has 4 GPUs and 72 CPUs
    # free in all, but no cell holds 60 CPUs: a third member there would fail TopologyAffinityError.
    cluster = Cluster(
        {
            "strict": nvswitch_node(cells=2, settings=kubelet("single-numa-node")),
            "loose": nvswitch_node(cells=2, settings=kubelet("none")),
        }
    )
    slot = cluster.index.slot_of("strict")
    assert slot is not None
    members = [member(f"w{i}", "g", 3, gpus=2, cpus=60) for i in range(3)]
    room = member_capacity(cluster.index.arrays(), np.array([slot]), demand_of(members[0].pod))
    assert room.tolist() == [2]
    plan = _plan(cluster, members)
    hosts = Counter(cluster.index.name_of(s.row) for s in plan.members)
    assert hosts["strict"] <= 2
    # The exact model is what decides: a fourth member is refused on the strict node, not merely not tried.
    workspace = Workspace(cluster.index.arrays(), lambda row: None)
    for i in range(2):
        assert not isinstance(workspace.place(GangMember(("ns", f"x{i}"), demand_of(members[0].pod)), slot), str)
    refused = workspace.place(GangMember(("ns", "x2"), demand_of(members[0].pod)), slot)
    assert isinstance(refused, str)
    assert "single-numa-node" in refused


def test_packed_prefers_one_fabric_clique_then_one_rack() -> None:
    nodes = {f"n{i}": nvswitch_node(cells=2) for i in range(4)}
    cluster = Cluster(nodes)
    cliques = {"n0": {FABRIC_CLIQUE_KEY: "a"}, "n1": {FABRIC_CLIQUE_KEY: "b"}, "n2": {FABRIC_CLIQUE_KEY: "c"}}
    cliques["n3"] = {FABRIC_CLIQUE_KEY: "b"}
    members = [member(f"w{i}", "g", 16, gpus=1) for i in range(16)]
    plan = _plan(cluster, members, labels=cliques)
    assert {cluster.index.name_of(r) for r in plan.rows()} == {"n1", "n3"}
    racks = {"n0": {DEFAULT_RACK_KEY: "r1"}, "n1": {DEFAULT_RACK_KEY: "r2"}, "n2": {DEFAULT_RACK_KEY: "r1"}}
    racks["n3"] = {DEFAULT_RACK_KEY: "r3"}
    plan = _plan(cluster, members, labels=racks)
    assert {cluster.index.name_of(r) for r in plan.rows()} == {"n0", "n2"}


def test_spread_puts_one_member_per_node_and_rotates_zones() -> None:
    nodes = {f"n{i}": nvswitch_node(cells=2) for i in range(6)}
    zones = {f"n{i}": {DEFAULT_ZONE_KEY: "z1" if i < 4 else "z2"} for i in range(6)}
    cluster = Cluster(nodes)
    members = [member(f"w{i}", "g", 4, gpus=1, spread="spread") for i in range(4)]
    plan = _plan(cluster, members, SpreadPolicy.SPREAD, zones)
    names = [cluster.index.name_of(s.row) or "" for s in plan.members]
    assert len(set(names)) == 4
    assert Counter(zones[n][DEFAULT_ZONE_KEY] for n in names) == {"z1": 2, "z2": 2}
    too_many = [member(f"w{i}", "g", 7, gpus=1) for i in range(7)]
    refused = cluster.plan(too_many, SpreadPolicy.SPREAD)
    assert isinstance(refused, GangUnplaceable)
    assert "spread needs a node per member; 6 node(s) can take one" in refused.reason


def test_balanced_evens_members_over_nodes_and_cells() -> None:
    # Nodes of 8 GPUs: packed fills one node with 8 and puts 4 on another; balanced deals 6 and 6.
    cluster = Cluster({f"n{i}": nvswitch_node(cells=2) for i in range(3)})
    members = [member(f"w{i}", "g", 12, gpus=1) for i in range(12)]
    packed = Counter(s.row for s in _plan(cluster, members).members)
    balanced = Counter(s.row for s in _plan(cluster, members, SpreadPolicy.BALANCED).members)
    assert sorted(packed.values()) == [4, 8]
    assert sorted(balanced.values()) == [6, 6]
    # Where the kubelet pins nothing (policy none) the cells are ours to choose: 4 members go 4+0 packed
    # (one cell, shortest paths) and 2+2 balanced.
    loose = Cluster({"n": nvswitch_node(cells=2, settings=kubelet("none"))})
    four = members[:4]
    cells_packed = Counter(s.cells for s in _plan(loose, four).members)
    cells_balanced = Counter(s.cells for s in _plan(loose, four, SpreadPolicy.BALANCED).members)
    assert list(cells_packed.values()) == [4]
    assert sorted(cells_balanced.values()) == [2, 2]
    assert all(not s.pinned for s in _plan(loose, four).members)


def test_members_asking_for_an_rdma_nic_get_the_kubelets_gpus_near_a_nic_or_not() -> None:
    cluster = Cluster({"pcie": pcie_node()})
    # The kubelet pins both to socket 0 (its lowest preferred cell) and takes the first GPU offered each
    # time: GPU0, then GPU1. Neither it nor NVIDIA's plugin knows NICs; the NIC's switch holds only GPU1.
    with_nic = [member(f"w{i}", "g", 2, gpus=1, cpus=4, rdma=1) for i in range(2)]
    without = [member(f"v{i}", "g", 2, gpus=1, cpus=4) for i in range(2)]
    assert [s.gpus for s in _plan(cluster, with_nic).members] == [(0,), (1,)]
    assert [s.gpus for s in _plan(cluster, without).members] == [(0,), (1,)]


def test_mixed_shapes_driver_and_executors_share_the_fewest_nodes() -> None:
    # A SparkApplication: one CPU-only driver and 8 GPU executors, one group.
    cluster = _mixed()
    members = [member("driver", "spark", 9, cpus=4, memory_gib=16)]
    members += [member(f"exec-{i}", "spark", 9, gpus=1, cpus=8) for i in range(8)]
    plan = _plan(cluster, members)
    assert [s.key[1] for s in plan.members] == [m.name for m in members]
    assert len(plan.rows()) == 1  # the driver joins the executors' node


def test_a_gang_larger_than_the_cluster_says_why() -> None:
    cluster = _mixed()
    members = [member(f"w{i}", "huge", 64, gpus=1) for i in range(64)]
    refused = cluster.plan(members)
    assert isinstance(refused, GangUnplaceable)
    assert refused.reason.startswith("cannot fit 64 member(s) of 8 CPUs, 64 GiB memory, 1 nvidia.com/gpu (64 GPUs")
    assert "have room for 40 (largest node 8)" in refused.reason
    assert "2 node(s): Insufficient nvidia.com/gpu" in refused.reason
    assert refused.placed == 0
