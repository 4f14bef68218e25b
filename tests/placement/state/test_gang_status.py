"""A group's status as the binder writes it back (``placement.shim.group_status.desired_status``), per API
(the native PodGroup's per version: Kubernetes 1.37's v1beta1 and v1alpha3, 1.36's v1alpha2), and a group
object's permit timeout reaching the coordinator (scheduler-plugins' scheduleTimeoutSeconds)."""

from __future__ import annotations

from datetime import UTC, datetime
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
from placement.shim.gang_directory import APIS_OF, GroupApi, Seen
from placement.shim.group_status import GroupOutcome, GroupStatusWriter, desired_status
from placement.state.gang_coordinator import GangConfig, GangPlacement
from tests.gang_fixtures import Cluster, member
from tests.machines.node_topologies import nvswitch_node
from tests.placement.shim.test_gang_directory import ScriptedApi

NOW = "2026-05-01T10:00:00Z"
LATER = "2026-05-01T10:05:00Z"


def _definition(source: str, minimum: int = 2) -> GroupDefinition:
    return GroupDefinition(PodGroupKey(source, "ml", "train"), minimum)


def _api(source: str, version: str = "") -> GroupApi:
    """The source's API at ``version`` (its preferred one when empty)."""
    return next(api for api in APIS_OF[source] if api.version == version or not version)


PLUGINS, VOLCANO = _api(SOURCE_SCHEDULER_PLUGINS), _api(SOURCE_VOLCANO)


def _pods(*states: tuple[bool, str]) -> list[dict[str, Any]]:
    """Member pods: (bound, phase) each."""
    return [{"spec": {"nodeName": "a"} if bound else {}, "status": {"phase": phase}} for bound, phase in states]


def test_scheduler_plugins_phases_follow_its_podgroup_controller() -> None:
    definition = _definition(SOURCE_SCHEDULER_PLUGINS)
    waiting = desired_status(
        definition, {}, _pods((False, "Pending")), GroupOutcome.WAITING_FOR_MEMBERS, "", api=PLUGINS, now=NOW
    )
    assert waiting == {"phase": "Pending", "running": 0, "succeeded": 0, "failed": 0}
    scheduling = desired_status(
        definition,
        {"status": waiting},
        _pods((True, "Pending"), (True, "Pending")),
        GroupOutcome.PLACED,
        "",
        api=PLUGINS,
        now=NOW,
    )
    assert scheduling == {"phase": "Scheduling", "scheduleStartTime": NOW, "running": 0, "succeeded": 0, "failed": 0}
    running = desired_status(
        definition,
        {"status": scheduling},
        _pods((True, "Running"), (True, "Running")),
        GroupOutcome.PLACED,
        "",
        api=PLUGINS,
        now=LATER,
    )
    assert running["phase"] == "Running"
    assert running["scheduleStartTime"] == NOW  # set once, when it first entered Scheduling
    failed = desired_status(
        definition,
        {"status": running},
        _pods((True, "Failed"), (True, "Running")),
        GroupOutcome.PLACED,
        "",
        api=PLUGINS,
        now=LATER,
    )
    assert failed["phase"] == "Failed"
    finished = _pods((True, "Succeeded"), (True, "Succeeded"))
    assert (
        desired_status(definition, {}, finished, GroupOutcome.PLACED, "", api=PLUGINS, now=LATER)["phase"] == "Finished"
    )


def test_volcano_conditions_as_its_gang_plugin_writes_them() -> None:
    definition = _definition(SOURCE_VOLCANO)
    stuck = desired_status(
        definition,
        {},
        _pods((False, "Pending"), (False, "Pending")),
        GroupOutcome.UNSCHEDULABLE,
        "no room",
        api=VOLCANO,
        now=NOW,
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
        api=VOLCANO,
        now=LATER,
    )
    assert again == stuck  # nothing changed: the same status, so nothing is written
    placed = desired_status(
        definition,
        {"status": stuck},
        _pods((False, "Pending"), (False, "Pending")),
        GroupOutcome.PLACED,
        "",
        api=VOLCANO,
        now=LATER,
    )
    assert placed["phase"] == "Inqueue"
    assert [c["type"] for c in placed["conditions"]] == ["Unschedulable", "Scheduled"]
    bound = desired_status(
        definition,
        {"status": placed},
        _pods((True, "Pending"), (True, "Pending")),
        GroupOutcome.PLACED,
        "",
        api=VOLCANO,
        now=LATER,
    )
    assert bound["phase"] == "Running"


