"""The shim emulator serving the APIs that define gangs, as a cluster with each of them installed would.

* ``scheduling.k8s.io/v1alpha2`` PodGroups (``native="v1alpha2"``: a 1.36 cluster) or ``v1alpha1`` Workloads
  (``native="v1alpha1"``: a 1.35 cluster), beside the group's GA ``v1`` (PriorityClasses) in its discovery
  document; or neither (``native=None``: the discovery document names v1 only). Writes are judged by that
  release's official schemas only (``oldest_release`` and ``newest_release``): a 1.35 pod may carry
  ``spec.workloadRef``, which 1.36 removed, and a 1.36 pod ``spec.schedulingGroup``.
* scheduler-plugins' PodGroup CRD (``plugins=True``), judged by its official CRD in ../shared/data/dra
  (read in place), with its status subresource.
* Volcano's PodGroup CRD (``volcano=True``), judged by the trimmed copy of Volcano's CRD in
  tests/gang_crds (source and trimming named there), without a status subresource, as upstream.

An API group not served answers discovery 404, as a cluster without the CRD does. ``PATCH .../status`` of a
PodGroup with a status subresource keeps only the patch's ``status`` (what the API server's status
strategy keeps), checked as any write. ``status_patches()`` lists every write of a group's status in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kmock
import yaml

from tests.api_conformance import crd_schemas
from tests.conftest import SHARED_DATA, require_shared
from tests.kube_emulator import merge_patch, refusal
from tests.shim_cluster import ShimEmulator

NATIVE_PODGROUPS = kmock.resource("scheduling.k8s.io", "v1alpha2", "podgroups")
WORKLOADS = kmock.resource("scheduling.k8s.io", "v1alpha1", "workloads")
PLUGIN_PODGROUPS = kmock.resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
VOLCANO_PODGROUPS = kmock.resource("scheduling.volcano.sh", "v1beta1", "podgroups")
PLUGINS_CRD = (
    SHARED_DATA / "dra" / "scheduler-plugins" / "scheduler-plugins_CRD_podgroups.scheduling.x-k8s.io_v1alpha1.yaml"
)
VOLCANO_CRD = Path(__file__).parent / "gang_crds" / "scheduling.volcano.sh_podgroups.yaml"
_RELEASE = {"v1alpha1": "1.35.0", "v1alpha2": "1.36.0"}  # the one release that serves each native version


class GangEmulator(ShimEmulator):
    """``ShimEmulator`` plus the chosen gang APIs and their groups' discovery documents."""

    def __init__(self, *, native: str | None = None, plugins: bool = False, volcano: bool = False) -> None:
        # Skip (shared data absent) before the emulator opens anything: a skip after would leak its sockets.
        plugins_crd = require_shared(PLUGINS_CRD).read_text() if plugins else ""
        super().__init__()
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        native_versions = ["v1"]
        if native is not None:
            self.kmock.oldest_release = self.kmock.newest_release = _RELEASE[native]
            resource, kind = (NATIVE_PODGROUPS, "PodGroup") if native == "v1alpha2" else (WORKLOADS, "Workload")
            self.kmock.resources[resource] = kmock.ResourceInfo(
                kind=kind, singular=kind.lower(), namespaced=True, verbs=verbs
            )
            native_versions.append(native)
            if native == "v1alpha2":
                self.kmock["patch", NATIVE_PODGROUPS, kmock.subresource("status")] << self._patch_status
        self._discovery("scheduling.k8s.io", native_versions)
        if plugins:
            for key, schema in crd_schemas(yaml.safe_load(plugins_crd)).items():
                self.kmock.custom_schemas[key] = schema
            self.kmock.resources[PLUGIN_PODGROUPS] = kmock.ResourceInfo(
                kind="PodGroup", singular="podgroup", namespaced=True, verbs=verbs
            )
            self.kmock["patch", PLUGIN_PODGROUPS, kmock.subresource("status")] << self._patch_status
            self._discovery("scheduling.x-k8s.io", ["v1alpha1"])
        if volcano:
            self.kmock.custom_schemas |= crd_schemas(yaml.safe_load(VOLCANO_CRD.read_text()))
            self.kmock.resources[VOLCANO_PODGROUPS] = kmock.ResourceInfo(
                kind="PodGroup", singular="podgroup", namespaced=True, verbs=verbs
            )
            self._discovery("scheduling.volcano.sh", ["v1beta1"])

    def __enter__(self) -> GangEmulator:
        super().__enter__()
        return self

    def _discovery(self, group: str, versions: list[str]) -> None:
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        self.kmock[f"get /apis/{group}"] << {
            "apiVersion": "v1",
            "kind": "APIGroup",
            "name": group,
            "versions": listed,
            "preferredVersion": listed[0],
        }

    def group_object(self, resource: kmock.resource, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[resource, namespace, name].raw)

    async def _patch_status(self, request: kmock.Request) -> dict[str, Any]:
        emulator, patch, resource = self.kmock, request.data, request.resource
        assert resource is not None
        key = (resource, request.namespace, str(request.name))
        async with emulator._lock:
            current = emulator.existing(key)
            if not isinstance(patch, dict):
                raise refusal(400, "BadRequest", "the status patch is not a JSON object")
            emulator.check_preconditions(current, patch.get("metadata") or {}, resource)
            patched = merge_patch(current, {"status": patch.get("status")}) if "status" in patch else current
            emulator.conform(patched, api_version=f"{resource.group}/{resource.version}", kind="PodGroup")
            stored = await emulator.commit(key, patched)
        emulator._stored.add(request.id)  # stored here: StrictKubernetes must not store the whole patch again
        return stored

    def status_patches(self) -> list[tuple[str, dict[str, Any]]]:
        """Every patch of a pod group's status so far, in order, as (path, status sent): through ``/status``
        or, for Volcano's, through the object."""
        return [
            (request.url.path, request.data["status"])
            for request in self.writes()
            if request.method.value == "PATCH"
            and "/podgroups/" in request.url.path
            and isinstance(request.data, dict)
            and "status" in request.data
        ]
