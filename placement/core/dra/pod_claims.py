"""Which ResourceClaims a pod uses, as kube-scheduler's DynamicResources plugin finds them.

A pod lists its claims in ``spec.resourceClaims``: each entry names a ResourceClaim
(``resourceClaimName``) or a ResourceClaimTemplate (``resourceClaimTemplateName``), from which the claim
controller creates a claim owned by the pod and records its name in ``status.resourceClaimStatuses``.
``resolve_pod_claims`` follows the plugin's PreFilter (kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``, ``podResourceClaims``, with
``k8s.io/dynamic-resource-allocation/resourceclaim``'s ``Name`` and ``IsForPod``):

* a named claim is used as is; a template's claim is the one the pod's status names (a status entry
  without a name means the claim is not needed, and the entry is skipped), and it must be controlled by
  the pod ("was not created for pod ... (pod is not owner)");
* a template entry the status does not list is "not created yet" upstream. A caller that sent the pod
  without its status (the ``Pod`` message carries none) still finds the claim the controller made: the
  one controlled by the pod's uid whose ``resource.kubernetes.io/pod-claim-name`` annotation names the
  entry, as the controller itself looks it up (``findPodResourceClaim``);
* a claim that does not exist, or is being deleted, stops the pod with upstream's words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from placement.core.dra.claims import ResourceClaim

MAX_RESERVED_FOR = 256  # resource.k8s.io ResourceClaimReservedForMaxSize


@dataclass(frozen=True)
class PodResourceClaim:
    """One ``spec.resourceClaims[]`` entry and what the pod's status says of it."""

    name: str
    claim_name: str = ""  # resourceClaimName
    template_name: str = ""  # resourceClaimTemplateName
    # status.resourceClaimStatuses[]: whether it lists the entry, and the claim it names (None: not needed)
    listed: bool = False
    generated_name: str | None = None


@dataclass(frozen=True)
class PodClaims:
    """The pod's claims in ``spec.resourceClaims`` order (entries that need none skipped)."""

    claims: tuple[ResourceClaim, ...]

    @property
    def unallocated(self) -> tuple[ResourceClaim, ...]:
        """What the scheduler must allocate: each claim once, in order (two entries may name one claim)."""
        seen: set[tuple[str, str]] = set()
        result = []
        for claim in self.claims:
            key = (claim.namespace, claim.name)
            if claim.allocation is None and key not in seen:
                seen.add(key)
                result.append(claim)
        return tuple(result)

    @property
    def allocated(self) -> tuple[ResourceClaim, ...]:
        return tuple(claim for claim in self.claims if claim.allocation is not None)


class ClaimsUnusable(Exception):
    """The pod cannot be scheduled until its claims change: the message is upstream's."""


def resolve_pod_claims(
    namespace: str,
    pod_name: str,
    pod_uid: str,
    entries: Sequence[PodResourceClaim],
    *,
    claim: Callable[[str, str], ResourceClaim | None],
    owned_claim: Callable[[str, str, str], ResourceClaim | None],
) -> PodClaims:
    """The claims of the pod's entries; ``claim(namespace, name)`` and ``owned_claim(namespace, pod_uid,
    entry)`` look them up in the cache. Raises ``ClaimsUnusable`` when one is missing, being deleted, not
    the pod's, or reserved for as many consumers as a claim may list."""
    found: list[ResourceClaim] = []
    for entry in entries:
        if entry.claim_name:
            resolved, check_owner = claim(namespace, entry.claim_name), False
            name = entry.claim_name
        elif entry.listed:
            if entry.generated_name is None:
                continue  # the claim controller decided no claim is needed for this entry
            resolved, check_owner, name = claim(namespace, entry.generated_name), True, entry.generated_name
        else:
            resolved = owned_claim(namespace, pod_uid, entry.name) if pod_uid else None
            if resolved is None:
                raise ClaimsUnusable(f'pod "{namespace}/{pod_name}": ResourceClaim not created yet')
            check_owner, name = False, resolved.name
        if resolved is None:
            raise ClaimsUnusable(f'resourceclaim.resource.k8s.io "{name}" not found')
        if resolved.deleting:
            raise ClaimsUnusable(f'resourceclaim "{name}" is being deleted')
        if check_owner and pod_uid and resolved.controller_uid != pod_uid:
            raise ClaimsUnusable(
                f"ResourceClaim {namespace}/{name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
            )
        reserved = {consumer.uid for consumer in resolved.reserved_for}
        if len(resolved.reserved_for) >= MAX_RESERVED_FOR and pod_uid not in reserved:
            raise ClaimsUnusable(f"resourceclaim {namespace}/{name} in use: reserved for {MAX_RESERVED_FOR} consumers")
        found.append(resolved)
    return PodClaims(tuple(found))
