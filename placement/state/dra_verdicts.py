"""A pod's DRA claims judged on the nodes, beside its kube-scheduler constraints: Filter, Score, Reserve.

``PodWithDevices`` wraps the constraint judge (``core.constraints.context.PodInCluster``) for a pod with
``spec.resourceClaims``, as kube-scheduler's DynamicResources plugin sits in its profile:

* **Filter** (after the constraint plugins, on the nodes still feasible). The pod's claims are looked up
  (``core.dra.pod_claims``): a claim missing, being deleted or not the pod's refuses every node with
  upstream's words. A claim already allocated (by us, kube-scheduler or anyone) is kept as it is: only
  the nodes its ``status.allocation.nodeSelector`` selects pass ("resourceclaim not available on the
  node"). The unallocated ones must be allocatable together on the node: kube-scheduler 1.37's
  allocator's first fit (``core.dra.first_fit``) decides, as upstream's Filter does. Refusals say "cannot allocate all
  claims" with what the selectors keep and what is free; an error (a selector that does not evaluate, an
  unknown DeviceClass) says what it is.
* **Score**: our best fit (``core.dra.best_fit``) on each feasible node, with the cell the pod is
  predicted to land in (the Topology Manager model's landing cell) as the preferred NUMA cell: NVLink,
  NUMA alignment and fragmentation, normalised to [0, 1], as the ``devices`` component at
  ``DEVICES_WEIGHT`` (upstream's DynamicResources does not score).
* **Reserve** (``choose_devices``): best fit on the chosen node with the pod's own claims.

Answers are kept per index slot for each claims shape (the claims' requests and constraints, not their
names: pods made from one template share them), in ``DeviceChoices``: a decision judges again only the
slots whose node's devices, holds or topology changed since (``DraState.changed_since``), and every slot
when the pools, the DeviceClasses, a node's labels or the index's arrays grew.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from placement.core.constraints.constraint_types import Labels
from placement.core.constraints.context import PodInCluster
from placement.core.constraints.verdicts import ConstraintVerdict, FilterStage, Reasons, merge_with_resources
from placement.core.decision import NodeJudge, NodePlan
from placement.core.dra.best_fit import BestFit, FitWeights, best_fit
from placement.core.dra.claims import ResourceClaim
from placement.core.dra.device_types import NodeSelection
from placement.core.dra.first_fit import Allocation, Unallocatable, first_fit
from placement.core.dra.pod_claims import ClaimsUnusable, PodClaims, resolve_pod_claims
from placement.core.dra.pools import DeviceRef, selects_node
from placement.core.feasibility import FilterResult
from placement.core.pod_placement import DeviceChoice
from placement.core.pods import PendingPod
from placement.core.scoring import Scores, with_constraint_scores
from placement.core.vocabulary import BoolArray, FloatArray, IntArray, Rejected, RejectionKind
from placement.state.dra_state import DraState, Hold

# The device choice weighs as much as the topology score (``scoring.TOPOLOGY_WEIGHT``): for a pod whose GPUs
# come from claims, the NVLink and NUMA quality of its devices is the topology decision.
DEVICES_WEIGHT = 12
DEVICES_PLUGIN = "DynamicResources"
_KEPT_SHAPES = 256  # claims shapes whose answers are kept (each an array per slot)
_WEIGHTS = FitWeights()
_TOP_SCORE = _WEIGHTS.links + _WEIGHTS.numa + _WEIGHTS.fragmentation
# dynamicresources: the Filter's reasons for an allocated claim elsewhere and for claims that do not fit.
NOT_ON_NODE = Rejected("resourceclaim not available on the node", RejectionKind.NODE_CONSTRAINT)
CANNOT_ALLOCATE = "cannot allocate all claims"


@dataclass
class _SlotAnswers:
    """One claims shape's answers per index slot, valid at ``epoch`` and up to the DRA change log's ``stamp``."""

    epoch: object
    stamp: int
    fit: npt.NDArray[np.int32]  # -1 not judged yet, 0 the claims fit, k > 0: ``reasons[k - 1]``
    reasons: list[Rejected] = field(default_factory=list)
    scores: dict[int, FloatArray] = field(default_factory=dict)  # preferred cell (-1 none) -> score, NaN unknown

    def code(self, refused: Rejected | None) -> int:
        if refused is None:
            return 0
        if refused not in self.reasons:
            self.reasons.append(refused)
        return self.reasons.index(refused) + 1


class DeviceChoices:
    """First-fit and best-fit answers, kept per slot for each claims shape; a slot is judged again only when
    its node's devices, holds, labels or topology changed (``DraState.changed_since``), every slot when the
    pools, the DeviceClasses, any node's labels (a slot given to another node counts) or the index's layout
    changed."""

    def __init__(
        self,
        dra: DraState,
        *,
        slots: Callable[[], tuple[int, int]],
        slot_of: Callable[[str], int | None],
        labels_version: Callable[[], int],
    ) -> None:
        self.dra = dra
        self._slots = slots  # the index's (layout, capacity)
        self._slot_of = slot_of
        self._labels_version = labels_version
        self._answers: dict[object, _SlotAnswers] = {}

    def answers(self, claims: tuple[ResourceClaim, ...]) -> _SlotAnswers:
        """The kept answers for ``claims``' shape, brought up to date (call under the index lock)."""
        dra = self.dra
        slots = self._slots()
        epoch = (dra.pools_version, dra.shared_version, dra.classes_version, self._labels_version(), slots)
        shape = _shape(claims)
        kept = self._answers.get(shape)
        if kept is None or kept.epoch != epoch:
            if len(self._answers) >= _KEPT_SHAPES:
                self._answers.clear()
            kept = self._answers[shape] = _SlotAnswers(epoch, dra.change_count, np.full(slots[1], -1, dtype=np.int32))
            return kept
        for node in dra.changed_since(kept.stamp):
            slot = self._slot_of(node)
            if slot is not None:
                kept.fit[slot] = -1
                for scores in kept.scores.values():
                    scores[slot] = np.nan
        kept.stamp = dra.change_count
        return kept

    def first_fit(self, node: str, labels: Labels, claims: tuple[ResourceClaim, ...]) -> Allocation | Unallocatable:
        return first_fit(claims, classes=self.dra.classes, inventory=self.dra.inventory(node, dict(labels)))

    def best_fit(
        self,
        node: str,
        labels: Labels,
        claims: tuple[ResourceClaim, ...],
        preferred: int | None,
        *,
        freed: frozenset[DeviceRef] = frozenset(),
        taken_again: frozenset[DeviceRef] = frozenset(),
    ) -> BestFit | Unallocatable:
        """Best fit on ``node``, with the devices ``freed`` by evictions taken by nobody, and those
        ``taken_again`` by a gang's earlier members taken (preemption's check)."""
        node_labels = dict(labels)
        return best_fit(
            claims,
            classes=self.dra.classes,
            inventory=self.dra.inventory_without(node, node_labels, freed, taken_again=taken_again),
            prepared=self.dra.prepared(node, node_labels),
            preferred_numa=preferred,
            weights=_WEIGHTS,
        )


