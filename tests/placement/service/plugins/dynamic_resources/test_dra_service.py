"""DRA in the placement service, over a real gRPC socket: Filter, Score, Explain and Reserve judge a pod's
ResourceClaims with the device model (what extender mode steers kube-scheduler with), and the pod's claim
entries are read and validated as the API server reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import grpc
import pytest

from kubenexus.topology.model import NodeTopology
from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import NodeFacts
from placement.core.dra.claims import parse_device_class, parse_resource_claim
from placement.core.dra.pod_claims import ClaimsUnusable, PodResourceClaim, resolve_pod_claims
from placement.core.dra.slices import parse_resource_slice
from placement.core.pods import PodParseError, pod_spec_from_object, validate_pod
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests.dra_cluster import fixture_slice, gpu_claim, gpu_class, joined_topology
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import nvswitch_node, pcie_node

NVSWITCH = "alloc_nvswitch_8gpu.yaml"
PCIE = "alloc_pcie_bridged_8gpu.yaml"


class Cluster:
    """Nodes with the agent's topology, their ResourceSlices, the GPU DeviceClass; an engine and a server."""

    def __init__(self, machines: dict[str, tuple[str, NodeTopology]]) -> None:
        self.index = ClusterIndex()
        for name, (file, agent) in machines.items():
            resource_slice = fixture_slice(file, name)
            self.index.upsert_topology(name, joined_topology(agent, resource_slice))
            self.index.facts.set_node(NodeFacts(name, labels=(("kubernetes.io/hostname", name),)))
            self.index.dra.set_slice(name, parse_resource_slice(resource_slice))
        self.index.dra.set_class("gpu.nvidia.com", parse_device_class(gpu_class()))
        self.engine = PlacementEngine.over(self.index)
        self.server = RunningServer(self.engine)
        self.stub = self.server.stub

    def claim(self, obj: dict[str, Any]) -> None:
        self.index.dra.set_claim(parse_resource_claim(obj))


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    made = Cluster({"nv": (NVSWITCH, nvswitch_node()), "pcie": (PCIE, pcie_node())})
    yield made
    made.server.close()


def _pod(claim: str, *, name: str = "trainer", cpus: int = 8) -> str:
    resources = {"cpu": str(cpus), "memory": "16Gi"}
    return json.dumps(
        {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {
                "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}],
            },
        }
    )


def test_filter_keeps_the_nodes_where_the_claims_fit(cluster: Cluster) -> None:
    cluster.claim(gpu_claim("four", 4))
    held = gpu_claim("held", 6)
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "pcie", "device": f"gpu-{i}"}
                    for i in range(6)
                ]
            }
        }
    }
    cluster.claim(held)
    answer = cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("four")))
    assert list(answer.feasible_nodes) == ["nv"]
    ((reason, nodes),) = [(group.reason, list(group.nodes)) for group in answer.rejected]
    assert nodes == ["pcie"]
    assert reason.startswith("cannot allocate all claims: ")
    assert "claim default/four, request gpus: 8 devices match, 2 not allocated, 4 wanted" in reason


def test_score_prefers_the_node_with_the_better_connected_set(cluster: Cluster) -> None:
    """Two free GPUs on each node: an NVSwitch pair (18 NVLinks) against an unbridged PCIe pair."""
    cluster.claim(gpu_claim("two", 2))
    for node, kept in (("nv", (0, 1)), ("pcie", (0, 1))):  # PCIe GPUs 0 and 1 are not bridged (0-2, 1-3 are)
        held = gpu_claim(f"held-{node}", 6)
        held["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpus", "driver": "gpu.nvidia.com", "pool": node, "device": f"gpu-{i}"}
                        for i in range(8)
                        if i not in kept
                    ]
                }
            }
        }
        cluster.claim(held)
    scored = cluster.stub.Score(pb.ScoreRequest(pod_json=_pod("two")))
    assert list(scored.nodes) == ["nv", "pcie"]
    points = {c.name: list(c.points) for c in scored.breakdown}
    assert points["devices"][0] > points["devices"][1]


