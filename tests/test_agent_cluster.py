"""``kubenexus-agent run``, unchanged, against kmock's Kubernetes API emulator through the official
client; ``kubectl`` and ``kubectl kubenexus`` as real processes against the same emulator."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.main import main
from kubenexus.topology.labels import MODEL_KEY, decode_node_metadata
from kubenexus.topology.nrt import decode_nrt
from tests.conftest import wait_until
from tests.fake_sysfs import build_two_socket_host, write
from tests.gpu_sysfs import build_gpu_sysfs
from tests.kube_emulator import NODES, NRTS, Emulator, request_lines
from tests.machines.gpu_hardware import L40S_4X

pytestmark = pytest.mark.slow

NODE = "gpu-node-1"
FOREIGN = {"kubernetes.io/hostname": NODE, "example.com/team": "ml"}
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = build_gpu_sysfs(build_two_socket_host(tmp_path / "host"), L40S_4X)
    write(root, "/var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\n")
    return root


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator() as emulator:
        emulator.add_node(NODE, FOREIGN)
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        yield emulator


def agent_args(host: Path, kubeconfig: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--node-name",
        NODE,
        "--host-root",
        str(host),
        "--no-nvml",
        "--kubeconfig",
        str(kubeconfig),
        "--pod-resources-socket",
        "",
        *extra,
    ]


def run_once(host: Path, kubeconfig: Path, *extra: str) -> int:
    return main(agent_args(host, kubeconfig, "--once", "--api-retries", "3", *extra))


def agent_logs(stderr: str) -> list[dict[str, Any]]:
    """The agent's own JSON log lines (the in-process emulator logs to the same stream)."""
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"].startswith("kubenexus")]


