"""What a real API server would refuse in an object the programs write, for the emulated API to answer 422.

* **Built-in kinds** (Node, Pod, Event, Lease, Binding, ...): the official JSON schemas that
  kubernetes-validate ships, strict (a field the schema does not name is an error), for every Kubernetes
  version from ``OLDEST`` (the oldest we support) to the newest the library has.
* **Custom resources** (the NodeResourceTopology): the served versions' ``openAPIV3Schema`` of the CRDs in
  ``deploy/crd``, read as the API server reads a structural schema: a field the schema does not name is an
  error unless ``x-kubernetes-preserve-unknown-fields`` (the API server would prune it silently, losing
  what the program meant to publish), ``nullable`` and ``x-kubernetes-int-or-string`` honoured, ``apiVersion``
  and ``kind`` pinned, ``metadata`` checked as the built-in ObjectMeta. An ``x-kubernetes-*`` extension these
  checks do not honour (CEL validations, embedded resources) fails loudly instead of being skipped.
* **Object metadata** as apimachinery's ``ValidateObjectMeta`` checks it beyond the schema: the name (a DNS
  subdomain), label keys and values, annotation keys and their total size.
* **The API server's own rules for the kinds the programs write** that no schema expresses: a Lease's
  duration and transitions, an Event's namespace against its object's (``legacyValidateEvent``), a
  Binding's target (``ValidatePodBinding``).

Schemas load once per process; one check costs about a millisecond per Kubernetes version.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml
from kubernetes_validate import utils as kubernetes_validate  # type: ignore[import-untyped]
from referencing import Registry, Resource

OLDEST = (1, 30)
CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crd"

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_OBJECT_META = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_HONOURED_EXTENSIONS = frozenset({"x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string"})
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
_ANNOTATIONS_LIMIT = 256 * 1024  # apimachinery's TotalAnnotationSizeLimitB


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# "1.30.0", ... up to the newest schema folder kubernetes-validate ships.
VERSIONS: tuple[str, ...] = tuple(
    dict.fromkeys(v for v in kubernetes_validate.all_versions() if _version_tuple(v)[:2] >= OLDEST)
)


def _is_rfc3339(value: object) -> bool:
    """metav1.Time and MicroTime: what Go's RFC 3339 parser accepts."""
    if not isinstance(value, str):
        return True
    if _RFC3339.fullmatch(value) is None:
        return False
    try:
        datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True


def _is_int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


def _is_int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


# The formats the Kubernetes schemas use that a real API server refuses when broken (byte and double pass).
_FORMATS = jsonschema.FormatChecker(formats=())
for _format, _check in (("date-time", _is_rfc3339), ("int32", _is_int32), ("int64", _is_int64)):
    _FORMATS.checks(_format)(_check)


def violations(obj: Mapping[str, Any], *, api_version: str, kind: str, oldest: str = "", newest: str = "") -> list[str]:
    """Why a real API server would refuse ``obj`` as a ``kind`` of ``api_version``; empty when it would not.

    ``api_version`` and ``kind`` come from the request's URL, not from the body: a body claiming another
    kind is one more violation. ``oldest``: judge by the releases from this one on (a cluster known newer);
    ``newest``: up to this one (a cluster known older, e.g. one serving an alpha API a later release removed).
    """
    versions_of: dict[str, list[str]] = {}
    judging = tuple(
        v for v in _serving(api_version, kind, newest) if not oldest or _version_tuple(v) >= _version_tuple(oldest)
    )
    if not judging:
        return [f"no schema for {api_version} {kind} in Kubernetes {VERSIONS[-1]}: these checks cannot judge it"]
    for version in judging:
        validator = _validator(version, api_version, kind)
        for error in validator.iter_errors(obj):
            versions_of.setdefault(f"{error.json_path}: {error.message}", []).append(version)
    problems = [f"{message} (Kubernetes {_versions(found)})" for message, found in versions_of.items()]
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        problems += _metadata_problems(metadata)
    if not problems and kind in _KIND_RULES:  # the rules read fields the schema has already checked
        problems += _KIND_RULES[kind](obj)
    return problems


