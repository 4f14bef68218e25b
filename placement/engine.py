"""The placement engine: one facade over the cluster index, the reservations and the gang coordinator.

The gRPC servicer, the demo and tests call this, never the index directly; it knows nothing of protobuf.
Requests arrive as ``PodSpec`` (validated here into the core's model), answers leave as frozen
dataclasses. Every decision refuses to run on a cache the feed does not call synced (``CacheNotSynced``):
a decision on a half-listed cluster would look valid and be wrong. The read-only views (``node_topology``,
``list_nodes``) answer anyway, since they are how a person sees what the cache holds while it syncs.

Read-only answers (filter, score, explain) take the index lock for their whole computation, like
``Reservations.decide``, so they never see a half-applied update. Filter and Score judge afresh only the
nodes changed since they were last judged for the same pod shape (``state.decision_cache``); Reserve,
gangs and Explain judge every candidate they are given.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, NamedTuple, Protocol

import numpy as np

from placement.core.decision import GPU_RESOURCE, order_of, plan_on_node, rank
from placement.core.feasibility import (
    CPU,
    MEMORY,
    POLICY_CODES,
    FilterResult,
    FloatArray,
    IntArray,
    PodDemand,
    demand_of,
)
from placement.core.gpu_sets import rank_label
from placement.core.intent import PodIntent
from placement.core.podgroup import MIN_AVAILABLE_KEY, NAME_KEY, SCHEDULER_PLUGINS_KEY, PodGroupSpec
from placement.core.scoring import combine
from placement.errors import CacheNotSynced, GangsUnavailable, InvalidRequest, NodeNotFound, NotLeader
from placement.pod_spec import PendingPod, PodSpec, validate_pod
from placement.state.cluster_index import ClusterIndex
from placement.state.decision_cache import DecisionCache
from placement.state.gangs import GangCoordinator, GangPhase, GangPlacement, MemberPod, PermitVerdict
from placement.state.pods import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, PodParseError, format_ids, pod_usage
from placement.state.reservations import Decision, PodRequest, Reservations

_NO_INTENT = PodIntent()
_UNKNOWN_NODE = "node unknown to the placement service (no topology report)"
MAX_NODE_NAMES = 100_000  # a request naming more candidates than any cluster has is a client bug
_POLICY_NAMES = {int(code): name for name, code in POLICY_CODES.items()}
_MILLI = 1000.0


class RejectionKind(enum.StrEnum):
    UNKNOWN_NODE = "unknown-node"
    NO_TOPOLOGY = "no-topology"
    INSUFFICIENT_RESOURCES = "insufficient-resources"
    KUBELET_TOPOLOGY = "kubelet-topology"
    INTENT = "intent"
    ISOLATION = "isolation"


def rejection_kind(reason: str) -> RejectionKind:
    """The kind of a core reason message (a bounded set, for callers and metric labels)."""
    if reason.startswith("node has no published topology"):
        return RejectionKind.NO_TOPOLOGY
    if reason.startswith(("insufficient ", "no node offers", "not enough CPUs", "memory manager:", "no GPU has")):
        return RejectionKind.INSUFFICIENT_RESOURCES
    if reason.startswith("NUMA cells") and "isolated" in reason:
        return RejectionKind.ISOLATION
    if reason.startswith(("intent ", "NUMA affinity", "the kubelet would use NUMA cells")):
        return RejectionKind.INTENT
    return RejectionKind.KUBELET_TOPOLOGY


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


def each_rejection(groups: Sequence[Rejections]) -> list[Rejection]:
    """One ``Rejection`` per node, group by group (for callers that want rows)."""
    return [Rejection(node, group.reason, group.kind) for group in groups for node in group.nodes]


def group_rejections(rejections: Sequence[Rejection]) -> tuple[Rejections, ...]:
    """Rows grouped by reason: the most common reason first, nodes in their given order."""
    grouped: dict[str, list[str]] = {}
    kinds: dict[str, RejectionKind] = {}
    for node, reason, kind in rejections:
        grouped.setdefault(reason, []).append(node)
        kinds[reason] = kind
    return _ordered(Rejections(reason, kinds[reason], tuple(nodes)) for reason, nodes in grouped.items())


def _ordered(groups: Iterable[Rejections]) -> tuple[Rejections, ...]:
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
    servicer encodes straight from the columns."""

    nodes: tuple[str, ...]  # best first
    totals: Sequence[float]  # 0..100, per node
    points: Mapping[str, Sequence[float]]  # component -> points per node; they add up to the totals
    weights: Mapping[str, float]  # component -> its share of the 100 points
    landing_cells: Sequence[int]  # the NUMA id the pod is predicted to land in; -1 when it spans the node
    rejected: tuple[Rejections, ...]

    @property
    def scores(self) -> tuple[NodeScore, ...]:
        """One ``NodeScore`` per node, best first (for callers that want rows; the servicer reads columns)."""
        components = tuple(self.points)
        return tuple(
            NodeScore(node, total, dict(zip(components, parts, strict=True)), () if cell < 0 else (cell,))
            for node, total, cell, parts in zip(
                self.nodes, self.totals, self.landing_cells, zip(*self.points.values(), strict=True), strict=True
            )
        )


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

    @property
    def annotations(self) -> dict[str, str]:
        """What ``placement.state.pods`` reads back after a restart or on another replica."""
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
    PLACED = "placed"
    WAITING = "waiting"
    INFEASIBLE = "infeasible"


