"""kube-scheduler's constraint plugins written out node by node, straight from the Go plugin code.

This is the reference: plain loops over plain values, one function per plugin, each citing the file and
function it ports (under ``pkg/scheduler/framework/plugins/``). ``placement.core.constraints.filtering``
and ``.scoring`` compute the same verdicts for many slots at once; the ported upstream tables and a
property test hold the three equal. Speed is not a goal here.

Readiness is judged as upstream judges it: by the ``node.kubernetes.io/not-ready`` and ``unreachable``
taints the node lifecycle controller adds (TaintToleration), which a pod may tolerate; the Ready
condition itself refuses nothing. Nodes outside the ``PreFilterResult`` of NodeName and NodeAffinity are
refused unfiltered, as ``findNodesThatFitPod`` refuses them. kube-scheduler v1.37.2's own plugins judge
this port and the vectorised plugins (tests/upstream/test_oracle_scheduler.py).

Differences from upstream, all deliberate and shared with the vectorised plugins:

* GPU requirements (ours, ``gpus``): a pod's ``gpu.scheduling.kubenexus.io`` annotations are judged on
  the node's GPU Feature Discovery labels in the NodeAffinity stage, after its own node affinity, with
  reasons of their own; topology spread honours them as it honours node affinity.
* Not modelled: default topology spread constraints derived from Services and controllers
  (``buildDefaultConstraints``), terminating pods (the spread plugin skips them), DRA, volume limits
  and zones, preferred node affinity terms that fail to parse (upstream fails PreScore; here they score 0).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from placement.core.constraints.constraint_types import (
    ClaimFacts,
    Labels,
    NodeFacts,
    PlacedPod,
    TaintEffect,
    Toleration,
    WhenUnsatisfiable,
)
from placement.core.constraints.gpu_labels import gpu_refusal
from placement.core.constraints.selectors import (
    HOSTNAME_LABEL,
    UNSCHEDULABLE_TAINT,
    SelectorError,
    blocks_scheduling,
    first_untolerated,
    is_empty_term,
    ports_conflict,
    pre_filter_names,
    required_node_affinity_matches,
    sanitized_port,
    term_error,
    term_matches,
    terms_match,
    tolerated,
)
from placement.core.constraints.terms import (
    HARD_POD_AFFINITY_WEIGHT,
    AffinityTerm,
    IncomingPod,
    PodTerms,
    SpreadConstraint,
    incoming_terms,
    matches_existing,
    matches_incoming,
    placed_pod_terms,
    spread_constraints,
    spread_keys,
    topology_normalizing_weight,
)
from placement.core.constraints.verdicts import (
    AFFINITY_MISMATCH,
    ANTI_AFFINITY_MISMATCH,
    EXISTING_ANTI_AFFINITY,
    MAX_NODE_SCORE,
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
    FilterStage,
    claim_not_found,
    no_node_satisfies,
    outside_pre_filter_result,
    scheduling_gate_refusal,
    unparsable_pod,
    unparsable_spread,
)
from placement.core.vocabulary import Rejected


@dataclass(frozen=True)
class ClusterFacts:
    """Everything the plugins read of the cluster: every node (not only the candidates: spread domains and
    inter-pod counts span the cluster), the pods placed on them, namespaces' labels, claims."""

    nodes: tuple[NodeFacts, ...]
    pods: tuple[PlacedPod, ...] = ()
    namespaces: tuple[tuple[str, Labels], ...] = ()
    claims: tuple[tuple[tuple[str, str], ClaimFacts], ...] = ()

    def node(self, name: str) -> NodeFacts:
        return next(n for n in self.nodes if n.name == name)

    def has_node(self, name: str) -> bool:
        return any(n.name == name for n in self.nodes)

    def namespace_labels(self, namespace: str) -> Labels | None:
        return dict(self.namespaces).get(namespace)

    def claim(self, namespace: str, name: str) -> ClaimFacts | None:
        return dict(self.claims).get((namespace, name))

    def placed(self) -> list[tuple[PlacedPod, NodeFacts]]:
        """The pods on nodes the cluster holds, each with its node (a pod on an unknown node counts nowhere)."""
        nodes = {n.name: n for n in self.nodes}
        return [(p, nodes[p.node]) for p in self.pods if p.node in nodes]


# --- pod-level refusals ----------------------------------------------------------------------------------


