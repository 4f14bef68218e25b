"""The placement engine: one facade over the cluster index, the reservations and the gang coordinator.

The gRPC servicer, the demo and tests call this, never the index directly; it knows nothing of protobuf.
Requests arrive as ``PodSpec`` (validated here into the core's model), answers leave as frozen
dataclasses. Every decision refuses to run on a cache the feed does not call synced (``CacheNotSynced``):
a decision on a half-listed cluster would look valid and be wrong. The read-only views (``node_topology``,
``list_nodes``) answer anyway, since they are how a person sees what the cache holds while it syncs.

Read-only answers (filter, score, explain) take the index lock for their whole computation, like
``Reservations.decide``, so they never see a half-applied update. Filter and Score judge afresh only the
nodes changed since they were last judged for the same pod shape (``state.decision_cache``); Reserve,
gangs and Explain judge every candidate they are given. For a pod with a NUMA intent, Filter also confirms
each feasible node with Reserve's exact plan, so that it never passes a node Reserve would refuse.

Preemption (``preempt``) decides victims for a pod or a gang that fits nowhere and holds the nominated
nodes for it (``Nominations``): until the hold ends, Reserve and the gang coordinator keep every other pod
of priority <= the preemptor's off those nodes. The hold ends when the preemptor is reserved, placed,
bound or deleted (``observe_pod``, the feed's pod changes), or when it expires.

``check_eviction`` answers kube-scheduler's own preemption (the extender's preempt verb): whether a pod fits
each node once the victims kube-scheduler chose there are gone. It decides nothing and holds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from placement.core.decision import order_of
from placement.core.feasibility import FilterResult
from placement.core.pod_placement import Placement
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PendingPod, PodParseError, PodSpec, PodUsage, validate_pod
from placement.core.preemption_rules import EvictionCandidate, EvictionVerdict
from placement.core.vocabulary import Rejected, RejectionKind
from placement.service.errors import (
    CacheNotSynced,
    GangsUnavailable,
    InvalidRequest,
    NodeNotFound,
    NotLeader,
    PermissionDenied,
    PreemptionUnavailable,
)
from placement.service.framework.handle import Handle
from placement.service.framework.pipeline import NO_GANGS, NO_PREEMPTION, Pipeline
from placement.service.framework.profile import Profile
from placement.service.framework.registry import build
from placement.service.gang_port import CoordinatedGangs, GangPort
from placement.service.gang_preemptors import gang_preemptors
from placement.service.plugins import REGISTRY
from placement.service.reservation_owners import Owners
from placement.service.results import (
    Explanation,
    FilterOutcome,
    GangOutcome,
    GangSpec,
    PermitOutcome,
    PreemptOutcome,
    Rejection,
    Rejections,
    ReserveOutcome,
    ScoreOutcome,
    group_rejections,
    ordered,
)
from placement.service.views import NodeSummary, NodeView, node_summaries, node_view
from placement.state.candidate_lists import CandidateLists, Candidates
from placement.state.cluster_index import ClusterIndex
from placement.state.decision_cache import DecisionCache
from placement.state.dra_verdicts import choose_devices
from placement.state.driver_reservations import DriverReservations
from placement.state.gang_coordinator import GangCoordinator
from placement.state.nominations import Nominations
from placement.state.reservations import Decision, Reservations, plan_on_slot

_UNKNOWN_NODE = Rejected("node unknown to the placement service (no topology report)", RejectionKind.UNKNOWN_NODE)
MAX_NODE_NAMES = 100_000  # a request naming more candidates than any cluster has is a client bug
_KEPT_PODS = 256  # validated pods kept by their source (each a few kB)


class Leadership(Protocol):
    """Leader election as the engine consults it (``kubenexus.kube.leader.LeaderElector``)."""

    def is_leader(self) -> bool: ...

    def leader_identity(self) -> str: ...


def _always_synced() -> bool:
    return True


@dataclass
class PlacementEngine:
    """The facade; ``synced`` is the cluster feed's verdict (always True for a static index: demo, tests)."""

    index: ClusterIndex
    reservations: Reservations
    gangs: GangPort | None = None
    synced: Callable[[], bool] = _always_synced
    leadership: Leadership | None = None  # None: a single replica, always the leader
    clock: Callable[[], float] = time.monotonic  # the reservations' clock: turns their expiry into a TTL
    # Nodes held for preemptors; share it with the gang coordinator (``over`` does) so gangs respect it too.
    nominations: Nominations = field(default_factory=Nominations)
    # Room held for drivers' executors (Spark drivers, Ray heads); None: Reserve decides every pod alone.
    drivers: DriverReservations | None = None
    # Which plugins run (``framework.profile``): every one the service has, by default.
    profile: Profile = field(default_factory=Profile)
    _last_synced: float | None = field(default=None, init=False, repr=False)
    _owners: Owners = field(default_factory=Owners, init=False, repr=False)
    verdicts: DecisionCache = field(init=False, repr=False)
    candidate_lists: CandidateLists = field(init=False, repr=False)
    pipeline: Pipeline = field(init=False, repr=False)
    _created: float = field(default_factory=time.monotonic, init=False, repr=False)
    # Validated pods by what the request carried: a scheduler asks Filter, then Score, about one pod.
    _validated_pods: dict[str | bytes, PendingPod] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # Filter and Score answer from kept per-node verdicts where the node has not changed since.
        self.verdicts = DecisionCache(self.index)
        self.candidate_lists = CandidateLists(self.index)
        handle = Handle(
            index=self.index,
            reservations=self.reservations,
            verdicts=self.verdicts,
            nominations=self.nominations,
            gangs=self.gangs,
            drivers=self.drivers,
            clock=self.clock,
        )
        self.pipeline = Pipeline(handle, build(REGISTRY, handle, self.profile))

    @classmethod
    def over(
        cls, index: ClusterIndex, *, synced: Callable[[], bool] = _always_synced, profile: Profile | None = None
    ) -> PlacementEngine:
        """An engine with default reservations and gang coordinator over ``index`` (demo, tests, main)."""
        profile = profile or Profile()
        reservations = Reservations(index)
        nominations = Nominations()
        gangs = None
        if profile.runs("Gangs"):
            gangs = CoordinatedGangs(GangCoordinator(index, reservations, nominations=nominations))
        drivers = DriverReservations(index, reservations)
        return cls(
            index=index,
            reservations=reservations,
            gangs=gangs,
            synced=synced,
            nominations=nominations,
            drivers=drivers,
            profile=profile,
        )

    # --- decisions -----------------------------------------------------------------------------------

    def filter(self, spec: PodSpec, nodes: Sequence[str] = (), *, names_key: bytes | None = None) -> FilterOutcome:
        """``names_key`` (optional) determines ``nodes`` exactly (the request's serialized node-name field):
        a list seen before is not resolved name by name again (``CandidateLists``)."""
        pending = self._admit_request(spec)
        with self.index.lock:
            candidates = self._resolve(nodes, names_key)
            filtered = self.pipeline.filter(self.pipeline.cycle(pending), candidates.rows)
            feasible = tuple(candidates.names[filtered.feasible].tolist())
            rejected = ordered([*_unknown(candidates), *_rejections(candidates.names, filtered)])
        return FilterOutcome(feasible=feasible, rejected=rejected)

    def score(
        self, spec: PodSpec, nodes: Sequence[str] = (), *, names_key: bytes | None = None, breakdown: bool = True
    ) -> ScoreOutcome:
        """``names_key`` as for ``filter``; without ``breakdown`` the outcome carries no per-component points."""
        pending = self._admit_request(spec)
        with self.index.lock:
            candidates = self._resolve(nodes, names_key)
            cycle = self.pipeline.cycle(pending)
            # A scheduler scores the nodes its Filter call just passed: the cache holds their verdicts.
            filtered = self.pipeline.filter(cycle, candidates.rows)
            scores = self.pipeline.score(cycle, candidates.rows[filtered.feasible])
            order = order_of(scores)
            # Vectorised per component, one list each: the servicer encodes from these columns.
            weights = scores.shares if breakdown else {}
            points = {name: (share * scores.components[name][order]).tolist() for name, share in weights.items()}
            ordered_rows = scores.rows[order]
            landing = scores.landing_cell[order]
            cells = np.where(landing < 0, -1, self.index.arrays().cell_ids[ordered_rows, np.maximum(landing, 0)])
            names = tuple(self.index.names_of(ordered_rows))
            rejected = ordered([*_unknown(candidates), *_rejections(candidates.names, filtered)])
        return ScoreOutcome(
            nodes=names,
            totals=scores.total[order].tolist(),
            points=points,
            weights=dict(weights),
            landing_cells=cells.tolist(),
            rejected=rejected,
        )

    def reserve(self, spec: PodSpec, nodes: Sequence[str] = (), *, caller: str = "") -> ReserveOutcome:
        """``caller`` (the client's identity) owns the reservation: only it may release it (``unreserve``)."""
        pending = self._admit_request(spec)
        self._require_leader()
        with self.index.lock:
            candidates = self._resolve(nodes, None)
            decision, closed = self.pipeline.reserve(self.pipeline.cycle(pending), candidates.names.tolist())
            if decision.node is not None:
                self._owners.record(pending.key, caller)
        rejected = [_rejection(node, _UNKNOWN_NODE) for node in candidates.unknown] + closed
        rejected += [_rejection(node, why) for node, why in decision.rejections().items()]
        return ReserveOutcome(placement=self._placement(decision), rejected=group_rejections(rejected))

    def unreserve(self, namespace: str, name: str, *, caller: str = "", override: bool = False) -> bool:
        """Release a pod's reservation; only its owner may, unless ``override`` (an admin identity).

        A reservation whose owner is not known here (made before a restart, restored from the pod's
        annotations; or forgotten by ``Owners``) may be released by any caller the API lets write.
        """
        if not name:
            raise InvalidRequest("pod name is required")
        self._require_synced()
        self._require_leader()
        key = (namespace or "default", name)
        with self.index.lock:
            owner = self._owners.owner_of(key)
            if owner is not None and owner != caller and not override:
                raise PermissionDenied(f"the reservation of pod {key[0]}/{name} was made by another client")
            # A gang member's reservation goes with its whole group (all or nothing).
            released = self.pipeline.unreserve(*key)
            if released:
                self._owners.forget(key)
            return released

    def explain(self, spec: PodSpec, node: str) -> Explanation:
        pending = self._admit_request(spec)
        if not node:
            raise InvalidRequest("node is required")
        index = self.index
        with index.lock:
            slot = index.slot_of(node)
            if slot is None:
                raise NodeNotFound(node)
            only = np.array([slot], dtype=np.int64)
            cycle = self.pipeline.cycle(pending)
            filtered = self.pipeline.filter(cycle, only)
            exact = bool(len(filtered.exact_rows))
            refused = filtered.rejected(0)
            if refused is not None:
                return Explanation(node, pending, cycle.demand, None, _rejection(node, refused), exact)
            scores = self.pipeline.score(cycle, only)
            plan = plan_on_slot(index, slot, cycle.demand, pending.intent, int(scores.landing_cell[0]))
            devices = None if isinstance(plan, Rejected) else choose_devices(cycle.judge, plan)
        if isinstance(plan, Rejected):
            return Explanation(node, pending, cycle.demand, None, _rejection(node, plan), exact_model=True)
        if isinstance(devices, Rejected):
            return Explanation(node, pending, cycle.demand, None, _rejection(node, devices), exact)
        placement = Placement(
            namespace=pending.namespace,
            name=pending.name,
            node=node,
            cells=plan.cells,
            gpus=plan.gpus,
            pinned=plan.pinned,
            row=plan.row,
            score=float(scores.total[0]),
            breakdown=scores.breakdown(0),
            devices=devices,
            notes=index.node_notes(node),
        )
        return Explanation(node, pending, cycle.demand, placement, None, exact)

    # --- gangs ---------------------------------------------------------------------------------------

    def place_gang(self, group: GangSpec, nodes: Sequence[str] = (), *, caller: str = "") -> GangOutcome:
        """``caller`` owns the members' reservations, whenever the group is reserved (``unreserve``)."""
        self._require_gangs()
        if not group.name:
            raise InvalidRequest("pod group name is required")
        if not group.members:
            raise InvalidRequest(f"pod group {group.namespace or 'default'}/{group.name} has no members")
        if group.min_member < 0 or group.min_member > len(group.members):
            raise InvalidRequest(
                f"pod group {group.namespace or 'default'}/{group.name}: min_member {group.min_member} "
                f"must be between 0 and the {len(group.members)} members sent"
            )
        members = [self._with_priority(self._validated(member)) for member in group.members]
        self._require_synced()
        self._require_leader()
        # No candidates named: every node, now and later (the group keeps them for its retries).
        outcome = self.pipeline.reserve_group(group, members, self._candidates(nodes) if nodes else None)
        with self.index.lock:
            for member in members:  # registered: a refused request raised above and recorded nothing
                self._owners.record(member.key, caller)
        return outcome

    # --- preemption ----------------------------------------------------------------------------------

    def preempt(self, preemptor: PodSpec | GangSpec, nodes: Sequence[str] = (), *, caller: str = "") -> PreemptOutcome:
        """Victims whose eviction lets ``preemptor`` (a pod, or a gang's waiting members) in, with the exact
        plan checked without them; the nominated nodes are held for it. Decides only: evicts nothing.

        ``caller`` is the client asking (the binder); the hold is the preemptor's, whoever asked.
        """
        self._require_preemption()
        if isinstance(preemptor, GangSpec):
            pods, topology, spread = gang_preemptors(preemptor, self._validated, self.pipeline.handle.levels)
        else:
            pods, topology, spread = [self._validated(preemptor)], (), SpreadPolicy.PACKED
        self._require_synced()
        self._require_leader()
        pods = [self._with_priority(pod) for pod in pods]
        candidates = self._candidates(nodes) if nodes else None
        return self.pipeline.post_filter(pods, candidates, topology=topology, spread=spread)

    def check_eviction(self, spec: PodSpec, candidates: Sequence[EvictionCandidate]) -> tuple[EvictionVerdict, ...]:
        """Whether the pod fits each candidate node once that candidate's victims are gone
        (``state.eviction_check``): kube-scheduler's extender preemption verb asks it. Read-only, so any
        replica answers, like Filter; reserves, holds and evicts nothing."""
        self._require_preemption()
        if len(candidates) > MAX_NODE_NAMES:
            raise InvalidRequest(f"{len(candidates)} eviction candidates, more than the {MAX_NODE_NAMES} accepted")
        for candidate in candidates:
            if not candidate.node:
                raise InvalidRequest("every eviction candidate needs a node name")
            if any(not name for _, name in candidate.victims) or "" in candidate.victim_uids:
                raise InvalidRequest(f"a victim on node {candidate.node} has no name and no uid; give one of them")
        return self.pipeline.check_eviction(self._admit_request(spec), candidates)

    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        """The feed's pod changes (``ClusterFeed(on_pod=...)``): a preemptor bound, finished or deleted
        needs no node held for it any more; then the plugins' view of the pod (the gang coordinator's)."""
        self.pipeline.observe_pod(key, usage, gone)

    def observe_nomination(self, key: tuple[str, str], node: str, priority: int) -> None:
        """The feed's pending pods nominated to a node (``ClusterFeed(on_nominated=...)``): held here too,
        whichever replica decided the preemption (``Nominations.restore``)."""
        self.nominations.restore(key, node, priority)

    def permit_status(self, namespace: str, name: str) -> PermitOutcome:
        self._require_gangs()
        if not name:
            raise InvalidRequest("pod name is required")
        self._require_synced()
        return self.pipeline.permit(namespace or "default", name)

    def cache_age_s(self) -> float:
        """Seconds since the cache was last seen in sync with the API: 0 while it is, growing while not.

        Counted from the engine's creation when it never was; ``is_synced`` records each sighting.
        """
        if self.is_synced():
            return 0.0
        return time.monotonic() - (self._last_synced if self._last_synced is not None else self._created)

    def is_synced(self) -> bool:
        synced = self.synced()
        if synced:
            self._last_synced = time.monotonic()
        return synced

    def tick(self) -> None:
        """Periodic work, about once a second: drop expired nominations, expire gang permits and place
        waiting gangs in queue order.

        Only the leader, and only from a synced cache: a follower's or a stale cache's plan could double-book.
        """
        leading = self.is_synced() and (self.leadership is None or self.leadership.is_leader())
        self.pipeline.tick(leading=leading)

    def gangs_waiting(self) -> int:
        return 0 if self.gangs is None else self.gangs.waiting()

    # --- views ---------------------------------------------------------------------------------------

    def node_topology(self, name: str) -> NodeView:
        if not name:
            raise InvalidRequest("node is required")
        return node_view(self.index, name)

    def list_nodes(self) -> list[NodeSummary]:
        return node_summaries(self.index)

    # --- helpers -------------------------------------------------------------------------------------

    def _admit_request(self, spec: PodSpec) -> PendingPod:
        """Validate first: a bad request is the caller's to fix whatever state the cache is in."""
        pending = self._validated(spec)
        self._require_synced()
        return self._with_priority(pending)

    def _validated(self, spec: PodSpec) -> PendingPod:
        """``validate_pod``, kept for the last ``_KEPT_PODS`` pods by their source (an invalid pod is not kept:
        it is refused afresh each time)."""
        kept = self._validated_pods.get(spec.source) if spec.source else None
        if kept is not None:
            return kept
        try:
            pending = validate_pod(spec)
        except PodParseError as error:
            raise InvalidRequest(str(error)) from None
        if spec.source:
            if len(self._validated_pods) >= _KEPT_PODS:
                self._validated_pods.clear()
            self._validated_pods[spec.source] = pending
        return pending

    def _with_priority(self, pending: PendingPod) -> PendingPod:
        """The pod with its priority resolved as the API server's Priority admission resolves it: a pod
        that carries ``spec.priority`` keeps it; otherwise its ``priorityClassName``'s value, or the global
        default class's (0 without one). A class the cluster does not have is refused, as admission does."""
        constraints = pending.constraints
        if constraints.priority is not None:
            return pending
        value = self.index.facts.priority(constraints.priority_class_name)
        if value is None:
            raise InvalidRequest(
                f"pod {pending.namespace}/{pending.name}: no PriorityClass with name "
                f"{constraints.priority_class_name} was found"
            )
        return pending if value == pending.priority else replace(pending, priority=value)

    def _require_preemption(self) -> None:
        """Refuses a preemption call up front, before its request is validated, where the profile has none."""
        if not self.pipeline.offers_preemption:
            raise PreemptionUnavailable(NO_PREEMPTION)

    def _require_synced(self) -> None:
        if not self.is_synced():
            raise CacheNotSynced("the placement service's cluster cache is not synced; retry shortly")

    def _require_leader(self) -> None:
        """Only the leader reserves: two replicas reserving from their own caches would double-book."""
        if self.leadership is not None and not self.leadership.is_leader():
            raise NotLeader(self.leadership.leader_identity())

    def _require_gangs(self) -> None:
        """Refuses a gang call up front, before its request is validated, where no plugin places groups."""
        if not self.pipeline.offers_groups:
            raise GangsUnavailable(NO_GANGS)

    def _candidates(self, nodes: Sequence[str]) -> list[str]:
        """``nodes`` without duplicates, in order; every node when empty."""
        if len(nodes) > MAX_NODE_NAMES:
            raise InvalidRequest(f"{len(nodes)} node names, more than the {MAX_NODE_NAMES} accepted")
        if not nodes:
            return sorted(self.index.node_names())
        names = list(nodes)
        unique = set(names)  # hashes each name once; the slot lookup that follows reuses the hashes
        if "" in unique:
            raise InvalidRequest("node names must not be empty")
        return names if len(unique) == len(names) else list(dict.fromkeys(names))

    def _resolve(self, nodes: Sequence[str], names_key: bytes | None) -> Candidates:
        """The candidates (call under the index lock): kept by ``names_key``, else resolved name by name."""
        return self.candidate_lists.resolve(names_key, lambda: self._candidates(nodes))

    def _placement(self, decision: Decision) -> Placement | None:
        """The decision's placement as the API answers it: how long it holds, what the service knew less of."""
        placement = decision.placement
        if placement is None:
            return None
        expires_at = decision.expires_at
        return replace(
            placement,
            ttl_s=0.0 if expires_at is None else max(0.0, expires_at - self.clock()),
            notes=self.index.node_notes(placement.node),
        )


def _unknown(candidates: Candidates) -> list[Rejections]:
    return [Rejections(*_UNKNOWN_NODE, candidates.unknown)] if candidates.unknown else []


def _rejections(known: npt.NDArray[np.object_], filtered: FilterResult) -> list[Rejections]:
    """The infeasible candidates (``known``: their names, aligned with ``filtered``), grouped by reason."""
    rejected = np.flatnonzero(~filtered.feasible)
    if not len(rejected):
        return []
    codes = filtered.reason_codes[rejected]
    names = known[rejected]
    return [
        Rejections(filtered.messages[code - 1], filtered.kinds[code - 1], tuple(names[codes == code].tolist()))
        for code in np.unique(codes).tolist()
    ]


def _rejection(node: str, why: Rejected) -> Rejection:
    return Rejection(node, why.message, why.kind)
