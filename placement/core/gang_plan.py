"""The gang planner, pure: every member of a pod group planned at once against one snapshot, or why not.

Input: the cluster arrays (``NodeArrays``, one snapshot), the candidate rows, the members (demand,
intent), the spread policy, the nodes' network locality (zone, rack and NVLink fabric clique as small
integer codes) and each node's GPUs. Output: a ``GangPlan`` giving every member a node, the NUMA cells
its kubelet will pin it to (or our prediction where it pins nothing) and the GPUs its kubelet is
predicted to give it, or a ``GangUnplaceable`` saying why not. Nothing is reserved here;
``placement.state.gang_coordinator`` reserves a plan all at once.

Members see each other: the planner works on a private copy of the free arrays (``Workspace``) and
charges each member there exactly as ``ClusterIndex`` charges a reservation (exclusive CPUs, a
Guaranteed pod's memory and hugepages on its cells, GPUs on their own cells, node-level requests), so the
next member on the same node is checked by the exact kubelet model (``decision.plan_on_node``) against
what is really left. A member is only ever planned where the vectorised admission and the exact model
both admit it, so no member is sent into a TopologyAffinityError. Its GPUs are ``plan_on_node``'s too:
those the kubelet's device manager hands out, asking NVIDIA's device plugin (``nvidia_device_plugin``),
out of the free GPUs the members before it left; a node where that allocation would fail does not take
the member.

Rules (docs/gang.md):

* Members with the same demand and intent form a shape; the largest shapes are placed first
  (largest first packs best), each over the nodes the gang already uses before new ones.
* ``packed``: fewest nodes. A node's room for a shape is bounded from above by the free amounts
  (``member_capacity``: per cell on single-numa-node nodes, per node elsewhere); k* = the fewest nodes
  whose room covers the members. Among node sets of k* nodes, one inside a single NVLink fabric clique
  wins, else one inside a rack, else one inside a zone (ties: the domain of nodes the gang already
  uses, then the tightest fit, then the best score). Within a node, members go to the NUMA cell that
  already holds the gang's members where the kubelet lets us choose (it pins the lowest preferred cell
  otherwise, which packs by itself).
* ``spread``: one member per node, zones (then racks) round robin, counting the members already placed.
* ``balanced``: the fewest nodes as for ``packed``, members dealt out one at a time to the node of
  those holding the fewest, and within a node to the NUMA cell holding the fewest (where the kubelet pins
  a member, its choice stands).
* GPUs are the kubelet's, not ours to prefer: neither its device manager nor NVIDIA's plugin knows
  NICs, so a member asking for an RDMA NIC gets the GPUs the kubelet gives, near a NIC or not.
* kube-scheduler's constraints (``MemberRules``, judged by the caller against the cluster): each member
  is planned only on the nodes its constraints admit, and members whose required anti-affinity on the
  hostname selects themselves get one node each. Constraints between members beyond that (spread, pod
  affinity to one another) are the caller's to check on the finished plan (``placement.state.gang_coordinator``).
* Ties everywhere: the node's score (``scoring.score_nodes``, the gang component fed by the caller's
  ``preference``), then the lower slot.

Speed: identical nodes in identical states give identical answers, so each exact check is memoised on
the node's state (its arrays' bytes, GPU link table and free GPUs, the member's shape and the cell
preference: everything the kubelet model and the GPU prediction read); a gang over many identical
nodes runs the exact model a handful of times, not once per member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from placement.core.charging import charge_cells, charge_node, pinned_amounts
from placement.core.constraints.verdicts import ConstraintVerdict, merge_with_resources
from placement.core.decision import plan_on_node
from placement.core.feasibility import FilterResult, allowed_cells, cell_requests, filter_nodes
from placement.core.gpu_sets import GpuLinkTable
from placement.core.intent import PodIntent
from placement.core.pod_placement import Placement
from placement.core.podgroup import SpreadPolicy
from placement.core.scoring import ScoringWeights, fit_curve, score_nodes
from placement.core.vocabulary import (
    CPU,
    GPU_RESOURCE,
    GPU_SHARE,
    MAX_NUMA,
    MEMORY,
    FloatArray,
    IntArray,
    NodeArrays,
    PodDemand,
    PolicyCode,
    Rejected,
)

_MILLI = 1000.0
_GIB = float(1 << 30)
_UNBOUNDED = 1 << 30  # room of a node for a member that asks for nothing the node counts
_TOP_REASONS = 3


@dataclass(frozen=True)
class GangMember:
    """One member to plan: its pod-level demand and NUMA intent."""

    key: tuple[str, str]  # (namespace, name)
    demand: PodDemand
    intent: PodIntent = field(default_factory=PodIntent)


@dataclass(frozen=True, eq=False)
class MemberRules:
    """kube-scheduler's constraints for the members that share them: each slot's verdict (``verdict.rows``
    is every slot, in order), and whether two of them may share a node (``one_per_node``: a required
    anti-affinity term on the hostname that selects the members themselves)."""

    verdict: ConstraintVerdict
    one_per_node: bool = False

    def at(self, rows: IntArray) -> ConstraintVerdict:
        """The verdict of ``rows``, in their order."""
        v = self.verdict
        return ConstraintVerdict(rows, v.reason_codes[rows], v.messages, v.kinds, v.stages)


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs for the planner: the link table and the free GPUs."""

    table: GpuLinkTable
    free: frozenset[int]


