"""The extension points a plugin implements, as kube-scheduler's ``framework/interface.go`` declares them: a plugin
is any object with a ``name``, and it takes part in each point whose method it has.

Where the service's points differ from kube-scheduler's, they differ because the service decides more per call:

* Filter and Score work on every candidate at once (numpy rows of the cluster index), not node by node. A
  Filter plugin gets the verdict so far and returns it with its own refusals merged in kube-scheduler's order
  (``merge_with_resources``); a Score plugin gets the scores so far and returns them with its components added.
  The first plugin of each point opens the verdict and the score: the registry lists ``NodeResources`` first.
* Reserve chooses the node among the candidates the caller names, holding what the pod takes (kube-scheduler's
  assume and Reserve in one call). Plugins may close nodes to the pod or decide it themselves; a pod no plugin
  decided is ranked through the Filter and Score plugins and planned on each node, best first, by the PlanNode
  plugins (kube-scheduler's Reserve on one node: the kubelet's cells and GPUs, the claims' devices) until one holds;
  the assume cache then holds it (``Pipeline.reserve``).
* ReserveGroup (PlaceGang) is Reserve for a whole pod group; Permit answers whether a reserved member may bind.
* PostFilter chooses victims for a pod or a group that fits nowhere, and checks kube-scheduler's own choice of
  victims (CheckEviction, the extender's preempt verb).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from placement.core.decision import NodePlan
from placement.core.feasibility import FilterResult
from placement.core.pod_placement import DeviceChoice
from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod, PodUsage
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.core.scoring import Scores
from placement.core.vocabulary import Rejected
from placement.service.framework.cycle_state import CycleState
from placement.service.results import GangOutcome, GangSpec, PermitOutcome, PreemptOutcome, Rejection
from placement.state.reservations import Decision


@runtime_checkable
class Plugin(Protocol):
    @property
    def name(self) -> str: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, cycle: CycleState, verdict: FilterResult) -> FilterResult:
        """``verdict`` (over the candidates) with this plugin's refusals of the rows it still passes merged in."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, cycle: CycleState, scores: Scores) -> Scores:
        """``scores`` (of the feasible rows) with this plugin's components added."""
        ...


@dataclass
class ReserveAttempt:
    """One Reserve call as its plugins see it: the candidates still open to the pod, why the others are not, and
    the decision once a plugin made it (else the pipeline's assume cache decides on the open nodes)."""

    open_nodes: list[str]
    rejected: list[Rejection] = field(default_factory=list)
    decision: Decision | None = None

    def keep_open(self, nodes: Sequence[str], why: Rejected) -> None:
        """Close every open node not in ``nodes``, for ``why``."""
        kept = set(nodes)
        self.rejected += [Rejection(node, why.message, why.kind) for node in self.open_nodes if node not in kept]
        self.open_nodes = [node for node in self.open_nodes if node in kept]


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, cycle: CycleState, attempt: ReserveAttempt) -> None:
        """Close nodes of ``attempt`` to the pod, or decide it (set ``attempt.decision``) when it is this
        plugin's to decide; called only while nothing decided it."""
        ...

    def unreserve(self, namespace: str, name: str) -> bool:
        """Release what this plugin holds for the pod; True when it held something (then no later plugin is
        asked)."""
        ...


@dataclass(frozen=True)
class NodeDraft:
    """The pod planned on one node Reserve tries: its row, the cell it is predicted to land in, and what the
    PlanNode plugins filled in so far (the cells and GPUs, then the claims' devices)."""

    row: int
    landing_cell: int  # a cell slot; -1 when the pod spans the node
    plan: NodePlan | None = None
    devices: DeviceChoice | None = None


@runtime_checkable
class PlanNodePlugin(Plugin, Protocol):
    def plan_node(self, cycle: CycleState, draft: NodeDraft) -> NodeDraft | Rejected:
        """``draft`` with this plugin's part of the plan filled in, or why the node cannot take the pod (Reserve
        then tries the next node, best first)."""
        ...


@runtime_checkable
class ReserveGroupPlugin(Plugin, Protocol):
    def reserve_group(
        self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None
    ) -> GangOutcome: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, namespace: str, name: str) -> PermitOutcome: ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(
        self,
        pods: Sequence[PendingPod],
        candidates: Sequence[str] | None,
        *,
        topology: tuple[DomainConstraint, ...] = (),
        spread: SpreadPolicy = SpreadPolicy.PACKED,
    ) -> PreemptOutcome:
        """Victims whose eviction lets ``pods`` (one pod, or a group's waiting members under ``topology`` and
        ``spread``) in, and the nodes held for them meanwhile; evicts nothing."""
        ...

    def check_eviction(
        self, pending: PendingPod, candidates: Sequence[EvictionCandidate]
    ) -> tuple[EvictionVerdict, ...]: ...


@runtime_checkable
class BackgroundPlugin(Plugin, Protocol):
    def tick(self, *, leading: bool) -> None:
        """Periodic work, about once a second; ``leading``: this replica leads and its cache is synced."""
        ...


@runtime_checkable
class PodObserver(Plugin, Protocol):
    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        """The feed's pod changes: ``usage`` when bound, ``gone`` when deleted or finished."""
        ...
