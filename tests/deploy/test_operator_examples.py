"""The operator examples in deploy/examples: valid for their operators' CRDs, their pods valid for the API
server and for the placement service, and their gang the size of the workload.

* Each operator object is judged by its CRD's schema (trimmed copies of the upstream CRDs in
  tests/operator_crds, sources in SOURCES.md there) with ``tests.api_conformance``, as an API server judges
  a custom resource; the group objects (scheduler-plugins' and Volcano's PodGroup) by theirs.
* Each embedded pod template (a Job template for JobSet) by the official Kubernetes schema, strict.
* Each pod the operator would create from a template goes through the service's own parsing
  (``placement.core.pods.validate_pod``: containers, quantities, the NUMA intent), the gang sources
  (``group_of``, ``parse_membership``, the PodGroup parsers): one group per example, of exactly the pods
  the gang must place together.

Spark's pods are not templates: the driver and executor pods are built here from ``spec.driver`` and
``spec.executor`` as Spark's Kubernetes backend builds them (requests cpu = cores, limit = coreLimit, memory
= memory + memoryOverhead for request and limit, the GPU as a limit).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import yaml

from placement.core.gang_sources import (
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    GangSourceError,
    PodGroupKey,
    group_of,
    parse_scheduler_plugins_pod_group,
    parse_volcano_pod_group,
)
from placement.core.podgroup import PodGroupError, PodGroupSpec, parse_membership
from placement.core.pods import PodParseError, parse_quantity, pod_spec_from_object, validate_pod
from placement.state.driver_reservations import RESERVE_RESOURCES_KEY, member_room
from tests import REPO, TESTS
from tests.api_conformance import crd_schemas, custom_resource_violations
from tests.conftest import SHARED_DATA, require_shared

Json = dict[str, Any]

EXAMPLES = REPO / "deploy" / "examples"
OPERATOR_CRDS = TESTS / "operator_crds"
VOLCANO_CRD = TESTS / "gang_crds" / "scheduling.volcano.sh_podgroups.yaml"
PLUGINS_CRD = (
    SHARED_DATA / "dra" / "scheduler-plugins" / "scheduler-plugins_CRD_podgroups.scheduling.x-k8s.io_v1alpha1.yaml"
)
SCHEDULER_NAME = "kubenexus-scheduler"
_DEFINITIONS = "/api/_definitions.json#/$defs/"


@dataclass(frozen=True)
class Member:
    """Pods an operator creates from one template: ``count`` of them, for the gang."""

    where: str
    template: Json  # a core/v1 PodTemplateSpec
    count: int


def _replica_specs(field: str) -> Callable[[Json], Iterator[Member]]:
    def members(spec: Json) -> Iterator[Member]:
        for role, replica in spec[field].items():
            yield Member(f"spec.{field}.{role}.template", replica["template"], replica.get("replicas", 1))

    return members


def _jobset_members(spec: Json) -> Iterator[Member]:
    for i, job in enumerate(spec["replicatedJobs"]):
        job_spec = job["template"]["spec"]
        count = job.get("replicas", 1) * job_spec.get("parallelism", 1)
        yield Member(f"spec.replicatedJobs[{i}].template.spec.template", job_spec["template"], count)


def _lws_members(spec: Json) -> Iterator[Member]:
    template = spec["leaderWorkerTemplate"]
    size = template.get("size", 1)  # one leader and size - 1 workers per group
    yield Member("spec.leaderWorkerTemplate.leaderTemplate", template["leaderTemplate"], 1)
    yield Member("spec.leaderWorkerTemplate.workerTemplate", template["workerTemplate"], size - 1)


def _ray_members(spec: Json) -> Iterator[Member]:
    yield Member("spec.headGroupSpec.template", spec["headGroupSpec"]["template"], 1)
    for i, group in enumerate(spec["workerGroupSpecs"]):
        # The group must start together at its floor; KubeRay counts the desired replicas (the same here).
        yield Member(f"spec.workerGroupSpecs[{i}].template", group["template"], group.get("minReplicas", 0))


def _spark_memory_mib(text: str) -> int:
    """A JVM-style size as Spark reads spark.{driver,executor}.memory (no suffix: MiB)."""
    units = {"k": Decimal(1) / 1024, "m": Decimal(1), "g": Decimal(1024), "t": Decimal(1024 * 1024)}
    suffix = text[-1].lower()
    return int(Decimal(text[:-1]) * units[suffix]) if suffix in units else int(text)


def _spark_pod_template(role: Json, role_name: str, app: str) -> Json:
    memory = _spark_memory_mib(role["memory"]) + _spark_memory_mib(role["memoryOverhead"])
    limits: Json = {"memory": f"{memory}Mi"}
    if "coreLimit" in role:
        limits["cpu"] = role["coreLimit"]
    if "gpu" in role:
        limits[role["gpu"]["name"]] = str(role["gpu"]["quantity"])
    # Labels Spark itself adds to every pod (spark-role, spark-app-selector), beside the ones the spec names.
    labels = role.get("labels", {}) | {"spark-role": role_name, "spark-app-selector": f"spark-{app}"}
    return {
        "metadata": {"labels": labels, "annotations": role.get("annotations", {})},
        "spec": {
            "schedulerName": role["schedulerName"],
            "containers": [
                {
                    "name": f"spark-kubernetes-{role_name}",
                    "resources": {"requests": {"cpu": str(role["cores"]), "memory": f"{memory}Mi"}, "limits": limits},
                }
            ],
        },
    }


def _spark_members(spec: Json) -> Iterator[Member]:
    app = "etl"  # Spark names the application with an id of its own; any value serves here
    yield Member("spec.driver", _spark_pod_template(spec["driver"], "driver", app), 1)
    yield Member("spec.executor", _spark_pod_template(spec["executor"], "executor", app), spec["executor"]["instances"])


MEMBERS: Mapping[str, Callable[[Json], Iterator[Member]]] = {
    "PyTorchJob": _replica_specs("pytorchReplicaSpecs"),
    "MPIJob": _replica_specs("mpiReplicaSpecs"),
    "JobSet": _jobset_members,
    "LeaderWorkerSet": _lws_members,
    "RayCluster": _ray_members,
    "SparkApplication": _spark_members,
}
FILES = {
    "PyTorchJob": "pytorchjob.yaml",
    "JobSet": "jobset.yaml",
    "LeaderWorkerSet": "leaderworkerset.yaml",
    "SparkApplication": "sparkapplication.yaml",
    "RayCluster": "raycluster.yaml",
    "MPIJob": "mpijob.yaml",
}


@functools.cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in (*sorted(OPERATOR_CRDS.glob("*.yaml")), VOLCANO_CRD):
        schemas |= crd_schemas(yaml.safe_load(path.read_text()))
    if PLUGINS_CRD.exists():
        schemas |= crd_schemas(yaml.safe_load(PLUGINS_CRD.read_text()))
    return schemas


def _core_schema(definition: str) -> Json:
    """The official schema of one core type (kubernetes-validate's strict definitions) as a standalone schema."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://kubernetes.io/api/examples/{definition}",
        "$ref": _DEFINITIONS + definition,
    }


