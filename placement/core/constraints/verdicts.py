"""Where each constraint verdict arises in kube-scheduler's order, its words, and the result type.

Messages are kube-scheduler's own (each constant names its plugin's ``ErrReason``), with one kind each:
``NODE_CONSTRAINT`` where upstream answers ``UnschedulableAndUnresolvable`` (evicting pods would not help),
``POD_CONSTRAINT`` where it answers ``Unschedulable``. ``FilterStage`` orders the plugins as the default
profile runs them (``pkg/scheduler/apis/config/v1/default_plugins.go``): pod-level refusals first
(``PreEnqueue``, then every ``PreFilter``), then the ``Filter`` plugins in profile order. NodeResourcesFit
sits between NodePorts and VolumeBinding; the resource verdict comes from ``placement.core.feasibility``,
and ``merge_with_resources`` puts the two together in that order.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.core.constraints.constraint_types import PodConstraints
from placement.core.feasibility import FilterResult
from placement.core.vocabulary import BoolArray, IntArray, Rejected, RejectionKind

_NODE = RejectionKind.NODE_CONSTRAINT
_POD = RejectionKind.POD_CONSTRAINT


class FilterStage(enum.IntEnum):
    """Where a verdict arises; a lower stage is reported first."""

    SCHEDULING_GATES = 0  # PreEnqueue: SchedulingGates
    PRE_FILTER = 1  # pod-level PreFilter refusals: VolumeBinding claims, InterPodAffinity/PodTopologySpread parse
    PRE_FILTER_RESULT = 2  # nodes outside the PreFilter plugins' node names (NodeName, NodeAffinity): not filtered
    NODE_UNSCHEDULABLE = 3
    NODE_NAME = 4
    TAINT_TOLERATION = 5
    NODE_AFFINITY = 6
    NODE_PORTS = 7
    NODE_RESOURCES_FIT = 8  # the resource filter (placement.core.feasibility), not judged here
    VOLUME_BINDING = 9
    POD_TOPOLOGY_SPREAD = 10
    INTER_POD_AFFINITY = 11
    DYNAMIC_RESOURCES = 12  # DRA claims (placement.state.dra_verdicts), judged after the constraint plugins


# nodeunschedulable.ErrReasonUnschedulable
NODE_UNSCHEDULABLE = Rejected("node(s) were unschedulable", _NODE)
# nodeaffinity.errReasonConflict (PreFilter: every term names nodes, and none survives)
NAME_CONFLICT = Rejected("pod affinity terms conflict", _NODE)
# nodename.ErrReason
NODE_NAME_MISMATCH = Rejected("node(s) didn't match the requested node name", _NODE)
# nodeaffinity.ErrReasonPod
NODE_AFFINITY_MISMATCH = Rejected("node(s) didn't match Pod's node affinity/selector", _NODE)
# nodeports.ErrReason
NO_FREE_PORTS = Rejected("node(s) didn't have free ports for the requested pod ports", _POD)
# volumebinding: ErrReasonNodeConflict and ErrReasonBindConflict (binder.go); unboundImmediatePVC in PreFilter.
VOLUME_NODE_CONFLICT = Rejected("node(s) didn't match PersistentVolume's node affinity", _NODE)
VOLUME_BIND_CONFLICT = Rejected("node(s) didn't find available persistent volumes to bind", _NODE)
UNBOUND_IMMEDIATE_CLAIMS = Rejected("pod has unbound immediate PersistentVolumeClaims", _NODE)
# Ours: upstream finds or provisions a volume for such a claim; this scheduler binds no volumes.
WAITS_FOR_FIRST_CONSUMER = Rejected(
    "pod has unbound PersistentVolumeClaims that wait for their first consumer: "
    "this scheduler neither binds nor provisions volumes",
    _NODE,
)
# podtopologyspread.ErrReasonConstraintsNotMatch and ErrReasonNodeLabelNotMatch
SPREAD_MISMATCH = Rejected("node(s) didn't match pod topology spread constraints", _POD)
SPREAD_MISSING_LABEL = Rejected("node(s) didn't match pod topology spread constraints (missing required label)", _NODE)
# interpodaffinity.ErrReasonAffinityRulesNotMatch, ErrReasonAntiAffinityRulesNotMatch,
# ErrReasonExistingAntiAffinityRulesNotMatch
AFFINITY_MISMATCH = Rejected("node(s) didn't match pod affinity rules", _NODE)
ANTI_AFFINITY_MISMATCH = Rejected("node(s) didn't match pod anti-affinity rules", _POD)
EXISTING_ANTI_AFFINITY = Rejected("node(s) didn't satisfy existing pods anti-affinity rules", _POD)

# The default profile's score weights (default_plugins.go), for the engine to weigh ``constraint_scores``.
SCORE_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
)
MAX_NODE_SCORE = 100  # framework.MaxNodeScore


# tainttoleration/taint_toleration.go Filter: the taint is named in the scheduler's log only, not in the reason.
UNTOLERATED_TAINT = Rejected("node(s) had untolerated taint(s)", _NODE)


def outside_pre_filter_result(plugins: Sequence[str]) -> Rejected:
    """What ``findNodesThatFitPod`` (pkg/scheduler/schedule_one.go) gives each node left out of the
    ``PreFilterResult``: the plugins that named nodes, sorted, as Go prints a string slice."""
    return Rejected(f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}]", _NODE)


def no_node_satisfies(plugins: Sequence[str]) -> Rejected:
    """``RunPreFilterPlugins`` (framework/runtime/framework.go) when the node names of the PreFilter plugins
    leave no node: the pod is refused before any Filter."""
    if len(plugins) == 1:
        return Rejected(f"node(s) didn't satisfy plugin {plugins[0]}", _NODE)
    return Rejected(f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}] simultaneously", _NODE)


def claim_not_found(name: str) -> Rejected:
    """VolumeBinding's PreFilter for a claim it cannot find (also one bound to a volume it cannot find)."""
    return Rejected(f'persistentvolumeclaim "{name}" not found', _NODE)


