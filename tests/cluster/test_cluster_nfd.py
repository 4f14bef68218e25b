"""Beside Node Feature Discovery, on the real kube-apiserver v1.37: nfd-topology-updater's NodeResourceTopology
objects applied as it applies them (server-side, field manager ``node-feature-discovery-topology-updater``,
``Force``, owned by its Namespace; tests/nfd_objects.py), ``kubenexus-agent run`` unchanged as its
ServiceAccount, and ``kubenexus-placement serve`` as its own.

* The agent never writes an NRT NFD applies, whichever came first: the two do not fight over the object.
* The service reads an agent's node from the agent's Node annotation (every detail), and a node without the
  agent from NFD's object (NUMA cells and amounts), each placement there saying so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.main import main as agent_main
from kubenexus.kube.client import Json
from kubenexus.topology.labels import MODEL_KEY
from kubenexus.topology.nrt import written_by_kubenexus
from placement.api.v1 import placement_pb2 as pb
from placement.shim.client import PlacementClient
from tests.cluster.test_cluster_service import make_namespace, pod
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, agent_kubeconfig, placement_kubeconfig
from tests.fake_sysfs import build_two_socket_host, write
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import L40S_4X
from tests.nfd_objects import NFD_FIELD_MANAGER, NFD_NAMESPACE, nfd_nrt
from tests.placement.api.test_placement_grpcurl import grpcurl
from tests.programs import Service, agent_logs

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
NAMESPACE = "nfd-tests"
NFD_ONLY, BOTH, AGENT_FIRST = "nfd-tests-nfd-only", "nfd-tests-both", "nfd-tests-agent-first"
LATE_NFD = "nfd-tests-late-nfd"  # NFD installed while the service runs
SYSTEM_NODE = "nfd-tests-system"  # the placement pod's node: no report, never placed on
CHANGE_S = 60.0  # a deadline, not a wait


class Nfd:
    """nfd-topology-updater's writes: ``kubectl apply --server-side --force-conflicts`` under its field manager,
    the same PATCH its client-go Apply sends."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        make_namespace(plane, NFD_NAMESPACE)
        namespace = plane.admin.get(f"/api/v1/namespaces/{NFD_NAMESPACE}")
        assert namespace is not None
        self.uid = namespace["metadata"]["uid"]

    def apply(self, node: str, **shape: Any) -> Json:
        body = yaml.safe_dump(nfd_nrt(node, namespace_uid=self.uid, **shape))
        self.plane.kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={NFD_FIELD_MANAGER}",
                           "-f", "-", input_text=body)  # fmt: skip
        return self.read(node)

    def read(self, node: str) -> Json:
        stored = self.plane.admin.get(f"{NRT_PATH}/{node}")
        assert stored is not None
        return stored


@pytest.fixture(scope="module")
def nfd(control_plane: ControlPlane) -> Iterator[Nfd]:
    made = Nfd(control_plane)
    make_namespace(control_plane, NAMESPACE)
    nodes = (NFD_ONLY, BOTH, AGENT_FIRST, LATE_NFD, SYSTEM_NODE)
    for node in nodes:
        control_plane.create_node(node, capacity={"nvidia.com/gpu": "4"})
    try:
        yield made
    finally:
        for node in nodes:
            control_plane.delete(f"/api/v1/nodes/{node}")
            control_plane.delete(f"{NRT_PATH}/{node}")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_gpu_sysfs(build_two_socket_host(tmp_path_factory.mktemp("nfd-host") / "host"), L40S_4X)
    write(root, "/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\n")
    return root


