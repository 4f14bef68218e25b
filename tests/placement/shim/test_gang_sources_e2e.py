"""One 8-member training gang defined in each of the six ways, end to end through the standalone binder.

The gang is 8 pods of 2 GPUs over two 8-GPU nodes published by the agent's own code; the API is kmock's
emulator serving the gang's API (``tests.gang_cluster``), the service a real gRPC server. Each way must land
identically (the same node, NUMA cells and GPUs per member index), wait clearly while its object is
missing, and have its status written back where the API has one, once per change. Verified only against
the emulated API: no real kube-apiserver, scheduler-plugins controller or Volcano runs here.

The gang of each API the real kube-apiserver v1.37 serves, and its status as that server accepts it, are
tested in tests/cluster/test_cluster_binder.py. These stay on the emulator for what the real server does not give:
every status write counted (it shows only the last), the 1.36 and 1.35 APIs (v1alpha2 PodGroups, v1alpha1
Workloads), and a cluster that does not serve the native API at all.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
import pytest

from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    SCHEDULER_PLUGINS_KEY,
)
from placement.core.gang_sources import VOLCANO_GROUP_KEY
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY
from tests.conftest import wait_until
from tests.gang_cluster import NATIVE_PODGROUPS, PLUGIN_PODGROUPS, VOLCANO_PODGROUPS, WORKLOADS, GangEmulator
from tests.machines.node_topologies import nvswitch_node
from tests.placement.shim.test_shim_e2e import create_pods
from tests.shim_cluster import PODS, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

MEMBERS = 8
Layout = dict[int, tuple[str, str, str]]  # member index -> (node, NUMA cells, GPUs)


@dataclass(frozen=True)
class Way:
    """One way to define the gang: what the cluster serves, the group's object, and what each pod carries."""

    name: str
    emulator: dict[str, Any]
    resource: kmock.resource | None
    group_object: dict[str, Any] | None
    member: Callable[[dict[str, Any]], None]  # adds the membership to a pod object
    waiting: str = ""  # what members are told while the object is missing
    kwargs: dict[str, Any] = field(default_factory=dict)


def _labels(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"] |= {GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: str(MEMBERS)}


def _plugins(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"][SCHEDULER_PLUGINS_KEY] = "train"


def _kueue(pod: dict[str, Any]) -> None:
    """A plain pod of a Kueue pod group (Kueue's own keys; what Kueue adds at admission changes nothing here)."""
    pod["metadata"]["labels"][KUEUE_GROUP_NAME_KEY] = "train"
    pod["metadata"]["annotations"][KUEUE_GROUP_TOTAL_COUNT_KEY] = str(MEMBERS)


def _volcano(pod: dict[str, Any]) -> None:
    pod["metadata"]["annotations"][VOLCANO_GROUP_KEY] = "train"


def _native(pod: dict[str, Any]) -> None:
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}


def _workload(pod: dict[str, Any]) -> None:
    pod["spec"]["workloadRef"] = {"name": "train", "podGroup": "workers"}


def _object(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "train", "namespace": "default"},
        "spec": spec,
    }


