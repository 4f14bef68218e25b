"""Property: random clusters, random sequences of gangs and single pods; the coordinator's invariants hold.

* all or nothing: a group holds reservations only while it has at least min-available members, and a
  placement always brings the group to min-available at least;
* no over-commit: no cell's or node's charges exceed its capacity, no GPU is handed out twice;
* every member placed is admitted by the exact kubelet model (``topology_manager.admit``) on its node,
  replayed in planning order with everything else already charged, and pinned to the planned cells.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubenexus.topology.model import NodeTopology
from placement.core.pods import PendingPod
from placement.core.topology_manager import Pod
from placement.state.gang_coordinator import GangConfig
from tests.gang_fixtures import Cluster, assert_admitted_in_order, assert_no_overcommit, member, pod
from tests.machines.node_topologies import cpu_node, kubelet, l40s_node, nvswitch_node, pcie_node

MACHINES = (
    lambda: nvswitch_node(cells=2),
    lambda: nvswitch_node(cells=4, settings=kubelet("restricted", "pod", memory=True)),
    pcie_node,
    lambda: cpu_node(cpus_per_cell=16, settings=kubelet("best-effort")),
    lambda: l40s_node(settings=kubelet("none")),
)
SPREADS = ("packed", "spread", "balanced")

gangs = st.fixed_dictionaries(
    {
        "size": st.integers(1, 10),
        "missing": st.integers(0, 2),  # members short of min-available (it waits for them)
        "gpus": st.integers(0, 4),
        "cpus": st.integers(1, 24),
        "spread": st.sampled_from(SPREADS),
    }
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("gang"), gangs),
        st.tuples(st.just("single"), st.integers(0, 2), st.integers(1, 8)),
        st.tuples(st.just("tick"), st.just(0)),
        st.tuples(st.just("wait"), st.floats(1, 20)),
        st.tuples(st.just("delete"), st.integers(0, 1000)),
        st.tuples(st.just("bind"), st.integers(0, 1000)),
    ),
    min_size=1,
    max_size=12,
)


def _check(cluster: Cluster, minimum: dict[str, int]) -> None:
    assert_no_overcommit(cluster)
    for status in cluster.gangs.statuses():
        # Bound members are real pods and stay; reservations exist only while the group is whole.
        if status.placed > status.bound:
            assert status.members >= minimum[status.group], status


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(machines=st.lists(st.integers(0, len(MACHINES) - 1), min_size=1, max_size=5), steps=operations)
def test_gangs_are_all_or_nothing_fit_and_admitted(machines: list[int], steps: list[tuple[object, ...]]) -> None:
    nodes: dict[str, NodeTopology] = {f"n{i}": MACHINES[kind]() for i, kind in enumerate(machines)}
    cluster = Cluster(nodes, config=GangConfig(permit_timeout_s=10, starvation_after_s=30))
    minimum: dict[str, int] = {}
    pods: dict[tuple[str, str], Pod] = {}
    groups: list[str] = []
    for number, step in enumerate(steps):
        before = set(cluster.reservations.pending())
        kind = step[0]
        if kind == "gang":
            spec = step[1]
            assert isinstance(spec, dict)
            group = f"g{number}"
            size, short = spec["size"], spec["missing"]
            minimum[f"ns/{group}"] = size
            groups.append(group)
            for i in range(max(size - short, 1)):
                m = member(f"{group}-{i:02d}", group, size, spread=spec["spread"], gpus=spec["gpus"], cpus=spec["cpus"])
                pods[m.key] = m.pod
                cluster.gangs.add_member(m)
            cluster.gangs.place("ns", group)
        elif kind == "single":
            gpus, cpus = step[1], step[2]
            assert isinstance(gpus, int)
            assert isinstance(cpus, int)
            allowed = cluster.gangs.nodes_open_to_backfill(cluster.index.node_names())
            decision = cluster.reservations.decide(
                PendingPod("ns", f"single-{number}", pod(gpus=gpus, cpus=cpus)), allowed
            )
            if decision.node is not None:
                entry = cluster.index.pod("ns", f"single-{number}")
                assert entry is not None
                cluster.reservations.observe_pod(entry[0])
        elif kind == "tick":
            cluster.gangs.tick()
        elif kind == "wait":
            assert isinstance(step[1], float)
            cluster.clock.now += step[1]
            cluster.gangs.tick()
        elif groups:
            choice = step[1]
            assert isinstance(choice, int)
            group = groups[choice % len(groups)]
            keys = sorted(k for k in pods if k[1].startswith(f"{group}-") and cluster.index.pod(*k) is not None)
            if kind == "delete" and keys:
                cluster.gangs.observe_deleted(*keys[choice % len(keys)])
                del pods[keys[choice % len(keys)]]
            elif kind == "bind":
                cluster.bind_all([k for k in keys if k in cluster.reservations.pending()])
        placed = sorted(set(cluster.reservations.pending()) - before)
        gang_placed = [key for key in placed if not key[1].startswith("single-")]
        # Single-shape groups: member order is planning order on every node, so the replay is exact.
        assert_admitted_in_order(cluster, gang_placed, pods)
        for key in gang_placed:
            status = cluster.gangs.status("ns", key[1].split("-")[0])
            assert status is not None
            assert status.placed >= minimum[status.group]
        _check(cluster, minimum)
