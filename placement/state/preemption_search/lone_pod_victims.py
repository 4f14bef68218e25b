"""Preemption for a lone pod: per candidate node, the exact admission without the victims, the reprieve, and the
devices' quality kept as good as with every victim gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from placement.core.decision import NodePlan
from placement.core.gpu_sets import score_gpu_set
from placement.core.pods import PendingPod
from placement.core.preemption_rules import (
    CandidateKey,
    Unit,
    candidate_count,
    reprieve,
)
from placement.core.vocabulary import (
    GPU_RESOURCE,
    FloatArray,
    IntArray,
    PodDemand,
    Rejected,
    demand_of,
)
from placement.state.cluster_index import ClusterIndex
from placement.state.eviction_check import plan_without
from placement.state.eviction_devices import ClaimsAfterEviction
from placement.state.preemption_search.victim_units import (
    _UNLINKED,
    Key,
    NoPreemption,
    Preemption,
    _in_bound_order,
    _Judge,
    _kueue_in_the_way,
    _nothing_suffices,
    _reason,
    _victims,
    _who,
)


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
        kueue = _kueue_in_the_way(judge, rows, demand.node_requests, len(order))
        reason = _nothing_suffices(who, len(order), kubelet_refusals, refused_by_budget, kueue=kueue)
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