def _documents(name: str) -> list[Json]:
    return [document for document in yaml.safe_load_all((EXAMPLES / name).read_text()) if document]


def _workload(documents: list[Json]) -> Json:
    (workload,) = (document for document in documents if document["kind"] in MEMBERS)
    return workload


def _template_problems(template: Json, definition: str) -> list[str]:
    """The schema's verdict and the metadata checks, the name aside: the operator names what it creates."""
    named = template | {"metadata": template.get("metadata", {}) | {"name": "from-template"}}
    return custom_resource_violations(named, _core_schema(definition))


def schema_problems(documents: list[Json]) -> list[str]:
    """What the API server would refuse in the example's objects and their embedded templates."""
    problems = []
    for document in documents:
        key = (document["apiVersion"], document["kind"])
        if key not in _schemas():
            problems.append(f"no schema for {key[0]} {key[1]}")
            continue
        problems += [f"{document['kind']}: {p}" for p in custom_resource_violations(document, _schemas()[key])]
    workload = _workload(documents)
    if workload["kind"] == "JobSet":
        for i, job in enumerate(workload["spec"]["replicatedJobs"]):
            found = _template_problems(job["template"], "io.k8s.api.batch.v1.JobTemplateSpec")
            problems += [f"spec.replicatedJobs[{i}].template: {p}" for p in found]
    if workload["kind"] != "SparkApplication":  # Spark's pods are built by Spark, not from a template
        for member in MEMBERS[workload["kind"]](workload["spec"]):
            found = _template_problems(member.template, "io.k8s.api.core.v1.PodTemplateSpec")
            problems += [f"{member.where}: {p}" for p in found]
    return problems


