"""The checks the emulated API applies to every write (``tests.api_conformance``): the official schemas of
Kubernetes 1.30 to the newest, strict; the NRT CRD read as a structural schema; object metadata and the API
server's own rules for the kinds the programs write."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.nrt import API_VERSION as NRT_API_VERSION
from kubenexus.topology.nrt import KIND as NRT_KIND
from kubenexus.topology.nrt import encode_nrt
from tests.api_conformance import VERSIONS, structural, violations
from tests.machines.node_topologies import nvswitch_node

Json = dict[str, Any]


def lease(**spec: Any) -> Json:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kubenexus-placement", "namespace": "kubenexus-system", "resourceVersion": "7"},
        "spec": {
            "holderIdentity": "placement-0",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-02T03:04:05.123456Z",
            "renewTime": "2026-01-02T03:04:05.123456Z",
            "leaseTransitions": 0,
            **spec,
        },
    }


def event(**fields: Any) -> Json:
    """An Event shaped as the binder records one (core/v1, without eventTime)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "worker-0.18a2b3c4d5e6f708", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": "default",
            "name": "worker-0",
            "uid": "0f6c3c1e-5d8a-4a8e-9a0e-2f1f6c0b7a11",
            "resourceVersion": "42",
        },
        "type": "Normal",
        "reason": "Scheduled",
        "message": "Successfully assigned default/worker-0 to h100-a (NUMA cells 0, GPUs 0,1)",
        "source": {"component": "kubenexus-scheduler"},
        "reportingComponent": "kubenexus-scheduler",
        "reportingInstance": "placement-0",
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "lastTimestamp": "2026-01-02T03:04:05Z",
        "count": 1,
        **fields,
    }


def binding(**target: Any) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "worker-0", "namespace": "default", "uid": "uid-worker-0"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "h100-a", **target},
    }


def node(**metadata: Any) -> Json:
    published = encode_node_metadata(nvswitch_node())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "h100-a", "labels": dict(published.labels), "annotations": dict(published.annotations)}
        | metadata,
        "spec": {},
    }


def problems(obj: Json) -> list[str]:
    return violations(obj, api_version=obj["apiVersion"], kind=obj["kind"])


def test_the_checks_span_the_oldest_supported_and_the_newest_known_kubernetes() -> None:
    assert VERSIONS[0] == "1.30.0"
    assert VERSIONS[-1] == kubernetes_validate.utils.latest_version()
    assert len(set(VERSIONS)) == len(VERSIONS) >= 2


SCHEMA_CASES = [
    pytest.param(event(), True, id="the-binders-event"),
    pytest.param(event(reportingController="x"), False, id="an-event-with-an-unknown-field"),
    pytest.param(lease(), True, id="a-lease"),
    pytest.param(lease(leaseDurationSeconds="x"), False, id="a-lease-with-a-string-duration"),
    pytest.param(lease(holder="placement-0"), False, id="a-lease-with-an-unknown-spec-field"),
    pytest.param(binding(), True, id="a-binding"),
    pytest.param(binding(node="h100-a"), False, id="a-binding-with-an-unknown-target-field"),
    pytest.param(node(), True, id="the-agents-node"),
    pytest.param(node(labels=["not", "a", "map"]), False, id="a-node-with-labels-not-a-map"),
]


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
@pytest.mark.parametrize(("obj", "valid"), SCHEMA_CASES)
def test_the_cached_schemas_judge_as_kubernetes_validate_does(obj: Json, valid: bool, version: str) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError:
        assert not valid, "kubernetes-validate refused an object meant to be valid"
    else:
        assert valid, "kubernetes-validate took an object meant to be invalid"
    found = problems(obj)
    assert (not found) == valid, found


def test_a_problem_names_the_field_and_the_versions() -> None:
    assert problems(lease(leaseDurationSeconds="x")) == [
        f"$.spec.leaseDurationSeconds: 'x' is not of type 'integer', 'null' (Kubernetes 1.30 to {VERSIONS[-1][:-2]})"
    ]


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        pytest.param(lease(renewTime="yesterday"), "'yesterday' is not a 'date-time'", id="a-time-not-rfc3339"),
        pytest.param(lease(renewTime="2026-13-02T03:04:05Z"), "is not a 'date-time'", id="month-13"),
        pytest.param(event(count=2**31), "is not a 'int32'", id="an-int32-overflow"),
    ],
)
def test_formats_are_checked_as_the_api_server_decodes_them(obj: Json, problem: str) -> None:
    (found,) = problems(obj)
    assert problem in found


