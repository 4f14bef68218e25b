"""kube-scheduler's Score plugins for the constraints, normalized over the candidate rows.

``constraint_scores`` returns, per plugin, the score after ``NormalizeScore`` (0..100) for each row, as
kube-scheduler computes it over the nodes that passed Filter: pass the feasible rows. The engine weighs
them with ``verdicts.SCORE_WEIGHTS`` (the default profile's weights). A plugin upstream skips (nothing to
score) scores 0 everywhere, as a skipped plugin adds nothing upstream.

The formulas, each the counterpart of a function in ``reference`` (where the Go sources are cited):

* NodeAffinity: the weights of the matching preferred terms, scaled by the maximum
  (``DefaultNormalizeScore``: 100 * s // max; all zero stays zero).
* TaintToleration: the count of PreferNoSchedule taints not tolerated, scaled by the maximum and
  reversed (100 - 100 * s // max; all zero gives 100).
* PodTopologySpread: per ScheduleAnyway constraint, matching pods in the row's domain times
  log(domains + 2), plus maxSkew - 1; summed and rounded half away from zero; rows missing a key score 0,
  the rest 100 * (max + min - s) // max (100 when the maximum is 0).
* InterPodAffinity: per topology key, the signed weights of the (term, placed pod) matches in the row's
  domain, summed over keys, then min-max scaled: trunc(100 * (s - min) / (max - min)), 0 when flat.
"""

from __future__ import annotations

import numpy as np

from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import Labels, PodConstraints, TaintEffect, WhenUnsatisfiable
from placement.core.constraints.filtering import spread_counts, spread_included, term_counts
from placement.core.constraints.selectors import HOSTNAME_LABEL, SelectorError
from placement.core.constraints.terms import (
    AffinityTerm,
    IncomingPod,
    matches_incoming,
    spread_keys,
    topology_normalizing_weight,
)
from placement.core.constraints.verdicts import MAX_NODE_SCORE
from placement.core.constraints.view import ClusterView
from placement.core.vocabulary import BoolArray, FloatArray, IntArray


def constraint_scores(
    view: ClusterView,
    rows: IntArray,
    namespace: str,
    labels: Labels,
    constraints: PodConstraints,
    *,
    cache: ConstraintCache | None = None,
) -> dict[str, FloatArray]:
    """Each constraint scoring plugin's normalized score (0..100) per row, by plugin name."""
    memo = ConstraintCache() if cache is None else cache
    memo.bind(view)
    rows = np.asarray(rows, dtype=np.int64)
    pod = IncomingPod(namespace, labels, constraints)
    scores = {
        "NodeAffinity": _node_affinity(memo, rows, constraints),
        "TaintToleration": _taint_toleration(memo, rows, constraints),
        "PodTopologySpread": _topology_spread(memo, rows, pod),
        "InterPodAffinity": _inter_pod_affinity(memo, rows, pod),
    }
    return {name: score.astype(np.float64) for name, score in scores.items()}


