"""Preemption: when a pod or a gang fits nowhere, the cheapest set of lower-priority victims whose eviction
lets the exact plan succeed, simulated before anything is evicted (docs/preemption.md).

``find_preemption`` decides and changes nothing; the caller holds ``index.lock``, evicts the victims
(Eviction API), nominates the preemptors (``Nominations``) and says who preempted whom.

* **Eligibility** (``PodEligibleToPreemptOthers``): a preemptor with ``preemptionPolicy: Never`` evicts
  nobody. Victims have a priority strictly lower than the preemptor's (a gang's: its lowest member's).
* **Units**: a pod of a pod group is evicted with every placed member of its group (``group_of``), on
  whatever node they run, never half a gang; the room they free elsewhere is the preemptor's too. A pod
  whose group holds any member of priority >= the preemptor's is not a victim at all. Only bound pods are
  victims: a reservation not yet bound is in flight, the Eviction API cannot evict it.
* **Candidates**: nodes the preemptor's constraints refuse for reasons eviction cannot fix (no topology
  report, its node name, selector or affinity, taints, cordon, readiness; and, a difference from
  upstream, pod constraints such as inter-pod anti-affinity, which upstream re-judges with the victims
  removed) are skipped. A cheap bound orders the rest: the lowest priority whose units, all gone, let the
  node-level requests fit; nodes are then judged exactly in that order until enough candidates are found
  (``candidate_count``: 10% of the nodes, at least 100, as upstream) or no later node can beat the best.
* **Exactness**: each candidate is judged on the node's arrays recomputed without the victims
  (``ClusterIndex.arrays_without``), through the same admission the placement uses: the vectorised filter
  (resources, the pod's NUMA intent), then the kubelet's Topology Manager model and the device plugin's GPU
  choice (``plan_on_node``) for a lone pod, the gang planner (``plan_gang``) for a gang. A node where even
  every lower-priority unit gone leaves the kubelet refusing takes no victims.
* **Reprieve and budgets**: ``placement.core.preemption_rules.reprieve``; a candidate whose victims would break a
  PodDisruptionBudget is not chosen at all (upstream only prefers fewer violations; the Eviction API we
  evict through refuses such an eviction).
* **Choice**: ``CandidateKey``: the lowest highest victim priority, the smallest priority sum, the fewest
  victims, the least topology damage (GPUs freed the preemptor leaves unused), the lowest tenant tier
  among the victims (``victim_tier``), then the node names.

* **DRA** (``state.eviction_devices``): a preemptor's claims are judged after the kubelet's admission,
  with the devices the victims on the node free (a claim whose every consumer is a victim): those
  allocated already keep the pod to their nodes, the others must fit by the best fit Reserve uses; for a
  lone pod the reprieve also keeps the devices' links and NUMA alignment as good as with every victim
  gone. A gang's members compete for a node's devices: a node counts a member only where its claims fit
  after those of the members before it there, and the confirmed plan is checked the same way, member by
  member in plan order, as ``gang_rules.allocate_members`` will hold them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from placement.core.constraints.constraint_types import PlacedPod
from placement.core.decision import NodePlan
from placement.core.domains import DEFAULT_LEVELS, TopologyLevel, TopologyLevels
from placement.core.dra.pools import DeviceRef
from placement.core.gang_plan import (
    ExactChecks,
    GangMember,
    GangPlan,
    GangUnplaceable,
    Locality,
    MemberPlan,
    MemberRules,
    NodeGpus,
    Workspace,
    largest_first,
    plan_gang,
)
from placement.core.gpu_sets import score_gpu_set
from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod, PodUsage
from placement.core.preemption_rules import (
    CandidateKey,
    DisruptionBudget,
    Unit,
    UnitPod,
    broken_budget,
    candidate_count,
    reprieve,
)
from placement.core.vocabulary import (
    GPU_RESOURCE,
    GPU_SHARE,
    FloatArray,
    IntArray,
    PodDemand,
    Rejected,
    RejectionKind,
    demand_of,
)
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import PodWithDevices
from placement.state.eviction_check import plan_without
from placement.state.eviction_devices import ClaimsAfterEviction, chosen_devices
from placement.state.gang_rules import member_rules

Key = tuple[str, str]
# Constraint refusals eviction cannot lift (see the module docstring).
_UNRESOLVABLE = frozenset(
    {
        RejectionKind.UNKNOWN_NODE,
        RejectionKind.NO_TOPOLOGY,
        RejectionKind.NODE_CONSTRAINT,
        RejectionKind.POD_CONSTRAINT,
    }
)
_SHOWN = 5  # victims named in a reason; the rest are counted
GANG_SAMPLE = 16  # nodes with an option to find for a gang before choosing (see ``_preempt_for_gang``)
_UNLINKED = -1  # the link quality of a plan with fewer than two GPUs: any plan that holds matches it


@dataclass(frozen=True)
class Victim:
    namespace: str
    name: str
    node: str
    priority: int
    group: str  # "namespace/name" of the gang it is evicted with (whole); "" for a lone pod


@dataclass(frozen=True)
class Preemption:
    victims: tuple[Victim, ...]
    nominations: tuple[tuple[tuple[str, str], str], ...]  # (preemptor pod key, node)
    reason: str  # one sentence for events/logs: what is evicted, on which nodes, and why that suffices


@dataclass(frozen=True)
class NoPreemption:
    reason: str  # one sentence: why nothing may be evicted


TierOf = Callable[[str, Mapping[str, str]], int]


def find_preemption(
    index: ClusterIndex,
    preemptors: Sequence[PendingPod],
    *,
    candidates: Sequence[str] | None = None,
    constraints: Sequence[DomainConstraint] = (),
    policy: SpreadPolicy = SpreadPolicy.PACKED,
    locality: Locality | None = None,
    now: float | None = None,
    victim_tier: TierOf | None = None,
    budgets: Sequence[DisruptionBudget] | None = None,
    levels: TopologyLevels = DEFAULT_LEVELS,
) -> Preemption | NoPreemption:
    """The cheapest preemption that lets ``preemptors`` (one lone pod, or a gang's pending members) be
    placed, or why there is none. Caller holds ``index.lock``. Pure decision: changes nothing.

    ``now``: wall-clock seconds, to age budgets' ``disruptedPods`` (default: the clock now). ``budgets``:
    the PodDisruptionBudgets (default: those in ``index.facts``). ``levels``: the cluster's topology levels,
    which a constraint's level names (``placement.core.domains``; the gang coordinator's).
    """
    if not preemptors:
        return NoPreemption("no preemptor was given")
    who = _who(preemptors)
    never = [p for p in preemptors if p.preempt_never]
    if never:
        return NoPreemption(f"{who} has preemptionPolicy Never: it waits for room and evicts nobody")
    judge = _Judge(
        index=index,
        priority=min(p.priority for p in preemptors),
        budgets=tuple(budgets if budgets is not None else index.facts.disruption_budgets()),
        now=time.time() if now is None else now,
        tier=victim_tier,
    )
    rows = _candidate_rows(index, preemptors, candidates)
    if rows.size == 0:
        return NoPreemption(
            f"no node can take {who} even with pods evicted: every candidate refuses it for reasons eviction "
            "cannot fix (no topology report, node selector or affinity, taints, pod constraints)"
        )
    if len(preemptors) == 1 and not constraints:
        return _preempt_for_pod(judge, preemptors[0], rows)
    return _preempt_for_gang(
        judge,
        preemptors,
        rows,
        constraints=constraints,
        policy=policy,
        locality=locality,
        levels=levels,
    )


# --- the cluster as preemption reads it --------------------------------------------------------------


@dataclass
class _Judge:
    """What one decision reads: the index, the preemptor's priority, the budgets, the units found."""

    index: ClusterIndex
    priority: int
    budgets: tuple[DisruptionBudget, ...]
    now: float
    tier: TierOf | None
    _groups: dict[str, list[Key]] | None = None
    _units: dict[str, Unit | None] | None = None

    def units_on(self, name: str) -> list[Unit]:
        """The evictable units with a pod on node ``name``: lower priority, bound, every member known."""
        if self._units is None:
            self._units = {}
        units: dict[str, Unit] = {}
        for usage, bound, _ in self.index.pods_on(name):
            if not bound:
                continue
            placed = self.index.facts.pod(*usage.key)
            if placed is None:
                continue  # its priority is not known: not a victim
            unit_name = placed.group or f"{usage.namespace}/{usage.name}"
            if unit_name in units:
                continue
            if unit_name not in self._units:
                self._units[unit_name] = self._unit(placed, usage)
            unit = self._units[unit_name]
            if unit is not None:
                units[unit_name] = unit
        return list(units.values())

    def _unit(self, placed: PlacedPod, usage: PodUsage) -> Unit | None:
        if not placed.group:
            if placed.priority >= self.priority:
                return None
            return Unit(group="", pods=(_unit_pod(placed, usage),))
        members = []
        for key in self._members(placed.group):
            member = self.index.facts.pod(*key)
            held = self.index.pod(*key)
            if member is None or held is None:
                continue
            member_usage, bound, _ = held
            if member.priority >= self.priority or not bound:
                return None  # a member the preemptor may not evict, or one in flight: the gang stays whole
            members.append(_unit_pod(member, member_usage))
        return Unit(group=placed.group, pods=tuple(sorted(members, key=lambda p: p.key))) if members else None

    def _members(self, group: str) -> list[Key]:
        if self._groups is None:
            self._groups = {}
            pods, _ = self.index.facts.placed_pods()
            for pod in pods:
                if pod.group:
                    self._groups.setdefault(pod.group, []).append((pod.namespace, pod.name))
        return self._groups.get(group, [])

    def tier_of(self, pod: UnitPod) -> int:
        return 0 if self.tier is None else self.tier(pod.key[0], dict(pod.labels))

    def fits_budgets(self, victims: Sequence[Unit]) -> str | None:
        """None, or the sentence saying which budget the victims break."""
        broken = broken_budget(victims, self.budgets, self.now)
        if broken is None:
            return None
        budget, covered = broken
        return (
            f"evicting them would disrupt {covered} pod(s) of PodDisruptionBudget {budget.namespace}/{budget.name}, "
            f"which allows {budget.disruptions_allowed}"
        )


