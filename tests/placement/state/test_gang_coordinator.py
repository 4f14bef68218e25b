"""The gang coordinator: all or nothing, permit timeouts, churn, invalid labels, fairness and backfill."""

from __future__ import annotations

from placement.core.annotations import MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.podgroup import PermitVerdict, PodGroupSpec
from placement.core.pods import PendingPod
from placement.core.topology_manager import Pod
from placement.state.gang_coordinator import GangConfig, GangPhase, GangPlacement, GangStatus
from tests.gang_fixtures import Cluster, assert_admitted_in_order, assert_no_overcommit, member, pod
from tests.machines.node_topologies import nvswitch_node


def _two_nodes(config: GangConfig | None = None) -> Cluster:
    return Cluster({"a": nvswitch_node(cells=2), "b": nvswitch_node(cells=2)}, config=config)


def _gang(group: str, size: int, minimum: int | None = None, *, gpus: int = 1) -> list[PendingPod]:
    return [member(f"{group}-{i}", group, minimum or size, gpus=gpus) for i in range(size)]


def _reserved(cluster: Cluster, group: str) -> int:
    return sum(1 for key in cluster.reservations.pending() if key[1].startswith(f"{group}-"))


def _occupy(cluster: Cluster, name: str, node: str, gpus: int) -> None:
    """A pod placed on its own and bound: it stays until deleted."""
    decision = cluster.reservations.decide(PendingPod("ns", name, pod(gpus=gpus)), [node])
    assert decision.node == node
    entry = cluster.index.pod("ns", name)
    assert entry is not None
    cluster.reservations.observe_pod(entry[0])


def _placed(result: GangPlacement | GangStatus) -> GangPlacement:
    assert isinstance(result, GangPlacement), result
    return result


def test_waits_for_min_available_then_places_every_member_at_once() -> None:
    cluster = _two_nodes()
    members = _gang("llm", 16)
    for m in members[:3]:
        status = cluster.gangs.add_member(m)
    assert status is not None
    assert (status.phase, status.message) == (GangPhase.WAITING_FOR_MEMBERS, "waiting for pod group 3/16")
    assert cluster.gangs.place("ns", "llm") == status
    assert cluster.gangs.permit_status("ns", "llm-0").verdict is PermitVerdict.WAIT
    for m in members[3:]:
        cluster.gangs.add_member(m)
    placement = _placed(cluster.gangs.place("ns", "llm"))
    assert len(placement.members) == 16
    assert {p.node for p in placement.members} == {"a", "b"}
    assert all(len(p.cells) == 1 and p.pinned for p in placement.members)
    assert placement.status.phase is GangPhase.RESERVED
    assert cluster.gangs.permit_status("ns", "llm-7").verdict is PermitVerdict.ALLOW
    assert_admitted_in_order(cluster, [m.key for m in members], {m.key: m.pod for m in members})
    # Gang reservations have no TTL of their own: only the permit timeout releases them, all together.
    cluster.clock.now += 31
    assert cluster.reservations.expire() == []
    cluster.bind_all([m.key for m in members])
    status = cluster.gangs.status("ns", "llm")
    assert status is not None
    assert (status.phase, status.bound) == (GangPhase.BOUND, 16)


def test_pods_outside_groups_are_left_alone() -> None:
    cluster = _two_nodes()
    assert cluster.gangs.add_member(PendingPod("ns", "web", pod(cpus=1))) is None
    permit = cluster.gangs.permit_status("ns", "web")
    assert (permit.verdict, permit.group) == (PermitVerdict.ALLOW, "")


def test_two_interleaved_gangs_that_cannot_both_fit_never_both_hold_part() -> None:
    cluster = _two_nodes()
    first, second = _gang("x", 12), _gang("y", 12)
    for a, b in zip(first, second, strict=True):
        cluster.gangs.add_member(a)
        cluster.gangs.add_member(b)
        cluster.gangs.tick()
        cluster.gangs.place("ns", "y")
        assert _reserved(cluster, "x") in (0, 12)
        assert _reserved(cluster, "y") in (0, 12)
    assert (_reserved(cluster, "x"), _reserved(cluster, "y")) == (12, 0)
    waiting = cluster.gangs.status("ns", "y")
    assert waiting is not None
    assert waiting.phase is GangPhase.WAITING_FOR_CAPACITY
    assert waiting.placed == 0
    assert waiting.message.startswith("cannot fit 12 member(s) of 8 CPUs, 64 GiB memory, 1 nvidia.com/gpu")
    assert "room for 4" in waiting.message
    assert_no_overcommit(cluster)