@dataclass(frozen=True)
class Locality:
    """Network locality per index slot as integer codes, -1 where the node does not say."""

    zone: IntArray
    rack: IntArray
    clique: IntArray  # NVLink fabric clique (multi-node NVLink domain)

    @classmethod
    def unknown(cls, slots: int) -> Locality:
        unknown = np.full(slots, -1, dtype=np.int64)
        return cls(zone=unknown, rack=unknown, clique=unknown)


@dataclass(frozen=True)
class Span:
    """How far a plan reaches: distinct nodes, and distinct known cliques, racks and zones."""

    nodes: int
    cliques: int
    racks: int
    zones: int


@dataclass(frozen=True)
class GangPlan:
    members: tuple[Placement, ...]  # in the order the members were given
    policy: SpreadPolicy

    def rows(self) -> tuple[int, ...]:
        """The distinct rows used, in member order."""
        return tuple(dict.fromkeys(m.row for m in self.members))

    def span(self, locality: Locality) -> Span:
        rows = np.array(self.rows(), dtype=np.int64)

        def distinct(codes: IntArray) -> int:
            known = codes[rows]
            return len(set(known[known >= 0].tolist()))

        return Span(len(rows), distinct(locality.clique), distinct(locality.rack), distinct(locality.zone))


@dataclass(frozen=True)
class GangUnplaceable:
    reason: str
    placed: int  # members the attempt had placed when it gave up (nothing is held: it was a copy)


GpusOf = Callable[[int], NodeGpus | None]
_Outcome = tuple[tuple[int, ...], bool, tuple[int, ...]] | str  # (cells, pinned, gpus) or why not


def describe_demand(demand: PodDemand) -> str:
    """``8 CPUs, 64 GiB memory, 1 nvidia.com/gpu``: what one member asks for, as users write it."""
    parts = []
    for name, amount in demand.node_requests:
        if name == CPU:
            parts.append(f"{amount / _MILLI:g} CPUs")
        elif name == MEMORY or name.startswith("hugepages-"):
            parts.append(f"{amount / _GIB:g} GiB {name}")
        else:
            parts.append(f"{amount:g} {name}")
    return ", ".join(parts) or "no resources"


