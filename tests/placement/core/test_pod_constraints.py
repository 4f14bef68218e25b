"""A pod's scheduling fields: read from Pod objects as kubectl shows them and from the ``Pod`` message alike
(refusals: ``test_pod_constraints_refusals``), the pod's overhead counted in its node-level requests only,
and what the constraint plugins read of a pod already placed."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest
from google.protobuf import json_format

from placement.api.codec import decode_pod
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import RESERVED_NODE_KEY
from placement.core.constraints.constraint_types import (
    HostPort,
    InclusionPolicy,
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    PodAffinity,
    PodAffinityTerm,
    PodConstraints,
    PreferredSchedulingTerm,
    Requirement,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    WhenUnsatisfiable,
)
from placement.core.kueue import KUEUE_MANAGED_KEY, KUEUE_PODSET_KEY
from placement.core.pods import (
    PendingPod,
    PodParseError,
    PodSpec,
    placed_pod,
    pod_spec_from_json,
    pod_spec_from_object,
    pod_usage,
    validate_pod,
)
from placement.core.vocabulary import demand_of
from placement.state.cluster_index import ClusterIndex
from tests import REPO
from tests.api_conformance import violations
from tests.machines.node_topologies import cpu_node

HASH = "7d9f8b6c5d"  # the ReplicaSet's pod-template-hash
NAME = "app.kubernetes.io/name"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
MIB = 2**20


def _web_pod() -> dict[str, Any]:
    """A pending pod of the Deployment ``shop/web`` as ``kubectl get pod -o json`` shows it: defaulted, its
    matchLabelKeys merged into the selectors and the default not-ready/unreachable tolerations added by the
    API server, gated, with a RuntimeClass overhead, a claim, an ephemeral volume, a sidecar."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{HASH}-x2k9p",
            "generateName": f"web-{HASH}-",
            "namespace": "shop",
            "uid": "5b0f3f0e-6f1a-4c1e-9c59-0c1f2e3d4a5b",
            "resourceVersion": "884213",
            "creationTimestamp": "2025-03-04T10:15:22Z",
            "labels": {NAME: "web", "pod-template-hash": HASH, "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-03-04T10:15:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{HASH}",
                    "uid": "0c9d8e7f-1a2b-4c3d-8e9f-a0b1c2d3e4f5",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "initContainers": [
                {
                    "name": "migrate",
                    "image": "registry.example.com/shop/migrate:1.8.2",
                    "ports": [{"containerPort": 5000, "hostPort": 5000, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "mesh-proxy",
                    "image": "registry.example.com/mesh/proxy:1.22",
                    "restartPolicy": "Always",
                    "ports": [{"containerPort": 15001, "hostPort": 15001, "protocol": "UDP", "hostIP": "10.0.0.1"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example.com/shop/web:1.8.2",
                    "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 9100, "hostPort": 9100, "protocol": "TCP"},
                    ],
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/web"},
                        {"name": "scratch", "mountPath": "/scratch"},
                        {
                            "name": "kube-api-access-7x2bq",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        },
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {
                "nodeAffinity": {
                    REQUIRED: {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node.kubernetes.io/instance-type",
                                        "operator": "In",
                                        "values": ["p5.48xlarge", "p4d.24xlarge"],
                                    },
                                    {"key": "example.com/gpu-memory-gib", "operator": "Gt", "values": ["40"]},
                                    {"key": "example.com/maintenance", "operator": "DoesNotExist"},
                                ]
                            },
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-7"]}]},
                        ]
                    },
                    PREFERRED: [
                        {
                            "weight": 80,
                            "preference": {
                                "matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["eu-west-1c"]}]
                            },
                        }
                    ],
                },
                "podAffinity": {
                    PREFERRED: [
                        {
                            "weight": 50,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {NAME: "cache"}},
                                "namespaces": ["shop", "shared"],
                                "topologyKey": ZONE,
                            },
                        }
                    ]
                },
                "podAntiAffinity": {
                    REQUIRED: [
                        {
                            "labelSelector": {
                                "matchExpressions": [
                                    {"key": NAME, "operator": "In", "values": ["web"]},
                                    {"key": "pod-template-hash", "operator": "In", "values": [HASH]},
                                ]
                            },
                            "topologyKey": HOST,
                            "matchLabelKeys": ["pod-template-hash"],
                        }
                    ],
                    PREFERRED: [
                        {
                            "weight": 10,
                            "podAffinityTerm": {
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": "tier", "operator": "Exists"},
                                        {"key": "tier", "operator": "NotIn", "values": ["frontend"]},
                                    ]
                                },
                                "namespaceSelector": {},
                                "topologyKey": ZONE,
                                "mismatchLabelKeys": ["tier"],
                            },
                        }
                    ],
                },
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "shop", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {
                        "matchLabels": {NAME: "web"},
                        "matchExpressions": [{"key": "pod-template-hash", "operator": "In", "values": [HASH]}],
                    },
                    "minDomains": 3,
                    "nodeAffinityPolicy": "Honor",
                    "nodeTaintsPolicy": "Honor",
                    "matchLabelKeys": ["pod-template-hash"],
                },
                {
                    "maxSkew": 2,
                    "topologyKey": HOST,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {NAME: "web"}},
                },
            ],
            "priority": 100000,
            "priorityClassName": "shop-critical",
            "preemptionPolicy": "PreemptLowerPriority",
            "runtimeClassName": "kata",
            "overhead": {"cpu": "250m", "memory": "160Mi"},
            "schedulingGates": [{"name": "example.com/quota-check"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}},
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "storageClassName": "local-nvme",
                                "resources": {"requests": {"storage": "10Gi"}},
                            }
                        }
                    },
                },
                {
                    "name": "kube-api-access-7x2bq",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "kubenexus",
            "enableServiceLinks": True,
        },
        "status": {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastTransitionTime": "2025-03-04T10:15:22Z",
                }
            ],
        },
    }


