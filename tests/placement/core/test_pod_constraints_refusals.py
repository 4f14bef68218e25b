"""Pods' scheduling fields the API server would refuse are refused the same way, from ``pod_json`` and from the
``Pod`` message alike: every refusal names the pod and the field's path (``placement.core.pod_constraints``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from placement.api.codec import decode_pod
from placement.api.v1 import placement_pb2 as pb
from placement.core.pods import PendingPod, PodParseError, pod_spec_from_json, pod_spec_from_object, validate_pod

ZONE = "topology.kubernetes.io/zone"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _pending(pod: dict[str, Any]) -> PendingPod:
    return validate_pod(pod_spec_from_json(json.dumps(pod)))


def _from_message(message: pb.Pod) -> PendingPod:
    return validate_pod(decode_pod(pb.FilterRequest(pod=message)))


def _refusal(pod: dict[str, Any]) -> str:
    with pytest.raises(PodParseError) as caught:
        _pending(pod)
    return str(caught.value)


def _pod_with(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "web", "tier": "frontend"}},
        "spec": {"containers": [{"name": "c"}], **spec},
    }


def _required_node_term(*expressions: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    term = {"matchExpressions": list(expressions), "matchFields": list(fields)}
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}


def _pod_term(kind: str = "podAffinity", **term: Any) -> dict[str, Any]:
    return {kind: {REQUIRED: [{"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": ZONE, **term}]}}


def _spread(**constraint: Any) -> list[dict[str, Any]]:
    base = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
    return [{**base, "labelSelector": {"matchLabels": {"app": "web"}}, **constraint}]


ZONE_IN = {"key": ZONE, "operator": "In", "values": ["a"]}
NODE = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
TERM = f"{NODE}[0]"
POD_TERM = f"spec.affinity.podAffinity.{REQUIRED}[0]"
KEY_FORMAT = (
    "an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9-_.] beginning and ending alphanumeric"
)
VALUE_FORMAT = "at most 63 characters [A-Za-z0-9-_.], beginning and ending alphanumeric"
NAME_FORMAT = "at most 253 characters [a-z0-9-.], lowercase RFC 1123"

REFUSALS = [
    # node affinity
    (
        _pod_with(affinity={"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}),
        f"{NODE}: must have at least one node selector term",
    ),
    (
        _pod_with(affinity=_required_node_term(ZONE_IN, {"key": ZONE, "operator": "Equals", "values": ["a"]})),
        f"{TERM}.matchExpressions[1].operator: unsupported value 'Equals'; "
        "accepted: In, NotIn, Exists, DoesNotExist, Gt, Lt",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": ZONE, "operator": "In"})),
        f"{TERM}.matchExpressions[0].values: must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": ZONE, "operator": "Exists", "values": ["a"]})),
        f"{TERM}.matchExpressions[0].values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": "gpus", "operator": "Gt", "values": ["1", "2"]})),
        f"{TERM}.matchExpressions[0].values: must be one value when `operator` is 'Gt' or 'Lt'",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": "memory", "operator": "Lt", "values": ["4Gi"]})),
        f"{TERM}.matchExpressions[0].values[0]: '4Gi' is not an integer, which 'Gt' and 'Lt' compare",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": "-zone", "operator": "Exists"})),
        f"{TERM}.matchExpressions[0].key: '-zone' is not a valid label key: {KEY_FORMAT}",
    ),
    (
        _pod_with(affinity=_required_node_term({"key": ZONE, "operator": "In", "values": ["eu west"]})),
        f"{TERM}.matchExpressions[0].values[0]: 'eu west' is not a valid label value: {VALUE_FORMAT}",
    ),
    (
        _pod_with(
            affinity=_required_node_term(fields=({"key": "metadata.labels", "operator": "In", "values": ["a"]},))
        ),
        f"{TERM}.matchFields[0].key: 'metadata.labels' is not a valid field selector key; accepted: metadata.name",
    ),
    (
        _pod_with(affinity=_required_node_term(fields=({"key": "metadata.name", "operator": "Exists"},))),
        f"{TERM}.matchFields[0].operator: unsupported value 'Exists'; accepted: In, NotIn",
    ),
    (
        _pod_with(
            affinity=_required_node_term(fields=({"key": "metadata.name", "operator": "In", "values": ["a", "b"]},))
        ),
        f"{TERM}.matchFields[0].values: "
        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
    ),
    (
        _pod_with(
            affinity=_required_node_term(fields=({"key": "metadata.name", "operator": "NotIn", "values": ["Node_1"]},))
        ),
        f"{TERM}.matchFields[0].values[0]: 'Node_1' is not a valid name: {NAME_FORMAT}",
    ),
    (
        _pod_with(
            affinity={"nodeAffinity": {PREFERRED: [{"weight": 0, "preference": {"matchExpressions": [ZONE_IN]}}]}}
        ),
        f"spec.affinity.nodeAffinity.{PREFERRED}[0].weight: must be in the range 1-100, got 0",
    ),
    (
        _pod_with(affinity={"nodeAffinity": {PREFERRED: [{"weight": 101, "preference": {}}]}}),
        f"spec.affinity.nodeAffinity.{PREFERRED}[0].weight: must be in the range 1-100, got 101",
    ),
    (
        _pod_with(affinity={"nodeAffinity": {PREFERRED: [{"weight": "50", "preference": {}}]}}),
        f"spec.affinity.nodeAffinity.{PREFERRED}[0].weight: must be an integer, got '50'",
    ),
    # pod affinity and anti-affinity
    (
        _pod_with(
            affinity=_pod_term(labelSelector={"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["1"]}]})
        ),
        f"{POD_TERM}.labelSelector.matchExpressions[0].operator: unsupported value 'Gt'; "
        "accepted: In, NotIn, Exists, DoesNotExist",
    ),
    (
        _pod_with(affinity=_pod_term(labelSelector={"matchLabels": {"app": "web app"}})),
        f"{POD_TERM}.labelSelector.matchLabels['app']: 'web app' is not a valid label value: {VALUE_FORMAT}",
    ),
    (
        _pod_with(affinity=_pod_term(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In"}]})),
        f"{POD_TERM}.namespaceSelector.matchExpressions[0].values: "
        "must be specified when `operator` is 'In' or 'NotIn'",
    ),
    (_pod_with(affinity=_pod_term(topologyKey="")), f"{POD_TERM}.topologyKey: can not be empty"),
    (
        _pod_with(affinity=_pod_term(namespaces=["Shop"])),
        f"{POD_TERM}.namespaces[0]: 'Shop' is not a valid namespace name: at most 63 characters [a-z0-9-], RFC 1123",
    ),
    (
        _pod_with(affinity=_pod_term(labelSelector=None, matchLabelKeys=["tier"])),
        f"{POD_TERM}.matchLabelKeys: must not be specified when labelSelector is not set",
    ),
    (
        _pod_with(affinity=_pod_term(matchLabelKeys=["tier"], mismatchLabelKeys=["tier"])),
        f"{POD_TERM}.matchLabelKeys[0]: exists in both matchLabelKeys and mismatchLabelKeys",
    ),
    (
        # The API server merges `app In (web)` into the selector, which then names `app` twice.
        _pod_with(affinity=_pod_term(matchLabelKeys=["app"])),
        f"{POD_TERM}.matchLabelKeys[0]: exists in both matchLabelKeys and labelSelector",
    ),
    (
        _pod_with(affinity={"podAntiAffinity": {PREFERRED: [{"weight": 10, "podAffinityTerm": {"topologyKey": ""}}]}}),
        f"spec.affinity.podAntiAffinity.{PREFERRED}[0].podAffinityTerm.topologyKey: can not be empty",
    ),
    (_pod_with(affinity="none"), "spec.affinity: must be a JSON object"),
    # tolerations
    (
        _pod_with(tolerations=[{"operator": "Equal", "value": "x"}]),
        'spec.tolerations[0].operator: must be Exists when `key` is empty, which means "match all values and all keys"',
    ),
    (
        _pod_with(tolerations=[{"key": "gpu", "operator": "Exists", "value": "yes"}]),
        "spec.tolerations[0].value: must be empty when `operator` is 'Exists'",
    ),
    (
        _pod_with(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}]),
        "spec.tolerations[0].effect: must be 'NoExecute' when `tolerationSeconds` is set",
    ),
    (
        _pod_with(tolerations=[{"key": "gpu", "operator": "In", "value": "a"}]),
        "spec.tolerations[0].operator: unsupported value 'In'; accepted: Equal, Exists",
    ),
    (
        _pod_with(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoScheduleNow"}]),
        "spec.tolerations[0].effect: unsupported value 'NoScheduleNow'; "
        "accepted: NoSchedule, PreferNoSchedule, NoExecute",
    ),
    (
        _pod_with(tolerations=[{"key": "dedicated", "value": "team a"}]),
        f"spec.tolerations[0].value: 'team a' is not a valid label value: {VALUE_FORMAT}",
    ),
    (
        _pod_with(tolerations=[{"key": "a/b/c", "operator": "Exists"}]),
        f"spec.tolerations[0].key: 'a/b/c' is not a valid label key: {KEY_FORMAT}",
    ),
    (_pod_with(tolerations={"key": "gpu"}), "spec.tolerations: must be a list"),
    # topology spread constraints
    (
        _pod_with(topologySpreadConstraints=_spread(maxSkew=0)),
        "spec.topologySpreadConstraints[0].maxSkew: must be greater than zero",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(topologyKey="")),
        "spec.topologySpreadConstraints[0].topologyKey: can not be empty",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(whenUnsatisfiable="Never")),
        "spec.topologySpreadConstraints[0].whenUnsatisfiable: unsupported value 'Never'; "
        "accepted: DoNotSchedule, ScheduleAnyway",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread() * 2),
        "spec.topologySpreadConstraints[0].{topologyKey, whenUnsatisfiable}: "
        "duplicate value {topology.kubernetes.io/zone, DoNotSchedule}",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(minDomains=0)),
        "spec.topologySpreadConstraints[0].minDomains: must be greater than zero",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(whenUnsatisfiable="ScheduleAnyway", minDomains=2)),
        "spec.topologySpreadConstraints[0].minDomains: "
        "can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(nodeTaintsPolicy="Always")),
        "spec.topologySpreadConstraints[0].nodeTaintsPolicy: unsupported value 'Always'; accepted: Honor, Ignore",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(labelSelector=None, matchLabelKeys=["pod-template-hash"])),
        "spec.topologySpreadConstraints[0].matchLabelKeys: must not be specified when labelSelector is not set",
    ),
    (
        _pod_with(topologySpreadConstraints=_spread(matchLabelKeys=["app"])),
        "spec.topologySpreadConstraints[0].matchLabelKeys[0]: exists in both matchLabelKeys and labelSelector",
    ),
    # host ports
    (
        _pod_with(containers=[{"name": "c", "ports": [{"hostPort": 80}]}]),
        "spec.containers[0].ports[0].containerPort: is required",
    ),
    (
        _pod_with(containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 70000}]}]),
        "spec.containers[0].ports[0].hostPort: must be between 0 and 65535, inclusive, got 70000",
    ),
    (
        _pod_with(containers=[{"name": "c", "ports": [{"containerPort": 80, "protocol": "HTTP"}]}]),
        "spec.containers[0].ports[0].protocol: unsupported value 'HTTP'; accepted: TCP, UDP, SCTP",
    ),
    (
        _pod_with(
            containers=[
                {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                {"name": "b", "ports": [{"containerPort": 81, "hostPort": 8080, "protocol": "TCP"}]},
            ]
        ),
        "spec.containers[1].ports[0].hostPort: duplicate value 'TCP//8080'",
    ),
    (
        _pod_with(hostNetwork=True, containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]),
        "spec.containers[0].ports[0].hostPort: must match `containerPort` when `hostNetwork` is true",
    ),
    # names, gates, the rest
    (_pod_with(nodeName="Node_1"), f"spec.nodeName: 'Node_1' is not a valid name: {NAME_FORMAT}"),
    (
        _pod_with(nodeSelector={"gpu type": "h100"}),
        f"spec.nodeSelector: 'gpu type' is not a valid label key: {KEY_FORMAT}",
    ),
    (
        _pod_with(priorityClassName="High Priority"),
        f"spec.priorityClassName: 'High Priority' is not a valid name: {NAME_FORMAT}",
    ),
    (
        _pod_with(schedulingGates=[{"name": "example.com/quota"}, {"name": "example.com/quota"}]),
        "spec.schedulingGates[1].name: duplicate value 'example.com/quota'",
    ),
    (
        _pod_with(schedulingGates=[{"name": "wait for quota"}]),
        f"spec.schedulingGates[0].name: 'wait for quota' is not a valid scheduling gate name: {KEY_FORMAT}",
    ),
    (
        _pod_with(nodeName="n1", schedulingGates=[{"name": "example.com/quota"}]),
        "spec.nodeName: cannot be set until all schedulingGates have been cleared",
    ),
    (
        _pod_with(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": ""}}]),
        f"spec.volumes: '' is not a valid name: {NAME_FORMAT}",
    ),
    (_pod_with(overhead={"cpu": "-250m"}), "spec.overhead.cpu must not be negative, got '-250m'"),
    (_pod_with(overhead={"nvidia.com/gpu": "0.5"}), "spec.overhead.nvidia.com/gpu must be a whole number, got '0.5'"),
]


@pytest.mark.parametrize(("pod", "message"), REFUSALS)
def test_invalid_fields_are_refused_naming_the_pod_and_the_field(pod: dict[str, Any], message: str) -> None:
    assert _refusal(pod) == f"pod ml/p: {message}"


def test_invalid_pod_labels_are_refused() -> None:
    pod = _pod_with()
    pod["metadata"]["labels"] = {"app": "web/frontend"}
    assert (
        _refusal(pod) == f"pod ml/p: metadata.labels['app']: 'web/frontend' is not a valid label value: {VALUE_FORMAT}"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"priority": "high"}, "spec.priority: must be an integer, got 'high'"),
        ({"priority": 2**31}, "spec.priority: must be between -2147483648 and 2147483647, inclusive, got 2147483648"),
        ({"hostNetwork": "yes"}, "spec.hostNetwork must be true or false"),
        ({"schedulingGates": ["quota"]}, "spec.schedulingGates[0] must be a JSON object"),
        (
            {"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": 7}}]},
            "spec.volumes[0].persistentVolumeClaim.claimName must be a string",
        ),
        ({"overhead": {"cpu": True}}, "spec.overhead['cpu'] must be a Kubernetes quantity string"),
    ],
)
def test_malformed_pod_json_is_refused_where_it_is_read(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PodParseError) as caught:
        pod_spec_from_object(_pod_with(**spec))
    assert str(caught.value) == message


def test_the_message_is_refused_on_the_same_path() -> None:
    message = pb.Pod(namespace="ml", name="p", containers=[pb.Container(name="c")])
    term = message.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms.add()
    term.match_expressions.add(key=ZONE, operator="In", values=["a"])
    term.match_expressions.add(key=ZONE, operator="Equals", values=["a"])
    with pytest.raises(PodParseError) as caught:
        _from_message(message)
    assert str(caught.value) == (
        f"pod ml/p: {TERM}.matchExpressions[1].operator: unsupported value 'Equals'; "
        "accepted: In, NotIn, Exists, DoesNotExist, Gt, Lt"
    )
    empty = pb.Pod(namespace="ml", name="p", containers=[pb.Container(name="c")])
    empty.affinity.node_affinity.required_during_scheduling_ignored_during_execution.SetInParent()
    with pytest.raises(PodParseError, match=r"nodeSelectorTerms: must have at least one node selector term"):
        _from_message(empty)


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def test_pod_json_nesting_is_bounded_however_many_brackets_the_text_holds() -> None:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"name": "c"}]}}
    # The root object, "status" and the lists: 64 levels deep is the limit.
    assert pod_spec_from_json(json.dumps({**pod, "status": {"x": _nested(62)}})).name == "p"
    with pytest.raises(PodParseError, match="pod_json nests 65 levels deep, more than the 64"):
        pod_spec_from_json(json.dumps({**pod, "status": {"x": _nested(63)}}))
    # More brackets than the limit, but shallow, or inside strings: counted exactly, and accepted.
    assert pod_spec_from_json(json.dumps({**pod, "status": {"conditions": [{} for _ in range(100)]}})).name == "p"
    quoted = {**pod, "metadata": {**pod["metadata"], "annotations": {"a": "[" * 100 + "{" * 100}}}
    assert pod_spec_from_json(json.dumps(quoted)).annotations["a"].startswith("[[")