def run_agent(
    plane: ControlPlane, node: str, host: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> list[Json]:
    """One pass of ``kubenexus-agent run`` (the DaemonSet's ``--mode=both``) as the agent of ``node``; its logs."""
    kubeconfig = agent_kubeconfig(plane, node, folder / f"agent-{node}.kubeconfig")
    capsys.readouterr()
    code = agent_main(["run", "--node-name", node, "--host-root", str(host), "--no-nvml", "--kubeconfig",
                       str(kubeconfig), "--pod-resources-socket", "", "--once", "--mode", "both"])  # fmt: skip
    logs = agent_logs(capsys.readouterr().err)
    assert code == 0, logs
    return logs


def nrt_left(logs: list[Json]) -> list[Json]:
    return [line for line in logs if line.get("target") == "nrt" and line.get("outcome") == "left"]


def test_the_agent_leaves_an_nrt_nfd_applied_and_publishes_on_the_node(
    control_plane: ControlPlane, nfd: Nfd, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    applied = nfd.apply(BOTH)
    logs = run_agent(control_plane, BOTH, host, tmp_path, capsys)
    assert nfd.read(BOTH)["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]  # not written
    [warning] = nrt_left(logs)
    assert warning["level"] == "warning"
    assert warning["writers"] == [NFD_FIELD_MANAGER]
    assert warning["message"].startswith(f"the node's NodeResourceTopology is written by {NFD_FIELD_MANAGER}")
    node = control_plane.admin.get(f"/api/v1/nodes/{BOTH}")
    assert node is not None
    assert MODEL_KEY in node["metadata"]["annotations"]
    # NFD's next minute changes its object; the agent's next pass still writes nothing to it.
    applied = nfd.apply(BOTH, used={0: {"cpu": 2}})
    run_agent(control_plane, BOTH, host, tmp_path, capsys)
    assert nfd.read(BOTH)["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]


def test_nfd_takes_over_an_nrt_the_agent_wrote_first_and_the_agent_lets_it(
    control_plane: ControlPlane, nfd: Nfd, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_agent(control_plane, AGENT_FIRST, host, tmp_path, capsys)
    assert written_by_kubenexus(nfd.read(AGENT_FIRST))
    taken = nfd.apply(AGENT_FIRST)
    assert not written_by_kubenexus(taken)  # NFD's forced apply replaced the attributes, the model with them
    assert [zone["name"] for zone in taken["zones"]] == ["node-0", "node-1"]  # NFD's zones only
    logs = run_agent(control_plane, AGENT_FIRST, host, tmp_path, capsys)
    assert nfd.read(AGENT_FIRST)["metadata"]["resourceVersion"] == taken["metadata"]["resourceVersion"]
    assert len(nrt_left(logs)) == 1


def test_the_service_reads_the_agents_nodes_from_the_agent_and_the_others_from_nfd(
    control_plane: ControlPlane, nfd: Nfd, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nfd.apply(NFD_ONLY)
    nfd.apply(BOTH)
    run_agent(control_plane, BOTH, host, tmp_path, capsys)
    run_agent(control_plane, LATE_NFD, host, tmp_path, capsys)  # the agent's own NRT, until NFD comes
    kubeconfig = placement_kubeconfig(
        control_plane, "kubenexus-placement-nfd-tests", tmp_path / "placement.kubeconfig", node=SYSTEM_NODE
    )
    service = Service(kubeconfig).wait_ready()
    client = PlacementClient.connect(service.address, deadline_s=30)

    def view(node: str) -> Json:
        """GetNodeTopology as an operator asks it: grpcurl, no -emit-defaults."""
        answer = grpcurl("-plaintext", "-d", json.dumps({"node": node}), service.address,
                         "kubenexus.placement.v1.Placement/GetNodeTopology")  # fmt: skip
        assert answer.returncode == 0, answer.stderr
        shown: Json = json.loads(answer.stdout)
        return shown

    try:
        agent_view = view(BOTH)
        assert [gpu["index"] for gpu in agent_view["gpus"]] == [0, 1, 2, 3]  # the agent's GPUs, with their links
        assert len(agent_view["gpu_links"]) == 6
        assert "notes" not in agent_view
        nfd_view = view(NFD_ONLY)
        assert [cell["id"] for cell in nfd_view["cells"]] == [0, 1]
        assert "gpus" not in nfd_view  # a count per cell, no identities
        [note] = nfd_view["notes"]
        assert note.startswith(
            f"node {NFD_ONLY}: topology from its NodeResourceTopology (written by {NFD_FIELD_MANAGER}"
        )

        reserved = client.reserve(pod("on-nfd", gpus=4, cpus=8, namespace=NAMESPACE), [NFD_ONLY])
        assert reserved.reserved
        assert (reserved.placement.node, len(reserved.placement.numa_cells)) == (NFD_ONLY, 1)
        assert list(reserved.placement.notes) == [note]

        # NFD installed while the service runs takes the agent's NRT over; then NFD reports cell 1's GPUs taken on
        # the other node. Once the service shows the second (one watch: events in order), it has read the first.
        assert [gpu["index"] for gpu in view(LATE_NFD)["gpus"]] == [0, 1, 2, 3]
        assert not written_by_kubenexus(nfd.apply(LATE_NFD, gpus=0))
        nfd.apply(NFD_ONLY, used={1: {"nvidia.com/gpu": 4}})

        def cell_one_gpus() -> str:
            resources = view(NFD_ONLY)["cells"][1]["resources"]
            return str({r["name"]: r["free"] for r in resources}["nvidia.com/gpu"])

        wait_until(lambda: cell_one_gpus() == "0", timeout_s=CHANGE_S, what="NFD's new availability")
        late = view(LATE_NFD)  # read from the agent's annotation now, every detail kept
        assert ([gpu["index"] for gpu in late["gpus"]], "notes" in late) == ([0, 1, 2, 3], False)
        # NFD's object deleted (NFD uninstalled): a node without any report is unknown to the service.
        control_plane.delete(f"{NRT_PATH}/{NFD_ONLY}")
        wait_until(
            lambda: (
                pb.REJECTION_KIND_UNKNOWN_NODE in {g.kind for g in client.filter(pod("probe"), [NFD_ONLY]).rejected}
            ),
            timeout_s=CHANGE_S,
            what="the node without a report to leave the service",
        )
    finally:
        client.close()
        service.stop()
    assert "Traceback" not in service.text()