def member_capacity(arrays: NodeArrays, rows: IntArray, demand: PodDemand) -> IntArray:
    """An upper bound on how many more members of ``demand`` each row can take.

    Each member takes its node-level requests from the node and its cell charges (exclusive CPUs, a
    Guaranteed pod's memory, devices) from the cells, at least once in total, so free amount / request
    bounds the count; on a single-numa-node node every member sits in one cell, so the bound is summed
    per cell. The exact model may admit fewer (it is run on each node the planner uses).
    """
    room = np.full(len(rows), _UNBOUNDED, dtype=np.int64)
    for name, amount in demand.node_requests:
        column = arrays.column(name)
        if amount <= 0:
            continue
        if column is None:
            return np.zeros(len(rows), dtype=np.int64)
        room = np.minimum(room, np.floor(arrays.node_free[column, rows] / amount).astype(np.int64))
    charges = pinned_amounts(demand)
    if not charges:
        return room
    per_cell = np.full((len(rows), arrays.cell_free.shape[2]), _UNBOUNDED, dtype=np.int64)
    per_node = np.full(len(rows), _UNBOUNDED, dtype=np.int64)
    for name, amount in charges:
        column = arrays.column(name)
        if column is None:
            return np.zeros(len(rows), dtype=np.int64)
        free = arrays.cell_free[column][rows]
        per_cell = np.minimum(per_cell, np.floor(free / amount).astype(np.int64))
        per_node = np.minimum(per_node, np.floor(free.sum(axis=1) / amount).astype(np.int64))
    single = arrays.policy[rows] == PolicyCode.SINGLE_NUMA_NODE
    bound = np.where(single, per_cell.sum(axis=1), per_node)
    result: IntArray = np.minimum(room, bound)
    return result


def _asked(intent: PodIntent) -> PodIntent | None:
    """None for a pod whose intent constrains nothing: its members then need only the exact check."""
    return intent if intent.constrains else None


def empty_view(arrays: NodeArrays) -> NodeArrays:
    """The same nodes with nothing running: what a gang could get once everything else has finished."""
    return replace(
        arrays,
        cell_free=arrays.cell_total.copy(),
        node_free=arrays.node_allocatable.copy(),
        cell_claimed=np.zeros_like(arrays.cell_claimed),
        cell_isolated=np.zeros_like(arrays.cell_isolated),
        memory_group=np.zeros_like(arrays.memory_group),
    )


@dataclass
class ExactChecks:
    """The exact checks' answers by node state (not by row): workspaces that share them (one preemption
    decision's, each over one node's arrays) judge identical nodes in identical states once."""

    outcomes: dict[tuple[object, ...], _Outcome] = field(default_factory=dict)
    shapes: dict[tuple[PodDemand, PodIntent], int] = field(default_factory=dict)