class PermitState(enum.StrEnum):
    ALLOW = "allow"
    WAIT = "wait"
    REJECT = "reject"


@dataclass(frozen=True)
class GangSpec:
    namespace: str
    name: str
    min_member: int  # 0: every member
    members: tuple[PodSpec, ...]


@dataclass(frozen=True)
class GangOutcome:
    state: GangState
    reason: str
    placements: tuple[Placement, ...]  # every member's when placed, else ()
    placed: int
    min_member: int


@dataclass(frozen=True)
class PermitOutcome:
    state: PermitState
    reason: str
    group: str  # "namespace/name"; "" for a pod outside any group
    ready: int
    min_member: int


class GangPort(Protocol):
    """What the engine needs from gang scheduling; ``placement.state.gangs`` provides it."""

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome: ...

    def permit(self, namespace: str, name: str) -> PermitOutcome: ...

    def unreserve(self, namespace: str, name: str) -> bool: ...

    def waiting(self) -> int: ...

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]: ...

    def tick(self) -> None: ...


class CoordinatedGangs:
    """``GangPort`` over ``placement.state.gangs.GangCoordinator``: a PlaceGang request's group becomes the
    members' group labels (when they name none), so the coordinator sees exactly what a labelled pod shows."""

    def __init__(self, coordinator: GangCoordinator, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.coordinator = coordinator
        self._clock = clock  # the coordinator's: turns its permit deadline into a TTL

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        namespace = group.namespace or "default"
        minimum = group.min_member or len(members)
        for member in members:
            if member.namespace != namespace:
                where = f"pod {member.namespace}/{member.name}"
                raise InvalidRequest(f"{where} is not in the namespace of pod group {namespace}/{group.name}")
            labels = dict(member.labels)
            pod_group = None
            if SCHEDULER_PLUGINS_KEY in labels:
                pod_group = PodGroupSpec(min_member=minimum)
            elif NAME_KEY not in labels:
                labels |= {NAME_KEY: group.name, MIN_AVAILABLE_KEY: str(minimum)}
            pod = MemberPod(member.namespace, member.name, member.pod, labels, member.annotations)
            status = self.coordinator.add_member(pod, pod_group=pod_group)
            if status is not None and status.phase is GangPhase.INVALID:
                raise InvalidRequest(status.message)
            if status is not None and status.group != f"{namespace}/{group.name}":
                raise InvalidRequest(f"pod {member.namespace}/{member.name} belongs to pod group {status.group}")
        result = self.coordinator.place(namespace, group.name, nodes)
        status = result.status if isinstance(result, GangPlacement) else result
        if status.phase is GangPhase.INVALID:
            raise InvalidRequest(status.message)
        placements: tuple[Placement, ...] = ()
        if isinstance(result, GangPlacement):
            ttl = max(0.0, result.deadline - self._clock())
            placements = tuple(
                Placement(m.namespace, m.name, m.node, m.cells, m.gpus, m.pinned, 0.0, {}, ttl) for m in result.members
            )
        state = {
            GangPhase.RESERVED: GangState.PLACED,
            GangPhase.BOUND: GangState.PLACED,
            GangPhase.UNSCHEDULABLE: GangState.INFEASIBLE,
        }.get(status.phase, GangState.WAITING)
        return GangOutcome(state, status.message, placements, status.placed, status.min_available or minimum)

    def permit(self, namespace: str, name: str) -> PermitOutcome:
        verdict = self.coordinator.permit_status(namespace, name)
        state = {
            PermitVerdict.ALLOW: PermitState.ALLOW,
            PermitVerdict.WAIT: PermitState.WAIT,
            PermitVerdict.REJECT: PermitState.REJECT,
        }[verdict.verdict]
        return PermitOutcome(state, verdict.reason, verdict.group, verdict.ready, verdict.min_available)

    def unreserve(self, namespace: str, name: str) -> bool:
        return self.coordinator.unreserve(namespace, name)

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]:
        """The nodes a single pod may use: all but those held for a starving head gang."""
        return self.coordinator.nodes_open_to_backfill(nodes)

    def tick(self) -> None:
        self.coordinator.tick()

    def observe_pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """The feed's pod events (``ClusterFeed(on_pod=...)``): members bound, deleted or finished."""
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name", ""))
        try:
            usage = pod_usage(pod)
        except PodParseError:
            return  # the feed has logged it; the index does not hold the pod either
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.coordinator.observe_deleted(namespace, name)
        elif usage is not None:
            self.coordinator.observe_bound(usage)

    def waiting(self) -> int:
        waiting = (GangPhase.WAITING_FOR_MEMBERS, GangPhase.WAITING_FOR_CAPACITY)
        return sum(1 for status in self.coordinator.statuses() if status.phase in waiting)