WAYS = {
    way.name: way
    for way in (
        Way("labels", {}, None, None, _labels),
        Way("kueue", {}, None, None, _kueue),
        Way(
            "scheduler-plugins",
            {"plugins": True},
            PLUGIN_PODGROUPS,
            _object("scheduling.x-k8s.io/v1alpha1", "PodGroup", {"minMember": MEMBERS, "scheduleTimeoutSeconds": 30}),
            _plugins,
            "waiting for the PodGroup object default/train (scheduling.x-k8s.io)",
        ),
        Way(
            "volcano",
            {"volcano": True},
            VOLCANO_PODGROUPS,
            _object("scheduling.volcano.sh/v1beta1", "PodGroup", {"minMember": MEMBERS, "queue": "default"}),
            _volcano,
            "waiting for the PodGroup object default/train (scheduling.volcano.sh)",
        ),
        Way(
            "native-v1alpha2",
            {"native": "v1alpha2"},
            NATIVE_PODGROUPS,
            _object("scheduling.k8s.io/v1alpha2", "PodGroup", {"schedulingPolicy": {"gang": {"minCount": MEMBERS}}}),
            _native,
            "waiting for the PodGroup object default/train (scheduling.k8s.io)",
        ),
        Way(
            "native-v1alpha1",
            {"native": "v1alpha1"},
            WORKLOADS,
            _object(
                "scheduling.k8s.io/v1alpha1",
                "Workload",
                {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": MEMBERS}}}]},
            ),
            _workload,
            "waiting for the Workload object default/train (scheduling.k8s.io/v1alpha1)",
        ),
    )
}


def _members(way: Way) -> list[dict[str, Any]]:
    pods = []
    for index in range(MEMBERS):
        pod = pod_object(f"worker-{index}", gpus=2)
        way.member(pod)
        pods.append(pod)
    return pods


def _layout(emulator: GangEmulator) -> Layout:
    layout: Layout = {}
    for index in range(MEMBERS):
        pod = emulator.pod("default", f"worker-{index}")
        annotations = pod["metadata"]["annotations"]
        layout[index] = (pod["spec"]["nodeName"], annotations[ASSIGNED_CELLS_KEY], annotations[ASSIGNED_GPUS_KEY])
    return layout


def _messages(emulator: GangEmulator, pod: str) -> list[str]:
    return [event["message"] for event in emulator.events(pod)]


def _run(way: Way, tmp_path: Path, after: Callable[[GangEmulator], None] | None = None) -> Layout:
    """Create the members first (they wait for the object), then the object; the gang lands; ``after`` checks."""
    with GangEmulator(**way.emulator) as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / f"kubeconfig-{way.name}")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node(), "h100-b": nvswitch_node()})
        leader = replica(emulator, kubeconfig, "placement-0").start()
        try:
            create_pods(kubeconfig, _members(way))
            if way.group_object is not None:
                assert way.resource is not None
                wait_until(lambda: way.waiting in _messages(emulator, "worker-7"), what="the wait for the object")
                assert emulator.bindings == [], "members were bound before their group's object existed"
                emulator.put_object(way.resource, way.group_object)
            wait_until(lambda: len(emulator.bindings) == MEMBERS, what="eight bindings")
            layout = _layout(emulator)
            if after is not None:
                after(emulator)
            return layout
        finally:
            leader.kill()


@functools.cache
def _labels_layout(tmp_path: Path) -> Layout:
    return _run(WAYS["labels"], tmp_path)


def _settled_patches(emulator: GangEmulator, path: str) -> list[dict[str, Any]]:
    """The statuses sent once no more come: the binder's passes (every 0.1 s) write only changes."""
    before = emulator.status_patches()
    time.sleep(1.0)
    after = emulator.status_patches()
    assert after == before, f"status written again without a change: {after[len(before) :]}"
    assert {where for where, _ in after} == {path}
    sent = [status for _, status in after]
    assert all(a != b for a, b in itertools.pairwise(sent)), f"the same status written twice: {sent}"
    return sent


def _set_running(emulator: GangEmulator) -> None:
    """What the kubelet would report once the members run."""
    for index in range(MEMBERS):
        pod = emulator.pod("default", f"worker-{index}")
        emulator.put_object(PODS, {**pod, "status": {**pod.get("status", {}), "phase": "Running"}})


def _check_plugins(emulator: GangEmulator) -> None:
    path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/train/status"
    wait_until(
        lambda: (
            emulator.group_object(PLUGIN_PODGROUPS, "default", "train").get("status", {}).get("phase") == "Scheduling"
        ),
        what="phase Scheduling",
    )
    status = emulator.group_object(PLUGIN_PODGROUPS, "default", "train")["status"]
    assert status["scheduleStartTime"]
    assert (status["running"], status["succeeded"], status["failed"]) == (0, 0, 0)
    _set_running(emulator)
    wait_until(
        lambda: emulator.group_object(PLUGIN_PODGROUPS, "default", "train")["status"]["phase"] == "Running",
        what="phase Running",
    )
    assert emulator.group_object(PLUGIN_PODGROUPS, "default", "train")["status"]["running"] == MEMBERS
    sent = _settled_patches(emulator, path)
    # Scheduling first (the members were all there once the object came), running counted up as members
    # start (the kubelet's reports come one by one here), Running last.
    assert sent[0]["phase"] == "Scheduling"
    assert sent[-1]["phase"] == "Running"
    assert [status["running"] for status in sent] == sorted(status["running"] for status in sent)


