"""Gang scheduling against a careless or hostile client (issue "Trust"): requests are registered whole or
not at all, duplicates and oversized groups are refused, members that never appear as pods are dropped,
the retry loop does bounded work without holding the index lock, and permit timeouts are logged and counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

import placement.state.gang_coordinator as state_gangs
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY
from placement.core.gang_plan import plan_gang
from placement.core.podgroup import PermitVerdict
from placement.core.pods import ContainerSpec, PendingPod, PodSpec
from placement.service.engine import PlacementEngine
from placement.service.errors import InvalidRequest
from placement.service.gang_port import CoordinatedGangs
from placement.service.results import GangSpec, GangState
from placement.state.gang_coordinator import GangConfig, GangPhase, GangPlacement
from placement.state.gang_coordinator import planning as gang_planning
from tests.gang_fixtures import Cluster, assert_no_overcommit, member, pod
from tests.machines.node_topologies import nvswitch_node


def _cluster(config: GangConfig | None = None) -> Cluster:
    return Cluster({"a": nvswitch_node(cells=2), "b": nvswitch_node(cells=2)}, config=config)


def _engine(cluster: Cluster) -> PlacementEngine:
    gangs = CoordinatedGangs(cluster.gangs, clock=cluster.clock)
    return PlacementEngine(index=cluster.index, reservations=cluster.reservations, gangs=gangs, clock=cluster.clock)


def _spec(name: str, *, gpus: int = 1, namespace: str = "ml", labels: dict[str, str] | None = None) -> PodSpec:
    resources = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    return PodSpec(namespace, name, (ContainerSpec("main", resources, resources),), labels=labels or {})


def _group(name: str, members: list[PodSpec], min_member: int = 0) -> GangSpec:
    return GangSpec("ml", name, min_member, tuple(members))


def _nothing_registered(cluster: Cluster, *names: str) -> None:
    assert cluster.gangs.statuses() == []
    for name in names:
        assert cluster.gangs.permit_status("ml", name).group == ""
    assert cluster.gangs.tick() == []
    assert cluster.reservations.pending() == {}
    assert cluster.pods() == []


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_spec("w-3", namespace="other"), "pod other/w-3 is not in the namespace of pod group ml/train"),
        (
            _spec("w-3", labels={GROUP_NAME_KEY: "else", MIN_AVAILABLE_KEY: "4"}),
            "pod ml/w-3 belongs to pod group ml/else",
        ),
        (
            _spec("w-3", labels={GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: "four"}),
            f"pod ml/w-3: invalid value 'four' for {MIN_AVAILABLE_KEY} (not an integer)",
        ),
    ],
)
def test_a_request_refused_for_its_last_member_leaves_nothing_behind(bad: PodSpec, message: str) -> None:
    cluster = _cluster()
    engine = _engine(cluster)
    members = [_spec(f"w-{i}") for i in range(3)] + [bad]
    with pytest.raises(InvalidRequest) as refused:
        engine.place_gang(_group("train", members, min_member=3))
    assert str(refused.value).startswith(message)
    _nothing_registered(cluster, "w-0", "w-1", "w-2", "w-3")


def test_duplicate_member_names_are_refused() -> None:
    cluster = _cluster()
    engine = _engine(cluster)
    with pytest.raises(InvalidRequest, match="pod ml/w-1 appears more than once in pod group ml/twice"):
        engine.place_gang(_group("twice", [_spec("w-0"), _spec("w-1"), _spec("w-1")]))
    _nothing_registered(cluster, "w-0", "w-1")


def test_groups_over_the_cap_are_refused() -> None:
    cluster = _cluster(GangConfig(max_members=4))
    engine = _engine(cluster)
    with pytest.raises(InvalidRequest, match="pod group ml/big: 5 members, more than the 4 a group may have"):
        engine.place_gang(_group("big", [_spec(f"b-{i}") for i in range(5)]))
    labels = {GROUP_NAME_KEY: "wide", MIN_AVAILABLE_KEY: "2147483648"}
    with pytest.raises(InvalidRequest, match=r"invalid value '2147483648'.*up to 4, the most members a pod group"):
        engine.place_gang(_group("wide", [_spec("w-0", labels=labels)]))
    _nothing_registered(cluster, "b-0", "w-0")
    # A group grows request by request up to the cap, not past it.
    assert engine.place_gang(_group("grow", [_spec(f"g-{i}") for i in range(4)], min_member=4)).placed == 4
    labels = {GROUP_NAME_KEY: "grow", MIN_AVAILABLE_KEY: "4"}
    with pytest.raises(InvalidRequest, match="pod group ml/grow would have 5 members, more than the 4"):
        engine.place_gang(_group("grow", [_spec("g-4", labels=labels)]))
    # The cap holds for labelled pods too: a min-available above it is an invalid label.
    status = cluster.gangs.add_member(member("x-0", "x", 5))
    assert status is not None
    assert status.phase is GangPhase.INVALID
    assert "accepted: a positive integer up to 4" in status.message


def test_members_never_seen_as_pods_are_dropped_with_their_reservations() -> None:
    cluster = _cluster(GangConfig(permit_timeout_s=5))
    engine = _engine(cluster)
    gangs = engine.gangs
    assert isinstance(gangs, CoordinatedGangs)
    gangs.observe_pod(("ml", "seen-0"), None, False)  # the watch saw this one before the request came
    placed = engine.place_gang(_group("mixed", [_spec("seen-0"), _spec("late-1")]))
    assert placed.state is GangState.PLACED
    abandoned = engine.place_gang(_group("ghosts", [_spec(f"ghost-{i}", gpus=4) for i in range(2)]))
    assert abandoned.state is GangState.PLACED
    cluster.clock.now += 4.9
    assert len(cluster.gangs.statuses()) == 2
    gangs.observe_pod(("ml", "late-1"), None, False)  # shown by the watch in time: kept
    cluster.clock.now += 0.2
    cluster.gangs.tick()
    # The abandoned group is gone with its reservations; the other kept its members (placed again after
    # its permit timed out).
    assert [s.group for s in cluster.gangs.statuses()] == ["ml/mixed"]
    assert cluster.gangs.members_dropped == 2
    assert cluster.gangs.permit_status("ml", "ghost-0").group == ""
    assert sorted(key[1] for key in cluster.reservations.pending()) == ["late-1", "seen-0"]


def test_dropping_unseen_members_releases_the_group_below_min_available() -> None:
    cluster = _cluster(GangConfig(permit_timeout_s=5))
    engine = _engine(cluster)
    gangs = engine.gangs
    assert isinstance(gangs, CoordinatedGangs)
    gangs.observe_pod(("ml", "real-0"), None, False)
    assert engine.place_gang(_group("half", [_spec("real-0"), _spec("fake-1")])).state is GangState.PLACED
    cluster.clock.now += 5
    permit = cluster.gangs.permit_status("ml", "real-0")
    # The fake member went; the real one lost its reservation with it and waits for a second member.
    assert permit.verdict is PermitVerdict.REJECT
    status = cluster.gangs.status("ml", "half")
    assert status is not None
    assert (status.phase, status.members, status.placed) == (GangPhase.WAITING_FOR_MEMBERS, 1, 0)
    assert cluster.reservations.pending() == {}


def test_permit_timeouts_are_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    cluster = _cluster(GangConfig(permit_timeout_s=5))
    members = [member(f"t-{i}", "t", 2, gpus=4) for i in range(2)]
    for m in members:
        cluster.gangs.add_member(m)
    assert isinstance(cluster.gangs.place("ns", "t"), GangPlacement)
    cluster.bind_all([members[0].key])
    cluster.clock.now += 5
    with caplog.at_level(logging.INFO, logger="kubenexus.placement.gangs"):
        cluster.gangs.tick()
    assert cluster.gangs.permit_timeouts == 1
    (record,) = [r for r in caplog.records if r.name == "kubenexus.placement.gangs"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "pod group permit timed out: reservations released"
    assert vars(record)["group"] == "ns/t"
    assert vars(record)["members"] == ["ns/t-1"]
    assert vars(record)["why"] == (
        "permit timeout: 1 member(s) of ns/t not bound within 5 s; their reservations were released"
    )


# --- the retry loop ---------------------------------------------------------------------------------


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the groups the coordinator plans, in order."""
    sizes: list[int] = []
    real = plan_gang

    def counting(*args: Any, **kwargs: Any) -> Any:
        sizes.append(len(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(gang_planning, "plan_gang", counting)
    return sizes


def test_a_group_that_waits_is_not_planned_again_until_something_changes(plans: list[int]) -> None:
    cluster = _cluster()
    for m in [member(f"w-{i}", "w", 3, gpus=8) for i in range(3)]:
        cluster.gangs.add_member(m)
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.UNSCHEDULABLE
    assert plans  # planned, and found that it could never fit
    plans.clear()
    for _ in range(5):
        assert cluster.gangs.tick() == [status]
    assert plans == []  # nothing changed: nothing planned
    cluster.reservations.decide(PendingPod("ns", "single", pod(gpus=1)), ["a"])
    cluster.gangs.tick()
    assert plans == []  # the cluster changed, but not its nodes: it still can never fit, no plan needed


def test_each_tick_plans_the_head_and_others_within_its_budget_going_on_where_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _cluster(GangConfig(tick_budget=3 + state_gangs.GROUP_PLAN_COST))  # one more group of three
    for node in ("a", "b"):
        assert cluster.reservations.decide(PendingPod("ns", f"busy-{node}", pod(gpus=4)), [node]).node == node
    for group in ("g1", "g2", "g3"):
        for m in [member(f"{group}-{i}", group, 3, gpus=4) for i in range(3)]:
            cluster.gangs.add_member(m)  # 12 GPUs each, 8 free: they all wait
    planned: list[str] = []
    real = plan_gang

    def recording(*args: Any, **kwargs: Any) -> Any:
        planned.append(args[2][0].key[1].split("-")[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(gang_planning, "plan_gang", recording)
    ticks = []
    for _ in range(3):
        planned.clear()
        statuses = cluster.gangs.tick()
        ticks.append(sorted(set(planned)))
        assert [s.group for s in statuses] == ["ns/g1", "ns/g2", "ns/g3"]  # every waiting group, in order
        # Something changes between ticks, so that every group is worth planning again.
        cluster.reservations.decide(PendingPod("ns", "blip", pod(cpus=1)), ["a"])
        cluster.reservations.unreserve("ns", "blip")
    assert ticks == [["g1", "g2"], ["g1", "g3"], ["g1", "g2"]]


def test_planning_holds_no_lock_and_a_node_taken_meanwhile_is_not_double_booked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _cluster()
    for m in [member(f"p-{i}", "p", 4, gpus=4) for i in range(4)]:
        cluster.gangs.add_member(m)
    real = plan_gang
    took_lock = threading.Event()
    first = True

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        nonlocal first
        if first:
            first = False

            def other() -> None:  # another decision, on another thread, while the plan is made
                with cluster.index.lock:
                    cluster.reservations.decide(PendingPod("ns", "single", pod(gpus=1)), ["a"])
                    took_lock.set()

            thread = threading.Thread(target=other)
            thread.start()
            thread.join(5)
        return real(*args, **kwargs)

    monkeypatch.setattr(gang_planning, "plan_gang", meanwhile)
    statuses = cluster.gangs.tick()
    assert took_lock.is_set()  # the other decision ran while the group was planned
    # The plan on the copy wanted every GPU; the commit saw node a changed and planned again: 15 GPUs are
    # left, so the group of four 4-GPU members waits, holding nothing, and nothing is booked twice.
    assert [s.phase for s in statuses] == [GangPhase.WAITING_FOR_CAPACITY]
    assert sorted(cluster.reservations.pending()) == [("ns", "single")]
    assert_no_overcommit(cluster)


def test_a_plan_whose_nodes_did_not_change_is_reserved_from_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster()
    calls: list[Callable[..., Any]] = []
    real = plan_gang

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["gpus"])
        return real(*args, **kwargs)

    monkeypatch.setattr(gang_planning, "plan_gang", recording)
    for m in [member(f"c-{i}", "c", 2, gpus=4) for i in range(2)]:
        cluster.gangs.add_member(m)
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.RESERVED
    assert len(calls) == 1  # planned once, on the copy; reserved without planning again
    assert_no_overcommit(cluster)


def test_retries_keep_to_the_nodes_the_request_named() -> None:
    cluster = _cluster(GangConfig(permit_timeout_s=5))
    engine = _engine(cluster)
    gangs = engine.gangs
    assert isinstance(gangs, CoordinatedGangs)
    for name in ("r-0", "r-1"):
        gangs.observe_pod(("ml", name), None, False)
    placed = engine.place_gang(_group("r", [_spec("r-0"), _spec("r-1")]), ["b"])
    assert {p.node for p in placed.placements} == {"b"}
    cluster.clock.now += 5  # the permit times out; the next tick places the group again, on "b" only
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.RESERVED
    assert set(cluster.reservations.pending().values()) == {"b"}


def test_a_group_the_retry_loop_reserved_is_handed_to_the_next_request() -> None:
    """The binder learns where to bind from PlaceGang's answer: a group reserved by a tick in between is
    answered with its members' placements, not as placed with nothing to bind."""
    cluster = _cluster()
    engine = _engine(cluster)
    assert cluster.reservations.decide(PendingPod("ns", "busy", pod(gpus=4)), ["a"]).node == "a"
    members = [_spec(f"late-{i}", gpus=4) for i in range(4)]
    assert engine.place_gang(_group("late", members)).state is GangState.WAITING  # 16 GPUs, 12 free
    cluster.reservations.unreserve("ns", "busy")
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.RESERVED
    again = engine.place_gang(_group("late", members))
    assert again.state is GangState.PLACED
    assert sorted(p.name for p in again.placements) == [f"late-{i}" for i in range(4)]
    reserved = cluster.reservations.pending()
    assert {(p.namespace, p.name): p.node for p in again.placements} == reserved


def test_ticks_on_their_own_thread_never_double_book_against_concurrent_decisions() -> None:
    cluster = _cluster(GangConfig(permit_timeout_s=1))
    engine = _engine(cluster)
    gangs = engine.gangs
    assert isinstance(gangs, CoordinatedGangs)
    for group in range(4):
        members = [_spec(f"c{group}-{i}", gpus=2) for i in range(3)]
        for spec in members:
            gangs.observe_pod(("ml", spec.name), None, False)
        engine.place_gang(_group(f"c{group}", members))
    stop = threading.Event()
    failures: list[BaseException] = []

    def ticking() -> None:
        try:
            while not stop.is_set():
                with cluster.index.lock:
                    cluster.clock.now += 0.3  # permits time out now and then: groups are placed again
                cluster.gangs.tick()
        except BaseException as error:  # reported below, on the test's thread
            failures.append(error)

    ticker = threading.Thread(target=ticking)
    ticker.start()
    try:
        for n in range(200):
            node = "ab"[n % 2]
            decision = cluster.reservations.decide(PendingPod("ns", f"s-{n}", pod(gpus=1 + n % 3)), [node])
            if decision.node is not None and n % 4:
                cluster.reservations.unreserve("ns", f"s-{n}")
            with cluster.index.lock:
                assert_no_overcommit(cluster)
    finally:
        stop.set()
        ticker.join(10)
    assert failures == []
    assert_no_overcommit(cluster)


def test_a_slow_failed_plan_is_not_tried_again_until_its_cost_has_passed(plans: list[int]) -> None:
    """A group at the cap takes ~0.1 s to plan; retried at every tick while the cluster churns, it would hold
    the interpreter a tenth of the time. A failed plan slower than GangConfig.slow_plan_s waits RETRY_COST_FACTOR times
    its duration instead, unless the group itself changes."""
    cluster = Cluster(
        {"a": nvswitch_node(cells=2), "b": nvswitch_node(cells=2)}, slow_plan_s=-1.0
    )  # every plan counts as slow here
    for name in ("a", "b"):  # one GPU taken on each node: four 4-GPU members cannot fit now, but could later
        assert cluster.reservations.decide(PendingPod("ns", f"single-{name}", pod(gpus=1)), [name]).node == name
    for m in [member(f"big-{i}", "big", 4, gpus=4) for i in range(4)]:
        cluster.gangs.add_member(m)
    [status] = cluster.gangs.tick()
    assert status.phase is GangPhase.WAITING_FOR_CAPACITY
    assert plans
    plans.clear()
    cluster.reservations.unreserve("ns", "single-a")  # the cluster changed: a retry would plan again
    cluster.gangs.tick()
    assert plans == []  # ... but not before the slow plan's cost has passed
    cluster.clock.now += 60
    cluster.gangs.tick()
    assert plans  # planned again (and still failing: single-b holds a GPU of node b)
    plans.clear()
    cluster.gangs.add_member(member("big-4", "big", 4, gpus=4))  # the group changed: planned at once
    cluster.gangs.tick()
    assert plans
