"""What the engine answers: plain frozen values, which the API codec turns into protobuf.

Rejections carry their kind (``RejectionKind``) from where the reason arose in the core; nothing here
reads a message to classify it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from placement.core.pod_placement import Placement
from placement.core.podgroup import DomainConstraint, PermitVerdict
from placement.core.pods import PendingPod, PodSpec
from placement.core.vocabulary import PodDemand, RejectionKind
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