def _pod(workload: Json, member: Member) -> Json:
    """The pod the operator creates from ``member``'s template (name and namespace as the operator's)."""
    metadata = member.template.get("metadata", {})
    return {
        "metadata": {
            "name": f"{workload['metadata']['name']}-0",
            "namespace": workload["metadata"]["namespace"],
            "labels": metadata.get("labels", {}),
            "annotations": metadata.get("annotations", {}),
        },
        "spec": member.template["spec"],
    }


def _requested(pod: Json) -> set[str]:
    return {
        name
        for container in pod["spec"]["containers"]
        for amounts in container.get("resources", {}).values()
        for name in amounts
    }


def _gang_size(documents: list[Json], key: PodGroupKey, labelled_minimum: int | None) -> int | None:
    """The gang's minimum: the group object's minMember when the example ships one, else the label's."""
    for document in documents:
        if document["metadata"]["name"] != key.name:
            continue
        if key.source == SOURCE_SCHEDULER_PLUGINS and document["apiVersion"] == "scheduling.x-k8s.io/v1alpha1":
            return parse_scheduler_plugins_pod_group(document).min_member
        if key.source == SOURCE_VOLCANO and document["apiVersion"] == "scheduling.volcano.sh/v1beta1":
            return parse_volcano_pod_group(document).min_member
    return labelled_minimum


