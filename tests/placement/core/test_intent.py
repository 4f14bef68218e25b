"""Pod NUMA intent: parsing of the kubenexus annotations and labels, and the helpers the filter uses."""

from __future__ import annotations

import pytest

from placement.core.annotations import AFFINITY_KEY, ANTI_AFFINITY_KEY, POLICY_KEY, RESOURCES_KEY
from placement.core.intent import IntentError, NumaIntentPolicy, PodIntent, parse_pod_intent
from placement.core.topology_manager import TopologyPolicy


def test_no_intent() -> None:
    assert parse_pod_intent({}) == PodIntent()
    assert PodIntent().merge_policy is None


def test_full_intent() -> None:
    intent = parse_pod_intent(
        {
            POLICY_KEY: "single-numa",
            RESOURCES_KEY: "cpu, memory,hugepages-1Gi,nvidia.com/gpu,cpu",
            AFFINITY_KEY: "0,1",
            ANTI_AFFINITY_KEY: "3",
        }
    )
    assert intent == PodIntent(
        policy=NumaIntentPolicy.SINGLE_NUMA,
        resources=("cpu", "memory", "hugepages-1Gi", "nvidia.com/gpu"),
        affinity_node_ids=frozenset({0, 1}),
        anti_affinity_node_ids=frozenset({3}),
    )
    assert intent.merge_policy is TopologyPolicy.SINGLE_NUMA_NODE
    assert not intent.exclusive


@pytest.mark.parametrize(
    ("value", "merge_policy"),
    [
        ("best-effort", TopologyPolicy.BEST_EFFORT),
        ("restricted", TopologyPolicy.RESTRICTED),
        ("single-numa", TopologyPolicy.SINGLE_NUMA_NODE),
        ("isolated", TopologyPolicy.SINGLE_NUMA_NODE),
    ],
)
def test_policies(value: str, merge_policy: TopologyPolicy) -> None:
    intent = parse_pod_intent({POLICY_KEY: value})
    assert intent.merge_policy is merge_policy
    assert intent.exclusive is (value == "isolated")


def test_labels_are_read_and_annotations_win() -> None:
    labels = {POLICY_KEY: "isolated", AFFINITY_KEY: "0_2"}
    assert parse_pod_intent({}, labels) == PodIntent(
        policy=NumaIntentPolicy.ISOLATED, affinity_node_ids=frozenset({0, 2})
    )
    assert parse_pod_intent({POLICY_KEY: "restricted"}, labels).policy is NumaIntentPolicy.RESTRICTED


def test_cells_allowed_ignores_ids_the_node_lacks() -> None:
    intent = PodIntent(affinity_node_ids=frozenset({0, 5}), anti_affinity_node_ids=frozenset({1, 7}))
    assert intent.cells_allowed((0, 1, 2, 3)) == frozenset({0})
    assert PodIntent(anti_affinity_node_ids=frozenset({1, 7})).cells_allowed((0, 1)) == frozenset({0})
    assert PodIntent(affinity_node_ids=frozenset({5})).cells_allowed((0, 1)) == frozenset()


@pytest.mark.parametrize(
    ("annotations", "labels", "message"),
    [
        pytest.param(
            {POLICY_KEY: "single-numa-node"},
            {},
            "invalid value 'single-numa-node' for numa.scheduling.kubenexus.io/policy; "
            "accepted: best-effort | restricted | single-numa | isolated",
            id="unknown policy",
        ),
        pytest.param(
            {RESOURCES_KEY: "cpu,,memory"},
            {},
            "invalid value 'cpu,,memory' for numa.scheduling.kubenexus.io/resources (empty entry); "
            "accepted: cpu, memory, hugepages-<size> (e.g. hugepages-1Gi), <domain>/<name> (e.g. nvidia.com/gpu)",
            id="empty resource entry",
        ),
        pytest.param(
            {RESOURCES_KEY: "cpu,gpu"},
            {},
            "invalid value 'cpu,gpu' for numa.scheduling.kubenexus.io/resources (unknown resource 'gpu'); "
            "accepted: cpu, memory, hugepages-<size> (e.g. hugepages-1Gi), <domain>/<name> (e.g. nvidia.com/gpu)",
            id="unknown resource",
        ),
        pytest.param(
            {RESOURCES_KEY: "hugepages-"},
            {},
            "(unknown resource 'hugepages-')",
            id="hugepages without a size",
        ),
        pytest.param(
            {AFFINITY_KEY: "0,x"},
            {},
            "invalid value '0,x' for scheduling.kubenexus.io/numa-affinity-node-id ('x' is not a NUMA id); "
            "accepted: NUMA ids 0-63 separated by ',' (or '_' in a label), e.g. 0,1",
            id="affinity not a number",
        ),
        pytest.param(
            {ANTI_AFFINITY_KEY: "-1"},
            {},
            "invalid value '-1' for scheduling.kubenexus.io/numa-anti-affinity-node-id ('-1' is not a NUMA id)",
            id="negative id",
        ),
        pytest.param(
            {AFFINITY_KEY: "64"},
            {},
            "invalid value '64' for scheduling.kubenexus.io/numa-affinity-node-id (64 is above 63)",
            id="id above the kubelet bitmask",
        ),
        pytest.param(
            {AFFINITY_KEY: "0,"},
            {},
            "(empty entry)",
            id="trailing comma",
        ),
        pytest.param(
            {AFFINITY_KEY: "0_1"},
            {},
            "('0_1' is not a NUMA id)",
            id="underscore only in labels",
        ),
        pytest.param(
            {},
            {ANTI_AFFINITY_KEY: "1_b"},
            "invalid value '1_b' for scheduling.kubenexus.io/numa-anti-affinity-node-id ('b' is not a NUMA id)",
            id="bad label",
        ),
    ],
)
def test_invalid_values(annotations: dict[str, str], labels: dict[str, str], message: str) -> None:
    with pytest.raises(IntentError) as raised:
        parse_pod_intent(annotations, labels)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert raised.value.key in (POLICY_KEY, RESOURCES_KEY, AFFINITY_KEY, ANTI_AFFINITY_KEY)
