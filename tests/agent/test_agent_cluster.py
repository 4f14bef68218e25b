"""The agent against faults a real API server cannot be made to answer on demand: kmock's emulator scripts a
409 Conflict on one given Node patch and a 500 on one given NRT create; and an API server that is not there at
all. Everything else the agent does with the API (publishing, write-on-change, stale keys, RBAC and the
admission policy, kubectl and the plugin) runs against the real kube-apiserver v1.37 in
tests/cluster/test_cluster_agent.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.main import main
from tests.fake_sysfs import build_two_socket_host, write
from tests.gpu_sysfs import build_gpu_sysfs
from tests.kube_emulator import NODES, NRTS, Emulator, request_lines
from tests.machines.gpu_hardware import L40S_4X
from tests.programs import agent_logs

pytestmark = pytest.mark.slow

NODE = "gpu-node-1"
FOREIGN = {"kubernetes.io/hostname": NODE, "example.com/team": "ml"}


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
