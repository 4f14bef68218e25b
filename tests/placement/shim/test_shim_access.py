"""The scheduler shims as deployed: the extender over HTTPS that demands kube-scheduler's client
certificate and binds only its own scheduler's pending pods; the binder's probes. Each runs as a user
runs it (`kubenexus-placement extender|binder`), against the emulated API and a real placement service.

What is tested is the door: callers other than kube-scheduler (no certificate, another CA, a pod of another
scheduler) on demand, which the real kube-scheduler never is; the API server behind it is incidental. The
extender with the real kube-scheduler and API server: tests/cluster/test_cluster_extender.py."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubenexus.kube.client import connect
from placement.core.annotations import FIELD_MANAGER
from placement.shim.extender import DEFAULT_CALLER, _refusal
from tests.conftest import wait_until
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import Replica, ShimEmulator, pod_object, publish_nodes, replica
from tools.throwaway_certificates import make_certificates

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ShimEmulator, Path, Replica]]:
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node()})
        service = replica(emulator, kubeconfig, "placement-0").start(binder=False)
        try:
            wait_until(lambda: service.feed.synced and service.elector.is_leader(), what="a synced leader")
            yield emulator, kubeconfig, service
        finally:
            service.kill()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "placement.main", *args]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    _, errors = process.communicate(timeout=30)
    return errors


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()
    except OSError:
        return 0, ""


def _post(url: str, body: dict[str, Any], context: ssl.SSLContext) -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return json.loads(response.read())


def test_the_extender_demands_a_client_certificate_and_binds_only_its_own_pending_pods(
    cluster: tuple[ShimEmulator, Path, Replica], certificates: Path
) -> None:
    emulator, kubeconfig, service = cluster
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    try:
        foreign = pod_object("foreign", gpus=1)
        foreign["spec"]["schedulerName"] = "default-scheduler"
        bound = pod_object("bound", gpus=1)
        bound["spec"]["nodeName"] = "h100-a"
        for pod in (foreign, bound, pod_object("ours", gpus=1)):
            api.create("/api/v1/namespaces/default/pods", pod)
    finally:
        api.close()
    port, health = _free_port(), _free_port()
    extender = _start(
        "extender", "--kubeconfig", str(kubeconfig), "--service", f"127.0.0.1:{service.port}",
        "--listen", f"127.0.0.1:{port}", "--tls-cert", str(certificates / "server.crt"),
        "--tls-key", str(certificates / "server.key"), "--tls-client-ca", str(certificates / "ca.crt"),
        "--metrics-address", f"127.0.0.1:{health}", "--writer-identity", "client",
    )  # fmt: skip
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, what="the extender's probe")
        base = f"https://127.0.0.1:{port}"
        anonymous = ssl.create_default_context(cafile=certificates / "ca.crt")
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _post(f"{base}/filter", {"Pod": pod_object("ours"), "NodeNames": ["h100-a"]}, anonymous)
        scheduler = ssl.create_default_context(cafile=certificates / "ca.crt")
        scheduler.load_cert_chain(certificates / "client.crt", certificates / "client.key")

        def bind(name: str) -> Any:
            return _post(f"{base}/bind", {"PodName": name, "PodNamespace": "default", "Node": "h100-a"}, scheduler)

        # Another identity from the same CA reads, and may not bind (as it may not reserve through gRPC).
        reader = ssl.create_default_context(cafile=certificates / "ca.crt")
        reader.load_cert_chain(certificates / "reader.crt", certificates / "reader.key")
        assert _post(f"{base}/filter", {"Pod": pod_object("ours"), "NodeNames": ["h100-a"]}, reader)["NodeNames"]
        try:
            _post(f"{base}/bind", {"PodName": "ours", "PodNamespace": "default", "Node": "h100-a"}, reader)
        except urllib.error.HTTPError as error:
            with error:
                refused = (error.code, json.loads(error.read())["error"])
        assert refused == (403, "client 'reader' may not bind: only client (--writer-identity) may")
        assert emulator.bindings == []
        assert "belongs to scheduler 'default-scheduler'" in bind("foreign")["Error"]
        assert "already bound" in bind("bound")["Error"]
        assert bind("ours") == {"Error": ""}
        assert emulator.bindings == [("default", "ours", "h100-a")]
    finally:
        errors = _stop(extender)
    assert "Traceback" not in errors
    # The command reads the gang APIs (this cluster serves none of them: each skipped in one line).
    assert "the cluster does not serve scheduling.x-k8s.io/v1alpha1 podgroups" in errors


@pytest.mark.parametrize(
    ("names", "refused"),
    [
        (["kubenexus-kube-scheduler"], ""),
        (["reader"], "client 'reader' may not bind: only kubenexus-kube-scheduler (--writer-identity) may"),
        ([], "this one names none"),
        (["kubenexus-kube-scheduler", "reader"], "this one names 'kubenexus-kube-scheduler', 'reader'"),
    ],
)
def test_bind_answers_one_writer_identity_and_no_certificate_naming_several(names: list[str], refused: str) -> None:
    reason = _refusal(names, frozenset({DEFAULT_CALLER}))
    assert (reason == "") == (refused == "")
    assert refused in reason


def test_an_idle_connection_does_not_hold_up_the_extenders_other_callers(
    cluster: tuple[ShimEmulator, Path, Replica], certificates: Path
) -> None:
    """A client that connects and never starts its TLS handshake: kube-scheduler's calls are answered while
    it holds its socket (the handshake runs on the connection's own thread, not in the accept loop)."""
    _, kubeconfig, service = cluster
    port, health = _free_port(), _free_port()
    extender = _start(
        "extender", "--kubeconfig", str(kubeconfig), "--service", f"127.0.0.1:{service.port}",
        "--listen", f"127.0.0.1:{port}", "--tls-cert", str(certificates / "server.crt"),
        "--tls-key", str(certificates / "server.key"), "--tls-client-ca", str(certificates / "ca.crt"),
        "--metrics-address", f"127.0.0.1:{health}",
    )  # fmt: skip
    scheduler = ssl.create_default_context(cafile=certificates / "ca.crt")
    scheduler.load_cert_chain(certificates / "client.crt", certificates / "client.key")
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, what="the extender's probe")
        with socket.create_connection(("127.0.0.1", port)):  # connected, silent
            for _ in range(3):
                answer = _post(
                    f"https://127.0.0.1:{port}/filter", {"Pod": pod_object("ours"), "NodeNames": ["h100-a"]}, scheduler
                )
                assert answer["NodeNames"] == ["h100-a"]
    finally:
        errors = _stop(extender)
    assert "Traceback" not in errors