WEB_POD = _web_pod()

_HASH_IN = Requirement("pod-template-hash", Operator.IN, (HASH,))
WEB_CONSTRAINTS = PodConstraints(
    node_selector=(("kubernetes.io/os", "linux"),),
    node_affinity=NodeAffinity(
        required=(
            NodeSelectorTerm(
                match_expressions=(
                    Requirement("node.kubernetes.io/instance-type", Operator.IN, ("p5.48xlarge", "p4d.24xlarge")),
                    Requirement("example.com/gpu-memory-gib", Operator.GT, ("40",)),
                    Requirement("example.com/maintenance", Operator.DOES_NOT_EXIST),
                )
            ),
            NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, ("gpu-node-7",)),)),
        ),
        preferred=(
            PreferredSchedulingTerm(
                80, NodeSelectorTerm(match_expressions=(Requirement(ZONE, Operator.NOT_IN, ("eu-west-1c",)),))
            ),
        ),
    ),
    pod_affinity=PodAffinity(
        preferred=(
            WeightedPodAffinityTerm(
                50,
                PodAffinityTerm(
                    topology_key=ZONE,
                    label_selector=LabelSelector(match_labels=((NAME, "cache"),)),
                    namespaces=("shop", "shared"),
                ),
            ),
        )
    ),
    pod_anti_affinity=PodAffinity(
        required=(
            PodAffinityTerm(
                topology_key=HOST,
                label_selector=LabelSelector(match_expressions=(Requirement(NAME, Operator.IN, ("web",)), _HASH_IN)),
                match_label_keys=("pod-template-hash",),
            ),
        ),
        preferred=(
            WeightedPodAffinityTerm(
                10,
                PodAffinityTerm(
                    topology_key=ZONE,
                    label_selector=LabelSelector(
                        match_expressions=(
                            Requirement("tier", Operator.EXISTS),
                            Requirement("tier", Operator.NOT_IN, ("frontend",)),
                        )
                    ),
                    namespace_selector=LabelSelector(),
                    mismatch_label_keys=("tier",),
                ),
            ),
        ),
    ),
    tolerations=(
        Toleration("nvidia.com/gpu", TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE),
        Toleration("dedicated", TolerationOperator.EQUAL, "shop", TaintEffect.NO_SCHEDULE),
        Toleration("node.kubernetes.io/not-ready", TolerationOperator.EXISTS, "", TaintEffect.NO_EXECUTE, 300),
        Toleration("node.kubernetes.io/unreachable", TolerationOperator.EXISTS, "", TaintEffect.NO_EXECUTE, 300),
    ),
    topology_spread=(
        TopologySpreadConstraint(
            max_skew=1,
            topology_key=ZONE,
            when_unsatisfiable=WhenUnsatisfiable.DO_NOT_SCHEDULE,
            label_selector=LabelSelector(match_labels=((NAME, "web"),), match_expressions=(_HASH_IN,)),
            min_domains=3,
            node_affinity_policy=InclusionPolicy.HONOR,
            node_taints_policy=InclusionPolicy.HONOR,
            match_label_keys=("pod-template-hash",),
        ),
        TopologySpreadConstraint(
            max_skew=2,
            topology_key=HOST,
            when_unsatisfiable=WhenUnsatisfiable.SCHEDULE_ANYWAY,
            label_selector=LabelSelector(match_labels=((NAME, "web"),)),
        ),
    ),
    # The app container's and the sidecar's; not the init container's, which has finished when they run.
    host_ports=(HostPort(15001, "UDP", "10.0.0.1"), HostPort(9100, "TCP")),
    scheduling_gates=("example.com/quota-check",),
    priority=100000,
    priority_class_name="shop-critical",
    claims=("web-data", f"web-{HASH}-x2k9p-scratch"),
)


