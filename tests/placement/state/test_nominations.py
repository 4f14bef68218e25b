"""Nodes held for preemptors (``placement.state.nominations``): kube-scheduler's nominated pods, on a fake clock."""

from __future__ import annotations

import pytest

from placement.state.nominations import DEFAULT_HOLD_S, Nominations
from placement.state.preemption_search import Preemption, Victim
from tests.gang_fixtures import Clock

NODES = ["a", "b", "c"]


def preemption(*nominations: tuple[tuple[str, str], str]) -> Preemption:
    victim = Victim("ns", "low", "a", 1, "")
    return Preemption(victims=(victim,), nominations=tuple(nominations), reason="test")


def test_a_held_node_is_closed_to_pods_of_lower_or_equal_priority_but_not_to_the_preemptor() -> None:
    held = Nominations(clock=Clock())
    assert held.hold(preemption((("ns", "big"), "a")), priority=100) == DEFAULT_HOLD_S
    assert held.nominated(("ns", "big")) == ("a",)
    assert held.open_to(("ns", "big"), 100, NODES) == NODES
    assert held.open_to(("ns", "small"), 100, NODES) == ["b", "c"]
    assert held.open_to(("ns", "small"), 5, NODES) == ["b", "c"]
    assert held.open_to(("ns", "urgent"), 101, NODES) == NODES  # a higher priority may take the room


def test_a_gang_holds_every_node_its_members_are_nominated_to() -> None:
    held = Nominations(clock=Clock())
    held.hold(preemption((("ns", "m0"), "a"), (("ns", "m1"), "b")), priority=50)
    assert held.open_to(("ns", "other"), 10, NODES) == ["c"]
    assert held.open_to(("ns", "m0"), 50, NODES) == ["a", "c"]  # b is held for its fellow member


def test_release_opens_the_nodes_again() -> None:
    held = Nominations(clock=Clock())
    held.hold(preemption((("ns", "big"), "a")), priority=100)
    held.release(("ns", "big"))
    assert held.nominated(("ns", "big")) == ()
    assert held.open_to(("ns", "small"), 1, NODES) == NODES
    held.release(("ns", "never-held"))  # nothing to release: no error


def test_holds_expire_after_their_time() -> None:
    clock = Clock()
    held = Nominations(clock=clock, hold_s=30)
    assert held.hold(preemption((("ns", "big"), "a")), priority=100) == 30
    clock.now += 29
    assert held.open_to(("ns", "small"), 1, NODES) == ["b", "c"]
    clock.now += 2
    held.expire()
    assert len(held) == 0
    assert held.open_to(("ns", "small"), 1, NODES) == NODES


def test_a_second_hold_replaces_the_first() -> None:
    held = Nominations(clock=Clock())
    held.hold(preemption((("ns", "big"), "a")), priority=100)
    held.hold(preemption((("ns", "big"), "b")), priority=100)
    assert held.nominated(("ns", "big")) == ("b",)
    assert held.open_to(("ns", "small"), 1, NODES) == ["a", "c"]


def test_a_hold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Nominations(hold_s=0)


def test_a_nomination_found_on_a_pending_pod_is_held_once_for_its_time() -> None:
    """``status.nominatedNodeName`` seen by a replica that did not decide the preemption (a follower, or a new
    leader after a failover) holds the node; the pod's later status updates do not prolong the hold."""
    clock = Clock()
    held = Nominations(clock=clock, hold_s=30)
    held.restore(("ns", "big"), "a", priority=100)
    assert held.open_to(("ns", "small"), 1, NODES) == ["b", "c"]
    assert held.open_to(("ns", "big"), 100, NODES) == NODES
    clock.now += 20
    held.restore(("ns", "big"), "a", priority=100)  # the pod updated again: the same nomination
    clock.now += 11
    assert held.open_to(("ns", "small"), 1, NODES) == NODES  # 31 s after it was first seen
    held.restore(("ns", "big"), "a", priority=100)  # and it is not held anew
    assert held.nominated(("ns", "big")) == ()
    held.restore(("ns", "big"), "b", priority=100)  # a new nomination is
    assert held.nominated(("ns", "big")) == ("b",)


def test_a_nomination_this_replica_decided_is_not_held_anew_when_the_pod_shows_it() -> None:
    clock = Clock()
    held = Nominations(clock=clock, hold_s=30)
    held.hold(preemption((("ns", "big"), "a")), priority=100)
    clock.now += 31
    held.restore(("ns", "big"), "a", priority=100)  # the binder wrote it; its hold already ran its course
    assert held.nominated(("ns", "big")) == ()
    held.release(("ns", "big"))  # placed: forgotten, so a later preemption of the same pod holds again
    held.restore(("ns", "big"), "a", priority=100)
    assert held.nominated(("ns", "big")) == ("a",)