def test_first_pass_publishes_labels_annotations_and_nrt_and_keeps_foreign_labels(
    api: Emulator, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_once(host, tmp_path / "kubeconfig") == 0

    node = api.node(NODE)
    labels, annotations = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert {key: labels[key] for key in FOREIGN} == FOREIGN
    assert labels["numa.kubenexus.io/node-count"] == "2"
    assert labels["numa.kubenexus.io/node-0-cpus"] == "0-3_8-11"
    assert labels["gpu.kubenexus.io/count"] == "4"
    published = decode_node_metadata(labels, annotations)
    assert [cell.id for cell in published.numa_cells] == [0, 1]
    assert len(published.gpus) == 4
    assert published.kubelet is not None
    assert published.kubelet.topology_manager_policy == "single-numa-node"

    nrt = api.nrt(NODE)
    assert nrt is not None
    assert nrt["metadata"]["name"] == NODE
    assert [zone["name"] for zone in nrt["zones"] if zone["type"] == "Node"] == ["node-0", "node-1"]
    assert decode_nrt(nrt) == published

    patch = next(request for request in api.writes() if request.resource == NODES)
    assert set(patch.data["metadata"]["labels"]).isdisjoint(FOREIGN), "the agent wrote a key it does not own"
    outcomes = {(line["target"], line["outcome"]) for line in agent_logs(capsys.readouterr().err) if "outcome" in line}
    assert outcomes == {("node", "updated"), ("nrt", "updated")}


def test_a_second_pass_with_nothing_changed_writes_nothing(api: Emulator, host: Path, tmp_path: Path) -> None:
    assert run_once(host, tmp_path / "kubeconfig") == 0
    seen = len(api.requests())
    assert run_once(host, tmp_path / "kubeconfig") == 0
    second = api.requests()[seen:]
    assert request_lines(second) == [
        f"GET /api/v1/nodes/{NODE}",
        f"GET /apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies/{NODE}",
    ]


def test_a_change_updates_exactly_the_changed_keys(api: Emulator, host: Path, tmp_path: Path) -> None:
    assert run_once(host, tmp_path / "kubeconfig") == 0
    seen = len(api.requests())
    write(host, "/sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       20000000 kB\n")
    assert run_once(host, tmp_path / "kubeconfig") == 0

    node_patch, nrt_patch = api.writes(seen)
    assert (node_patch.method.value, nrt_patch.method.value) == ("PATCH", "PATCH")
    assert node_patch.data == {
        "metadata": {
            "labels": {"numa.kubenexus.io/node-1-memory": str(20_000_000 * 1024)},
            "annotations": {MODEL_KEY: api.node(NODE)["metadata"]["annotations"][MODEL_KEY]},
        }
    }
    assert set(nrt_patch.data) <= {"zones", "attributes"}
    assert api.node(NODE)["metadata"]["labels"]["numa.kubenexus.io/node-1-memory"] == str(20_000_000 * 1024)


def test_stale_owned_keys_are_removed_and_foreign_keys_untouched(api: Emulator, host: Path, tmp_path: Path) -> None:
    stale = {"numa.kubenexus.io/node-7-cpus": "0-3", "gpu.kubenexus.io/gpu9-numa": "1"}
    api.add_node(NODE, {**FOREIGN, **stale})
    assert run_once(host, tmp_path / "kubeconfig") == 0
    labels = api.node(NODE)["metadata"]["labels"]
    assert not set(stale) & set(labels)
    assert {key: labels[key] for key in FOREIGN} == FOREIGN
    (patch,) = [request for request in api.writes() if request.resource == NODES]
    assert {key: patch.data["metadata"]["labels"][key] for key in stale} == dict.fromkeys(stale)


def test_a_conflict_and_a_server_error_are_retried(
    api: Emulator, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.kmock["patch", NODES][:1] << 409 << {"kind": "Status", "code": 409, "reason": "Conflict", "message": "retry"}
    api.kmock["post", NRTS][:1] << 500 << {"kind": "Status", "code": 500, "message": "etcd timeout"}
    assert run_once(host, tmp_path / "kubeconfig") == 0

    lines = request_lines(api.requests())
    node_path, nrt_path = f"/api/v1/nodes/{NODE}", "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
    # Each failed write is followed by a fresh read: the retry re-plans against what is there now, which the
    # refused write left unchanged (a real API server stores nothing it answers 409 or 500), and writes again.
    assert lines[:4] == [f"GET {node_path}", f"PATCH {node_path}", f"GET {node_path}", f"PATCH {node_path}"]
    assert lines[4:8] == [f"GET {nrt_path}/{NODE}", f"POST {nrt_path}", f"GET {nrt_path}/{NODE}", f"POST {nrt_path}"]
    retries = [line for line in agent_logs(capsys.readouterr().err) if line["message"] == "API call failed, retrying"]
    assert [(line["target"], line["error"]) for line in retries] == [
        ("node", "HTTP 409: retry"),
        ("nrt", "HTTP 500: etcd timeout"),
    ]
    assert api.nrt(NODE) is not None


def test_an_api_outage_is_reported_not_crashed_on(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\n"
        "users:\n- name: u\n  user: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
        "current-context: c\n"
    )
    assert main(agent_args(host, kubeconfig, "--once", "--api-retries", "2")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    failures = [line for line in agent_logs(err) if line.get("outcome") == "failed"]
    assert [line["target"] for line in failures] == ["node", "nrt"]
    assert all("gave up" in line["error"] and "Connection" in line["error"] for line in failures)


def test_a_missing_node_is_one_clear_log_line(
    api: Emulator, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = agent_args(host, tmp_path / "kubeconfig", "--once", "--mode", "labels")
    args[args.index(NODE)] = "no-such-node"
    assert main(args) == 1
    (failure,) = [line for line in agent_logs(capsys.readouterr().err) if line.get("outcome") == "failed"]
    assert failure["error"] == "node 'no-such-node' not found (check --node-name / NODE_NAME)"
    assert api.writes() == []


def test_dry_run_prints_the_writes_and_sends_none(
    api: Emulator, host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_once(host, tmp_path / "kubeconfig", "--dry-run", "--mode", "labels") == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (record["verb"], record["resource"], record["name"]) == ("patch", "nodes", NODE)
    assert record["body"]["metadata"]["labels"]["numa.kubenexus.io/node-count"] == "2"
    assert api.writes() == []
    assert not any(request.resource == NRTS for request in api.requests())


def test_the_loop_is_silent_on_a_steady_node_serves_health_and_stops_on_sigterm(
    api: Emulator, host: Path, tmp_path: Path
) -> None:
    args = agent_args(host, tmp_path / "kubeconfig", "--interval", "0.1", "--metrics-address", "127.0.0.1:0")
    with subprocess.Popen(
        [sys.executable, "-m", "agent.main", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as agent:
        logs = LogReader(agent)
        try:
            port = logs.wait_for("serving /metrics, /healthz, /readyz")["port"]
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: http_status(f"{base}/readyz") == 200, what="the agent to be ready")
            first_pass_requests = len(api.requests())
            skipped = 'kubenexus_agent_publish_results_total{outcome="skipped",target="node"}'
            wait_until(lambda: metric(base, skipped) >= 10, what="ten skipped passes")
            assert http_status(f"{base}/healthz") == 200
            assert request_lines(api.requests()[first_pass_requests:]) == []  # ten passes, not one request
            assert metric(base, 'kubenexus_agent_api_writes_total{target="node"}') == 1
            assert metric(base, "kubenexus_agent_discovery_duration_seconds_count") >= 10
            assert metric(base, "kubenexus_agent_last_publish_success_timestamp_seconds") > 0
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=10) == 0
        finally:
            if agent.poll() is None:
                agent.kill()
        logs.join()
    assert logs.find("stopping; the published topology stays in place") is not None
    assert "Traceback" not in logs.text()
    assert api.node(NODE)["metadata"]["labels"]["numa.kubenexus.io/node-count"] == "2"
    assert api.nrt(NODE) is not None


def test_kubectl_shows_the_published_labels_and_nrt(api: Emulator, host: Path, tmp_path: Path) -> None:
    assert run_once(host, tmp_path / "kubeconfig") == 0
    nodes = kubectl(
        tmp_path,
        "get",
        "nodes",
        "-L",
        "numa.kubenexus.io/node-count,numa.kubenexus.io/node-0-cpus,gpu.kubenexus.io/count",
    )
    header, row = nodes.stdout.splitlines()
    assert header.split()[-3:] == ["NODE-COUNT", "NODE-0-CPUS", "COUNT"]
    assert row.split()[0] == NODE
    assert row.split()[-3:] == ["2", "0-3_8-11", "4"]

    nrts = kubectl(tmp_path, "get", "noderesourcetopologies", "-o", "jsonpath={.items[*].metadata.name}")
    assert nrts.stdout == NODE


@pytest.mark.parametrize(("source", "origin"), [("auto", "Node annotation"), ("nrt", "NodeResourceTopology")])
def test_kubectl_kubenexus_shows_cells_gpus_and_the_link_matrix(
    api: Emulator, host: Path, tmp_path: Path, source: str, origin: str
) -> None:
    assert run_once(host, tmp_path / "kubeconfig") == 0
    out = kubectl(tmp_path, "kubenexus", NODE, "--source", source).stdout
    assert out.startswith(f"Node {NODE} (from the {origin})\n")
    assert "NUMA cell 0 (DRAM)" in out
    assert "CPUs     0-3,8-11 (8)" in out
    header = next(line for line in out.splitlines() if line.startswith("\tGPU0"))
    assert header.split("\t")[1:5] == ["GPU0", "GPU1", "GPU2", "GPU3"]


def test_kubectl_kubenexus_errors_are_one_line(api: Emulator, tmp_path: Path) -> None:
    missing = kubectl(tmp_path, "kubenexus", "no-such-node", check=False)
    assert (missing.returncode, missing.stdout) == (1, "")
    # The plugin takes the node as its argument: no --node-name hint (that is the agent's flag).
    assert missing.stderr == (
        "kubectl-kubenexus: node 'no-such-node' not found in this cluster "
        "(`kubectl get nodes` lists the names; --context or --kubeconfig picks another cluster)\n"
    )
    unpublished = kubectl(tmp_path, "kubenexus", NODE, check=False)
    assert unpublished.returncode == 1
    assert unpublished.stderr == (
        f"kubectl-kubenexus: node '{NODE}' has no published topology yet (is kubenexus-agent running on it?)\n"
    )


# --- helpers -----------------------------------------------------------------------------------


def kubectl(tmp_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """kubectl as a user runs it: KUBECONFIG set, the plugin found on PATH as ``kubectl-kubenexus``."""
    bin_dir = tmp_path / "bin"
    plugin = bin_dir / "kubectl-kubenexus"
    if not plugin.exists():
        bin_dir.mkdir()
        plugin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agent.kubectl_plugin "$@"\n')
        plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    env = {
        **os.environ,
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    result = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=60, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


class LogReader:
    """Collects a child's JSON log lines from stderr on a thread, so that a test can wait for one."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self._stream = process.stderr
        self._lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self._lines.append(line)

    def find(self, message: str) -> dict[str, Any] | None:
        for line in list(self._lines):
            if line.startswith("{") and json.loads(line)["message"] == message:
                return dict(json.loads(line))
        return None

    def wait_for(self, message: str) -> dict[str, Any]:
        wait_until(lambda: self.find(message) is not None, what=repr(message))
        found = self.find(message)
        assert found is not None
        return found

    def text(self) -> str:
        return "".join(self._lines)

    def join(self) -> None:
        self._thread.join(10)


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def metric(base: str, sample: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0
