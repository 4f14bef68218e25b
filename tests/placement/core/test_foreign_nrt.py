"""NodeResourceTopology objects another wrote (Node Feature Discovery's), read with what they tell
(``placement.core.foreign_nrt``), and placed on through the service's gRPC socket with a note that says so."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from kubenexus.topology.json_codec import TopologyDecodeError
from kubenexus.topology.model import Distances, KubeletSettings, ResourceAmount
from placement.api.v1 import placement_pb2 as pb
from placement.core.foreign_nrt import decode_foreign_nrt
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import kubelet, nvswitch_node
from tests.nfd_objects import GIB, NFD_FIELD_MANAGER, as_applied, nfd_nrt


def test_an_nfd_object_gives_cells_amounts_distances_and_the_kubelets_policy() -> None:
    topology = decode_foreign_nrt(as_applied(nfd_nrt("gpu-1", fingerprint="pfp0v001abcd")))
    assert [cell.id for cell in topology.numa_cells] == [0, 1]
    assert [cell.memory_bytes for cell in topology.numa_cells] == [256 * GIB, 256 * GIB]
    assert topology.zone_resources[0].resources == (
        ResourceAmount("cpu", 32, 30, 30),
        ResourceAmount("hugepages-1Gi", 4 * GIB, 4 * GIB, 4 * GIB),
        ResourceAmount("memory", 256 * GIB, 252 * GIB, 252 * GIB),
        ResourceAmount("nvidia.com/gpu", 4, 4, 4),
    )
    assert topology.distances == Distances((0, 1), ((10, 21), (21, 10)))
    assert topology.kubelet == KubeletSettings("single-numa-node", "container", "static", "Static")
    assert topology.pods_fingerprint == "pfp0v001abcd"
    assert topology.gpus == ()  # a count per cell: no identities
    [warning] = topology.warnings
    assert warning.message.startswith(
        f"node gpu-1: topology from its NodeResourceTopology (written by {NFD_FIELD_MANAGER}, no KubeNexus agent "
        "report): NUMA cells, their amounts and distances only; GPUs placed by count per cell"
    )


def test_without_alignment_the_managers_are_not_taken_as_static() -> None:
    topology = decode_foreign_nrt(nfd_nrt("n", policy="none"))
    assert topology.kubelet == KubeletSettings("none", "container", "none", "None")


def test_the_deprecated_policies_field_is_read_when_the_attributes_are_missing() -> None:
    nrt = nfd_nrt("n", scope="pod")
    del nrt["attributes"]
    assert decode_foreign_nrt(nrt).kubelet == KubeletSettings("single-numa-node", "pod", "static", "Static")


def _broken(change: Any) -> dict[str, Any]:
    nrt = copy.deepcopy(nfd_nrt("n"))
    change(nrt)
    return nrt


@pytest.mark.parametrize(
    ("nrt", "message"),
    [
        (_broken(lambda o: o.update(zones={"node-0": {}})), "NodeResourceTopology n: zones must be a list"),
        (
            _broken(lambda o: o["zones"][1].update(name="numa-1")),
            "NodeResourceTopology n: zones[1].name: 'numa-1' is not a NUMA zone name; accepted: node-<id>",
        ),
        (_broken(lambda o: o["zones"][1].update(name="node-0")), "NodeResourceTopology n: zone node-0 appears twice"),
        (
            _broken(lambda o: o["zones"][0]["resources"][0].update(available="lots")),
            "NodeResourceTopology n: zone node-0: resources[0] (cpu).available: 'lots' is not a Kubernetes quantity",
        ),
        (
            _broken(lambda o: o["zones"][0]["resources"][3].update(capacity="-4")),
            "NodeResourceTopology n: zone node-0: resources[3] (nvidia.com/gpu).capacity: '-4' is negative",
        ),
        (
            _broken(lambda o: o["zones"][0]["costs"][1].update(value=0)),
            "NodeResourceTopology n: zone node-0: costs[1].value 0 is not a distance (1-255)",
        ),
        (
            _broken(lambda o: o["attributes"][0].update(value="tight")),
            "NodeResourceTopology n: attribute topologyManagerPolicy='tight' is unknown; accepted: none | "
            "best-effort | restricted | single-numa-node",
        ),
        (
            _broken(lambda o: [z.update(type="Socket") for z in o["zones"]]),
            "NodeResourceTopology n: no zone of type Node named node-<id>: no NUMA cell to read",
        ),
        (_broken(lambda o: o.update(kind="Node")), "not a topology.node.k8s.io/v1alpha2 NodeResourceTopology"),
    ],
)
def test_a_malformed_object_is_refused_with_what_is_wrong(nrt: dict[str, Any], message: str) -> None:
    with pytest.raises(TopologyDecodeError) as refused:
        decode_foreign_nrt(nrt)
    assert str(refused.value).startswith(message)


# -- placed on, through the gRPC socket --------------------------------------------------------------------


@pytest.fixture
def stub() -> Iterator[Any]:
    """Two nodes: ``nfd`` known from NFD's object only (cell 0 holds 2 of its 4 GPUs), ``agent`` from the agent."""
    index = ClusterIndex()
    used = {0: {"nvidia.com/gpu": 2, "cpu": 4}}
    index.upsert_topology("nfd", decode_foreign_nrt(as_applied(nfd_nrt("nfd", used=used))))
    index.upsert_topology("agent", nvswitch_node(cells=2, settings=kubelet("single-numa-node", "container")))
    running = RunningServer(PlacementEngine.over(index))
    try:
        yield running.stub
    finally:
        running.close()