def test_a_gang_larger_than_the_cluster_holds_nothing_and_says_why() -> None:
    cluster = _two_nodes()
    for m in _gang("huge", 17):
        cluster.gangs.add_member(m)
    status = cluster.gangs.place("ns", "huge")
    assert isinstance(status, GangStatus)
    assert status.phase is GangPhase.UNSCHEDULABLE
    assert status.message.startswith("can never fit the cluster as it is: cannot fit 17 member(s)")
    assert "(17 GPUs in all)" in status.message
    assert "room for 16 (largest node 8)" in status.message
    assert cluster.reservations.pending() == {}
    assert cluster.pods() == []


def test_invalid_labels_get_a_clear_error_and_block_the_whole_group() -> None:
    cluster = _two_nodes()
    members = _gang("job", 4)
    for m in members[:3]:
        cluster.gangs.add_member(m)
    bad = PendingPod("ns", "job-3", pod(gpus=1), labels={**members[3].labels, MIN_AVAILABLE_KEY: "four"})
    status = cluster.gangs.add_member(bad)
    assert status is not None
    assert status.phase is GangPhase.INVALID
    assert status.message == (
        f"pod ns/job-3: invalid value 'four' for {MIN_AVAILABLE_KEY} (not an integer); "
        "accepted: a positive integer, e.g. 8"
    )
    disagreeing = cluster.gangs.add_member(member("job-4", "job", 8, gpus=1))
    assert disagreeing is not None
    assert "members disagree: the other members of ns/job say 4" in disagreeing.message
    assert cluster.gangs.place("ns", "job") == cluster.gangs.status("ns", "job")
    assert cluster.reservations.pending() == {}
    assert cluster.gangs.permit_status("ns", "job-3").verdict is PermitVerdict.REJECT
    # Fixing the pods (here: replacing one, deleting the other) lets the group go ahead.
    cluster.gangs.add_member(members[3])
    cluster.gangs.observe_deleted("ns", "job-4")
    assert len(_placed(cluster.gangs.place("ns", "job")).members) == 4
    unnamed = cluster.gangs.add_member(PendingPod("ns", "lost", pod(), labels={MIN_AVAILABLE_KEY: "2"}))
    assert unnamed is not None
    assert (unnamed.group, unnamed.phase) == ("", GangPhase.INVALID)


def test_permit_timeout_releases_the_unbound_members_and_keeps_the_bound_ones() -> None:
    cluster = _two_nodes(GangConfig(permit_timeout_s=5))
    members = _gang("t", 8, gpus=2)
    for m in members:
        cluster.gangs.add_member(m)
    placement = _placed(cluster.gangs.place("ns", "t"))
    assert placement.deadline == cluster.clock.now + 5
    cluster.bind_all([m.key for m in members[:3]])
    bound_nodes = {m.key: cluster.index.pod(*m.key) for m in members[:3]}
    cluster.clock.now += 4.9
    assert cluster.gangs.tick() == []  # nothing waits yet
    cluster.clock.now += 0.2
    statuses = cluster.gangs.tick()  # expires the permit, then places the five again next to the three
    assert [s.phase for s in statuses] == [GangPhase.RESERVED]
    released = cluster.gangs.permit_status("ns", "t-5")
    # Told once, so the scheduler runs a new cycle for it rather than binding where it was first placed.
    assert released.verdict is PermitVerdict.REJECT
    assert released.reason.startswith("permit timeout: 5 member(s) of ns/t not bound within 5 s")
    assert cluster.gangs.permit_status("ns", "t-5").verdict is PermitVerdict.ALLOW  # placed again since
    assert {m.key: cluster.index.pod(*m.key) for m in members[:3]} == bound_nodes


