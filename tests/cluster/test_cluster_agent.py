"""``kubenexus-agent run``, unchanged, against the real kube-apiserver v1.37, as its ServiceAccount with the
RBAC and the admission policy of deploy/agent and a pod-bound token naming its node; ``kubectl`` v1.37 and
``kubectl kubenexus`` as real processes. Faults the real server cannot be made to answer on demand (a 409
then a 500 on one given write) stay in tests/agent/test_agent_cluster.py on the emulator."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.main import main
from agent.publish import KubeNodeApi, Publisher
from kubenexus.kube.errors import ApiError
from kubenexus.topology.labels import decode_node_metadata, encode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import decode_nrt, encode_nrt
from tests import REPO
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, agent_kubeconfig
from tests.discovered_topologies import FIXTURES
from tests.fake_sysfs import build_two_socket_host, write
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import L40S_4X
from tests.programs import Program, agent_logs, http_status, metric

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FOREIGN = {"example.com/team": "ml"}
NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = build_gpu_sysfs(build_two_socket_host(tmp_path / "host"), L40S_4X)
    write(root, "/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\n")
    return root


_counter = iter(range(10_000))


@pytest.fixture
def node(control_plane: ControlPlane) -> str:
    """A fresh Node per test (the control plane is shared by the session)."""
    name = f"agent-node-{next(_counter)}"
    control_plane.create_node(name, labels=FOREIGN)
    return name


@pytest.fixture
def kubeconfig(control_plane: ControlPlane, node: str, tmp_path: Path) -> Path:
    return agent_kubeconfig(control_plane, node, tmp_path / "agent.kubeconfig")


def agent_args(node: str, host: Path, kubeconfig: Path, *extra: str) -> list[str]:
    return ["run", "--node-name", node, "--host-root", str(host), "--no-nvml", "--kubeconfig", str(kubeconfig),
            "--pod-resources-socket", "", *extra]  # fmt: skip


def run_once(node: str, host: Path, kubeconfig: Path, *extra: str) -> int:
    return main(agent_args(node, host, kubeconfig, "--once", "--api-retries", "2", *extra))


def read(plane: ControlPlane, node: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    stored = plane.admin.get(f"/api/v1/nodes/{node}")
    assert stored is not None
    return stored, plane.admin.get(f"{NRT_PATH}/{node}")


def test_first_pass_publishes_labels_annotations_and_nrt_as_the_agent(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    assert run_once(node, host, kubeconfig) == 0
    stored, nrt = read(control_plane, node)
    labels, annotations = stored["metadata"]["labels"], stored["metadata"]["annotations"]
    assert {key: labels[key] for key in FOREIGN} == FOREIGN
    assert labels["numa.kubenexus.io/node-count"] == "2"
    assert labels["numa.kubenexus.io/node-0-cpus"] == "0-3_8-11"
    assert labels["gpu.kubenexus.io/count"] == "4"
    published = decode_node_metadata(labels, annotations)
    assert len(published.gpus) == 4
    assert nrt is not None
    assert decode_nrt(nrt) == published
    assert [zone["name"] for zone in nrt["zones"] if zone["type"] == "Node"] == ["node-0", "node-1"]
    # The server recorded who wrote what: the agent's field manager, authenticated as its ServiceAccount.
    managers = {entry["manager"] for entry in stored["metadata"]["managedFields"]}
    assert "kubenexus-agent" in managers


def test_a_second_pass_with_nothing_changed_leaves_the_resource_versions_alone(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    assert run_once(node, host, kubeconfig) == 0
    stored, nrt = read(control_plane, node)
    assert nrt is not None
    assert run_once(node, host, kubeconfig) == 0
    again, nrt_again = read(control_plane, node)
    assert nrt_again is not None
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert nrt_again["metadata"]["resourceVersion"] == nrt["metadata"]["resourceVersion"]


def test_a_change_rewrites_the_changed_keys_only(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    assert run_once(node, host, kubeconfig) == 0
    before, _ = read(control_plane, node)
    write(host, "/sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       20000000 kB\n")
    assert run_once(node, host, kubeconfig) == 0
    after, nrt = read(control_plane, node)
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    old = before["metadata"]["labels"]
    changed = {key for key, value in after["metadata"]["labels"].items() if old.get(key) != value}
    assert changed == {"numa.kubenexus.io/node-1-memory"}
    assert after["metadata"]["labels"]["numa.kubenexus.io/node-1-memory"] == str(20_000_000 * 1024)
    assert nrt is not None
    assert decode_nrt(nrt) == decode_node_metadata(after["metadata"]["labels"], after["metadata"]["annotations"])


def test_stale_owned_keys_are_removed_and_foreign_keys_untouched(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    stale = {"numa.kubenexus.io/node-7-cpus": "0-3", "gpu.kubenexus.io/gpu9-numa": "1"}
    control_plane.admin.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": stale}})
    assert run_once(node, host, kubeconfig) == 0
    labels = read(control_plane, node)[0]["metadata"]["labels"]
    assert not set(stale) & set(labels)
    assert {key: labels[key] for key in FOREIGN} == FOREIGN


def test_the_admission_policy_refuses_another_nodes_objects(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = f"{node}-neighbour"
    control_plane.create_node(other)
    # The token names ``node``; the agent is told it runs on ``other``: a compromised agent's view.
    assert run_once(other, host, kubeconfig, "--api-retries", "1") == 1
    failures = [line for line in agent_logs(capsys.readouterr().err) if line.get("outcome") == "failed"]
    assert {line["target"] for line in failures} == {"node", "nrt"}
    for line in failures:
        assert f"may change only that node and its NodeResourceTopology, not {other}" in line["error"]
        assert "Traceback" not in line["error"]
    stored, nrt = read(control_plane, other)
    assert not any(key.startswith("numa.kubenexus.io/") for key in stored["metadata"].get("labels", {}))
    assert nrt is None


def test_the_admission_policy_refuses_a_label_the_agent_does_not_own(
    control_plane: ControlPlane, node: str, kubeconfig: Path
) -> None:
    client = control_plane.client(kubeconfig)
    with pytest.raises(ApiError) as refused:
        client.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"example.com/team": "attacker"}}})
    assert refused.value.status == 403
    assert "may change only the label and annotation keys it owns, not: example.com/team" in refused.value.message
    with pytest.raises(ApiError) as spec_change:
        client.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    assert spec_change.value.status == 403
    assert read(control_plane, node)[0]["metadata"]["labels"]["example.com/team"] == "ml"


@pytest.mark.parametrize(
    "command", [("get", "nodes"), ("delete", "node", "{node}"), ("get", "pods", "-A"), ("get", "secrets", "-A")]
)
def test_rbac_refuses_what_the_agent_was_not_granted(
    control_plane: ControlPlane, node: str, kubeconfig: Path, command: tuple[str, ...]
) -> None:
    args = [arg.format(node=node) for arg in command]
    refused = control_plane.kubectl(*args, kubeconfig=kubeconfig, check=False)
    assert refused.returncode == 1
    assert 'User "system:serviceaccount:kubenexus-agent:kubenexus-agent" cannot' in refused.stderr
    assert read(control_plane, node)[0]["metadata"]["name"] == node


def test_a_missing_node_is_one_clear_log_line(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(agent_args("no-such-node", host, kubeconfig, "--once", "--mode", "labels")) == 1
    (failure,) = [line for line in agent_logs(capsys.readouterr().err) if line.get("outcome") == "failed"]
    assert failure["error"] == "node 'no-such-node' not found (check --node-name / NODE_NAME)"


def test_dry_run_prints_the_writes_and_sends_none(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = read(control_plane, node)[0]["metadata"]["resourceVersion"]
    assert run_once(node, host, kubeconfig, "--dry-run") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(record["verb"], record["resource"]) for record in records} >= {("patch", "nodes")}
    stored, nrt = read(control_plane, node)
    assert stored["metadata"]["resourceVersion"] == before
    assert nrt is None


def test_the_loop_publishes_once_serves_health_and_stops_on_sigterm(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    args = agent_args(node, host, kubeconfig, "--interval", "0.2", "--metrics-address", "127.0.0.1:0")
    agent = Program("agent", args)
    try:
        base = f"http://127.0.0.1:{agent.wait_for('serving /metrics, /healthz, /readyz')['port']}"
        wait_until(lambda: http_status(f"{base}/readyz") == 200, timeout_s=60, what="the agent to be ready")
        version = read(control_plane, node)[0]["metadata"]["resourceVersion"]
        skipped = 'kubenexus_agent_publish_results_total{outcome="skipped",target="node"}'
        wait_until(lambda: metric(base, skipped) >= 5, timeout_s=60, what="five skipped passes")
        assert read(control_plane, node)[0]["metadata"]["resourceVersion"] == version
        assert metric(base, 'kubenexus_agent_api_writes_total{target="node"}') == 1
    finally:
        assert agent.stop() == 0
    assert agent.find("stopping; the published topology stays in place") is not None
    assert "Traceback" not in agent.text()


def test_kubectl_shows_the_published_labels_and_nrt(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path
) -> None:
    assert run_once(node, host, kubeconfig) == 0
    columns = "numa.kubenexus.io/node-count,numa.kubenexus.io/node-0-cpus,gpu.kubenexus.io/count"
    rows = control_plane.kubectl("get", "node", node, "-L", columns).stdout.splitlines()
    assert rows[0].split()[-3:] == ["NODE-COUNT", "NODE-0-CPUS", "COUNT"]
    assert rows[1].split()[0] == node
    assert rows[1].split()[-3:] == ["2", "0-3_8-11", "4"]
    name = control_plane.kubectl("get", "noderesourcetopologies", node, "-o", "jsonpath={.metadata.name}").stdout
    assert name == node


@pytest.mark.parametrize(("source", "origin"), [("auto", "Node annotation"), ("nrt", "NodeResourceTopology")])
def test_kubectl_kubenexus_shows_cells_and_gpus(
    control_plane: ControlPlane, node: str, host: Path, kubeconfig: Path, *, source: str, origin: str
) -> None:
    assert run_once(node, host, kubeconfig) == 0
    out = kubectl_plugin(control_plane, kubeconfig.parent, node, "--source", source)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Node {node} (from the {origin})\n")
    assert "CPUs     0-3,8-11 (8)" in out.stdout


def test_kubectl_kubenexus_errors_are_one_line(control_plane: ControlPlane, node: str, tmp_path: Path) -> None:
    unpublished = kubectl_plugin(control_plane, tmp_path, node)
    assert (unpublished.returncode, unpublished.stdout) == (1, "")
    assert unpublished.stderr == (
        f"kubectl-kubenexus: node '{node}' has no published topology yet (is kubenexus-agent running on it?)\n"
    )
    missing = kubectl_plugin(control_plane, tmp_path, "no-such-node")
    assert (missing.returncode, missing.stdout) == (1, "")
    # The plugin takes the node as its argument: no --node-name hint (that is the agent's flag).
    assert missing.stderr == (
        "kubectl-kubenexus: node 'no-such-node' not found in this cluster "
        "(`kubectl get nodes` lists the names; --context or --kubeconfig picks another cluster)\n"
    )


def kubectl_plugin(plane: ControlPlane, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl kubenexus ...`` as a user runs it: kubectl v1.37 finds the plugin on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    plugin = bin_dir / "kubectl-kubenexus"
    plugin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agent.kubectl_plugin "$@"\n')
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "KUBECONFIG": str(plane.admin_kubeconfig), "PYTHONPATH": str(REPO),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    command = [str(plane.bin / "kubectl"), "kubenexus", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)


# -- every fixture machine through the real server ---------------------------------------------------------


def node_name_for(fixture: str) -> str:
    return ("fx-" + re.sub(r"[^a-z0-9-]+", "-", fixture.lower())).strip("-")[:63].rstrip("-")


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fixture_machine_is_accepted_and_read_back_unchanged(
    control_plane: ControlPlane, built: Any, fixture: str, tmp_path: Path
) -> None:
    """The agent's publisher, as the node's own agent, writes each real machine (hwloc snapshots, nvidia-smi
    captures, the fake-NVML catalogue); the real server's validation (label syntax, the NRT CRD's structural
    schema, the admission policy) accepts it, and what comes back decodes to the same topology."""
    topology: NodeTopology = built(fixture)
    name = node_name_for(fixture)
    control_plane.create_node(name)
    client = control_plane.client(agent_kubeconfig(control_plane, name, tmp_path / "kubeconfig"), "kubenexus-agent")
    publisher = Publisher(api=KubeNodeApi(client), node_name=name)
    results = publisher.publish(metadata=encode_node_metadata(topology), nrt=encode_nrt(topology, node_name=name))
    assert all(result.error is None for result in results), results
    stored, nrt = read(control_plane, name)
    assert nrt is not None
    assert decode_node_metadata(stored["metadata"]["labels"], stored["metadata"]["annotations"]) == topology
    assert decode_nrt(nrt) == topology