def _pending(pod: dict[str, Any]) -> PendingPod:
    return validate_pod(pod_spec_from_json(json.dumps(pod)))


def test_the_fixtures_are_pods_a_real_api_server_accepts() -> None:
    assert violations(WEB_POD, api_version="v1", kind="Pod") == []
    assert violations(_template_pod(), api_version="v1", kind="Pod") == []


def test_every_scheduling_field_of_a_deployments_pod_is_read() -> None:
    pending = _pending(WEB_POD)
    assert pending.constraints == WEB_CONSTRAINTS
    assert pending.priority == 100000
    assert (pending.namespace, pending.name) == ("shop", f"web-{HASH}-x2k9p")


def _template_pod() -> dict[str, Any]:
    """The Deployment's pod template as a client sends it before any API server saw it: the matchLabelKeys
    not merged into the selectors, no default tolerations, no protocol, no priority (a class name only)."""
    pod = _web_pod()
    spec = pod["spec"]
    del spec["priority"], spec["tolerations"][2:], spec["containers"][0]["ports"][1]["protocol"]
    term = spec["affinity"]["podAntiAffinity"][REQUIRED][0]
    term["labelSelector"]["matchExpressions"].pop()
    spec["topologySpreadConstraints"][0]["labelSelector"].pop("matchExpressions")
    return pod


def test_a_template_not_yet_merged_is_read_as_it_is() -> None:
    pending = _pending(_template_pod())
    anti = pending.constraints.pod_anti_affinity
    assert anti is not None
    assert anti.required[0].label_selector == LabelSelector(
        match_expressions=(Requirement(NAME, Operator.IN, ("web",)),)
    )
    assert anti.required[0].match_label_keys == ("pod-template-hash",)
    assert pending.constraints.topology_spread[0].label_selector == LabelSelector(match_labels=((NAME, "web"),))
    assert pending.constraints.host_ports[1] == HostPort(9100, "TCP")  # the protocol defaults to TCP
    assert len(pending.constraints.tolerations) == 2
    # Only a class name: resolved later by the service against the PriorityClass objects.
    assert (pending.constraints.priority, pending.constraints.priority_class_name) == (None, "shop-critical")
    assert pending.priority == 0