class Leadership(Protocol):
    """Leader election as the engine consults it (``placement.leader.LeaderElector``)."""

    def is_leader(self) -> bool: ...

    def leader_identity(self) -> str: ...


# --- node views --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    name: str
    total: float  # cpu in CPUs, memory and hugepages in bytes, devices in counts
    free: float


@dataclass(frozen=True)
class CellView:
    id: int
    resources: tuple[Amount, ...]
    local_read_bandwidth_mbps: float
    local_distance: float  # SLIT distance to itself; 0 where unknown
    claimed: bool
    isolated: bool


@dataclass(frozen=True)
class GpuView:
    index: int
    numa_cell: int | None
    healthy: bool
    busy: bool


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    cells: tuple[int, ...]
    gpus: tuple[int, ...]
    bound: bool
    accounted: bool


@dataclass(frozen=True)
class NodeView:
    name: str
    topology_manager_policy: str
    topology_manager_scope: str
    cpu_manager_static: bool
    memory_manager_static: bool
    cells: tuple[CellView, ...]
    node_resources: tuple[Amount, ...]
    gpus: tuple[GpuView, ...]
    gpu_links: tuple[tuple[int, int, str], ...]  # (a, b, nvidia-smi class such as NV18 or SYS)
    pods: tuple[PodView, ...]