def test_released_gang_without_capacity_waits_holding_nothing() -> None:
    cluster = _two_nodes(GangConfig(permit_timeout_s=5))
    members = _gang("t", 16)
    for m in members:
        cluster.gangs.add_member(m)
    _placed(cluster.gangs.place("ns", "t"))
    cluster.clock.now += 6
    status = cluster.gangs.permit_status("ns", "t-0")  # every call expires what is due
    assert status.verdict is PermitVerdict.REJECT
    # Meanwhile a single pod took a GPU: the group no longer fits and must hold nothing at all.
    _occupy(cluster, "single", "a", 1)
    [waiting] = cluster.gangs.tick()
    assert (waiting.phase, waiting.placed) == (GangPhase.WAITING_FOR_CAPACITY, 0)
    assert _reserved(cluster, "t") == 0


def test_member_churn() -> None:
    cluster = _two_nodes()
    members = _gang("c", 5, minimum=4)
    for m in members:
        cluster.gangs.add_member(m)
    _placed(cluster.gangs.place("ns", "c"))
    # A reserved member deleted: exactly its reservation goes; four members still make the group.
    status = cluster.gangs.observe_deleted("ns", "c-4")
    assert status is not None
    assert (status.phase, status.placed) == (GangPhase.RESERVED, 4)
    assert sorted(cluster.reservations.pending()) == [("ns", f"c-{i}") for i in range(4)]
    # One more: below min-available before binding, the whole group is released.
    status = cluster.gangs.observe_deleted("ns", "c-3")
    assert status is not None
    assert (status.phase, status.placed, status.message) == (
        GangPhase.WAITING_FOR_MEMBERS,
        0,
        "waiting for pod group 3/4",
    )
    assert cluster.reservations.pending() == {}
    assert cluster.gangs.permit_status("ns", "c-0").verdict is PermitVerdict.REJECT
    # Replaced, placed and bound; then a bound member fails: only its own charge goes.
    cluster.gangs.add_member(members[3])
    _placed(cluster.gangs.place("ns", "c"))
    cluster.bind_all([m.key for m in members[:4]])
    cluster.gangs.observe_deleted("ns", "c-0")
    assert sorted(u.key for u, _ in cluster.pods()) == [("ns", f"c-{i}") for i in range(1, 4)]


def test_scaling_up_adds_members_next_to_the_bound_ones_without_moving_them() -> None:
    cluster = _two_nodes()
    members = _gang("s", 4)
    for m in members:
        cluster.gangs.add_member(m)
    first = _placed(cluster.gangs.place("ns", "s"))
    cluster.bind_all([m.key for m in members])
    before = {p.name: (p.node, p.cells, p.gpus) for p in first.members}
    extra = [member(f"s-{i}", "s", 4, gpus=1) for i in range(4, 6)]
    for m in extra:
        status = cluster.gangs.add_member(m)
    assert status is not None
    assert status.phase is GangPhase.BOUND  # the group is complete; the extras wait on their own
    more = _placed(cluster.gangs.place("ns", "s"))
    assert [p.name for p in more.members] == ["s-4", "s-5"]
    assert {p.node for p in more.members} == {p.node for p in first.members}
    for name, where in before.items():
        entry = cluster.index.pod("ns", name)
        assert entry is not None
        assert (entry[0].node, entry[0].cells, entry[0].gpus) == where


def test_unreserve_of_one_member_releases_the_whole_group() -> None:
    cluster = _two_nodes()
    for m in _gang("u", 6):
        cluster.gangs.add_member(m)
    _placed(cluster.gangs.place("ns", "u"))
    assert cluster.gangs.unreserve("ns", "u-2")
    assert cluster.reservations.pending() == {}
    assert not cluster.gangs.unreserve("ns", "u-2")


def test_scheduler_plugins_groups_wait_for_their_pod_group_object() -> None:
    cluster = _two_nodes()
    labels = {SCHEDULER_PLUGINS_KEY: "spark"}
    driver = PendingPod("ns", "spark-driver", pod(cpus=2, memory_gib=8), labels=labels)
    status = cluster.gangs.add_member(driver)
    assert status is not None
    assert status.message == "waiting for the PodGroup object ns/spark (scheduling.x-k8s.io) to read minMember"
    spec = PodGroupSpec(min_member=3)
    for i in range(2):
        executor = PendingPod("ns", f"spark-exec-{i}", pod(gpus=1), labels=labels)
        status = cluster.gangs.add_member(executor, pod_group=spec)
    placement = _placed(cluster.gangs.place("ns", "spark"))
    assert len({p.node for p in placement.members}) == 1