def _unit_pod(placed: PlacedPod, usage: PodUsage) -> UnitPod:
    gpus = int(dict(usage.demand.device_requests).get(GPU_RESOURCE, 0))
    return UnitPod(key=usage.key, node=usage.node, priority=placed.priority, labels=placed.labels, gpus=gpus)


def _candidate_rows(
    index: ClusterIndex, preemptors: Sequence[PendingPod], candidates: Sequence[str] | None
) -> IntArray:
    """The slots of the candidates, less those every preemptor is refused on for reasons eviction cannot fix."""
    rows = index.slots(None if candidates is None else list(candidates))
    rows = rows[index.arrays().numa_count[rows] > 0]
    keep = np.zeros(len(rows), dtype=np.bool_)
    seen: set[object] = set()
    for pod in preemptors:
        signature = (pod.namespace, pod.sorted_labels(), pod.constraints)
        if signature in seen:
            continue
        seen.add(signature)
        judge = index.judge(pod)
        # A pod's claims are judged by the exact check, with the victims' devices freed: not here, where
        # the devices they hold count as taken.
        verdict = (judge.constraints if isinstance(judge, PodWithDevices) else judge).verdict(rows)
        unresolvable = np.array(
            [code != 0 and verdict.kinds[code - 1] in _UNRESOLVABLE for code in verdict.reason_codes.tolist()],
            dtype=np.bool_,
        )
        keep |= ~unresolvable
    kept: IntArray = rows[keep]
    return kept


