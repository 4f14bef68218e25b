"""Preemption end to end: the binder, the real gRPC service and the emulated API (nodes published by the agent's
own code, victims evicted through the emulated Eviction API, budgets spent as the API server spends them).

Verified against the emulator only (tests/preemption_cluster.py): no real kube-apiserver runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubenexus.kube.client import connect
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    FIELD_MANAGER,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
)
from placement.shim.preemptor import Preemptor
from tests.conftest import wait_until
from tests.machines.node_topologies import nvswitch_node
from tests.preemption_cluster import PreemptionEmulator, budget, running
from tests.shim_cluster import DISRUPTION_BUDGETS, PODS, Replica, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

LOW, HIGH, HIGHEST = 10, 1000, 2000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[PreemptionEmulator, Path]]:
    with PreemptionEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node(), "h100-b": nvswitch_node()})
        yield emulator, kubeconfig


def placed(
    name: str, node: str, cell: int, gpus: tuple[int, ...], *, priority: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod our binder placed earlier, now running: bound, with its cells and GPUs recorded."""
    annotations = {ASSIGNED_CELLS_KEY: str(cell), ASSIGNED_GPUS_KEY: ",".join(map(str, gpus))}
    pod = pod_object(name, gpus=len(gpus), cpus=4 * len(gpus), labels=labels, annotations=annotations)
    return running(pod, node, priority=priority)


def create_pods(kubeconfig: Path, pods: list[dict[str, Any]]) -> None:
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    try:
        for pod in pods:
            api.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
    finally:
        api.close()


def preemptor(name: str, gpus: int, *, priority: int = HIGH, **spec: Any) -> dict[str, Any]:
    pod = pod_object(name, gpus=gpus, cpus=4 * gpus)
    pod["spec"] |= {"priority": priority, **spec}
    return pod


def synced_leader(replica_: Replica, pods: int) -> None:
    wait_until(lambda: replica_.feed.synced and replica_.elector.is_leader(), what="a synced leader")
    wait_until(lambda: sum(len(replica_.index.pods_on(n)) for n in ("h100-a", "h100-b")) >= pods, what="the pods")


def reasons(emulator: PreemptionEmulator, name: str) -> list[str]:
    return [event["reason"] for event in emulator.events(name)]


