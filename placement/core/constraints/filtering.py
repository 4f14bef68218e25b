"""kube-scheduler's Filter plugins for many candidate slots at once.

``constraint_filter`` answers, for each row, the first constraint that refuses the pod, in the order the
default profile runs the plugins (``verdicts.FilterStage``); ``verdicts.merge_with_resources`` folds in
the resource verdict of ``placement.core.feasibility``. Every plugin here computes what its counterpart in
``placement.core.constraints.reference`` computes node by node (the property test holds them equal);
the difference is the arithmetic: masks per distinct requirement, term and toleration set, and placed pods
counted per slot by group (``cache``).

A pod that asks for nothing pays for nothing it does not use: each plugin starts with the cheap test of
whether it applies (the pod's own fields, whether any node is tainted or cordoned, whether any placed pod
holds a required anti-affinity term) and returns at once when it does not.
"""

from __future__ import annotations

import numpy as np

from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import (
    GpuRequirements,
    Labels,
    NodeSelectorTerm,
    PodConstraints,
    WhenUnsatisfiable,
)
from placement.core.constraints.gpu_labels import gpu_checks
from placement.core.constraints.selectors import (
    UNSCHEDULABLE_TAINT,
    WILDCARD_IP,
    SelectorError,
    pre_filter_names,
    sanitized_port,
    tolerated,
)
from placement.core.constraints.terms import (
    AffinityTerm,
    IncomingPod,
    PodTerms,
    SpreadConstraint,
    matches_existing,
    matches_incoming,
    spread_keys,
)
from placement.core.constraints.verdicts import (
    AFFINITY_MISMATCH,
    ANTI_AFFINITY_MISMATCH,
    EXISTING_ANTI_AFFINITY,
    NAME_CONFLICT,
    NO_FREE_PORTS,
    NODE_AFFINITY_MISMATCH,
    NODE_NAME_MISMATCH,
    NODE_UNSCHEDULABLE,
    SPREAD_MISMATCH,
    SPREAD_MISSING_LABEL,
    UNBOUND_IMMEDIATE_CLAIMS,
    UNTOLERATED_TAINT,
    VOLUME_BIND_CONFLICT,
    VOLUME_NODE_CONFLICT,
    WAITS_FOR_FIRST_CONSUMER,
    ConstraintVerdict,
    FilterStage,
    Reasons,
    claim_not_found,
    no_node_satisfies,
    outside_pre_filter_result,
    scheduling_gate_refusal,
    unparsable_pod,
    unparsable_spread,
)
from placement.core.constraints.view import ClusterView
from placement.core.vocabulary import BoolArray, IntArray, Rejected

_MAX_INT32 = 2**31 - 1  # the spread plugin's global minimum when no domain is eligible


def constraint_filter(
    view: ClusterView,
    rows: IntArray,
    namespace: str,
    labels: Labels,
    constraints: PodConstraints,
    *,
    cache: ConstraintCache | None = None,
) -> ConstraintVerdict:
    """Per slot in ``rows``, the first constraint that refuses the pod (``namespace``, ``labels``,
    ``constraints``). Read the view under its lock; ``cache`` is the view's memo (a fresh one if None)."""
    memo = ConstraintCache() if cache is None else cache
    memo.bind(view)
    pod = IncomingPod(namespace, labels, constraints)
    rows = np.asarray(rows, dtype=np.int64)
    reasons = Reasons(len(rows))
    refused = _pod_refusal(memo, pod)
    if refused is not None:
        reasons.reject_all(refused[1], refused[0])
        return reasons.verdict(rows)
    if constraints.node_name or constraints.node_affinity is not None:
        _outside_pre_filter_result(memo, rows, constraints, reasons)
    _node_checks(memo, rows, constraints, reasons)
    if constraints.host_ports:
        reasons.reject(_port_conflicts(memo, rows, constraints), NO_FREE_PORTS, FilterStage.NODE_PORTS)
    if constraints.claims:
        _volume_binding(memo, rows, pod, reasons)
    if constraints.topology_spread and reasons.open().any():
        _topology_spread(memo, rows, pod, reasons)
    if reasons.open().any():
        _inter_pod_affinity(memo, rows, pod, reasons)
    return reasons.verdict(rows)


