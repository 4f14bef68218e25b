"""Workload policies through the engine and over gRPC: services spread, batch packs, tenants prefer their pools.

Pods are Kubernetes Pod objects as the shim sends them (``pod_json``): the controller comes from
``metadata.ownerReferences``. Every behaviour is also checked against the same cluster with the policy's
weight at 0, so each test fails if the component were missing.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import NodeFacts
from placement.core.pods import pod_spec_from_json
from placement.core.workload_policies import (
    WORKLOAD_CLASS_KEY,
    PolicyConfigError,
    WorkloadClass,
    WorkloadPolicies,
    parse_workload_policies,
    workload_key,
)
from placement.main import main
from placement.service.engine import PlacementEngine
from placement.service.errors import InvalidRequest
from placement.state.cluster_index import ClusterIndex
from tests.deploy.test_shim_deploy import containers, one, parsed
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import GIB, cpu_node, kubelet

NODES = ("node-a", "node-b", "node-c", "node-d")
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
TIERED = {
    "tiers": [
        {"name": "premium", "pools": [{"matchLabels": H100}, {"matchLabels": A100}]},
        {"name": "standard", "pools": [{"matchLabels": A100}]},
        {"name": "best-effort"},
    ],
    "tenants": [
        {"tier": "premium", "namespaces": ["research"]},
        {
            "tier": "standard",
            "podSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["data"]}]},
        },
    ],
    "defaultTier": "best-effort",
}


def _engine(policies: WorkloadPolicies, *, labels: dict[str, dict[str, str]] | None = None) -> PlacementEngine:
    index = ClusterIndex(policies=policies)
    for name in NODES:
        index.upsert_topology(name, cpu_node(cpus_per_cell=16, memory_per_cell=64 * GIB, settings=kubelet("none")))
        node_labels = {"kubernetes.io/hostname": name} | (labels or {}).get(name, {})
        index.facts.set_node(NodeFacts(name, labels=tuple(sorted(node_labels.items()))))
    return PlacementEngine.over(index)


def _pod(
    name: str,
    *,
    namespace: str = "apps",
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "2",
) -> Any:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    metadata["annotations"] = annotations or {}
    if owner is not None:
        kind, owner_name = owner
        reference = {"apiVersion": "apps/v1", "kind": kind, "name": owner_name, "uid": f"uid-{owner_name}"}
        metadata["ownerReferences"] = [reference | {"controller": True, "blockOwnerDeletion": True}]
    resources = {"cpu": cpu, "memory": "2Gi"}
    container = {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container]}}


def _reserve(engine: PlacementEngine, pod: Any) -> str:
    outcome = engine.reserve(pod_spec_from_json(json.dumps(pod)))
    assert outcome.placement is not None, outcome.rejected
    return outcome.placement.node


def _web(i: int) -> Any:
    """A pod of the Deployment "web": its ReplicaSet web-7d9f8 carries the pod-template-hash."""
    return _pod(f"web-7d9f8-{i}", owner=("ReplicaSet", "web-7d9f8"), labels={"pod-template-hash": "7d9f8"})


def test_a_deployments_pods_spread_over_the_nodes_while_job_pods_pack() -> None:
    engine = _engine(WorkloadPolicies(batch_weight=2))
    web = [_reserve(engine, _web(i)) for i in range(4)]
    assert sorted(web) == sorted(NODES)  # one per node

    jobs = [_reserve(engine, _pod(f"train-{i}", owner=("Job", "train"))) for i in range(4)]
    assert len(set(jobs)) == 1  # packed on one node

    # Without the component, the topology score alone packs the Deployment too.
    plain = _engine(WorkloadPolicies(workload_weight=0))
    assert len({_reserve(plain, _web(i)) for i in range(4)}) < len(NODES)


def test_batch_pods_get_no_workload_component_by_default() -> None:
    """Batch pods are packed by the topology score; the workload component packs them only when
    ``weights.batch`` asks (it cost GPUs on the trace), while services spread by default."""
    engine = _engine(WorkloadPolicies())
    _reserve(engine, _pod("busy", owner=("Job", "busy"), cpu="6"))
    assert "workload" not in engine.score(pod_spec_from_json(json.dumps(_pod("batch", owner=("Job", "o"))))).weights
    assert "workload" in engine.score(pod_spec_from_json(json.dumps(_web(0)))).weights
    assert parse_workload_policies({"weights": {"batch": 2}}).batch_weight == 2


def test_score_ranks_the_fuller_node_first_for_batch_and_last_for_a_service() -> None:
    engine = _engine(WorkloadPolicies(batch_weight=2))
    for i in range(3):
        _reserve(engine, _pod(f"busy-{i}", owner=("Job", "busy"), cpu="6"))
    busiest = Counter(p.node for p in engine.index.facts.placed_pods()[0]).most_common(1)[0][0]

    batch = engine.score(pod_spec_from_json(json.dumps(_pod("batch", owner=("Job", "other")))))
    assert batch.nodes[0] == busiest
    points = dict(zip(batch.nodes, batch.points["workload"], strict=True))
    assert points[busiest] == max(points.values())

    service = engine.score(pod_spec_from_json(json.dumps(_web(0))))
    assert service.nodes[-1] == busiest
    assert "workload" in service.weights


def test_spread_counts_the_pods_of_every_replicaset_of_one_deployment_and_statefulsets() -> None:
    assert workload_key("ReplicaSet", "web-7d9f8", {"pod-template-hash": "7d9f8"}) == "Deployment/web"
    assert workload_key("ReplicaSet", "cache", {}) == "ReplicaSet/cache"
    assert workload_key("StatefulSet", "db", {}) == "StatefulSet/db"
    assert workload_key("", "", {}) == ""
    engine = _engine(WorkloadPolicies())
    old = [_reserve(engine, _web(i)) for i in range(2)]
    rollout = _pod("web-55c4b-0", owner=("ReplicaSet", "web-55c4b"), labels={"pod-template-hash": "55c4b"})
    assert _reserve(engine, rollout) not in old  # the new ReplicaSet's pod avoids the old one's nodes
    db = [_reserve(engine, _pod(f"db-{i}", owner=("StatefulSet", "db"))) for i in range(4)]
    assert sorted(db) == sorted(NODES)


def test_the_workload_class_override_and_gang_members() -> None:
    policies = WorkloadPolicies()
    assert policies.workload_class("ReplicaSet", {}, {}) is WorkloadClass.SERVICE
    assert policies.workload_class("Job", {}, {}) is WorkloadClass.BATCH
    assert policies.workload_class("", {}, {}) is WorkloadClass.BATCH
    gang = {"pod-group.scheduling.kubenexus.io/name": "g"}
    assert policies.workload_class("StatefulSet", gang, {}) is WorkloadClass.BATCH
    assert policies.workload_class("Job", {WORKLOAD_CLASS_KEY: "service"}, {}) is WorkloadClass.SERVICE
    stated = {WORKLOAD_CLASS_KEY: "none"}
    assert policies.workload_class("ReplicaSet", {WORKLOAD_CLASS_KEY: "batch"}, stated) is WorkloadClass.NONE

    engine = _engine(policies)
    overridden = [
        _reserve(engine, _pod(f"w-{i}", owner=("ReplicaSet", "w-1"), annotations={WORKLOAD_CLASS_KEY: "batch"}))
        for i in range(3)
    ]
    assert len(set(overridden)) == 1
    bad = _pod("bad", annotations={WORKLOAD_CLASS_KEY: "spready"})
    with pytest.raises(InvalidRequest, match=r"scheduling.kubenexus.io/workload-class.*service, batch, none"):
        engine.reserve(pod_spec_from_json(json.dumps(bad)))


def test_tenants_prefer_their_tiers_pools_and_are_never_filtered() -> None:
    labels = {"node-a": H100, "node-b": A100, "node-c": A100}
    policies = parse_workload_policies(TIERED | {"weights": {"workload": 0}})
    engine = _engine(policies, labels=labels)
    assert _reserve(engine, _pod("p0", namespace="research")) == "node-a"
    assert _reserve(engine, _pod("s0", labels={"team": "data"})) in {"node-b", "node-c"}
    scored = engine.score(pod_spec_from_json(json.dumps(_pod("p1", namespace="research"))))
    points = dict(zip(scored.nodes, scored.points["tenant"], strict=True))
    assert points["node-a"] > points["node-b"] > points["node-d"] == 0  # first pool, second pool, none

    # The pool full: a premium pod still lands, elsewhere.
    for i in range(7):
        _reserve(engine, _pod(f"fill-{i}", namespace="research", cpu="4"))
    landed = _reserve(engine, _pod("late", namespace="research", cpu="4"))
    assert landed != "node-a"

    # Without tiers the same pod has no tenant preference at all.
    plain = _engine(WorkloadPolicies(workload_weight=0), labels=labels)
    assert "tenant" not in plain.score(pod_spec_from_json(json.dumps(_pod("p0", namespace="research")))).weights


def test_tenant_tier_orders_tiers_for_the_preemption_tie_break() -> None:
    policies = parse_workload_policies(TIERED)
    assert policies.tenant_tier("research", {}) == 3
    assert policies.tenant_tier("apps", {"team": "data"}) == 2
    assert policies.tenant_tier("apps", {}) == 1  # the default tier, best-effort
    assert parse_workload_policies({"tiers": [{"name": "gold"}]}).tenant_tier("apps", {}) == 0


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"weight": {}}, "unknown key 'weight'; accepted: weights, services, tiers, tenants, defaultTier"),
        ({"weights": {"workload": -1}}, "weights.workload: -1 is out of range; accepted: 0 (off) to 100"),
        ({"weights": {"tenant": "high"}}, "weights.tenant: 'high' is not a number"),
        ({"weights": {"tenant": True}}, "weights.tenant: True is not a number"),
        ({"tiers": [{"name": "a"}, {"name": "a"}]}, "the tier 'a' is defined twice"),
        ({"tiers": [{"name": "a", "pools": [{}]}]}, "tiers[0].pools[0]: an empty selector selects everything"),
        (
            {"tiers": [{"name": "a", "pools": [{"matchLabels": {"bad key!": "x"}}]}]},
            "tiers[0].pools[0]: ",
        ),
        (
            {
                "tiers": [
                    {"name": "a", "pools": [{"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]}]}
                ]
            },
            "operator: 'Gt' is not accepted; accepted: In, NotIn, Exists, DoesNotExist",
        ),
        ({"tenants": [{"tier": "gold", "namespaces": ["x"]}]}, "tenants[0].tier: 'gold' is not a tier"),
        ({"tiers": [{"name": "a"}], "tenants": [{"tier": "a"}]}, "tenants[0]: a tenant needs namespaces"),
        ({"defaultTier": "gold"}, "defaultTier: 'gold' is not a tier"),
        ({"services": {"ownerKinds": "ReplicaSet"}}, "services.ownerKinds must be a list"),
        ([1, 2], "the workload policies must be a mapping"),
    ],
)
def test_configuration_errors_name_the_key_and_what_is_accepted(document: Any, message: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        parse_workload_policies(document)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_serve_refuses_a_bad_policies_file_with_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "policies.yaml"
    bad.write_text("weights:\n  workload: lots\n", encoding="utf-8")
    assert main(["serve", "--demo", "--listen", "127.0.0.1:0", "--workload-policies", str(bad)]) == 2
    error = capsys.readouterr().err.strip()
    expected = f"--workload-policies {bad}: weights.workload: 'lots' is not a number; accepted: 0 (off) to 100"
    assert error == f"kubenexus-placement: {expected}"
    missing = tmp_path / "absent.yaml"
    assert main(["serve", "--demo", "--listen", "127.0.0.1:0", "--workload-policies", str(missing)]) == 2
    assert "cannot read it" in capsys.readouterr().err


def test_the_deployment_reads_the_sample_configmap_and_it_is_a_valid_configuration() -> None:
    """The flag's file is a key of the ConfigMap the placement container mounts; the sample parses."""
    configmap = one("ConfigMap", "kubenexus-workload-policies")
    flag = PurePosixPath(parsed("placement").workload_policies)
    volumes = {v["name"]: v for v in one("Deployment")["spec"]["template"]["spec"]["volumes"]}
    mounts = {PurePosixPath(m["mountPath"]): volumes[m["name"]] for m in containers()["placement"]["volumeMounts"]}
    assert mounts[flag.parent]["configMap"]["name"] == configmap["metadata"]["name"]
    policies = parse_workload_policies(yaml.safe_load(configmap["data"][flag.name]))
    assert [tier.name for tier in policies.tiers] == ["premium", "standard", "best-effort"]
    assert policies.tenant_tier("research", {}) == 3


def test_the_components_reach_the_api_breakdown_over_grpc() -> None:
    engine = _engine(parse_workload_policies(TIERED), labels={"node-a": H100})
    _reserve(engine, _web(0))
    running = RunningServer(engine)
    try:
        answer = running.stub.Score(pb.ScoreRequest(pod_json=json.dumps(_web(1)), node_names=list(NODES)))
        names = {component.name for component in answer.breakdown}
        assert "workload" in names
        placed = next(p.node for p in engine.index.facts.placed_pods()[0])
        assert answer.nodes[-1] == placed  # its sibling's node comes last
        premium = _pod("p", namespace="research")
        answer = running.stub.Score(pb.ScoreRequest(pod_json=json.dumps(premium), node_names=list(NODES)))
        assert "tenant" in {component.name for component in answer.breakdown}
        assert answer.nodes[0] == "node-a"
    finally:
        running.close()
