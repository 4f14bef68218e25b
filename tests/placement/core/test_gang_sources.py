"""The gang sources' parsers (``placement.core.gang_sources``) on the real examples of ../shared/data/dra
(the Kubernetes docs and KEP examples, scheduler-plugins' README, the API round-trip fixtures; read in place),
on Kubernetes 1.37 objects copied here from k8s.io/kubernetes v1.37.2 and k8s.io/api v0.37.2 (each names its
file), on small Volcano objects authored here after volcano.sh/apis scheduling/v1beta1 types.go, and on Kueue's
own pod group pod (sigs.k8s.io/kueue v0.19.2, copied here naming its file)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.gang_sources import (
    SOURCE_KUEUE,
    SOURCE_OURS,
    SOURCE_PODGROUP,
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    SOURCE_WORKLOAD,
    VOLCANO_GROUP_KEY,
    GangSourceError,
    PodGroupKey,
    definition_for_replica,
    group_of,
    label_group_definition,
    parse_native_pod_group,
    parse_scheduler_plugins_pod_group,
    parse_volcano_pod_group,
    parse_workload,
)
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY
from placement.core.podgroup import DomainConstraint, GroupRef
from tests.conftest import SHARED_DATA, require_shared

DRA = SHARED_DATA / "dra"
WORKLOAD_API = DRA / "workload-api"
ROUNDTRIP = DRA / "api-roundtrip-fixtures"
PLUGINS = DRA / "scheduler-plugins"
KEP_1_35 = "kep-4671_commit-ed5c92c2f_k8s-1.35-alpha_scheduling.k8s.io_v1alpha1_"
KEP_1_36 = "kep-4671_commit-cc0a0fbea_k8s-1.36-alpha2_scheduling.k8s.io_v1alpha2_"
DOCS_1_36 = "k8s-docs_{}_v1.36_scheduling.k8s.io_v1alpha2_PodGroup_{}.yaml"
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _load(path: Path) -> Any:
    return yaml.safe_load(require_shared(path).read_text())


def _pod(**spec: Any) -> dict[str, Any]:
    metadata = spec.pop("metadata", {})
    return {"metadata": {"name": "p", "namespace": "ml", **metadata}, "spec": spec}


# --- which group a pod joins ---------------------------------------------------------------------------------


def test_a_1_35_pod_joins_its_workload_pod_group() -> None:
    pod = _load(WORKLOAD_API / "k8s-docs_workload-reference_v1.35_core_v1_Pod_worker-0_workloadRef.yaml")
    assert group_of(pod) == PodGroupKey(SOURCE_WORKLOAD, "some-ns", "training-job-workload", "workers")


def test_the_1_35_round_trip_pod_carries_a_replica_key() -> None:
    pod = _load(ROUNDTRIP / "k8s-1.35.7_core_v1_Pod_roundtrip-fuzz_has-workloadRef.yaml")
    # The fixture's placeholders are not DNS names ("nameValue"): refused with the field named.
    with pytest.raises(GangSourceError, match=r"spec\.workloadRef\.name 'nameValue'"):
        group_of(pod)
    pod["spec"]["workloadRef"] = {"name": "job", "podGroup": "workers", "podGroupReplicaKey": "replica-1"}
    assert group_of(pod) == PodGroupKey(SOURCE_WORKLOAD, "namespaceValue", "job", "workers", "replica-1")


def test_a_1_36_pod_joins_its_pod_group() -> None:
    pod = _load(WORKLOAD_API / "k8s-docs_scheduling-group_v1.36+_core_v1_Pod_worker-0_schedulingGroup.yaml")
    assert group_of(pod) == PodGroupKey(SOURCE_PODGROUP, "some-ns", "training-worker-0")


# 1.37 pods as upstream writes them: test/integration/scheduler_perf/podgroup/tas/templates/gang-pod.yaml (the
# template's podGroupName filled in), and the API round-trip fixture testdata/HEAD/core.v1.Pod.json of
# k8s.io/api v0.37.2 (its spec.schedulingGroup, the only group reference a 1.37 Pod has: workloadRef is
# tombstoned in core/v1 types.go).
_TAS_GANG_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "test-tas-scheduling-3", "namespace": "ml"},
    "spec": {
        "schedulingGroup": {"podGroupName": "gang-0"},
        "containers": [{"image": "registry.k8s.io/pause:3.10.1", "name": "pause"}],
    },
}
_ROUNDTRIP_1_37_POD = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {"name": "nameValue", "namespace": "namespaceValue"},
    "spec": {"schedulingGroup": {"podGroupName": "podGroupNameValue"}},
}


@pytest.mark.parametrize(
    ("pod", "key"),
    [
        (_TAS_GANG_POD, PodGroupKey(SOURCE_PODGROUP, "ml", "gang-0")),
        # "podGroupNameValue" is no DNS subdomain (capitals); the 1.37 validation refuses it too
        # (pkg/apis/core/validation validateSchedulingGroup: ValidatePodGroupName).
        (_ROUNDTRIP_1_37_POD, "pod namespaceValue/nameValue: invalid spec.schedulingGroup.podGroupName"),
    ],
    ids=["scheduler-perf-gang-pod", "round-trip-fixture"],
)
def test_a_1_37_pod_joins_its_pod_group(pod: dict[str, Any], key: PodGroupKey | str) -> None:
    if isinstance(key, str):
        with pytest.raises(GangSourceError, match=re.escape(key)):
            group_of(pod)
    else:
        assert group_of(pod) == key


def test_a_deployment_template_joins_by_scheduling_group() -> None:
    deployment = _load(
        WORKLOAD_API / "example-driver-podgroup-resourceclaimtemplate_apps_v1_Deployment_group-1_schedulingGroup.yaml"
    )
    template = deployment["spec"]["template"]
    pod = {**template, "metadata": {**template["metadata"], "namespace": deployment["metadata"]["namespace"]}}
    assert group_of(pod) == PodGroupKey(SOURCE_PODGROUP, "podgroup-resourceclaimtemplate", "group-1")


def test_scheduler_plugins_members_join_by_their_label() -> None:
    replica_set = _load(PLUGINS / "scheduler-plugins-coscheduling-readme_apps_v1_ReplicaSet_nginx.yaml")
    template = replica_set["spec"]["template"]
    assert group_of(template) == PodGroupKey(SOURCE_SCHEDULER_PLUGINS, "default", "nginx")


def test_volcano_members_join_by_the_annotation_volcano_reads() -> None:
    pod = _pod(metadata={"annotations": {VOLCANO_GROUP_KEY: "train-5e2a"}})
    assert group_of(pod) == PodGroupKey(SOURCE_VOLCANO, "ml", "train-5e2a")
    # Volcano's scheduler ignores an empty value (getJobID): no group.
    assert group_of(_pod(metadata={"annotations": {VOLCANO_GROUP_KEY: ""}})) is None


def test_our_labels_and_no_group() -> None:
    assert group_of(_pod(metadata={"labels": {GROUP_NAME_KEY: "train"}})) == PodGroupKey(SOURCE_OURS, "ml", "train")
    assert group_of(_pod(metadata={"labels": {"app": "web"}})) is None


def test_our_label_beside_scheduler_plugins_label_is_the_plugins_group() -> None:
    pod = _pod(metadata={"labels": {GROUP_NAME_KEY: "train", SCHEDULER_PLUGINS_KEY: "train"}})
    assert group_of(pod) == PodGroupKey(SOURCE_SCHEDULER_PLUGINS, "ml", "train")


def test_a_pod_naming_two_sources_is_refused_whole() -> None:
    pod = _pod(metadata={"annotations": {VOLCANO_GROUP_KEY: "a"}}, schedulingGroup={"podGroupName": "b"})
    with pytest.raises(GangSourceError) as refused:
        group_of(pod)
    assert str(refused.value) == (
        "pod ml/p joins more than one pod group (ml/b (scheduling.k8s.io) and ml/a "
        "(scheduling.volcano.sh)); accepted: one group per pod"
    )


# Kueue's pod group pod: test/performance/e2e/podgroups/templates/pod.yaml of sigs.k8s.io/kueue v0.19.2, its
# template values filled in (pod 5 of 4-pod workloads, one queue).
_KUEUE_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "pod-5",
        "namespace": "ml",
        "labels": {"kueue.x-k8s.io/queue-name": "lq-0", "kueue.x-k8s.io/pod-group-name": "pod-group-1"},
        "annotations": {"kueue.x-k8s.io/pod-group-total-count": "4"},
    },
    "spec": {
        "containers": [{"name": "pod-5", "image": "gcr.io/k8s-staging-perf-tests/sleep:v0.1.0", "args": ["10s"]}],
        "restartPolicy": "Never",
    },
}


def _kueue_member(name: str, **metadata: dict[str, str]) -> dict[str, Any]:
    """Kueue's pod renamed, with ``metadata`` (labels, annotations) entries added."""
    pod: dict[str, Any] = {**_KUEUE_POD, "metadata": {**_KUEUE_POD["metadata"], "name": name}}
    for field, entries in metadata.items():
        pod["metadata"][field] = {**pod["metadata"][field], **entries}
    return pod