def test_explain_shows_the_devices_and_why(cluster: Cluster) -> None:
    cluster.claim(gpu_claim("four", 4))
    explained = cluster.stub.Explain(pb.ExplainRequest(pod_json=_pod("four"), node="pcie"))
    assert explained.placeable
    (claim,) = explained.placement.claims
    assert (claim.namespace, claim.name) == ("default", "four")
    devices = {int(d.device.removeprefix("gpu-")) for d in claim.devices}
    assert devices == {0, 1, 2, 3}  # two bridged pairs (0-2, 1-3) on cell 0, where the pod's CPUs go
    assert any(line.startswith("NUMA alignment 1.00 (with cell 0") for line in claim.why)
    allocation = json.loads(claim.allocation_json)
    assert [r["device"] for r in allocation["devices"]["results"]] == [d.device for d in claim.devices]
    assert cluster.engine.reservations.pending() == {}  # Explain reserves nothing


def test_reserve_holds_the_devices_so_the_next_pod_gets_others(cluster: Cluster) -> None:
    cluster.claim(gpu_claim("first", 4))
    cluster.claim(gpu_claim("second", 4))
    first = cluster.stub.Reserve(pb.ReserveRequest(pod_json=_pod("first", name="a"), node_names=["nv"]))
    second = cluster.stub.Reserve(pb.ReserveRequest(pod_json=_pod("second", name="b"), node_names=["nv"]))
    assert first.reserved
    assert second.reserved
    taken = [{d.device for d in answer.placement.claims[0].devices} for answer in (first, second)]
    assert taken[0].isdisjoint(taken[1])
    cluster.claim(gpu_claim("third", 1))
    refused = cluster.stub.Reserve(pb.ReserveRequest(pod_json=_pod("third", name="c"), node_names=["nv"]))
    assert not refused.reserved
    cluster.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="default", name="a")))
    again = cluster.stub.Reserve(pb.ReserveRequest(pod_json=_pod("third", name="c"), node_names=["nv"]))
    assert again.reserved  # the released reservation gave its devices back


def test_an_allocated_claim_keeps_the_pod_where_its_devices_are(cluster: Cluster) -> None:
    claim = gpu_claim("placed", 1)
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "pcie", "device": "gpu-3"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["pcie"]}]}]
            },
        }
    }
    cluster.claim(claim)
    answer = cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("placed")))
    assert list(answer.feasible_nodes) == ["pcie"]
    assert [(g.reason, list(g.nodes)) for g in answer.rejected] == [("resourceclaim not available on the node", ["nv"])]
    reserved = cluster.stub.Reserve(pb.ReserveRequest(pod_json=_pod("placed")))
    (kept,) = reserved.placement.claims
    assert (kept.allocation_json, [d.device for d in kept.devices]) == ("", ["gpu-3"])  # reserved, not reallocated


def test_a_selector_error_is_a_clear_reason_never_a_match(cluster: Cluster) -> None:
    cluster.claim(gpu_claim("bad", 1, selector="device.attributes['gpu.nvidia.com'].nosuch == 'x'"))
    answer = cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("bad")))
    assert list(answer.feasible_nodes) == []
    reasons = {node: group.reason for group in answer.rejected for node in group.nodes}
    assert sorted(reasons) == ["nv", "pcie"]
    for node, reason in reasons.items():  # the device it failed on, the expression, and why
        assert f"device gpu.nvidia.com/{node}/gpu-0: CEL selector" in reason
        assert reason.endswith("runtime error: no such key: 'nosuch'")


def test_the_pod_message_carries_claims_as_pod_json_does(cluster: Cluster) -> None:
    cluster.claim(gpu_claim("four", 4))
    resources = {"cpu": "8", "memory": "16Gi"}
    message = pb.Pod(
        namespace="default",
        name="trainer",
        uid="uid-trainer",
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
        resource_claims=[pb.PodResourceClaim(name="gpus", resource_claim_name="four")],
    )
    by_message = cluster.stub.Filter(pb.FilterRequest(pod=message))
    by_json = cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("four")))
    assert list(by_message.feasible_nodes) == list(by_json.feasible_nodes) == ["nv", "pcie"]


# --- the pod's claim entries -------------------------------------------------------------------------------------


def _entries(claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
        "spec": {"containers": [{"name": "main"}], "resourceClaims": claims},
    }
    if statuses is not None:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod


