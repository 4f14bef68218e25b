"""The gang coordinator: collects pod-group members, places each group all at once, and keeps it whole.

Life of a group (``GangPhase``)::

    WaitingForMembers ── min-available members seen ──> WaitingForCapacity ── plan + reserve all ──> Reserved
          ^                                               ^      │                                  │
          │ falls below min-available before binding      │      └─ can never fit ─> Unschedulable  │ every
          └───────────────────────────────────────────────┴── permit timeout / Unreserve ───────────┤ reserved
                                                                                                     v member bound
                                                                                                   Bound

* All or nothing. A group is planned against ONE snapshot of the cluster index (``placement.core.gang_plan``)
  and reserved through ``Reservations.reserve_all`` in one step, so no group is ever half reserved. The
  plan is made on a copy of the index's arrays taken under the index lock, then checked and reserved
  under the lock: the reservation goes ahead only if none of the nodes the plan uses changed since the
  copy (else the group is planned again under the lock). A group that does not fit holds nothing, so
  two groups can never deadlock each holding part of the cluster.
* Requests are whole. ``register`` (what a PlaceGang request becomes) checks every member before it
  changes anything: namespace, group labels, duplicates, the cap on members (``GangConfig.max_members``),
  agreement with the members already known. A refused request (``GangRefused``) leaves no trace.
* Members that never appear. A member registered from a request that the pod watch has not shown
  (``observe_present``, ``observe_bound``) within ``permit_timeout_s`` of its registration is dropped,
  its reservation released; its group then waits for members again, or ends when none is left.
* Permit. Once reserved, every member may bind (``permit_status`` says ALLOW). Members not bound within
  ``permit_timeout_s`` (default 10 s) are all released together, and those members are told REJECT once,
  so the scheduler puts them back in its queue; members already bound stay (they run). Each permit
  timeout and each drop is logged (one JSON line: the group, the members, why) and counted.
* Queue. Groups that wait are tried in order: starving groups first (waiting at least
  ``starvation_after_s``, default 60 s: the age boost), oldest first; then by pod priority, higher first;
  then by group creation (first member seen), oldest first. A group behind one that does not fit may
  still be placed (backfill) unless the head of the queue is starving: then the head holds the nodes it
  would use on an emptied cluster (the ones with the most free room for it first), no other group is
  placed on them, and ``nodes_open_to_backfill`` keeps single pods off them, so nothing placed after it
  can delay its start. A group that cannot fit even an empty cluster holds nothing (``Unschedulable``).
* Bounded retries. ``tick`` tries the head of the queue, then the other groups from where the last tick
  stopped, while they fit ``GangConfig.budget`` members (each group counts ``GROUP_PLAN_COST`` more for
  its node filter and scores): at most two groups at the cap a tick. A group whose last try failed is
  not planned again until the cluster, its members or the hold changed; whether a group could ever fit
  is decided once per group and set of nodes; a failed plan slower than ``SLOW_PLAN_S`` is not tried
  again for ``RETRY_COST_FACTOR`` times its duration, unless the group changes (kube-scheduler backs
  unschedulable pods off for the same reason). Planning never holds the index lock, and gives up the
  interpreter every ``YIELD_EVERY_S`` so that the event loop's calls do not wait on it.
* Churn. A member deleted (or failed) after placement releases exactly its own reservation; a group that
  falls below min-available before it is bound is released entirely; members added to a placed or bound
  group are planned next to the members already there, which never move.
* Topology. A group may require every member in one domain of a topology level, or prefer the fewest
  (its members' labels, or the group object's constraints, which win; ``placement.core.domains``). Every
  plan, the emptied-cluster verdict and the member-by-member fallback keep to it; configured levels'
  domains come from ``observe_node``, a node label key used as a level from the scheduling facts.

Every method takes the index lock (one lock for the index, the reservations and the coordinator: no
lock order to get wrong); planning runs between two holds of it. ``observe_bound`` and
``observe_deleted`` forward to ``Reservations``; calling ``Reservations.observe_pod`` /
``observe_pod_deleted`` for the same pod as well is harmless.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from kubenexus.topology.model import NodeTopology
from placement.core.annotations import (
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    PREFERRED_TOPOLOGY_KEY,
    REQUIRED_TOPOLOGY_KEY,
    SCHEDULER_PLUGINS_KEY,
    SPREAD_KEY,
)
from placement.core.domains import (
    DEFAULT_LEVELS,
    NVLINK_LEVEL,
    RACK_KEY,
    RACK_LEVEL,
    ZONE_KEY,
    ZONE_LEVEL,
    DomainMap,
    LevelConstraint,
    TopologyLevel,
    TopologyLevelError,
    TopologyLevels,
    confine,
    domain_map,
    plan_in_domains,
)
from placement.core.gang_plan import (
    GangMember,
    GangPlan,
    GangUnplaceable,
    Locality,
    MemberRules,
    NodeGpus,
    empty_view,
    plan_gang,
)
from placement.core.podgroup import (
    DomainConstraint,
    GroupRef,
    Membership,
    PodGroupError,
    PodGroupSpec,
    SpreadPolicy,
    parse_membership,
)
from placement.core.pods import PendingPod, PodUsage
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import FloatArray, IntArray, NodeArrays, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import DeviceChoice
from placement.state.gang_rules import allocate_members, member_rules, plan_conflict, plan_in_order
from placement.state.nominations import Nominations
from placement.state.reservations import Reservations

log = logging.getLogger("kubenexus.placement.gangs")

DEFAULT_PERMIT_TIMEOUT_S = 10.0
DEFAULT_STARVATION_AFTER_S = 60.0
DEFAULT_ZONE_KEY = ZONE_KEY
DEFAULT_RACK_KEY = RACK_KEY
# The most members a group may have (and so its min-available): the largest group planned within 0.15 s
# over 1,000 nodes (python -m benchmarks.gang_load; docs/gang.md, "Requests: whole, bounded, ...").
DEFAULT_MAX_MEMBERS = 1024
# A group's planning work that does not grow with its members (filtering and scoring the candidate
# nodes: about 3 ms over 1,000 nodes, a large group's members about 0.1 ms each), in members, against
# the tick's budget.
GROUP_PLAN_COST = 32
YIELD_EVERY_S = 0.0005  # how long a plan holds the interpreter at most between two nodes (see _yielding)
# A failed plan that took longer than SLOW_PLAN_S is not tried again for RETRY_COST_FACTOR times as long,
# unless the group itself changes: a group at the cap (~0.1 s a plan) then costs the interpreter at most
# 1/RETRY_COST_FACTOR of its time, while the small groups of most workloads are retried at every tick.
SLOW_PLAN_S = 0.02
RETRY_COST_FACTOR = 40.0

Key = tuple[str, str]


@dataclass(frozen=True)
class GangConfig:
    permit_timeout_s: float = DEFAULT_PERMIT_TIMEOUT_S
    starvation_after_s: float = DEFAULT_STARVATION_AFTER_S
    # Topology levels, nearest first (``serve --topology-levels``): what a group's required or preferred
    # topology names, and the domains ``packed`` prefers (the levels named nvlink, rack and zone).
    levels: TopologyLevels = DEFAULT_LEVELS
    # A member whose device requests name one of these (e.g. rdma/hca_shared_devices_a) wants an RDMA NIC.
    weights: ScoringWeights | None = None
    max_members: int = DEFAULT_MAX_MEMBERS
    # Members planned per tick besides the head of the queue, all other groups together (each also counts
    # GROUP_PLAN_COST); None: one group at the cap. The head and the first other group are always tried.
    tick_budget: int | None = None

    def __post_init__(self) -> None:
        if not self.permit_timeout_s > 0:
            raise ValueError(f"permit timeout must be positive, got {self.permit_timeout_s}")
        if not self.starvation_after_s >= 0:
            raise ValueError(f"starvation threshold must not be negative, got {self.starvation_after_s}")
        if self.max_members < 1:
            raise ValueError(f"the cap on a pod group's members must be positive, got {self.max_members}")
        if self.tick_budget is not None and self.tick_budget < 1:
            raise ValueError(f"the tick's planning budget must be positive, got {self.tick_budget}")

    @property
    def budget(self) -> int:
        return self.tick_budget if self.tick_budget is not None else self.max_members + GROUP_PLAN_COST


class GangRefused(ValueError):
    """A request to register members, refused as a whole: nothing of it was recorded."""


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
    devices: DeviceChoice | None = None  # DRA: the devices chosen for the member's claims


@dataclass(frozen=True)
class GangPlacement:
    """A group reserved: where each member reserved by this call goes (or, when this call reserved none,
    each member reserved earlier, by a retry, and not bound yet), until when it may bind."""

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
    placement: MemberPlacement | None = None  # while reserved
    # Registered from a request and not yet shown by the pod watch: dropped at this time (the coordinator's
    # clock) unless the watch shows the pod first. None once seen (or for a member added as a seen pod).
    unseen_until: float | None = None


@dataclass(frozen=True)
class _Verdict:
    """Whether the group could fit the emptied cluster, and where: decided once per group and node set."""

    key: tuple[int, int, bytes]  # the group's version, the nodes' facts version, the nodes' digest
    plan: GangPlan | GangUnplaceable


@dataclass
class _Gang:
    ref: GroupRef
    sequence: int  # creation order: when the coordinator first saw a member
    min_available: int | None = None
    spread: SpreadPolicy | None = None
    topology_labels: tuple[DomainConstraint, ...] = ()  # the members' required-/preferred-topology labels
    topology_object: tuple[DomainConstraint, ...] = ()  # the group object's (a PlaceGang request's): it wins
    members: dict[Key, _Member] = field(default_factory=dict)
    invalid: dict[Key, str] = field(default_factory=dict)  # refused members, with why
    waiting_since: float | None = None
    deadline: float | None = None
    unschedulable: bool = False
    message: str = ""
    version: int = 0  # bumped by every change of the members or their states
    candidates: tuple[str, ...] | None = None  # the last request's candidate nodes; None: every node
    verdict: _Verdict | None = None
    tried: tuple[object, ...] | None = None  # what the last failed try saw: the same again is not retried
    retry_at: float = 0.0  # a slow failed plan is not tried again before (the coordinator's clock)
    # How long reserved members may wait to bind: the group object's (scheduleTimeoutSeconds, through a
    # PlaceGang request); None: the configured permit timeout.
    permit_timeout_s: float | None = None

    def count(self, state: _State) -> int:
        return sum(1 for m in self.members.values() if m.state is state)

    def changed(self) -> None:
        self.version += 1
        self.tried = None
        self.retry_at = 0.0

    @property
    def priority(self) -> int:
        return max((m.pod.priority for m in self.members.values()), default=0)

    @property
    def topology(self) -> tuple[DomainConstraint, ...]:
        return self.topology_object or self.topology_labels


@dataclass
class _Snapshot:
    """The index as a plan sees it, copied under the lock so that planning itself holds no lock."""

    arrays: NodeArrays
    changes: int  # the index's ``changes`` when copied: a node written since has a later ``slot_changes``
    layout: int
    slot_names: tuple[str | None, ...]
    locality: Locality
    free_gpus: Mapping[int, NodeGpus]
    all_gpus: Mapping[int, NodeGpus]
    locality_version: int
    domains: Mapping[str, DomainMap] = field(default_factory=dict)  # per configured topology level

    @cached_property
    def rows(self) -> IntArray:
        return np.array([row for row, name in enumerate(self.slot_names) if name is not None], dtype=np.int64)

    @cached_property
    def nodes_digest(self) -> bytes:
        """What an emptied cluster is made of: the nodes, their totals, kubelet policies, GPUs, locality."""
        a = self.arrays
        digest = hashlib.blake2b(repr((a.resources, self.slot_names)).encode(), digest_size=16)
        locality = self.locality
        parts: tuple[npt.NDArray[Any], ...] = (
            *(a.cell_total, a.node_allocatable, a.numa_count, a.policy, a.scope, a.cpu_static, a.memory_static),
            *(a.cell_ids, locality.zone, locality.rack, locality.clique),
        )
        for array in (*parts, *(domains.codes for domains in self.domains.values())):
            digest.update(np.ascontiguousarray(array).tobytes())
        gpus = sorted((row, sorted(g.free)) for row, g in self.all_gpus.items())
        digest.update(repr(gpus).encode())
        return digest.digest()


@dataclass(frozen=True)
class _Try:
    """One group's try, prepared under the lock: its members, candidate rows and what it must not miss."""

    gang: _Gang
    version: int
    memo: tuple[object, ...]
    batches: tuple[tuple[GangMember, ...], ...]
    needed: tuple[GangMember, ...]  # the members that decide whether the group could ever fit
    rows: IntArray
    anchors: tuple[int, ...]
    names: list[str] | None
    head: bool  # the head of the queue: it may hold nodes when it starves
    every_node: bool  # the candidates are every node (a hold is only taken then)
    verdict: _Verdict | None  # the group's cached emptied-cluster verdict, if any
    rules: Mapping[Key, MemberRules]  # the pending members' kube-scheduler constraints, judged now
    node_rules: Mapping[Key, MemberRules]  # the same, kept to what the nodes decide (the emptied cluster)
    facts: tuple[int, int]  # the facts' labels and pods versions the rules were judged at
    constraints: tuple[LevelConstraint, ...] = ()  # the group's topology constraints over the slots