def test_kueue_members_join_their_pod_group() -> None:
    assert group_of(_KUEUE_POD) == PodGroupKey(SOURCE_KUEUE, "ml", "pod-group-1")
    # Kueue reads the annotation of the same key first (GetPodGroupName): what it writes itself, e.g. on a
    # LeaderWorkerSet's pods.
    renamed = _kueue_member("pod-6", annotations={KUEUE_GROUP_NAME_KEY: "lws-group"})
    assert group_of(renamed) == PodGroupKey(SOURCE_KUEUE, "ml", "lws-group")
    assert group_of(_kueue_member("pod-7", labels={KUEUE_GROUP_NAME_KEY: ""})) is None


def test_a_kueue_member_with_our_label_too_is_refused_whole() -> None:
    pod = _kueue_member("pod-5", labels={GROUP_NAME_KEY: "train"})
    with pytest.raises(GangSourceError) as refused:
        group_of(pod)
    assert str(refused.value) == (
        "pod ml/pod-5 joins more than one pod group (ml/train (kubenexus) and ml/pod-group-1 (kueue.x-k8s.io)); "
        "accepted: one group per pod"
    )


def test_an_invalid_kueue_group_name_is_refused_naming_the_key() -> None:
    with pytest.raises(GangSourceError) as refused:
        group_of(_kueue_member("pod-5", labels={KUEUE_GROUP_NAME_KEY: "Pod_Group"}))
    assert str(refused.value).startswith(f"pod ml/pod-5: invalid {KUEUE_GROUP_NAME_KEY} 'Pod_Group'; accepted:")