def placement_problems(documents: list[Json]) -> list[str]:
    """What the placement service would refuse or get wrong in the pods the example's operator creates: an
    invalid pod or NUMA intent, a pod outside the gang or in another, a gang whose minimum is not the number of
    pods that must start together, a GPU pod without a NUMA intent, a pod another scheduler would take."""
    workload = _workload(documents)
    problems = []
    groups: set[PodGroupKey] = set()
    minimums: set[int | None] = set()
    pods = 0
    for member in MEMBERS[workload["kind"]](workload["spec"]):
        pod = _pod(workload, member)
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        try:
            pending = validate_pod(pod_spec_from_object(pod))
            key = group_of(pod)
            plugin_group = _gang_size(documents, key, None) if key and key.source == SOURCE_SCHEDULER_PLUGINS else None
            spec = PodGroupSpec(min_member=plugin_group) if plugin_group is not None else None
            membership = parse_membership(pod["metadata"]["namespace"], labels, annotations, pod_group=spec)
        except (PodParseError, GangSourceError, PodGroupError) as error:
            problems.append(f"{member.where}: {error}")
            continue
        if pod["spec"].get("schedulerName") != SCHEDULER_NAME:
            problems.append(f"{member.where}: schedulerName is not {SCHEDULER_NAME}")
        if key is None:
            problems.append(f"{member.where}: the pods join no group")
            continue
        groups.add(key)
        minimums.add(_gang_size(documents, key, membership.min_available if membership else None))
        pods += member.count
        wants_gpus = any(name.endswith("/gpu") for name in _requested(pod))
        if wants_gpus and pending.intent.policy is None:
            problems.append(f"{member.where}: asks for GPUs but states no NUMA intent")
        unrequested = set(pending.intent.resources) - _requested(pod) - {"cpu", "memory"}
        if unrequested:
            problems.append(f"{member.where}: the NUMA intent aligns {sorted(unrequested)}, which the pod never asks")
    if len(groups) != 1:
        problems.append(f"the pods join {len(groups)} groups ({', '.join(map(str, groups))}); expected one")
    expected = 1 if workload["kind"] == "SparkApplication" else pods  # Spark: the driver is the first stage
    if minimums != {expected}:
        problems.append(f"the gang's minimum is {sorted(map(str, minimums))}, but {expected} pods must start together")
    return problems


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_example_is_valid_for_its_crd_and_the_core_pod_schema(kind: str) -> None:
    documents = _documents(FILES[kind])
    if any(d["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" for d in documents):
        require_shared(PLUGINS_CRD)
    assert _workload(documents)["kind"] == kind
    assert schema_problems(documents) == []


@pytest.mark.parametrize("kind", sorted(FILES))
def test_every_examples_pods_form_one_gang_of_the_workloads_size_with_a_numa_intent(kind: str) -> None:
    assert placement_problems(_documents(FILES[kind])) == []


def test_the_folder_holds_exactly_the_examples_tested() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.yaml")) == sorted(FILES.values())


def test_a_misspelt_operator_field_or_a_wrong_type_is_refused_by_the_trimmed_crd() -> None:
    documents = _documents(FILES["PyTorchJob"])
    job = _workload(documents)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 3  # "replicas" misspelt
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "1"
    problems = schema_problems(documents)
    assert any("'replica' was unexpected" in p for p in problems), problems
    assert any("Master.replicas: '1' is not of type 'integer'" in p for p in problems), problems


def test_an_invalid_field_in_a_pod_template_is_refused_by_the_core_schema() -> None:
    documents = _documents(FILES["RayCluster"])
    _workload(documents)["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["gpus"] = 4
    problems = schema_problems(documents)
    assert any(p.startswith("spec.workerGroupSpecs[0].template: ") and "'gpus'" in p for p in problems), problems


def test_a_gang_smaller_than_the_workload_is_found() -> None:
    documents = _documents(FILES["MPIJob"])
    _workload(documents)["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    assert placement_problems(documents) == ["the gang's minimum is ['3'], but 4 pods must start together"]


def test_a_member_missing_the_group_label_or_with_a_bad_intent_is_found() -> None:
    documents = _documents(FILES["JobSet"])
    twin = copy.deepcopy(_workload(documents)["spec"]["replicatedJobs"][0])
    twin["name"] = "evaluators"
    del twin["template"]["spec"]["template"]["metadata"]["labels"]["pod-group.scheduling.kubenexus.io/name"]
    _workload(documents)["spec"]["replicatedJobs"].append(twin)
    problems = placement_problems(documents)
    assert problems[0].startswith("spec.replicatedJobs[1].template.spec.template: ")
    assert "pod-group.scheduling.kubenexus.io/min-available" in problems[0]
    lws = _workload(_documents(FILES["LeaderWorkerSet"]))
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["annotations"] = {
        "numa.scheduling.kubenexus.io/policy": "single-gpu"
    }
    assert "numa.scheduling.kubenexus.io/policy" in placement_problems([lws])[0]


def test_the_spark_driver_holds_room_for_exactly_its_executors() -> None:
    """The driver's reserve annotations are the executors' count and one executor pod's requests, so the room
    it holds is the room its executors take (docs/placement.md, "Driver reservations")."""
    spec = _workload(_documents(FILES["SparkApplication"]))["spec"]
    driver, executor = (_pod({"metadata": {"name": "etl", "namespace": "analytics"}}, m) for m in _spark_members(spec))
    room = member_room(validate_pod(pod_spec_from_object(driver)))
    assert room is not None
    assert room.count == spec["executor"]["instances"]
    held = dict(pair.split("=") for pair in driver["metadata"]["annotations"][RESERVE_RESOURCES_KEY].split(","))
    executor_needs = executor["spec"]["containers"][0]["resources"]["requests"] | {
        "nvidia.com/gpu": executor["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    }
    assert {name: parse_quantity(v, where=name) for name, v in held.items()} == {
        name: parse_quantity(v, where=name) for name, v in executor_needs.items()
    }