def test_a_gang_preempts_one_node_whole_gangs_and_no_budget_protected_pod(
    cluster: tuple[PreemptionEmulator, Path],
) -> None:
    """A 2 x 4-GPU gang (each member on one NUMA cell) needs two free cells. The only room that breaks no
    budget is node h100-a: its cell 0 holds half of a 2-member batch gang (the other half runs on h100-b)
    and a lone pod, its cell 1 another lone pod. h100-b's pods are protected by a budget that allows no
    disruption; evicting half of the batch gang would be cheaper, but a gang goes whole or not at all."""
    emulator, kubeconfig = cluster
    batch = {GROUP_NAME_KEY: "batch", MIN_AVAILABLE_KEY: "2"}
    guarded = {"app": "serving"}
    victims = {"batch-0", "batch-1", "x-0", "x-1"}
    for pod in (
        placed("batch-0", "h100-a", 0, (0, 1), priority=LOW, labels=batch),
        placed("x-0", "h100-a", 0, (2, 3), priority=LOW),
        placed("x-1", "h100-a", 1, (4, 5, 6, 7), priority=LOW),
        placed("batch-1", "h100-b", 0, (0, 1), priority=LOW, labels=batch),
        placed("y-0", "h100-b", 0, (2, 3), priority=LOW, labels=guarded),
        placed("y-1", "h100-b", 1, (4, 5, 6, 7), priority=LOW, labels=guarded),
    ):
        emulator.put_object(PODS, pod)
    emulator.put_object(DISRUPTION_BUDGETS, budget("serving", guarded, allowed=0, healthy=2, desired=2))
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        synced_leader(leader, 6)
        train = {GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: "2"}
        members = [preemptor(f"train-{i}", 4) for i in range(2)]
        for member in members:
            member["metadata"]["labels"] = dict(train)
        create_pods(kubeconfig, members)
        wait_until(lambda: len(emulator.bindings) == 2, timeout_s=60, what="the gang bound")
    finally:
        leader.kill()
    assert {name for _, name, status in emulator.evictions if status == 201} == victims
    assert all(status == 201 for _, _, status in emulator.evictions), emulator.evictions
    assert not any(emulator.exists("default", name) for name in victims)
    assert emulator.exists("default", "y-0")
    assert emulator.exists("default", "y-1")
    assert emulator.pdb("default", "serving")["status"]["disruptionsAllowed"] == 0
    for name in ("train-0", "train-1"):
        pod = emulator.pod("default", name)
        assert pod["status"]["nominatedNodeName"] == "h100-a"
        assert pod["spec"]["nodeName"] == "h100-a", "it bound where its room was freed"
        assert "Scheduled" in reasons(emulator, name)
    preempting = [e for e in emulator.events("train-0") + emulator.events("train-1") if e["reason"] == "Preempting"]
    assert len(preempting) == 1
    assert all(f"default/{name}" in preempting[0]["message"] for name in victims)
    uids = {emulator.pod("default", name)["metadata"]["uid"] for name in ("train-0", "train-1")}
    for name in victims:
        (event,) = [e for e in emulator.events(name) if e["reason"] == "Preempted"]
        assert event["type"] == "Normal"
        uid = event["message"].removeprefix("Preempted by pod ").split(" ")[0]
        assert uid in uids
        assert event["message"].startswith(f"Preempted by pod {uid} on node ")
        assert "default/train-" in event["message"]
    gang_events = [e["message"] for name in ("batch-0", "batch-1") for e in emulator.events(name)]
    assert all("evicted with its pod group default/batch" in message for message in gang_events)
    gpus = sorted(
        int(gpu)
        for name in ("train-0", "train-1")
        for gpu in emulator.pod("default", name)["metadata"]["annotations"][ASSIGNED_GPUS_KEY].split(",")
    )
    assert gpus == list(range(8)), "the gang holds every GPU of the node it preempted"


def test_room_the_kubelet_would_still_refuse_is_not_taken(cluster: tuple[PreemptionEmulator, Path]) -> None:
    """Evicting the two lower-priority pods would free 4 GPUs on h100-a, two on each NUMA cell: enough by
    count, refused by the kubelet's single-numa-node admission. Nothing is evicted; the pod says why."""
    emulator, kubeconfig = cluster
    for pod in (
        placed("keep-0", "h100-a", 0, (0, 1), priority=HIGHEST),
        placed("low-0", "h100-a", 0, (2, 3), priority=LOW),
        placed("keep-1", "h100-a", 1, (4, 5), priority=HIGHEST),
        placed("low-1", "h100-a", 1, (6, 7), priority=LOW),
        placed("full-b", "h100-b", 0, (0, 1, 2, 3), priority=HIGHEST),
        placed("full-b2", "h100-b", 1, (4, 5, 6, 7), priority=HIGHEST),
    ):
        emulator.put_object(PODS, pod)
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        synced_leader(leader, 6)
        create_pods(kubeconfig, [preemptor("needs-a-cell", 4)])
        wait_until(
            lambda: any("preemption:" in e["message"] for e in emulator.events("needs-a-cell")),
            what="the FailedScheduling event with the preemption's answer",
        )
        answer = leader.client.preempt(emulator.pod("default", "needs-a-cell"), [])
    finally:
        leader.kill()
    assert emulator.evictions == []
    assert emulator.exists("default", "low-0")
    assert emulator.exists("default", "low-1")
    assert not answer.preempted
    assert not answer.victims
    assert not answer.nominations
    assert "NUMA" in answer.reason
    assert "h100-a" in answer.reason
    assert "nominatedNodeName" not in emulator.pod("default", "needs-a-cell").get("status", {})
    (event,) = [e for e in emulator.events("needs-a-cell") if "preemption:" in e["message"]]
    assert (event["type"], event["reason"]) == ("Warning", "FailedScheduling")
    assert answer.reason in event["message"]