def test_the_extender_serves_renewed_tls_files_without_a_restart(
    cluster: tuple[ShimEmulator, Path, Replica], tmp_path: Path
) -> None:
    """Its certificate, key and client CA replaced under it (a renewed Secret, a new CA too): the next
    connection gets the new certificate, and a client of the old CA is refused."""
    _, kubeconfig, service = cluster
    issued = {}
    for name in ("first", "second"):
        issued[name] = tmp_path / name
        issued[name].mkdir()
        make_certificates(issued[name], ["client"])
    live = tmp_path / "live"
    live.mkdir()

    def install(name: str) -> None:
        for file in ("server.crt", "server.key", "ca.crt"):
            shutil.copyfile(issued[name] / file, live / file)

    def client(name: str) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=issued[name] / "ca.crt")
        context.load_cert_chain(issued[name] / "client.crt", issued[name] / "client.key")
        return context

    install("first")
    port, health = _free_port(), _free_port()
    extender = _start(
        "extender", "--kubeconfig", str(kubeconfig), "--service", f"127.0.0.1:{service.port}",
        "--listen", f"127.0.0.1:{port}", "--tls-cert", str(live / "server.crt"), "--tls-key", str(live / "server.key"),
        "--tls-client-ca", str(live / "ca.crt"), "--metrics-address", f"127.0.0.1:{health}",
    )  # fmt: skip
    url, body = f"https://127.0.0.1:{port}/filter", {"Pod": pod_object("ours"), "NodeNames": ["h100-a"]}
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, what="the extender's probe")
        assert _post(url, body, client("first"))["NodeNames"] == ["h100-a"]
        install("second")
        assert _post(url, body, client("second"))["NodeNames"] == ["h100-a"]
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _post(url, body, client("first"))
    finally:
        errors = _stop(extender)
    assert "TLS files changed; loaded again" in errors
    assert "Traceback" not in errors


def test_the_extender_refuses_an_open_address_without_client_certificates(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "placement.main", "extender", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    (line,) = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert line["message"] == "cannot start the extender"
    assert "without client authentication" in line["error"]


def test_the_binder_serves_its_probes(cluster: tuple[ShimEmulator, Path, Replica]) -> None:
    _, kubeconfig, service = cluster
    health = _free_port()
    binder = _start(
        "binder", "--kubeconfig", str(kubeconfig), "--service", f"127.0.0.1:{service.port}", "--no-leader-elect",
        "--metrics-address", f"127.0.0.1:{health}",
    )  # fmt: skip
    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{health}/readyz")[0] == 200, what="the binder's watch")
        assert _get(f"http://127.0.0.1:{health}/healthz") == (200, "ok\n")
        status, metrics = _get(f"http://127.0.0.1:{health}/metrics")
        assert status == 200
        assert "process_cpu_seconds_total" in metrics
    finally:
        errors = _stop(binder)
    assert "Traceback" not in errors