@dataclass(frozen=True)
class _Waiting:
    failure: GangUnplaceable | None  # None: not planned, the cached verdict says it can never fit
    verdict: _Verdict


class GangCoordinator:
    """Pod groups over a ``ClusterIndex`` and its ``Reservations``; see the module docstring."""

    def __init__(
        self,
        index: ClusterIndex,
        reservations: Reservations,
        *,
        config: GangConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        nominations: Nominations | None = None,
    ) -> None:
        """``nominations``: nodes held for preemptors; a group does not use those held for a preemptor
        outside it of priority >= its own (``PlacementEngine`` shares its own)."""
        self._index = index
        self._nominations = nominations
        self._reservations = reservations
        self._config = config or GangConfig()
        self._clock = clock
        self._gangs: dict[GroupRef, _Gang] = {}
        self._member_of: dict[Key, GroupRef] = {}
        self._sequence = 0
        self._locality: dict[str, tuple[str | None, ...]] = {}  # node -> its domain at each configured level
        self._locality_version = 0
        self._locality_cache: tuple[tuple[object, ...], Locality, dict[str, DomainMap]] | None = None
        self._hold: tuple[GroupRef, frozenset[str]] | None = None
        self._present: set[Key] = set()  # pods the watch shows pending, members or not (yet)
        self._next_due = math.inf  # the earliest permit deadline or unseen member's drop time
        self._resume_after: GroupRef | None = None  # where the last tick's budget ran out
        self._snapshot_cache: _Snapshot | None = None
        self._node_gpus: dict[int, tuple[tuple[int, str, int], NodeGpus, NodeGpus]] = {}
        self._permit_timeouts = 0
        self._members_dropped = 0

    @property
    def config(self) -> GangConfig:
        return self._config

    @property
    def index(self) -> ClusterIndex:
        return self._index

    @property
    def permit_timeouts(self) -> int:
        """Permit timeouts so far: groups whose reserved members were released for not binding in time."""
        return self._permit_timeouts

    @property
    def members_dropped(self) -> int:
        """Members dropped so far because the pod watch never showed them (registered by requests only)."""
        return self._members_dropped

    # --- nodes -----------------------------------------------------------------------------------------

    def observe_node(self, name: str, labels: Mapping[str, str], topology: NodeTopology | None = None) -> None:
        """A node's domain at each topology level (its NVLink clique from its GPUs when not labelled)."""
        domains = [level.domain_of(labels) for level in self._config.levels.levels]
        for position, level in enumerate(self._config.levels.levels):
            if level.name == NVLINK_LEVEL and domains[position] is None and topology is not None:
                cliques = {gpu.fabric_clique for gpu in topology.gpus}
                domains[position] = cliques.pop() if len(cliques) == 1 else None
        with self._index.lock:
            locality = tuple(domains)
            if self._locality.get(name) != locality:
                self._locality_version += 1
            self._locality[name] = locality

    def forget_node(self, name: str) -> None:
        with self._index.lock:
            self._locality.pop(name, None)
            self._locality_version += 1

    def nodes_open_to_backfill(self, candidate_names: Iterable[str]) -> list[str]:
        """The candidates other work may use: all but those held for a starving head group."""
        with self._index.lock:
            held = self._hold[1] if self._hold is not None else frozenset()
            return [name for name in candidate_names if name not in held]

    # --- members ---------------------------------------------------------------------------------------

    def register(
        self,
        group: GroupRef,
        members: Sequence[tuple[PendingPod, PodGroupSpec | None]],
        *,
        candidates: Sequence[str] | None = None,
        topology: Sequence[DomainConstraint] = (),
        permit_timeout_s: float | None = None,
    ) -> GangStatus:
        """Record a request's members of ``group`` all at once, or refuse the request whole (``GangRefused``).

        Each member comes with the spec of the PodGroup object it names, when known. Every member is
        checked first (namespace, group labels, duplicates, the cap on members, agreement with the other
        members); only then is anything recorded. Members the pod watch has not shown are dropped unless
        it shows them within the permit timeout. ``candidates``: the nodes later tries may use.
        ``topology``: the group object's topology constraints, which win over the members' labels.
        ``permit_timeout_s``: the group object's permit timeout (None: the configured one).
        """
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            memberships = self._check_request(group, members)
            for constraint in topology:
                try:
                    self._config.levels.resolve(constraint.level)
                except TopologyLevelError as error:
                    raise GangRefused(f"pod group {group}: {error}") from None
            gang = self._gangs.get(group)
            if gang is None:
                self._sequence += 1
                gang = self._gangs[group] = _Gang(ref=group, sequence=self._sequence)
            gang.permit_timeout_s = permit_timeout_s
            changed = False
            for (pod, _), membership in zip(members, memberships, strict=True):
                changed |= self._record(gang, pod, membership, now, seen=pod.key in self._present)
            names = None if candidates is None else tuple(candidates)
            if changed or names != gang.candidates or tuple(topology) != gang.topology_object:
                gang.candidates = names
                gang.topology_object = tuple(topology)
                gang.changed()
            self._refresh(gang, now)
            return self._status(gang)

    def add_member(self, pod: PendingPod, *, pod_group: PodGroupSpec | None = None) -> GangStatus | None:
        """Record a pod seen by the service; None for a pod outside any group (place it on its own).

        ``pod_group``: the spec of the scheduler-plugins PodGroup object the pod names, when known. A pod
        with invalid group labels is refused with a status that says why; it never gets a placement, and
        while it exists its group places nothing.
        """
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            try:
                membership = self._membership(pod, pod_group)
            except PodGroupError as error:
                return self._refuse(pod, _named_group(pod), str(error))
            if membership is None:
                return None
            gang = self._gangs.get(membership.group)
            if gang is None:
                self._sequence += 1
                gang = self._gangs[membership.group] = _Gang(ref=membership.group, sequence=self._sequence)
            conflict = self._conflict(gang, membership, pod.key, from_object=pod_group is not None)
            if conflict is None and pod.key not in gang.members and len(gang.members) >= self._config.max_members:
                conflict = f"pod group {gang.ref} already has {len(gang.members)} members, the most a group may have"
            if conflict is not None:
                return self._refuse(pod, gang.ref, conflict)
            fixed = gang.invalid.pop(pod.key, None) is not None
            if self._record(gang, pod, membership, now, seen=True) or fixed:
                gang.changed()
            self._refresh(gang, now)
            return self._status(gang)

    def observe_present(self, namespace: str, name: str) -> None:
        """The pod watch shows the pod, not bound: a member registered by a request is now known to exist."""
        key = (namespace, name)
        with self._index.lock:
            self._present.add(key)
            _, member = self._find(key)
            if member is not None:
                member.unseen_until = None

    def observe_bound(self, usage: PodUsage) -> GangStatus | None:
        """The pod watch shows a member bound: confirms its reservation; a group fully bound is done."""
        with self._index.lock:
            self._present.discard(usage.key)
            gang, member = self._find(usage.key)
            if gang is None or member is None:
                return None
            self._reservations.observe_pod(usage)
            member.state, member.node, member.rejected, member.unseen_until = _State.BOUND, usage.node, None, None
            if not gang.count(_State.RESERVED):
                gang.deadline = None
            gang.changed()
            self._refresh(gang, self._clock())
            return self._status(gang)

    def observe_deleted(self, namespace: str, name: str) -> GangStatus | None:
        """A member was deleted or failed: releases exactly its own reservation (its charge if bound).

        A group that falls below min-available before it is bound is released entirely.
        """
        key = (namespace, name)
        with self._index.lock:
            self._present.discard(key)
            gang = self._gangs.get(self._member_of.get(key) or GroupRef("", ""))
            if gang is None:
                return None
            self._remove(gang, [key])
            if not gang.members and not gang.invalid:
                return GangStatus(
                    str(gang.ref), GangPhase.WAITING_FOR_MEMBERS, "no members left", 0, gang.min_available, 0, 0
                )
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
        names = None if candidate_names is None else list(candidate_names)
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            gang = self._gangs.get(ref)
            if gang is None:
                return GangStatus(
                    str(ref), GangPhase.WAITING_FOR_MEMBERS, f"no member of pod group {ref} seen yet", 0, None, 0, 0
                )
            head = self._head(now)
        result = self._attempt(gang, names, now, head=head is gang, retry=False)
        assert result is not None  # a try made on request is never skipped
        with self._index.lock:
            reserved = [m.placement for m in _by_arrival(gang, _State.RESERVED) if m.placement is not None]
            if isinstance(result, GangStatus) and reserved and gang.deadline is not None:
                # Reserved by a retry since the caller last asked: the caller binds them now.
                return GangPlacement(status=self._status(gang), members=tuple(reserved), deadline=gang.deadline)
        return result

    def tick(self, now: float | None = None) -> list[GangStatus]:
        """Expire permits, then try the waiting groups in queue order within the budget; their statuses.

        The statuses are those of every group with members waiting, in queue order, tried or not.
        """
        with self._index.lock:
            now = self._clock() if now is None else now
            self._expire(now)
            queue = sorted(
                (g for g in self._gangs.values() if not g.invalid and g.count(_State.PENDING)),
                key=lambda g: self._queue_key(g, now),
            )
            ready = [g for g in queue if self._ready(g)]
            head = ready[0] if ready else None
            if self._hold is not None and (head is None or head.ref != self._hold[0] or not self._starving(head, now)):
                self._hold = None
            order = [
                (gang, gang.count(_State.PENDING) + GROUP_PLAN_COST, _names(gang.candidates))
                for gang in ready[:1] + _rotated(ready[1:], self._resume_after)
            ]
        # The head is always tried; the others share the budget, the first of them always tried too (a
        # group larger than the budget still gets its turn).
        budget, spent, last, stopped = self._config.budget, 0, None, False
        for gang, cost, names in order:
            if gang is not head and spent and spent + cost > budget:
                stopped = True  # the next tick goes on from here
                break
            tried = self._attempt(gang, names, now, head=gang is head, retry=True)
            if gang is not head:
                spent += cost if tried is not None else 0
                last = gang.ref
        with self._index.lock:
            self._resume_after = last if stopped else None
            return [self._status(g) for g in queue if self._gangs.get(g.ref) is g]

    def permit_status(self, namespace: str, name: str) -> PermitStatus:
        """May this pod bind now? ALLOW once its whole group is reserved; REJECT once after a release."""
        key = (namespace or "default", name)
        with self._index.lock:
            self._expire(self._clock())
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

    # --- registering (under the lock) ------------------------------------------------------------------

    def _membership(self, pod: PendingPod, pod_group: PodGroupSpec | None) -> Membership | None:
        """The pod's group labels, refused (``PodGroupError``) when they ask more members than the cap."""
        membership = parse_membership(
            pod.namespace, pod.labels, pod.annotations, pod_group=pod_group, levels=self._config.levels.names
        )
        cap = self._config.max_members
        if membership is not None and membership.min_available is not None and membership.min_available > cap:
            key = MIN_AVAILABLE_KEY if pod_group is None else "PodGroup spec.minMember"
            accepted = f"a positive integer up to {cap}, the most members a pod group may have"
            raise PodGroupError(key, str(membership.min_available), accepted, "more members than a group may have")
        return membership

    def _check_request(
        self, group: GroupRef, members: Sequence[tuple[PendingPod, PodGroupSpec | None]]
    ) -> list[Membership]:
        """Every member's membership of ``group``, or ``GangRefused`` naming the first member at fault."""
        cap = self._config.max_members
        if len(members) > cap:
            raise GangRefused(f"pod group {group}: {len(members)} members, more than the {cap} a group may have")
        gang = self._gangs.get(group)
        if gang is not None and gang.invalid:
            raise GangRefused("; ".join(gang.invalid.values()))
        memberships: list[Membership] = []
        seen: set[Key] = set()
        for pod, pod_group in members:
            where = f"pod {pod.namespace}/{pod.name}"
            if pod.namespace != group.namespace:
                raise GangRefused(f"{where} is not in the namespace of pod group {group}")
            if pod.key in seen:
                raise GangRefused(f"{where} appears more than once in pod group {group}")
            seen.add(pod.key)
            try:
                membership = self._membership(pod, pod_group)
            except PodGroupError as error:
                raise GangRefused(f"{where}: {error}") from None
            if membership is None:
                raise GangRefused(f"{where} carries no pod-group labels")
            if membership.group != group:
                raise GangRefused(f"{where} belongs to pod group {membership.group}")
            other = self._member_of.get(pod.key)
            if other is not None and other != group:
                raise GangRefused(f"{where} is already a member of pod group {other}")
            conflict = _disagreement(group, memberships, membership, from_object=pod_group is not None)
            if conflict is None and gang is not None:
                conflict = self._conflict(gang, membership, pod.key, from_object=pod_group is not None)
            if conflict is not None:
                raise GangRefused(f"{where}: {conflict}")
            memberships.append(membership)
        known = set(gang.members) if gang is not None else set()
        total = len(known | seen)
        if total > cap:
            raise GangRefused(f"pod group {group} would have {total} members, more than the {cap} a group may have")
        return memberships

    def _record(self, gang: _Gang, pod: PendingPod, membership: Membership, now: float, *, seen: bool) -> bool:
        """Add or update one member whose membership was checked; whether anything changed."""
        before = (gang.min_available, gang.spread, gang.topology_labels)
        if membership.min_available is not None:
            gang.min_available = membership.min_available
        gang.spread = membership.spread
        gang.topology_labels = membership.topology
        changed = before != (gang.min_available, gang.spread, gang.topology_labels)
        member = gang.members.get(pod.key)
        if member is None:
            self._sequence += 1
            member = gang.members[pod.key] = _Member(pod=pod, plan=self._gang_member(pod), arrival=self._sequence)
            self._member_of[pod.key] = gang.ref
            if not seen:
                member.unseen_until = now + self._config.permit_timeout_s
                self._next_due = min(self._next_due, member.unseen_until)
            return True
        if member.state is _State.PENDING and member.pod != pod:
            member.pod, member.plan = pod, self._gang_member(pod)
            return True
        return changed

    def _gang_member(self, pod: PendingPod) -> GangMember:
        demand = demand_of(pod.pod)
        return GangMember(key=pod.key, demand=demand, intent=pod.intent)

    def _conflict(self, gang: _Gang, membership: Membership, key: Key, *, from_object: bool) -> str | None:
        """Why a member ``key`` with ``membership`` disagrees with the others in ``gang`` (None: it does not)."""
        if not gang.members or (len(gang.members) == 1 and key in gang.members):
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
        return _topology_disagreement(gang.ref, membership.topology, gang.topology_labels)

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
        gang.changed()
        if gang.count(_State.RESERVED):
            self._release(gang, f"member {pod.namespace}/{pod.name} has invalid pod-group labels")
        return self._status(gang)

    def _remove(self, gang: _Gang, keys: Iterable[Key]) -> list[Key]:
        """Forget members: exactly their own reservations or charges go, or the whole group's reservations
        when it falls below min-available before binding. Returns the members whose reservations went."""
        released = []
        for key in keys:
            gang.invalid.pop(key, None)
            member = gang.members.pop(key, None)
            self._member_of.pop(key, None)
            if member is not None and member.state is not _State.PENDING:
                self._reservations.observe_pod_deleted(*key)
                if member.state is _State.RESERVED:
                    released.append(key)
        gang.changed()
        minimum = gang.min_available or 0
        if gang.count(_State.BOUND) < minimum and len(gang.members) < minimum and gang.count(_State.RESERVED):
            released += self._release(
                gang, f"pod group fell below min-available ({len(gang.members)}/{minimum}) before binding"
            )
        if not gang.members and not gang.invalid:
            del self._gangs[gang.ref]
            if self._hold is not None and self._hold[0] == gang.ref:
                self._hold = None
        return released

    def _find(self, key: Key) -> tuple[_Gang | None, _Member | None]:
        ref = self._member_of.get(key)
        gang = self._gangs.get(ref) if ref is not None else None
        return gang, None if gang is None else gang.members.get(key)

    # --- time (under the lock) -------------------------------------------------------------------------

    def _expire(self, now: float) -> None:
        """Drop the members never seen in time, then release the groups whose permit timed out."""
        if now < self._next_due:
            return
        for gang in list(self._gangs.values()):
            self._drop_unseen(gang, now)
            if gang.deadline is not None and gang.deadline <= now and gang.count(_State.RESERVED):
                self._time_out(gang)
        self._next_due = min(
            (
                due
                for gang in self._gangs.values()
                for due in (gang.deadline, *(m.unseen_until for m in gang.members.values()))
                if due is not None
            ),
            default=math.inf,
        )

    def _drop_unseen(self, gang: _Gang, now: float) -> None:
        gone = [key for key, m in gang.members.items() if m.unseen_until is not None and m.unseen_until <= now]
        if not gone:
            return
        released = self._remove(gang, gone)
        self._members_dropped += len(gone)
        why = (
            f"{len(gone)} member(s) of {gang.ref} were never seen as pods within "
            f"{self._config.permit_timeout_s:g} s of the request that named them; dropped"
        )
        if self._gangs.get(gang.ref) is gang:
            gang.message = why
        log.warning(
            "pod group members dropped: never seen as pods",
            extra={"group": str(gang.ref), "members": _names_of(gone), "released": _names_of(released), "why": why},
        )

    def _time_out(self, gang: _Gang) -> None:
        waiting = [key for key, m in gang.members.items() if m.state is _State.RESERVED]
        why = (
            f"permit timeout: {len(waiting)} member(s) of {gang.ref} not bound within "
            f"{self._permit_timeout(gang):g} s; their reservations were released"
        )
        self._release(gang, why)
        self._permit_timeouts += 1
        log.warning(
            "pod group permit timed out: reservations released",
            extra={"group": str(gang.ref), "members": _names_of(waiting), "why": why},
        )

    def _permit_timeout(self, gang: _Gang) -> float:
        return gang.permit_timeout_s or self._config.permit_timeout_s

    def _release(self, gang: _Gang, why: str) -> list[Key]:
        """Release every reserved (not bound) member together; they wait to be placed again."""
        released = []
        for member in gang.members.values():
            if member.state is _State.RESERVED:
                self._reservations.unreserve(*member.pod.key)
                member.state, member.node, member.rejected = _State.PENDING, None, why
                released.append(member.pod.key)
        gang.deadline = None
        gang.message = why
        gang.changed()
        self._refresh(gang, self._clock())
        return released

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

    def _head(self, now: float) -> _Gang | None:
        waiting = (g for g in self._gangs.values() if g.count(_State.PENDING) and self._ready(g) and not g.invalid)
        return min(waiting, key=lambda g: self._queue_key(g, now), default=None)

    # --- trying a group: prepare under the lock, plan without it, commit under it -----------------------

    def _attempt(
        self, gang: _Gang, names: list[str] | None, now: float, *, head: bool, retry: bool
    ) -> GangPlacement | GangStatus | None:
        """One try; None when ``retry`` and nothing it depends on changed since its last failed try."""
        with self._index.lock:
            prepared = self._prepare(gang, names, now, head=head)
            if prepared is None or isinstance(prepared, GangStatus):
                return None if retry and prepared is None else self._status(gang)
            snapshot = self._snapshot()
        started = time.perf_counter()
        outcome = self._plan(prepared, snapshot)
        took = time.perf_counter() - started
        with self._index.lock:
            slow_failure = isinstance(outcome, _Waiting) and took > SLOW_PLAN_S
            if slow_failure and prepared.gang.version == prepared.version:  # a changed group is planned anew
                prepared.gang.retry_at = now + RETRY_COST_FACTOR * took
            return self._commit(prepared, snapshot, outcome, now)

    def _prepare(self, gang: _Gang, names: list[str] | None, now: float, *, head: bool) -> _Try | GangStatus | None:
        if self._gangs.get(gang.ref) is not gang or gang.invalid:
            return self._status(gang)
        pending = _pending(gang)
        if not pending or not self._ready(gang):
            return self._status(gang)
        self._reservations.expire()  # single pods' reservations past their TTL: their room is free again
        starving_head = head and self._starving(gang, now)
        hold = self._hold if self._hold is not None and self._hold[0] != gang.ref else None
        facts = self._index.facts
        facts_version = (facts.labels_version, facts.pods_version)
        nominated = self._nominated_away(gang)
        memo = (
            self._index.changes,
            facts_version,
            self._locality_version,
            gang.version,
            hold,
            starving_head,
            names,
            nominated,
        )
        if gang.tried == memo or now < gang.retry_at:
            return None
        minimum = gang.min_available or 0
        placed = gang.count(_State.RESERVED) + gang.count(_State.BOUND)
        # Below min-available, only a batch that completes the group may be reserved; above it, members are
        # added to a placed group next to the others (one batch, then one at a time if the batch is too big).
        needed = max(minimum - placed, 1)
        plans = tuple(m.plan for m in pending)
        batches = (plans, plans[:needed]) if len(pending) > needed else (plans,)
        rows = self._candidate_rows(gang, names)
        index = self._index
        anchors = tuple(
            slot for m in gang.members.values() if m.node is not None and (slot := index.slot_of(m.node)) is not None
        )
        rules, node_rules = member_rules(index, [m.pod for m in pending])
        return _Try(
            gang=gang,
            version=gang.version,
            memo=memo,
            batches=batches,
            needed=plans[:needed],
            rows=rows,
            anchors=anchors,
            names=names,
            head=head,
            every_node=len(rows) == len(index),
            verdict=gang.verdict,
            rules=rules,
            node_rules=node_rules,
            facts=facts_version,
            constraints=self._constraints(gang),
        )

    def _snapshot(self) -> _Snapshot:
        """The index as it is, copied; the same copy while nothing changed (call under the lock)."""
        index = self._index
        cached = self._snapshot_cache
        if cached is not None and cached.changes == index.changes and cached.locality_version == self._locality_version:
            return cached
        live = index.arrays()
        copies: dict[str, Any] = {
            f.name: value.copy() for f in fields(live) if isinstance(value := getattr(live, f.name), np.ndarray)
        }
        arrays = replace(live, **copies)
        names = index.slot_names()
        free: dict[int, NodeGpus] = {}
        every: dict[int, NodeGpus] = {}
        for row, name in enumerate(names):
            shape = index.gpu_shape(row) if name is not None else None
            if shape is None or name is None:
                self._node_gpus.pop(row, None)
                continue
            stamp = (int(index.slot_changes[row]), name, self._locality_version)
            kept = self._node_gpus.get(row)
            if kept is None or kept[0] != stamp:
                free_gpus = NodeGpus(shape.table, shape.healthy - index.busy_gpus(row))
                kept = self._node_gpus[row] = (stamp, free_gpus, NodeGpus(shape.table, shape.healthy))
            free[row], every[row] = kept[1], kept[2]
        snapshot = self._snapshot_cache = _Snapshot(
            arrays=arrays,
            changes=index.changes,
            layout=index.layout,
            slot_names=names,
            locality=self._locality_codes(names),
            free_gpus=free,
            all_gpus=every,
            locality_version=self._locality_version,
            domains=self._domain_maps(names)[1],
        )
        return snapshot

    def _plan(self, prepared: _Try, snapshot: _Snapshot) -> GangPlan | _Waiting:
        """The plan, or why the group waits; runs without the lock, on the snapshot only."""
        gang = prepared.gang
        policy = gang.spread or SpreadPolicy.PACKED
        weights = self._config.weights
        cached = prepared.verdict
        key = (prepared.version, prepared.facts[0], snapshot.nodes_digest) if cached is not None else None
        if cached is not None and cached.key == key and isinstance(cached.plan, GangUnplaceable):
            return _Waiting(failure=None, verdict=cached)  # it cannot fit an emptied cluster: nor this one
        result: GangPlan | GangUnplaceable | None = None
        for batch in prepared.batches:
            result = _plan_within(
                prepared.constraints,
                snapshot.arrays,
                prepared.rows,
                batch,
                gpus=_yielding(snapshot.free_gpus.get),
                policy=policy,
                locality=snapshot.locality,
                anchors=prepared.anchors,
                weights=weights,
                rules=prepared.rules,
            )
            if isinstance(result, GangPlan):
                return result
        assert isinstance(result, GangUnplaceable)
        key = (prepared.version, prepared.facts[0], snapshot.nodes_digest)
        if cached is None or cached.key != key:
            emptied = _plan_within(
                prepared.constraints,
                empty_view(snapshot.arrays),
                snapshot.rows,
                prepared.needed,
                gpus=_yielding(snapshot.all_gpus.get),
                policy=policy,
                locality=snapshot.locality,
                preference=_free_share(snapshot.arrays, prepared.needed[0]),
                weights=weights,
                rules=prepared.node_rules,
            )
            cached = _Verdict(key=key, plan=emptied)
        return _Waiting(failure=result, verdict=cached)

    def _commit(
        self, prepared: _Try, snapshot: _Snapshot, outcome: GangPlan | _Waiting, now: float
    ) -> GangPlacement | GangStatus:
        gang = prepared.gang
        if self._gangs.get(gang.ref) is not gang or gang.version != prepared.version:
            return self._status(gang)  # the group changed while it was planned: the next try plans it anew
        if isinstance(outcome, GangPlan):
            if self._still_fits(outcome, snapshot, gang, prepared):
                return self._reserve(gang, outcome, prepared, now)
            return self._place_now(gang, prepared, now)
        gang.verdict = outcome.verdict
        self._explain_wait(gang, prepared, outcome, snapshot, now)
        gang.tried = prepared.memo
        return self._status(gang)

    def _still_fits(self, plan: GangPlan, snapshot: _Snapshot, gang: _Gang, prepared: _Try) -> bool:
        """Nothing changed since the snapshot on the nodes the plan uses, nor in what the constraints read,
        and none of the nodes is held for another group."""
        index = self._index
        if index.layout != snapshot.layout:
            return False
        if (index.facts.labels_version, index.facts.pods_version) != prepared.facts:
            return False
        rows = np.array(plan.rows(), dtype=np.int64)
        if bool((index.slot_changes[rows] > snapshot.changes).any()):
            return False
        names = index.names_of(rows)
        if names != [snapshot.slot_names[row] for row in rows.tolist()]:
            return False
        if self._nominated_away(gang).intersection(names):
            return False
        if self._hold is not None and self._hold[0] != gang.ref:
            return not self._hold[1].intersection(names)
        return True

    def _place_now(self, gang: _Gang, prepared: _Try, now: float) -> GangPlacement | GangStatus:
        """Plan again on the live index, under the lock: the nodes a plan chose changed while it was made.

        Only a plan that succeeded comes here, so it is rare; a group is at most ``max_members`` large.
        """
        self._reservations.expire()
        rows = self._candidate_rows(gang, prepared.names)
        names = self._index.slot_names()
        rules, _ = member_rules(self._index, [m.pod for m in _pending(gang)])
        prepared = replace(prepared, rules=rules, constraints=self._constraints(gang))
        result: GangPlan | GangUnplaceable | None = None
        for batch in prepared.batches:
            result = _plan_within(
                prepared.constraints,
                self._index.arrays(),
                rows,
                batch,
                gpus=self._gpus_of,
                policy=gang.spread or SpreadPolicy.PACKED,
                locality=self._locality_codes(names),
                anchors=prepared.anchors,
                weights=self._config.weights,
                rules=rules,
            )
            if isinstance(result, GangPlan):
                return self._reserve(gang, result, prepared, now)
        assert isinstance(result, GangUnplaceable)
        if gang.waiting_since is None:
            gang.waiting_since = now
        gang.message = result.reason
        return self._status(gang)

    def _reserve(self, gang: _Gang, plan: GangPlan, prepared: _Try, now: float) -> GangPlacement | GangStatus:
        """Reserve ``plan`` once the constraints between its members hold (else a plan made member by
        member, ``gang_rules``); under the lock."""
        index = self._index
        pods = {key: member.pod for key, member in gang.members.items()}
        conflict = plan_conflict(index, pods, plan)
        devices: dict[Key, DeviceChoice] = {}
        if conflict is None and any(pods[step.key].resource_claims for step in plan.members):
            # DRA: every member's claims on its planned node, all or nothing; else planned member by member.
            devices, conflict = allocate_members(index, pods, plan)
        if conflict is not None:
            batch = [gang.members[step.key] for step in plan.members]
            ordered = plan_in_order(
                index,
                [(member.pod, member.plan) for member in batch],
                confine(self._candidate_rows(gang, prepared.names), plan.rows(), prepared.constraints),
                gpus=self._gpus_of,
                policy=plan.policy,
                weights=self._config.weights,
                devices=devices,
            )
            if isinstance(ordered, GangUnplaceable):
                for step in plan.members:
                    index.dra.release(step.key)  # devices held while planning member by member
                if gang.waiting_since is None:
                    gang.waiting_since = now
                gang.message = f"the plan breaks a constraint between members ({conflict}); {ordered.reason}"
                gang.tried = prepared.memo  # the same cluster again would give the same answer
                return self._status(gang)
            plan = ordered
        usages = []
        placements = []
        placed = []
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
            placements.append(
                MemberPlacement(
                    step.key[0], step.key[1], node, step.cells, step.gpus, step.pinned, devices.get(step.key)
                )
            )
            placed.append(member.pod.placed_on(node))
            member.placement = placements[-1]
        self._reservations.reserve_all(usages, placed, expires=False)
        for usage in usages:
            member = gang.members[usage.key]
            # ``rejected`` stays: a member released while it waited at Permit is told REJECT first, so the
            # scheduler runs a new cycle for it and learns the new placement instead of binding the old one.
            member.state, member.node = _State.RESERVED, usage.node
        deadline = now + self._permit_timeout(gang)
        gang.deadline = max(gang.deadline or deadline, deadline)
        self._next_due = min(self._next_due, gang.deadline)
        gang.unschedulable = False
        gang.changed()
        span = plan.span(self._locality_codes(index.slot_names()))
        inside = "".join(
            f" in {c.domains.level.noun} {c.domains.value_of(plan.members[0].row)}"
            for c in prepared.constraints
            if c.required
        )
        gang.message = (
            f"placed {len(placements)} member(s) on {span.nodes} node(s){inside} ({plan.policy.value}); "
            f"waiting up to {self._permit_timeout(gang):g} s for them to bind"
        )
        if self._hold is not None and self._hold[0] == gang.ref:
            self._hold = None
        self._refresh(gang, now)
        return GangPlacement(status=self._status(gang), members=tuple(placements), deadline=gang.deadline)

    def _explain_wait(self, gang: _Gang, prepared: _Try, waiting: _Waiting, snapshot: _Snapshot, now: float) -> None:
        """Why the group waits, whether it could ever fit, and, for a starving head, the nodes it holds."""
        if gang.waiting_since is None:
            gang.waiting_since = now
        emptied = waiting.verdict.plan
        if isinstance(emptied, GangUnplaceable):
            gang.unschedulable = True
            gang.message = f"can never fit the cluster as it is: {emptied.reason}"
            return
        assert waiting.failure is not None  # only a group that can never fit is left unplanned
        gang.unschedulable = False
        gang.message = waiting.failure.reason
        holder = self._hold[0] if self._hold is not None else None
        if holder in (None, gang.ref) and prepared.head and self._starving(gang, now) and prepared.every_node:
            held = frozenset(snapshot.slot_names[r] or "" for r in emptied.rows())
            self._hold = (gang.ref, held)
            gang.message += f"; waited {now - gang.waiting_since:.0f} s: holding {len(held)} node(s) for it"

    def _candidate_rows(self, gang: _Gang, names: list[str] | None) -> IntArray:
        rows = self._index.slots(names)
        held = self._nominated_away(gang)
        if self._hold is not None and self._hold[0] != gang.ref:
            held |= self._hold[1]
        if not held:
            return rows
        keep = [i for i, r in enumerate(rows.tolist()) if self._index.name_of(r) not in held]
        return rows[keep]

    def _nominated_away(self, gang: _Gang) -> frozenset[str]:
        """Nodes held for a preemptor outside ``gang`` whose priority is >= the group's (its nominated
        members' own holds stay open to it)."""
        if self._nominations is None:
            return frozenset()
        return self._nominations.closed_to(gang.members.keys(), gang.priority)

    def _locality_codes(self, names: tuple[str | None, ...]) -> Locality:
        return self._domain_maps(names)[0]

    def _domain_maps(self, names: tuple[str | None, ...]) -> tuple[Locality, dict[str, DomainMap]]:
        """Per slot of ``names``: the domains ``packed`` prefers, and each configured level's domains."""
        key = (self._locality_version, names)
        if self._locality_cache is not None and self._locality_cache[0] == key:
            return self._locality_cache[1], self._locality_cache[2]
        levels = self._config.levels.levels
        unknown: tuple[str | None, ...] = (None,) * len(levels)
        known = [self._locality.get(name or "", unknown) for name in names]
        maps = {level.name: domain_map(level, [node[i] for node in known]) for i, level in enumerate(levels)}
        absent = np.full(len(names), -1, dtype=np.int64)

        def codes(level: str) -> IntArray:
            return maps[level].codes if level in maps else absent

        locality = Locality(zone=codes(ZONE_LEVEL), rack=codes(RACK_LEVEL), clique=codes(NVLINK_LEVEL))
        self._locality_cache = (key, locality, maps)
        return locality, maps

    def _constraints(self, gang: _Gang) -> tuple[LevelConstraint, ...]:
        """The group's topology constraints over the index's slots as they are (call under the lock).

        A configured level's domains come from ``observe_node``; a node label key used as a level of its
        own is read from the Node labels the scheduling facts keep."""
        if not gang.topology:
            return ()
        names = self._index.slot_names()
        maps = self._domain_maps(names)[1]
        resolved = []
        for constraint in gang.topology:
            level = self._config.levels.resolve(constraint.level)  # checked when the group was registered
            domains = maps[level.name] if level.configured else self._label_domains(level, len(names))
            resolved.append(LevelConstraint(domains, constraint.required))
        return tuple(resolved)

    def _label_domains(self, level: TopologyLevel, slots: int) -> DomainMap:
        codes, values = self._index.facts.label_column(level.name)
        column = np.full(slots, -1, dtype=np.int64)
        count = min(slots, len(codes))
        column[:count] = codes[:count]
        return DomainMap(level, column, values)

    def _gpus_of(self, row: int) -> NodeGpus | None:
        shape = self._index.gpu_shape(row)
        if shape is None:
            return None
        return NodeGpus(shape.table, shape.healthy - self._index.busy_gpus(row))

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


