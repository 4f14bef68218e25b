"""Merge tables from kubernetes/kubernetes ``pkg/kubelet/cm/topologymanager``.

Sources (kubernetes/kubernetes, read at the commits below; the tables are unchanged since 1.27):
- ``policy_test.go`` @ 052ac4f7bc74452f0eadfcaacde855c5b8307b1d: ``commonPolicyMergeTestCases``,
  ``bestEffortPolicy.mergeTestCases``, ``mergeTestCasesNoPolicies``, ``mergeTestCasesClosestNUMA``,
  ``singleNumaNodePolicy.mergeTestCases``, ``TestMaxOfMinAffinityCounts``, ``TestCompareHintsNarrowest``,
  ``commonNUMAInfoFourNodes`` / ``commonNUMAInfoEightNodes``.
- ``policy_best_effort_test.go`` @ 243ba086e7f4cb73ea32bdd25d635d06cda26085 and ``policy_restricted_test.go``
  @ 052ac4f7bc74452f0eadfcaacde855c5b8307b1d: which tables run with which NUMA info, ``canAdmitPodResult``.
- ``policy_single_numa_node_test.go`` (1.27+ layout, four nodes): ``TestPolicySingleNumaNodeFilterHints``,
  ``TestPolicySingleNumaNodeCanAdmitPodResult``.

A provider is ``None`` (``&mockHintProvider{}``: nil map) or a resource -> hints mapping whose values
may be ``None`` (nil slice) or ``[]`` (empty slice), exactly as the Go tables distinguish them.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.core.topology_manager import NumaInfo, TopologyHint
from placement.core.topology_manager.merge import ProviderHints
from tests.kubelet_cases.hints import ANY_NOT_PREFERRED, ANY_PREFERRED, nonpref, pref

FOUR_NODES = NumaInfo(
    nodes=(0, 1, 2, 3),
    distances=((10, 11, 12, 12), (11, 10, 12, 12), (12, 12, 10, 11), (12, 12, 11, 10)),
)
EIGHT_NODES = NumaInfo(
    nodes=(0, 1, 2, 3, 4, 5, 6, 7),
    distances=(
        (10, 11, 12, 12, 30, 30, 30, 30),
        (11, 10, 12, 12, 30, 30, 30, 30),
        (12, 12, 10, 11, 30, 30, 30, 30),
        (12, 12, 11, 10, 30, 30, 30, 30),
        (30, 30, 30, 30, 10, 11, 12, 12),
        (30, 30, 30, 30, 11, 10, 12, 12),
        (30, 30, 30, 30, 12, 12, 10, 11),
        (30, 30, 30, 30, 12, 12, 13, 10),
    ),
)


@dataclass(frozen=True)
class MergeCase:
    name: str
    providers: tuple[ProviderHints, ...]
    expected: TopologyHint


def common_cases() -> list[MergeCase]:
    """``commonPolicyMergeTestCases``"""
    return [
        MergeCase(
            "Two providers, 1 hint each, same mask, both preferred 1/2",
            ({"resource1": [pref(0)]}, {"resource2": [pref(0)]}),
            pref(0),
        ),
        MergeCase(
            "Two providers, 1 hint each, same mask, both preferred 2/2",
            ({"resource1": [pref(1)]}, {"resource2": [pref(1)]}),
            pref(1),
        ),
        MergeCase(
            "Two providers, 1 no hints, 1 single hint preferred 1/2",
            (None, {"resource": [pref(0)]}),
            pref(0),
        ),
        MergeCase(
            "Two providers, 1 no hints, 1 single hint preferred 2/2",
            (None, {"resource": [pref(1)]}),
            pref(1),
        ),
        MergeCase(
            "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
            ({"resource1": [pref(0), pref(1)]}, {"resource2": [pref(0)]}),
            pref(0),
        ),
        MergeCase(
            "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
            ({"resource1": [pref(0), pref(1)]}, {"resource2": [pref(1)]}),
            pref(1),
        ),
        MergeCase(
            "Two providers, both with 2 hints, matching narrower preferred hint from both",
            ({"resource1": [pref(0), pref(1)]}, {"resource2": [pref(0), nonpref(0, 1)]}),
            pref(0),
        ),
        MergeCase(
            "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
            ({"resource1": [pref(1), nonpref(0, 1)]}, {"resource2": [pref(0), pref(1), nonpref(0, 1)]}),
            pref(1),
        ),
        MergeCase(
            "Multiple resources, same provider",
            ({"resource1": [pref(1), nonpref(0, 1)], "resource2": [pref(0), pref(1), nonpref(0, 1)]},),
            pref(1),
        ),
    ]


_WIDE = [nonpref(0, 1, 2, 3), nonpref(0, 1)]


def best_effort_cases(nodes: tuple[int, ...]) -> list[MergeCase]:
    """``bestEffortPolicy.mergeTestCases`` (also run for restricted: same Merge)."""
    return [
        MergeCase(
            "Two providers, 2 hints each, same mask (some with different bits), same preferred",
            ({"resource1": [pref(0, 1), pref(0, 2)]}, {"resource2": [pref(0, 1), pref(0, 2)]}),
            pref(0, 1),
        ),
        MergeCase("TopologyHint not set", (), pref(*nodes)),
        MergeCase("HintProvider returns empty non-nil map[string][]TopologyHint", ({},), pref(*nodes)),
        MergeCase(
            "HintProvider returns -nil map[string][]TopologyHint from provider", ({"resource": None},), pref(*nodes)
        ),
        MergeCase(
            "HintProvider returns empty non-nil map[string][]TopologyHint from provider",
            ({"resource": []},),
            nonpref(*nodes),
        ),
        MergeCase(
            "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
            ({"resource": [ANY_PREFERRED]},),
            pref(*nodes),
        ),
        MergeCase(
            "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
            ({"resource": [ANY_NOT_PREFERRED]},),
            nonpref(*nodes),
        ),
        MergeCase(
            "Two providers, 1 hint each, no common mask",
            ({"resource1": [pref(0)]}, {"resource2": [pref(1)]}),
            nonpref(*nodes),
        ),
        MergeCase(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            ({"resource1": [pref(0)]}, {"resource2": [nonpref(0)]}),
            nonpref(0),
        ),
        MergeCase(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            ({"resource1": [pref(1)]}, {"resource2": [nonpref(1)]}),
            nonpref(1),
        ),
        MergeCase(
            "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
            ({"resource1": [pref(0)]}, {"resource2": [pref(0, 1)]}),
            nonpref(0),
        ),
        MergeCase(
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            ({"resource1": [pref(0), pref(1)]}, {"resource2": [nonpref(0, 1)]}),
            nonpref(0),
        ),
        MergeCase(
            "Two providers, 1 hint each, 1 wider mask, both preferred 2/2",
            ({"resource1": [pref(1)]}, {"resource2": [pref(0, 1)]}),
            nonpref(1),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (1)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(0, 1)]}),
            nonpref(0, 1),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (2)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(0, 3)]}),
            nonpref(0, 3),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (3)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(1, 2)]}),
            nonpref(1, 2),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (4)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(2, 3)]}),
            nonpref(2, 3),
        ),
    ]


def no_policy_option_cases() -> list[MergeCase]:
    """``bestEffortPolicy.mergeTestCasesNoPolicies``"""
    return [
        MergeCase(
            "bestNonPreferredAffinityCount (5)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(1, 2), nonpref(2, 3)]}),
            nonpref(1, 2),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (6)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(1, 2, 3), nonpref(1, 2), nonpref(1, 3), nonpref(2, 3)]}),
            nonpref(1, 2),
        ),
    ]


def closest_numa_cases() -> list[MergeCase]:
    """``bestEffortPolicy.mergeTestCasesClosestNUMA`` (eight nodes, prefer-closest-numa-nodes)."""
    return [
        MergeCase(
            "Two providers, 2 hints each, same mask (some with different bits), same preferred",
            ({"resource1": [pref(0, 4), pref(0, 2)]}, {"resource2": [pref(0, 4), pref(0, 2)]}),
            pref(0, 2),
        ),
        MergeCase(
            "Two providers, 2 hints each, different mask",
            ({"resource1": [pref(4), pref(0, 2)]}, {"resource2": [pref(4), pref(0, 2)]}),
            pref(4),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (5)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(1, 2), nonpref(2, 3)]}),
            nonpref(2, 3),
        ),
        MergeCase(
            "bestNonPreferredAffinityCount (6)",
            ({"resource1": _WIDE}, {"resource2": [nonpref(1, 2, 3), nonpref(1, 2), nonpref(1, 3), nonpref(2, 3)]}),
            nonpref(2, 3),
        ),
    ]


def single_numa_node_cases() -> list[MergeCase]:
    """``singleNumaNodePolicy.mergeTestCases`` (an all-nodes answer comes back as the nil mask)."""
    return [
        MergeCase("TopologyHint not set", (), ANY_PREFERRED),
        MergeCase("HintProvider returns empty non-nil map[string][]TopologyHint", ({},), ANY_PREFERRED),
        MergeCase(
            "HintProvider returns -nil map[string][]TopologyHint from provider", ({"resource": None},), ANY_PREFERRED
        ),
        MergeCase(
            "HintProvider returns empty non-nil map[string][]TopologyHint from provider",
            ({"resource": []},),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Single TopologyHint with Preferred as true and NUMANodeAffinity as nil",
            ({"resource": [ANY_PREFERRED]},),
            ANY_PREFERRED,
        ),
        MergeCase(
            "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
            ({"resource": [ANY_NOT_PREFERRED]},),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Two providers, 1 hint each, no common mask",
            ({"resource1": [pref(0)]}, {"resource2": [pref(1)]}),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
            ({"resource1": [pref(0)]}, {"resource2": [nonpref(0)]}),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
            ({"resource1": [pref(1)]}, {"resource2": [nonpref(1)]}),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
            ({"resource1": [pref(0), pref(1)]}, {"resource2": [nonpref(0, 1)]}),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "Single NUMA hint generation",
            ({"resource1": [pref(0, 1)], "resource2": [pref(0), pref(1), nonpref(0, 1)]},),
            ANY_NOT_PREFERRED,
        ),
        MergeCase(
            "One no-preference provider",
            ({"resource1": [pref(0), pref(1), nonpref(0, 1)]}, None),
            pref(0),
        ),
    ]


# TestCompareHintsNarrowest: (description, bestNonPreferredAffinityCount, current, candidate, expected)
COMPARE_NARROWEST: list[tuple[str, int, TopologyHint | None, TopologyHint, str]] = [
    ("candidate.NUMANodeAffinity.Count() == 0 (1)", -1, None, nonpref(), "current"),
    ("candidate.NUMANodeAffinity.Count() == 0 (2)", -1, pref(), nonpref(), "current"),
    ("current == nil (1)", -1, None, pref(0), "candidate"),
    ("current == nil (2)", -1, None, nonpref(0), "candidate"),
    ("!current.Preferred && candidate.Preferred", -1, nonpref(0), pref(0), "candidate"),
    ("current.Preferred && !candidate.Preferred", -1, pref(0), nonpref(0), "current"),
    ("current.Preferred && candidate.Preferred (1)", -1, pref(0), pref(0), "current"),
    ("current.Preferred && candidate.Preferred (2)", -1, pref(0, 1), pref(0), "candidate"),
    ("current.Preferred && candidate.Preferred (3)", -1, pref(0), pref(0, 1), "current"),
    ("!current.Preferred && !candidate.Preferred (1.1)", 1, nonpref(0, 1), nonpref(0, 1), "current"),
    ("!current.Preferred && !candidate.Preferred (1.2)", 1, nonpref(1, 2), nonpref(0, 1), "candidate"),
    ("!current.Preferred && !candidate.Preferred (1.3)", 1, nonpref(0, 1), nonpref(1, 2), "current"),
    ("!current.Preferred && !candidate.Preferred (2.1)", 2, nonpref(0, 1), nonpref(0), "current"),
    ("!current.Preferred && !candidate.Preferred (2.2)", 2, nonpref(0, 1), nonpref(0, 1), "current"),
    ("!current.Preferred && !candidate.Preferred (2.3)", 2, nonpref(1, 2), nonpref(0, 1), "candidate"),
    ("!current.Preferred && !candidate.Preferred (2.4)", 2, nonpref(0, 1), nonpref(1, 2), "current"),
    ("!current.Preferred && !candidate.Preferred (3a)", 2, nonpref(0), nonpref(0, 1, 2), "current"),
    ("!current.Preferred && !candidate.Preferred (3b)", 2, nonpref(0), nonpref(0, 1), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.1)", 3, nonpref(0), nonpref(0, 1), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.2)", 3, nonpref(0), nonpref(1, 2), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.3)", 4, nonpref(0, 1), nonpref(1, 2, 3), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3cb)", 4, nonpref(1, 2, 3), nonpref(0, 1), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.1)", 4, nonpref(0, 1, 2), nonpref(0, 1, 2), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.2)", 4, nonpref(0, 1, 2), nonpref(1, 2, 3), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.3)", 4, nonpref(1, 2, 3), nonpref(0, 1, 2), "candidate"),
]

# TestMaxOfMinAffinityCounts (unnamed upstream: numbered here)
MAX_OF_MIN_AFFINITY_COUNTS: list[tuple[list[list[TopologyHint]], int]] = [
    ([], 0),
    ([[pref()]], 0),
    ([[pref(0)]], 1),
    ([[pref(0, 1)]], 2),
    ([[pref(0, 1), pref(0, 1, 2)]], 2),
    ([[pref(0, 1), pref(0, 1, 2)], [pref(0, 1, 2)]], 3),
    ([[pref(0, 1), pref(0, 1, 2)], [pref(0, 1, 2), pref(0, 1, 2, 3)]], 3),
]

# TestPolicySingleNumaNodeFilterHints
FILTER_SINGLE_NUMA_HINTS: list[tuple[str, list[list[TopologyHint]], list[list[TopologyHint]]]] = [
    ("filter empty resources", [], []),
    (
        "filter hints with nil socket mask 1/2",
        [[ANY_NOT_PREFERRED], [ANY_PREFERRED]],
        [[], [ANY_PREFERRED]],
    ),
    (
        "filter hints with nil socket mask 2/2",
        [[pref(0), ANY_NOT_PREFERRED], [pref(1), ANY_PREFERRED]],
        [[pref(0)], [pref(1), ANY_PREFERRED]],
    ),
    (
        "filter hints with empty resource socket mask",
        [[pref(1), pref(0), ANY_NOT_PREFERRED], []],
        [[pref(1), pref(0)], []],
    ),
    (
        "filter hints with wide sockemask",
        [
            [pref(0), pref(1), nonpref(1, 2), nonpref(0, 1, 2), ANY_NOT_PREFERRED],
            [nonpref(1, 2), nonpref(0, 1, 2), nonpref(0, 2), nonpref(3)],
            [nonpref(1, 2), nonpref(0, 1, 2), nonpref(0, 2)],
        ],
        [[pref(0), pref(1)], [], []],
    ),
]