@pytest.mark.parametrize(
    ("claims", "error"),
    [
        ([{"name": "gpus"}], "exactly one of resourceClaimName and resourceClaimTemplateName"),
        (
            [{"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}],
            "exactly one of resourceClaimName and resourceClaimTemplateName",
        ),
        ([{"name": "gpus", "resourceClaimName": "a"}, {"name": "gpus", "resourceClaimName": "b"}], "Duplicate"),
        ([{"name": "GPUs", "resourceClaimName": "a"}], "must be a DNS label"),
        ([{"resourceClaimName": "a"}], "name: Required value"),
        ([{"name": f"c{i}", "resourceClaimName": "a"} for i in range(33)], "Too many: 33: must have at most 32"),
    ],
)
def test_claim_entries_are_validated_as_the_api_server_does(claims: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(PodParseError, match=error):
        validate_pod(pod_spec_from_object(_entries(claims)))


def test_claim_statuses_name_the_claims_made_from_templates() -> None:
    spec = pod_spec_from_object(
        _entries(
            [
                {"name": "gpus", "resourceClaimTemplateName": "t"},
                {"name": "extra", "resourceClaimTemplateName": "t"},
                {"name": "late", "resourceClaimTemplateName": "t"},
            ],
            [{"name": "gpus", "resourceClaimName": "p-gpus-abcde"}, {"name": "extra"}],
        )
    )
    assert spec.resource_claims == (
        PodResourceClaim("gpus", template_name="t", listed=True, generated_name="p-gpus-abcde"),
        PodResourceClaim("extra", template_name="t", listed=True, generated_name=None),
        PodResourceClaim("late", template_name="t"),
    )


def test_claims_resolve_as_the_dynamic_resources_plugin_finds_them() -> None:
    owned = parse_resource_claim(
        gpu_claim("p-gpus-abcde", 1, namespace="ml")
        | {
            "metadata": {
                "name": "p-gpus-abcde",
                "namespace": "ml",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
                ],
            }
        }
    )
    foreign = replace(owned, name="other", controller_uid="uid-q")
    claims = {owned.name: owned, foreign.name: foreign}

    def resolve(*entries: PodResourceClaim) -> list[str]:
        found = resolve_pod_claims(
            "ml", "p", "uid-p", entries, claim=lambda ns, n: claims.get(n), owned_claim=lambda ns, uid, e: None
        )
        return [claim.name for claim in found.claims]

    assert resolve(PodResourceClaim("gpus", template_name="t", listed=True, generated_name="p-gpus-abcde")) == [
        "p-gpus-abcde"
    ]
    assert resolve(PodResourceClaim("gpus", template_name="t", listed=True)) == []  # none needed
    with pytest.raises(ClaimsUnusable, match='pod "ml/p": ResourceClaim not created yet'):
        resolve(PodResourceClaim("gpus", template_name="t"))
    with pytest.raises(ClaimsUnusable, match="was not created for pod ml/p \\(pod is not owner\\)"):
        resolve(PodResourceClaim("gpus", template_name="t", listed=True, generated_name="other"))
    with pytest.raises(ClaimsUnusable, match=r'resourceclaim\.resource\.k8s\.io "gone" not found'):
        resolve(PodResourceClaim("gpus", claim_name="gone"))
    claims["deleting"] = replace(owned, name="deleting", deleting=True)
    with pytest.raises(ClaimsUnusable, match='resourceclaim "deleting" is being deleted'):
        resolve(PodResourceClaim("gpus", claim_name="deleting"))


def test_an_invalid_claim_entry_is_an_invalid_request_over_grpc(cluster: Cluster) -> None:
    pod = json.loads(_pod("four"))
    pod["spec"]["resourceClaims"] = [{"name": "gpus"}]
    with pytest.raises(grpc.RpcError) as raised:
        cluster.stub.Filter(pb.FilterRequest(pod_json=json.dumps(pod)))
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.resourceClaims[0]" in str(raised.value.details())


def test_kept_answers_follow_a_slot_to_its_new_node(cluster: Cluster) -> None:
    """A node that leaves frees its slot; the node given that slot next is judged afresh, not by the kept
    answer of the one before."""
    cluster.claim(gpu_claim("four", 4))
    assert list(cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("four"))).feasible_nodes) == ["nv", "pcie"]
    slot = cluster.index.slot_of("pcie")
    cluster.index.remove_node("pcie")
    cluster.index.upsert_topology("cpu-only", pcie_node())  # no slice names it: no devices
    cluster.index.facts.set_node(NodeFacts("cpu-only"))
    assert cluster.index.slot_of("cpu-only") == slot
    answer = cluster.stub.Filter(pb.FilterRequest(pod_json=_pod("four")))
    assert list(answer.feasible_nodes) == ["nv"]
    assert [list(group.nodes) for group in answer.rejected] == [["cpu-only"]]
