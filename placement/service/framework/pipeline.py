"""The pipeline: one entry per extension point, calling the profile's plugins of that point in registry order.

The engine (``placement.service.engine``) is the API's facade: it validates requests, checks that the cache is
synced and this replica leads, and resolves candidates; then it calls here, under the index lock. Every shim
reaches these entries the same way: the Go plugin, the extender and the binder all call the gRPC API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.core.decision import NodePlan, Ranking, order_of
from placement.core.feasibility import FilterResult
from placement.core.pod_placement import DeviceChoice
from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod, PodUsage
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.core.scoring import Scores
from placement.core.vocabulary import IntArray, Rejected, RejectionKind
from placement.service.errors import GangsUnavailable, PreemptionUnavailable
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import (
    BackgroundPlugin,
    FilterPlugin,
    NodeDraft,
    PermitPlugin,
    PlanNodePlugin,
    Plugin,
    PodObserver,
    PostFilterPlugin,
    ReserveAttempt,
    ReserveGroupPlugin,
    ReservePlugin,
    ScorePlugin,
)
from placement.service.framework.handle import Handle
from placement.service.framework.verdict_edits import passing, unscored
from placement.service.results import GangOutcome, GangSpec, PermitOutcome, PreemptOutcome, Rejection
from placement.state.reservations import Decision

# A node held for a preemptor while its victims leave: the kind of a node kept free for someone else.
NOMINATED = Rejected(
    "held for a preempting pod of equal or higher priority while its victims leave", RejectionKind.HELD_FOR_GANG
)
NO_GANGS = "gang scheduling is not configured in this placement service"
NO_PREEMPTION = "preemption is left out of this placement service's profile (plugin Preemption)"


@dataclass
class Pipeline:
    handle: Handle
    plugins: tuple[Plugin, ...]  # the profile's, in registry order
    _filters: tuple[FilterPlugin, ...] = field(init=False, repr=False)
    _scorers: tuple[ScorePlugin, ...] = field(init=False, repr=False)
    _reservers: tuple[ReservePlugin, ...] = field(init=False, repr=False)
    _planners: tuple[PlanNodePlugin, ...] = field(init=False, repr=False)
    _background: tuple[BackgroundPlugin, ...] = field(init=False, repr=False)
    _observers: tuple[PodObserver, ...] = field(init=False, repr=False)
    # The points one plugin answers whole (None: no plugin of the profile does).
    _group: ReserveGroupPlugin | None = field(init=False, repr=False)
    _permit: PermitPlugin | None = field(init=False, repr=False)
    _post_filter: PostFilterPlugin | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Sorted once: a runtime protocol check costs microseconds, and the pod watch calls here per event.
        self._filters = tuple(p for p in self.plugins if isinstance(p, FilterPlugin))
        self._scorers = tuple(p for p in self.plugins if isinstance(p, ScorePlugin))
        self._reservers = tuple(p for p in self.plugins if isinstance(p, ReservePlugin))
        self._planners = tuple(p for p in self.plugins if isinstance(p, PlanNodePlugin))
        self._background = tuple(p for p in self.plugins if isinstance(p, BackgroundPlugin))
        self._observers = tuple(p for p in self.plugins if isinstance(p, PodObserver))
        self._group = next((p for p in self.plugins if isinstance(p, ReserveGroupPlugin)), None)
        self._permit = next((p for p in self.plugins if isinstance(p, PermitPlugin)), None)
        self._post_filter = next((p for p in self.plugins if isinstance(p, PostFilterPlugin)), None)

    def points(self) -> dict[str, tuple[str, ...]]:
        """Each point's plugins by name, in the order they run (what ``serve`` logs at start)."""
        whole = {"reserve_group": self._group, "permit": self._permit, "post_filter": self._post_filter}
        return {
            "filter": tuple(p.name for p in self._filters),
            "score": tuple(p.name for p in self._scorers),
            "reserve": tuple(p.name for p in self._reservers),
            "plan_node": tuple(p.name for p in self._planners),
            **{point: () if plugin is None else (plugin.name,) for point, plugin in whole.items()},
            "background": tuple(p.name for p in self._background),
            "observe_pod": tuple(p.name for p in self._observers),
        }

    @property
    def offers_groups(self) -> bool:
        """Whether a plugin of the profile places pod groups (PlaceGang, Permit)."""
        return self._group is not None

    @property
    def offers_preemption(self) -> bool:
        """Whether a plugin of the profile chooses victims (Preempt, CheckEviction)."""
        return self._post_filter is not None

    def cycle(self, pending: PendingPod) -> CycleState:
        return CycleState(pending, self.handle.index)

    # --- Filter and Score: every candidate at once ---------------------------------------------------

    def filter(self, cycle: CycleState, rows: IntArray) -> FilterResult:
        verdict = passing(rows)
        for plugin in self._filters:
            verdict = plugin.filter(cycle, verdict)
        return verdict

    def score(self, cycle: CycleState, rows: IntArray) -> Scores:
        scores = unscored(rows)
        for plugin in self._scorers:
            scores = plugin.score(cycle, scores)
        return scores

    # --- Reserve and Unreserve -----------------------------------------------------------------------

    def rank(self, cycle: CycleState, rows: IntArray) -> Ranking:
        """The rows filtered, the feasible ones scored, best first: Filter and Score in one call."""
        verdict = self.filter(cycle, rows)
        scores = self.score(cycle, rows[verdict.feasible])
        return Ranking(filtered=verdict, scores=scores, order=order_of(scores))

    def plan_node(
        self, cycle: CycleState, row: int, landing_cell: int
    ) -> tuple[NodePlan, DeviceChoice | None] | Rejected:
        """The pod planned on one node by the PlanNode plugins in order, or the first refusal."""
        draft = NodeDraft(row, landing_cell)
        for plugin in self._planners:
            outcome = plugin.plan_node(cycle, draft)
            if isinstance(outcome, Rejected):
                return outcome
            draft = outcome
        if draft.plan is None:
            raise ValueError("no PlanNode plugin planned the node: the registry must list GpuTopology")
        return draft.plan, draft.devices

    def reserve(self, cycle: CycleState, nodes: list[str]) -> tuple[Decision, list[Rejection]]:
        """Decide and hold the pod on one of ``nodes``: the decision, and why the nodes closed before it was
        made were closed. Nodes nominated for a preemptor of priority >= this pod's wait for it first
        (kube-scheduler's nominated pods, the framework's own); then the plugins close nodes or decide; a pod
        no plugin decided is ranked through the Filter and Score plugins and planned, node by node best first,
        by the PlanNode plugins, and the assume cache holds it. A pod decided onto a node no longer needs one
        held for it."""
        pending = cycle.pending
        attempt = ReserveAttempt(open_nodes=nodes)
        attempt.keep_open(self.handle.nominations.open_to(pending.key, pending.priority, nodes), NOMINATED)
        for plugin in self._reservers:
            plugin.reserve(cycle, attempt)
            if attempt.decision is not None:
                break
        decision = attempt.decision
        if decision is None:
            cycle.reserving = True
            decision = self.handle.reservations.decide(
                pending,
                attempt.open_nodes,
                ranker=lambda rows: self.rank(cycle, rows),
                planner=lambda row, landing_cell: self.plan_node(cycle, row, landing_cell),
            )
        if decision.node is not None:
            self.handle.nominations.release(pending.key)
        return decision, attempt.rejected

    def unreserve(self, namespace: str, name: str) -> bool:
        """Release the pod's hold: the first plugin holding something for it releases it (a gang member's goes
        with its whole group), else the assume cache's reservation."""
        for plugin in self._reservers:
            if plugin.unreserve(namespace, name):
                return True
        return self.handle.reservations.unreserve(namespace, name)

    # --- groups, Permit, PostFilter ------------------------------------------------------------------

    def reserve_group(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        if self._group is None:
            raise GangsUnavailable(NO_GANGS)
        outcome = self._group.reserve_group(group, members, nodes)
        for placement in outcome.placements:
            self.handle.nominations.release((placement.namespace, placement.name))
        return outcome

    def permit(self, namespace: str, name: str) -> PermitOutcome:
        if self._permit is None:
            raise GangsUnavailable(NO_GANGS)
        return self._permit.permit(namespace, name)

    def post_filter(
        self,
        pods: Sequence[PendingPod],
        candidates: Sequence[str] | None,
        *,
        topology: tuple[DomainConstraint, ...] = (),
        spread: SpreadPolicy = SpreadPolicy.PACKED,
    ) -> PreemptOutcome:
        if self._post_filter is None:
            raise PreemptionUnavailable(NO_PREEMPTION)
        return self._post_filter.post_filter(pods, candidates, topology=topology, spread=spread)

    def check_eviction(
        self, pending: PendingPod, candidates: Sequence[EvictionCandidate]
    ) -> tuple[EvictionVerdict, ...]:
        if self._post_filter is None:
            raise PreemptionUnavailable(NO_PREEMPTION)
        return self._post_filter.check_eviction(pending, candidates)

    # --- the cluster's changes and the clock ---------------------------------------------------------

    def tick(self, *, leading: bool) -> None:
        self.handle.nominations.expire()
        for plugin in self._background:
            plugin.tick(leading=leading)

    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        """A preemptor bound, finished or deleted needs no node held for it any more; then the plugins'."""
        if usage is not None or gone:
            self.handle.nominations.release(key)
        for plugin in self._observers:
            plugin.observe_pod(key, usage, gone)