class Workspace:
    """A private copy of the free arrays; members placed here are charged as the index would charge them."""

    def __init__(self, arrays: NodeArrays, gpus: GpusOf, *, checks: ExactChecks | None = None) -> None:
        self.arrays = replace(
            arrays,
            cell_free=arrays.cell_free.copy(),
            node_free=arrays.node_free.copy(),
            cell_claimed=arrays.cell_claimed.copy(),
            cell_isolated=arrays.cell_isolated.copy(),
        )
        self._gpus_of = gpus
        self._gpus: dict[int, NodeGpus | None] = {}
        self._static: dict[int, bytes] = {}
        checks = checks or ExactChecks()
        self._shapes = checks.shapes
        self._memo = checks.outcomes
        self.gang_cells: dict[int, dict[int, int]] = {}  # row -> NUMA id -> members of this gang there
        self.apart: dict[int, set[int]] = {}  # id of a one-per-node ``MemberRules`` -> rows its members hold

    def gpus(self, row: int) -> NodeGpus | None:
        if row not in self._gpus:
            self._gpus[row] = self._gpus_of(row)
        return self._gpus[row]

    def shape_of(self, member: GangMember) -> int:
        """Members equal in demand and intent share a shape (and the memoised checks)."""
        return self._shapes.setdefault((member.demand, member.intent), len(self._shapes))

    def place(
        self, member: GangMember, row: int, *, prefer: Sequence[int] = (), within_room: bool = False
    ) -> Placement | str:
        """Plan ``member`` on ``row`` and charge it here; ``prefer`` ranks NUMA ids where we may choose.

        ``within_room``: the caller keeps to the node's ``member_capacity``, which bounds the node-level
        amounts, so a member without an intent needs only the exact kubelet model, not the filter too.
        """
        gpus = self.gpus(row)
        key = (
            self.shape_of(member),
            self._static_signature(row, gpus),
            self._dynamic_signature(row),
            None if gpus is None else gpus.free,
            tuple(prefer),
        )
        outcome = self._memo.get(key)
        if outcome is None:
            outcome = self._memo[key] = self._evaluate(member, row, prefer, gpus, within_room=within_room)
        if isinstance(outcome, str):
            return outcome
        cells, pinned, chosen = outcome
        self._charge(member, row, cells, chosen, gpus)
        counts = self.gang_cells.setdefault(row, {})
        for cell in cells:
            counts[cell] = counts.get(cell, 0) + 1
        return Placement(*member.key, row=row, cells=cells, pinned=pinned, gpus=chosen)

    def _static_signature(self, row: int, gpus: NodeGpus | None) -> bytes:
        signature = self._static.get(row)
        if signature is None:
            a = self.arrays
            parts = [
                a.cell_total[:, row].tobytes(),
                a.node_allocatable[:, row].tobytes(),
                a.cell_ids[row].tobytes(),
                bytes(
                    [
                        int(a.numa_count[row]) & 0xFF,
                        int(a.policy[row]),
                        int(a.scope[row]),
                        int(a.cpu_static[row]),
                        int(a.memory_static[row]),
                    ]
                ),
            ]
            if gpus is not None:
                # Tables are interned per machine type by the index, so equal tables are one object.
                parts.append(id(gpus.table).to_bytes(8, "little"))
            signature = self._static[row] = b"|".join(parts)
        return signature

    def _dynamic_signature(self, row: int) -> bytes:
        a = self.arrays
        return b"".join(
            (
                a.cell_free[:, row].tobytes(),
                a.node_free[:, row].tobytes(),
                a.cell_claimed[row].tobytes(),
                a.cell_isolated[row].tobytes(),
            )
        )

    def _evaluate(
        self, member: GangMember, row: int, prefer: Sequence[int], gpus: NodeGpus | None, *, within_room: bool
    ) -> _Outcome:
        arrays = self.arrays
        demand, intent = member.demand, _asked(member.intent)
        if intent is not None or not within_room:
            filtered = filter_nodes(arrays, np.array([row], dtype=np.int64), demand, intent)
            if not filtered.feasible[0]:
                return filtered.reason(0)
        # Whole GPUs: those the kubelet is predicted to give, as for a pod placed alone (``plan_on_node``
        # refuses the node where its allocation would fail). A share is charged by amount on the cells
        # (``_charge``): the planner picks no shared GPU.
        requests = dict(demand.device_requests)
        predicted = gpus if requests.get(GPU_RESOURCE, 0) and not requests.get(GPU_SHARE, 0) else None
        plan = plan_on_node(
            arrays,
            row,
            demand,
            intent=intent,
            landing_cell=self._landing(member, row, prefer),
            gpu_table=None if predicted is None else predicted.table,
            free_gpus=frozenset() if predicted is None else predicted.free,
        )
        if isinstance(plan, Rejected):
            return plan.message
        return plan.cells, plan.pinned, plan.gpus

    def _landing(self, member: GangMember, row: int, prefer: Sequence[int]) -> int:
        """The cell slot a member the kubelet does not pin is predicted to use; -1 when it spans the node.

        The first cell of ``prefer`` that holds it, else the landing rule of ``scoring.score_nodes`` (the
        best ``fit_curve`` among the allowed cells that hold everything it asks for), for this one row.
        """
        arrays = self.arrays
        fits = allowed_cells(arrays, np.array([row], dtype=np.int64), member.intent)[0].copy()
        used = np.zeros(fits.shape)
        resources = 0
        for name, request in cell_requests(arrays, member.demand, set()):
            column = arrays.column(name)
            if column is None:
                continue
            total, free = arrays.cell_total[column, row], arrays.cell_free[column, row]
            fits &= free >= request
            used += np.divide(total - free + request, total, out=np.ones_like(total), where=total > 0)
            resources += 1
        if not fits.any():
            return -1
        ids = [int(i) for i in arrays.cell_ids[row]]
        for cell in prefer:
            if cell in ids and fits[ids.index(cell)]:
                return ids.index(cell)
        return int(np.where(fits, fit_curve(used / max(resources, 1)), -1.0).argmax())

    def _charge(
        self, member: GangMember, row: int, cells: tuple[int, ...], chosen: tuple[int, ...], gpus: NodeGpus | None
    ) -> None:
        """Take the member's amounts off the copy by the index's own rule (``core.charging``).

        Members sharing a GPU (``GPU_SHARE``) are charged by amount on their cells, without a GPU of their
        own: the planner does not pick shared GPUs.
        """
        a = self.arrays
        charge_node(a.node_free[:, row], a.resources, member.demand)
        count = min(int(a.numa_count[row]), MAX_NUMA)
        ids = [int(i) for i in a.cell_ids[row, :count]]
        known = [ids.index(c) for c in cells if c in ids]
        if known:
            a.cell_claimed[row, known] = True
            if member.intent.exclusive:
                a.cell_isolated[row, known] = True
        gpu_cells = None
        if chosen and gpus is not None:
            numa_of = dict(zip(gpus.table.gpus, gpus.table.numa_nodes, strict=True))
            gpu_cells = [ids.index(numa) if (numa := numa_of[index]) in ids else None for index in chosen]
        charge_cells(a.cell_free[:, row, :], a.resources, member.demand, known or list(range(count)), gpu_cells)
        np.maximum(a.cell_free[:, row, :], 0, out=a.cell_free[:, row, :])
        if gpus is not None and chosen:
            self._gpus[row] = replace(gpus, free=gpus.free - frozenset(chosen))


