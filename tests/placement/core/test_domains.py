"""Topology levels (defaults, the flag's parser, the resolver) and planning a gang within domains.

The planning tests run the real gang planner over real node models; where a test needs to see the order
in which domains are tried, or an exact check that refuses one domain, it wraps the planner in a callback
that records (or refuses) the rows it is given: that callback is the seam ``plan_in_domains`` plans through.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pytest

from kubenexus.topology.labels import FABRIC_CLIQUE_KEY, valid_label_key
from placement.core.annotations import DEFAULT_TOPOLOGY_LEVELS
from placement.core.domains import (
    BLOCK_KEY,
    DEFAULT_LEVELS,
    GFD_CLIQUE_KEY,
    RACK_KEY,
    TOPOGRAPH_ACCELERATOR_KEY,
    TOPOGRAPH_BLOCK_KEY,
    TOPOGRAPH_LEAF_KEY,
    TOPOGRAPH_SPINE_KEY,
    ZONE_KEY,
    DomainMap,
    LevelConstraint,
    TopologyLevel,
    TopologyLevelError,
    TopologyLevels,
    confine,
    domain_map,
    parse_topology_levels,
    plan_in_domains,
)
from placement.core.gang_plan import GangMember, GangPlan, GangUnplaceable, NodeGpus, plan_gang
from placement.core.vocabulary import IntArray, demand_of
from placement.state.cluster_index import ClusterIndex
from tests.gang_fixtures import pod
from tests.machines.node_topologies import nvswitch_node

RACK = DEFAULT_LEVELS.resolve("rack")
NVLINK = DEFAULT_LEVELS.resolve("nvlink")


# --- levels ----------------------------------------------------------------------------------------------


def test_the_default_levels_are_nearest_first_with_ours_then_nvidia_keys() -> None:
    assert DEFAULT_LEVELS.names == DEFAULT_TOPOLOGY_LEVELS == ("nvlink", "rack", "block", "zone")
    assert [level.keys for level in DEFAULT_LEVELS.levels] == [
        (FABRIC_CLIQUE_KEY, GFD_CLIQUE_KEY, TOPOGRAPH_ACCELERATOR_KEY),
        (RACK_KEY, TOPOGRAPH_LEAF_KEY, TOPOGRAPH_BLOCK_KEY),
        (BLOCK_KEY, TOPOGRAPH_SPINE_KEY),
        (ZONE_KEY,),
    ]
    assert FABRIC_CLIQUE_KEY == "gpu.kubenexus.io/fabric-clique"
    assert RACK_KEY == "topology.kubenexus.io/rack"
    assert BLOCK_KEY == "topology.kubenexus.io/block"
    assert all(valid_label_key(key) for level in DEFAULT_LEVELS.levels for key in level.keys)


def test_a_node_is_in_the_domain_its_first_present_key_names() -> None:
    assert RACK.domain_of({TOPOGRAPH_BLOCK_KEY: "b7", TOPOGRAPH_LEAF_KEY: "leaf-3"}) == "leaf-3"
    assert RACK.domain_of({TOPOGRAPH_BLOCK_KEY: "b7", RACK_KEY: "r1"}) == "r1"
    assert RACK.domain_of({ZONE_KEY: "z"}) is None
    # Ours and GPU Feature Discovery's clique share a format, so one clique is one domain whichever says it.
    nodes = [{FABRIC_CLIQUE_KEY: "c.1"}, {GFD_CLIQUE_KEY: "c.1"}, {}, {GFD_CLIQUE_KEY: "c.2"}]
    cliques = domain_map(NVLINK, [NVLINK.domain_of(labels) for labels in nodes])
    assert cliques.codes.tolist() == [0, 0, -1, 1]
    assert cliques.values == ("c.1", "c.2")
    assert cliques.value_of(3) == "c.2"
    assert cliques.value_of(2) is None


def test_the_flag_value_round_trips_and_keeps_the_order_given() -> None:
    levels = parse_topology_levels(" pod = example.com/pod , example.com/pod-b ; zone=topology.kubernetes.io/zone;")
    assert levels.names == ("pod", "zone")
    assert levels.levels[0].keys == ("example.com/pod", "example.com/pod-b")
    assert levels.flag_value() == "pod=example.com/pod,example.com/pod-b;zone=topology.kubernetes.io/zone"
    assert parse_topology_levels(DEFAULT_LEVELS.flag_value()) == DEFAULT_LEVELS


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no level given"),
        ("rack", "entry 'rack' has no '='"),
        ("Rack=example.com/rack", "level name 'Rack' is not a lower-case label value"),
        ("rack=a/r;rack=b/r", "level 'rack' is given twice"),
        ("rack=", "level 'rack' names no node label key"),
        ("rack=not a key", "'not a key' (level 'rack') is not a node label key"),
        ("rack=a/r;zone=a/r", "label key 'a/r' appears in level 'rack' and in level 'zone'"),
    ],
)
def test_bad_flag_values_are_refused_with_what_is_wrong_and_what_is_accepted(text: str, problem: str) -> None:
    with pytest.raises(TopologyLevelError) as raised:
        parse_topology_levels(text)
    message = str(raised.value)
    assert message.startswith(f"invalid topology levels {text!r}: {problem}; accepted: 'name=label-key")
    assert "nearest level first" in message


def test_a_constraint_names_a_level_or_a_node_label_key() -> None:
    assert DEFAULT_LEVELS.resolve("rack") is RACK
    own = DEFAULT_LEVELS.resolve("cloud.google.com/gce-topology-block")
    assert own == TopologyLevel("cloud.google.com/gce-topology-block", ("cloud.google.com/gce-topology-block",), False)
    assert own.noun == "cloud.google.com/gce-topology-block domain"
    assert RACK.describe().startswith("rack (topology.kubenexus.io/rack, network.topology.nvidia.com/leaf")
    with pytest.raises(TopologyLevelError) as raised:
        DEFAULT_LEVELS.resolve("two words")
    assert str(raised.value) == (
        "invalid topology level 'two words'; accepted: a configured level (nvlink, rack, block, zone) "
        "or a node label key, e.g. topology.kubernetes.io/zone"
    )
    with pytest.raises(TopologyLevelError, match="is given twice"):
        TopologyLevels((RACK, RACK))


# --- planning within domains -------------------------------------------------------------------------------


class Nodes:
    """H100 nodes (8 GPUs, 2 NUMA cells of 4, single-numa-node) in an index, with per-node rack and clique."""

    def __init__(self, racks: Mapping[str, str | None], cliques: Mapping[str, str] | None = None) -> None:
        self.index = ClusterIndex()
        for name in racks:
            self.index.upsert_topology(name, nvswitch_node())
        names = self.index.slot_names()
        self.racks = domain_map(RACK, [racks.get(n or "") for n in names])
        self.cliques = domain_map(NVLINK, [(cliques or {}).get(n or "") for n in names])
        self.tried: list[set[str]] = []

    def members(self, count: int, gpus: int) -> list[GangMember]:
        return [GangMember(("ns", f"m{i}"), demand_of(pod(gpus=gpus))) for i in range(count)]

    def gpus(self, row: int) -> NodeGpus | None:
        shape = self.index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy)

    def names(self, rows: Sequence[int] | IntArray) -> set[str]:
        return {self.index.name_of(int(r)) or "" for r in rows}

    def plan(
        self,
        members: list[GangMember],
        constraints: Sequence[LevelConstraint],
        *,
        refuse: Collection[str] = (),
        anchors: Sequence[int] = (),
    ) -> GangPlan | GangUnplaceable:
        arrays = self.index.arrays()

        def planned(rows: IntArray) -> GangPlan | GangUnplaceable:
            self.tried.append(self.names(rows))
            if not self.names(rows).isdisjoint(refuse):
                return GangUnplaceable("the kubelet refuses", 0)
            return plan_gang(arrays, rows, members, gpus=self.gpus)

        return plan_in_domains(arrays, self.index.slots(), members, constraints, planned, anchors=anchors)

    def where(self, plan: GangPlan | GangUnplaceable, domains: DomainMap) -> set[str | None]:
        assert isinstance(plan, GangPlan), plan
        return {domains.value_of(row) for row in plan.rows()}


def required(domains: DomainMap) -> LevelConstraint:
    return LevelConstraint(domains, required=True)


def preferred(domains: DomainMap) -> LevelConstraint:
    return LevelConstraint(domains, required=False)


def test_required_tries_the_tightest_rack_that_can_hold_the_gang_first() -> None:
    nodes = Nodes({"a1": "big", "a2": "big", "a3": "big", "b1": "tight", "b2": "tight", "c1": "small"})
    plan = nodes.plan(nodes.members(8, gpus=2), [required(nodes.racks)])  # 16 GPUs: two whole nodes
    assert nodes.where(plan, nodes.racks) == {"tight"}
    assert nodes.tried == [{"b1", "b2"}]  # "small" cannot hold it by its free amounts: never planned


def test_required_goes_on_to_the_next_rack_when_the_exact_plan_refuses_one() -> None:
    nodes = Nodes({"a1": "big", "a2": "big", "a3": "big", "b1": "tight", "b2": "tight"})
    plan = nodes.plan(nodes.members(8, gpus=2), [required(nodes.racks)], refuse={"b1"})
    assert nodes.where(plan, nodes.racks) == {"big"}
    assert nodes.tried == [{"b1", "b2"}, {"a1", "a2", "a3"}]


def test_required_waits_with_the_largest_rack_and_the_unlabelled_nodes_named() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "b1": "r2", "x1": None, "x2": None, "x3": None})
    plan = nodes.plan(nodes.members(6, gpus=4), [required(nodes.racks)])  # 3 nodes' worth; r1 holds 4
    assert isinstance(plan, GangUnplaceable)
    assert plan.reason == (
        f"requires every member in one rack ({RACK_KEY}, {TOPOGRAPH_LEAF_KEY}, {TOPOGRAPH_BLOCK_KEY}): "
        "no rack has room for 6 member(s) of 8 CPUs, 64 GiB memory, 4 nvidia.com/gpu; the largest holds 4; "
        "3 node(s) have no rack label"
    )
    assert nodes.tried == []
    # Without the constraint the same gang fits: three of the six nodes.
    assert isinstance(nodes.plan(nodes.members(6, gpus=4), []), GangPlan)


def test_required_says_when_racks_fit_by_their_amounts_but_none_admits_the_gang() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "b1": "r2", "b2": "r2"})
    plan = nodes.plan(nodes.members(4, gpus=4), [required(nodes.racks)], refuse={"a1", "b1"})
    assert isinstance(plan, GangUnplaceable)
    assert plan.reason.endswith(
        "2 rack(s) have room for 4 member(s) of 8 CPUs, 64 GiB memory, 4 nvidia.com/gpu by their free amounts, "
        "but none can take them all (rack r1: the kubelet refuses)"
    )


def test_required_with_no_labelled_node_says_so() -> None:
    nodes = Nodes({"a1": None, "a2": None})
    plan = nodes.plan(nodes.members(2, gpus=1), [required(nodes.racks)])
    assert isinstance(plan, GangUnplaceable)
    assert plan.reason.endswith(": none of the 2 candidate node(s) has a rack label")


def test_required_at_a_label_key_nobody_sets_says_it_is_not_a_level() -> None:
    """A typo of a level ("racks") is read as a node label key; the answer says so, not only "no label"."""
    nodes = Nodes({"a1": "r1", "a2": "r1"})
    typo = domain_map(DEFAULT_LEVELS.resolve("racks"), [None, None])
    plan = nodes.plan(nodes.members(2, gpus=1), [required(typo)])
    assert isinstance(plan, GangUnplaceable)
    assert plan.reason == (
        "requires every member in one racks domain: none of the 2 candidate node(s) has the node label racks "
        "(not a configured level, so read as a node label key)"
    )


def test_members_already_placed_fix_the_required_domain() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "b1": "r2", "b2": "r2"})
    anchor = nodes.index.slot_of("b1")
    assert anchor is not None
    plan = nodes.plan(nodes.members(2, gpus=4), [required(nodes.racks)], anchors=[anchor])
    assert nodes.where(plan, nodes.racks) == {"r2"}
    assert nodes.tried == [{"b1", "b2"}]


def test_preferred_spans_the_fewest_racks_largest_first_then_any_node() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "a3": "r1", "b1": "r2", "c1": "r3", "c2": "r3", "x1": None})
    # 32 GPUs: four nodes; r1 (3 nodes) and r3 (2) together are the fewest racks, the largest first.
    plan = nodes.plan(nodes.members(8, gpus=4), [preferred(nodes.racks)])
    assert nodes.where(plan, nodes.racks) == {"r1", "r3"}
    assert nodes.tried == [{"a1", "a2", "a3", "c1", "c2"}]
    # More than every rack together holds: every node, labelled or not.
    nodes.tried.clear()
    plan = nodes.plan(nodes.members(14, gpus=4), [preferred(nodes.racks)])
    assert isinstance(plan, GangPlan)
    assert nodes.where(plan, nodes.racks) == {"r1", "r2", "r3", None}
    assert nodes.tried == [nodes.names(nodes.index.slots())]


def test_preferred_tries_single_domains_tightest_first_then_grows() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "a3": "r1", "b1": "r2", "b2": "r2"})
    plan = nodes.plan(nodes.members(4, gpus=4), [preferred(nodes.racks)], refuse={"b1", "a1"})
    assert isinstance(plan, GangUnplaceable)
    # r2 (tight), r1, then the two together (which is every node: the last answer stands).
    assert nodes.tried == [{"b1", "b2"}, {"a1", "a2", "a3"}, {"a1", "a2", "a3", "b1", "b2"}]


def test_required_rack_with_preferred_clique_nests_the_clique_inside_the_rack() -> None:
    racks = {"a1": "r1", "a2": "r1", "a3": "r1", "b1": "r2", "b2": "r2"}
    cliques = {"a1": "c1", "a2": "c2", "a3": "c2", "b1": "c3", "b2": "c4"}
    nodes = Nodes(racks, cliques)
    constraints = [preferred(nodes.cliques), required(nodes.racks)]  # given in any order: required outermost
    plan = nodes.plan(nodes.members(4, gpus=4), constraints)  # two nodes
    assert nodes.where(plan, nodes.racks) == {"r2"}  # the tightest rack that holds it ...
    assert nodes.where(plan, nodes.cliques) == {"c3", "c4"}  # ... where no one clique does: the fewest
    nodes.tried.clear()
    plan = nodes.plan(nodes.members(4, gpus=4), constraints, refuse={"b1"})
    assert nodes.where(plan, nodes.racks) == {"r1"}
    assert nodes.where(plan, nodes.cliques) == {"c2"}  # one clique of r1 holds both nodes


def test_confine_keeps_rows_to_the_required_domains_of_a_plan() -> None:
    nodes = Nodes({"a1": "r1", "a2": "r1", "b1": "r2"}, {"a1": "c1", "a2": "c1", "b1": "c1"})
    rows = nodes.index.slots()
    used = [nodes.index.slot_of("a1") or 0]
    assert nodes.names(confine(rows, used, [required(nodes.racks), preferred(nodes.cliques)])) == {"a1", "a2"}
    assert np.array_equal(confine(rows, used, [preferred(nodes.racks)]), rows)