@dataclass(frozen=True, order=True)
class _Bound:
    """A lower bound on a node's best candidate, what the nodes are judged in order of."""

    highest_priority: int  # no candidate here evicts only pods of lower priority
    victims: int  # evicting the lowest-priority pods first, the pods it takes to get there


_NO_VICTIMS = -(2**31)


def _in_bound_order(
    judge: _Judge, rows: IntArray, node_requests: Sequence[tuple[str, float]]
) -> list[tuple[_Bound, str, int]]:
    """The nodes some eviction may open to a pod asking ``node_requests``, cheapest bound first.

    Per node, vectorised over every pod of lower priority: the lowest priority p such that, with every such
    pod of priority <= p gone, the node's free node-level amounts hold the pod (a GPU share gone counting
    as the GPUs it shares freed whole: an upper bound). The exact check can only
    refuse more (and a pod's unit, its whole gang, has a priority >= its own), so no candidate on the node
    has a highest victim priority below p. A node where even all of them gone leave too little is left out.
    """
    index = judge.index
    arrays = index.arrays()
    wanted = [(name, amount) for name, amount in node_requests if amount > 0]
    columns = [arrays.column(name) for name, _ in wanted]
    if any(column is None for column in columns):
        return []
    names = [name for name, _ in wanted]
    amounts = np.array([amount for _, amount in wanted], dtype=np.float64)
    free = arrays.node_free[np.array(columns, dtype=np.int64)][:, rows].T  # [nodes, resources]
    node_names = index.names_of(rows)
    priority_of = index.facts.pod_priorities()
    positions: list[int] = []
    priorities: list[int] = []
    requests: list[list[float]] = []
    freed_by: dict[tuple[PodDemand, int], list[float]] = {}  # pods share a handful of shapes
    for position, usage in index.bound_pods(rows):
        pod_priority = priority_of.get(usage.key)
        if pod_priority is None or pod_priority >= judge.priority:
            continue
        shape = (usage.demand, len(usage.gpus))
        freed = freed_by.get(shape)
        if freed is None:
            asked = dict(usage.demand.node_requests)
            if GPU_SHARE in dict(usage.demand.device_requests):
                # The node counts every GPU a share holds as taken for whole-GPU requests: gone, the share
                # may give each back (at most: another share on one of them keeps it; the exact check sees).
                asked[GPU_RESOURCE] = asked.get(GPU_RESOURCE, 0.0) + max(len(usage.gpus), 1)
            freed = freed_by[shape] = [asked.get(n, 0.0) for n in names]
        positions.append(position)
        priorities.append(pod_priority)
        requests.append(freed)
    fits_now = (free >= amounts).all(axis=1)
    bounds: dict[int, _Bound] = {int(p): _Bound(_NO_VICTIMS, 0) for p in np.flatnonzero(fits_now).tolist()}
    if positions:
        where = np.array(positions, dtype=np.int64)
        priority = np.array(priorities, dtype=np.int64)
        order = np.lexsort((priority, where))
        where, priority = where[order], priority[order]
        amounts_freed = np.array(requests, dtype=np.float64).reshape(len(order), len(names))[order]
        starts = np.flatnonzero(np.r_[True, where[1:] != where[:-1]])
        lengths = np.diff(np.r_[starts, where.size])
        total = np.cumsum(amounts_freed, axis=0)
        before = np.repeat(np.vstack([np.zeros((1, len(names))), total[starts[1:] - 1]]), lengths, axis=0)
        enough = ((free[where] + total - before) >= amounts).all(axis=1)
        rank = np.arange(where.size) - np.repeat(starts, lengths)
        first = np.minimum.reduceat(np.where(enough, rank, where.size), starts)
        for group, start in enumerate(starts.tolist()):
            position = int(where[start])
            if position in bounds or first[group] >= where.size:
                continue
            at = start + int(first[group])
            bounds[position] = _Bound(int(priority[at]), int(first[group]) + 1)
    ranked = sorted(bounds.items(), key=lambda item: (item[1], node_names[item[0]]))
    return [(bound, node_names[position], int(rows[position])) for position, bound in ranked]


