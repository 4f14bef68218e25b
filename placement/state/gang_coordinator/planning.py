"""Planning a group all at once: a snapshot of the index copied under the lock, the plan made outside it (within
the group's topology domains and its members' kube-scheduler constraints), then checked and reserved
under the lock in one step; the verdict on an emptied cluster and the nodes a starving head holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from placement.core.constraints.gpu_labels import accepted_gpu_models
from placement.core.domains import (
    NVLINK_LEVEL,
    RACK_LEVEL,
    ZONE_LEVEL,
    DomainMap,
    LevelConstraint,
    TopologyLevel,
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
from placement.core.pod_placement import DeviceChoice
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PodUsage
from placement.core.scoring import ScoringWeights
from placement.core.vocabulary import FloatArray, IntArray, NodeArrays
from placement.state.gang_coordinator.gang_records import (
    RETRY_COST_FACTOR,
    YIELD_EVERY_S,
    GangPlacement,
    GangStatus,
    Key,
    _Gang,
    _Member,
    _Snapshot,
    _State,
    _Try,
    _Verdict,
    _Waiting,
)
from placement.state.gang_coordinator.timeouts import GangTimeouts
from placement.state.gang_rules import allocate_members, member_rules, plan_conflict, plan_in_order


class GangPlanning(GangTimeouts):
    """The planning role: one group's try, from its candidate rows to its reservations."""

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
            slow_failure = isinstance(outcome, _Waiting) and took > self._config.slow_plan_s
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
                    gpu_models=accepted_gpu_models(member.pod.constraints),
                )
            )
            placements.append(replace(step, node=node, devices=devices.get(step.key)))
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
