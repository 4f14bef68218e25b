"""deploy/'s ValidatingAdmissionPolicies, evaluated: every CEL expression of both policies (match
conditions, variables, validations, message expressions) run by cel-python on requests each policy must
admit and requests it must refuse.

``Policy`` implements the admission semantics these policies rely on (Kubernetes' validating admission
policy plugin): the request must match ``matchConstraints`` (group, version, resource without
subresource, operation) and every ``matchCondition``; the ``variables`` are evaluated in order, an error
kept as the variable's value so that it surfaces only where it is used (Kubernetes evaluates them
lazily); every validation must be true, a false one denies with its ``messageExpression`` (else its
``message``). An evaluation error fails the test: with ``failurePolicy: Fail`` it would deny, but here it
means a broken expression or a request no API server sends.

cel-python lacks one Kubernetes CEL extension the message expressions use, ``<list<string>>.join``
(cel-go's strings library, enabled in Kubernetes); ``_join`` provides it with the same semantics.
Requests carry the JSON types the API server's schemas give them: cel-python, unlike cel-go, raises on
comparing values of different types instead of answering false.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import celpy
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from kubenexus.topology.labels import OWNED_PREFIXES
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    LEADER_LABEL,
    POLICY_KEY,
    RESERVED_NODE_KEY,
)
from tests import REPO

Json = dict[str, Any]

DEPLOY = REPO / "deploy"
AGENT_POLICY = "kubenexus-agent-own-node-only"
PLACEMENT_POLICY = "kubenexus-placement-pod-patches"

AGENT = "system:serviceaccount:kubenexus-agent:kubenexus-agent"
PLACEMENT = "system:serviceaccount:kubenexus-system:kubenexus-placement"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
OWNED_LABEL = f"{OWNED_PREFIXES[0]}node-count"
OWNED_ANNOTATION = f"{OWNED_PREFIXES[-1]}model"


def _policies() -> dict[str, Json]:
    found: dict[str, Json] = {}
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if DEPLOY / "helm" in path.parents:  # templates; tests/deploy/test_helm_chart.py renders them equal to these
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "ValidatingAdmissionPolicy":
                found[doc["metadata"]["name"]] = doc["spec"]
    return found


def _join(items: celtypes.ListType, separator: celtypes.StringType | None = None) -> celtypes.StringType:
    """cel-go's ``<list<string>>.join(<string>)`` (and ``.join()``, no separator)."""
    if not all(isinstance(item, str) for item in items):
        raise TypeError("join needs a list of strings")
    return celtypes.StringType(("" if separator is None else str(separator)).join(str(item) for item in items))


@dataclass(frozen=True)
class Decision:
    matched: bool
    denials: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.denials