@dataclass(frozen=True)
class NodeSummary:
    name: str
    numa_cells: int
    topology_manager_policy: str
    gpus: int
    free_gpus: int
    allocatable_cpus: float
    free_cpus: float
    allocatable_memory: float
    free_memory: float
    pods: int


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
    _last_synced: float | None = field(default=None, init=False, repr=False)
    verdicts: DecisionCache = field(init=False, repr=False)
    _created: float = field(default_factory=time.monotonic, init=False, repr=False)

    def __post_init__(self) -> None:
        # Filter and Score answer from kept per-node verdicts where the node has not changed since.
        self.verdicts = DecisionCache(self.index)

    @classmethod
    def over(cls, index: ClusterIndex, *, synced: Callable[[], bool] = _always_synced) -> PlacementEngine:
        """An engine with default reservations and gang coordinator over ``index`` (demo, tests, main)."""
        reservations = Reservations(index)
        gangs = CoordinatedGangs(GangCoordinator(index, reservations))
        return cls(index=index, reservations=reservations, gangs=gangs, synced=synced)

    # --- decisions -----------------------------------------------------------------------------------

    def filter(self, spec: PodSpec, nodes: Sequence[str] = ()) -> FilterOutcome:
        pending = self._admit_request(spec)
        names = self._candidates(nodes)
        demand, intent = demand_of(pending.pod), _intent(pending)
        with self.index.lock:
            known, rows, unknown = self._split_known(names)
            # Filter needs no scores: the scoring pass is the Score call's work.
            filtered = self.verdicts.filter(rows, demand, intent)
            feasible = tuple(compress(known, filtered.feasible.tolist()))
        return FilterOutcome(feasible=feasible, rejected=_ordered([*unknown, *_rejections(known, filtered)]))

    def score(self, spec: PodSpec, nodes: Sequence[str] = ()) -> ScoreOutcome:
        pending = self._admit_request(spec)
        names = self._candidates(nodes)
        demand, intent = demand_of(pending.pod), _intent(pending)
        with self.index.lock:
            known, rows, unknown = self._split_known(names)
            arrays = self.index.arrays()
            # A scheduler scores the nodes its Filter call just passed: the cache holds their verdicts.
            filtered = self.verdicts.filter(rows, demand, intent)
            feasible = rows[filtered.feasible]
            scores = combine(arrays, feasible, self.verdicts.components(feasible, demand, intent))
            order = order_of(scores)
            # Vectorised per component, one list each: the servicer encodes from these columns.
            weights = scores.weights.shares
            points = {name: (share * scores.components[name][order]).tolist() for name, share in weights.items()}
            ordered_rows = scores.rows[order]
            landing = scores.landing_cell[order]
            cells = np.where(landing < 0, -1, arrays.cell_ids[ordered_rows, np.maximum(landing, 0)])
            nodes = tuple(self.index.names_of(ordered_rows))
        return ScoreOutcome(
            nodes=nodes,
            totals=scores.total[order].tolist(),
            points=points,
            weights=dict(weights),
            landing_cells=cells.tolist(),
            rejected=_ordered([*unknown, *_rejections(known, filtered)]),
        )

    def reserve(self, spec: PodSpec, nodes: Sequence[str] = ()) -> ReserveOutcome:
        pending = self._admit_request(spec)
        self._require_leader()
        names = self._candidates(nodes)
        with self.index.lock:
            known, _, unknown = self._split_known(names)
            rejected = each_rejection(unknown)
            if self.gangs is not None:
                # Backfill: single pods may not take nodes held for a gang that has waited too long.
                open_nodes = set(self.gangs.open_to_backfill(known))
                rejected += [
                    _rejection(node, "held for a waiting pod group (starvation prevention)")
                    for node in known
                    if node not in open_nodes
                ]
                known = [node for node in known if node in open_nodes]
            decision = self.reservations.decide(_request(pending), known)
        rejected += [_rejection(node, reason) for node, reason in decision.reasons().items()]
        return ReserveOutcome(placement=self._placement(decision), rejected=group_rejections(rejected))

    def unreserve(self, namespace: str, name: str) -> bool:
        if not name:
            raise InvalidRequest("pod name is required")
        self._require_synced()
        self._require_leader()
        namespace = namespace or "default"
        # A gang member's reservation goes with its whole group (all or nothing).
        if self.gangs is not None and self.gangs.unreserve(namespace, name):
            return True
        return self.reservations.unreserve(namespace, name)

    def explain(self, spec: PodSpec, node: str) -> Explanation:
        pending = self._admit_request(spec)
        if not node:
            raise InvalidRequest("node is required")
        demand = demand_of(pending.pod)
        index = self.index
        with index.lock:
            slot = index.slot_of(node)
            if slot is None:
                raise NodeNotFound(node)
            arrays = index.arrays()
            ranking = rank(arrays, np.array([slot], dtype=np.int64), demand, intent=_intent(pending))
            exact = bool(len(ranking.filtered.exact_rows))
            if not ranking.filtered.feasible[0]:
                rejection = _rejection(node, ranking.filtered.reason(0))
                return Explanation(node, pending, demand, None, rejection, exact)
            scores = ranking.scores
            shape = index.gpu_shape(slot)
            plan = plan_on_node(
                arrays,
                slot,
                demand,
                intent=pending.intent,
                landing_cell=int(scores.landing_cell[0]),
                gpu_table=None if shape is None else shape.table,
                free_gpus=frozenset() if shape is None else shape.healthy - index.busy_gpus(slot),
                gpu_share_left=None if shape is None else index.gpu_share_left(slot),
            )
        if isinstance(plan, str):
            return Explanation(node, pending, demand, None, _rejection(node, plan), exact_model=True)
        placement = Placement(
            namespace=pending.namespace,
            name=pending.name,
            node=node,
            cells=plan.cells,
            gpus=plan.gpus,
            pinned=plan.pinned,
            score=float(scores.total[0]),
            breakdown=scores.breakdown(0),
            ttl_s=0.0,
        )
        return Explanation(node, pending, demand, placement, None, exact)

    # --- gangs ---------------------------------------------------------------------------------------

    def place_gang(self, group: GangSpec, nodes: Sequence[str] = ()) -> GangOutcome:
        gangs = self._gangs()
        if not group.name:
            raise InvalidRequest("pod group name is required")
        if not group.members:
            raise InvalidRequest(f"pod group {group.namespace or 'default'}/{group.name} has no members")
        if group.min_member < 0 or group.min_member > len(group.members):
            raise InvalidRequest(
                f"pod group {group.namespace or 'default'}/{group.name}: min_member {group.min_member} "
                f"must be between 0 and the {len(group.members)} members sent"
            )
        members = [validate_pod(member) for member in group.members]
        self._require_synced()
        self._require_leader()
        return gangs.place(group, members, self._candidates(nodes) or None)

    def permit_status(self, namespace: str, name: str) -> PermitOutcome:
        gangs = self._gangs()
        if not name:
            raise InvalidRequest("pod name is required")
        self._require_synced()
        return gangs.permit(namespace or "default", name)

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
        """Periodic work, about once a second: expire gang permits and place waiting gangs in queue order.

        Only the leader, and only from a synced cache: a follower's or a stale cache's plan could double-book.
        """
        if self.gangs is None or not self.is_synced():
            return
        if self.leadership is not None and not self.leadership.is_leader():
            return
        self.gangs.tick()

    def gangs_waiting(self) -> int:
        return 0 if self.gangs is None else self.gangs.waiting()

    # --- views ---------------------------------------------------------------------------------------

    def node_topology(self, name: str) -> NodeView:
        if not name:
            raise InvalidRequest("node is required")
        index = self.index
        with index.lock:
            slot = index.slot_of(name)
            if slot is None:
                raise NodeNotFound(name)
            arrays = index.arrays()
            count = int(arrays.numa_count[slot])
            resources = arrays.resources
            cells = tuple(
                CellView(
                    id=int(arrays.cell_ids[slot, k]),
                    resources=tuple(
                        Amount(r, float(arrays.cell_total[c, slot, k]), float(arrays.cell_free[c, slot, k]))
                        for c, r in enumerate(resources)
                        if arrays.cell_total[c, slot, k] > 0
                    ),
                    local_read_bandwidth_mbps=float(arrays.bandwidth[slot, k]),
                    local_distance=float(arrays.local_distance[slot, k]),
                    claimed=bool(arrays.cell_claimed[slot, k]),
                    isolated=bool(arrays.cell_isolated[slot, k]),
                )
                for k in range(min(count, arrays.cell_ids.shape[1]))
            )
            node_amounts = tuple(
                Amount(r, _node_amount(r, arrays.node_allocatable[c, slot]), _node_amount(r, arrays.node_free[c, slot]))
                for c, r in enumerate(resources)
                if arrays.node_allocatable[c, slot] > 0
            )
            shape = index.gpu_shape(slot)
            busy = index.busy_gpus(slot)
            gpus: tuple[GpuView, ...] = ()
            links: tuple[tuple[int, int, str], ...] = ()
            if shape is not None:
                table = shape.table
                gpus = tuple(
                    GpuView(i, shape.numa_of.get(i), i in shape.healthy, i in busy) for i in sorted(shape.numa_of)
                )
                links = tuple(
                    (table.gpus[a], table.gpus[b], rank_label(table.ranks[a][b]))
                    for a in range(len(table.gpus))
                    for b in range(a + 1, len(table.gpus))
                )
            pods = tuple(
                PodView(u.namespace, u.name, u.cells, u.gpus, bound, accounted)
                for u, bound, accounted in index.pods_on(name)
            )
            return NodeView(
                name=name,
                topology_manager_policy=_POLICY_NAMES.get(int(arrays.policy[slot]), "none"),
                topology_manager_scope="pod" if arrays.scope[slot] else "container",
                cpu_manager_static=bool(arrays.cpu_static[slot]),
                memory_manager_static=bool(arrays.memory_static[slot]),
                cells=cells,
                node_resources=node_amounts,
                gpus=gpus,
                gpu_links=links,
                pods=pods,
            )

    def list_nodes(self) -> list[NodeSummary]:
        index = self.index
        with index.lock:
            arrays = index.arrays()
            columns = {r: arrays.column(r) for r in (CPU, MEMORY, GPU_RESOURCE)}
            summaries = []
            for name in sorted(index.node_names()):
                slot = index.slot_of(name)
                assert slot is not None  # names come from the index under its lock
                allocatable = {
                    r: 0.0 if c is None else float(arrays.node_allocatable[c, slot]) for r, c in columns.items()
                }
                free = {r: 0.0 if c is None else float(arrays.node_free[c, slot]) for r, c in columns.items()}
                summaries.append(
                    NodeSummary(
                        name=name,
                        numa_cells=int(arrays.numa_count[slot]),
                        topology_manager_policy=_POLICY_NAMES.get(int(arrays.policy[slot]), "none"),
                        gpus=int(allocatable[GPU_RESOURCE]),
                        free_gpus=int(free[GPU_RESOURCE]),
                        allocatable_cpus=allocatable[CPU] / _MILLI,
                        free_cpus=free[CPU] / _MILLI,
                        allocatable_memory=allocatable[MEMORY],
                        free_memory=free[MEMORY],
                        pods=len(index.pods_on(name)),
                    )
                )
            return summaries

    # --- helpers -------------------------------------------------------------------------------------

    def _admit_request(self, spec: PodSpec) -> PendingPod:
        """Validate first: a bad request is the caller's to fix whatever state the cache is in."""
        pending = validate_pod(spec)
        self._require_synced()
        return pending

    def _require_synced(self) -> None:
        if not self.is_synced():
            raise CacheNotSynced("the placement service's cluster cache is not synced; retry shortly")

    def _require_leader(self) -> None:
        """Only the leader reserves: two replicas reserving from their own caches would double-book."""
        if self.leadership is not None and not self.leadership.is_leader():
            raise NotLeader(self.leadership.leader_identity())

    def _gangs(self) -> GangPort:
        if self.gangs is None:
            raise GangsUnavailable("gang scheduling is not configured in this placement service")
        return self.gangs

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

    def _split_known(self, names: list[str]) -> tuple[list[str], IntArray, list[Rejections]]:
        """Known names with their index slots (call under the index lock), and the unknown names' rejection."""
        slots = self.index.slots_of(names)
        held = slots >= 0
        if held.all():
            return names, slots, []
        known = list(compress(names, held.tolist()))
        unknown = tuple(compress(names, (~held).tolist()))
        return known, slots[held], [Rejections(_UNKNOWN_NODE, RejectionKind.UNKNOWN_NODE, unknown)]

    def _placement(self, decision: Decision) -> Placement | None:
        if decision.node is None:
            return None
        expires_at = decision.expires_at
        return Placement(
            namespace=decision.namespace,
            name=decision.name,
            node=decision.node,
            cells=decision.cells,
            gpus=decision.gpus,
            pinned=decision.pinned,
            score=decision.score,
            breakdown=decision.breakdown,
            ttl_s=0.0 if expires_at is None else max(0.0, expires_at - self.clock()),
        )


