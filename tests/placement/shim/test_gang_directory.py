"""The gang directory (``placement.shim.gang_directory``) choosing the API each source is read at from what
the cluster's discovery documents serve: Kubernetes 1.37 (v1beta1 and v1alpha3), 1.36 (v1alpha2), 1.35
(v1alpha1 Workloads), none. The API is scripted (``ScriptedApi``): discovery documents and lists from dicts,
watches that stay quiet; no connection is made."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from kubernetes import client

from kubenexus.kube.client import Json, KubeClient
from placement.core.annotations import FIELD_MANAGER
from placement.core.gang_sources import (
    SOURCE_PODGROUP,
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    SOURCE_WORKLOAD,
    GroupDefinition,
    PodGroupKey,
    group_of,
)
from placement.core.podgroup import DomainConstraint
from placement.shim.gang_directory import APIS_OF, GROUP_APIS, GangDirectory, Unresolved, apis_named
from tests.conftest import wait_until


class ScriptedApi(KubeClient):
    """``served``: each API group's versions (a group absent answers 404); ``objects``: each collection path's
    items. Every list and merge patch is recorded; a watch stays quiet until ``stop`` is set."""

    def __init__(
        self,
        served: Mapping[str, Sequence[str]] | None = None,
        objects: Mapping[str, list[Json]] | None = None,
        *,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(client.ApiClient(client.Configuration()), field_manager=FIELD_MANAGER)
        self.served = dict(served or {})
        self.objects = dict(objects or {})
        self.stop = stop or threading.Event()
        self.listed: list[str] = []
        self.patches: list[tuple[str, Json]] = []

    def get(self, path: str) -> Json | None:
        group = path.removeprefix("/apis/")
        if group not in self.served:
            return None
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.served[group]]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions}

    def list(self, path: str, query: Mapping[str, str] | None = None) -> Json:
        self.listed.append(path)
        return {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": self.objects.get(path, [])}

    def watch(
        self, path: str, *, resource_version: str, timeout_s: float, query: Mapping[str, str] | None = None
    ) -> Iterator[Json]:
        self.stop.wait()
        return iter(())

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Json:
        self.patches.append((path, dict(patch)))
        return {}


def _read(api: ScriptedApi) -> GangDirectory:
    """A directory over ``api`` that has discovered every group and listed every API it reads."""
    directory = GangDirectory(api, stop=api.stop, watch_timeout_s=5)
    directory.start()
    wait_until(lambda: directory.synced, what="the directory to read every served API")
    return directory


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


PODGROUPS = "/apis/scheduling.k8s.io/{}/podgroups"
WORKLOADS = "/apis/scheduling.k8s.io/v1alpha1/workloads"
NOT_SERVED = "the cluster does not serve scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups"


def test_native_pod_groups_are_read_newest_version_first() -> None:
    assert [api.version for api in APIS_OF[SOURCE_PODGROUP]] == ["v1beta1", "v1alpha3", "v1alpha2"]
    assert [api.version for api in APIS_OF[SOURCE_WORKLOAD]] == ["v1alpha1"]  # 1.35's; 1.37's holds templates
    assert {api.plural for api in GROUP_APIS if api.group == "scheduling.k8s.io"} == {"podgroups", "workloads"}
    assert apis_named(SOURCE_PODGROUP) == "scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups"
    assert apis_named(SOURCE_SCHEDULER_PLUGINS) == "scheduling.x-k8s.io/v1alpha1 podgroups"


@pytest.mark.parametrize(
    ("served", "listed"),
    [
        # kube-apiserver v1.37.2, --runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true
        (["v1", "v1beta1", "v1alpha3"], [PODGROUPS.format("v1beta1")]),
        (["v1", "v1alpha3"], [PODGROUPS.format("v1alpha3")]),  # 1.37 with only the alpha version enabled
        (["v1", "v1alpha2"], [PODGROUPS.format("v1alpha2")]),  # 1.36
        (["v1", "v1alpha1"], [WORKLOADS]),  # 1.35: Workloads, no PodGroup API
        (["v1"], []),  # GenericWorkload off, or its versions not in --runtime-config
    ],
    ids=["1.37", "1.37-alpha-only", "1.36", "1.35", "none"],
)
def test_each_source_is_read_at_the_newest_version_served(
    served: list[str], listed: list[str], stop: threading.Event
) -> None:
    api = ScriptedApi({"scheduling.k8s.io": served}, stop=stop)
    directory = _read(api)
    assert api.listed == listed
    key = PodGroupKey(SOURCE_PODGROUP, "ml", "train")
    answer = directory.definition(key)
    if any("/podgroups" in path for path in listed):
        assert answer == Unresolved("waiting for the PodGroup object ml/train (scheduling.k8s.io)", warning=False)
    else:
        assert answer == Unresolved(f"pod group {key} cannot be read: {NOT_SERVED}", warning=True)
    # Groups no cluster here serves (404 on discovery): their sources are skipped, with the same message.
    for source in (SOURCE_SCHEDULER_PLUGINS, SOURCE_VOLCANO):
        unserved = directory.definition(PodGroupKey(source, "ml", "train"))
        assert isinstance(unserved, Unresolved)
        assert unserved.warning


def test_a_1_37_pod_resolves_to_its_v1beta1_pod_group(stop: threading.Event) -> None:
    """The pod names its PodGroup (spec.schedulingGroup); the PodGroup, read at v1beta1, is the gang: its
    workloadRef only records the Workload template it was made from."""
    pod_group = {
        "metadata": {"name": "train-0", "namespace": "ml", "generation": 1},
        "spec": {
            "workloadRef": {"workloadName": "train", "templateName": "workers"},
            "schedulingPolicy": {"gang": {"minCount": 8}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        },
    }
    workload = {  # the 1.37 Workload it came from: templates only, never listed
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 8}}}]},
    }
    api = ScriptedApi(
        {"scheduling.k8s.io": ["v1", "v1beta1", "v1alpha3"]},
        {PODGROUPS.format("v1beta1"): [pod_group], "/apis/scheduling.k8s.io/v1beta1/workloads": [workload]},
        stop=stop,
    )
    directory = _read(api)
    key = group_of(
        {"metadata": {"name": "w-3", "namespace": "ml"}, "spec": {"schedulingGroup": {"podGroupName": "train-0"}}}
    )
    assert key == PodGroupKey(SOURCE_PODGROUP, "ml", "train-0")
    topology = (DomainConstraint("topology.kubernetes.io/rack", required=True),)
    assert directory.definition(key) == GroupDefinition(key, 8, None, topology)
    seen = directory.current(key)
    assert seen is not None
    assert (seen.api.version, seen.api.status_subresource, seen.obj) == ("v1beta1", True, pod_group)


def test_a_composite_pod_group_child_is_refused_with_why(stop: threading.Event) -> None:
    child = {
        "metadata": {"name": "workers-a-0", "namespace": "ml"},
        "spec": {
            "parentCompositePodGroupName": "root-0",
            "workloadRef": {"workloadName": "gang-of-gangs-workload", "templateName": "workers-a"},
            "schedulingPolicy": {"gang": {"minCount": 4}},
        },
    }
    api = ScriptedApi({"scheduling.k8s.io": ["v1", "v1alpha3"]}, {PODGROUPS.format("v1alpha3"): [child]}, stop=stop)
    answer = _read(api).definition(PodGroupKey(SOURCE_PODGROUP, "ml", "workers-a-0"))
    assert isinstance(answer, Unresolved)
    assert answer.warning
    assert answer.message.startswith(
        "PodGroup ml/workers-a-0 (scheduling.k8s.io): spec.parentCompositePodGroupName 'root-0' is set"
    )