def test_starving_head_gang_holds_nodes_so_small_work_cannot_starve_it() -> None:
    cluster = _two_nodes(GangConfig(starvation_after_s=60))
    # One GPU busy on each node: a 16-GPU gang must wait for both to free up.
    for node in ("a", "b"):
        _occupy(cluster, f"busy-{node}", node, 1)
    for m in _gang("big", 16):
        cluster.gangs.add_member(m)
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.WAITING_FOR_CAPACITY
    # Before the threshold, smaller work backfills freely.
    small = _gang("small", 2)
    for m in small:
        cluster.gangs.add_member(m)
    assert _placed(cluster.gangs.place("ns", "small")).members
    cluster.bind_all([m.key for m in small])
    assert cluster.gangs.nodes_open_to_backfill(["a", "b"]) == ["a", "b"]
    cluster.clock.now += 61
    statuses = {s.group: s for s in cluster.gangs.tick()}
    assert "holding 2 node(s) for it" in statuses["ns/big"].message
    assert cluster.gangs.nodes_open_to_backfill(["a", "b"]) == []
    for m in _gang("later", 1):
        cluster.gangs.add_member(m)
    later = cluster.gangs.place("ns", "later")
    assert isinstance(later, GangStatus)
    assert later.phase is GangPhase.WAITING_FOR_CAPACITY
    # The busy pods and the small gang finish: the head goes first.
    for name in ("busy-a", "busy-b"):
        cluster.reservations.observe_pod_deleted("ns", name)
    for i in range(2):
        cluster.gangs.observe_deleted("ns", f"small-{i}")
    statuses = {s.group: s for s in cluster.gangs.tick()}
    assert statuses["ns/big"].phase is GangPhase.RESERVED
    assert statuses["ns/later"].phase is GangPhase.WAITING_FOR_CAPACITY
    assert cluster.gangs.nodes_open_to_backfill(["a"]) == ["a"]


def test_queue_order_is_priority_then_creation_with_an_age_boost() -> None:
    cluster = Cluster({"a": nvswitch_node(cells=2)}, config=GangConfig(starvation_after_s=60))
    _occupy(cluster, "busy", "a", 4)  # single-numa-node: at most one cell's 4 GPUs per pod
    _occupy(cluster, "busy-2", "a", 4)
    old = [member(f"old-{i}", "old", 8, gpus=1) for i in range(8)]
    urgent = [member(f"urgent-{i}", "urgent", 8, gpus=1, priority=100) for i in range(8)]
    for m in old:
        cluster.gangs.add_member(m)
    cluster.gangs.tick()
    cluster.clock.now += 30
    for m in urgent:
        cluster.gangs.add_member(m)
    cluster.gangs.tick()
    cluster.reservations.observe_pod_deleted("ns", "busy")
    cluster.reservations.observe_pod_deleted("ns", "busy-2")
    assert [s.group for s in cluster.gangs.tick()] == ["ns/urgent", "ns/old"]  # higher priority first
    cluster.gangs.unreserve("ns", "urgent-0")
    _occupy(cluster, "busy", "a", 4)
    _occupy(cluster, "busy-2", "a", 4)
    cluster.clock.now += 40  # old has waited 70 s, urgent 0 s since it was released
    cluster.gangs.tick()
    cluster.reservations.observe_pod_deleted("ns", "busy")
    cluster.reservations.observe_pod_deleted("ns", "busy-2")
    statuses = cluster.gangs.tick()
    assert [(s.group, s.phase) for s in statuses] == [
        ("ns/old", GangPhase.RESERVED),
        ("ns/urgent", GangPhase.WAITING_FOR_CAPACITY),
    ]


def test_every_pod_kind_counts() -> None:
    # Guard for the fixtures the other tests lean on: the member helper really asks for what it says.
    assert pod(gpus=2, cpus=3).containers[0].devices == (("nvidia.com/gpu", 2),)
    assert isinstance(pod(), Pod)
