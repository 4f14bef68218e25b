"""The devices kube-scheduler's DRA allocator would give one pod's claims on one node: first fit.

The search and its feasibility rules are ``search.Search`` (a port of DRA-lib's structured allocator as
kube-scheduler 1.37 runs it with its default feature gates: the *incubating* implementation): depth first,
the devices of one request tried as combinations in search order (incubating's ``startLocation``: a
request's next device is looked for after the previous one), and the first complete solution wins; there
is no scoring. tests/upstream/test_oracle_dra.py checks it device for device against upstream's code. When nothing
fits, the reason says per request how many devices its selectors keep and how many of those are free;
when the search cannot run at all (an unknown DeviceClass, admin access, a selector error, ``All`` over
an unusable pool, too many results) the reason is that error, marked as such, because upstream reports
it instead of "does not fit".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.core.dra.claims import DeviceClass, ResourceClaim
from placement.core.dra.search import AllocationError, ClaimSolution, Inventory, Search


@dataclass(frozen=True)
class Allocation:
    """The chosen devices of every claim of the pod, on ``node_name``."""

    node_name: str
    claims: tuple[ClaimSolution, ...]


@dataclass(frozen=True)
class Unallocatable:
    """Why the pod's claims cannot be allocated on the node; ``error`` when the search could not run."""

    node_name: str
    reason: str
    error: bool = False
    detail: str = ""  # the reason without its node: per request, what the selectors keep and what is free


def first_fit(
    claims: Sequence[ResourceClaim], *, classes: Mapping[str, DeviceClass], inventory: Inventory
) -> Allocation | Unallocatable:
    """The first solution of the allocator's search for ``claims`` (the pod's unallocated claims,
    in the pod's order) on the inventory's node, or why there is none."""
    try:
        search = Search(claims, classes, inventory, combinations=True)
        solution = next(search.solutions(), None)
        if solution is None:
            return nothing_fits(search)
    except AllocationError as error:
        return Unallocatable(inventory.node_name, str(error), error=True)
    return Allocation(inventory.node_name, solution)


def nothing_fits(search: Search) -> Unallocatable:
    """Why the search found no solution: per request (each alternative of a ``firstAvailable`` one), the
    devices its selectors keep, the free ones and how many are wanted; the pools that cannot be used."""
    inventory = search.inventory
    parts = []
    for claim_index, claim in enumerate(search.claims):
        for request_index, alternatives in enumerate(search.request_options(claim_index)):
            for sub_index, option in enumerate(alternatives):
                where = f"claim {claim.namespace}/{claim.name}, request {option.result_name}: "
                try:
                    key = (claim_index, request_index, sub_index)
                    kept = [e for e in inventory.devices if search.selectable(key, e)]
                except AllocationError as error:
                    # A selector that fails on a device the search never reached: upstream, which only
                    # evaluates what it tries, says "does not fit" too; the reason names the failure.
                    parts.append(f"{where}a selector fails on a device the search did not reach ({error})")
                    continue
                free = [e for e in kept if e.ref not in inventory.taken]
                parts.append(
                    where
                    + (
                        f"no device of the node matches the selectors of class {option.device_class.name}"
                        + (" and the request" if option.spec.selectors else "")
                        if not kept
                        else f"{len(kept)} devices match, {len(free)} not allocated, {option.count} wanted"
                    )
                )
    unusable = [f"{p.driver}/{p.name} ({p.status.value}: {p.problem})" for p in inventory.unusable_pools]
    note = f"; unusable pools: {', '.join(unusable)}" if unusable else ""
    detail = f"{'; '.join(parts)}{note}"
    reason = (
        f"node {inventory.node_name}: cannot allocate the pod's claims from {len(inventory.devices)} devices"
        f" (constraints, taints and shared hardware included): {detail}"
    )
    return Unallocatable(inventory.node_name, reason, detail=detail)