def _preempt_for_pod(judge: _Judge, pod: PendingPod, rows: IntArray) -> Preemption | NoPreemption:
    index = judge.index
    who = _who([pod])
    devices = ClaimsAfterEviction.of(index.judge(pod)) if pod.resource_claims else None
    if isinstance(devices, Rejected):
        return NoPreemption(f"{who} cannot use its ResourceClaims on any node ({devices.message}): it evicts nobody")
    if devices is not None and devices.claims.allocated:
        rows = rows[np.array([devices.usable_on(int(row)) for row in rows.tolist()], dtype=np.bool_)]
        if rows.size == 0:
            return NoPreemption(
                f"{who} uses ResourceClaims {devices.allocated_names()} allocated already to devices that no "
                "candidate node can use: it must run where they are, and eviction does not move an allocated "
                "claim, so it evicts nobody"
            )
    demand = demand_of(pod.pod)
    gpus_asked = int(dict(demand.device_requests).get(GPU_RESOURCE, 0))
    order = _in_bound_order(judge, rows, demand.node_requests)
    refused_by_budget = ""
    wanted = candidate_count(len(rows))
    best: tuple[CandidateKey, str, list[Unit]] | None = None
    found = 0
    kubelet_refusals: list[str] = []
    device_refusal = ""  # the first node's: why the claims do not fit there even with every victim gone
    memo: dict[tuple[object, ...], _Quality | _DevicesRefused | None] = {}
    for bound, name, slot in order:
        if best is not None and (found >= wanted or bound.highest_priority > best[0].highest_priority):
            break
        units = judge.units_on(name)
        on_node = {usage.key for usage, _, _ in index.pods_on(name)}
        everything = frozenset(k for unit in units for k in unit.pod_keys()) & on_node
        target = _pod_quality(index, slot, pod=pod, demand=demand, devices=devices, evicted=everything, memo=memo)
        if target is None:
            kubelet_refusals.append(name)
            continue
        if isinstance(target, _DevicesRefused):
            device_refusal = device_refusal or f"on node {name}, {target.reason}"
            continue

        room = _NodeRoom.of(index, name, slot, everything, demand)

        def fits(
            evicted: frozenset[Key],
            slot: int = slot,
            on_node: set[Key] = on_node,
            target: _Quality = target,
            room: _NodeRoom = room,
        ) -> bool:
            if not room.holds(evicted):
                return False  # short of node-level amounts: the exact check would refuse too
            gone = evicted & on_node
            quality = _pod_quality(index, slot, pod=pod, demand=demand, devices=devices, evicted=gone, memo=memo)
            return isinstance(quality, _Quality) and quality.at_least(target)

        victims = reprieve(units, fits, judge.budgets, judge.now)
        if victims is None:
            kubelet_refusals.append(name)
            continue
        broken = judge.fits_budgets(victims)
        if broken is not None:
            refused_by_budget = f"on node {name}, {broken}"
            continue
        found += 1
        key = CandidateKey.of(victims, gpus_used=gpus_asked, where=(name,), tier=judge.tier_of)
        if best is None or key < best[0]:
            best = (key, name, victims)
    if best is None:
        reason = _nothing_suffices(who, len(order), kubelet_refusals, refused_by_budget)
        if device_refusal and not refused_by_budget:
            reason = f"{reason}; its ResourceClaims do not fit even with them all gone, {device_refusal}"
        return NoPreemption(reason)
    _, node, victims = best
    return Preemption(
        victims=_victims(victims),
        nominations=((pod.key, node),),
        reason=_reason(who, victims, (node,), "the kubelet's admission then succeeds there"),
    )


@dataclass(frozen=True)
class _NodeRoom:
    """A node's free node-level amounts with every candidate victim gone, and what each of those pods asks:
    a plan that keeps pods back whose requests no longer leave the preemptor's is refused without the exact
    check (a necessary condition only: a kept GPU share's hold on a whole GPU is not counted here)."""

    free: FloatArray  # [resource] with every victim on the node gone, for the preemptor's node requests
    asked: FloatArray  # [resource] what the preemptor asks
    requests: Mapping[Key, FloatArray]  # each victim on the node: what it asks, for the same resources

    @classmethod
    def of(cls, index: ClusterIndex, name: str, slot: int, gone: frozenset[Key], demand: PodDemand) -> _NodeRoom:
        wanted = [(resource, amount) for resource, amount in demand.node_requests if amount > 0]
        arrays = index.arrays_without(gone, slots=[slot])
        columns = [arrays.column(resource) for resource, _ in wanted]
        known = [(column, amount) for column, (_, amount) in zip(columns, wanted, strict=True) if column is not None]
        free = np.array([arrays.node_free[column, 0] for column, _ in known], dtype=np.float64)
        names = [resource for (resource, _), column in zip(wanted, columns, strict=True) if column is not None]
        requests = {}
        for usage, _, _ in index.pods_on(name):
            if usage.key in gone:
                asked = dict(usage.demand.node_requests)
                requests[usage.key] = np.array([asked.get(resource, 0.0) for resource in names], dtype=np.float64)
        return cls(free, np.array([amount for _, amount in known], dtype=np.float64), requests)

    def holds(self, evicted: frozenset[Key]) -> bool:
        kept = [request for key, request in self.requests.items() if key not in evicted]
        left = self.free - np.sum(kept, axis=0) if kept else self.free
        return bool((left >= self.asked).all())


@dataclass(frozen=True)
class _Quality:
    """How good a plan with some victims gone is, as the reprieve compares it with every victim gone."""

    weakest_link: int  # among the GPUs the device plugin would hand out (``_UNLINKED``: fewer than two)
    device_links: Fraction = Fraction(1)  # the claims' best fit: its links, and its NUMA alignment
    device_numa: Fraction = Fraction(1)

    def at_least(self, other: _Quality) -> bool:
        return (
            self.weakest_link >= other.weakest_link
            and self.device_links >= other.device_links
            and self.device_numa >= other.device_numa
        )