def default_normalize(raw: IntArray, *, reverse: bool) -> IntArray:
    """helper/normalize_score.go ``DefaultNormalizeScore`` (scores are never negative)."""
    highest = int(raw.max()) if len(raw) else 0
    if highest == 0:
        return np.full(len(raw), MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    scaled: IntArray = MAX_NODE_SCORE * raw // highest
    return MAX_NODE_SCORE - scaled if reverse else scaled


def _node_affinity(memo: ConstraintCache, rows: IntArray, constraints: PodConstraints) -> IntArray:
    affinity = constraints.node_affinity
    if affinity is None or not affinity.preferred:
        return np.zeros(len(rows), dtype=np.int64)
    return default_normalize(memo.preferred_weights(affinity.preferred)[rows], reverse=False)


def _taint_toleration(memo: ConstraintCache, rows: IntArray, constraints: PodConstraints) -> IntArray:
    taints, _ = memo.view.taint_columns()
    if not any(t.effect is TaintEffect.PREFER_NO_SCHEDULE for t in taints):
        return np.full(len(rows), MAX_NODE_SCORE, dtype=np.int64)
    tolerations = tuple(
        t for t in constraints.tolerations if t.effect is None or t.effect is TaintEffect.PREFER_NO_SCHEDULE
    )
    return default_normalize(memo.intolerable_prefer_no_schedule(tolerations)[rows], reverse=True)


def go_round(values: FloatArray) -> IntArray:
    """``math.Round`` for non-negative values: half away from zero, exactly (x - floor(x) is exact)."""
    floor = np.floor(values)
    rounded: IntArray = (floor + (values - floor >= 0.5)).astype(np.int64)
    return rounded


def _topology_spread(memo: ConstraintCache, rows: IntArray, pod: IncomingPod) -> IntArray:
    """podtopologyspread/scoring.go (``reference.pod_topology_spread_scores``)."""
    zeros = np.zeros(len(rows), dtype=np.int64)
    try:
        soft = memo.spread(pod, WhenUnsatisfiable.SCHEDULE_ANYWAY)
    except SelectorError:
        return zeros  # upstream fails PreScore; a pod whose selectors do not parse is refused by PreFilter
    if not soft or not len(rows) or not memo.occupied().any():
        return zeros
    columns = {key: memo.view.label_column(key) for key in spread_keys(soft)}
    slots_have_all = memo.occupied().copy()
    for codes, _ in columns.values():
        slots_have_all &= codes >= 0
    scored: BoolArray = slots_have_all[rows]
    score = np.zeros(len(rows), dtype=np.float64)
    for constraint in soft:
        codes, values = columns[constraint.topology_key]
        counted = spread_counts(memo, constraint, pod.namespace)
        row_codes = codes[rows]
        if constraint.topology_key == HOSTNAME_LABEL:
            weight = topology_normalizing_weight(int(scored.sum()))
            found = counted[rows]
        else:
            candidate_values = np.zeros(len(values) + 1, dtype=np.bool_)
            candidate_values[row_codes[scored]] = True
            candidate_values[-1] = False
            weight = topology_normalizing_weight(int(candidate_values.sum()))
            eligible = slots_have_all & spread_included(memo, constraint, pod.constraints) & candidate_values[codes]
            domains = np.bincount(codes[eligible], weights=counted[eligible], minlength=len(values) + 1)
            found = domains.astype(np.int64)[row_codes]
        score += found * weight + (constraint.max_skew - 1)
    raw = np.where(scored, go_round(score), 0)
    if not scored.any():
        return zeros
    lowest, highest = int(raw[scored].min()), int(raw[scored].max())
    if highest == 0:
        return np.where(scored, MAX_NODE_SCORE, 0).astype(np.int64)
    normalized: IntArray = np.where(scored, MAX_NODE_SCORE * (highest + lowest - raw) // highest, 0)
    return normalized


def _inter_pod_affinity(memo: ConstraintCache, rows: IntArray, pod: IncomingPod) -> IntArray:
    """interpodaffinity/scoring.go (``reference.inter_pod_affinity_scores``)."""
    zeros = np.zeros(len(rows), dtype=np.int64)
    try:
        terms = memo.pod_terms(pod)
    except SelectorError:
        return zeros
    placed = memo.placed()
    existing = placed.scored() if placed.any_terms else ()
    if not len(rows) or (not terms.preferred_affinity and not terms.preferred_anti_affinity and not existing):
        return zeros
    topology: dict[str, IntArray] = {}

    def add(term: AffinityTerm, counted: IntArray, weight: int) -> None:
        codes, values = memo.view.label_column(term.topology_key)
        keyed = codes >= 0
        domains = np.bincount(codes[keyed], weights=counted[keyed], minlength=len(values) + 1).astype(np.int64)
        sums = topology.setdefault(term.topology_key, np.zeros(len(values) + 1, dtype=np.int64))
        sums += weight * domains

    for weighted in terms.preferred_affinity:
        add(weighted.term, term_counts(memo, weighted.term), weighted.weight)
    for weighted in terms.preferred_anti_affinity:
        add(weighted.term, term_counts(memo, weighted.term), -weighted.weight)
    own = dict(pod.labels)
    own_namespace_labels = memo.view.namespace_labels(pod.namespace) or ()
    for held in existing:
        if matches_incoming(held.term, pod.namespace, own, own_namespace_labels):
            add(held.term, np.bincount(held.slots, minlength=memo.view.capacity).astype(np.int64), held.weight)
    raw = zeros.copy()
    for key, sums in topology.items():
        raw += sums[memo.view.label_column(key)[0][rows]]
    lowest, highest = int(raw.min()), int(raw.max())
    if highest == lowest:
        return zeros
    normalized: IntArray = np.trunc(MAX_NODE_SCORE * ((raw - lowest) / (highest - lowest))).astype(np.int64)
    return normalized