class Policy:
    """One ValidatingAdmissionPolicy's spec, every expression compiled once."""

    _environment = celpy.Environment()

    def __init__(self, spec: Json) -> None:
        self.spec = spec
        self.conditions = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [
            (
                self._compile(v["expression"]),
                self._compile(v["messageExpression"]) if "messageExpression" in v else None,
                v.get("message", f"failed expression: {v['expression']}"),
            )
            for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> celpy.Runner:
        functions = cast(Any, {"join": _join})
        return self._environment.program(self._environment.compile(expression), functions=functions)

    def admit(self, request: Json, obj: Json, old: Json | None) -> Decision:
        if not self._matches_rules(request):
            return Decision(matched=False)
        activation: dict[str, Any] = {
            "request": json_to_cel(request),
            "object": json_to_cel(obj),
            "oldObject": None if old is None else json_to_cel(old),
        }
        if not all(_evaluate(condition, activation) for condition in self.conditions):
            return Decision(matched=False)
        variables: dict[celtypes.StringType, Any] = {}
        activation["variables"] = celtypes.MapType(variables)
        for name, program in self.variables:
            try:
                variables[celtypes.StringType(name)] = program.evaluate(activation)
            except CELEvalError as error:
                variables[celtypes.StringType(name)] = error
            activation["variables"] = celtypes.MapType(variables)
        denials = []
        for check, message_expression, message in self.validations:
            if not _evaluate(check, activation):
                denials.append(str(_evaluate(message_expression, activation)) if message_expression else message)
        return Decision(matched=True, denials=tuple(" ".join(d.split()) for d in denials))

    def _matches_rules(self, request: Json) -> bool:
        resource = request["resource"]
        for rule in self.spec["matchConstraints"]["resourceRules"]:
            if (
                _wild(rule["apiGroups"], resource["group"])
                and _wild(rule["apiVersions"], resource["version"])
                and _wild(rule["operations"], request["operation"])
                # "pods" matches the pods resource only; a subresource is "pods/binding".
                and any(r in ("*", _path(request)) for r in rule["resources"])
            ):
                return True
        return False


def _wild(allowed: list[str], value: str) -> bool:
    return "*" in allowed or value in allowed


def _path(request: Json) -> str:
    sub = request.get("subResource", "")
    return f"{request['resource']['resource']}/{sub}" if sub else str(request["resource"]["resource"])


def _evaluate(program: celpy.Runner, activation: Mapping[str, Any]) -> Any:
    try:
        return program.evaluate(dict(activation))
    except CELEvalError as error:
        pytest.fail(f"a CEL expression failed to evaluate: {error}")


def _request(
    user: str,
    obj: Json,
    *,
    operation: str = "UPDATE",
    resource: tuple[str, str, str] = ("", "v1", "nodes"),
    sub_resource: str = "",
    extra: Mapping[str, list[str]] | None = None,
) -> Json:
    group, version, plural = resource
    user_info: Json = {"username": user, "uid": "0b9f", "groups": ["system:serviceaccounts", "system:authenticated"]}
    if extra is not None:
        user_info["extra"] = dict(extra)
    request: Json = {
        "uid": "7d3a",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": obj["kind"]},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": obj["metadata"]["name"],
        "operation": operation,
        "userInfo": user_info,
        "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    if "namespace" in obj["metadata"]:
        request["namespace"] = obj["metadata"]["namespace"]
    return request


def _changed(obj: Json, change: Callable[[Json], object]) -> Json:
    new = copy.deepcopy(obj)
    change(new)
    return new


# --- the agent's policy: its own node, its own keys --------------------------------------------------------


def _node(name: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "4711",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true", OWNED_LABEL: "2"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", OWNED_ANNOTATION: "{}"},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
    }


def _nrt(name: str) -> Json:
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "zones": [{"name": "node-0", "type": "Node"}],
    }


NRT_RESOURCE = ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies")
ON_NODE_A = {NODE_NAME_KEY: ["gpu-a"], POD_NAME_KEY: ["kubenexus-agent-x7k2p"]}


@pytest.fixture(scope="module")
def agent_policy() -> Policy:
    return Policy(_policies()[AGENT_POLICY])


def _agent_patch(policy: Policy, old: Json, change: Callable[[Json], object], **kwargs: Any) -> Decision:
    new = _changed(old, change)
    return policy.admit(_request(AGENT, new, extra=kwargs.pop("extra", ON_NODE_A), **kwargs), new, old)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda n: n["metadata"]["labels"].update({OWNED_LABEL: "4"}), id="changes-an-owned-label"),
        pytest.param(lambda n: n["metadata"]["labels"].update({f"{OWNED_PREFIXES[1]}count": "8"}), id="adds-one"),
        pytest.param(lambda n: n["metadata"]["annotations"].pop(OWNED_ANNOTATION), id="removes-an-owned-annotation"),
        pytest.param(lambda n: None, id="changes-nothing"),
    ],
)
def test_the_agent_may_change_its_own_keys_on_its_own_node(
    agent_policy: Policy, change: Callable[[Json], object]
) -> None:
    assert _agent_patch(agent_policy, _node("gpu-a"), change) == Decision(matched=True)


def test_the_agent_may_write_its_own_nodes_nrt(agent_policy: Policy) -> None:
    nrt = _nrt("gpu-a")
    created = agent_policy.admit(
        _request(AGENT, nrt, operation="CREATE", resource=NRT_RESOURCE, extra=ON_NODE_A), nrt, None
    )
    assert created == Decision(matched=True)
    updated = _changed(nrt, lambda n: n["zones"].append({"name": "node-1", "type": "Node"}))
    assert agent_policy.admit(
        _request(AGENT, updated, resource=NRT_RESOURCE, extra=ON_NODE_A), updated, nrt
    ) == Decision(matched=True)


