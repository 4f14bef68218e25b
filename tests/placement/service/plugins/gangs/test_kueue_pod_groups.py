"""A Kueue pod group from PlaceGang to bound pods: the framework plugin asks PlaceGang for ``kueue_<name>``
(``PodGroupKey.group_name``) with the members' JSON carrying only Kueue's label and annotation; once bound,
the cluster feed reads the same pods back. The group the request registered and the group the bound pods'
facts name (what preemption evicts whole) must be one, or the coordinator would never see the group bound
and preemption would split it. Over a real gRPC socket and the feed's pod handler, without a watch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.cluster.feed import ClusterFeed
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, format_ids
from placement.core.gang_sources import SOURCE_KUEUE, group_of
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY, KUEUE_MANAGED_KEY
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangPhase
from tests.gang_fixtures import Clock, gang_engine
from tests.grpc_server import RunningServer

NODES = ("a", "b")
MEMBERS = 2


@dataclass
class Service:
    running: RunningServer
    index: ClusterIndex
    gangs: CoordinatedGangs
    feed: ClusterFeed


@pytest.fixture
def service() -> Iterator[Service]:
    made = gang_engine(NODES, Clock())
    feed = ClusterFeed(
        api=None,  # type: ignore[arg-type]  # the pod handler under test never calls the API
        index=made.index,
        reservations=made.reservations,
        on_pod=made.engine.observe_pod,
    )
    running = RunningServer(made.engine)
    try:
        yield Service(running, made.index, made.gangs, feed)
    finally:
        running.close()


def _member(index: int) -> dict[str, Any]:
    """A plain pod of a Kueue pod group as Kueue's pod webhook leaves it (managed, its queue named)."""
    resources = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"worker-{index}",
            "namespace": "ml",
            "labels": {
                KUEUE_GROUP_NAME_KEY: "pod-group-1",
                "kueue.x-k8s.io/queue-name": "lq",
                KUEUE_MANAGED_KEY: "true",
            },
            "annotations": {KUEUE_GROUP_TOTAL_COUNT_KEY: str(MEMBERS)},
        },
        "spec": {
            "schedulerName": "kubenexus-scheduler",
            "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
        },
    }


def test_the_group_place_gang_registers_is_the_group_of_the_bound_pods(service: Service) -> None:
    members = [_member(index) for index in range(MEMBERS)]
    key = group_of(members[0])
    assert key is not None
    assert key.source == SOURCE_KUEUE
    group = pb.PodGroup(
        namespace="ml",
        name=key.group_name,
        min_member=MEMBERS,
        members_json=[json.dumps(member) for member in members],
        source=SOURCE_KUEUE,
    )
    answer = service.running.stub.PlaceGang(pb.PlaceGangRequest(group=group), timeout=30)
    assert answer.state == pb.GANG_STATE_PLACED, answer.reason
    assert key.group_name == "kueue_pod-group-1"
    placements = {placed.pod.name: placed.placement for placed in answer.members}
    for member in members:  # bound as PreBind writes them, then seen by the pod watch
        placement = placements[member["metadata"]["name"]]
        written = {
            ASSIGNED_CELLS_KEY: format_ids(placement.numa_cells),
            ASSIGNED_GPUS_KEY: format_ids(placement.gpu_ids),
        }
        metadata = {**member["metadata"], "annotations": {**member["metadata"]["annotations"], **written}}
        bound = {**member, "metadata": metadata, "spec": {**member["spec"], "nodeName": placement.node}}
        service.feed._pods.apply("MODIFIED", {**bound, "status": {"phase": "Running"}})
    facts = [service.index.facts.pod("ml", member["metadata"]["name"]) for member in members]
    assert {(fact.group, fact.kueue_admitted) for fact in facts if fact is not None} == {("ml/kueue_pod-group-1", True)}
    status = service.gangs.coordinator.status("ml", key.group_name)
    assert status is not None
    assert (status.phase, status.bound) == (GangPhase.BOUND, MEMBERS)