def _plan_within(
    constraints: Sequence[LevelConstraint],
    arrays: NodeArrays,
    rows: IntArray,
    members: Sequence[GangMember],
    *,
    gpus: Callable[[int], NodeGpus | None],
    policy: SpreadPolicy,
    locality: Locality,
    weights: ScoringWeights | None,
    rules: Mapping[Key, MemberRules],
    anchors: Sequence[int] = (),
    preference: FloatArray | None = None,
) -> GangPlan | GangUnplaceable:
    """``plan_gang`` within the domains the group's topology constraints allow (``plan_in_domains``)."""

    def plan(allowed: IntArray) -> GangPlan | GangUnplaceable:
        return plan_gang(
            arrays,
            allowed,
            members,
            gpus=gpus,
            policy=policy,
            locality=locality,
            anchors=anchors,
            preference=preference,
            weights=weights,
            rules=rules,
        )

    return plan_in_domains(arrays, rows, members, constraints, plan, rules=rules, anchors=anchors)


def _yielding(gpus: Callable[[int], NodeGpus | None]) -> Callable[[int], NodeGpus | None]:
    """``gpus`` that also gives up the interpreter every ``YIELD_EVERY_S`` (the planner asks once per node
    it considers): a plan made on the ticker's thread then delays a Filter call on the event loop's by
    that much at most, not by the interpreter's switch interval (5 ms) each time the call waits for it."""
    last = time.perf_counter()

    def node_gpus(row: int) -> NodeGpus | None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= YIELD_EVERY_S:
            time.sleep(0)
            last = time.perf_counter()
        return gpus(row)

    return node_gpus