@pytest.mark.parametrize(
    ("change", "denial"),
    [
        pytest.param(
            lambda n: n["metadata"]["labels"].update({"node-role.kubernetes.io/control-plane": ""}),
            "kubenexus-agent may change only the label and annotation keys it owns, not: "
            "node-role.kubernetes.io/control-plane",
            id="adds-a-foreign-label",
        ),
        pytest.param(
            lambda n: n["metadata"]["annotations"].pop("node.alpha.kubernetes.io/ttl"),
            "kubenexus-agent may change only the label and annotation keys it owns, not: node.alpha.kubernetes.io/ttl",
            id="removes-a-foreign-annotation",
        ),
        pytest.param(
            lambda n: n["metadata"]["labels"].update({"numa.kubenexus.io.evil.com/x": "1"}),
            "kubenexus-agent may change only the label and annotation keys it owns, not: numa.kubenexus.io.evil.com/x",
            id="a-lookalike-prefix",
        ),
        pytest.param(
            lambda n: n["spec"].update({"taints": []}),
            "kubenexus-agent may not change a Node's spec (taints, podCIDR, unschedulable)",
            id="removes-a-taint",
        ),
        pytest.param(
            lambda n: n["metadata"].update({"finalizers": ["example.com/hold"]}),
            "kubenexus-agent may not change a Node's finalizers",
            id="adds-a-finalizer",
        ),
        pytest.param(
            lambda n: n["metadata"].update(
                {"ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "doomed", "uid": "u-1"}]}
            ),
            "kubenexus-agent may not change a Node's ownerReferences",
            id="adds-an-owner",
        ),
    ],
)
def test_the_agent_may_not_touch_what_it_does_not_own(
    agent_policy: Policy, change: Callable[[Json], object], denial: str
) -> None:
    assert _agent_patch(agent_policy, _node("gpu-a"), change) == Decision(matched=True, denials=(denial,))


def test_the_agent_may_not_change_another_node_or_its_nrt(agent_policy: Policy) -> None:
    other = "kubenexus-agent on node gpu-a may change only that node and its NodeResourceTopology, not gpu-b"
    node = _agent_patch(agent_policy, _node("gpu-b"), lambda n: n["metadata"]["labels"].update({OWNED_LABEL: "4"}))
    assert node == Decision(matched=True, denials=(other,))
    nrt = _nrt("gpu-b")
    created = agent_policy.admit(
        _request(AGENT, nrt, operation="CREATE", resource=NRT_RESOURCE, extra=ON_NODE_A), nrt, None
    )
    assert created == Decision(matched=True, denials=(other,))


@pytest.mark.parametrize(
    "extra", [pytest.param(None, id="legacy-token"), pytest.param({POD_NAME_KEY: ["p"]}, id="no-node-name")]
)
def test_the_agent_needs_a_token_bound_to_its_node(agent_policy: Policy, extra: dict[str, list[str]] | None) -> None:
    decision = _agent_patch(agent_policy, _node("gpu-a"), lambda n: None, extra=extra)
    assert decision.matched
    assert decision.denials[0].startswith("kubenexus-agent must authenticate with a pod-bound service account token")


def test_the_agent_policy_leaves_everyone_else_alone(agent_policy: Policy) -> None:
    old = _node("gpu-a")
    new = _changed(old, lambda n: n["spec"].update({"unschedulable": True}))
    assert agent_policy.admit(_request("kubernetes-admin", new), new, old) == Decision(matched=False)
    assert agent_policy.admit(
        _request("system:serviceaccount:kubenexus-system:kubenexus-agent", new, extra=ON_NODE_A), new, old
    ) == Decision(matched=False)  # the agent's account lives in kubenexus-agent, not in the service's namespace
    # The Node's status is a subresource the rules do not name (and RBAC does not grant).
    status = _request(AGENT, new, sub_resource="status", extra=ON_NODE_A)
    assert agent_policy.admit(status, new, old) == Decision(matched=False)


# --- the placement service's policy: placement annotations, and the leader label on its own pod -------------


def _pod(namespace: str = "ml", name: str = "trainer-0", *, labels: Mapping[str, str] | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "912",
            "labels": dict(labels or {"app": "trainer"}),
            "annotations": {POLICY_KEY: "single-numa"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "job-1", "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "kubenexus-scheduler",
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/example/trainer:1.0",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


PLACEMENT_LABELS = {"app.kubernetes.io/name": "kubenexus-placement", "app.kubernetes.io/part-of": "kubenexus"}
POD_RESOURCE = ("", "v1", "pods")
REPLICA = "kubenexus-placement-6d9f7-abcde"
FROM_REPLICA = {POD_NAME_KEY: [REPLICA], NODE_NAME_KEY: ["cpu-1"]}


@pytest.fixture(scope="module")
def placement_policy() -> Policy:
    return Policy(_policies()[PLACEMENT_POLICY])


def _placement_patch(
    policy: Policy, old: Json, change: Callable[[Json], object], *, extra: Mapping[str, list[str]] | None = FROM_REPLICA
) -> Decision:
    new = _changed(old, change)
    return policy.admit(_request(PLACEMENT, new, resource=POD_RESOURCE, extra=extra), new, old)


def _annotate(values: Mapping[str, str | None]) -> Callable[[Json], None]:
    """A merge patch of annotations: None removes the key, as the shims' patches do."""

    def apply(pod: Json) -> None:
        annotations = pod["metadata"]["annotations"]
        for key, value in values.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value

    return apply


RESERVATION = {RESERVED_NODE_KEY: "gpu-a", ASSIGNED_CELLS_KEY: "1", ASSIGNED_GPUS_KEY: "4,5"}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_annotate({ASSIGNED_GPUS_KEY: "4,5"}), id="assigned-gpus"),
        pytest.param(_annotate(RESERVATION), id="the-binder-reserves"),
    ],
)
def test_the_placement_service_may_write_the_placement_annotations(
    placement_policy: Policy, change: Callable[[Json], object]
) -> None:
    assert _placement_patch(placement_policy, _pod(), change) == Decision(matched=True)