def plan_gang(
    arrays: NodeArrays,
    rows: IntArray,
    members: Sequence[GangMember],
    *,
    gpus: GpusOf,
    policy: SpreadPolicy = SpreadPolicy.PACKED,
    locality: Locality | None = None,
    anchors: Sequence[int] = (),
    preference: FloatArray | None = None,
    weights: ScoringWeights | None = None,
    rules: Mapping[tuple[str, str], MemberRules] | None = None,
) -> GangPlan | GangUnplaceable:
    """Plan every member at once over ``rows`` (see the module docstring), or say why not.

    ``anchors``: rows already holding members of this gang (bound ones, when a group scales up or a
    remainder is placed): new members pack next to them (``packed``, ``balanced``) or avoid them
    (``spread``). ``preference``: per slot, in [0, 1], the scoring's gang component (a tie-break).
    ``rules``: each member's kube-scheduler constraints (a member without any is judged on resources only).
    """
    locality = locality or Locality.unknown(arrays.numa_count.shape[0])
    workspace = Workspace(arrays, gpus)
    opened = list(dict.fromkeys(int(r) for r in anchors))
    planned: dict[tuple[str, str], Placement] = {}
    rules = rules or {}
    for shape in _shapes(members, rules):
        outcome = _place_shape(
            workspace,
            rows,
            shape,
            policy=policy,
            locality=locality,
            opened=opened,
            preference=preference,
            weights=weights,
            rule=rules.get(shape[0].key),
        )
        planned.update((p.key, p) for p in outcome[0])
        if outcome[1] is not None:
            return GangUnplaceable(reason=outcome[1], placed=len(planned))
    return GangPlan(members=tuple(planned[m.key] for m in members), policy=policy)