@pytest.mark.parametrize(
    ("version", "kind"),
    [
        ("v1beta1", "PodGroupInitiallyScheduled"),  # Kubernetes 1.37 (k8s.io/api scheduling/v1beta1 types.go)
        ("v1alpha3", "PodGroupInitiallyScheduled"),  # Kubernetes 1.37, the alpha version of the same type
        ("v1alpha2", "PodGroupScheduled"),  # Kubernetes 1.36
    ],
)
def test_native_pod_group_scheduled_condition(version: str, kind: str) -> None:
    """The condition kube-scheduler sets (schedule_one_podgroup.go): False with reason Unschedulable while no
    room is found, True with reason Scheduled once minCount members are bound."""
    api, definition = _api(SOURCE_PODGROUP, version), _definition(SOURCE_PODGROUP)
    current = {"metadata": {"generation": 3}}
    unschedulable = desired_status(
        definition,
        current,
        _pods((False, "Pending")),
        GroupOutcome.UNSCHEDULABLE,
        "0/2 nodes are available",
        api=api,
        now=NOW,
    )
    (condition,) = unschedulable["conditions"]
    assert condition == {
        "type": kind,
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
        api=api,
        now=LATER,
    )
    (condition,) = scheduled["conditions"]
    assert (condition["type"], condition["status"], condition["reason"], condition["lastTransitionTime"]) == (
        kind,
        "True",
        "Scheduled",
        LATER,
    )
    # Members still missing leave the condition as it is.
    assert desired_status(definition, current, [], GroupOutcome.WAITING_FOR_MEMBERS, "", api=api, now=NOW) == {}


@pytest.mark.parametrize(("version", "regresses"), [("v1beta1", False), ("v1alpha3", False), ("v1alpha2", True)])
def test_1_37s_initially_scheduled_condition_is_terminal_once_true(version: str, regresses: bool) -> None:
    """A member evicted after the group was placed, and no room for its replacement: 1.37's
    PodGroupInitiallyScheduled stays True (its types.go: "a terminal state"; updatePodGroupCondition never
    regresses it), 1.36's PodGroupScheduled turns False."""
    api, definition = _api(SOURCE_PODGROUP, version), _definition(SOURCE_PODGROUP)
    current = {"metadata": {"generation": 1}}
    placed = desired_status(
        definition, current, _pods((True, "Running"), (True, "Running")), GroupOutcome.PLACED, "", api=api, now=NOW
    )
    after = desired_status(
        definition,
        {**current, "status": placed},
        _pods((True, "Running"), (False, "Pending")),
        GroupOutcome.UNSCHEDULABLE,
        "0/2 nodes are available",
        api=api,
        now=LATER,
    )
    (condition,) = after["conditions"]
    assert condition["status"] == ("False" if regresses else "True")
    assert (after == placed) is not regresses


def test_a_1_37_pod_groups_status_is_patched_through_v1beta1_status() -> None:
    """The write goes to the version the object was read at, through /status, as kube-scheduler's
    util.PatchPodGroupStatus (SchedulingV1beta1().PodGroups(ns).Patch(..., "status")); once per change."""
    api = ScriptedApi()
    writer = GroupStatusWriter(api, clock=lambda: datetime(2026, 5, 1, 10, tzinfo=UTC))
    pod_group = {
        "metadata": {"name": "train", "namespace": "ml", "generation": 2},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    seen = Seen(_api(SOURCE_PODGROUP, "v1beta1"), pod_group)
    definition = _definition(SOURCE_PODGROUP)
    bound = _pods((True, "Running"), (True, "Running"))
    writer.observe(definition, seen, bound, GroupOutcome.PLACED, "")
    writer.observe(definition, seen, bound, GroupOutcome.PLACED, "")  # nothing new: nothing written
    condition = {
        "type": "PodGroupInitiallyScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "observedGeneration": 2,
        "lastTransitionTime": NOW,
    }
    assert api.patches == [
        (
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/train/status",
            {"status": {"conditions": [condition]}},
        )
    ]


def test_a_pass_on_a_copy_from_before_the_last_write_builds_on_that_write() -> None:
    """The binder's cache may still hold the object as it was before the binder's own write (the watch has
    not delivered it): later passes build on what was written, so a status is sent once per change, and a
    condition keeps the transition time it was written with (seen in CI: Running sent twice, the second
    time with the Scheduled condition's time taken from the copy that had none)."""
    api = ScriptedApi()
    moments = iter(datetime(2026, 5, 1, 10, minute, tzinfo=UTC) for minute in range(10))
    writer = GroupStatusWriter(api, clock=lambda: next(moments))
    definition = _definition(SOURCE_VOLCANO)
    pending: dict[str, Any] = {
        "metadata": {"name": "train", "namespace": "ml", "resourceVersion": "7"},
        "spec": {"minMember": 2},
    }
    unbound, bound = _pods((False, "Pending"), (False, "Pending")), _pods((True, "Pending"), (True, "Pending"))
    writer.observe(definition, Seen(VOLCANO, pending), unbound, GroupOutcome.PLACED, "")
    writer.observe(definition, Seen(VOLCANO, pending), unbound, GroupOutcome.PLACED, "")  # nothing new
    writer.observe(definition, Seen(VOLCANO, pending), bound, GroupOutcome.PLACED, "")  # still the old copy
    assert [patch["status"]["phase"] for _, patch in api.patches] == ["Inqueue", "Running"]
    inqueue, running = (patch["status"] for _, patch in api.patches)
    assert running["conditions"] == inqueue["conditions"]  # the Scheduled condition, with its first time
    caught_up = {**pending, "metadata": {**pending["metadata"], "resourceVersion": "9"}, "status": running}
    writer.observe(definition, Seen(VOLCANO, caught_up), bound, GroupOutcome.PLACED, "")
    assert len(api.patches) == 2


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
