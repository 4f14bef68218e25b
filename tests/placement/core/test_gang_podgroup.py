"""Pod-group labels as users write them: both label families, the spread policy, and clear errors."""

from __future__ import annotations

import pytest

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY, SPREAD_KEY
from placement.core.podgroup import (
    GroupRef,
    Membership,
    PodGroupError,
    PodGroupSpec,
    SpreadPolicy,
    parse_membership,
    parse_pod_group,
)


def test_pod_outside_any_group() -> None:
    assert parse_membership("ns", {"app": "web"}) is None


def test_kubenexus_labels() -> None:
    labels = {GROUP_NAME_KEY: "train-llm", MIN_AVAILABLE_KEY: "16"}
    assert parse_membership("ml", labels) == Membership(GroupRef("ml", "train-llm"), 16, SpreadPolicy.PACKED)
    spread = parse_membership("ml", {**labels, SPREAD_KEY: "balanced"}, {SPREAD_KEY: "spread"})
    assert spread is not None
    assert spread.spread is SpreadPolicy.SPREAD  # the annotation wins over the label
    assert parse_membership("", labels) == Membership(GroupRef("default", "train-llm"), 16, SpreadPolicy.PACKED)


def test_scheduler_plugins_label_takes_min_member_from_the_pod_group() -> None:
    labels = {SCHEDULER_PLUGINS_KEY: "spark-pi"}
    assert parse_membership("ns", labels) == Membership(GroupRef("ns", "spark-pi"), None, SpreadPolicy.PACKED)
    spec = parse_pod_group({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "spec": {"minMember": 5}})
    assert spec == PodGroupSpec(min_member=5)
    assert parse_membership("ns", labels, pod_group=spec) == Membership(
        GroupRef("ns", "spark-pi"), 5, SpreadPolicy.PACKED
    )
    both = {**labels, GROUP_NAME_KEY: "spark-pi", MIN_AVAILABLE_KEY: "5"}
    assert parse_membership("ns", both, pod_group=spec) == Membership(
        GroupRef("ns", "spark-pi"), 5, SpreadPolicy.PACKED
    )


@pytest.mark.parametrize(
    ("labels", "key", "detail"),
    [
        ({GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "four"}, MIN_AVAILABLE_KEY, "not an integer"),
        ({GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "2.5"}, MIN_AVAILABLE_KEY, "not an integer"),
        ({GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "0"}, MIN_AVAILABLE_KEY, "zero"),
        ({GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "-3"}, MIN_AVAILABLE_KEY, "negative"),
        ({GROUP_NAME_KEY: "g"}, MIN_AVAILABLE_KEY, "required"),
        ({MIN_AVAILABLE_KEY: "3"}, MIN_AVAILABLE_KEY, "without"),
        ({GROUP_NAME_KEY: "bad name!", MIN_AVAILABLE_KEY: "3"}, GROUP_NAME_KEY, ""),
        ({GROUP_NAME_KEY: "x" * 64, MIN_AVAILABLE_KEY: "3"}, GROUP_NAME_KEY, "64 characters"),
        ({GROUP_NAME_KEY: "-g", MIN_AVAILABLE_KEY: "3"}, GROUP_NAME_KEY, ""),
        ({GROUP_NAME_KEY: "a", SCHEDULER_PLUGINS_KEY: "b", MIN_AVAILABLE_KEY: "3"}, SCHEDULER_PLUGINS_KEY, "another"),
        ({GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "3", SPREAD_KEY: "tight"}, SPREAD_KEY, ""),
    ],
)
def test_invalid_labels_name_the_key_and_what_is_accepted(labels: dict[str, str], key: str, detail: str) -> None:
    with pytest.raises(PodGroupError) as raised:
        parse_membership("ns", labels)
    assert raised.value.key == key
    assert detail in str(raised.value)
    assert "accepted:" in str(raised.value)


def test_min_available_must_agree_with_the_pod_group_object() -> None:
    labels = {GROUP_NAME_KEY: "g", MIN_AVAILABLE_KEY: "4"}
    with pytest.raises(PodGroupError, match="disagrees with the PodGroup object"):
        parse_membership("ns", labels, pod_group=PodGroupSpec(min_member=8))


@pytest.mark.parametrize("spec", [{}, {"minMember": 0}, {"minMember": "x"}, {"minMember": True}, {"minMember": -1}])
def test_invalid_pod_group_objects(spec: dict[str, object]) -> None:
    with pytest.raises(PodGroupError, match=r"PodGroup spec\.minMember"):
        parse_pod_group({"spec": spec})