def _intent(pending: PendingPod) -> PodIntent | None:
    """None for a pod that asks nothing: the core then skips the intent's mask work (~30 ms per 1,000 nodes)."""
    return None if pending.intent == _NO_INTENT else pending.intent


def _request(pending: PendingPod) -> PodRequest:
    return PodRequest(namespace=pending.namespace, name=pending.name, pod=pending.pod, intent=pending.intent)


def _rejections(known: Sequence[str], filtered: FilterResult) -> list[Rejections]:
    """The infeasible candidates, grouped by reason; each reason is classified once."""
    rejected = np.flatnonzero(~filtered.feasible)
    if not len(rejected):
        return []
    codes = filtered.reason_codes[rejected]
    names = np.array(known, dtype=object)[rejected]
    groups = []
    for code in np.unique(codes).tolist():
        message = filtered.messages[code - 1]
        groups.append(Rejections(message, rejection_kind(message), tuple(names[codes == code].tolist())))
    return groups


def _rejection(node: str, reason: str) -> Rejection:
    return Rejection(node, reason, rejection_kind(reason))


def _at(values: FloatArray, column: int | None, slot: int) -> float:
    return 0.0 if column is None else float(values[column, slot])


def _node_amount(resource: str, value: float) -> float:
    return float(value) / _MILLI if resource == CPU else float(value)