def _web_message() -> pb.Pod:
    """``WEB_POD`` as a ``Pod`` message."""

    def expression(key: str, operator: str, *values: str) -> pb.NodeSelectorRequirement:
        return pb.NodeSelectorRequirement(key=key, operator=operator, values=values)

    def selector_expression(key: str, operator: str, *values: str) -> pb.LabelSelectorRequirement:
        return pb.LabelSelectorRequirement(key=key, operator=operator, values=values)

    def resources(cpu: str, memory: str) -> dict[str, str]:
        return {"cpu": cpu, "memory": memory}

    return pb.Pod(
        namespace="shop",
        name=f"web-{HASH}-x2k9p",
        uid="5b0f3f0e-6f1a-4c1e-9c59-0c1f2e3d4a5b",
        labels={NAME: "web", "pod-template-hash": HASH, "tier": "frontend"},
        annotations={"kubectl.kubernetes.io/restartedAt": "2025-03-04T10:15:00Z"},
        init_containers=[
            pb.Container(
                name="migrate",
                requests=resources("1", "256Mi"),
                ports=[pb.ContainerPort(container_port=5000, host_port=5000, protocol="TCP")],
            ),
            pb.Container(
                name="mesh-proxy",
                requests=resources("100m", "64Mi"),
                restartable=True,
                ports=[pb.ContainerPort(container_port=15001, host_port=15001, protocol="UDP", host_ip="10.0.0.1")],
            ),
        ],
        containers=[
            pb.Container(
                name="web",
                requests=resources("500m", "512Mi"),
                limits={"memory": "1Gi"},
                ports=[
                    pb.ContainerPort(container_port=8080, protocol="TCP"),
                    pb.ContainerPort(container_port=9100, host_port=9100),
                ],
            )
        ],
        node_selector={"kubernetes.io/os": "linux"},
        affinity=pb.Affinity(
            node_affinity=pb.NodeAffinity(
                required_during_scheduling_ignored_during_execution=pb.NodeSelector(
                    node_selector_terms=[
                        pb.NodeSelectorTerm(
                            match_expressions=[
                                expression("node.kubernetes.io/instance-type", "In", "p5.48xlarge", "p4d.24xlarge"),
                                expression("example.com/gpu-memory-gib", "Gt", "40"),
                                expression("example.com/maintenance", "DoesNotExist"),
                            ]
                        ),
                        pb.NodeSelectorTerm(match_fields=[expression("metadata.name", "In", "gpu-node-7")]),
                    ]
                ),
                preferred_during_scheduling_ignored_during_execution=[
                    pb.PreferredSchedulingTerm(
                        weight=80,
                        preference=pb.NodeSelectorTerm(match_expressions=[expression(ZONE, "NotIn", "eu-west-1c")]),
                    )
                ],
            ),
            pod_affinity=pb.PodAffinity(
                preferred_during_scheduling_ignored_during_execution=[
                    pb.WeightedPodAffinityTerm(
                        weight=50,
                        pod_affinity_term=pb.PodAffinityTerm(
                            label_selector=pb.LabelSelector(match_labels={NAME: "cache"}),
                            namespaces=["shop", "shared"],
                            topology_key=ZONE,
                        ),
                    )
                ]
            ),
            pod_anti_affinity=pb.PodAntiAffinity(
                required_during_scheduling_ignored_during_execution=[
                    pb.PodAffinityTerm(
                        label_selector=pb.LabelSelector(
                            match_expressions=[
                                selector_expression(NAME, "In", "web"),
                                selector_expression("pod-template-hash", "In", HASH),
                            ]
                        ),
                        topology_key=HOST,
                        match_label_keys=["pod-template-hash"],
                    )
                ],
                preferred_during_scheduling_ignored_during_execution=[
                    pb.WeightedPodAffinityTerm(
                        weight=10,
                        pod_affinity_term=pb.PodAffinityTerm(
                            label_selector=pb.LabelSelector(
                                match_expressions=[
                                    selector_expression("tier", "Exists"),
                                    selector_expression("tier", "NotIn", "frontend"),
                                ]
                            ),
                            namespace_selector=pb.LabelSelector(),
                            topology_key=ZONE,
                            mismatch_label_keys=["tier"],
                        ),
                    )
                ],
            ),
        ),
        tolerations=[
            pb.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            pb.Toleration(key="dedicated", value="shop", effect="NoSchedule"),
            pb.Toleration(
                key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute", toleration_seconds=300
            ),
            pb.Toleration(
                key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute", toleration_seconds=300
            ),
        ],
        topology_spread_constraints=[
            pb.TopologySpreadConstraint(
                max_skew=1,
                topology_key=ZONE,
                when_unsatisfiable="DoNotSchedule",
                label_selector=pb.LabelSelector(
                    match_labels={NAME: "web"}, match_expressions=[selector_expression("pod-template-hash", "In", HASH)]
                ),
                min_domains=3,
                node_affinity_policy="Honor",
                node_taints_policy="Honor",
                match_label_keys=["pod-template-hash"],
            ),
            pb.TopologySpreadConstraint(
                max_skew=2,
                topology_key=HOST,
                when_unsatisfiable="ScheduleAnyway",
                label_selector=pb.LabelSelector(match_labels={NAME: "web"}),
            ),
        ],
        priority=100000,
        priority_class_name="shop-critical",
        scheduling_gates=[pb.PodSchedulingGate(name="example.com/quota-check")],
        overhead={"cpu": "250m", "memory": "160Mi"},
        persistent_volume_claims=["web-data", f"web-{HASH}-x2k9p-scratch"],
    )