@dataclass(frozen=True)
class _DevicesRefused:
    """The kubelet admits the pod, but its ResourceClaims do not fit with the victims' devices freed."""

    reason: str


def _pod_quality(
    index: ClusterIndex,
    slot: int,
    *,
    pod: PendingPod,
    demand: PodDemand,
    devices: ClaimsAfterEviction | None,
    evicted: frozenset[Key],
    memo: dict[tuple[object, ...], _Quality | _DevicesRefused | None],
) -> _Quality | _DevicesRefused | None:
    """None when ``pod`` is refused on ``slot`` with the pods ``evicted`` gone (``eviction_check.plan_without``:
    the vectorised filter, the kubelet's Topology Manager, the device plugin's GPU choice); then, for a pod
    with claims, ``_DevicesRefused`` when they do not fit with the devices the victims free
    (``ClaimsAfterEviction.fit``, Reserve's best fit). Else the plan's quality: the weakest link among the
    GPUs the kubelet would hand it, and the links and NUMA alignment of the devices best fit chooses. The
    reprieve keeps a victim back only while the quality stays as good as with every victim gone: the pods
    evicted are those whose GPUs form the set the kubelet (or best fit) hands out, an NVLink-connected one
    wherever eviction can free one."""
    key = (slot, evicted)
    if key in memo:
        return memo[key]
    plan = plan_without(index, slot, pod, demand, evicted)
    quality: _Quality | _DevicesRefused | None = None
    if isinstance(plan, NodePlan):
        shape = index.gpu_shape(slot)
        weakest = score_gpu_set(shape.table, plan.gpus).weakest_rank if shape is not None and plan.gpus else None
        quality = _Quality(_UNLINKED if weakest is None else weakest)
        fit = None if devices is None else devices.fit(index, slot, plan, evicted)
        if isinstance(fit, Rejected):
            quality = _DevicesRefused(fit.message)
        elif fit is not None:
            quality = replace(quality, device_links=fit.score.links, device_numa=fit.score.numa)
    memo[key] = quality
    return quality


# --- a gang ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _NodeOption:
    """Members a node can take with some of its units evicted."""

    slot: int
    name: str
    members: int
    victims: tuple[Unit, ...]
    key: CandidateKey


def _preempt_for_gang(
    judge: _Judge,
    preemptors: Sequence[PendingPod],
    rows: IntArray,
    *,
    constraints: Sequence[DomainConstraint],
    policy: SpreadPolicy,
    locality: Locality | None,
    levels: TopologyLevels,
) -> Preemption | NoPreemption:
    index = judge.index
    who = _who(preemptors)
    # The largest first, as the gang planner plans them: a node's room counts the members it holds in that
    # order, so with mixed shapes (a driver and its executors) an option never counts a small member where
    # the plan will need a large one.
    members = sorted(
        (GangMember(key=p.key, demand=demand_of(p.pod), intent=p.intent) for p in preemptors), key=largest_first
    )
    claims = _member_claims(index, preemptors)
    if isinstance(claims, Rejected):
        return NoPreemption(f"{who} cannot use its ResourceClaims on any node ({claims.message}): it evicts nobody")
    rules, _ = member_rules(index, list(preemptors), evicting=True)
    need = len(members)
    demand = members[0].demand
    gpus_each = int(dict(demand.device_requests).get(GPU_RESOURCE, 0))
    required = [c for c in constraints if c.required]
    level = levels.resolve(required[0].level) if required else None
    domain = _domains(index, level) if level is not None else None
    if level is not None and domain is not None:
        rows = rows[domain[rows] >= 0]
        if rows.size == 0:
            return NoPreemption(f"no candidate node of {who} carries a label of its {level.describe()}")
    # Bound by the least any member asks of each resource: only a node that can take no member is left out.
    order = _in_bound_order(judge, rows, _least_asked(members))
    # Nodes to find before choosing: enough for two full gangs' worth of options, at least GANG_SAMPLE.
    wanted = min(max(2 * need, GANG_SAMPLE), len(rows))
    options: list[_NodeOption] = []
    kubelet_refusals: list[str] = []
    device_refusal = ""  # the first node's: why the members' claims do not fit there even with every victim gone
    memo: dict[tuple[object, ...], _Room] = {}
    checks = ExactChecks()  # identical nodes in identical states are judged once
    covered: dict[int, int] = {}  # domain code (0 without a required level) -> members the options hold
    chosen: tuple[CandidateKey, list[_NodeOption], list[Unit]] | None = None
    for bound, name, slot in order:
        if chosen is not None and (len(options) >= wanted or bound.highest_priority > chosen[0].highest_priority):
            break
        units = judge.units_on(name)
        on_node = {usage.key for usage, _, _ in index.pods_on(name)}
        everything = frozenset(k for u in units for k in u.pod_keys()) & on_node
        room = _members_fit(index, slot, members, everything, memo, checks=checks, claims=claims, at_least=1)
        if room.devices_refused:
            device_refusal = device_refusal or f"on node {name}, {room.devices_refused}"
        if room.members == 0:
            if not room.devices_refused:
                kubelet_refusals.append(name)
            continue
        target = min(room.members, need)

        def fits(evicted: frozenset[Key], slot: int = slot, on_node: set[Key] = on_node, target: int = target) -> bool:
            room = _members_fit(
                index, slot, members, evicted & on_node, memo, checks=checks, claims=claims, at_least=target
            )
            return room.members >= target

        victims = reprieve(units, fits, judge.budgets, judge.now)
        if victims is None or judge.fits_budgets(victims) is not None:
            continue
        key = CandidateKey.of(victims, gpus_used=target * gpus_each, where=(name,), tier=judge.tier_of)
        options.append(_NodeOption(slot, name, target, tuple(victims), key))
        code = 0 if domain is None else int(domain[slot])
        covered[code] = covered.get(code, 0) + target
        if covered[code] >= need:
            chosen = _choose(options, need, domain, judge, gpus_each) or chosen
    if chosen is None:
        reason = _nothing_suffices(who, len(order), kubelet_refusals, "")
        if device_refusal:
            reason += f"; its members' ResourceClaims do not fit even with them all gone, {device_refusal}"
        if level is not None:
            reason += f"; its members must all be in one {level.noun}"
        return NoPreemption(reason)
    _, picked, victims = chosen
    planning = GangPlanning(policy=policy, locality=locality, rules=rules, claims=claims)
    confirmed = _confirm(judge, picked, options, domain, members=members, planning=planning)
    if isinstance(confirmed, str):
        return NoPreemption(f"{who}: even after evicting the cheapest victims the gang does not fit: {confirmed}")
    plan, victims = confirmed
    nominations = tuple((m.key, index.name_of(m.row) or "") for m in plan.members)
    nodes = tuple(dict.fromkeys(node for _, node in nominations))
    return Preemption(
        victims=_victims(victims),
        nominations=nominations,
        reason=_reason(who, victims, nodes, "the gang planner then places every member"),
    )