def unparsable_pod(detail: str) -> Rejected:
    """InterPodAffinity's PreFilter for terms that do not parse (``parsing pod: ...``)."""
    return Rejected(f"parsing pod: {detail}", _NODE)


def unparsable_spread(detail: str) -> Rejected:
    """PodTopologySpread's PreFilter for constraints that do not parse; upstream answers with an error."""
    return Rejected(f"get constraints from pod: {detail}", _NODE)


def scheduling_gate_refusal(constraints: PodConstraints) -> Rejected | None:
    """SchedulingGates' PreEnqueue: a gated pod is not scheduled at all, on any node. The gates are listed as
    Go prints a slice (``waiting for scheduling gates: [a b]``)."""
    if not constraints.scheduling_gates:
        return None
    return Rejected(f"waiting for scheduling gates: [{' '.join(constraints.scheduling_gates)}]", _NODE)


@dataclass(frozen=True)
class ConstraintVerdict:
    """Per candidate row the first failing constraint in kube-scheduler's order; codes as ``FilterResult``."""

    rows: IntArray
    reason_codes: npt.NDArray[np.int16]  # 0 when every constraint holds, else 1 + an index into ``messages``
    messages: tuple[str, ...]
    kinds: tuple[RejectionKind, ...]
    stages: tuple[FilterStage, ...]  # of each message

    @classmethod
    def passing(cls, rows: IntArray) -> ConstraintVerdict:
        """Every row passes every constraint."""
        return cls(rows, np.zeros(len(rows), dtype=np.int16), (), (), ())

    @property
    def feasible(self) -> BoolArray:
        ok: BoolArray = self.reason_codes == 0
        return ok

    def rejected(self, position: int) -> Rejected | None:
        code = int(self.reason_codes[position])
        return None if code == 0 else Rejected(self.messages[code - 1], self.kinds[code - 1])

    def stage(self, position: int) -> FilterStage | None:
        code = int(self.reason_codes[position])
        return None if code == 0 else self.stages[code - 1]

    def at(self, rows: IntArray) -> ConstraintVerdict:
        """The verdict of ``rows``, taken from this verdict over every slot (``rows`` are slots)."""
        return ConstraintVerdict(rows, self.reason_codes[rows], self.messages, self.kinds, self.stages)

    def up_to(self, last: FilterStage) -> ConstraintVerdict:
        """This verdict with only the refusals of stages up to ``last`` kept (the others pass)."""
        kept = np.array([True, *(stage <= last for stage in self.stages)], dtype=np.bool_)
        codes = np.where(kept[self.reason_codes], self.reason_codes, 0).astype(np.int16)
        return ConstraintVerdict(self.rows, codes, self.messages, self.kinds, self.stages)


class Reasons:
    """Collects each row's first failing reason: callers reject in stage order, a row keeps its first."""

    def __init__(self, size: int) -> None:
        self.codes = np.zeros(size, dtype=np.int16)
        self._messages: list[str] = []
        self._kinds: list[RejectionKind] = []
        self._stages: list[FilterStage] = []
        self._index: dict[str, int] = {}

    def reject(self, failing: BoolArray, rejected: Rejected, stage: FilterStage) -> None:
        target = failing & (self.codes == 0)
        if not target.any():
            return
        self.codes[target] = self._code(rejected, stage)

    def reject_all(self, rejected: Rejected, stage: FilterStage) -> None:
        self.codes[self.codes == 0] = self._code(rejected, stage)

    def open(self) -> BoolArray:
        """The rows no reason has been given yet."""
        still: BoolArray = self.codes == 0
        return still

    def verdict(self, rows: IntArray) -> ConstraintVerdict:
        return ConstraintVerdict(rows, self.codes, tuple(self._messages), tuple(self._kinds), tuple(self._stages))

    def _code(self, rejected: Rejected, stage: FilterStage) -> int:
        code = self._index.get(rejected.message)
        if code is None:
            self._messages.append(rejected.message)
            self._kinds.append(rejected.kind)
            self._stages.append(stage)
            code = self._index[rejected.message] = len(self._messages)
        return code


def merge_with_resources(resources: FilterResult, constraints: ConstraintVerdict) -> FilterResult:
    """Each row's first failing reason over both filters, in kube-scheduler's order: a constraint from a
    stage before NodeResourcesFit wins over a resource refusal, the resource refusal wins over a later
    stage. Both must be about the same rows, in the same order."""
    if not np.array_equal(resources.rows, constraints.rows):
        raise ValueError("the resource and constraint verdicts are about different rows")
    if not constraints.messages:  # no constraint refused any row: the resource verdict stands as it is
        return resources
    offset = len(resources.messages)
    constraint_codes = constraints.reason_codes.astype(np.int16)
    early = np.array([False, *(s < FilterStage.NODE_RESOURCES_FIT for s in constraints.stages)], dtype=np.bool_)
    take_constraint = (constraint_codes > 0) & (early[constraint_codes] | (resources.reason_codes == 0))
    codes = np.where(take_constraint, constraint_codes + offset, resources.reason_codes).astype(np.int16)
    return FilterResult(
        rows=resources.rows,
        feasible=codes == 0,
        reason_codes=codes,
        messages=resources.messages + constraints.messages,
        kinds=resources.kinds + constraints.kinds,
        exact_rows=resources.exact_rows,
    )