def _shapes(members: Sequence[GangMember], rules: Mapping[tuple[str, str], MemberRules]) -> list[list[GangMember]]:
    """Members grouped by shape and rules, the largest per-member demand first (GPUs, then CPUs, then memory)."""
    groups: dict[tuple[PodDemand, PodIntent, int], list[GangMember]] = {}
    for member in members:
        rule = id(rules.get(member.key))
        groups.setdefault((member.demand, member.intent, rule), []).append(member)

    return sorted(groups.values(), key=lambda group: largest_first(group[0]))


def largest_first(member: GangMember) -> tuple[float, float, float]:
    """The order members are planned in, as a sort key: the most GPUs, then CPUs, then memory first."""
    requests = dict(member.demand.node_requests)
    return (-requests.get(GPU_RESOURCE, 0.0), -requests.get(CPU, 0.0), -requests.get(MEMORY, 0.0))


def _place_shape(
    workspace: Workspace,
    rows: IntArray,
    members: list[GangMember],
    *,
    policy: SpreadPolicy,
    locality: Locality,
    opened: list[int],
    preference: FloatArray | None,
    weights: ScoringWeights | None,
    rule: MemberRules | None = None,
) -> tuple[list[Placement], str | None]:
    """Place one shape's members; appends the rows it opens to ``opened``. Returns (plans, why it stopped)."""
    arrays = workspace.arrays
    demand, intent = members[0].demand, _asked(members[0].intent)
    filtered = filter_nodes(arrays, rows, demand, intent)
    if rule is not None:
        filtered = merge_with_resources(filtered, rule.at(rows))
    feasible = rows[filtered.feasible]
    apart = workspace.apart.setdefault(id(rule), set()) if rule is not None and rule.one_per_node else None
    if apart:
        feasible = feasible[~np.isin(feasible, np.fromiter(apart, dtype=np.int64))]
    room = member_capacity(arrays, feasible, demand)
    if apart is not None:
        room = np.minimum(room, 1)  # one member a node
    room_of = dict(zip(feasible.tolist(), room.tolist(), strict=True))
    used = set(opened)
    fresh = np.array([r for r in feasible.tolist() if r not in used], dtype=np.int64)
    fresh_room = np.array([room_of[r] for r in fresh.tolist()], dtype=np.int64)
    scores = (
        score_nodes(
            arrays,
            fresh,
            demand,
            intent=intent,
            weights=weights,
            gang=None if preference is None else preference[fresh],
        ).total
        if fresh.size
        else np.zeros(0)
    )
    plans: list[Placement] = []
    pending = list(members)
    reachable = len(fresh) if policy is SpreadPolicy.SPREAD else int(np.minimum(room, len(members)).sum())
    if reachable < len(members):  # the upper bound already says no: skip the exact checks
        return plans, _why(
            filtered,
            total=len(members),
            placed=0,
            demand=demand,
            room=room,
            feasible=feasible,
            locality=locality,
            policy=policy,
        )

    def fill(row: int, limit: int) -> None:
        placed = 0
        while pending and placed < limit:
            plan = workspace.place(pending[0], row, prefer=_cell_order(workspace, row, policy), within_room=True)
            if isinstance(plan, str):
                return
            plans.append(plan)
            pending.pop(0)
            placed += 1
        if placed and row not in used:
            used.add(row)
            opened.append(row)

    if policy is SpreadPolicy.SPREAD:
        order = _spread_order(fresh, scores, locality, opened)
        limit = 1
    else:
        if policy is SpreadPolicy.PACKED:
            for row in [r for r in opened if r in room_of]:
                fill(row, room_of[row])
        order = _packed_order(fresh, fresh_room, scores, need=len(pending), locality=locality, opened=opened)
        limit = 0  # each row's room
        if policy is SpreadPolicy.BALANCED:
            chosen = _fewest(fresh_room, len(pending))
            targets = [r for r in opened if r in room_of] + order[:chosen].tolist()
            _deal(workspace, targets, pending, plans, room_of)
            for row in dict.fromkeys(p.row for p in plans):
                if row not in used:
                    used.add(row)
                    opened.append(row)
            order = order[chosen:]
    for row in order.tolist():
        if not pending:
            break
        fill(row, limit or room_of[row])
    if apart is not None:
        apart.update(plan.row for plan in plans)
    if not pending:
        return plans, None
    return plans, _why(
        filtered,
        total=len(members),
        placed=len(members) - len(pending),
        demand=demand,
        room=room,
        feasible=feasible,
        locality=locality,
        policy=policy,
    )