def pod_refusal(cluster: ClusterFacts, pod: IncomingPod) -> tuple[FilterStage, Rejected] | None:
    """What refuses the pod before any node is judged: SchedulingGates' PreEnqueue, then the PreFilter
    plugins in profile order (NodeName and NodeAffinity, VolumeBinding, PodTopologySpread,
    InterPodAffinity)."""
    gated = scheduling_gate_refusal(pod.constraints)
    if gated is not None:
        return FilterStage.SCHEDULING_GATES, gated
    for check in (_node_names_pre_filter, _volume_pre_filter, _spread_pre_filter, _inter_pod_pre_filter):
        refused = check(cluster, pod)
        if refused is not None:
            return FilterStage.PRE_FILTER, refused
    return None


def _node_names_pre_filter(cluster: ClusterFacts, pod: IncomingPod) -> Rejected | None:
    """nodeaffinity/node_affinity.go ``PreFilter`` refuses terms whose names leave no node (every term names
    nodes by ``metadata.name In`` and none survives); ``RunPreFilterPlugins`` refuses the pod when the
    names of NodeName and NodeAffinity have no node in common."""
    names = pre_filter_names(pod.constraints)
    if names.conflict:
        return NAME_CONFLICT
    if names.names is not None and not names.names:
        return no_node_satisfies(names.plugins)
    return None


def _volume_pre_filter(cluster: ClusterFacts, pod: IncomingPod) -> Rejected | None:
    """volumebinding/volume_binding.go ``PreFilter`` (``podHasPVCs``, ``GetPodVolumeClaims``): a claim that
    cannot be found refuses the pod at once; then unbound claims with Immediate binding. Unbound claims
    that wait for their first consumer (without a node selected for them) are ours to refuse."""
    claims = [(name, cluster.claim(pod.namespace, name)) for name in pod.constraints.claims]
    missing = next((name for name, claim in claims if claim is None), None)
    if missing is not None:
        return claim_not_found(missing)
    unbound = [c for _, c in claims if c is not None and not c.bound]
    if any(not c.wait_for_first_consumer for c in unbound):
        return UNBOUND_IMMEDIATE_CLAIMS
    if any(c.node_affinity is None for c in unbound):
        return WAITS_FOR_FIRST_CONSUMER
    return None


def _spread_pre_filter(cluster: ClusterFacts, pod: IncomingPod) -> Rejected | None:
    try:
        spread_constraints(pod.constraints, pod.labels, WhenUnsatisfiable.DO_NOT_SCHEDULE)
    except SelectorError as error:
        return unparsable_spread(str(error))
    return None


def _inter_pod_pre_filter(cluster: ClusterFacts, pod: IncomingPod) -> Rejected | None:
    try:
        _incoming(pod)
    except SelectorError as error:
        return unparsable_pod(str(error))
    return None


def _incoming(pod: IncomingPod) -> PodTerms:
    c = pod.constraints
    return incoming_terms(pod.namespace, pod.labels, c.pod_affinity, c.pod_anti_affinity)


# --- the Filter plugins ----------------------------------------------------------------------------------


