"""The shim emulator with what preemption touches: PodDisruptionBudgets, the Eviction API, pod status patches.

* ``policy/v1`` PodDisruptionBudgets (``ShimEmulator`` lists and watches them for the feed), set by tests
  with ``put_object`` as the disruption controller would have written them (``status.disruptionsAllowed``),
  and decremented by evictions.
* ``POST pods/{name}/eviction`` as the API server implements it (kubernetes pkg/registry/core/pod/storage/
  eviction.go, ``EvictionREST.Create``): the body must be a strict ``policy/v1 Eviction`` (422) whose
  name is the URL's (400); a pod that does not exist is 404, one whose uid or resourceVersion differs
  from ``deleteOptions.preconditions`` 409; a pod that is Pending, Succeeded, Failed or
  being deleted is deleted without looking at budgets (``canIgnorePDB``); otherwise the budgets of the
  pod's namespace whose selector matches its labels are found (an empty selector matches nothing), more
  than one is answered 500 ("This pod has more than one PodDisruptionBudget, ..."), a budget whose
  ``status.observedGeneration`` lags its generation or whose ``disruptionsAllowed`` is 0 is answered
  ``429 TooManyRequests`` with the upstream message and cause, and otherwise ``disruptionsAllowed`` is
  decremented and the pod recorded in ``disruptedPods`` (``checkAndDecrement``) before the pod is deleted.
  A pod that is not Ready while the budget has its desired healthy pods is deleted without decrementing.
  The deletion is immediate (no grace period, no kubelet): the pod watch hears DELETED at once.
* ``PATCH pods/{name}/status``: a merge patch of which only ``status`` is kept, as the status subresource
  keeps it (metadata preconditions are checked, spec and labels in the patch are ignored).

The evictions answered are recorded in order (``evictions``) with their HTTP status.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kmock

from tests.kube_emulator import merge_patch, refusal
from tests.shim_cluster import DISRUPTION_BUDGETS as PDBS
from tests.shim_cluster import PODS, ShimEmulator

TOO_MANY_REQUESTS = "Cannot evict pod as it would violate the pod's disruption budget."


class PreemptionEmulator(ShimEmulator):
    """``ShimEmulator`` plus the pods/eviction subresource (which spends PodDisruptionBudgets) and pods/status."""

    def __init__(self) -> None:
        super().__init__()
        self.evictions: list[tuple[str, str, int]] = []  # (namespace, pod, HTTP status) in arrival order
        self.kmock["post", PODS, kmock.subresource("eviction")] << self._evict
        self.kmock["patch", PODS, kmock.subresource("status")] << self._patch_status

    def __enter__(self) -> PreemptionEmulator:
        super().__enter__()
        return self

    def pdb(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[PDBS, namespace, name].raw)

    def exists(self, namespace: str, name: str) -> bool:
        return self.kmock.current((PODS, namespace, name)) is not None

    async def _evict(self, request: kmock.Request) -> dict[str, Any]:
        namespace, name = str(request.namespace), str(request.name)
        try:
            answer = await self._eviction(request, namespace, name)
        except kmock.KubernetesError as error:
            self.evictions.append((namespace, name, error.status))
            raise
        self.evictions.append((namespace, name, 201))
        return answer

    async def _eviction(self, request: kmock.Request, namespace: str, name: str) -> dict[str, Any]:
        emulator, eviction = self.kmock, request.data
        if not isinstance(eviction, dict):
            raise refusal(400, "BadRequest", "the Eviction is not a JSON object")
        emulator.conform(eviction, api_version="policy/v1", kind="Eviction")
        if (eviction.get("metadata") or {}).get("name") != name:
            raise refusal(400, "BadRequest", "name in URL does not match name in Eviction object")
        key = (PODS, namespace, name)
        async with emulator._lock:
            pod = emulator.existing(key)
            preconditions = (eviction.get("deleteOptions") or {}).get("preconditions") or {}
            emulator.check_preconditions(pod, preconditions, PODS)
            if not _can_ignore_budgets(pod):
                budgets = [
                    budget
                    for (resource, budget_namespace, _), obj in emulator._objects.items()
                    if resource == PDBS and budget_namespace == namespace and not obj.deleted
                    for budget in (obj.raw,)
                    if _selects(budget, pod)
                ]
                if len(budgets) > 1:
                    raise refusal(
                        500,
                        "InternalError",
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                        "support.",
                    )
                if budgets:
                    await self._check_and_decrement(budgets[0], pod)
            await emulator.commit(key, None)
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201}

    async def _check_and_decrement(self, budget: dict[str, Any], pod: dict[str, Any]) -> None:
        """``checkAndDecrement``, and the not-Ready exemption before it (the caller holds the lock)."""
        metadata, status = budget["metadata"], budget.get("status") or {}
        name = metadata["name"]
        allowed = int(status.get("disruptionsAllowed", 0))
        desired, healthy = int(status.get("desiredHealthy", 0)), int(status.get("currentHealthy", 0))
        if not _ready(pod) and healthy >= desired > 0:
            return  # an unready pod does not count towards the healthy ones: nothing to decrement
        if int(status.get("observedGeneration", 0)) < int(metadata.get("generation", 1)):
            raise _too_many_requests(f"The disruption budget {name} is still being processed by the server.")
        if allowed < 0:
            raise refusal(
                403,
                "Forbidden",
                f'poddisruptionbudget.policy "{name}" is forbidden: pdb disruptions allowed is negative',
            )
        if allowed == 0:
            raise _too_many_requests(
                f"The disruption budget {name} needs {desired} healthy pods and has {healthy} currently"
            )
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        disrupted = {**(status.get("disruptedPods") or {}), pod["metadata"]["name"]: stamp}
        changed = {"disruptionsAllowed": allowed - 1, "disruptedPods": disrupted}
        key = (PDBS, metadata["namespace"], name)
        await self.kmock.commit(key, merge_patch(budget, {"status": changed}))

    async def _patch_status(self, request: kmock.Request) -> dict[str, Any]:
        emulator, patch = self.kmock, request.data
        key = (PODS, request.namespace, str(request.name))
        async with emulator._lock:
            pod = emulator.existing(key)
            if not isinstance(patch, dict):
                raise refusal(400, "BadRequest", "the status patch is not a JSON object")
            emulator.check_preconditions(pod, patch.get("metadata") or {}, PODS)
            patched = merge_patch(pod, {"status": patch.get("status")}) if "status" in patch else pod
            emulator.conform(patched, api_version="v1", kind="Pod")
            stored = await emulator.commit(key, patched)
        emulator._stored.add(request.id)  # stored here: StrictKubernetes must not store the whole patch again
        return stored


def _can_ignore_budgets(pod: dict[str, Any]) -> bool:
    """``canIgnorePDB``: a pod that is Pending, finished or already being deleted disrupts nothing more."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Pending", "Succeeded", "Failed") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _selects(budget: dict[str, Any], pod: dict[str, Any]) -> bool:
    """The budget's label selector matches the pod; an empty or missing selector matches nothing (policy/v1
    eviction: "If a PDB with a nil or empty selector creeps in, it should match nothing, not everything")."""
    selector = (budget.get("spec") or {}).get("selector") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if (
            (operator == "In" and (not present or labels[key] not in values))
            or (operator == "NotIn" and present and labels[key] in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True


def _too_many_requests(cause: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(
        429, "TooManyRequests", TOO_MANY_REQUESTS, {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    )


def running(pod: dict[str, Any], node: str, *, priority: int, ready: bool = True) -> dict[str, Any]:
    """``pod`` bound to ``node`` and started, as the kubelet reports it (Running; Ready unless told), with the
    ``spec.priority`` the API server's Priority admission would have set."""
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    started: dict[str, Any] = merge_patch(
        pod,
        {"spec": {"nodeName": node, "priority": priority}, "status": {"phase": "Running", "conditions": conditions}},
    )
    return started


def budget(name: str, labels: dict[str, str], *, allowed: int, healthy: int, desired: int) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget over the pods with ``labels``, with the status the disruption
    controller would have written for ``healthy`` pods of which ``desired`` must stay."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": {"minAvailable": desired, "selector": {"matchLabels": dict(labels)}},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": healthy,
        },
    }
