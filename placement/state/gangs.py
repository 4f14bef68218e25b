"""The gang coordinator: collects pod-group members, places each group all at once, and keeps it whole.

Life of a group (``GangPhase``)::

    WaitingForMembers ── min-available members seen ──> WaitingForCapacity ── plan + reserve all ──> Reserved
          ^                                               ^      │                                  │
          │ falls below min-available before binding      │      └─ can never fit ─> Unschedulable  │ every
          └───────────────────────────────────────────────┴── permit timeout / Unreserve ───────────┤ reserved
                                                                                                     v member bound
                                                                                                   Bound

* All or nothing. A group is planned against ONE snapshot of the cluster index (``placement.core.gang``)
  and reserved through ``Reservations.reserve_all`` under the index lock held across both, so no other
  decision interleaves and no group is ever half reserved. A group that does not fit holds nothing, so
  two groups can never deadlock each holding part of the cluster.
* Permit. Once reserved, every member may bind (``permit_status`` says ALLOW). Members not bound within
  ``permit_timeout_s`` (default 10 s) are all released together, and those members are told REJECT once,
  so the scheduler puts them back in its queue; members already bound stay (they run).
* Queue. Groups that wait are tried in order: starving groups first (waiting at least
  ``starvation_after_s``, default 60 s: the age boost), oldest first; then by pod priority, higher first;
  then by group creation (first member seen), oldest first. A group behind one that does not fit may
  still be placed (backfill) unless the head of the queue is starving: then the head holds the nodes it
  would use on an emptied cluster (the ones with the most free room for it first), no other group is
  placed on them, and ``nodes_open_to_backfill`` keeps single pods off them, so nothing placed after it
  can delay its start. A group that cannot fit even an empty cluster holds nothing (``Unschedulable``).
* Churn. A member deleted (or failed) after placement releases exactly its own reservation; a group that
  falls below min-available before it is bound is released entirely; members added to a placed or bound
  group are planned next to the members already there, which never move.

Every method takes the index lock (one lock for the index, the reservations and the coordinator: no
lock order to get wrong). ``observe_bound`` and ``observe_deleted`` forward to ``Reservations``; calling
``Reservations.observe_pod`` / ``observe_pod_deleted`` for the same pod as well is harmless.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from kubenexus.topology.labels import FABRIC_CLIQUE_KEY
from kubenexus.topology.model import NodeTopology
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY, SPREAD_KEY
from placement.core.gang import (
    GangMember,
    GangPlan,
    GangUnplaceable,
    Locality,
    NodeGpus,
    empty_view,
    nic_local_gpus,
    plan_gang,
)
from placement.core.podgroup import GroupRef, Membership, PodGroupError, PodGroupSpec, SpreadPolicy, parse_membership
from placement.core.pods import PendingPod, PodUsage
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import FloatArray, IntArray, NodeArrays, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations

DEFAULT_PERMIT_TIMEOUT_S = 10.0
DEFAULT_STARVATION_AFTER_S = 60.0
DEFAULT_ZONE_KEY = "topology.kubernetes.io/zone"
DEFAULT_RACK_KEY = "topology.kubenexus.io/rack"

Key = tuple[str, str]


@dataclass(frozen=True)
class GangConfig:
    permit_timeout_s: float = DEFAULT_PERMIT_TIMEOUT_S
    starvation_after_s: float = DEFAULT_STARVATION_AFTER_S
    zone_key: str = DEFAULT_ZONE_KEY
    rack_key: str = DEFAULT_RACK_KEY
    clique_key: str = FABRIC_CLIQUE_KEY
    # A member whose device requests name one of these (e.g. rdma/hca_shared_devices_a) wants an RDMA NIC.
    rdma_markers: tuple[str, ...] = ("rdma",)
    weights: ScoringWeights | None = None

    def __post_init__(self) -> None:
        if not self.permit_timeout_s > 0:
            raise ValueError(f"permit timeout must be positive, got {self.permit_timeout_s}")
        if not self.starvation_after_s >= 0:
            raise ValueError(f"starvation threshold must not be negative, got {self.starvation_after_s}")


class GangPhase(enum.StrEnum):
    WAITING_FOR_MEMBERS = "WaitingForMembers"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    RESERVED = "Reserved"  # every planned member holds a reservation: they may bind
    BOUND = "Bound"
    UNSCHEDULABLE = "Unschedulable"  # cannot fit the candidate nodes even with nothing else running
    INVALID = "Invalid"  # a member's group labels are wrong: nothing is placed until that is fixed


@dataclass(frozen=True)
class GangStatus:
    """What users see for a group (``kubectl describe`` events, the PlaceGang reason)."""

    group: str  # namespace/name; "" when a pod's labels did not even name a group
    phase: GangPhase
    message: str
    members: int  # members known
    min_available: int | None
    placed: int  # reserved or bound
    bound: int


@dataclass(frozen=True)
class MemberPlacement:
    namespace: str
    name: str
    node: str
    cells: tuple[int, ...]
    gpus: tuple[int, ...]
    pinned: bool


@dataclass(frozen=True)
class GangPlacement:
    """A group reserved by this call: where each newly reserved member goes, until when it may bind."""

    status: GangStatus
    members: tuple[MemberPlacement, ...]
    deadline: float  # members not bound by then are released (the coordinator's clock)


class PermitVerdict(enum.StrEnum):
    ALLOW = "Allow"
    WAIT = "Wait"
    REJECT = "Reject"


@dataclass(frozen=True)
class PermitStatus:
    verdict: PermitVerdict
    reason: str
    group: str  # "" for a pod outside any group
    ready: int  # members reserved or bound
    min_available: int


class _State(enum.Enum):
    PENDING = enum.auto()
    RESERVED = enum.auto()
    BOUND = enum.auto()


@dataclass
class _Member:
    pod: PendingPod
    plan: GangMember
    arrival: int
    state: _State = _State.PENDING
    node: str | None = None
    rejected: str | None = None  # released after placement: told once through permit_status


@dataclass
class _Gang:
    ref: GroupRef
    sequence: int  # creation order: when the coordinator first saw a member
    min_available: int | None = None
    spread: SpreadPolicy | None = None
    members: dict[Key, _Member] = field(default_factory=dict)
    invalid: dict[Key, str] = field(default_factory=dict)  # refused members, with why
    waiting_since: float | None = None
    deadline: float | None = None
    unschedulable: bool = False
    message: str = ""

    def count(self, state: _State) -> int:
        return sum(1 for m in self.members.values() if m.state is state)

    @property
    def priority(self) -> int:
        return max((m.pod.priority for m in self.members.values()), default=0)


class GangCoordinator:
    """Pod groups over a ``ClusterIndex`` and its ``Reservations``; see the module docstring."""

    def __init__(
        self,
        index: ClusterIndex,
        reservations: Reservations,
        *,
        config: GangConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._index = index
        self._reservations = reservations
        self._config = config or GangConfig()
        self._clock = clock
        self._gangs: dict[GroupRef, _Gang] = {}
        self._member_of: dict[Key, GroupRef] = {}
        self._sequence = 0
        self._locality: dict[str, tuple[str | None, str | None, str | None]] = {}
        self._nic_local: dict[str, frozenset[int]] = {}
        self._hold: tuple[GroupRef, frozenset[str]] | None = None

    # --- nodes -----------------------------------------------------------------------------------------

    def observe_node(self, name: str, labels: Mapping[str, str], topology: NodeTopology | None = None) -> None:
        """A node's locality labels (zone, rack, fabric clique) and, with its topology, its NIC-near GPUs."""
        config = self._config
        clique = labels.get(config.clique_key)
        if clique is None and topology is not None:
            cliques = {gpu.fabric_clique for gpu in topology.gpus}
            clique = cliques.pop() if len(cliques) == 1 else None
        with self._index.lock:
            self._locality[name] = (labels.get(config.zone_key), labels.get(config.rack_key), clique)
            if topology is not None:
                self._nic_local[name] = nic_local_gpus(topology)

    def forget_node(self, name: str) -> None:
        with self._index.lock:
            self._locality.pop(name, None)
            self._nic_local.pop(name, None)

    def nodes_open_to_backfill(self, candidate_names: Iterable[str]) -> list[str]:
        """The candidates other work may use: all but those held for a starving head group."""
        with self._index.lock:
            held = self._hold[1] if self._hold is not None else frozenset()
            return [name for name in candidate_names if name not in held]

    # --- members ---------------------------------------------------------------------------------------

    def add_member(self, pod: PendingPod, *, pod_group: PodGroupSpec | None = None) -> GangStatus | None:
        """Record a pod seen by the service; None for a pod outside any group (place it on its own).

        ``pod_group``: the spec of the scheduler-plugins PodGroup object the pod names, when known. A pod
        with invalid group labels is refused with a status that says why; it never gets a placement, and
        while it exists its group places nothing.
        """
        with self._index.lock:
            now = self._clock()
            self._expire_permits(now)
            try:
                membership = parse_membership(pod.namespace, pod.labels, pod.annotations, pod_group=pod_group)
            except PodGroupError as error:
                return self._refuse(pod, _named_group(pod), str(error))
            if membership is None:
                return None
            gang = self._gangs.get(membership.group)
            if gang is None:
                self._sequence += 1
                gang = self._gangs[membership.group] = _Gang(ref=membership.group, sequence=self._sequence)
            conflict = self._conflict(gang, membership, pod, from_object=pod_group is not None)
            if conflict is not None:
                return self._refuse(pod, gang.ref, conflict)
            gang.invalid.pop(pod.key, None)
            if membership.min_available is not None:
                gang.min_available = membership.min_available
            gang.spread = membership.spread
            member = gang.members.get(pod.key)
            if member is None:
                self._sequence += 1
                gang.members[pod.key] = _Member(pod=pod, plan=self._gang_member(pod), arrival=self._sequence)
                self._member_of[pod.key] = gang.ref
            elif member.state is _State.PENDING:
                member.pod, member.plan = pod, self._gang_member(pod)
            self._refresh(gang, now)
            return self._status(gang)

    def observe_bound(self, usage: PodUsage) -> GangStatus | None:
        """The pod watch shows a member bound: confirms its reservation; a group fully bound is done."""
        with self._index.lock:
            gang, member = self._find(usage.key)
            if gang is None or member is None:
                return None
            self._reservations.observe_pod(usage)
            member.state, member.node, member.rejected = _State.BOUND, usage.node, None
            if not gang.count(_State.RESERVED):
                gang.deadline = None
            self._refresh(gang, self._clock())
            return self._status(gang)

    def observe_deleted(self, namespace: str, name: str) -> GangStatus | None:
        """A member was deleted or failed: releases exactly its own reservation (its charge if bound).

        A group that falls below min-available before it is bound is released entirely.
        """
        key = (namespace, name)
        with self._index.lock:
            gang = self._gangs.get(self._member_of.get(key) or GroupRef("", ""))
            if gang is None:
                return None
            gang.invalid.pop(key, None)
            member = gang.members.pop(key, None)
            self._member_of.pop(key, None)
            if member is not None and member.state is not _State.PENDING:
                self._reservations.observe_pod_deleted(namespace, name)
            minimum = gang.min_available or 0
            if gang.count(_State.BOUND) < minimum and len(gang.members) < minimum and gang.count(_State.RESERVED):
                self._release(
                    gang, f"pod group fell below min-available ({len(gang.members)}/{minimum}) before binding"
                )
            if not gang.members and not gang.invalid:
                del self._gangs[gang.ref]
                if self._hold is not None and self._hold[0] == gang.ref:
                    self._hold = None
                return GangStatus(str(gang.ref), GangPhase.WAITING_FOR_MEMBERS, "no members left", 0, minimum, 0, 0)
            self._refresh(gang, self._clock())
            return self._status(gang)

    def unreserve(self, namespace: str, name: str) -> bool:
        """The scheduler gave up on a reserved member: the whole group's reservations go (all or nothing)."""
        with self._index.lock:
            gang, member = self._find((namespace, name))
            if gang is None or member is None or member.state is not _State.RESERVED:
                return False
            self._release(gang, f"the scheduler gave up on member {namespace}/{name}")
            return True

    # --- placing ---------------------------------------------------------------------------------------

    def place(
        self, namespace: str, group: str, candidate_names: Iterable[str] | None = None
    ) -> GangPlacement | GangStatus:
        """Plan and reserve the group's waiting members all at once, or say why it waits.

        Respects the queue: nodes held for a starving head group are off limits to every other group.
        """
        ref = GroupRef(namespace or "default", group)
        with self._index.lock:
            now = self._clock()
            self._expire_permits(now)
            gang = self._gangs.get(ref)
            if gang is None:
                return GangStatus(
                    str(ref), GangPhase.WAITING_FOR_MEMBERS, f"no member of pod group {ref} seen yet", 0, None, 0, 0
                )
            names = None if candidate_names is None else list(candidate_names)
            return self._try_place(gang, now, names)

    def tick(self, now: float | None = None) -> list[GangStatus]:
        """Expire permits, then try every waiting group in queue order; returns their statuses."""
        with self._index.lock:
            now = self._clock() if now is None else now
            self._expire_permits(now)
            self._hold = None  # recomputed below by the head, if it starves
            statuses = []
            for gang in sorted(self._gangs.values(), key=lambda g: self._queue_key(g, now)):
                if gang.invalid or not gang.count(_State.PENDING):
                    continue
                result = self._try_place(gang, now, None)
                statuses.append(result.status if isinstance(result, GangPlacement) else result)
            return statuses

    def permit_status(self, namespace: str, name: str) -> PermitStatus:
        """May this pod bind now? ALLOW once its whole group is reserved; REJECT once after a release."""
        key = (namespace or "default", name)
        with self._index.lock:
            self._expire_permits(self._clock())
            ref = self._member_of.get(key)
            gang = self._gangs.get(ref) if ref is not None else None
            if gang is None:
                return PermitStatus(PermitVerdict.ALLOW, "not a member of any pod group", "", 0, 0)
            ready = gang.count(_State.RESERVED) + gang.count(_State.BOUND)
            minimum = gang.min_available or 0
            if key in gang.invalid:
                return PermitStatus(PermitVerdict.REJECT, gang.invalid[key], str(gang.ref), ready, minimum)
            member = gang.members[key]
            if member.rejected is not None:
                reason, member.rejected = member.rejected, None
                return PermitStatus(PermitVerdict.REJECT, reason, str(gang.ref), ready, minimum)
            if member.state is not _State.PENDING:
                reason = f"pod group {gang.ref} is placed: {ready}/{minimum} member(s) reserved or bound"
                return PermitStatus(PermitVerdict.ALLOW, reason, str(gang.ref), ready, minimum)
            return PermitStatus(PermitVerdict.WAIT, self._status(gang).message, str(gang.ref), ready, minimum)

    def status(self, namespace: str, group: str) -> GangStatus | None:
        with self._index.lock:
            gang = self._gangs.get(GroupRef(namespace or "default", group))
            return None if gang is None else self._status(gang)

    def statuses(self) -> list[GangStatus]:
        with self._index.lock:
            return [self._status(gang) for gang in self._gangs.values()]

    # --- internals -------------------------------------------------------------------------------------

    def _gang_member(self, pod: PendingPod) -> GangMember:
        demand = demand_of(pod.pod)
        wants_nic = any(m in name for name, _ in demand.device_requests for m in self._config.rdma_markers)
        return GangMember(key=pod.key, demand=demand, intent=pod.intent, wants_nic=wants_nic)

    def _conflict(self, gang: _Gang, membership: Membership, pod: PendingPod, *, from_object: bool) -> str | None:
        """Why ``pod`` disagrees with the members already in ``gang`` (None when it does not)."""
        others = [m for k, m in gang.members.items() if k != pod.key]
        if not others:
            return None
        new, old = membership.min_available, gang.min_available
        # A PodGroup object's minMember is the group's own: an edit of it applies to every member.
        if new is not None and old is not None and new != old and not from_object:
            return (
                f"invalid value {str(new)!r} for {MIN_AVAILABLE_KEY} (members disagree: the other members of "
                f"{gang.ref} say {old}); accepted: the same positive integer on every member"
            )
        if gang.spread is not None and membership.spread is not gang.spread:
            return (
                f"invalid value {membership.spread.value!r} for {SPREAD_KEY} (members disagree: the other "
                f"members of {gang.ref} say {gang.spread.value}); accepted: the same policy on every member"
            )
        return None

    def _refuse(self, pod: PendingPod, ref: GroupRef | None, message: str) -> GangStatus:
        """Record a member's invalid labels; its group places nothing more until the pod is fixed or gone."""
        if ref is None:
            return GangStatus("", GangPhase.INVALID, message, 0, None, 0, 0)
        gang = self._gangs.get(ref)
        if gang is None:
            self._sequence += 1
            gang = self._gangs[ref] = _Gang(ref=ref, sequence=self._sequence)
        previous = gang.members.pop(pod.key, None)
        if previous is not None and previous.state is _State.RESERVED:
            self._reservations.unreserve(*pod.key)
        gang.invalid[pod.key] = f"pod {pod.namespace}/{pod.name}: {message}"
        self._member_of[pod.key] = ref
        if gang.count(_State.RESERVED):
            self._release(gang, f"member {pod.namespace}/{pod.name} has invalid pod-group labels")
        return self._status(gang)

    def _find(self, key: Key) -> tuple[_Gang | None, _Member | None]:
        ref = self._member_of.get(key)
        gang = self._gangs.get(ref) if ref is not None else None
        return gang, None if gang is None else gang.members.get(key)

    def _refresh(self, gang: _Gang, now: float) -> None:
        """Start the waiting clock once the group could be placed; stop it once placed."""
        pending = gang.count(_State.PENDING)
        if pending and self._ready(gang) and not gang.invalid:
            if gang.waiting_since is None:
                gang.waiting_since = now
        else:
            gang.waiting_since = None

    def _ready(self, gang: _Gang) -> bool:
        """Enough members to place: min-available counted over bound, reserved and waiting members."""
        return gang.min_available is not None and len(gang.members) >= gang.min_available

    def _queue_key(self, gang: _Gang, now: float) -> tuple[int, int, int]:
        if self._starving(gang, now):
            return (0, 0, gang.sequence)
        return (1, -gang.priority, gang.sequence)

    def _starving(self, gang: _Gang, now: float) -> bool:
        return gang.waiting_since is not None and now - gang.waiting_since >= self._config.starvation_after_s

    def _expire_permits(self, now: float) -> None:
        for gang in self._gangs.values():
            if gang.deadline is not None and gang.deadline <= now and gang.count(_State.RESERVED):
                waiting = gang.count(_State.RESERVED)
                self._release(
                    gang,
                    f"permit timeout: {waiting} member(s) of {gang.ref} not bound within "
                    f"{self._config.permit_timeout_s:g} s; their reservations were released",
                )

    def _release(self, gang: _Gang, why: str) -> None:
        """Release every reserved (not bound) member together; they wait to be placed again."""
        for member in gang.members.values():
            if member.state is _State.RESERVED:
                self._reservations.unreserve(*member.pod.key)
                member.state, member.node, member.rejected = _State.PENDING, None, why
        gang.deadline = None
        gang.message = why
        self._refresh(gang, self._clock())

    def _try_place(self, gang: _Gang, now: float, names: list[str] | None) -> GangPlacement | GangStatus:
        if gang.invalid:
            return self._status(gang)
        pending = sorted((m for m in gang.members.values() if m.state is _State.PENDING), key=lambda m: m.arrival)
        if not pending or not self._ready(gang):
            return self._status(gang)
        minimum = gang.min_available or 0
        placed = gang.count(_State.RESERVED) + gang.count(_State.BOUND)
        # Below min-available, only a batch that completes the group may be reserved; above it, members are
        # added to a placed group next to the others (one batch, then one at a time if the batch is too big).
        batches = [pending]
        needed = max(minimum - placed, 1)
        if len(pending) > needed:
            batches.append(pending[:needed])
        index = self._index
        self._reservations.expire()
        arrays = index.arrays()
        rows = self._candidate_rows(gang, names)
        locality = self._locality_codes()
        anchors = [
            slot for m in gang.members.values() if m.node is not None and (slot := index.slot_of(m.node)) is not None
        ]
        result: GangPlan | GangUnplaceable | None = None
        for batch in batches:
            result = plan_gang(
                arrays,
                rows,
                [m.plan for m in batch],
                gpus=self._gpus_of,
                policy=gang.spread or SpreadPolicy.PACKED,
                locality=locality,
                anchors=anchors,
                weights=self._config.weights,
            )
            if isinstance(result, GangPlan):
                return self._reserve(gang, result, now)
        assert isinstance(result, GangUnplaceable)
        self._explain_wait(
            gang,
            arrays=arrays,
            rows=rows,
            members=pending[: max(minimum - placed, 1)],
            locality=locality,
            failure=result,
            now=now,
        )
        return self._status(gang)

    def _reserve(self, gang: _Gang, plan: GangPlan, now: float) -> GangPlacement:
        index = self._index
        usages = []
        placements = []
        for step in plan.members:
            member = gang.members[step.key]
            node = index.name_of(step.row) or ""
            usages.append(
                PodUsage(
                    namespace=step.key[0],
                    name=step.key[1],
                    node=node,
                    demand=member.plan.demand,
                    cells=step.cells,
                    gpus=step.gpus,
                    isolated=member.plan.intent.exclusive,
                )
            )
            placements.append(MemberPlacement(step.key[0], step.key[1], node, step.cells, step.gpus, step.pinned))
        self._reservations.reserve_all(usages, expires=False)
        for usage in usages:
            member = gang.members[usage.key]
            # ``rejected`` stays: a member released while it waited at Permit is told REJECT first, so the
            # scheduler runs a new cycle for it and learns the new placement instead of binding the old one.
            member.state, member.node = _State.RESERVED, usage.node
        deadline = now + self._config.permit_timeout_s
        gang.deadline = max(gang.deadline or deadline, deadline)
        gang.unschedulable = False
        span = plan.span(self._locality_codes())
        gang.message = (
            f"placed {len(placements)} member(s) on {span.nodes} node(s) ({plan.policy.value}); "
            f"waiting up to {self._config.permit_timeout_s:g} s for them to bind"
        )
        if self._hold is not None and self._hold[0] == gang.ref:
            self._hold = None
        self._refresh(gang, now)
        return GangPlacement(status=self._status(gang), members=tuple(placements), deadline=gang.deadline)

    def _explain_wait(
        self,
        gang: _Gang,
        *,
        arrays: NodeArrays,
        rows: IntArray,
        members: list[_Member],
        locality: Locality,
        failure: GangUnplaceable,
        now: float,
    ) -> None:
        """Why the group waits, whether it could ever fit, and, for a starving head, the nodes it holds."""
        if gang.waiting_since is None:
            gang.waiting_since = now
        all_rows = self._index.slots()
        emptied = plan_gang(
            empty_view(arrays),
            all_rows,
            [m.plan for m in members],
            gpus=self._all_gpus_of,
            policy=gang.spread or SpreadPolicy.PACKED,
            locality=locality,
            preference=_free_share(arrays, members[0].plan),
            weights=self._config.weights,
        )
        if isinstance(emptied, GangUnplaceable):
            gang.unschedulable = True
            gang.message = f"can never fit the cluster as it is: {emptied.reason}"
            return
        gang.unschedulable = False
        gang.message = failure.reason
        holder = self._hold[0] if self._hold is not None else None
        head = min(
            (g for g in self._gangs.values() if g.count(_State.PENDING) and self._ready(g) and not g.invalid),
            key=lambda g: self._queue_key(g, now),
        )
        if holder in (None, gang.ref) and head is gang and self._starving(gang, now) and len(rows) == len(all_rows):
            held = frozenset(self._index.name_of(r) or "" for r in emptied.rows())
            self._hold = (gang.ref, held)
            gang.message += f"; waited {now - gang.waiting_since:.0f} s: holding {len(held)} node(s) for it"

    def _candidate_rows(self, gang: _Gang, names: list[str] | None) -> IntArray:
        rows = self._index.slots(names)
        if self._hold is None or self._hold[0] == gang.ref:
            return rows
        held = self._hold[1]
        keep = [i for i, r in enumerate(rows.tolist()) if self._index.name_of(r) not in held]
        return rows[keep]

    def _locality_codes(self) -> Locality:
        names = self._index.slot_names()
        columns: list[list[int]] = [[], [], []]
        codes: list[dict[str, int]] = [{}, {}, {}]
        for name in names:
            labels = self._locality.get(name or "", (None, None, None))
            for level, value in enumerate(labels):
                columns[level].append(-1 if value is None else codes[level].setdefault(value, len(codes[level])))
        zone, rack, clique = (np.array(c, dtype=np.int64) for c in columns)
        return Locality(zone=zone, rack=rack, clique=clique)

    def _gpus_of(self, row: int) -> NodeGpus | None:
        shape = self._index.gpu_shape(row)
        if shape is None:
            return None
        name = self._index.name_of(row) or ""
        return NodeGpus(shape.table, shape.healthy - self._index.busy_gpus(row), self._nic_local.get(name, frozenset()))

    def _all_gpus_of(self, row: int) -> NodeGpus | None:
        shape = self._index.gpu_shape(row)
        if shape is None:
            return None
        return NodeGpus(shape.table, shape.healthy, self._nic_local.get(self._index.name_of(row) or "", frozenset()))

    def _status(self, gang: _Gang) -> GangStatus:
        bound = gang.count(_State.BOUND)
        placed = bound + gang.count(_State.RESERVED)
        pending = gang.count(_State.PENDING)
        minimum = gang.min_available
        total = len(gang.members)
        if gang.invalid:
            phase, message = GangPhase.INVALID, "; ".join(gang.invalid.values())
        elif minimum is None:
            phase = GangPhase.WAITING_FOR_MEMBERS
            message = f"waiting for the PodGroup object {gang.ref} (scheduling.x-k8s.io) to read minMember"
        elif placed and (not pending or placed >= minimum):
            phase = GangPhase.BOUND if bound == placed else GangPhase.RESERVED
            message = gang.message if phase is GangPhase.RESERVED else f"all {bound} member(s) bound"
            if pending:
                message = f"{placed} member(s) placed, {pending} more waiting: {gang.message}"
        elif total < minimum:
            phase, message = GangPhase.WAITING_FOR_MEMBERS, f"waiting for pod group {total}/{minimum}"
        elif gang.unschedulable:
            phase, message = GangPhase.UNSCHEDULABLE, gang.message
        else:
            phase, message = GangPhase.WAITING_FOR_CAPACITY, gang.message or "waiting to be placed"
        return GangStatus(str(gang.ref), phase, message, total, minimum, placed, bound)


def _named_group(pod: PendingPod) -> GroupRef | None:
    """The group a pod's labels name, even when another of its group labels is invalid."""
    for key in (GROUP_NAME_KEY, SCHEDULER_PLUGINS_KEY):
        name = pod.labels.get(key)
        if name:
            return GroupRef(pod.namespace or "default", name)
    return None


def _free_share(arrays: NodeArrays, member: GangMember) -> FloatArray:
    """Per slot, the share of what the member asks for that is free now: the nodes closest to free first."""
    share = np.zeros(arrays.numa_count.shape[0])
    asked = 0
    for name, amount in member.demand.node_requests:
        column = arrays.column(name)
        if column is None or amount <= 0:
            continue
        allocatable = arrays.node_allocatable[column]
        share += np.divide(arrays.node_free[column], allocatable, out=np.zeros_like(share), where=allocatable > 0)
        asked += 1
    result: FloatArray = share / max(asked, 1)
    return result