def _pending(gang: _Gang) -> list[_Member]:
    return _by_arrival(gang, _State.PENDING)


def _by_arrival(gang: _Gang, state: _State) -> list[_Member]:
    return sorted((m for m in gang.members.values() if m.state is state), key=lambda m: m.arrival)


def _names(candidates: tuple[str, ...] | None) -> list[str] | None:
    return None if candidates is None else list(candidates)


def _names_of(keys: Iterable[Key]) -> list[str]:
    return [f"{namespace}/{name}" for namespace, name in keys]


def _rotated(gangs: list[_Gang], after: GroupRef | None) -> list[_Gang]:
    """``gangs`` starting after the one named ``after`` (where the last tick stopped), wrapping around."""
    refs = [g.ref for g in gangs]
    if after not in refs:
        return gangs
    start = refs.index(after) + 1
    return gangs[start:] + gangs[:start]


def _disagreement(
    group: GroupRef, earlier: Sequence[Membership], membership: Membership, *, from_object: bool
) -> str | None:
    """Why a request's member disagrees with the request's earlier members (None: it does not)."""
    if not earlier:
        return None
    first = earlier[0]
    new, old = membership.min_available, first.min_available
    if new is not None and old is not None and new != old and not from_object:
        return (
            f"invalid value {str(new)!r} for {MIN_AVAILABLE_KEY} (members disagree: the other members of "
            f"{group} say {old}); accepted: the same positive integer on every member"
        )
    if membership.spread is not first.spread:
        return (
            f"invalid value {membership.spread.value!r} for {SPREAD_KEY} (members disagree: the other "
            f"members of {group} say {first.spread.value}); accepted: the same policy on every member"
        )
    return _topology_disagreement(group, membership.topology, first.topology)


def _topology_disagreement(
    group: GroupRef, mine: tuple[DomainConstraint, ...], theirs: tuple[DomainConstraint, ...]
) -> str | None:
    """Why a member's topology labels disagree with the other members' (None: they agree)."""
    for key, required in ((REQUIRED_TOPOLOGY_KEY, True), (PREFERRED_TOPOLOGY_KEY, False)):
        own = next((c.level for c in mine if c.required is required), None)
        other = next((c.level for c in theirs if c.required is required), None)
        if own != other:
            say = "carry none" if other is None else f"say {other}"
            return (
                f"invalid value {own or ''!r} for {key} (members disagree: the other members of {group} "
                f"{say}); accepted: the same level on every member, or none on any"
            )
    return None


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
