"""What a preemption search weighs: victim units (a pod, or a whole pod group) per node, the disruption
budgets, the candidate nodes in the order of a cheap bound, and the answers' words.

Who evicts what: a pod Kueue admitted (``PlacedPod.kueue_admitted``) is Kueue's to evict, by quota; it is
never a victim here, nor is a unit holding one, and it frees nothing in the bound. A pod Kueue admitted may
still preempt others. Where that leaves no preemption, the answer says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from placement.core.constraints.constraint_types import PlacedPod
from placement.core.gang_plan import NodeGpus
from placement.core.kueue import KUEUE_EVICTS_ITS_OWN
from placement.core.pods import PendingPod, PodUsage
from placement.core.preemption_rules import (
    DisruptionBudget,
    Unit,
    UnitPod,
    broken_budget,
)
from placement.core.vocabulary import (
    GPU_RESOURCE,
    GPU_SHARE,
    IntArray,
    PodDemand,
    RejectionKind,
)
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import PodWithDevices

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


@dataclass
class _Judge:
    """What one decision reads: the index, the preemptor's priority, the budgets, the units found."""

    index: ClusterIndex
    priority: int
    budgets: tuple[DisruptionBudget, ...]
    now: float
    tier: TierOf | None
    kueue_spared: bool = False  # a unit of lower priority was passed over because Kueue admitted a pod of it
    _groups: dict[str, list[Key]] | None = None
    _units: dict[str, Unit | None] | None = None

    def units_on(self, name: str) -> list[Unit]:
        """The evictable units with a pod on node ``name``: lower priority, bound, every member known, none
        admitted by Kueue."""
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
            return self._unless_kueue(Unit(group="", pods=(_unit_pod(placed, usage),)), [placed])
        members, placed_members = [], []
        for key in self._members(placed.group):
            member = self.index.facts.pod(*key)
            held = self.index.pod(*key)
            if member is None or held is None:
                continue
            member_usage, bound, _ = held
            if member.priority >= self.priority or not bound:
                return None  # a member the preemptor may not evict, or one in flight: the gang stays whole
            members.append(_unit_pod(member, member_usage))
            placed_members.append(member)
        if not members:
            return None
        return self._unless_kueue(
            Unit(group=placed.group, pods=tuple(sorted(members, key=lambda p: p.key))), placed_members
        )

    def _unless_kueue(self, unit: Unit, pods: Sequence[PlacedPod]) -> Unit | None:
        """The unit, or None when Kueue admitted a pod of it (Kueue evicts those: module docstring)."""
        if any(pod.kueue_admitted for pod in pods):
            self.kueue_spared = True
            return None
        return unit

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
    judge: _Judge, rows: IntArray, node_requests: Sequence[tuple[str, float]], *, kueue_too: bool = False
) -> list[tuple[_Bound, str, int]]:
    """The nodes some eviction may open to a pod asking ``node_requests``, cheapest bound first.

    Per node, vectorised over every pod of lower priority but those Kueue admitted (``kueue_too``: those
    too, to tell whether only they stand in the way): the lowest priority p such that, with every such
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
    spared = frozenset() if kueue_too else index.facts.kueue_admitted_pods()
    positions: list[int] = []
    priorities: list[int] = []
    requests: list[list[float]] = []
    freed_by: dict[tuple[PodDemand, int], list[float]] = {}  # pods share a handful of shapes
    for position, usage in index.bound_pods(rows):
        pod_priority = priority_of.get(usage.key)
        if pod_priority is None or pod_priority >= judge.priority or usage.key in spared:
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


def _gpus_without(index: ClusterIndex, evicted: frozenset[Key]) -> Callable[[int], NodeGpus | None]:
    def gpus(row: int) -> NodeGpus | None:
        shape = index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy - index.busy_gpus(row, without=evicted))

    return gpus


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


def _kueue_in_the_way(judge: _Judge, rows: IntArray, node_requests: Sequence[tuple[str, float]], judged: int) -> bool:
    """Whether pods Kueue admitted kept preemption from freeing room: passed over on a node judged, or with
    no node judged, the only pods whose eviction might open one."""
    if judged:
        return judge.kueue_spared
    return bool(judge.index.facts.kueue_admitted_pods()) and bool(
        _in_bound_order(judge, rows, node_requests, kueue_too=True)
    )


def _nothing_suffices(
    who: str, judged: int, kubelet_refusals: Sequence[str], refused_by_budget: str, *, kueue: bool = False
) -> str:
    """Why no preemption; ``kueue``: pods Kueue admitted stood in the way (``_kueue_in_the_way``)."""
    if judged == 0:
        if kueue:
            return (
                f"no preemption for {who}: only evicting pods admitted by Kueue might free enough room, and "
                f"{KUEUE_EVICTS_ITS_OWN}"
            )
        return f"{who} fits on no node even with every lower-priority pod evicted: too few resources in all"
    if refused_by_budget:
        return f"no preemption for {who}: {refused_by_budget}"
    if kueue:  # before the kubelet's refusals: those were judged with the pods Kueue admitted kept
        return (
            f"no preemption for {who}: no set of lower-priority pods Kueue did not admit frees enough room "
            f"({KUEUE_EVICTS_ITS_OWN})"
        )
    if kubelet_refusals:
        shown = ", ".join(kubelet_refusals[:_SHOWN])
        return (
            f"no preemption for {who}: even with every lower-priority pod evicted, the kubelet's admission "
            f"(NUMA alignment, TopologyAffinityError) would still refuse it on {shown}"
        )
    return f"no preemption for {who}: no set of lower-priority pods frees enough room"