# --- pod-level refusals ----------------------------------------------------------------------------------


def _pod_refusal(memo: ConstraintCache, pod: IncomingPod) -> tuple[FilterStage, Rejected] | None:
    """SchedulingGates, then the PreFilter refusals in profile order (``reference.pod_refusal``)."""
    namespace, constraints = pod.namespace, pod.constraints
    gated = scheduling_gate_refusal(constraints)
    if gated is not None:
        return FilterStage.SCHEDULING_GATES, gated
    refused = _name_conflict(constraints)
    if refused is None and constraints.claims:
        refused = _claims_refusal(memo.view, namespace, constraints)
    if refused is None and constraints.topology_spread:
        try:
            memo.spread(pod, WhenUnsatisfiable.DO_NOT_SCHEDULE)
        except SelectorError as error:
            refused = unparsable_spread(str(error))
    if refused is None and (constraints.pod_affinity is not None or constraints.pod_anti_affinity is not None):
        try:
            memo.pod_terms(pod)
        except SelectorError as error:
            refused = unparsable_pod(str(error))
    return None if refused is None else (FilterStage.PRE_FILTER, refused)


def _name_conflict(constraints: PodConstraints) -> Rejected | None:
    """NodeAffinity's PreFilter (its terms name no node), then no node common to NodeName's and
    NodeAffinity's names (``reference._node_names_pre_filter``)."""
    names = pre_filter_names(constraints)
    if names.conflict:
        return NAME_CONFLICT
    if names.names is not None and not names.names:
        return no_node_satisfies(names.plugins)
    return None


def _outside_pre_filter_result(
    memo: ConstraintCache, rows: IntArray, constraints: PodConstraints, reasons: Reasons
) -> None:
    """Rows whose node the PreFilterResult leaves out are refused unfiltered (``findNodesThatFitPod``)."""
    names = pre_filter_names(constraints)
    if names.names is None:
        return
    slots = [slot for name in names.names if (slot := memo.slot_of(name)) is not None]
    inside = np.isin(rows, np.array(slots, dtype=np.int64))
    reasons.reject(~inside, outside_pre_filter_result(names.plugins), FilterStage.PRE_FILTER_RESULT)


def _claims_refusal(view: ClusterView, namespace: str, constraints: PodConstraints) -> Rejected | None:
    """VolumeBinding's PreFilter: an unknown claim, then unbound Immediate claims, then (ours) unbound
    claims waiting for a first consumer that no node was selected for."""
    claims = [(name, view.claim(namespace, name)) for name in constraints.claims]
    missing = next((name for name, claim in claims if claim is None), None)
    if missing is not None:
        return claim_not_found(missing)
    unbound = [c for _, c in claims if c is not None and not c.bound]
    if any(not c.wait_for_first_consumer for c in unbound):
        return UNBOUND_IMMEDIATE_CLAIMS
    if any(c.node_affinity is None for c in unbound):
        return WAITS_FOR_FIRST_CONSUMER
    return None


# --- NodeUnschedulable, NodeName, TaintToleration, NodeAffinity --------------------------------


def _node_checks(memo: ConstraintCache, rows: IntArray, constraints: PodConstraints, reasons: Reasons) -> None:
    view = memo.view
    cordoned = view.unschedulable[rows]
    if cordoned.any() and not tolerated(constraints.tolerations, UNSCHEDULABLE_TAINT):
        reasons.reject(cordoned, NODE_UNSCHEDULABLE, FilterStage.NODE_UNSCHEDULABLE)
    if constraints.node_name:
        slot = memo.slot_of(constraints.node_name)
        reasons.reject(rows != (-1 if slot is None else slot), NODE_NAME_MISMATCH, FilterStage.NODE_NAME)
    taints, _ = view.taint_columns()
    if taints:
        untolerated = memo.untolerated(constraints.tolerations)
        reasons.reject(untolerated.first[rows] >= 0, UNTOLERATED_TAINT, FilterStage.TAINT_TOLERATION)
    affinity = constraints.node_affinity
    required = None if affinity is None else affinity.required
    if constraints.node_selector or required is not None:
        matches = memo.required_affinity(constraints.node_selector, required)[rows]
        reasons.reject(~matches, NODE_AFFINITY_MISMATCH, FilterStage.NODE_AFFINITY)
    if constraints.gpu is not None:
        for requirement, refused in gpu_checks(constraints.gpu):
            reasons.reject(~memo.requirement(requirement)[rows], refused, FilterStage.NODE_AFFINITY)