def test_a_pod_with_preemption_policy_never_evicts_nothing(cluster: tuple[PreemptionEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    for pod in (
        placed("low-a", "h100-a", 0, (0, 1, 2, 3), priority=LOW),
        placed("low-a1", "h100-a", 1, (4, 5, 6, 7), priority=LOW),
        placed("low-b", "h100-b", 0, (0, 1, 2, 3), priority=LOW),
        placed("low-b1", "h100-b", 1, (4, 5, 6, 7), priority=LOW),
    ):
        emulator.put_object(PODS, pod)
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        synced_leader(leader, 4)
        create_pods(kubeconfig, [preemptor("patient", 4, preemptionPolicy="Never")])
        wait_until(lambda: emulator.events("patient"), what="the FailedScheduling event")
        # The service refuses too, whoever asks: the binder's own check is not the only one.
        answer = leader.client.preempt(emulator.pod("default", "patient"), [])
    finally:
        leader.kill()
    assert emulator.evictions == []
    assert not answer.preempted
    assert "preemptionPolicy Never" in answer.reason
    (event,) = emulator.events("patient")
    assert event["message"].endswith(" preemption: not eligible due to preemptionPolicy=Never.")
    assert "nominatedNodeName" not in emulator.pod("default", "patient").get("status", {})


def test_a_lower_priority_pod_does_not_take_the_room_held_for_the_preemptor(
    cluster: tuple[PreemptionEmulator, Path],
) -> None:
    """The preemption is written by the binder's own writer, then, with the victim gone, a lower-priority pod
    of the same shape asks first: the freed node is held for the preemptor, which then gets it."""
    emulator, kubeconfig = cluster
    for pod in (
        placed("low-a", "h100-a", 0, (0, 1, 2, 3), priority=LOW),
        placed("high-a", "h100-a", 1, (4, 5, 6, 7), priority=HIGHEST),
        placed("high-b", "h100-b", 0, (0, 1, 2, 3), priority=HIGHEST),
        placed("high-b1", "h100-b", 1, (4, 5, 6, 7), priority=HIGHEST),
    ):
        emulator.put_object(PODS, pod)
    service = replica(emulator, kubeconfig, "placement-0").start(binder=False)
    writer = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    told: list[tuple[str, str, str]] = []

    def tell(pod: dict[str, Any], kind: str, reason: str, message: str) -> None:
        told.append((kind, reason, message))

    try:
        synced_leader(service, 4)
        create_pods(kubeconfig, [preemptor("urgent", 4), preemptor("opportunist", 4, priority=LOW + 1)])
        urgent = emulator.pod("default", "urgent")
        answer = service.client.preempt(urgent, [])
        assert answer.preempted
        assert [(v.pod.name, v.node) for v in answer.victims] == [("low-a", "h100-a")]
        assert [(n.pod.name, n.node) for n in answer.nominations] == [("urgent", "h100-a")]
        assert answer.hold_seconds > 0
        carried = Preemptor(writer, tell=tell).carry_out(answer, {("default", "urgent"): urgent})
        assert carried.evicted == (("default", "low-a"),)
        assert not carried.blocked
        wait_until(
            lambda: ("default", "low-a") not in {usage.key for usage, _, _ in service.index.pods_on("h100-a")},
            what="the victim gone from the service's cache",
        )
        taken = service.client.reserve(emulator.pod("default", "opportunist"), [])
        assert not taken.reserved, "a lower-priority pod took the room held for the preemptor"
        held = [group for group in taken.rejected if "h100-a" in group.nodes]
        assert held
        assert "held for a preempting pod" in held[0].reason
        given = service.client.reserve(urgent, [])
        assert given.reserved
        assert given.placement.node == "h100-a"
    finally:
        writer.close()
        service.kill()
    assert emulator.pod("default", "urgent")["status"]["nominatedNodeName"] == "h100-a"
    assert [reason for _, reason, _ in told] == ["Preempted", "Preempting"]


def test_an_eviction_a_budget_refuses_stops_the_plan_and_warns_the_preemptor(
    cluster: tuple[PreemptionEmulator, Path],
) -> None:
    """A budget the service did not know of (its status changed after the decision) refuses the eviction
    with 429: the binder's writer stops there, evicts nothing more, and says so on the preemptor."""
    emulator, kubeconfig = cluster
    guarded = {"app": "serving"}
    for pod in (
        placed("low-a", "h100-a", 0, (0, 1, 2, 3), priority=LOW, labels=guarded),
        placed("high-a", "h100-a", 1, (4, 5, 6, 7), priority=HIGHEST),
        placed("high-b", "h100-b", 0, (0, 1, 2, 3), priority=HIGHEST),
        placed("high-b1", "h100-b", 1, (4, 5, 6, 7), priority=HIGHEST),
    ):
        emulator.put_object(PODS, pod)
    emulator.put_object(DISRUPTION_BUDGETS, budget("serving", guarded, allowed=1, healthy=2, desired=1))
    service = replica(emulator, kubeconfig, "placement-0").start(binder=False)
    writer = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    told: list[tuple[str, str, str]] = []

    def tell(pod: dict[str, Any], kind: str, reason: str, message: str) -> None:
        told.append((kind, reason, message))

    try:
        synced_leader(service, 4)
        create_pods(kubeconfig, [preemptor("urgent", 4)])
        urgent = emulator.pod("default", "urgent")
        answer = service.client.preempt(urgent, [])
        assert [v.pod.name for v in answer.victims] == ["low-a"]
        # The disruption controller saw a replica go unhealthy since: no disruption is allowed any more.
        emulator.put_object(DISRUPTION_BUDGETS, budget("serving", guarded, allowed=0, healthy=1, desired=1))
        carried = Preemptor(writer, tell=tell).carry_out(answer, {("default", "urgent"): urgent})
    finally:
        writer.close()
        service.kill()
    assert carried.evicted == ()
    assert "disruption budget" in carried.blocked
    assert emulator.evictions == [("default", "low-a", 429)]
    assert emulator.exists("default", "low-a")
    assert told == [("Warning", "PreemptionBlocked", carried.blocked)]
    assert "Cannot evict pod as it would violate the pod's disruption budget." in carried.blocked


def test_a_replica_that_did_not_decide_holds_the_room_a_nomination_names(
    cluster: tuple[PreemptionEmulator, Path],
) -> None:
    """After a failover the new leader never saw the Preempt call: it reads the preemptor's
    status.nominatedNodeName from its pod watch and keeps the freed room for it."""
    emulator, kubeconfig = cluster
    for pod in (
        placed("high-a", "h100-a", 1, (4, 5, 6, 7), priority=HIGHEST),
        placed("high-b", "h100-b", 0, (0, 1, 2, 3), priority=HIGHEST),
        placed("high-b1", "h100-b", 1, (4, 5, 6, 7), priority=HIGHEST),
    ):
        emulator.put_object(PODS, pod)
    create_pods(kubeconfig, [preemptor("urgent", 4), preemptor("opportunist", 4, priority=LOW + 1)])
    writer = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    try:  # what the old leader's binder wrote before it died
        writer.merge_patch("/api/v1/namespaces/default/pods/urgent/status", {"status": {"nominatedNodeName": "h100-a"}})
    finally:
        writer.close()
    service = replica(emulator, kubeconfig, "placement-1").start(binder=False)
    try:
        synced_leader(service, 3)
        wait_until(lambda: service.engine.nominations.nominated(("default", "urgent")) == ("h100-a",), what="held")
        taken = service.client.reserve(emulator.pod("default", "opportunist"), [])
        assert not taken.reserved, "a lower-priority pod took the room a nomination names"
        given = service.client.reserve(emulator.pod("default", "urgent"), [])
        assert given.reserved
        assert given.placement.node == "h100-a"
    finally:
        service.kill()
