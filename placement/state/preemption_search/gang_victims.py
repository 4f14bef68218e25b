"""Preemption for a gang: nodes that could each hold members once their victims are gone, chosen until every
member fits, the plan confirmed by the gang planner within the group's topology domains.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from placement.core.decision import NodePlan
from placement.core.domains import TopologyLevel, TopologyLevels
from placement.core.dra.pools import DeviceRef
from placement.core.gang_plan import (
    ExactChecks,
    GangMember,
    GangPlan,
    GangUnplaceable,
    Locality,
    MemberRules,
    NodeGpus,
    Workspace,
    largest_first,
    plan_gang,
)
from placement.core.pod_placement import Placement
from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod
from placement.core.preemption_rules import (
    CandidateKey,
    Unit,
    reprieve,
)
from placement.core.vocabulary import (
    GPU_RESOURCE,
    IntArray,
    Rejected,
    demand_of,
)
from placement.state.cluster_index import ClusterIndex
from placement.state.eviction_devices import ClaimsAfterEviction, chosen_devices
from placement.state.gang_rules import member_rules
from placement.state.preemption_search.victim_units import (
    GANG_SAMPLE,
    Key,
    NoPreemption,
    Preemption,
    _gpus_without,
    _in_bound_order,
    _Judge,
    _kueue_in_the_way,
    _nothing_suffices,
    _reason,
    _victims,
    _who,
)


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
    least_asked = _least_asked(members)
    order = _in_bound_order(judge, rows, least_asked)
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
        kueue = _kueue_in_the_way(judge, rows, least_asked, len(order))
        reason = _nothing_suffices(who, len(order), kubelet_refusals, "", kueue=kueue)
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
    placed: list[Placement] = []
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