@dataclass(frozen=True)
class PodWithDevices:
    """The constraint judge, with the pod's DRA claims judged after it (module docstring)."""

    constraints: PodInCluster
    pod: PendingPod
    choices: DeviceChoices
    node_name: Callable[[int], str | None]
    node_labels: Callable[[str], Labels]
    landing_cells: Callable[[IntArray, IntArray], IntArray]  # (slots, cell positions) -> NUMA cell ids, -1
    _claims: list[PodClaims | ClaimsUnusable] = field(default_factory=list, compare=False)

    def verdict(self, rows: IntArray) -> ConstraintVerdict:
        """The constraints' verdict with the claims judged where it passes (what gang planning reads)."""
        return self._verdict(rows, unallocated=True)

    def verdict_after_eviction(self, rows: IntArray) -> ConstraintVerdict:
        """``verdict`` with only the claims allocated already judged (eviction moves none): preemption judges
        the others with the victims' devices freed (``state.eviction_devices``), not as the cache holds them."""
        return self._verdict(rows, unallocated=False)

    def _verdict(self, rows: IntArray, *, unallocated: bool) -> ConstraintVerdict:
        verdict = self.constraints.verdict(rows)
        passing = verdict.feasible
        if not passing.any():
            return verdict
        reasons = Reasons(len(rows))
        self._judge_claims(np.asarray(rows, dtype=np.int64), passing, reasons, judge_unallocated=unallocated)
        devices = reasons.verdict(rows)
        if not devices.messages:
            return verdict
        offset = len(verdict.messages)
        codes = np.where(passing & (devices.reason_codes > 0), devices.reason_codes + offset, verdict.reason_codes)
        return ConstraintVerdict(
            verdict.rows,
            codes.astype(np.int16),
            verdict.messages + devices.messages,
            verdict.kinds + devices.kinds,
            verdict.stages + devices.stages,
        )

    def claims(self) -> PodClaims:
        """The pod's claims as the cache holds them now (looked up once per judge). Raises ``ClaimsUnusable``."""
        if not self._claims:
            dra = self.choices.dra
            try:
                found: PodClaims | ClaimsUnusable = resolve_pod_claims(
                    self.pod.namespace,
                    self.pod.name,
                    self.pod.uid,
                    self.pod.resource_claims,
                    claim=dra.claim,
                    owned_claim=dra.owned_claim,
                )
            except ClaimsUnusable as error:
                found = error
            self._claims.append(found)
        answer = self._claims[0]
        if isinstance(answer, ClaimsUnusable):
            raise answer
        return answer

    def filtered(self, resources: FilterResult) -> FilterResult:
        return self.claims_filtered(self.constraints.filtered(resources))

    def claims_filtered(self, result: FilterResult) -> FilterResult:
        """``result`` with the claims judged on the rows it still passes (DynamicResources' Filter)."""
        if not result.feasible.any():
            return result
        reasons = Reasons(len(result.rows))
        self._judge_claims(result.rows, result.feasible, reasons)
        return merge_with_resources(result, reasons.verdict(result.rows))

    def _judge_claims(
        self, rows: IntArray, open_rows: BoolArray, reasons: Reasons, *, judge_unallocated: bool = True
    ) -> None:
        """Give each open row the claims' refusal on its node, if any (``judge_unallocated``: the claims not
        allocated yet too)."""
        try:
            claims = self.claims()
        except ClaimsUnusable as error:
            reasons.reject(open_rows, Rejected(str(error), RejectionKind.NODE_CONSTRAINT), _STAGE)
            return
        if claims.allocated:  # where the claims allocated already can be used: node by node (rare)
            for position in np.flatnonzero(open_rows).tolist():
                if not self.allocated_here(int(rows[position]), claims):
                    reasons.reject(_only(len(rows), position), NOT_ON_NODE, _STAGE)
        unallocated = claims.unallocated
        if not unallocated or not judge_unallocated:
            return
        answers = self.choices.answers(unallocated)
        codes = answers.fit[rows]
        for position in np.flatnonzero(open_rows & (codes < 0)).tolist():
            slot = int(rows[position])
            node = self.node_name(slot) or ""
            fit = self.choices.first_fit(node, self.node_labels(node), unallocated)
            codes[position] = answers.fit[slot] = answers.code(
                unallocatable(fit) if isinstance(fit, Unallocatable) else None
            )
        for code in np.unique(codes[open_rows & (codes > 0)]).tolist():
            reasons.reject(open_rows & (codes == code), answers.reasons[code - 1], _STAGE)

    def allocated_here(self, slot: int, claims: PodClaims) -> bool:
        """Whether every claim of the pod allocated already can be used on the node at ``slot``."""
        node = self.node_name(slot) or ""
        labels = dict(self.node_labels(node))
        return all(
            not claim.allocation_nodes
            or selects_node(NodeSelection(node_selector=claim.allocation_nodes), node, labels)
            for claim in claims.allocated
        )

    def refusal(self, slot: int, claims: PodClaims) -> Rejected | None:
        """Why the node at ``slot`` cannot take the pod's claims, or None (one node: Reserve, gangs)."""
        if not self.allocated_here(slot, claims):
            return NOT_ON_NODE
        unallocated = claims.unallocated
        if not unallocated:
            return None
        answers = self.choices.answers(unallocated)
        code = int(answers.fit[slot])
        if code < 0:
            node = self.node_name(slot) or ""
            fit = self.choices.first_fit(node, self.node_labels(node), unallocated)
            code = answers.fit[slot] = answers.code(unallocatable(fit) if isinstance(fit, Unallocatable) else None)
        return None if code == 0 else answers.reasons[code - 1]

    def scored(self, scores: Scores) -> Scores:
        return self.devices_scored(self.constraints.scored(scores))

    def devices_scored(self, scores: Scores) -> Scores:
        """``scores`` with the device choice's points added (DynamicResources' Score)."""
        try:
            unallocated = self.claims().unallocated
        except ClaimsUnusable:
            return scores
        if not unallocated or not len(scores.rows):
            return scores
        answers = self.choices.answers(unallocated)
        preferred = self.landing_cells(scores.rows, scores.landing_cell)  # -1: the pod spans the node
        points = np.zeros(len(scores.rows), dtype=np.float64)
        for cell in np.unique(preferred).tolist():
            kept = answers.scores.setdefault(cell, np.full(len(answers.fit), np.nan))
            mine = preferred == cell
            slots = scores.rows[mine]
            values = kept[slots]
            for position in np.flatnonzero(np.isnan(values)).tolist():
                slot = int(slots[position])
                node = self.node_name(slot) or ""
                fit = self.choices.best_fit(node, self.node_labels(node), unallocated, None if cell < 0 else cell)
                values[position] = kept[slot] = _points(fit)
            points[mine] = values
        return with_constraint_scores(scores, {DEVICES_PLUGIN: points}, {DEVICES_PLUGIN: DEVICES_WEIGHT})