def test_the_placement_service_may_clear_a_reservation(placement_policy: Policy) -> None:
    reserved = _changed(_pod(), _annotate(RESERVATION))
    cleared = _annotate(dict.fromkeys(RESERVATION))
    assert _placement_patch(placement_policy, reserved, cleared) == Decision(matched=True)


def test_the_leader_may_label_its_own_pod_and_take_the_label_off(placement_policy: Policy) -> None:
    replica = _pod("kubenexus-system", REPLICA, labels=PLACEMENT_LABELS)
    leading = _placement_patch(
        placement_policy, replica, lambda p: p["metadata"]["labels"].update({LEADER_LABEL: "true"})
    )
    assert leading == Decision(matched=True)
    labelled = _changed(replica, lambda p: p["metadata"]["labels"].update({LEADER_LABEL: "true"}))
    stepping_down = _placement_patch(placement_policy, labelled, lambda p: p["metadata"]["labels"].pop(LEADER_LABEL))
    assert stepping_down == Decision(matched=True)


def _set_image(pod: Json) -> None:
    pod["spec"]["containers"][0]["image"] = "ghcr.io/attacker/miner:latest"


@pytest.mark.parametrize(
    ("change", "denial"),
    [
        pytest.param(_set_image, "kubenexus-placement may not change a pod's spec", id="a-container-image"),
        pytest.param(
            lambda p: p["spec"]["tolerations"].append({"operator": "Exists"}),
            "kubenexus-placement may not change a pod's spec",
            id="a-toleration",
        ),
        pytest.param(
            _annotate({POLICY_KEY: "best-effort"}),
            f"kubenexus-placement may change only the placement annotations of a pod, not: {POLICY_KEY}",
            id="the-users-numa-intent",
        ),
        pytest.param(
            _annotate({"sidecar.istio.io/inject": "false"}),
            "kubenexus-placement may change only the placement annotations of a pod, not: sidecar.istio.io/inject",
            id="another-annotation",
        ),
        pytest.param(
            lambda p: p["metadata"]["labels"].update({"app": "miner"}),
            f"kubenexus-placement may change no label of a pod but {LEADER_LABEL}, not: app",
            id="another-label",
        ),
        pytest.param(
            lambda p: p["metadata"].update({"finalizers": ["example.com/never-delete"]}),
            "kubenexus-placement may not change a pod's finalizers",
            id="a-finalizer",
        ),
        pytest.param(
            lambda p: p["metadata"].pop("ownerReferences"),
            "kubenexus-placement may not change a pod's ownerReferences",
            id="orphaning-the-pod",
        ),
        pytest.param(
            lambda p: p["metadata"]["labels"].update({LEADER_LABEL: "true"}),
            f"kubenexus-placement may set {LEADER_LABEL} only on its own pod in kubenexus-system, not on ml/trainer-0",
            id="the-leader-label-on-a-users-pod",
        ),
    ],
)
def test_the_placement_service_may_change_nothing_else_of_a_pod(
    placement_policy: Policy, change: Callable[[Json], object], denial: str
) -> None:
    assert _placement_patch(placement_policy, _pod(), change) == Decision(matched=True, denials=(denial,))