def _from_message(message: pb.Pod) -> PendingPod:
    return validate_pod(decode_pod(pb.FilterRequest(pod=pb.Pod.FromString(message.SerializeToString()))))


def test_a_pod_sent_as_a_message_is_the_pod_sent_as_json() -> None:
    from_message, from_json = _from_message(_web_message()), _pending(WEB_POD)
    # The Pod message carries no ownerReferences: the workload policies read the controller from pod_json.
    assert from_json.controller == ("ReplicaSet", f"web-{HASH}")
    assert from_message == dataclasses.replace(from_json, controller=("", ""))
    assert from_message.constraints == WEB_CONSTRAINTS


def test_the_pod_message_documented_in_the_api_docs_is_valid() -> None:
    docs = (REPO / "docs" / "api.md").read_text()
    block = docs.split("A pod of a Deployment as a `Pod` message", 1)[1].split("```")[1]
    pending = _from_message(json_format.Parse(block, pb.Pod()))
    constraints = pending.constraints
    assert constraints.node_affinity is not None
    assert constraints.pod_affinity is not None
    assert constraints.pod_anti_affinity is not None
    assert (constraints.priority, constraints.host_ports, constraints.claims[1]) == (
        100000,
        (HostPort(9100),),
        "web-7d9f8b6c5d-x2k9p-scratch",
    )
    assert constraints.tolerations[1].toleration_seconds == 300
    assert dict(demand_of(pending.pod).node_requests) == {"cpu": 750, "memory": 672 * MIB}


def test_the_message_tells_unset_from_zero() -> None:
    message = pb.Pod(name="p", containers=[pb.Container(name="c")])
    unset = _from_message(message)
    assert (unset.constraints.priority, unset.priority) == (None, 0)
    message.priority = 0
    assert _from_message(message).constraints.priority == 0
    # An empty namespace selector (every namespace) is not an absent one (the pod's own namespace).
    term = pb.PodAffinityTerm(label_selector=pb.LabelSelector(), topology_key=ZONE)
    message.affinity.pod_affinity.required_during_scheduling_ignored_during_execution.append(term)
    pod_affinity = _from_message(message).constraints.pod_affinity
    assert pod_affinity is not None
    assert pod_affinity.required[0].namespace_selector is None
    assert pod_affinity.required[0].label_selector == LabelSelector()
    term.namespace_selector.SetInParent()
    message.affinity.pod_affinity.required_during_scheduling_ignored_during_execution[0].CopyFrom(term)
    pod_affinity = _from_message(message).constraints.pod_affinity
    assert pod_affinity is not None
    assert pod_affinity.required[0].namespace_selector == LabelSelector()