def _check_volcano(emulator: GangEmulator) -> None:
    def status() -> dict[str, Any]:
        return dict(emulator.group_object(VOLCANO_PODGROUPS, "default", "train").get("status") or {})

    wait_until(lambda: status().get("phase") == "Running", what="phase Running")
    conditions = {c["type"]: c for c in status()["conditions"]}
    assert conditions["Scheduled"]["status"] == "True"
    assert conditions["Scheduled"]["reason"] == "tasks in gang are ready to be scheduled"
    # Through the object (Volcano's CRD has no status subresource): Inqueue once placed, Running once bound.
    sent = _settled_patches(emulator, "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/train")
    assert [status["phase"] for status in sent] == ["Inqueue", "Running"]


def _check_native(emulator: GangEmulator) -> None:
    def scheduled() -> dict[str, Any]:
        conditions = emulator.group_object(NATIVE_PODGROUPS, "default", "train").get("status", {}).get("conditions")
        return next((c for c in conditions or () if c["type"] == "PodGroupScheduled"), {})

    wait_until(lambda: scheduled().get("status") == "True", what="PodGroupScheduled True")
    assert scheduled()["reason"] == "Scheduled"
    assert (
        len(_settled_patches(emulator, "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups/train/status"))
        == 1
    )


def _check_workload(emulator: GangEmulator) -> None:
    time.sleep(0.5)
    assert "status" not in emulator.group_object(WORKLOADS, "default", "train")
    assert emulator.status_patches() == []


def _check_kueue(emulator: GangEmulator) -> None:
    """No object to write a status into: members' Events only, and no group label of ours on the pods."""
    time.sleep(0.5)
    assert emulator.status_patches() == []
    for index in range(MEMBERS):
        assert GROUP_NAME_KEY not in emulator.pod("default", f"worker-{index}")["metadata"]["labels"]


CHECKS = {
    "kueue": _check_kueue,
    "scheduler-plugins": _check_plugins,
    "volcano": _check_volcano,
    "native-v1alpha2": _check_native,
    "native-v1alpha1": _check_workload,
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_same_gang_defined_another_way_lands_identically(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    baseline = _labels_layout(tmp_path_factory.mktemp("labels"))
    assert len({node for node, _, _ in baseline.values()}) == 2  # 16 GPUs asked of two 8-GPU nodes
    layout = _run(WAYS[name], tmp_path_factory.mktemp(name), CHECKS[name])
    assert layout == baseline


def test_a_cluster_serving_no_native_api_skips_it_clearly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 1.36 cluster with the GenericWorkload gate on (pods may name a PodGroup) whose scheduling.k8s.io
    v1alpha2 API group is not enabled (--runtime-config): the binder says so once in its log, and the
    members are told why they are not placed; nothing is bound."""
    caplog.set_level(logging.INFO, logger="kubenexus.placement.binder")
    with GangEmulator() as emulator:
        emulator.kmock.oldest_release = "1.36.0"  # pods carrying spec.schedulingGroup are 1.36 pods
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node(), "h100-b": nvswitch_node()})
        leader = replica(emulator, kubeconfig, "placement-0").start()
        try:
            create_pods(kubeconfig, _members(WAYS["native-v1alpha2"]))
            refused = (
                "pod group default/train (scheduling.k8s.io) cannot be read: the cluster does not "
                "serve scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups"
            )
            wait_until(lambda: refused in _messages(emulator, "worker-7"), what="the refusal event")
            events = emulator.events("worker-7")
            assert {(e["type"], e["reason"]) for e in events} == {("Warning", "FailedScheduling")}
            assert emulator.bindings == []
        finally:
            leader.kill()
    skipped = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
    apis = "scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups"
    assert f"the cluster does not serve {apis}: scheduling.k8s.io pod groups are not read" in skipped
    assert len([m for m in skipped if apis in m]) == 1