def test_an_allowed_annotation_does_not_carry_a_forbidden_change(placement_policy: Policy) -> None:
    def both(pod: Json) -> None:
        _annotate(RESERVATION)(pod)
        _set_image(pod)

    assert _placement_patch(placement_policy, _pod(), both) == Decision(
        matched=True, denials=("kubenexus-placement may not change a pod's spec",)
    )


@pytest.mark.parametrize(
    ("pod", "extra"),
    [
        pytest.param(
            _pod("kubenexus-system", "kubenexus-placement-6d9f7-zzzzz", labels=PLACEMENT_LABELS),
            FROM_REPLICA,
            id="the-other-replica",
        ),
        pytest.param(_pod("kubenexus-system", REPLICA, labels=PLACEMENT_LABELS), None, id="a-token-bound-to-no-pod"),
        pytest.param(
            _pod("kubenexus-system", REPLICA, labels={"app": "impostor"}), FROM_REPLICA, id="not-a-placement-pod"
        ),
        pytest.param(_pod("default", REPLICA, labels=PLACEMENT_LABELS), FROM_REPLICA, id="another-namespace"),
    ],
)
def test_the_leader_label_goes_only_on_the_callers_own_placement_pod(
    placement_policy: Policy, pod: Json, extra: dict[str, list[str]] | None
) -> None:
    decision = _placement_patch(
        placement_policy, pod, lambda p: p["metadata"]["labels"].update({LEADER_LABEL: "true"}), extra=extra
    )
    where = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    assert decision == Decision(
        matched=True,
        denials=(
            f"kubenexus-placement may set {LEADER_LABEL} only on its own pod in kubenexus-system, not on {where}",
        ),
    )


def test_the_placement_policy_leaves_everyone_else_alone(placement_policy: Policy) -> None:
    old = _pod()
    new = _changed(old, _set_image)
    # A user (or their controller) edits their own pod: not this policy's business.
    assert placement_policy.admit(_request("alice", new, resource=POD_RESOURCE), new, old) == Decision(matched=False)
    # The binding is a subresource: RBAC grants it and it sets only spec.nodeName.
    binding = _request(PLACEMENT, new, operation="CREATE", resource=POD_RESOURCE, sub_resource="binding")
    assert placement_policy.admit(binding, new, old) == Decision(matched=False)


# --- the policies as written ------------------------------------------------------------------------------


def test_every_admission_policy_in_deploy_is_evaluated_here() -> None:
    assert set(_policies()) == {AGENT_POLICY, PLACEMENT_POLICY}


@pytest.mark.parametrize("name", [AGENT_POLICY, PLACEMENT_POLICY])
def test_a_policy_fails_closed_and_binds_with_deny(name: str) -> None:
    spec = _policies()[name]
    assert spec["failurePolicy"] == "Fail"
    bindings = [
        doc["spec"]
        for path in sorted(DEPLOY.rglob("*.yaml"))
        if DEPLOY / "helm" not in path.parents
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "ValidatingAdmissionPolicyBinding" and doc["spec"]["policyName"] == name
    ]
    assert [binding["validationActions"] for binding in bindings] == [["Deny"]]
    assert {validation.get("reason") for validation in spec["validations"]} == {"Forbidden"}