def test_a_pod_without_scheduling_fields_constrains_nothing() -> None:
    pending = _pending({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "affinity": {}}})
    assert pending.constraints == PodConstraints()
    assert _from_message(pb.Pod(name="p", containers=[pb.Container(name="c")])).constraints == PodConstraints()


def test_claims_of_persistent_and_ephemeral_volumes() -> None:
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c"}],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
                {"name": "again", "persistentVolumeClaim": {"claimName": "datasets"}},
                {"name": "cache", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }
    assert _pending(pod).constraints.claims == ("datasets", "train-0-cache")


def test_with_host_network_every_container_port_is_a_host_port() -> None:
    pod = {
        "metadata": {"name": "exporter"},
        "spec": {
            "hostNetwork": True,
            "containers": [
                {"name": "c", "ports": [{"containerPort": 9100}, {"containerPort": 9101, "hostPort": 9101}]}
            ],
        },
    }
    assert _pending(pod).constraints.host_ports == (HostPort(9100), HostPort(9101))
    message = pb.Pod(
        name="exporter",
        host_network=True,
        containers=[
            pb.Container(name="c", ports=[pb.ContainerPort(container_port=9100), pb.ContainerPort(container_port=9101)])
        ],
    )
    assert _from_message(message) == _pending(pod)


# --- overhead ------------------------------------------------------------------------------------------


def _guaranteed_with_overhead(**overhead: str) -> dict[str, Any]:
    resources = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    return {
        "metadata": {"name": "kata-train", "namespace": "ml"},
        "spec": {
            "runtimeClassName": "kata",
            "overhead": overhead,
            "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
        },
    }


def test_overhead_counts_at_node_level_but_not_in_the_containers() -> None:
    plain = demand_of(_pending(_guaranteed_with_overhead()).pod)
    pending = _pending(_guaranteed_with_overhead(cpu="250m", memory="160Mi", **{"ephemeral-storage": "1Gi"}))
    demand = demand_of(pending.pod)
    # kube-scheduler's and the kubelet's PodRequests: the containers' requests plus the overhead.
    assert dict(demand.node_requests) == {"cpu": 4250, "memory": 8 * 2**30 + 160 * MIB, "nvidia.com/gpu": 1}
    # The resource managers work on containers: exclusive CPUs, pinned memory and devices leave it out.
    assert pending.pod.containers[0].cpu_millis == 4000
    assert (demand.exclusive_cpus, demand.memory_requests, demand.device_requests) == (
        plain.exclusive_cpus,
        plain.memory_requests,
        plain.device_requests,
    )
    assert demand.guaranteed
    # An overhead in a resource no container asks for is a node-level request of its own.
    only_overhead = _pending(
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "overhead": {"memory": "64Mi"}}}
    )
    assert demand_of(only_overhead.pod).node_requests == (("memory", 64.0 * MIB),)