def test_a_kueue_group_is_defined_by_its_members_total_count() -> None:
    members = [_kueue_member(f"pod-{index}") for index in range(4, 8)]
    key = group_of(members[0])
    assert key is not None
    definition = label_group_definition(key, members)
    assert (definition.ref, definition.min_member, definition.gang) == (GroupRef("ml", "kueue_pod-group-1"), 4, True)
    assert label_group_definition(key, members[:1]).min_member == 4  # each member states the whole group's size


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (("4", None), f"annotation {KUEUE_GROUP_TOTAL_COUNT_KEY} is missing on member ml/pod-1; accepted:"),
        (("4", "3"), f"members disagree about annotation {KUEUE_GROUP_TOTAL_COUNT_KEY} ('3', '4'); accepted:"),
        (("0",), f"invalid annotation {KUEUE_GROUP_TOTAL_COUNT_KEY} '0'; accepted: a positive integer"),
        (("four",), f"invalid annotation {KUEUE_GROUP_TOTAL_COUNT_KEY} 'four'; accepted: a positive integer"),
    ],
    ids=["missing", "disagree", "zero", "not-a-number"],
)
def test_an_invalid_kueue_total_count_is_refused_naming_the_annotation(
    counts: tuple[str | None, ...], message: str
) -> None:
    members = []
    for index, count in enumerate(counts):
        member = _kueue_member(f"pod-{index}")
        member["metadata"]["annotations"] = {} if count is None else {KUEUE_GROUP_TOTAL_COUNT_KEY: count}
        members.append(member)
    with pytest.raises(GangSourceError) as refused:
        label_group_definition(PodGroupKey(SOURCE_KUEUE, "ml", "pod-group-1"), members)
    assert str(refused.value).startswith(f"pod group ml/pod-group-1 (kueue.x-k8s.io): {message}")