def _serving(api_version: str, kind: str, newest: str = "") -> tuple[str, ...]:
    """The releases that serve ``kind`` of ``api_version``: from the first whose schemas have it to the newest
    (an API that arrived later, such as resource.k8s.io/v1 in 1.34, is judged by the releases that serve it);
    none when the newest (``newest``, else the newest we have) does not have it."""
    window = tuple(v for v in VERSIONS if not newest or _version_tuple(v) <= _version_tuple(newest))
    having = [version for version in window if _validator(version, api_version, kind) is not None]
    if not having or having[-1] != window[-1]:
        return ()
    return window[window.index(having[0]) :]


def _versions(found: list[str]) -> str:
    minors = [version.rsplit(".", 1)[0] for version in found]  # 1.30.0 -> 1.30
    every_since = list(VERSIONS[VERSIONS.index(found[0]) :])  # each release from the first that found it on
    return f"{minors[0]} to {minors[-1]}" if len(found) > 1 and found == every_since else ", ".join(minors)


# --- schemas -------------------------------------------------------------------------------------------------


@functools.cache
def _validator(version: str, api_version: str, kind: str) -> Any:
    """A cached validator for ``kind``, or None when neither kubernetes-validate nor ``deploy/crd`` has it."""
    schema = _custom_resource_schemas().get((api_version, kind))
    if schema is None:
        # kubernetes-validate's file naming: coordination.k8s.io/v1 Lease -> lease-coordination-v1.json
        slug = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        try:
            schema = _schema_file(version, f"{kind.lower()}-{slug}.json")
        except FileNotFoundError:
            return None
    registry = Resource.from_contents(schema) @ _definitions(version)
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=_FORMATS)


@functools.cache
def _definitions(version: str) -> Registry[Any]:
    return Resource.from_contents(_schema_file(version, "_definitions.json")) @ Registry()


def _schema_file(version: str, name: str) -> Any:
    return kubernetes_validate.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/{name}", version)


@functools.cache
def _custom_resource_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the JSON schema of every served version of the CRDs in ``deploy/crd``."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                schemas |= crd_schemas(document)
    return schemas


