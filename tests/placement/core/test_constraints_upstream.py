"""kube-scheduler's own test tables against both implementations of the constraint plugins.

The tables live in ``tests/scheduler_cases/`` (each module names its upstream file and test functions; case
ids are the upstream case names). Every Filter case is checked three ways: the reference plugin the Go test
exercised, alone (``reference.<plugin>``); the whole reference filter node by node; and the vectorised filter
over all the nodes at once. Every Score case is checked against both ``reference.score_nodes`` and
``constraint_scores``. kube-scheduler v1.37.2 itself now judges both on random GPU clusters too:
tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from placement.core.constraints import reference
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import NodeFacts, PodConstraints, Requirement, Taint, Toleration
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.reference import ClusterFacts
from placement.core.constraints.scores import constraint_scores
from placement.core.constraints.selectors import (
    required_node_affinity_matches,
    requirement_error,
    term_error,
    term_matches,
    terms_match,
    tolerates,
)
from placement.core.constraints.terms import IncomingPod
from placement.core.vocabulary import Rejected
from tests.constraint_cluster import ListCluster
from tests.scheduler_cases import component_helpers as ch
from tests.scheduler_cases import inter_pod_affinity, node_affinity, node_basics, pod_topology_spread
from tests.scheduler_cases.builders import node_preferences
from tests.scheduler_cases.cases import Expected, FilterCase, Refused, ScoreCase

FILTER_CASES: list[FilterCase] = [
    *node_affinity.FILTER,
    *node_basics.TAINT_FILTER_CASES,
    *node_basics.UNSCHEDULABLE_CASES,
    *node_basics.NODE_NAME_CASES,
    *node_basics.NODE_PORTS_CASES,
    *inter_pod_affinity.SINGLE_NODE,
    *inter_pod_affinity.MULTIPLE_NODES,
    *pod_topology_spread.SINGLE_CONSTRAINT,
    *pod_topology_spread.MULTIPLE_CONSTRAINTS,
]
SCORE_CASES: list[ScoreCase] = [
    *node_affinity.SCORE,
    *node_basics.TAINT_SCORE_CASES,
    *inter_pod_affinity.PREFERRED_SCORES,
    *inter_pod_affinity.HARD_SCORES,
    *pod_topology_spread.SCORES,
]

Plugin = Callable[[ClusterFacts, IncomingPod, NodeFacts], Rejected | None]


def _refusal(cluster: ClusterFacts, pod: IncomingPod, node: NodeFacts) -> Rejected | None:
    refused = reference.pod_refusal(cluster, pod)
    return None if refused is None else refused[1]


PLUGINS: dict[str, Plugin] = {
    "pod_refusal": _refusal,
    "node_unschedulable": lambda cluster, pod, node: reference.node_unschedulable(pod, node),
    "node_name": lambda cluster, pod, node: reference.node_name(pod, node),
    "taint_toleration": lambda cluster, pod, node: reference.taint_toleration(pod, node),
    "node_affinity": lambda cluster, pod, node: reference.node_affinity(pod, node),
    "node_ports": reference.node_ports,
    "pod_topology_spread": reference.pod_topology_spread,
    "inter_pod_affinity": reference.inter_pod_affinity,
}


def _cluster(case: FilterCase) -> ListCluster:
    return ListCluster.of(case.nodes, case.pods, case.namespaces)


def assert_expected(got: Rejected | None, expected: Expected, where: str) -> None:
    if isinstance(expected, Refused):
        assert got is not None, f"{where}: expected a refusal starting {expected.prefix!r}"
        assert got.kind is expected.kind, where
        assert got.message.startswith(expected.prefix), f"{where}: {got.message!r}"
    else:
        assert got == expected, where


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.id)
def test_the_plugin_alone_says_what_upstream_says(case: FilterCase) -> None:
    facts = _cluster(case).facts()
    plugin = PLUGINS[case.plugin]
    for node in case.nodes:
        assert_expected(plugin(facts, case.pod, node), case.expected[node.name], node.name)


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.id)
def test_the_whole_filter_gives_the_first_refusal(case: FilterCase) -> None:
    cluster = _cluster(case)
    facts = cluster.facts()
    verdict = constraint_filter(cluster, cluster.rows(), case.pod.namespace, case.pod.labels, case.pod.constraints)
    for position, node in enumerate(case.nodes):
        expected = case.overall(node.name)
        judged = reference.filter_node(facts, case.pod, node.name)
        assert_expected(None if judged is None else judged[1], expected, f"reference, {node.name}")
        assert_expected(verdict.rejected(position), expected, f"vectorised, {node.name}")
        if judged is not None:
            assert verdict.stage(position) == judged[0]


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda c: c.id)
def test_scores_are_upstreams(case: ScoreCase) -> None:
    cluster = ListCluster.of((*case.nodes, *case.failed), case.pods, case.namespaces)
    names = [n.name for n in case.nodes]
    assert reference.score_nodes(cluster.facts(), case.pod, names)[case.plugin] == list(case.want)
    scores = constraint_scores(cluster, cluster.rows(names), case.pod.namespace, case.pod.labels, case.pod.constraints)
    assert scores[case.plugin].tolist() == [float(w) for w in case.want]


# --- component helpers and the API's toleration -------------------------------------------------------------


@pytest.mark.parametrize("case", ch.SELECTOR_MATCH, ids=lambda c: c.name)
def test_node_selector_match(case: ch.SelectorCase) -> None:
    """``TestNodeSelectorMatch``: which terms parse, and the lazy selector's verdict."""
    assert tuple(i for i, t in enumerate(case.terms) if term_error(t) is not None) == case.invalid
    if not case.invalid:
        assert terms_match(case.terms, dict(case.node_labels), case.node_name) is case.matches