@dataclass(frozen=True)
class GangPlanning:
    """How the gang planner lays the preemptor's members out: its spread policy, locality and rules; and
    the members' claims each plan is checked with (``_claims_refusal``)."""

    policy: SpreadPolicy
    locality: Locality | None
    rules: Mapping[Key, MemberRules]
    claims: Mapping[Key, ClaimsAfterEviction]


def _confirm(
    judge: _Judge,
    picked: Sequence[_NodeOption],
    options: Sequence[_NodeOption],
    domain: IntArray | None,
    *,
    members: Sequence[GangMember],
    planning: GangPlanning,
) -> tuple[GangPlan, list[Unit]] | str:
    """The gang planner's plan on the chosen nodes with their victims gone, and the victims it needs.

    Each option counts the members a node holds alone, the largest first; the plan lays the members out
    together and may need another mix (a driver's CPUs where an executor was counted). Where it fails on
    the chosen nodes, the next cheapest options of the same domain join, one at a time, until it holds;
    then only the victims on the nodes it uses (with their gangs, whole) are kept, when the plan still
    holds without the others. With claims, a plan must hold them too (``_plan_checked``). The answer is
    the last reason when no option set holds it.
    """
    index = judge.index
    code = None if domain is None else int(domain[picked[0].slot])
    spare = [
        option
        for option in sorted(options, key=lambda o: o.key)
        if option not in picked and (code is None or domain is None or int(domain[option.slot]) == code)
    ]
    tried = list(picked)
    while True:
        victims = list({unit.name: unit for option in tried for unit in option.victims}.values())
        slots = [option.slot for option in tried]
        plan = _plan_checked(index, slots, members, victims, planning)
        if isinstance(plan, GangPlan):
            used = {index.name_of(step.row) for step in plan.members}
            needed = [unit for unit in victims if any(pod.node in used for pod in unit.pods)]
            if len(needed) < len(victims):
                fewer = _plan_checked(index, slots, members, needed, planning)
                if isinstance(fewer, GangPlan):
                    return fewer, needed
            return plan, victims
        if not spare:
            return plan
        extra = spare.pop(0)
        if judge.fits_budgets([*victims, *extra.victims]) is None:
            tried.append(extra)


def _plan_checked(
    index: ClusterIndex,
    slots: Sequence[int],
    members: Sequence[GangMember],
    victims: Sequence[Unit],
    planning: GangPlanning,
) -> GangPlan | str:
    """The gang planner's plan with the victims gone, its members' claims fitting (``_claims_refusal``); or,
    as the reservation does when they do not (``gang_rules.plan_in_order``), a plan made member by member
    with the claims judged as each is placed (``_plan_in_order``). Or the reason neither holds."""
    plan = _plan_without(index, slots, members, victims, planning)
    if isinstance(plan, GangUnplaceable):
        return plan.reason
    refused = _claims_refusal(index, plan, victims, planning)
    if refused is None:
        return plan
    ordered = _plan_in_order(index, slots, members, victims, planning)
    return ordered if isinstance(ordered, GangPlan) else f"{refused}; placed member by member, {ordered}"