def _deal(
    workspace: Workspace,
    targets: list[int],
    pending: list[GangMember],
    plans: list[Placement],
    room_of: dict[int, int],
) -> None:
    """``balanced``: one member at a time to the target holding the fewest of the gang's members."""
    held = {row: sum(workspace.gang_cells.get(row, {}).values()) for row in targets}
    given = dict.fromkeys(targets, 0)
    live = [row for row in targets if room_of[row] > 0]
    while pending and live:
        row = min(live, key=lambda r: (held[r], targets.index(r)))
        prefer = _cell_order(workspace, row, SpreadPolicy.BALANCED)
        plan = workspace.place(pending[0], row, prefer=prefer, within_room=True)
        if isinstance(plan, str):
            live.remove(row)
            continue
        plans.append(plan)
        pending.pop(0)
        held[row] += 1
        given[row] += 1
        if given[row] >= room_of[row]:
            live.remove(row)


def _cell_order(workspace: Workspace, row: int, policy: SpreadPolicy) -> tuple[int, ...]:
    """NUMA ids in the order a member should prefer them where the kubelet leaves the choice to us."""
    counts = workspace.gang_cells.get(row)
    if not counts or policy is SpreadPolicy.SPREAD:
        return ()
    arrays = workspace.arrays
    ids = [int(i) for i in arrays.cell_ids[row, : min(int(arrays.numa_count[row]), MAX_NUMA)]]
    sign = -1 if policy is SpreadPolicy.PACKED else 1  # packed: the fullest first; balanced: the emptiest
    return tuple(sorted(ids, key=lambda cell: (sign * counts.get(cell, 0), cell)))


def _fewest(room: IntArray, need: int) -> int:
    """k*: the fewest nodes whose room covers ``need`` (all of them when even that does not)."""
    if need <= 0:
        return 0
    total = np.cumsum(np.sort(np.minimum(room, need))[::-1])
    return int(np.searchsorted(total, need)) + 1 if total.size and total[-1] >= need else len(room)


def _domains(codes: IntArray, room: IntArray, need: int) -> tuple[IntArray, IntArray, IntArray]:
    """Per known domain code: the fewest of its nodes that cover ``need`` (len+1 when they cannot), and
    the room of those nodes together."""
    known = codes >= 0
    code, value = codes[known], room[known]
    if code.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort((-value, code))
    code, value = code[order], value[order]
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    lengths = np.diff(np.r_[starts, code.size])
    total = np.cumsum(value)
    before = np.repeat(np.r_[0, total[starts[1:] - 1]], lengths)
    within = total - before
    position = np.arange(code.size) - np.repeat(starts, lengths)
    first = np.minimum.reduceat(np.where(within >= need, position, code.size + 1), starts)
    reached = first <= code.size
    top = np.where(reached, within[np.minimum(starts + first, code.size - 1)], 0)
    return code[starts], np.where(reached, first + 1, code.size + 1), top