@pytest.mark.parametrize("case", ch.PREFERRED_SCORE, ids=lambda c: c.name)
def test_preferred_scheduling_terms_score(case: ch.PreferredCase) -> None:
    """``TestPreferredSchedulingTermsScore``, through both the reference rule and the per-slot weights."""
    assert tuple(i for i, (_, t) in enumerate(case.terms) if term_error(t) is not None) == case.invalid
    if case.invalid and any(w for i, (w, _) in enumerate(case.terms) if i in case.invalid):
        return  # upstream refuses the whole list; this port scores the valid terms (see the reference)
    labels = dict(case.node_labels)
    raw = sum(w for w, t in case.terms if w and term_matches(t, labels, case.node_name))
    assert raw == case.score
    cluster = ListCluster.of([NodeFacts(case.node_name, case.node_labels)])
    cache = ConstraintCache()
    cache.bind(cluster)
    preferences = node_preferences(*case.terms).preferred
    assert cache.preferred_weights(preferences).tolist() == [case.score]


@pytest.mark.parametrize(("name", "requirements", "valid"), ch.REQUIREMENTS_AS_SELECTOR)
def test_node_selector_requirements_as_selector(name: str, requirements: tuple[Requirement, ...], valid: bool) -> None:
    assert all(requirement_error(r) is None for r in requirements) is valid, name


@pytest.mark.parametrize("case", ch.PODS_MATCH, ids=lambda c: c.name)
def test_pod_matches_node_selector_and_affinity_terms(case: ch.MatchCase) -> None:
    """``TestPodMatchesNodeSelectorAndAffinityTerms`` through the rule and the per-slot affinity mask."""
    assert required_node_affinity_matches(case.constraints, dict(case.node_labels), case.node_name) is case.matches
    cluster = ListCluster.of([NodeFacts(case.node_name, case.node_labels)])
    verdict = constraint_filter(cluster, cluster.rows(), "", (), case.constraints)
    assert bool(verdict.feasible[0]) is case.matches


@pytest.mark.parametrize(("name", "toleration", "taint", "expected"), ch.TOLERATES, ids=[c[0] for c in ch.TOLERATES])
def test_toleration_tolerates_taint(name: str, toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_no_constraints_refuse_nothing_on_a_plain_cluster() -> None:
    cluster = ListCluster.of([NodeFacts("a"), NodeFacts("b")])
    verdict = constraint_filter(cluster, cluster.rows(), "ns", (), PodConstraints())
    assert verdict.feasible.all()
    assert np.array_equal(verdict.rows, cluster.rows())