def _pod(name: str, gpus: int, cpus: int = 4) -> pb.Pod:
    resources = {"cpu": str(cpus), "memory": "16Gi", "nvidia.com/gpu": str(gpus)}
    return pb.Pod(
        namespace="ml", name=name, containers=[pb.Container(name="main", requests=resources, limits=resources)]
    )


def test_a_pod_lands_in_the_cell_nfd_says_has_room_and_the_placement_says_what_was_unknown(stub: Any) -> None:
    answer = stub.Reserve(pb.ReserveRequest(pod=_pod("four", gpus=4), node_names=["nfd"]))
    assert answer.reserved
    placement = answer.placement
    assert (placement.node, list(placement.numa_cells), list(placement.gpu_ids)) == ("nfd", [1], [])
    [note] = placement.notes
    assert f"written by {NFD_FIELD_MANAGER}" in note
    assert "GPUs placed by count per cell" in note
    # The agent's node: GPU indexes chosen, nothing to note.
    agent = stub.Reserve(pb.ReserveRequest(pod=_pod("two", gpus=2), node_names=["agent"])).placement
    assert (len(agent.gpu_ids), list(agent.notes)) == (2, [])
    view = stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="nfd"))
    assert list(view.notes) == [note]
    assert [(cell.id, {r.name: r.free for r in cell.resources}["nvidia.com/gpu"]) for cell in view.cells] == [
        (0, "2"),
        (1, "0"),
    ]


def test_the_kubelets_single_numa_node_admission_is_judged_on_nfds_amounts(stub: Any) -> None:
    # The node has 6 GPUs and 58 CPUs free, but no cell holds 5 GPUs (2 and 4 free) or 33 CPUs (26 and 32).
    for pod in (_pod("five", gpus=5), _pod("wide", gpus=1, cpus=33)):
        answer = stub.Filter(pb.FilterRequest(pod=pod, node_names=["nfd"]))
        assert not answer.feasible_nodes
        assert [(group.reason, group.kind) for group in answer.rejected] == [
            ("kubelet single-numa-node: no single NUMA cell is preferred by every resource",
             pb.REJECTION_KIND_KUBELET_TOPOLOGY)]  # fmt: skip
    fits = stub.Filter(pb.FilterRequest(pod=_pod("narrow", gpus=4, cpus=32), node_names=["nfd"]))
    assert list(fits.feasible_nodes) == ["nfd"]