def test_our_label_group_takes_its_min_available_or_every_member() -> None:
    key = PodGroupKey(SOURCE_OURS, "ml", "train")
    labelled = [_pod(metadata={"name": f"w{i}", "labels": {GROUP_NAME_KEY: "train"}}) for i in range(3)]
    assert label_group_definition(key, labelled).min_member == 3
    labelled[0]["metadata"]["labels"][MIN_AVAILABLE_KEY] = "2"
    assert label_group_definition(key, labelled).min_member == 2
    labelled[1]["metadata"]["labels"][MIN_AVAILABLE_KEY] = "3"
    with pytest.raises(GangSourceError, match=rf"members disagree about label {MIN_AVAILABLE_KEY} \('2', '3'\)"):
        label_group_definition(key, labelled)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"schedulingGroup": {}}, "pod ml/p: spec.schedulingGroup.podGroupName is missing; accepted: an object name"),
        ({"workloadRef": {"name": "w"}}, "pod ml/p: spec.workloadRef.podGroup is missing; accepted: an object name"),
        (
            {"workloadRef": {"name": "w", "podGroup": "g", "podGroupReplicaKey": "Not_A_Label"}},
            "pod ml/p: invalid spec.workloadRef.podGroupReplicaKey 'Not_A_Label'; accepted: a DNS label",
        ),
    ],
)
def test_invalid_pod_references_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(GangSourceError) as refused:
        group_of(_pod(**spec))
    assert str(refused.value).startswith(message)


# --- group names ---------------------------------------------------------------------------------------------


def test_group_names_are_label_values_unique_across_sources() -> None:
    keys = [
        PodGroupKey(SOURCE_OURS, "ml", "train"),
        PodGroupKey(SOURCE_VOLCANO, "ml", "train"),
        PodGroupKey(SOURCE_PODGROUP, "ml", "train"),
        PodGroupKey(SOURCE_WORKLOAD, "ml", "train", "workers"),
        PodGroupKey(SOURCE_WORKLOAD, "ml", "train", "workers", "r1"),
        PodGroupKey(SOURCE_KUEUE, "ml", "train"),
    ]
    names = [key.group_name for key in keys]
    assert names == [
        "train",
        "volcano_train",
        "podgroup_train",
        "workload_train_workers",
        "workload_train_workers_r1",
        "kueue_train",
    ]
    assert PodGroupKey(SOURCE_SCHEDULER_PLUGINS, "ml", "train").ref == GroupRef("ml", "train")  # shares ours


def test_a_long_name_gets_a_stable_digest_form() -> None:
    long = PodGroupKey(SOURCE_WORKLOAD, "ml", "w" * 200, "workers", "r1")
    other = PodGroupKey(SOURCE_WORKLOAD, "ml", "w" * 200, "workers", "r2")
    name = long.group_name
    assert len(name) <= 63
    assert LABEL_VALUE.fullmatch(name)
    assert name == PodGroupKey(SOURCE_WORKLOAD, "ml", "w" * 200, "workers", "r1").group_name
    assert name != other.group_name
    assert name.startswith("workload_www")
    # Kueue's group names are object names (up to 253 characters): the same rule.
    kueue = PodGroupKey(SOURCE_KUEUE, "ml", "k" * 200).group_name
    assert (len(kueue), kueue.startswith("kueue_kkk"), LABEL_VALUE.fullmatch(kueue) is not None) == (63, True, True)


# --- the objects ---------------------------------------------------------------------------------------------


def test_the_scheduler_plugins_readme_pod_group() -> None:
    definition = parse_scheduler_plugins_pod_group(
        _load(PLUGINS / "scheduler-plugins-coscheduling-readme_scheduling.x-k8s.io_v1alpha1_PodGroup_nginx.yaml")
    )
    assert (definition.key, definition.min_member, definition.timeout_s, definition.gang) == (
        PodGroupKey(SOURCE_SCHEDULER_PLUGINS, "default", "nginx"),
        3,
        10.0,
        True,
    )


def test_a_scheduler_plugins_pod_group_without_min_member_is_refused() -> None:
    with pytest.raises(GangSourceError) as refused:
        parse_scheduler_plugins_pod_group({"metadata": {"name": "g", "namespace": "ml"}, "spec": {}})
    assert str(refused.value) == (
        "PodGroup ml/g (scheduling.x-k8s.io): spec.minMember is missing; accepted: a positive integer, e.g. 8"
    )