def node_unschedulable(pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """nodeunschedulable/node_unschedulable.go ``Filter``: a pod tolerating the unschedulable taint also
    tolerates ``spec.unschedulable``."""
    if not node.unschedulable or tolerated(pod.constraints.tolerations, UNSCHEDULABLE_TAINT):
        return None
    return NODE_UNSCHEDULABLE


def node_name(pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """nodename/node_name.go ``Fits``."""
    wanted = pod.constraints.node_name
    return None if not wanted or wanted == node.name else NODE_NAME_MISMATCH


def taint_toleration(pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """tainttoleration/taint_toleration.go ``Filter``: every NoSchedule and NoExecute taint tolerated."""
    taint = first_untolerated(node.taints, pod.constraints.tolerations)
    return None if taint is None else UNTOLERATED_TAINT


def node_affinity(pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """nodeaffinity/node_affinity.go ``Filter`` (``GetRequiredNodeAffinity(pod).Match``)."""
    if required_node_affinity_matches(pod.constraints, dict(node.labels), node.name):
        return None
    return NODE_AFFINITY_MISMATCH


def gpu_requirements(pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """Ours (``gpus``): the pod's GPU requirements against the node's GPU Feature Discovery labels, judged
    with NodeAffinity, after the pod's own affinity."""
    return gpu_refusal(pod.constraints.gpu, dict(node.labels))


def node_ports(cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """nodeports/node_ports.go ``fitsPorts`` with ``HostPortInfo.CheckConflict`` (framework/types.go): a
    wanted port conflicts with the same protocol and port on the same IP, or on 0.0.0.0 either side."""
    used = [sanitized_port(p) for placed, at in cluster.placed() if at.name == node.name for p in placed.host_ports]
    for wanted in pod.constraints.host_ports:
        if any(ports_conflict(sanitized_port(wanted), u) for u in used):
            return NO_FREE_PORTS
    return None


def volume_binding(cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """volumebinding/binder.go ``FindPodVolumes``: a bound claim's volume node affinity must match the node
    (``checkBoundClaims``; ``CheckNodeAffinity`` builds a node from labels only, so ``matchFields`` is not
    consulted); an unbound claim with a node selected for it fits only that node (the fast path on
    ``volume.kubernetes.io/selected-node``; the cluster state writes that node as a metadata.name term)."""
    claims = [cluster.claim(pod.namespace, name) for name in pod.constraints.claims]
    labels = dict(node.labels)
    bound_ok = all(_volume_fits(c, labels, "") for c in claims if c is not None and c.bound)
    if not bound_ok:
        return VOLUME_NODE_CONFLICT
    unbound_ok = all(_volume_fits(c, labels, node.name) for c in claims if c is not None and not c.bound)
    return None if unbound_ok else VOLUME_BIND_CONFLICT


def _volume_fits(claim: ClaimFacts, labels: dict[str, str], name: str) -> bool:
    return claim.node_affinity is None or terms_match(claim.node_affinity, labels, name)


# --- PodTopologySpread ------------------------------------------------------------------------------------


def _included(constraint: SpreadConstraint, pod: IncomingPod, node: NodeFacts) -> bool:
    """podtopologyspread/common.go ``matchNodeInclusionPolicies``."""
    if constraint.honor_node_affinity and not required_node_affinity_matches(
        pod.constraints, dict(node.labels), node.name
    ):
        return False
    if constraint.honor_node_affinity and gpu_refusal(pod.constraints.gpu, dict(node.labels)) is not None:
        return False  # the GPU requirements narrow the pod's nodes as its affinity does
    if constraint.honor_node_taints:
        return not any(blocks_scheduling(t) and not tolerated(pod.constraints.tolerations, t) for t in node.taints)
    return True


def _matching_pods_on(cluster: ClusterFacts, constraint: SpreadConstraint, namespace: str, node: NodeFacts) -> int:
    """``countPodsMatchSelector`` on one node: pods of the incoming pod's namespace matching the selector."""
    if not constraint.counts_pods:
        return 0
    return sum(
        1
        for placed, at in cluster.placed()
        if at.name == node.name and placed.namespace == namespace and constraint.selector.matches(dict(placed.labels))
    )


def pod_topology_spread(cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """podtopologyspread/filtering.go ``calPreFilterState`` and ``Filter``. Domains are the values of the
    topology key on the eligible nodes of the whole cluster (all hard keys present, inclusion policies);
    skew = matching pods in the node's domain + 1 if the pod matches itself - the global minimum, which is
    0 while fewer domains than minDomains exist."""
    constraints = spread_constraints(pod.constraints, pod.labels, WhenUnsatisfiable.DO_NOT_SCHEDULE)
    if not constraints:
        return None
    keys = spread_keys(constraints)
    counts: list[Counter[str]] = [Counter() for _ in constraints]
    for other in cluster.nodes:
        labels = dict(other.labels)
        if not all(k in labels for k in keys):
            continue
        for i, constraint in enumerate(constraints):
            if _included(constraint, pod, other):
                matching = _matching_pods_on(cluster, constraint, pod.namespace, other)
                counts[i][labels[constraint.topology_key]] += matching
    own = dict(pod.labels)
    labels = dict(node.labels)
    for i, constraint in enumerate(constraints):
        value = labels.get(constraint.topology_key)
        if value is None:
            return SPREAD_MISSING_LABEL
        minimum = min(counts[i].values(), default=2**31 - 1)  # math.MaxInt32 when no domain is eligible
        if len(counts[i]) < constraint.min_domains:
            minimum = 0
        skew = counts[i][value] + (1 if constraint.selector.matches(own) else 0) - minimum
        if skew > constraint.max_skew:
            return SPREAD_MISMATCH
    return None


# --- InterPodAffinity -------------------------------------------------------------------------------------


def inter_pod_affinity(cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    """interpodaffinity/filtering.go: ``getExistingAntiAffinityCounts`` and
    ``getIncomingAffinityAntiAffinityCounts`` (PreFilter), then ``satisfyPodAffinity``,
    ``satisfyPodAntiAffinity`` and ``satisfyExistingPodsAntiAffinity`` (Filter)."""
    terms = _incoming(pod)
    own_labels = dict(pod.labels)
    own_namespace_labels = cluster.namespace_labels(pod.namespace)
    existing: Counter[tuple[str, str]] = Counter()
    affinity: Counter[tuple[str, str]] = Counter()
    anti: Counter[tuple[str, str]] = Counter()
    for placed, at in cluster.placed():
        at_labels, placed_labels = dict(at.labels), dict(placed.labels)
        for term in placed_pod_terms(placed).required_anti_affinity:
            if matches_incoming(term, pod.namespace, own_labels, own_namespace_labels or ()):
                _count(existing, term, at_labels)
        placed_ns_labels = cluster.namespace_labels(placed.namespace)
        if terms.required_affinity and all(
            matches_existing(t, placed.namespace, placed_labels, placed_ns_labels) for t in terms.required_affinity
        ):
            for term in terms.required_affinity:
                _count(affinity, term, at_labels)
        for term in terms.required_anti_affinity:
            if matches_existing(term, placed.namespace, placed_labels, placed_ns_labels):
                _count(anti, term, at_labels)

    labels = dict(node.labels)
    pods_exist = True
    for term in terms.required_affinity:
        value = labels.get(term.topology_key)
        if value is None:
            return AFFINITY_MISMATCH  # all topology labels must exist on the node
        if affinity[(term.topology_key, value)] <= 0:
            pods_exist = False
    if not pods_exist:
        # The first pod of a group with affinity to itself may go anywhere the keys exist, provided no pod
        # anywhere matches the terms and the pod matches its own terms.
        matches_itself = all(
            matches_existing(t, pod.namespace, own_labels, own_namespace_labels) for t in terms.required_affinity
        )
        if sum(affinity.values()) > 0 or not matches_itself:
            return AFFINITY_MISMATCH
    for term in terms.required_anti_affinity:
        value = labels.get(term.topology_key)
        if value is not None and anti[(term.topology_key, value)] > 0:
            return ANTI_AFFINITY_MISMATCH
    if any(existing[(key, value)] > 0 for key, value in labels.items()):
        return EXISTING_ANTI_AFFINITY
    return None


def _count(counts: Counter[tuple[str, str]], term: AffinityTerm, node_labels: dict[str, str]) -> None:
    value = node_labels.get(term.topology_key)
    if value is not None:
        counts[(term.topology_key, value)] += 1


# --- the whole filter -------------------------------------------------------------------------------------


def filter_node(cluster: ClusterFacts, pod: IncomingPod, name: str) -> tuple[FilterStage, Rejected] | None:
    """The first refusal of node ``name`` in kube-scheduler's order (resources aside), with its stage."""
    refused = pod_refusal(cluster, pod)
    if refused is not None:
        return refused
    names = pre_filter_names(pod.constraints)
    if names.names is not None and name not in names.names:
        return FilterStage.PRE_FILTER_RESULT, outside_pre_filter_result(names.plugins)
    node = cluster.node(name)
    for stage, rejected in _node_verdicts(cluster, pod, node):
        if rejected is not None:
            return stage, rejected
    return None


def _node_verdicts(
    cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts
) -> Iterator[tuple[FilterStage, Rejected | None]]:
    """Each Filter plugin's verdict in profile order, judged only when asked for."""
    yield FilterStage.NODE_UNSCHEDULABLE, node_unschedulable(pod, node)
    yield FilterStage.NODE_NAME, node_name(pod, node)
    yield FilterStage.TAINT_TOLERATION, taint_toleration(pod, node)
    yield FilterStage.NODE_AFFINITY, node_affinity(pod, node)
    yield FilterStage.NODE_AFFINITY, gpu_requirements(pod, node)
    yield FilterStage.NODE_PORTS, node_ports(cluster, pod, node)
    yield FilterStage.VOLUME_BINDING, volume_binding(cluster, pod, node)
    yield FilterStage.POD_TOPOLOGY_SPREAD, pod_topology_spread(cluster, pod, node)
    yield FilterStage.INTER_POD_AFFINITY, inter_pod_affinity(cluster, pod, node)


# --- scores ------------------------------------------------------------------------------------------------


def default_normalize(scores: Sequence[int], *, reverse: bool) -> list[int]:
    """helper/normalize_score.go ``DefaultNormalizeScore``: scale to [0, MaxNodeScore] by the maximum
    (integer division); reversed, subtract from MaxNodeScore; all zeros reversed give MaxNodeScore."""
    highest = max(scores, default=0)
    if highest == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in scores]
    scaled = [MAX_NODE_SCORE * s // highest for s in scores]
    return [MAX_NODE_SCORE - s for s in scaled] if reverse else scaled


def node_affinity_scores(pod: IncomingPod, nodes: Sequence[NodeFacts]) -> list[int]:
    """nodeaffinity ``Score`` (``PreferredSchedulingTerms.Score``: the weights of the matching terms; a term
    of weight 0 or without requirements is skipped) and ``NormalizeScore`` (by the maximum)."""
    affinity = pod.constraints.node_affinity
    preferred = () if affinity is None else affinity.preferred
    terms = [p for p in preferred if p.weight and not is_empty_term(p.preference) and term_error(p.preference) is None]
    raw = [sum(p.weight for p in terms if term_matches(p.preference, dict(n.labels), n.name)) for n in nodes]
    return default_normalize(raw, reverse=False)


def _prefer_no_schedule_tolerations(tolerations: Sequence[Toleration]) -> list[Toleration]:
    """``getAllTolerationPreferNoSchedule``: tolerations with effect PreferNoSchedule or none."""
    return [t for t in tolerations if t.effect is None or t.effect is TaintEffect.PREFER_NO_SCHEDULE]


def taint_toleration_scores(pod: IncomingPod, nodes: Sequence[NodeFacts]) -> list[int]:
    """tainttoleration ``Score`` (``countIntolerableTaintsPreferNoSchedule``) and ``NormalizeScore``
    (reversed: fewer intolerable PreferNoSchedule taints score higher)."""
    tolerations = _prefer_no_schedule_tolerations(pod.constraints.tolerations)
    raw = [
        sum(1 for t in n.taints if t.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerated(tolerations, t))
        for n in nodes
    ]
    return default_normalize(raw, reverse=True)


def go_round(value: float) -> int:
    """``math.Round``: half away from zero (scores here are never negative)."""
    floor = math.floor(value)
    return int(floor) + (1 if value - floor >= 0.5 else 0)


def pod_topology_spread_scores(cluster: ClusterFacts, pod: IncomingPod, nodes: Sequence[NodeFacts]) -> list[int]:
    """podtopologyspread/scoring.go ``initPreScoreState``, ``PreScore``, ``Score`` and ``NormalizeScore`` for
    the ScheduleAnyway constraints. ``nodes`` are the filtered candidates: those missing a key are ignored
    (score 0); domains are the candidates' values; pods are counted on every eligible node of the cluster
    whose value is a candidate's (per node for kubernetes.io/hostname); each constraint weighs its count
    by log(domains + 2) and adds maxSkew - 1; the result is rounded, then reversed against the range."""
    try:
        constraints = spread_constraints(pod.constraints, pod.labels, WhenUnsatisfiable.SCHEDULE_ANYWAY)
    except SelectorError:
        constraints = ()  # upstream fails PreScore; the PreFilter of a valid pod never lets this through
    if not constraints or not cluster.nodes:
        return [0 for _ in nodes]
    keys = spread_keys(constraints)
    ignored = [not all(k in dict(n.labels) for k in keys) for n in nodes]
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for node, skip in zip(nodes, ignored, strict=True):
        if not skip:
            labels = dict(node.labels)
            for i, constraint in enumerate(constraints):
                if constraint.topology_key != HOSTNAME_LABEL:
                    counts[i].setdefault(labels[constraint.topology_key], 0)
    weights = []
    for i, constraint in enumerate(constraints):
        size = len(counts[i]) if constraint.topology_key != HOSTNAME_LABEL else ignored.count(False)
        weights.append(topology_normalizing_weight(size))
    for other in cluster.nodes:
        labels = dict(other.labels)
        if not all(k in labels for k in keys):
            continue
        for i, constraint in enumerate(constraints):
            value = labels[constraint.topology_key]
            if _included(constraint, pod, other) and value in counts[i]:
                counts[i][value] += _matching_pods_on(cluster, constraint, pod.namespace, other)
    raw = []
    for node, skip in zip(nodes, ignored, strict=True):
        if skip:
            raw.append(0)
            continue
        labels, score = dict(node.labels), 0.0
        for i, constraint in enumerate(constraints):
            if constraint.topology_key == HOSTNAME_LABEL:
                count = _matching_pods_on(cluster, constraint, pod.namespace, node)
            else:
                count = counts[i][labels[constraint.topology_key]]
            score += count * weights[i] + (constraint.max_skew - 1)  # scoreForCount
        raw.append(go_round(score))
    scored = [s for s, skip in zip(raw, ignored, strict=True) if not skip]
    lowest, highest = min(scored, default=0), max(scored, default=0)
    result = []
    for s, skip in zip(raw, ignored, strict=True):
        if skip:
            result.append(0)
        elif highest == 0:
            result.append(MAX_NODE_SCORE)
        else:
            result.append(MAX_NODE_SCORE * (highest + lowest - s) // highest)
    return result


def inter_pod_affinity_scores(cluster: ClusterFacts, pod: IncomingPod, nodes: Sequence[NodeFacts]) -> list[int]:
    """interpodaffinity/scoring.go ``PreScore`` (``processExistingPod`` for every placed pod: the incoming
    pod's preferred terms matched by it, +weight for affinity, -weight for anti-affinity; its required
    affinity terms matched by the incoming pod, +hardPodAffinityWeight; its preferred terms matched by
    the incoming pod, +/-weight; each at the existing pod's node's value of the term's key), ``Score``
    (the sum over the keys of the node's values) and ``NormalizeScore`` (min-max to [0, 100])."""
    try:
        terms = _incoming(pod)
    except SelectorError:
        return [0 for _ in nodes]
    own_labels = dict(pod.labels)
    own_namespace_labels = cluster.namespace_labels(pod.namespace) or ()
    topology: Counter[tuple[str, str]] = Counter()
    for placed, at in cluster.placed():
        at_labels, placed_labels = dict(at.labels), dict(placed.labels)
        placed_ns_labels = cluster.namespace_labels(placed.namespace)
        for weighted in terms.preferred_affinity:
            if matches_existing(weighted.term, placed.namespace, placed_labels, placed_ns_labels):
                _add(topology, weighted.term, at_labels, weighted.weight)
        for weighted in terms.preferred_anti_affinity:
            if matches_existing(weighted.term, placed.namespace, placed_labels, placed_ns_labels):
                _add(topology, weighted.term, at_labels, -weighted.weight)
        theirs = placed_pod_terms(placed)
        for term in theirs.required_affinity:
            if matches_incoming(term, pod.namespace, own_labels, own_namespace_labels):
                _add(topology, term, at_labels, HARD_POD_AFFINITY_WEIGHT)
        for weighted in theirs.preferred_affinity:
            if matches_incoming(weighted.term, pod.namespace, own_labels, own_namespace_labels):
                _add(topology, weighted.term, at_labels, weighted.weight)
        for weighted in theirs.preferred_anti_affinity:
            if matches_incoming(weighted.term, pod.namespace, own_labels, own_namespace_labels):
                _add(topology, weighted.term, at_labels, -weighted.weight)
    raw = [sum(w for (key, value), w in topology.items() if dict(n.labels).get(key) == value) for n in nodes]
    lowest, highest = min(raw, default=0), max(raw, default=0)
    spread = highest - lowest
    return [int(MAX_NODE_SCORE * ((s - lowest) / spread)) if spread > 0 else 0 for s in raw]


def _add(topology: Counter[tuple[str, str]], term: AffinityTerm, node_labels: dict[str, str], weight: int) -> None:
    value = node_labels.get(term.topology_key)
    if value is not None:
        topology[(term.topology_key, value)] += weight


def score_nodes(cluster: ClusterFacts, pod: IncomingPod, names: Sequence[str]) -> dict[str, list[int]]:
    """Each scoring plugin's normalized scores (0..100) for the candidates ``names``, by plugin name."""
    nodes = [cluster.node(n) for n in names]
    return {
        "NodeAffinity": node_affinity_scores(pod, nodes),
        "TaintToleration": taint_toleration_scores(pod, nodes),
        "PodTopologySpread": pod_topology_spread_scores(cluster, pod, nodes),
        "InterPodAffinity": inter_pod_affinity_scores(cluster, pod, nodes),
    }
