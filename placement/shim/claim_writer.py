"""The binder's DRA writes: a claim's ``status.allocation`` and ``status.reservedFor``, before the pod binds.

As kube-scheduler's DynamicResources plugin does in PreBind (``bindClaim``, NOTES 4.5): first the
``resource.kubernetes.io/delete-protection`` finalizer in an update of the claim (so the claim cannot
vanish under an allocation), then one status update that sets the allocation and appends the pod to
``reservedFor``. Both are merge patches that carry the claim's ``resourceVersion`` (a precondition: the API
server answers 409 when the claim changed since it was read, as an update would): on a conflict the claim
is read again and the write retried (``MAX_ATTEMPTS`` times).

* A claim that another scheduler (or an earlier pass of ours) allocated is respected: when its allocation
  is the one the service chose, only the pod is added to ``reservedFor`` (a claim shared by several pods
  is allocated once); when it is another, the write fails (``ClaimWriteError``) and the binder releases
  the decision, so that the service plans again from the claim as it now is.
* ``release`` removes the pod from ``reservedFor`` of the claims written for a decision that could not
  complete; deallocating a claim nobody reserves stays with the ResourceClaim controller, as upstream.

The version of ``resource.k8s.io`` written is the one the cluster serves (discovered once, as the feed
does); the allocation the service sends is the same in v1, v1beta2 and v1beta1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import ApiError
from kubenexus.kube.paths import DRA_GROUP_PATH, dra_path, served_dra_version
from placement.api.v1 import placement_pb2 as pb

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
MAX_ATTEMPTS = 5


class ClaimWriteError(Exception):
    """The claim cannot take the allocation: gone, being deleted, or allocated otherwise."""


class ClaimWriter:
    """Writes allocations chosen by the placement service into ResourceClaims."""

    def __init__(self, api: KubeClient) -> None:
        self._api = api
        self._version: str | None = None

    def allocate(self, pod: Mapping[str, Any], claim: pb.ClaimAllocation) -> None:
        """Set ``claim``'s allocation (unless it already holds it) and reserve it for ``pod``. Without an
        ``allocation_json`` the claim was allocated already (by whoever): it is only reserved for the pod."""
        allocation = json.loads(claim.allocation_json) if claim.allocation_json else None
        consumer = _consumer(pod)
        path = self._path(claim.namespace, claim.name)
        for _ in range(MAX_ATTEMPTS):
            current = self._read(path, claim)
            metadata = current.get("metadata") or {}
            if metadata.get("deletionTimestamp"):
                raise ClaimWriteError(f"resourceclaim {claim.namespace}/{claim.name} is being deleted")
            status = dict(current.get("status") or {})
            held = status.get("allocation")
            if held is None and allocation is None:
                raise ClaimWriteError(f"resourceclaim {claim.namespace}/{claim.name} is no longer allocated")
            if allocation is not None and held is not None and held != allocation:
                raise ClaimWriteError(
                    f"resourceclaim {claim.namespace}/{claim.name} was allocated meanwhile, to other devices"
                )
            reserved = list(status.get("reservedFor") or [])
            if held is not None and any(entry.get("uid") == consumer["uid"] for entry in reserved):
                return  # written by an earlier pass: nothing to do
            try:
                finalizers = list(metadata.get("finalizers") or [])
                if DELETE_PROTECTION not in finalizers:
                    current = self._api.merge_patch(
                        path, {"metadata": {**_precondition(current), "finalizers": [*finalizers, DELETE_PROTECTION]}}
                    )
                self._api.merge_patch(
                    f"{path}/status",
                    {
                        "metadata": _precondition(current),
                        "status": {"allocation": held or allocation, "reservedFor": [*reserved, consumer]},
                    },
                )
                return
            except ApiError as error:
                if error.status != 409:
                    raise
        raise ClaimWriteError(f"resourceclaim {claim.namespace}/{claim.name} kept changing; will retry")

    def release(self, pod: Mapping[str, Any], claim: pb.ClaimAllocation) -> None:
        """Take ``pod`` out of ``claim``'s ``reservedFor`` (a decision that did not complete)."""
        uid = _consumer(pod)["uid"]
        path = self._path(claim.namespace, claim.name)
        for _ in range(MAX_ATTEMPTS):
            current = self._api.get(path)
            if current is None:
                return
            status = dict(current.get("status") or {})
            reserved = [e for e in status.get("reservedFor") or [] if e.get("uid") != uid]
            if len(reserved) == len(status.get("reservedFor") or []):
                return
            try:
                self._api.merge_patch(
                    f"{path}/status", {"metadata": _precondition(current), "status": {"reservedFor": reserved or None}}
                )
                return
            except ApiError as error:
                if error.status != 409:
                    raise

    def _read(self, path: str, claim: pb.ClaimAllocation) -> Json:
        current = self._api.get(path)
        if current is None:
            raise ClaimWriteError(f'resourceclaim.resource.k8s.io "{claim.name}" not found')
        return current

    def _path(self, namespace: str, name: str) -> str:
        if self._version is None:
            version = served_dra_version(self._api.get(DRA_GROUP_PATH))
            if version is None:
                raise ClaimWriteError("the cluster serves no resource.k8s.io version to write claims to")
            self._version = version
        return f"{dra_path(self._version, 'namespaces')}/{namespace}/resourceclaims/{name}"


def _consumer(pod: Mapping[str, Any]) -> dict[str, str]:
    metadata = pod.get("metadata") or {}
    return {"resource": "pods", "name": str(metadata.get("name") or ""), "uid": str(metadata.get("uid") or "")}


def _precondition(claim: Json) -> dict[str, Any]:
    """The claim's identity and version: the write applies only to the claim as it was read."""
    metadata = claim.get("metadata") or {}
    return {"uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}