def choose_devices(judge: NodeJudge, plan: NodePlan) -> DeviceChoice | Rejected | None:
    """Reserve's device choice on the planned node: best fit for the pod's own unallocated claims, preferring
    the one NUMA cell the plan puts the pod in; None for a pod without claims."""
    if not isinstance(judge, PodWithDevices):
        return None
    try:
        claims = judge.claims()
    except ClaimsUnusable as error:
        return Rejected(str(error), RejectionKind.NODE_CONSTRAINT)
    refused = judge.refusal(plan.row, claims)  # an allocated claim elsewhere
    if refused is not None:
        return refused
    if not claims.unallocated:
        return DeviceChoice(None, claims.allocated)
    node = judge.node_name(plan.row) or ""
    preferred = plan.cells[0] if len(plan.cells) == 1 else None
    fit = judge.choices.best_fit(node, judge.node_labels(node), claims.unallocated, preferred)
    if isinstance(fit, Unallocatable):
        return unallocatable(fit)
    return DeviceChoice(fit, claims.allocated, judge.choices.dra.inferred_note(node))


def holds_of(choice: DeviceChoice, node: str) -> list[Hold]:
    """What a reservation holds for the devices chosen until the claims show them allocated."""
    if choice.fit is None:
        return []
    return [
        Hold((c.claim.namespace, c.claim.name), node, frozenset(d.device.ref for d in c.devices))
        for c in choice.fit.allocation.claims
    ]


def unallocatable(fit: Unallocatable) -> Rejected:
    """The Filter's refusal for claims that cannot be allocated on a node: upstream's words, then why."""
    if fit.error:
        return Rejected(fit.reason, RejectionKind.NODE_CONSTRAINT)
    return Rejected(f"{CANNOT_ALLOCATE}: {fit.detail}", RejectionKind.POD_CONSTRAINT)


_STAGE = FilterStage.DYNAMIC_RESOURCES


def _points(fit: BestFit | Unallocatable) -> float:
    """A best fit's score on the plugins' scale (0-100)."""
    return 100.0 * float(fit.score.total / _TOP_SCORE) if isinstance(fit, BestFit) else 0.0


def _only(size: int, position: int) -> BoolArray:
    mask = np.zeros(size, dtype=np.bool_)
    mask[position] = True
    return mask


def _shape(claims: tuple[ResourceClaim, ...]) -> tuple[object, ...]:
    return tuple((claim.spec.requests, claim.spec.constraints) for claim in claims)
