"""What the engine answers: plain frozen values, which the API codec turns into protobuf.

Rejections carry their kind (``RejectionKind``) from where the reason arose in the core; nothing here
reads a message to classify it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, format_ids
from placement.core.dra.allocation import allocation_result
from placement.core.dra.claims import AllocatedDevice
from placement.core.podgroup import DomainConstraint, PermitVerdict
from placement.core.pods import PendingPod, PodSpec
from placement.core.vocabulary import PodDemand, RejectionKind
from placement.state.dra_verdicts import DeviceChoice
from placement.state.preemption_search import Victim


class Rejection(NamedTuple):
    """Why one node cannot take the pod."""

    node: str
    reason: str
    kind: RejectionKind


class Rejections(NamedTuple):
    """The candidates rejected for one reason, in request order.

    Filter and Score reject hundreds of nodes for a handful of reasons; grouped, an answer costs one
    entry per reason rather than one per node, here and on the wire.
    """

    reason: str
    kind: RejectionKind
    nodes: tuple[str, ...]


def group_rejections(rejections: Iterable[Rejection]) -> tuple[Rejections, ...]:
    """Rows grouped by reason: the most common reason first, nodes in their given order."""
    grouped: dict[tuple[str, RejectionKind], list[str]] = {}
    for node, reason, kind in rejections:
        grouped.setdefault((reason, kind), []).append(node)
    return ordered(Rejections(reason, kind, tuple(nodes)) for (reason, kind), nodes in grouped.items())


def ordered(groups: Iterable[Rejections]) -> tuple[Rejections, ...]:
    """The most common reason first; ties by reason."""
    return tuple(sorted(groups, key=lambda group: (-len(group.nodes), group.reason)))


@dataclass(frozen=True)
class FilterOutcome:
    feasible: tuple[str, ...]  # in request order
    rejected: tuple[Rejections, ...]


class NodeScore(NamedTuple):
    """One feasible node's score."""

    node: str
    score: float  # 0..100
    breakdown: Mapping[str, float]  # points per component; they add up to the score
    landing_cells: tuple[int, ...]  # the NUMA id the pod is predicted to land in; () when it spans the node


@dataclass(frozen=True)
class ScoreOutcome:
    """The feasible nodes best first, as parallel columns: a Score call ranks hundreds of nodes, and the
    codec encodes straight from the columns."""

    nodes: tuple[str, ...]  # best first
    totals: Sequence[float]  # 0..100, per node
    points: Mapping[str, Sequence[float]]  # component -> points per node; they add up to the totals
    weights: Mapping[str, float]  # component -> its share of the 100 points
    landing_cells: Sequence[int]  # the NUMA id the pod is predicted to land in; -1 when it spans the node
    rejected: tuple[Rejections, ...]

    @property
    def scores(self) -> tuple[NodeScore, ...]:
        """One ``NodeScore`` per node, best first (for callers that want rows; the codec reads columns)."""
        components = tuple(self.points)
        return tuple(
            NodeScore(node, total, dict(zip(components, parts, strict=True)), () if cell < 0 else (cell,))
            for node, total, cell, parts in zip(
                self.nodes, self.totals, self.landing_cells, zip(*self.points.values(), strict=True), strict=True
            )
        )


@dataclass(frozen=True)
class ClaimDevices:
    """The devices chosen for one ResourceClaim, and the ``status.allocation`` the binder writes."""

    namespace: str
    name: str
    devices: tuple[AllocatedDevice, ...]
    allocation: Mapping[str, Any]  # empty for a claim allocated already (kept as it is)
    why: tuple[str, ...]  # what the choice scored, for people


def claim_devices(choice: DeviceChoice | None, node: str, cells: tuple[int, ...]) -> tuple[ClaimDevices, ...]:
    """Each claim of the pod on ``node`` (the pod predicted in NUMA ``cells``): the devices chosen, with the
    allocation kube-scheduler would write; then the claims allocated already, with no allocation to write
    (the binder adds the pod to their ``reservedFor``). () for a pod without claims."""
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


@dataclass(frozen=True)
class Placement:
    """Where a pod goes: node, NUMA cells, GPUs; the annotations the binder writes on the pod."""

    namespace: str
    name: str
    node: str
    cells: tuple[int, ...]
    gpus: tuple[int, ...]
    pinned: bool
    score: float
    breakdown: Mapping[str, float]
    ttl_s: float  # 0 for a placement that reserves nothing (Explain)
    claims: tuple[ClaimDevices, ...] = ()  # DRA: the devices chosen for the pod's unallocated claims
    notes: tuple[str, ...] = ()  # what the service knew less of on the node (``ClusterIndex.node_notes``)

    @property
    def annotations(self) -> dict[str, str]:
        """What ``placement.core.pods.pod_usage`` reads back after a restart or on another replica."""
        result = {ASSIGNED_CELLS_KEY: format_ids(self.cells)}
        if self.gpus:
            result[ASSIGNED_GPUS_KEY] = format_ids(self.gpus)
        return result


@dataclass(frozen=True)
class ReserveOutcome:
    placement: Placement | None  # None when no candidate holds the pod
    rejected: tuple[Rejections, ...]


@dataclass(frozen=True)
class Explanation:
    node: str
    pod: PendingPod
    demand: PodDemand
    placement: Placement | None  # what a reservation on this node alone would give; nothing is reserved
    rejection: Rejection | None
    exact_model: bool  # the per-node kubelet port decided the node, not the vectorised rules


# --- gangs -------------------------------------------------------------------------------------------


class GangState(enum.StrEnum):
    """A PlaceGang answer in three words: the coordinator's phases as a scheduler acts on them."""

    PLACED = "placed"
    WAITING = "waiting"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True)
class GangSpec:
    namespace: str
    name: str
    min_member: int  # 0: every member
    members: tuple[PodSpec, ...]
    topology: tuple[DomainConstraint, ...] = ()  # where the members must, or should, land together
    source: str = ""  # the API the group was read from ("": our pod labels), for messages
    # How long its reserved members may wait to bind (scheduler-plugins' scheduleTimeoutSeconds); None:
    # the service's permit timeout.
    schedule_timeout_s: float | None = None


@dataclass(frozen=True)
class GangOutcome:
    state: GangState
    reason: str
    placements: tuple[Placement, ...]  # every member's when placed, else ()
    placed: int
    min_member: int


@dataclass(frozen=True)
class PermitOutcome:
    state: PermitVerdict
    reason: str
    group: str  # "namespace/name"; "" for a pod outside any group
    ready: int
    min_member: int


# --- preemption --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreemptOutcome:
    """A Preempt answer: the victims to evict and the nodes held for the preemptor, or why there are none."""

    preempted: bool  # victims chosen, the plan checked without them, the nominated nodes held
    reason: str
    victims: tuple[Victim, ...]  # a gang's members together, whole
    nominations: tuple[tuple[tuple[str, str], str], ...]  # ((namespace, name), node) per preemptor
    hold_s: float  # how long the nominated nodes stay held for the preemptor (0 when not preempted)