def test_a_bound_pods_overhead_is_charged_to_its_node() -> None:
    bound = _guaranteed_with_overhead(cpu="250m", memory="160Mi")
    bound["spec"] = {**bound["spec"], "nodeName": "cpu-a"}
    bound["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "1Gi"}}
    usage = pod_usage(bound)
    assert usage is not None
    assert dict(usage.demand.node_requests) == {"cpu": 2250, "memory": 2**30 + 160 * MIB}
    index = ClusterIndex()
    index.upsert_topology("cpu-a", cpu_node())
    slot = index.slot_of("cpu-a")
    assert slot is not None
    before = index.node_amounts(slot)
    index.upsert_pod(usage)
    after = index.node_amounts(slot)
    assert before["cpu"].free - after["cpu"].free == pytest.approx(2.25)
    assert before["memory"].free - after["memory"].free == 2**30 + 160 * MIB


# --- pods already placed -------------------------------------------------------------------------------


def _bound(pod: dict[str, Any], node: str) -> dict[str, Any]:
    placed = copy.deepcopy(pod)
    del placed["spec"]["schedulingGates"]
    placed["spec"]["nodeName"] = node
    placed["status"] = {"phase": "Running"}
    return placed


def test_a_bound_pod_is_what_the_inter_pod_plugins_read() -> None:
    placed = placed_pod(_bound(WEB_POD, "gpu-node-7"))
    assert placed == PlacedPod(
        namespace="shop",
        name=f"web-{HASH}-x2k9p",
        node="gpu-node-7",
        labels=((NAME, "web"), ("pod-template-hash", HASH), ("tier", "frontend")),
        host_ports=WEB_CONSTRAINTS.host_ports,
        pod_affinity=WEB_CONSTRAINTS.pod_affinity,
        pod_anti_affinity=WEB_CONSTRAINTS.pod_anti_affinity,
        workload="Deployment/web",  # its ReplicaSet web-<pod-template-hash> is the Deployment's
        priority=100000,  # spec.priority: what preemption compares
        uid="5b0f3f0e-6f1a-4c1e-9c59-0c1f2e3d4a5b",  # how kube-scheduler's extender preemption names a victim
    )


def test_a_pod_the_binder_reserved_is_placed_on_its_reserved_node() -> None:
    reserved = copy.deepcopy(WEB_POD)
    reserved["metadata"]["annotations"][RESERVED_NODE_KEY] = "gpu-node-3"
    placed = placed_pod(reserved)
    assert placed is not None
    assert placed.node == "gpu-node-3"
    # Once bound, the binding wins over a stale annotation.
    bound = _bound(reserved, "gpu-node-7")
    assert placed_pod(bound) == dataclasses.replace(placed, node="gpu-node-7")


@pytest.mark.parametrize(
    ("labels", "admitted"),
    [
        ({KUEUE_MANAGED_KEY: "true"}, True),  # Kueue's pod integration (its pod webhook sets it)
        ({KUEUE_PODSET_KEY: "main"}, True),  # a job-framework workload's pod, admitted (the job started)
        ({"kueue.x-k8s.io/queue-name": "lq"}, False),  # a queue named, but neither mark Kueue sets
        ({}, False),
    ],
    ids=["managed", "podset", "queue-name-only", "none"],
)
def test_a_placed_pod_says_whether_kueue_admitted_it(labels: dict[str, str], admitted: bool) -> None:
    bound = _bound(WEB_POD, "gpu-node-7")
    bound["metadata"]["labels"] |= labels
    placed = placed_pod(bound)
    assert placed is not None
    assert placed.kueue_admitted is admitted


def test_pods_not_on_a_node_are_not_placed() -> None:
    assert placed_pod(WEB_POD) is None  # pending, no reservation
    finished = _bound(WEB_POD, "gpu-node-7")
    for phase in ("Succeeded", "Failed"):
        finished["status"]["phase"] = phase
        assert placed_pod(finished) is None


def test_a_watched_pod_with_an_invalid_term_is_refused_naming_it() -> None:
    broken = _bound(WEB_POD, "gpu-node-7")
    broken["spec"]["affinity"]["podAntiAffinity"][REQUIRED][0]["topologyKey"] = ""
    with pytest.raises(PodParseError) as caught:
        placed_pod(broken)
    assert str(caught.value) == (
        f"pod shop/web-{HASH}-x2k9p: spec.affinity.podAntiAffinity.{REQUIRED}[0].topologyKey: can not be empty"
    )


def test_pod_spec_carries_the_fields_as_the_api_carries_them() -> None:
    spec = pod_spec_from_object(WEB_POD)
    assert isinstance(spec, PodSpec)
    assert spec.affinity == WEB_POD["spec"]["affinity"]
    assert spec.containers[0].ports == WEB_POD["spec"]["containers"][0]["ports"]
    assert (spec.priority, spec.priority_class_name, spec.scheduling_gates) == (
        100000,
        "shop-critical",
        ("example.com/quota-check",),
    )
    assert spec.overhead == {"cpu": "250m", "memory": "160Mi"}
    assert spec.claims == ("web-data", f"web-{HASH}-x2k9p-scratch")
