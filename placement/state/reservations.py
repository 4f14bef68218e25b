"""The assume cache: a decision reserves what it places at once, so concurrent decisions never double-book.

Lifecycle of a reservation (one per pod)::

    decide() ── reserve ──> RESERVED ── pod watch shows it bound here ──> BOUND ── report accounts ──> (plain pod)
                               │  └── bound to another node: moved there        (fingerprint match)
                               └── unreserve() / deletion / TTL expiry ──> released

* Reserving subtracts the pod's CPUs, memory, hugepages and GPUs from the index's free arrays
  immediately, under the index lock that the whole decision holds, so no two decisions see the same
  free capacity.
* Binding stops the TTL (a bound pod is real); the charge stays until an agent report accounts for the
  pod (its pods fingerprint names the bound pods). A report that predates the pod leaves the charge in
  place: we would rather decide on too little free capacity than send a pod into a TopologyAffinityError
  (the failure of the upstream NodeResourceTopologyMatch plugin when its NRT data is stale).
* Expiry only releases reservations that never got bound (the scheduler gave up or chose otherwise).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.core.constraints.constraint_types import PlacedPod
from placement.core.constraints.gpu_labels import accepted_gpu_models
from placement.core.decision import NodeJudge, NodePlan, Ranking, plan_on_node, rank
from placement.core.feasibility import FilterResult
from placement.core.intent import PodIntent
from placement.core.pod_placement import DeviceChoice, Placement
from placement.core.pods import PendingPod, PodUsage
from placement.core.scoring import DEFAULT_WEIGHTS, ScoringWeights
from placement.core.vocabulary import IntArray, PodDemand, Rejected, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import choose_devices, holds_of

DEFAULT_TTL_S = 30.0


@dataclass(frozen=True)
class Decision:
    """Reserve's decision: the pod's placement, or None when no candidate holds it (see ``rejections``)."""

    namespace: str
    name: str
    placement: Placement | None = None
    expires_at: float | None = None  # the reservation's end on the reservations' clock
    filtered: FilterResult | None = None
    skipped: Mapping[str, Rejected] = field(default_factory=dict)  # feasible nodes the exact check turned down
    slot_names: tuple[str | None, ...] = ()

    @property
    def node(self) -> str | None:
        return None if self.placement is None else self.placement.node

    def rejections(self) -> dict[str, Rejected]:
        """Why each candidate was not chosen (built on demand: one entry per rejected node)."""
        result: dict[str, Rejected] = {}
        if self.filtered is not None:
            for position in np.flatnonzero(~self.filtered.feasible):
                name = self.slot_names[int(self.filtered.rows[position])]
                rejected = self.filtered.rejected(int(position))
                if name is not None and rejected is not None:
                    result[name] = rejected
        result.update(self.skipped)
        return result

    def reasons(self) -> dict[str, str]:
        """The messages of ``rejections``."""
        return {node: rejected.message for node, rejected in self.rejections().items()}


def plan_on_slot(
    index: ClusterIndex, slot: int, demand: PodDemand, intent: PodIntent, landing_cell: int
) -> NodePlan | Rejected:
    """``plan_on_node`` with the node's GPUs as the index holds them: their links, the free ones, the shares
    left (call under the index lock)."""
    shape = index.gpu_shape(slot)
    return plan_on_node(
        index.arrays(),
        slot,
        demand,
        intent=intent,
        landing_cell=landing_cell,
        gpu_table=None if shape is None else shape.table,
        free_gpus=frozenset() if shape is None else shape.healthy - index.busy_gpus(slot),
        gpu_share_left=None if shape is None else index.gpu_share_left(slot),
    )


# What Reserve's decision is made of: the candidates' rows filtered, scored and ordered; and the plan on one node
# (given its row and the cell the pod is predicted to land in): the cells and GPUs, then its claims' devices.
Ranker = Callable[[IntArray], Ranking]
NodePlanner = Callable[[int, int], tuple[NodePlan, DeviceChoice | None] | Rejected]


def _planner(index: ClusterIndex, request: PendingPod, judge: NodeJudge) -> NodePlanner:
    """The exact plan on a node, then the devices for the pod's claims there (call under the index lock)."""
    demand = demand_of(request.pod)

    def plan_node(row: int, landing_cell: int) -> tuple[NodePlan, DeviceChoice | None] | Rejected:
        plan = plan_on_slot(index, row, demand, request.intent, landing_cell)
        if isinstance(plan, Rejected):
            return plan
        devices = choose_devices(judge, plan)
        return devices if isinstance(devices, Rejected) else (plan, devices)

    return plan_node


@dataclass
class _Reservation:
    node: str
    expires_at: float