def _gpus_qualify(memo: ConstraintCache, gpu: GpuRequirements) -> BoolArray:
    """Per slot, whether the node's GPUs meet every one of the pod's GPU requirements."""
    qualify = np.ones(memo.view.capacity, dtype=np.bool_)
    for requirement, _ in gpu_checks(gpu):
        qualify &= memo.requirement(requirement)
    return qualify


# --- NodePorts ------------------------------------------------------------------------------------------


def _port_conflicts(memo: ConstraintCache, rows: IntArray, constraints: PodConstraints) -> BoolArray:
    """``HostPortInfo.CheckConflict`` per wanted port, by slot."""
    used = memo.placed().ports()
    conflict = np.zeros(memo.view.capacity, dtype=np.bool_)
    for wanted in constraints.host_ports:
        ip, protocol, port = sanitized_port(wanted)
        entry = used.get((protocol, port)) if port > 0 else None
        if entry is None:
            continue
        slots, ips = entry
        if ip == WILDCARD_IP:
            conflict[slots] = True
        else:
            clash = np.array([u in (WILDCARD_IP, ip) for u in ips], dtype=np.bool_)
            conflict[slots[clash]] = True
    chosen: BoolArray = conflict[rows]
    return chosen


# --- VolumeBinding --------------------------------------------------------------------------------------


def _volume_binding(memo: ConstraintCache, rows: IntArray, pod: IncomingPod, reasons: Reasons) -> None:
    """``FindPodVolumes``: bound claims' volume node affinity (labels only), then unbound claims with a
    selected node (the node's name)."""
    claims = [memo.view.claim(pod.namespace, name) for name in pod.constraints.claims]
    bound_ok = np.ones(len(rows), dtype=np.bool_)
    unbound_ok = np.ones(len(rows), dtype=np.bool_)
    for claim in claims:
        if claim is None or claim.node_affinity is None:
            continue
        if claim.bound:
            bound_ok &= _any_term(memo, claim.node_affinity, rows, by_name=False)
        else:
            unbound_ok &= _any_term(memo, claim.node_affinity, rows, by_name=True)
    reasons.reject(~bound_ok, VOLUME_NODE_CONFLICT, FilterStage.VOLUME_BINDING)
    reasons.reject(~unbound_ok, VOLUME_BIND_CONFLICT, FilterStage.VOLUME_BINDING)


def _any_term(
    memo: ConstraintCache, terms: tuple[NodeSelectorTerm, ...], rows: IntArray, *, by_name: bool
) -> BoolArray:
    """Whether any of ``terms`` matches each row's node; ``by_name`` False judges nodes without fields."""
    found = np.zeros(len(rows), dtype=np.bool_)
    for term in terms:
        found |= memo.node_term(term, fields=by_name)[rows]
    return found


# --- PodTopologySpread ----------------------------------------------------------------------------------


