"""The extender's bind verb holds members of a gang defined by any gang API, end to end.

kube-scheduler is played by calls to ``Extender.bind`` (what it POSTs to ``/bind``, one call per pod, on
threads as its binding cycles run); the API is kmock's emulator serving the gang's API
(``tests.gang_cluster``), the service a real gRPC server over two 8-GPU nodes published by the agent's own
code. Verified only against the emulated API: no real kube-apiserver, kube-scheduler, scheduler-plugins
controller or Volcano runs here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kmock
import pytest

from kubenexus.kube.client import connect
from kubenexus.kube.paths import collection_path
from placement.core.annotations import FIELD_MANAGER, RESERVED_NODE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.gang_sources import SOURCE_PODGROUP, SOURCE_SCHEDULER_PLUGINS, VOLCANO_GROUP_KEY
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY
from placement.shim.extender import Extender
from placement.shim.gang_directory import APIS_OF, GroupApi
from tests.conftest import wait_until
from tests.gang_cluster import NATIVE_PODGROUPS, PLUGIN_PODGROUPS, GangEmulator
from tests.machines.node_topologies import nvswitch_node
from tests.placement.shim.test_shim_e2e import create_pods
from tests.shim_cluster import Replica, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

NODE = "h100-a"
HELD_S = 0.5  # how long a lone member is watched for a binding it must not get


@dataclass(frozen=True)
class Source:
    """One gang API: what the emulator serves, its objects, how a group asks for N members and a pod joins."""

    name: str
    emulator: dict[str, Any]
    resource: kmock.resource
    api: GroupApi
    min_count: Callable[[int], dict[str, Any]]  # the spec of a gang of that many members
    join: Callable[[dict[str, Any]], None]

    def group_object(self, spec: dict[str, Any]) -> dict[str, Any]:
        metadata = {"name": "train", "namespace": "default"}
        api_version = f"{self.api.group}/{self.api.version}"
        return {"apiVersion": api_version, "kind": self.api.kind, "metadata": metadata, "spec": spec}


def _plugins_gang(count: int) -> dict[str, Any]:
    return {"minMember": count}


def _plugins_member(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"][SCHEDULER_PLUGINS_KEY] = "train"


def _native_gang(count: int) -> dict[str, Any]:
    return {"schedulingPolicy": {"gang": {"minCount": count}}}


def _native_member(pod: dict[str, Any]) -> None:
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}


PLUGINS = Source(
    "scheduler-plugins",
    {"plugins": True},
    PLUGIN_PODGROUPS,
    APIS_OF[SOURCE_SCHEDULER_PLUGINS][0],
    _plugins_gang,
    _plugins_member,
)
NATIVE = Source(
    "native-v1alpha2",
    {"native": "v1alpha2"},
    NATIVE_PODGROUPS,
    next(api for api in APIS_OF[SOURCE_PODGROUP] if api.version == "v1alpha2"),  # what a 1.36 cluster serves
    _native_gang,
    _native_member,
)


@dataclass
class Scene:
    emulator: GangEmulator
    kubeconfig: Path
    service: Replica
    extender: Extender

    def members(self, source: Source, count: int, *, first: int = 0) -> list[str]:
        """Create ``count`` one-GPU members of the group; their names."""
        pods = []
        for index in range(first, first + count):
            pod = pod_object(f"member-{index}", gpus=1)
            source.join(pod)
            pods.append(pod)
        create_pods(self.kubeconfig, pods)
        return [pod["metadata"]["name"] for pod in pods]

    def bind(self, name: str) -> dict[str, Any]:
        return self.extender.bind({"PodName": name, "PodNamespace": "default", "PodUID": "", "Node": NODE})

    def bind_on_threads(self, names: list[str]) -> tuple[dict[str, dict[str, Any]], list[threading.Thread]]:
        """Each bind on its own thread, as kube-scheduler's binding cycles run; the answers land in the dict."""
        answers: dict[str, dict[str, Any]] = {}

        def bind(name: str) -> None:
            answers[name] = self.bind(name)

        threads = [threading.Thread(target=bind, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        return answers, threads

    def bound(self) -> list[str]:
        return sorted(name for _, name, _ in self.emulator.bindings)


@contextmanager
def scene(
    tmp_path: Path, source: Source | None, *, group: dict[str, Any] | None = None, gang_timeout_s: float = 30.0
) -> Iterator[Scene]:
    """A cluster serving ``source``'s API (none: only the core APIs) and holding its ``group`` object, the
    service, and a started extender whose gang directory has read every served API."""
    with GangEmulator(**(source.emulator if source else {})) as emulator:
        if source is None:
            emulator.kmock.oldest_release = "1.36.0"  # pods carrying spec.schedulingGroup are 1.36 pods
        if source is not None and group is not None:
            emulator.put_object(source.resource, group)
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {NODE: nvswitch_node(), "h100-b": nvswitch_node()})
        service = replica(emulator, kubeconfig, "placement-0").start(binder=False)  # kube-scheduler binds here
        api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
        extender = Extender(api, service.client, gang_timeout_s=gang_timeout_s, watch_timeout_s=5)
        extender.start()
        try:
            wait_until(lambda: service.feed.synced and service.elector.is_leader(), what="a synced leader")
            if source is not None:
                # The reflector watches once its list has landed in the directory.
                path = collection_path(source.api.group, source.api.version, source.api.plural)
                wait_until(
                    lambda: any(r.url.path == path and r.url.query.get("watch") for r in emulator.requests()),
                    what=f"the extender reading {source.name} groups",
                )
            yield Scene(emulator, kubeconfig, service, extender)
        finally:
            extender.stop()
            api.close()
            service.kill()


@pytest.mark.parametrize("source", [PLUGINS, NATIVE], ids=lambda source: source.name)
def test_a_group_from_an_api_is_held_at_bind_until_complete_then_binds_whole(source: Source, tmp_path: Path) -> None:
    with scene(tmp_path, source, group=source.group_object(source.min_count(3))) as cluster:
        names = cluster.members(source, 3)
        answers, threads = cluster.bind_on_threads(names[:2])
        time.sleep(HELD_S)
        assert cluster.emulator.bindings == [], "members bound before their group was complete"
        assert answers == {}, "a held member was answered before its group was complete"
        assert cluster.bind(names[2]) == {"Error": ""}
        for thread in threads:
            thread.join(10)
        assert answers == {name: {"Error": ""} for name in names[:2]}
        assert cluster.bound() == names
        # A member added later (a replacement, a scale-up) joins the three bound ones, which it counts though
        # they name the group by a label or a spec field: it binds at once.
        (late,) = cluster.members(source, 1, first=3)
        assert cluster.bind(late) == {"Error": ""}
        assert cluster.bound() == [*names, late]


def test_a_member_whose_group_cannot_be_resolved_gets_an_error_and_binds_nothing(tmp_path: Path) -> None:
    with scene(tmp_path, PLUGINS) as cluster:
        (missing,) = cluster.members(PLUGINS, 1)
        two = pod_object("two-groups", gpus=1, annotations={VOLCANO_GROUP_KEY: "other"})
        _plugins_member(two)
        create_pods(cluster.kubeconfig, [two])
        since = len(cluster.emulator.requests())
        assert cluster.bind(missing) == {"Error": "waiting for the PodGroup object default/train (scheduling.x-k8s.io)"}
        assert cluster.bind("two-groups") == {
            "Error": "pod default/two-groups joins more than one pod group (default/train (scheduling.x-k8s.io) "
            "and default/other (scheduling.volcano.sh)); accepted: one group per pod"
        }
        pod_writes = [r for r in cluster.emulator.writes(since) if "/pods/" in r.url.path]
        assert pod_writes == [], "a refused member was reserved or bound"
        assert cluster.service.reservations.pending() == {}
        # Once the object exists the same member binds (kube-scheduler retries the pod after the Error).
        cluster.emulator.put_object(PLUGINS.resource, PLUGINS.group_object({"minMember": 1}))
        wait_until(lambda: cluster.bind(missing) == {"Error": ""}, what="the member to bind once its group exists")
        assert cluster.bound() == [missing]


def test_a_member_of_a_group_from_an_api_the_cluster_does_not_serve_gets_an_error(tmp_path: Path) -> None:
    with scene(tmp_path, None) as cluster:
        (member,) = cluster.members(NATIVE, 1)
        refused = (
            "pod group default/train (scheduling.k8s.io) cannot be read: the cluster does not serve "
            "scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups"
        )
        wait_until(lambda: cluster.bind(member) == {"Error": refused}, what="the refusal once discovery is done")
        assert cluster.emulator.bindings == []


def test_a_group_that_does_not_fill_within_its_timeout_releases_every_held_member(tmp_path: Path) -> None:
    """scheduler-plugins' scheduleTimeoutSeconds (1 s) is the hold, not --gang-timeout (30 s here)."""
    group = PLUGINS.group_object({"minMember": 3, "scheduleTimeoutSeconds": 1})
    with scene(tmp_path, PLUGINS, group=group, gang_timeout_s=30.0) as cluster:
        names = cluster.members(PLUGINS, 2)
        answers, threads = cluster.bind_on_threads(names)
        for thread in threads:
            thread.join(10)
            assert not thread.is_alive(), "a member was held past its group's timeout"
        assert set(answers) == set(names)
        for name, answer in answers.items():
            assert answer["Error"].startswith("waiting for pod group default/train: ")
            assert answer["Error"].endswith("/3 members reached bind within 1 s; released, will retry"), name
        assert cluster.emulator.bindings == []
        for name in names:
            assert RESERVED_NODE_KEY not in cluster.emulator.pod("default", name)["metadata"]["annotations"]
        assert cluster.service.reservations.pending() == {}


def test_a_basic_policy_group_binds_pod_by_pod(tmp_path: Path) -> None:
    with scene(tmp_path, NATIVE, group=NATIVE.group_object({"schedulingPolicy": {"basic": {}}})) as cluster:
        (member,) = cluster.members(NATIVE, 1)
        assert cluster.bind(member) == {"Error": ""}  # alone: a gang of any size would hold it
        assert cluster.bound() == [member]


def _kueue_member(name: str, count: str, *, by_annotation: bool = False) -> dict[str, Any]:
    """A plain pod of Kueue's pod group ``train``: its name by label, or by annotation as Kueue writes it."""
    named = {KUEUE_GROUP_NAME_KEY: "train"}
    annotations = {KUEUE_GROUP_TOTAL_COUNT_KEY: count} | (named if by_annotation else {})
    return pod_object(name, gpus=1, labels={} if by_annotation else named, annotations=annotations)


def test_a_kueue_pod_group_is_held_at_bind_until_complete_then_binds_whole(tmp_path: Path) -> None:
    """No object defines it: its size is the members' total-count annotation, as our labels' min-available."""
    with scene(tmp_path, None) as cluster:
        pods = [_kueue_member(f"member-{index}", "3") for index in range(3)]
        create_pods(cluster.kubeconfig, pods)
        names = [pod["metadata"]["name"] for pod in pods]
        answers, threads = cluster.bind_on_threads(names[:2])
        time.sleep(HELD_S)
        assert cluster.emulator.bindings == [], "members bound before their group was complete"
        assert cluster.bind(names[2]) == {"Error": ""}
        for thread in threads:
            thread.join(10)
        assert answers == {name: {"Error": ""} for name in names[:2]}
        # A late member naming the group by annotation only counts the three bound ones (named by label):
        # no label selector narrows the listing for Kueue's groups.
        create_pods(cluster.kubeconfig, [_kueue_member("member-3", "3", by_annotation=True)])
        assert cluster.bind("member-3") == {"Error": ""}
        assert cluster.bound() == [*names, "member-3"]
        create_pods(cluster.kubeconfig, [_kueue_member("zero", "0")])
        assert cluster.bind("zero") == {
            "Error": f"pod group default/train (kueue.x-k8s.io): invalid annotation {KUEUE_GROUP_TOTAL_COUNT_KEY} "
            "'0'; accepted: a positive integer, e.g. 8"
        }