class Reservations:
    """Reservations over a ``ClusterIndex``; every method holds the index lock."""

    def __init__(
        self,
        index: ClusterIndex,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        weights: ScoringWeights | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"reservation TTL must be positive, got {ttl_s}")
        self._index = index
        self._ttl_s = ttl_s
        self._weights = weights or DEFAULT_WEIGHTS
        self._clock = clock
        self._pending: dict[tuple[str, str], _Reservation] = {}

    def decide(
        self,
        request: PendingPod,
        candidate_names: Iterable[str] | None = None,
        *,
        ranker: Ranker | None = None,
        planner: NodePlanner | None = None,
    ) -> Decision:
        """Filter, score, plan and reserve atomically; ``candidate_names`` None means every node.

        ``ranker`` filters, scores and orders the candidates' rows; ``planner`` plans the pod on one node (its
        cells and GPUs, then its claims' devices). The service's pipeline passes its plugins'
        (``Pipeline.reserve``). By default the pod's whole judge ranks (``decision.rank``) and ``plan_on_slot``
        and ``choose_devices`` plan: the same rules, for callers without the pipeline (the drivers' held room, the
        gang tests, the simulator).
        """
        index = self._index
        with index.lock:
            self.expire()
            key = (request.namespace, request.name)
            if key in self._pending:
                self._release(key)  # a retry of the same pod replaces its earlier reservation
            names = None if candidate_names is None else list(candidate_names)
            rows = index.slots(names)
            demand = demand_of(request.pod)
            if ranker is None or planner is None:
                judge = index.judge(request)
                ranker = ranker or self._ranker(request, judge)
                planner = planner or _planner(index, request, judge)
            ranking = ranker(rows)  # after the release above: the pod's earlier reservation no longer counts
            scores = ranking.scores
            skipped: dict[str, Rejected] = {}
            # Every feasible node, best first, until one holds: the vectorised filter is a necessary
            # condition (a share of a GPU can pass it on summed thousandths in the kubelet's cell that no
            # single GPU there has), so a pod that fits somewhere must not wait because the best few did not.
            for position in ranking.order:
                row = int(scores.rows[position])
                node = index.name_of(row) or ""
                planned = planner(row, int(scores.landing_cell[position]))
                if isinstance(planned, Rejected):
                    skipped[node] = planned
                    continue
                plan, devices = planned
                if devices is not None:
                    index.dra.hold(key, holds_of(devices, node))
                index.assume_pod(
                    PodUsage(
                        namespace=request.namespace,
                        name=request.name,
                        node=node,
                        demand=demand,
                        cells=plan.cells,
                        gpus=plan.gpus,
                        isolated=request.intent.exclusive,
                        gpu_models=accepted_gpu_models(request.constraints),
                    )
                )
                index.facts.put_pod(request.placed_on(node))  # the next decision sees it there
                expires_at = self._clock() + self._ttl_s
                self._pending[key] = _Reservation(node=node, expires_at=expires_at)
                placement = Placement(
                    namespace=request.namespace,
                    name=request.name,
                    node=node,
                    cells=plan.cells,
                    gpus=plan.gpus,
                    pinned=plan.pinned,
                    row=row,
                    score=float(scores.total[position]),
                    breakdown=scores.breakdown(int(position)),
                    devices=devices,
                )
                return Decision(
                    namespace=request.namespace,
                    name=request.name,
                    placement=placement,
                    expires_at=expires_at,
                    filtered=ranking.filtered,
                    skipped=skipped,
                    slot_names=index.slot_names(),
                )
            return Decision(
                namespace=request.namespace,
                name=request.name,
                filtered=ranking.filtered,
                skipped=skipped,
                slot_names=index.slot_names(),
            )

    def _ranker(self, request: PendingPod, judge: NodeJudge) -> Ranker:
        arrays, demand, weights = self._index.arrays(), demand_of(request.pod), self._weights
        return lambda rows: rank(arrays, rows, demand, intent=request.intent, weights=weights, constraints=judge)

    def reserve_all(
        self, usages: Sequence[PodUsage], placed: Sequence[PlacedPod] = (), *, expires: bool = True
    ) -> float:
        """Reserve placements planned elsewhere (a gang's) together, under the index lock: all or none.

        The caller planned them on the index's arrays under the same lock hold, so they fit; a retry of a
        pod replaces its earlier reservation, as in ``decide``. ``placed``: the pods as the constraint
        plugins see them, aligned with ``usages``. ``expires=False``: no TTL, the caller releases them (a
        gang's permit timeout must release the whole gang, never one member). Returns the expiry
        (``math.inf`` without TTL).
        """
        if placed and len(placed) != len(usages):
            raise ValueError("placed pods must be aligned with the usages")
        with self._index.lock:
            expires_at = self._clock() + self._ttl_s if expires else math.inf
            done: list[tuple[str, str]] = []
            try:
                for position, usage in enumerate(usages):
                    if usage.key in self._pending:
                        self._release(usage.key)
                    self._index.assume_pod(usage)
                    if placed:
                        self._index.facts.put_pod(placed[position])
                    self._pending[usage.key] = _Reservation(node=usage.node, expires_at=expires_at)
                    done.append(usage.key)
            except BaseException:
                for key in done:
                    self._release(key)
                raise
            return expires_at

    def observe_pod(self, usage: PodUsage) -> None:
        """The pod watch shows ``usage`` bound: confirms (or moves) its reservation; stops its TTL."""
        with self._index.lock:
            self._pending.pop(usage.key, None)
            self._index.upsert_pod(usage)

    def observe_pod_deleted(self, namespace: str, name: str) -> None:
        self._release((namespace, name))

    def unreserve(self, namespace: str, name: str) -> bool:
        """The scheduler gave up on the pod (Unreserve): release it unless it is already bound."""
        with self._index.lock:
            if (namespace, name) not in self._pending:
                return False
            self._release((namespace, name))
            return True

    def expire(self) -> list[tuple[str, str]]:
        """Release the reservations whose TTL ran out without a binding; returns their pods."""
        with self._index.lock:
            now = self._clock()
            expired = [key for key, r in self._pending.items() if r.expires_at <= now]
            for key in expired:
                self._release(key)
            return expired

    def pending(self) -> dict[tuple[str, str], str]:
        """Reserved, not yet bound: pod -> node."""
        with self._index.lock:
            return {key: r.node for key, r in self._pending.items()}

    def _release(self, key: tuple[str, str]) -> None:
        with self._index.lock:
            reservation = self._pending.pop(key, None)
            self._index.remove_pod(*key)
            self._index.dra.release(key)
            facts = self._index.facts
            held = facts.pod(*key)
            if reservation is not None and held is not None and held.node == reservation.node:
                facts.remove_pod(*key)  # not bound: the constraint plugins no longer see it there