def crd_schemas(document: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the JSON schema of every served version of one CustomResourceDefinition."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    spec = document["spec"]
    kind = spec["names"]["kind"]
    for served in (v for v in spec["versions"] if v.get("served")):
        api_version = f"{spec['group']}/{served['name']}"
        schema = structural(served["schema"]["openAPIV3Schema"])
        schema["properties"] |= {
            "apiVersion": {"type": "string", "enum": [api_version]},
            "kind": {"type": "string", "enum": [kind]},
            "metadata": {"$ref": _OBJECT_META},
        }
        schema["$schema"] = _DRAFT
        schema["$id"] = f"https://kubernetes.io/api/crd/{spec['group']}/{spec['names']['plural']}/{served['name']}"
        schemas[(api_version, kind)] = schema
    return schemas


def custom_resource_violations(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Why a real API server would refuse ``obj`` as a custom resource of ``schema`` (from ``crd_schemas``):
    for CRDs a test installs besides ours (another project's, such as Volcano's PodGroup)."""
    registry = Resource.from_contents(schema) @ _definitions(VERSIONS[-1])
    validator = jsonschema.Draft202012Validator(schema, registry=registry, format_checker=_FORMATS)
    problems = [f"{error.json_path}: {error.message}" for error in validator.iter_errors(obj)]
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        problems += _metadata_problems(metadata)
    return problems


def structural(node: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 schema node of a CRD as JSON Schema, with the API server's rule for unknown fields."""
    unhonoured = {key for key in node if key.startswith("x-kubernetes-")} - _HONOURED_EXTENSIONS
    if unhonoured:
        raise ValueError(f"the CRD schema uses {sorted(unhonoured)}, which tests.api_conformance does not honour")
    schema = {key: value for key, value in node.items() if not key.startswith("x-kubernetes-") and key != "nullable"}
    if "properties" in node:
        schema["properties"] = {name: structural(field) for name, field in node["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), Mapping):
            schema[key] = structural(node[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            schema[key] = [structural(option) for option in node[key]]
    if node.get("nullable") and "type" in node:
        schema["type"] = [node["type"], "null"]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        schema["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserved = node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node
    if node.get("type") == "object" and not preserved:
        schema["additionalProperties"] = False  # the API server prunes what the schema does not name
    return schema


# --- the API server's rules ---------------------------------------------------------------------------------


def _lease_problems(lease: Mapping[str, Any]) -> list[str]:
    spec = lease.get("spec") or {}
    problems = []
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        problems.append(
            f"spec.leaseDurationSeconds: Invalid value: {spec['leaseDurationSeconds']}: must be greater than 0"
        )
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        problems.append(f"spec.leaseTransitions: Invalid value: {spec['leaseTransitions']}: must be >= 0")
    return problems


def _event_problems(event: Mapping[str, Any]) -> list[str]:
    """legacyValidateEvent for an Event without ``eventTime`` (the core/v1 way of recording one)."""
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    involved = (event.get("involvedObject") or {}).get("namespace") or ""
    if event.get("eventTime") or namespace == involved or (not involved and namespace in ("", "default")):
        return []
    return [f"involvedObject.namespace: Invalid value: {involved!r}: does not match event.namespace {namespace!r}"]


def _binding_problems(binding: Mapping[str, Any]) -> list[str]:
    target = binding.get("target") or {}
    problems = []
    if target.get("kind") not in (None, "", "Node"):
        problems.append(f'target.kind: Unsupported value: {target["kind"]!r}: supported values: "Node", "<empty>"')
    if not target.get("name"):
        problems.append("target.name: Required value")
    return problems


_KIND_RULES = {"Lease": _lease_problems, "Event": _event_problems, "Binding": _binding_problems}


# --- metadata ------------------------------------------------------------------------------------------------


def _metadata_problems(metadata: Mapping[str, Any]) -> list[str]:
    problems = []
    name = metadata.get("name")
    if not name:
        problems.append("metadata.name: Required value: name or generateName is required")
    elif not (isinstance(name, str) and len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name)):
        problems.append(f"metadata.name: Invalid value: {name!r}: must be a lowercase RFC 1123 subdomain")
    labels = metadata.get("labels")
    if isinstance(labels, Mapping):
        for key, value in labels.items():
            problems += (f"metadata.labels: Invalid key {key!r}: {why}" for why in _qualified_name_problems(key))
            if not (isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
                problems.append(
                    f"metadata.labels: Invalid value {value!r} of {key!r}: at most 63 characters, alphanumeric "
                    "at both ends, '-', '_' or '.' between"
                )
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping):
        for key in annotations:  # checked lowercased, as apimachinery does
            lowered = str(key).lower()
            problems += (
                f"metadata.annotations: Invalid key {key!r}: {why}" for why in _qualified_name_problems(lowered)
            )
        size = sum(len(str(key)) + len(str(value)) for key, value in annotations.items())
        if size > _ANNOTATIONS_LIMIT:
            problems.append(f"metadata.annotations: Too long: {size} bytes, at most {_ANNOTATIONS_LIMIT}")
    return problems


def _qualified_name_problems(key: object) -> Iterator[str]:
    """apimachinery's IsQualifiedName: an optional DNS-subdomain prefix and '/', then a name part."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) not in (1, 2):
        yield "must be a name, optionally prefixed by a DNS subdomain and '/'"
        return
    *prefix, name = parts
    if prefix and not (len(prefix[0]) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix[0])):
        yield "the prefix must be a lowercase RFC 1123 subdomain"
    if not (len(name) <= 63 and _NAME_PART.fullmatch(name)):
        yield "the name part must be at most 63 characters, alphanumeric at both ends, '-', '_' or '.' between"
