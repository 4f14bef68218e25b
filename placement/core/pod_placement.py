"""Where one pod goes: the one record of a placement, from the core's plans to the API's answers.

Each layer fills in what it knows, on the same record (``dataclasses.replace``):

* the core plans on the index's rows: ``row``, and the NUMA ``cells`` the kubelet is predicted to pin the pod
  to (``pinned``: an aligned merged hint pins them; else a prediction), the ``gpus`` its device plugin hands
  out (``placement.core.decision.plan_on_node``, the gang planner's ``gang_plan``);
* the state names the ``node``, chooses the devices for the pod's ResourceClaims (``devices``) and reserves it
  (the reservations, the gang coordinator), with the ``score`` that ranked the node first;
* the service answers with it, adding how long the reservation holds (``ttl_s``) and what it knew less of on
  the node (``notes``); the API's codec encodes it as ``PodPlacement`` (a group's as ``MemberPlacement``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, format_ids
from placement.core.dra.allocation import allocation_result
from placement.core.dra.best_fit import BestFit
from placement.core.dra.claims import AllocatedDevice, ResourceClaim


@dataclass(frozen=True)
class DeviceChoice:
    """A pod's claims on its node: the devices chosen for the unallocated ones (None: none to allocate), and
    the claims allocated already, kept as they are (the binder only adds the pod to their ``reservedFor``)."""

    fit: BestFit | None
    kept: tuple[ResourceClaim, ...]
    note: str | None = None  # the node's GPU topology was inferred from the driver's attributes: says so


@dataclass(frozen=True)
class ClaimDevices:
    """The devices chosen for one ResourceClaim, and the ``status.allocation`` the binder writes."""

    namespace: str
    name: str
    devices: tuple[AllocatedDevice, ...]
    allocation: Mapping[str, Any]  # empty for a claim allocated already (kept as it is)
    why: tuple[str, ...]  # what the choice scored, for people


@dataclass(frozen=True)
class Placement:
    namespace: str
    name: str
    node: str = ""  # "" while only planned on a row
    cells: tuple[int, ...] = ()  # NUMA ids
    gpus: tuple[int, ...] = ()  # GPU indices; () when none is asked for or the node has no link table
    pinned: bool = False  # the kubelet pins the pod to ``cells``
    row: int = -1  # the index slot it was planned on; -1 when not planned on the index's rows
    score: float = 0.0  # 0..100: what ranked the node (0 for a group's member)
    breakdown: Mapping[str, float] = field(default_factory=dict)  # points per component; they add up to score
    devices: DeviceChoice | None = None  # DRA: the devices chosen for the pod's claims; None without claims
    ttl_s: float = 0.0  # how long the reservation holds; 0 for a placement that reserves nothing (Explain)
    notes: tuple[str, ...] = ()  # what the service knew less of on the node (``ClusterIndex.node_notes``)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def annotations(self) -> dict[str, str]:
        """What ``placement.core.pods.pod_usage`` reads back after a restart or on another replica."""
        result = {ASSIGNED_CELLS_KEY: format_ids(self.cells)}
        if self.gpus:
            result[ASSIGNED_GPUS_KEY] = format_ids(self.gpus)
        return result

    @cached_property
    def claims(self) -> tuple[ClaimDevices, ...]:
        """Each claim of the pod: the devices chosen, with the allocation kube-scheduler would write; then the
        claims allocated already, with no allocation to write (the binder adds the pod to their
        ``reservedFor``). () for a pod without claims."""
        return claim_devices(self.devices, self.node, self.cells)


def claim_devices(choice: DeviceChoice | None, node: str, cells: tuple[int, ...]) -> tuple[ClaimDevices, ...]:
    """``Placement.claims`` of a pod on ``node`` predicted in NUMA ``cells``."""
    if choice is None:
        return ()
    kept = tuple(
        ClaimDevices(claim.namespace, claim.name, claim.allocation or (), {}, ("allocated already: kept as it is",))
        for claim in choice.kept
    )
    fit = choice.fit
    if fit is None:
        return kept
    preferred_cell = cells[0] if len(cells) == 1 else None
    score = fit.score
    why = (
        f"NVLink/NVSwitch connectivity {float(score.links):.2f}",
        f"NUMA alignment {float(score.numa):.2f}"
        + (f" (with cell {preferred_cell}, where the pod's CPUs are predicted)" if preferred_cell is not None else ""),
        f"free GPUs kept connected {float(score.fragmentation):.2f}",
        f"{fit.examined} device sets compared" + (" (cut short)" if fit.truncated else ""),
        *(() if choice.note is None else (choice.note,)),
    )
    chosen = tuple(
        ClaimDevices(
            namespace=solution.claim.namespace,
            name=solution.claim.name,
            devices=tuple(
                AllocatedDevice(chosen.request, ref.driver, ref.pool, ref.device)
                for chosen in solution.devices
                for ref in (chosen.device.ref,)
            ),
            allocation=allocation_result(solution, node),
            why=why,
        )
        for solution in fit.allocation.claims
    )
    return chosen + kept