def _plan_in_order(
    index: ClusterIndex,
    slots: Sequence[int],
    members: Sequence[GangMember],
    victims: Sequence[Unit],
    planning: GangPlanning,
) -> GangPlan | str:
    """Each member in turn on the first of ``slots`` its rules admit where the kubelet's model takes it with
    those before it placed and its claims fit with the devices the victims there free, those chosen for the
    members before it on the node taken; or why a member fits none. Greedy, as ``gang_rules.plan_in_order``
    (which ranks the nodes by score: the reservation may choose others among the nominated nodes)."""
    evicted = frozenset(key for unit in victims for key in unit.pod_keys())
    workspace = Workspace(index.arrays_without(evicted), _gpus_without(index, evicted))
    taken: dict[int, frozenset[DeviceRef]] = {}
    apart: dict[int, set[int]] = {}  # per rules kept one per node: the slots their members took
    placed: list[MemberPlan] = []
    for member in members:
        rules = planning.rules.get(member.key)
        used = apart.setdefault(id(rules), set()) if rules is not None and rules.one_per_node else set()
        claims = planning.claims.get(member.key)
        why = "no node admits it"
        for slot in slots:
            if (rules is not None and int(rules.verdict.reason_codes[slot]) != 0) or slot in used:
                continue
            outcome = workspace.place(member, slot)
            if isinstance(outcome, str):
                continue
            if claims is not None:
                node = index.name_of(slot) or ""
                gone = evicted & {usage.key for usage, _, _ in index.pods_on(node)}
                plan = NodePlan(row=slot, cells=outcome.cells, pinned=outcome.pinned, gpus=outcome.gpus)
                fit = claims.fit(index, slot, plan, gone, taken_again=taken.get(slot, frozenset()))
                if isinstance(fit, Rejected):
                    # Its cells stay charged in the workspace (it has no undo): later members see less room.
                    why = f"on {node}: {fit.message}"
                    continue
                if fit is not None:
                    taken[slot] = taken.get(slot, frozenset()) | chosen_devices(fit)
            used.add(slot)
            placed.append(outcome)
            break
        else:
            return f"{len(placed)} of {len(members)} placed; member {'/'.join(member.key)} fits no node ({why})"
    return GangPlan(members=tuple(placed), policy=planning.policy)


def _plan_without(
    index: ClusterIndex,
    slots: Sequence[int],
    members: Sequence[GangMember],
    victims: Sequence[Unit],
    planning: GangPlanning,
) -> GangPlan | GangUnplaceable:
    evicted = frozenset(key for unit in victims for key in unit.pod_keys())
    return plan_gang(
        index.arrays_without(evicted),
        np.array(slots, dtype=np.int64),
        members,
        gpus=_gpus_without(index, evicted),
        policy=planning.policy,
        locality=planning.locality,
        rules=planning.rules,
    )


def _member_claims(index: ClusterIndex, preemptors: Sequence[PendingPod]) -> dict[Key, ClaimsAfterEviction] | Rejected:
    """The claims of the members that have any, or why one member's cannot be used anywhere."""
    claims: dict[Key, ClaimsAfterEviction] = {}
    for pod in preemptors:
        if not pod.resource_claims:
            continue
        found = ClaimsAfterEviction.of(index.judge(pod))
        if isinstance(found, Rejected):
            return Rejected(f"member {pod.namespace}/{pod.name}: {found.message}", found.kind)
        if found is not None:
            claims[pod.key] = found
    return claims


def _claims_refusal(index: ClusterIndex, plan: GangPlan, victims: Sequence[Unit], planning: GangPlanning) -> str | None:
    """Why a member's claims do not fit on its planned node with the devices the victims there free, the
    members judged in plan order, each seeing the devices chosen for those before it on its node taken (as
    ``gang_rules.allocate_members`` holds them); None when every member's fit."""
    if not planning.claims:
        return None
    evicted = frozenset(key for unit in victims for key in unit.pod_keys())
    taken: dict[int, frozenset[DeviceRef]] = {}
    for step in plan.members:
        claims = planning.claims.get(step.key)
        if claims is None:
            continue
        node = index.name_of(step.row) or ""
        gone = evicted & {usage.key for usage, _, _ in index.pods_on(node)}
        node_plan = NodePlan(row=step.row, cells=step.cells, pinned=step.pinned, gpus=step.gpus)
        fit = claims.fit(index, step.row, node_plan, gone, taken_again=taken.get(step.row, frozenset()))
        if isinstance(fit, Rejected):
            return f"member {'/'.join(step.key)} on {node}: {fit.message}"
        if fit is not None:
            taken[step.row] = taken.get(step.row, frozenset()) | chosen_devices(fit)
    return None


def _least_asked(members: Sequence[GangMember]) -> list[tuple[str, float]]:
    """Per node-level resource, the least any member asks (0 where one asks none)."""
    asked = [dict(member.demand.node_requests) for member in members]
    names = set().union(*asked)
    return [(name, min(each.get(name, 0.0) for each in asked)) for name in sorted(names)]


def _members_fit(
    index: ClusterIndex,
    slot: int,
    members: Sequence[GangMember],
    evicted: frozenset[Key],
    memo: dict[tuple[object, ...], _Room],
    *,
    checks: ExactChecks,
    claims: Mapping[Key, ClaimsAfterEviction],
    at_least: int,
) -> _Room:
    """How many of ``members`` the node takes with the pods ``evicted`` gone, in order, each checked by the
    exact kubelet model on what the ones before it left (``Workspace``; a member that does not fit is passed
    over for the smaller ones after it), then its claims with the devices the pods ``evicted`` free and
    those chosen for the members before it taken; a bound below ``at_least`` (the whole GPUs left for them)
    is answered without the exact model."""
    key = (slot, evicted)
    known = memo.get(key)
    if known is not None:
        return known
    shape = index.gpu_shape(slot)
    free = None if shape is None else NodeGpus(shape.table, shape.healthy - index.busy_gpus(slot, without=evicted))
    gpus_each = int(dict(members[0].demand.device_requests).get(GPU_RESOURCE, 0))
    if gpus_each and all(m.demand == members[0].demand for m in members):
        bound = 0 if free is None else len(free.free) // gpus_each
        if bound < at_least:
            return _Room(bound)
    arrays = index.arrays_without(evicted, slots=[slot])
    workspace = Workspace(arrays, lambda _row: free, checks=checks)
    placed = 0
    taken: frozenset[DeviceRef] = frozenset()
    refused = ""
    for member in members:
        outcome = workspace.place(member, 0)
        if isinstance(outcome, str):
            continue
        member_claims = claims.get(member.key)
        if member_claims is not None:
            plan = NodePlan(row=slot, cells=outcome.cells, pinned=outcome.pinned, gpus=outcome.gpus)
            fit = member_claims.fit(index, slot, plan, evicted, taken_again=taken)
            if isinstance(fit, Rejected):
                # Its cells stay charged in the workspace (it has no undo): the count errs low, never high.
                refused = refused or f"member {'/'.join(member.key)}: {fit.message}"
                continue
            if fit is not None:
                taken |= chosen_devices(fit)
        placed += 1
    room = memo[key] = _Room(placed, refused)
    return room