def test_native_pod_groups_of_the_1_36_docs_and_keps() -> None:
    standalone = parse_native_pod_group(
        _load(WORKLOAD_API / DOCS_1_36.format("podgroup-api", "training-worker-0_standalone"))
    )
    assert (standalone.key.group_name, standalone.min_member, standalone.topology) == (
        "podgroup_training-worker-0",
        4,
        (),
    )
    topology = parse_native_pod_group(
        _load(WORKLOAD_API / DOCS_1_36.format("topology-aware-scheduling", "example-podgroup_topology"))
    )
    assert topology.topology == (DomainConstraint("topology.example.com/rack", required=True),)
    from_template = parse_native_pod_group(_load(WORKLOAD_API / f"{KEP_1_36}PodGroup_job-instance-worker-0.yaml"))
    assert from_template.min_member == 100
    assert from_template.gang


# Kubernetes 1.37 PodGroups, in the JSON of k8s.io/api scheduling/v1beta1 and v1alpha3 (types.go json tags):
# kube-scheduler's own benchmark objects (test/integration/scheduler_perf, their template values filled in)
# and a PodGroup with every 1.37 field a controller copies from its Workload's template.
def _pod_group_1_37(version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ml"}
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup", "metadata": metadata, "spec": spec}


_FROM_TEMPLATE = {
    "workloadRef": {"workloadName": "training-job-workload", "templateName": "workers"},
    "schedulingPolicy": {"gang": {"minCount": 4}},
    "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "imex-channel"}],
    "disruptionMode": {"all": {}},
    "priorityClassName": "high-priority",
    "priority": 1000,
    "preemptionPolicy": "PreemptLowerPriority",
}


@pytest.mark.parametrize(
    ("pod_group", "expected"),
    [
        (  # podgroup/gangscheduling/templates/podgroup.yaml
            _pod_group_1_37("v1beta1", "gang-0", {"schedulingPolicy": {"gang": {"minCount": 8}}}),
            ("podgroup_gang-0", 8, True, ()),
        ),
        (  # podgroup/basicscheduling/templates/podgroup.yaml
            _pod_group_1_37("v1beta1", "basic-group-0", {"schedulingPolicy": {"basic": {}}}),
            ("podgroup_basic-group-0", 1, False, ()),
        ),
        (  # podgroup/tas/templates/podgroup.yaml
            _pod_group_1_37(
                "v1beta1",
                "gang-0",
                {
                    "schedulingPolicy": {"gang": {"minCount": 4}},
                    "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
                },
            ),
            ("podgroup_gang-0", 4, True, (DomainConstraint("topology.kubernetes.io/rack", required=True),)),
        ),
        (  # templates/podgroup.yaml (v1alpha3, priority and disruptionMode set)
            _pod_group_1_37(
                "v1alpha3",
                "gang-1",
                {"priority": 1000, "disruptionMode": {"all": {}}, "schedulingPolicy": {"gang": {"minCount": 16}}},
            ),
            ("podgroup_gang-1", 16, True, ()),
        ),
        (  # created from the v1beta1 Workload training-job-workload's template "workers" (workloadRef)
            _pod_group_1_37("v1beta1", "training-job-workers-0", _FROM_TEMPLATE),
            ("podgroup_training-job-workers-0", 4, True, (DomainConstraint("topology.kubernetes.io/rack", True),)),
        ),
    ],
    ids=["gang", "basic", "topology", "v1alpha3", "from-workload-template"],
)
def test_1_37_pod_groups(pod_group: dict[str, Any], expected: tuple[object, ...]) -> None:
    definition = parse_native_pod_group(pod_group)
    assert definition.key.source == SOURCE_PODGROUP
    assert (definition.key.group_name, definition.min_member, definition.gang, definition.topology) == expected


# testdata/HEAD/scheduling.k8s.io.v1beta1.PodGroup.json of k8s.io/api v0.37.2 (metadata trimmed to its name,
# namespace and generation): every field set, so both policy members and a parent CompositePodGroup.
_ROUNDTRIP_1_37_POD_GROUP: dict[str, Any] = {
    "kind": "PodGroup",
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "metadata": {"name": "nameValue", "namespace": "namespaceValue", "generation": 7},
    "spec": {
        "parentCompositePodGroupName": "parentCompositePodGroupNameValue",
        "workloadRef": {"workloadName": "workloadNameValue", "templateName": "templateNameValue"},
        "schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}},
        "schedulingConstraints": {"topology": [{"key": "keyValue"}]},
        "resourceClaims": [
            {
                "name": "nameValue",
                "resourceClaimName": "resourceClaimNameValue",
                "resourceClaimTemplateName": "resourceClaimTemplateNameValue",
            }
        ],
        "disruptionMode": {"single": {}, "all": {}},
        "priorityClassName": "priorityClassNameValue",
        "priority": 8,
        "preemptionPolicy": "preemptionPolicyValue",
    },
    "status": {
        "conditions": [
            {
                "type": "typeValue",
                "status": "statusValue",
                "observedGeneration": 3,
                "lastTransitionTime": "2004-01-01T01:01:01Z",
                "reason": "reasonValue",
                "message": "messageValue",
            }
        ],
        "resourceClaimStatuses": [{"name": "nameValue", "resourceClaimName": "resourceClaimNameValue"}],
    },
}


@pytest.mark.parametrize(
    ("drop", "outcome"),
    [
        (
            (),
            "spec.parentCompositePodGroupName 'parentCompositePodGroupNameValue' is set; accepted: a PodGroup of no "
            "CompositePodGroup (its all-or-nothing hierarchy is not read)",
        ),
        (("parentCompositePodGroupName",), "spec.schedulingPolicy sets basic, gang; accepted: exactly one of"),
        (("parentCompositePodGroupName", "basic"), ("podgroup_nameValue", 1, True, ("keyValue",))),
        (("parentCompositePodGroupName", "gang"), ("podgroup_nameValue", 1, False, ("keyValue",))),
    ],
    ids=["composite-child", "both-policies", "gang", "basic"],
)
def test_the_1_37_round_trip_pod_group(drop: tuple[str, ...], outcome: str | tuple[object, ...]) -> None:
    """Refused as the API server refuses it (both union members) or as this service does (a CompositePodGroup
    child); with those dropped, each union member alone is what a 1.37 API server stores."""
    spec = dict(_ROUNDTRIP_1_37_POD_GROUP["spec"])
    spec["schedulingPolicy"] = {k: v for k, v in spec["schedulingPolicy"].items() if k not in drop}
    spec = {k: v for k, v in spec.items() if k not in drop}
    pod_group = {**_ROUNDTRIP_1_37_POD_GROUP, "spec": spec}
    if isinstance(outcome, str):
        with pytest.raises(GangSourceError) as refused:
            parse_native_pod_group(pod_group)
        assert str(refused.value).startswith(f"PodGroup namespaceValue/nameValue (scheduling.k8s.io): {outcome}")
        return
    definition = parse_native_pod_group(pod_group)
    levels = tuple(constraint.level for constraint in definition.topology)
    assert (definition.key.group_name, definition.min_member, definition.gang, levels) == outcome


def test_every_real_v1alpha2_pod_group_parses() -> None:
    paths = sorted(require_shared(WORKLOAD_API).glob("*v1alpha2_PodGroup*.yaml"))
    assert len(paths) >= 4
    for path in paths:
        definition = parse_native_pod_group(_load(path))
        assert definition.gang, path.name
        assert definition.min_member >= 1, path.name


def test_the_round_trip_fixtures_with_both_policies_are_refused() -> None:
    pod_group = _load(ROUNDTRIP / "k8s-1.36.3_scheduling.k8s.io_v1alpha2_PodGroup_roundtrip-fuzz.yaml")
    with pytest.raises(GangSourceError) as refused:
        parse_native_pod_group(pod_group)
    assert str(refused.value) == (
        "PodGroup namespaceValue/nameValue (scheduling.k8s.io): spec.schedulingPolicy sets basic, gang; "
        "accepted: exactly one of basic: {} or gang: {minCount: N}"
    )
    workload = _load(ROUNDTRIP / "k8s-1.35.7_scheduling.k8s.io_v1alpha1_Workload_roundtrip-fuzz.yaml")
    with pytest.raises(GangSourceError, match=r"invalid spec\.podGroups\[0\]\.name 'nameValue'"):
        parse_workload(workload)  # a placeholder, not a DNS name
    workload["spec"]["podGroups"][0]["name"] = "workers"
    with pytest.raises(GangSourceError, match=r"spec\.podGroups\[0\]\.policy sets basic, gang"):
        parse_workload(workload)
    # Each union member alone is what a real API server stores: gang with its minCount, or basic.
    del pod_group["spec"]["schedulingPolicy"]["basic"]
    assert parse_native_pod_group(pod_group).min_member == 1
    del workload["spec"]["podGroups"][0]["policy"]["gang"]
    assert not parse_workload(workload)["workers"].gang


def test_the_1_35_workloads_of_the_kep() -> None:
    job = parse_workload(_load(WORKLOAD_API / f"{KEP_1_35}Workload_job-1.yaml"))
    assert list(job) == ["pg1"]
    assert (job["pg1"].key, job["pg1"].min_member) == (PodGroupKey(SOURCE_WORKLOAD, "ns-1", "job-1", "pg1"), 100)
    replica = definition_for_replica(job["pg1"], "r7")
    assert replica.key.replica_key == "r7"
    assert replica.key.group_name == "workload_job-1_pg1_r7"
    assert replica.min_member == 100


def test_a_gang_without_min_count_is_refused_as_the_api_server_does() -> None:
    with pytest.raises(GangSourceError) as refused:
        parse_native_pod_group({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {}}}})
    assert str(refused.value) == (
        "PodGroup default/g (scheduling.k8s.io): spec.schedulingPolicy.gang.minCount is missing; "
        "accepted: a positive integer, e.g. 8"
    )


