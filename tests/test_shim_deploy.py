"""deploy/placement/ and deploy/scheduler/: every document parses and agrees with the shim's code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kubenexus.kube.paths import NRTS_PATH
from placement.core.annotations import LEADER_LABEL
from placement.shim.flags import SCHEDULER_NAME

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def documents(folder: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / folder).glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    return docs


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in documents("placement") if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def test_rbac_grants_what_the_feed_the_binder_and_the_election_use_and_no_more() -> None:
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in one("ClusterRole")["rules"]}
    assert rules == {
        (("",), ("nodes",)): {"get", "list", "watch"},
        ((NRTS_PATH.split("/")[2],), ("noderesourcetopologies",)): {"get", "list", "watch"},
        (("",), ("pods",)): {"get", "list", "watch", "patch"},
        (("",), ("pods/binding",)): {"create"},
        (("",), ("events",)): {"create"},
    }
    lease_rules = one("Role")["rules"]
    assert {verb for rule in lease_rules for verb in rule["verbs"]} == {"create", "get", "update", "patch"}
    assert all(rule["apiGroups"] == ["coordination.k8s.io"] for rule in lease_rules)


def test_the_deployment_is_highly_available_and_unprivileged() -> None:
    deployment = one("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] >= 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    containers = {c["name"]: c for c in spec["containers"]}
    assert set(containers) == {"placement", "extender", "binder"}
    assert "--leader-elect" in containers["placement"]["args"]
    assert containers["placement"]["readinessProbe"]["grpc"]["port"] == 50051
    assert all(c["securityContext"]["allowPrivilegeEscalation"] is False for c in containers.values())
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_decisions_are_routed_to_the_leader() -> None:
    service = one("Service", "kubenexus-placement")
    assert service["spec"]["selector"][LEADER_LABEL] == "true"
    assert {p["name"] for p in service["spec"]["ports"]} == {"grpc", "extender", "metrics"}


def test_the_scheduler_configuration_wires_the_extender_into_the_kubenexus_profile() -> None:
    (config,) = documents("scheduler")
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in config["profiles"]] == [SCHEDULER_NAME]
    (extender,) = config["extenders"]
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["nodeCacheCapable"] is True
    assert extender["urlPrefix"].endswith(":8888")
    assert extender["weight"] >= 1
    assert extender["ignorable"] is False  # a KubeNexus pod is never bound without its NUMA placement