@dataclass(frozen=True)
class _Room:
    """The members a node takes with some pods evicted, and why a member's claims did not fit (if one's did not)."""

    members: int
    devices_refused: str = ""


def _choose(
    options: Sequence[_NodeOption], need: int, domain: IntArray | None, judge: _Judge, gpus_each: int
) -> tuple[CandidateKey, list[_NodeOption], list[Unit]] | None:
    """The cheapest set of node options holding ``need`` members, inside one domain when one is required:
    per domain, the cheapest options first until they hold the members; then the cheapest domain."""
    groups: dict[int, list[_NodeOption]] = {}
    for option in options:
        groups.setdefault(0 if domain is None else int(domain[option.slot]), []).append(option)
    best: tuple[CandidateKey, list[_NodeOption], list[Unit]] | None = None
    for group in groups.values():
        picked: list[_NodeOption] = []
        held = 0
        for option in sorted(group, key=lambda o: (o.key, -o.members)):
            if held >= need:
                break
            picked.append(option)
            held += option.members
        if held < need:
            continue
        victims = list({unit.name: unit for option in picked for unit in option.victims}.values())
        if judge.fits_budgets(victims) is not None:
            continue
        key = CandidateKey.of(victims, gpus_used=need * gpus_each, where=[o.name for o in picked], tier=judge.tier_of)
        if best is None or key < best[0]:
            best = (key, picked, victims)
    return best


def _domains(index: ClusterIndex, level: TopologyLevel) -> IntArray:
    """Per slot, a code for the node's domain at ``level`` (-1 where its node carries none of the keys)."""
    keys = level.keys
    codes = np.full(index.capacity, -1, dtype=np.int64)
    names: dict[str, int] = {}
    for key in reversed(list(keys)):  # the first key present wins: written last
        column, values = index.facts.label_column(key)
        column = column[: index.capacity]
        present = column >= 0
        mapped = np.array([names.setdefault(f"{key}={v}", len(names)) for v in values], dtype=np.int64)
        if mapped.size:
            codes[: column.size][present] = mapped[column[present]]
    return codes


def _gpus_without(index: ClusterIndex, evicted: frozenset[Key]) -> Callable[[int], NodeGpus | None]:
    def gpus(row: int) -> NodeGpus | None:
        shape = index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy - index.busy_gpus(row, without=evicted))

    return gpus


# --- what people read ------------------------------------------------------------------------------------


def _victims(units: Sequence[Unit]) -> tuple[Victim, ...]:
    return tuple(
        Victim(namespace=pod.key[0], name=pod.key[1], node=pod.node, priority=pod.priority, group=unit.group)
        for unit in units
        for pod in unit.pods
    )


def _who(preemptors: Sequence[PendingPod]) -> str:
    if len(preemptors) == 1:
        return f"pod {preemptors[0].namespace}/{preemptors[0].name} (priority {preemptors[0].priority})"
    lowest = min(p.priority for p in preemptors)
    return f"the {len(preemptors)} pending members of {preemptors[0].namespace}/... (priority {lowest})"


def _reason(who: str, victims: Sequence[Unit], nodes: Sequence[str], why: str) -> str:
    if not victims:
        return f"{who} fits on {', '.join(nodes)} without evicting anyone"
    pods = [pod for unit in victims for pod in unit.pods]
    named = ", ".join(f"{'/'.join(p.key)} ({p.priority})" for p in pods[:_SHOWN])
    more = f" and {len(pods) - _SHOWN} more" if len(pods) > _SHOWN else ""
    gangs = [unit.group for unit in victims if unit.group]
    whole = f", gang(s) {', '.join(gangs)} evicted whole" if gangs else ""
    where = sorted({pod.node for pod in pods})
    return (
        f"{who} preempts {len(pods)} lower-priority pod(s) {named}{more} on node(s) {', '.join(where)}{whole}: "
        f"with them gone it is nominated to {', '.join(nodes)} and {why}"
    )


def _nothing_suffices(who: str, judged: int, kubelet_refusals: Sequence[str], refused_by_budget: str) -> str:
    if judged == 0:
        return f"{who} fits on no node even with every lower-priority pod evicted: too few resources in all"
    if refused_by_budget:
        return f"no preemption for {who}: {refused_by_budget}"
    if kubelet_refusals:
        shown = ", ".join(kubelet_refusals[:_SHOWN])
        return (
            f"no preemption for {who}: even with every lower-priority pod evicted, the kubelet's admission "
            f"(NUMA alignment, TopologyAffinityError) would still refuse it on {shown}"
        )
    return f"no preemption for {who}: no set of lower-priority pods frees enough room"