def test_the_nrt_is_checked_against_the_crds_structural_schema() -> None:
    nrt = encode_nrt(nvswitch_node(), node_name="h100-a")
    assert violations(nrt, api_version=NRT_API_VERSION, kind=NRT_KIND) == []

    unknown = copy.deepcopy(nrt)
    unknown["zones"][0]["bandwidth"] = "200GB/s"
    (found,) = violations(unknown, api_version=NRT_API_VERSION, kind=NRT_KIND)
    assert found.startswith("$.zones[0]: Additional properties are not allowed ('bandwidth' was unexpected)")

    misnamed = nrt | {"kind": "NodeResourceTopologies"}
    assert violations(misnamed, api_version=NRT_API_VERSION, kind=NRT_KIND)
    bad_meta = nrt | {"metadata": {"name": "h100-a", "owner": "agent"}}  # ObjectMeta, strict
    (found,) = violations(bad_meta, api_version=NRT_API_VERSION, kind=NRT_KIND)
    assert "'owner' was unexpected" in found
    not_a_quantity = copy.deepcopy(nrt)
    not_a_quantity["zones"][0]["resources"][0]["available"] = "lots"
    assert violations(not_a_quantity, api_version=NRT_API_VERSION, kind=NRT_KIND)


def test_a_structural_schema_honours_preserved_fields_nullable_and_int_or_string() -> None:
    schema = structural(
        {
            "type": "object",
            "properties": {
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "maybe": {"type": "string", "nullable": True},
                "amount": {"x-kubernetes-int-or-string": True},
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "empty": {"type": "object"},
            },
        }
    )
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"free": {"any": {"thing": 1}}, "maybe": None, "amount": 3, "map": {"k": "v"}})
    assert validator.is_valid({"amount": "3Gi", "empty": {}})
    assert not validator.is_valid({"unknown": 1})
    assert not validator.is_valid({"empty": {"pruned": 1}})  # a real server would drop it silently
    assert not validator.is_valid({"map": {"k": 1}})
    assert not validator.is_valid({"amount": 1.5})


def test_a_crd_extension_the_checks_do_not_honour_fails_loudly() -> None:
    with pytest.raises(ValueError, match="x-kubernetes-validations"):
        structural({"type": "object", "x-kubernetes-validations": [{"rule": "self.a > 0"}]})


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        # The seed documents' example value: a comma is not allowed in a label value.
        pytest.param(
            {"labels": {"numa.kubenexus.io/node-0-cpus": "0-15,32-47"}}, "Invalid value '0-15,32-47'", id="comma"
        ),
        pytest.param({"labels": {"x": "v" * 64}}, "at most 63 characters", id="a-long-label-value"),
        pytest.param({"labels": {"-team/ml": "a"}}, "the prefix must be", id="a-label-prefix-not-a-dns-name"),
        pytest.param({"annotations": {"a/b/c": "x"}}, "optionally prefixed", id="two-slashes"),
        pytest.param({"annotations": {"big": "x" * 262_144}}, "Too long", id="annotations-over-256-kib"),
        pytest.param({"name": "GPU_Node"}, "must be a lowercase RFC 1123 subdomain", id="a-name-not-a-dns-name"),
        pytest.param({"name": ""}, "name or generateName is required", id="no-name"),
    ],
)
def test_metadata_is_checked_as_the_api_server_checks_it(metadata: Json, problem: str) -> None:
    found = problems(node(**metadata))
    assert any(problem in line for line in found), found


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        pytest.param(lease(leaseDurationSeconds=0), "must be greater than 0", id="a-lease-of-no-time"),
        pytest.param(lease(leaseTransitions=-1), "must be >= 0", id="negative-transitions"),
        pytest.param(
            event(metadata={"name": "e.1", "namespace": "kubenexus-system"}), "does not match", id="event-namespace"
        ),
        pytest.param(binding(kind="Pod"), "Unsupported value: 'Pod'", id="a-binding-to-a-pod"),
        pytest.param(binding(name=""), "target.name: Required value", id="a-binding-to-nothing"),
    ],
)
def test_the_api_servers_own_rules_for_the_kinds_the_programs_write(obj: Json, problem: str) -> None:
    (found,) = problems(obj)
    assert problem in found
