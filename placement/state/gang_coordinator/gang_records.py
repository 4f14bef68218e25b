"""The gang coordinator's records: its configuration, what it answers (statuses, placements, permit verdicts),
its state per group and per member, and ``CoordinatorState``, the state its roles share.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from kubenexus.topology.model import NodeTopology
from placement.core.domains import (
    DEFAULT_LEVELS,
    NVLINK_LEVEL,
    RACK_KEY,
    ZONE_KEY,
    DomainMap,
    LevelConstraint,
    TopologyLevels,
)
from placement.core.gang_plan import (
    GangMember,
    GangPlan,
    GangUnplaceable,
    Locality,
    MemberRules,
    NodeGpus,
)
from placement.core.pod_placement import Placement
from placement.core.podgroup import (
    DomainConstraint,
    GroupRef,
    PermitVerdict,
    SpreadPolicy,
)
from placement.core.pods import PendingPod
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import IntArray, NodeArrays
from placement.state.cluster_index import ClusterIndex
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
    # A failed plan that took longer than this (seconds of real time) waits RETRY_COST_FACTOR times as long
    # before its next try; math.inf: never waits (what tests on a fake clock want, whatever the machine's load).
    slow_plan_s: float = SLOW_PLAN_S

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
class GangPlacement:
    """A group reserved: where each member reserved by this call goes (or, when this call reserved none,
    each member reserved earlier, by a retry, and not bound yet), until when it may bind."""

    status: GangStatus
    members: tuple[Placement, ...]
    deadline: float  # members not bound by then are released (the coordinator's clock)


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
    placement: Placement | None = None  # while reserved
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


class CoordinatorState:
    """The state every role of the coordinator shares (the roles are its bases: ``placement.state.gang_coordinator``),
    and the node observations: each node's topology domains, and which nodes other work may use."""

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


def _names_of(keys: Iterable[Key]) -> list[str]:
    return [f"{namespace}/{name}" for namespace, name in keys]