def _topology_spread(memo: ConstraintCache, rows: IntArray, pod: IncomingPod, reasons: Reasons) -> None:
    """podtopologyspread/filtering.go ``calPreFilterState`` and ``Filter`` (``reference.pod_topology_spread``)."""
    hard = memo.spread(pod, WhenUnsatisfiable.DO_NOT_SCHEDULE)
    if not hard:
        return
    own = dict(pod.labels)
    columns = {key: memo.view.label_column(key) for key in spread_keys(hard)}
    has_all = memo.occupied().copy()
    for codes, _ in columns.values():
        has_all &= codes >= 0
    for constraint in hard:
        codes, values = columns[constraint.topology_key]
        eligible = has_all & spread_included(memo, constraint, pod.constraints)
        counted = spread_counts(memo, constraint, pod.namespace)
        domain_codes = codes[eligible]
        size = len(values) + 1  # the last entry stands for "no value" (code -1) and stays empty
        present = np.bincount(domain_codes, minlength=size) > 0
        matching = np.bincount(domain_codes, weights=counted[eligible], minlength=size).astype(np.int64)
        domains = int(present.sum())
        minimum = int(matching[present].min()) if domains else _MAX_INT32
        if domains < constraint.min_domains:
            minimum = 0
        row_codes = codes[rows]
        reasons.reject(row_codes < 0, SPREAD_MISSING_LABEL, FilterStage.POD_TOPOLOGY_SPREAD)
        itself = 1 if constraint.selector.matches(own) else 0
        skew = matching[row_codes] + itself - minimum
        reasons.reject(
            (row_codes >= 0) & (skew > constraint.max_skew), SPREAD_MISMATCH, FilterStage.POD_TOPOLOGY_SPREAD
        )


def spread_included(memo: ConstraintCache, constraint: SpreadConstraint, constraints: PodConstraints) -> BoolArray:
    """``matchNodeInclusionPolicies`` per slot."""
    included = np.ones(memo.view.capacity, dtype=np.bool_)
    if constraint.honor_node_affinity:
        affinity = constraints.node_affinity
        required = None if affinity is None else affinity.required
        included &= memo.required_affinity(constraints.node_selector, required)
        if constraints.gpu is not None:  # the GPU requirements narrow the pod's nodes as its affinity does
            included &= _gpus_qualify(memo, constraints.gpu)
    if constraint.honor_node_taints:
        taints, _ = memo.view.taint_columns()
        if taints:
            included &= memo.untolerated(constraints.tolerations).first < 0
    return included


def spread_counts(memo: ConstraintCache, constraint: SpreadConstraint, namespace: str) -> IntArray:
    """Per slot, ``countPodsMatchSelector``: placed pods of ``namespace`` that the selector matches."""
    if not constraint.counts_pods:
        return np.zeros(memo.view.capacity, dtype=np.int64)

    def groups() -> BoolArray:
        placed = memo.placed()
        group_namespace, namespaces = placed.group_namespaces()
        same = np.array([n == namespace for n in namespaces], dtype=np.bool_)[group_namespace]
        chosen: BoolArray = same & placed.selector_groups(constraint.selector)
        return chosen

    return memo.counts(("spread", constraint.selector, namespace), groups)


# --- InterPodAffinity -----------------------------------------------------------------------------------


def _inter_pod_affinity(memo: ConstraintCache, rows: IntArray, pod: IncomingPod, reasons: Reasons) -> None:
    """interpodaffinity/filtering.go (``reference.inter_pod_affinity``): the incoming pod's required
    affinity, its required anti-affinity, then the existing pods' required anti-affinity."""
    namespace = pod.namespace
    terms = memo.pod_terms(pod)
    placed = memo.placed()
    existing = placed.required_anti() if placed.any_terms else ()
    if not terms.required_affinity and not terms.required_anti_affinity and not existing:
        return
    own = dict(pod.labels)
    own_namespace_labels = memo.view.namespace_labels(namespace)
    if terms.required_affinity:
        reasons.reject(
            _affinity_fails(memo, rows, terms, pod, own_namespace_labels),
            AFFINITY_MISMATCH,
            FilterStage.INTER_POD_AFFINITY,
        )
    if terms.required_anti_affinity:
        repelled = np.zeros(len(rows), dtype=np.bool_)
        for term in terms.required_anti_affinity:
            domains, row_codes = _domains(memo, rows, term, term_counts(memo, term))
            repelled |= (row_codes >= 0) & (domains[row_codes] > 0)
        reasons.reject(repelled, ANTI_AFFINITY_MISMATCH, FilterStage.INTER_POD_AFFINITY)
    if existing:
        blocked: dict[str, BoolArray] = {}
        incoming_namespace_labels = own_namespace_labels or ()
        for held in existing:
            term = held.term
            if not matches_incoming(term, namespace, own, incoming_namespace_labels):
                continue
            codes, values = memo.view.label_column(term.topology_key)
            found = codes[held.slots]
            marks = blocked.setdefault(term.topology_key, np.zeros(len(values) + 1, dtype=np.bool_))
            marks[found[found >= 0]] = True
        refused = np.zeros(len(rows), dtype=np.bool_)
        for key, marks in blocked.items():
            refused |= marks[memo.view.label_column(key)[0][rows]]
        reasons.reject(refused, EXISTING_ANTI_AFFINITY, FilterStage.INTER_POD_AFFINITY)


