"""deploy/kueue (docs/kueue.md) and the chart's ``kueue`` values: Kueue's objects valid under Kueue's own CRDs at the
pinned release, as its API server would judge them (but the CEL rules and list-map keys, which the real one
evaluates in the cluster tests); the chart's render with ``kueue.enabled`` exactly
deploy/kueue/topology.yaml; the example Job's pods what the service accepts, its topology request a level of the
Topology, its gang the size of the Job.

Kueue's CRDs come from its chart in the pinned Go module, rendered with Helm's own Go code
(``tests.kueue_cluster.chart_objects``; the module is downloaded through the Go module proxy once, then read from
Go's module cache).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart
from helm_python.errors import HelmValuesError

from placement.core.gang_sources import SOURCE_OURS, group_of, label_group_definition
from placement.core.pods import pod_spec_from_object, validate_pod
from tests import REPO
from tests.api_conformance import crd_schemas, custom_resource_violations
from tests.kueue_cluster import chart_objects
from tools.control_plane import BuildError

Json = dict[str, Any]

KUEUE = REPO / "deploy" / "kueue"
CHART = REPO / "deploy" / "helm" / "kubenexus"


@functools.cache
def _kueue_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    try:
        rendered = chart_objects()
    except BuildError as error:
        pytest.skip(f"Kueue's Go module is not reachable: {error}")
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for crd in (obj for obj in rendered if obj["kind"] == "CustomResourceDefinition"):
        schemas |= crd_schemas(_without_server_only_rules(crd))
    return schemas


# What only an API server evaluates (tests.api_conformance does not): CEL rules, list and map merge semantics.
# The real one judges these files with them in tests/cluster/test_cluster_kueue.py (the walk-through applies them).
_SERVER_ONLY = {
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}


def _without_server_only_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_server_only_rules(value) for key, value in node.items() if key not in _SERVER_ONLY}
    if isinstance(node, list):
        return [_without_server_only_rules(value) for value in node]
    return node


def _documents(path: Path) -> list[Json]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _render(values: Json) -> list[Json]:
    rendered = Chart.load(CHART).render(values, name="kubenexus", namespace="kubenexus-system")
    return [doc for name, text in rendered.items() if name.endswith("/kueue.yaml") for doc in yaml.safe_load_all(text)
            if doc]  # fmt: skip


KUEUE_OBJECTS = [
    (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
    for path in sorted(KUEUE.glob("*.yaml"))
    for doc in _documents(path)
    if doc["apiVersion"].startswith("kueue.x-k8s.io/")
]
CHART_VALUES = (
    {"kueue": {"enabled": True}},
    {"kueue": {"enabled": True, "topology": {"name": "topograph", "levels": [
        "network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf", "kubernetes.io/hostname"]},
        "flavor": {"name": "h100", "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}},
)  # fmt: skip


@pytest.mark.parametrize(("where", "doc"), KUEUE_OBJECTS, ids=[where for where, _ in KUEUE_OBJECTS])
def test_every_kueue_object_in_deploy_is_valid_under_kueues_crds(where: str, doc: Json) -> None:
    schema = _kueue_schemas().get((doc["apiVersion"], doc["kind"]))
    assert schema is not None, f"{where}: Kueue serves no {doc['apiVersion']} {doc['kind']}"
    assert custom_resource_violations(doc, schema) == []


@pytest.mark.parametrize("values", CHART_VALUES)
def test_the_charts_kueue_objects_are_valid_under_kueues_crds(values: Json) -> None:
    docs = _render(values)
    assert [doc["kind"] for doc in docs] == ["Topology", "ResourceFlavor"]
    topology, flavor = docs
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == values["kueue"].get("topology", {}).get(
        "levels", ["topology.kubenexus.io/block", "topology.kubenexus.io/rack", "kubernetes.io/hostname"]
    )
    for doc in docs:
        assert custom_resource_violations(doc, _kueue_schemas()[(doc["apiVersion"], doc["kind"])]) == []


def test_kueue_off_renders_nothing_and_on_renders_exactly_deploy_kueue_topology() -> None:
    assert _render({}) == []
    assert _render({"kueue": {"enabled": True}}) == _documents(KUEUE / "topology.yaml")


@pytest.mark.parametrize(
    "values",
    [
        {"kueue": {"enabled": True, "topology": {"name": "kubenexus", "levels": []}}},
        {"kueue": {"enabled": True, "flavor": {"name": "Bad_Name"}}},
        {"kueue": {"enabled": "yes"}},
        {"kueue": {"enabled": True, "flavour": {}}},
    ],
)
def test_the_chart_refuses_kueue_values_kueue_would_refuse(values: Json) -> None:
    with pytest.raises(HelmValuesError):
        _render(values)


def test_the_queues_give_the_charts_flavor_and_each_team_a_local_queue() -> None:
    docs = _documents(KUEUE / "queues.yaml")
    (flavor,) = [doc for doc in _documents(KUEUE / "topology.yaml") if doc["kind"] == "ResourceFlavor"]
    queues = [doc for doc in docs if doc["kind"] == "ClusterQueue"]
    assert {f["name"] for q in queues for group in q["spec"]["resourceGroups"] for f in group["flavors"]} == {
        flavor["metadata"]["name"]}  # fmt: skip
    local = {(doc["metadata"]["namespace"], doc["spec"]["clusterQueue"]) for doc in docs if doc["kind"] == "LocalQueue"}
    assert local == {(q["metadata"]["name"], q["metadata"]["name"]) for q in queues}


def test_the_example_job_asks_for_a_level_of_the_topology_and_is_one_gang_the_service_accepts() -> None:
    (job,) = _documents(KUEUE / "training-job.yaml")
    (topology,) = [doc for doc in _documents(KUEUE / "topology.yaml") if doc["kind"] == "Topology"]
    template = job["spec"]["template"]
    levels = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] in levels
    (queue,) = [doc for doc in _documents(KUEUE / "queues.yaml") if doc["kind"] == "LocalQueue"
                and doc["metadata"]["namespace"] == job["metadata"]["namespace"]]  # fmt: skip
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue["metadata"]["name"]
    namespace = job["metadata"]["namespace"]
    pods = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {**template["metadata"], "name": f"llm-pretrain-{index}", "namespace": namespace},
         "spec": template["spec"]}
        for index in range(job["spec"]["parallelism"])
    ]  # fmt: skip
    for pod in pods:
        validate_pod(pod_spec_from_object(pod))
    keys = {group_of(pod) for pod in pods}
    (key,) = keys
    assert key is not None
    assert key.source == SOURCE_OURS
    assert label_group_definition(key, pods).min_member == job["spec"]["parallelism"]