def _packed_order(
    rows: IntArray, room: IntArray, scores: FloatArray, *, need: int, locality: Locality, opened: list[int]
) -> IntArray:
    """New rows in the order ``packed`` opens them: a k*-node set inside one clique, rack or zone first."""
    if rows.size == 0:
        return rows
    capped = np.minimum(room, need)
    k_star = _fewest(room, need)
    leftover = room - capped
    levels = (locality.clique, locality.rack, locality.zone)
    anchor_codes = [set(level[opened].tolist()) if opened else set() for level in levels]
    # Outside a chosen domain: nodes near the gang's existing nodes, then in large domains, come first.
    near = [np.isin(level[rows], list(codes)) for level, codes in zip(levels, anchor_codes, strict=True)]
    domain_room = []
    for level in levels:
        codes = level[rows]
        sums = {c: float(capped[codes == c].sum()) for c in set(codes.tolist()) if c >= 0}
        domain_room.append(np.array([sums.get(c, 0.0) for c in codes.tolist()]))
    general = np.lexsort(
        (
            rows,
            -scores,
            leftover,
            -domain_room[2],
            -domain_room[1],
            -domain_room[0],
            *(~n for n in reversed(near)),
            -capped,
        )
    )
    for level, codes_near in zip(levels, anchor_codes, strict=True):
        codes = level[rows]
        domain, nodes, top = _domains(codes, capped, need)
        fitting = nodes == k_star
        if not fitting.any():
            continue
        candidates = sorted(
            zip(domain[fitting].tolist(), top[fitting].tolist(), strict=True),
            key=lambda item: (item[0] not in codes_near, item[1], item[0]),
        )
        inside = codes == candidates[0][0]
        first = np.lexsort((rows, -scores, leftover, -capped, ~inside))
        return rows[first]
    return rows[general]


def _rank_within(codes: IntArray, scores: FloatArray) -> IntArray:
    """Each row's place (0 = best score) among the rows sharing its code; -1 codes form one group."""
    order = np.lexsort((-scores, codes))
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    lengths = np.diff(np.r_[starts, codes.size])
    rank = np.empty(codes.size, dtype=np.int64)
    rank[order] = np.arange(codes.size) - np.repeat(starts, lengths)
    return rank


def _spread_order(rows: IntArray, scores: FloatArray, locality: Locality, opened: list[int]) -> IntArray:
    """Zones round robin, then racks, counting the members already placed in each."""
    if rows.size == 0:
        return rows
    keys = []
    for level in (locality.zone, locality.rack):
        codes = level[rows]
        already = {c: int((level[opened] == c).sum()) for c in set(codes.tolist())} if opened else {}
        keys.append(_rank_within(codes, scores) + np.array([already.get(c, 0) for c in codes.tolist()]))
    order: IntArray = rows[np.lexsort((rows, -scores, keys[1], keys[0]))]
    return order


def _why(
    filtered: FilterResult,
    *,
    total: int,
    placed: int,
    demand: PodDemand,
    room: IntArray,
    feasible: IntArray,
    locality: Locality,
    policy: SpreadPolicy,
) -> str:
    """One line for users: what the members need, what the admitting nodes have, why the others refuse."""
    what = f"{total} member(s) of {describe_demand(demand)}"
    gpus = int(dict(demand.device_requests).get(GPU_RESOURCE, 0))
    if gpus:
        what += f" ({total * gpus} GPUs in all)"
    if policy is SpreadPolicy.SPREAD:
        have = f"spread needs a node per member; {len(feasible)} node(s) can take one"
    else:
        capped = np.minimum(room, total)
        have = f"the {len(feasible)} node(s) that admit one have room for {int(capped.sum())}"
        if feasible.size:
            have += f" (largest node {int(capped.max())}"
            cliques = locality.clique[feasible]
            if (cliques >= 0).any():
                sums = {c: int(capped[cliques == c].sum()) for c in set(cliques.tolist()) if c >= 0}
                have += f", largest NVLink fabric clique {max(sums.values())}"
            have += ")"
    if placed:
        have += f", but the kubelet's exact check admits only {placed}"
    rejected = filtered.reason_codes[~filtered.feasible]
    counts = np.bincount(rejected, minlength=len(filtered.messages) + 1)
    top = sorted(((int(counts[c]), filtered.messages[c - 1]) for c in range(1, counts.size) if counts[c]), reverse=True)
    others = "; ".join(f"{count} node(s): {message}" for count, message in top[:_TOP_REASONS])
    return f"cannot fit {what}: {have}" + (f"; {others}" if others else "")