def _affinity_fails(
    memo: ConstraintCache, rows: IntArray, terms: PodTerms, pod: IncomingPod, own_namespace_labels: Labels | None
) -> BoolArray:
    """``satisfyPodAffinity`` negated: a row lacking a term's key fails; a row whose domain holds no pod
    matching all the terms fails, unless no such pod exists anywhere and the pod matches its own terms."""
    required = terms.required_affinity

    def all_terms() -> BoolArray:
        chosen = _group_mask(memo, required[0])
        for term in required[1:]:
            chosen = chosen & _group_mask(memo, term)
        return chosen

    if all(_stable(t) for t in required):
        counted = memo.counts(("all", required), all_terms)
    else:
        counted = memo.placed().counts(all_terms())
    missing = np.zeros(len(rows), dtype=np.bool_)
    pods_exist = np.ones(len(rows), dtype=np.bool_)
    anywhere = 0
    for term in required:
        domains, row_codes = _domains(memo, rows, term, counted)
        anywhere += int(domains.sum())
        missing |= row_codes < 0
        pods_exist &= domains[row_codes] > 0
    own = dict(pod.labels)
    first_of_group = anywhere == 0 and all(
        matches_existing(t, pod.namespace, own, own_namespace_labels) for t in required
    )
    failing: BoolArray = missing | (~pods_exist & (not first_of_group))
    return failing


def _domains(memo: ConstraintCache, rows: IntArray, term: AffinityTerm, counted: IntArray) -> tuple[IntArray, IntArray]:
    """Placed pods counted per value of the term's key (the last entry, for rows lacking the key, is 0), and
    each row's value code."""
    codes, values = memo.view.label_column(term.topology_key)
    keyed = codes >= 0
    domains: IntArray = np.bincount(codes[keyed], weights=counted[keyed], minlength=len(values) + 1).astype(np.int64)
    row_codes: IntArray = codes[rows]
    return domains, row_codes


def _group_mask(memo: ConstraintCache, term: AffinityTerm) -> BoolArray:
    """Per group, whether its pods match an incoming term: namespace (unrolled selector) and labels."""
    placed = memo.placed()
    group_namespace, namespaces = placed.group_namespaces()
    view = memo.view
    allowed = [
        n in term.namespaces
        or term.namespace_selector.is_everything
        or _selected_namespace(term, view.namespace_labels(n))
        for n in namespaces
    ]
    in_namespace = np.array(allowed, dtype=np.bool_)[group_namespace]
    chosen: BoolArray = in_namespace & placed.selector_groups(term.selector)
    return chosen


def _selected_namespace(term: AffinityTerm, namespace_labels: Labels | None) -> bool:
    return namespace_labels is not None and term.namespace_selector.matches(dict(namespace_labels))


def term_counts(memo: ConstraintCache, term: AffinityTerm) -> IntArray:
    """Per slot, the placed pods matching one incoming term. Memoised while pods_version stands unless the
    term selects namespaces by label (namespace labels may change under the same version)."""
    if _stable(term):
        return memo.counts(("term", term), lambda: _group_mask(memo, term))
    return memo.placed().counts(_group_mask(memo, term))


def _stable(term: AffinityTerm) -> bool:
    """Whether the pods a term matches are fixed by pods_version: true unless it selects namespaces by
    their labels, which may change under the same version."""
    selector = term.namespace_selector
    return selector.is_everything or selector.requirements is None