def test_a_basic_pod_group_is_no_gang() -> None:
    definition = parse_native_pod_group({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"basic": {}}}})
    assert not definition.gang


# --- Volcano (authored after volcano.sh/apis scheduling/v1beta1 PodGroupSpec) --------------------------------


def _volcano(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": spec,
    }


def test_a_volcano_pod_group() -> None:
    definition = parse_volcano_pod_group(_volcano({"minMember": 8, "queue": "default"}))
    assert (definition.key.group_name, definition.min_member, definition.topology, definition.gang) == (
        "volcano_train",
        8,
        (),
        True,
    )


@pytest.mark.parametrize(
    ("network", "topology"),
    [
        ({"mode": "hard", "highestTierAllowed": 1}, (DomainConstraint("rack", required=True),)),
        ({"highestTierAllowed": 2}, (DomainConstraint("block", required=True),)),  # hard is the CRD's default
        ({"mode": "soft", "highestTierAllowed": 3}, (DomainConstraint("zone", required=False),)),
        ({"mode": "hard", "highestTierAllowed": 4}, ()),  # beyond the known tiers: crossing them is allowed
        ({"mode": "hard", "highestTierName": "nvlink"}, (DomainConstraint("nvlink", required=True),)),
        ({"mode": "soft"}, ()),
    ],
)
def test_volcano_network_topology_becomes_a_domain_constraint(
    network: dict[str, Any], topology: tuple[DomainConstraint, ...]
) -> None:
    assert parse_volcano_pod_group(_volcano({"minMember": 8, "networkTopology": network})).topology == topology


def test_volcano_tiers_are_configurable() -> None:
    obj = _volcano({"minMember": 2, "networkTopology": {"highestTierAllowed": 1}})
    assert parse_volcano_pod_group(obj, tiers=("nvlink",)).topology == (DomainConstraint("nvlink", required=True),)


def test_a_volcano_group_of_zero_members_is_no_gang() -> None:
    assert not parse_volcano_pod_group(_volcano({"minMember": 0})).gang


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minMember": -1}, "invalid spec.minMember -1; accepted: a positive integer"),
        ({"minMember": "8"}, "invalid spec.minMember '8'; accepted: a positive integer"),
        ({"minMember": 2, "networkTopology": {"mode": "strict"}}, "invalid spec.networkTopology.mode 'strict'"),
        (
            {"minMember": 2, "networkTopology": {"highestTierAllowed": 1, "highestTierName": "rack"}},
            "spec.networkTopology sets both highestTierAllowed and highestTierName",
        ),
    ],
)
def test_invalid_volcano_pod_groups_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(GangSourceError) as refused:
        parse_volcano_pod_group(_volcano(spec))
    assert str(refused.value).startswith(f"PodGroup ml/train (scheduling.volcano.sh): {message}")
