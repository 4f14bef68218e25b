"""A group's status as the binder writes it back (``placement.shim.group_status.desired_status``), per API,
and a group object's permit timeout reaching the coordinator (scheduler-plugins' scheduleTimeoutSeconds)."""

from __future__ import annotations

from typing import Any

import pytest

from placement.api.codec import decode_gang
from placement.api.v1 import placement_pb2 as pb
from placement.core.gang_sources import (
    SOURCE_PODGROUP,
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    GroupDefinition,
    PodGroupKey,
)
from placement.core.podgroup import DomainConstraint, GroupRef
from placement.service.errors import InvalidRequest
from placement.shim.group_status import GroupOutcome, desired_status
from placement.state.gangs import GangConfig, GangPlacement
from tests.gang_fixtures import Cluster, member
from tests.machines.node_topologies import nvswitch_node

NOW = "2026-05-01T10:00:00Z"
LATER = "2026-05-01T10:05:00Z"


def _definition(source: str, minimum: int = 2) -> GroupDefinition:
    return GroupDefinition(PodGroupKey(source, "ml", "train"), minimum)


def _pods(*states: tuple[bool, str]) -> list[dict[str, Any]]:
    """Member pods: (bound, phase) each."""
    return [{"spec": {"nodeName": "a"} if bound else {}, "status": {"phase": phase}} for bound, phase in states]


def test_scheduler_plugins_phases_follow_its_podgroup_controller() -> None:
    definition = _definition(SOURCE_SCHEDULER_PLUGINS)
    waiting = desired_status(definition, {}, _pods((False, "Pending")), GroupOutcome.WAITING_FOR_MEMBERS, "", now=NOW)
    assert waiting == {"phase": "Pending", "running": 0, "succeeded": 0, "failed": 0}
    scheduling = desired_status(
        definition, {"status": waiting}, _pods((True, "Pending"), (True, "Pending")), GroupOutcome.PLACED, "", now=NOW
    )
    assert scheduling == {"phase": "Scheduling", "scheduleStartTime": NOW, "running": 0, "succeeded": 0, "failed": 0}
    running = desired_status(
        definition,
        {"status": scheduling},
        _pods((True, "Running"), (True, "Running")),
        GroupOutcome.PLACED,
        "",
        now=LATER,
    )
    assert running["phase"] == "Running"
    assert running["scheduleStartTime"] == NOW  # set once, when it first entered Scheduling
    failed = desired_status(
        definition, {"status": running}, _pods((True, "Failed"), (True, "Running")), GroupOutcome.PLACED, "", now=LATER
    )
    assert failed["phase"] == "Failed"
    finished = _pods((True, "Succeeded"), (True, "Succeeded"))
    assert desired_status(definition, {}, finished, GroupOutcome.PLACED, "", now=LATER)["phase"] == "Finished"


def test_volcano_conditions_as_its_gang_plugin_writes_them() -> None:
    definition = _definition(SOURCE_VOLCANO)
    stuck = desired_status(
        definition, {}, _pods((False, "Pending"), (False, "Pending")), GroupOutcome.UNSCHEDULABLE, "no room", now=NOW
    )
    assert stuck["phase"] == "Pending"
    assert stuck["conditions"] == [
        {
            "type": "Unschedulable",
            "status": "True",
            "reason": "NotEnoughResources",
            "message": "2/2 tasks in gang unschedulable: no room",
            "lastTransitionTime": NOW,
        }
    ]
    again = desired_status(
        definition,
        {"status": stuck},
        _pods((False, "Pending"), (False, "Pending")),
        GroupOutcome.UNSCHEDULABLE,
        "no room",
        now=LATER,
    )
    assert again == stuck  # nothing changed: the same status, so nothing is written
    placed = desired_status(
        definition, {"status": stuck}, _pods((False, "Pending"), (False, "Pending")), GroupOutcome.PLACED, "", now=LATER
    )
    assert placed["phase"] == "Inqueue"
    assert [c["type"] for c in placed["conditions"]] == ["Unschedulable", "Scheduled"]
    bound = desired_status(
        definition, {"status": placed}, _pods((True, "Pending"), (True, "Pending")), GroupOutcome.PLACED, "", now=LATER
    )
    assert bound["phase"] == "Running"


def test_native_pod_group_scheduled_condition() -> None:
    definition = _definition(SOURCE_PODGROUP)
    current = {"metadata": {"generation": 3}}
    unschedulable = desired_status(
        definition, current, _pods((False, "Pending")), GroupOutcome.UNSCHEDULABLE, "0/2 nodes are available", now=NOW
    )
    (condition,) = unschedulable["conditions"]
    assert condition == {
        "type": "PodGroupScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available",
        "observedGeneration": 3,
        "lastTransitionTime": NOW,
    }
    scheduled = desired_status(
        definition,
        {**current, "status": unschedulable},
        _pods((True, "Pending"), (True, "Pending")),
        GroupOutcome.PLACED,
        "",
        now=LATER,
    )
    (condition,) = scheduled["conditions"]
    assert (condition["status"], condition["reason"], condition["lastTransitionTime"]) == ("True", "Scheduled", LATER)
    # Members still missing leave the condition as it is.
    assert desired_status(definition, current, [], GroupOutcome.WAITING_FOR_MEMBERS, "", now=NOW) == {}


def test_a_group_objects_permit_timeout_replaces_the_configured_one() -> None:
    cluster = Cluster({"a": nvswitch_node(cells=2), "b": nvswitch_node(cells=2)}, config=GangConfig(permit_timeout_s=5))
    members = [member(f"t-{i}", "t", 4) for i in range(4)]
    cluster.gangs.register(GroupRef("ns", "t"), [(m, None) for m in members], permit_timeout_s=30)
    for m in members:
        cluster.gangs.observe_present(*m.key)
    placement = cluster.gangs.place("ns", "t")
    assert isinstance(placement, GangPlacement)
    assert placement.deadline == cluster.clock.now + 30
    assert "waiting up to 30 s for them to bind" in placement.status.message


def test_a_place_gang_request_carries_the_objects_timeout_source_and_topology() -> None:
    group = pb.PodGroup(
        namespace="ml",
        name="volcano_train",
        min_member=2,
        source="scheduling.volcano.sh",
        topology=[pb.TopologyConstraint(level="rack", required=True)],
        schedule_timeout_seconds=30,
    )
    spec = decode_gang(pb.PlaceGangRequest(group=group))
    assert (spec.schedule_timeout_s, spec.source, spec.topology) == (
        30.0,
        "scheduling.volcano.sh",
        (DomainConstraint("rack", required=True),),
    )
    group.ClearField("schedule_timeout_seconds")
    assert decode_gang(pb.PlaceGangRequest(group=group)).schedule_timeout_s is None
    group.schedule_timeout_seconds = 0
    with pytest.raises(InvalidRequest, match="invalid schedule_timeout_seconds 0 for pod group ml/volcano_train"):
        decode_gang(pb.PlaceGangRequest(group=group))
