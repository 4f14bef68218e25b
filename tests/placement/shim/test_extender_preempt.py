"""The extender's ``preempt`` verb end to end: the bodies kube-scheduler POSTs (ExtenderPreemptionArgs with
MetaVictims, as ``nodeCacheCapable: true`` sends them, or with full pods), the real gRPC service behind it
fed from the emulated API (running pods published with their uids), and the ExtenderPreemptionResult it
answers: only the nodes where the victims' room passes the kubelet's NUMA admission.

The real kube-scheduler's own preemption asking this verb runs in tests/cluster/test_cluster_extender.py; this module
stays on the emulator for what kube-scheduler never sends on demand: full victim pods, too few victims,
malformed bodies, an unreachable service, and the exact echo of NumPDBViolations. The body shapes follow
k8s.io/kube-scheduler/extender/v1/types.go (no JSON tags: Go field names) and pkg/scheduler/extender.go
``ProcessPreemption`` / ``convertToMetaVictims``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubenexus.kube.client import connect
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, FIELD_MANAGER
from placement.shim.client import PlacementClient
from placement.shim.extender import Extender, serve
from tests import REPO
from tests.conftest import wait_until
from tests.machines.node_topologies import nvswitch_node
from tests.preemption_cluster import running
from tests.shim_cluster import PODS, Replica, ShimEmulator, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

LOW, HIGH = 10, 1000
SCHEDULER_CONFIG = REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
# Node h100-a: the low-priority pods hold 2 GPUs on each NUMA cell; h100-b: all of cell 0 (GPUs 0-3).
SPLIT_VICTIMS, WHOLE_VICTIMS = ("a-low-0", "a-low-1"), ("b-low-0", "b-low-1")


def placed(name: str, node: str, cell: int, gpus: tuple[int, ...], *, priority: int) -> dict[str, Any]:
    """A pod placed earlier and now running: bound, its cell and GPUs recorded, its uid ``uid-<name>``."""
    annotations = {ASSIGNED_CELLS_KEY: str(cell), ASSIGNED_GPUS_KEY: ",".join(map(str, gpus))}
    return running(
        pod_object(name, gpus=len(gpus), cpus=4 * len(gpus), annotations=annotations), node, priority=priority
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ShimEmulator, Replica]]:
    """Two single-numa-node H100 nodes (GPUs 0-3 on cell 0, 4-7 on cell 1), every GPU held."""
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node(), "h100-b": nvswitch_node()})
        for pod in (
            placed("a-low-0", "h100-a", 0, (0, 1), priority=LOW),
            placed("a-high-0", "h100-a", 0, (2, 3), priority=HIGH),
            placed("a-low-1", "h100-a", 1, (4, 5), priority=LOW),
            placed("a-high-1", "h100-a", 1, (6, 7), priority=HIGH),
            placed("b-low-0", "h100-b", 0, (0, 1), priority=LOW),
            placed("b-low-1", "h100-b", 0, (2, 3), priority=LOW),
            placed("b-high", "h100-b", 1, (4, 5, 6, 7), priority=HIGH),
        ):
            emulator.put_object(PODS, pod)
        service = replica(emulator, kubeconfig, "placement-0").start(binder=False)  # kube-scheduler evicts
        try:
            wait_until(lambda: service.feed.synced, what="a synced feed")
            wait_until(
                lambda: len(service.index.pods_on("h100-a")) + len(service.index.pods_on("h100-b")) == 7,
                what="the pods",
            )
            yield emulator, service
        finally:
            service.kill()


@pytest.fixture
def extender_url(cluster: tuple[ShimEmulator, Replica], tmp_path: Path) -> Iterator[str]:
    emulator, service = cluster
    api = connect(str(emulator.write_kubeconfig(tmp_path / "extender-kubeconfig")), field_manager=FIELD_MANAGER)
    server = serve(Extender(api, service.client), ("127.0.0.1", 0), prefix="/scheduler")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/scheduler"
    finally:
        server.shutdown()
        server.server_close()
        api.close()


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def refused(url: str, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as caught:
        post(url, body)
    error = caught.value
    try:
        return error.code, json.loads(error.read())["error"]
    finally:
        error.close()


def preemptor() -> dict[str, Any]:
    pod = pod_object("big", gpus=4, cpus=16)
    pod["spec"]["priority"] = HIGH
    return pod


def meta_victims(names: tuple[str, ...], violations: int = 0) -> dict[str, Any]:
    return {"Pods": [{"UID": f"uid-{name}"} for name in names], "NumPDBViolations": violations}


def test_kube_schedulers_meta_victims_keep_only_the_node_whose_freed_room_the_kubelet_admits(
    extender_url: str,
) -> None:
    """4 GPUs freed on each node: enough for kube-scheduler's node-level model on both, but on h100-a they are
    2 per NUMA cell, which single-numa-node refuses; on h100-b they are one whole cell."""
    (config,) = yaml.safe_load_all(SCHEDULER_CONFIG.read_text())
    (extender,) = config["extenders"]
    verb = extender["preemptVerb"]  # the verb kube-scheduler is configured to POST is one the extender serves
    args = {
        "Pod": preemptor(),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"h100-a": meta_victims(SPLIT_VICTIMS), "h100-b": meta_victims(WHOLE_VICTIMS, 1)},
    }
    answer = post(f"{extender_url}/{verb}", args)
    # h100-b's victims come back as sent (the NumPDBViolations too): kube-scheduler maps the UIDs to its pods.
    assert answer == {"NodeNameToMetaVictims": {"h100-b": meta_victims(WHOLE_VICTIMS, 1)}}


def test_full_victim_pods_are_answered_as_meta_victims(
    cluster: tuple[ShimEmulator, Replica], extender_url: str
) -> None:
    """Without nodeCacheCapable kube-scheduler sends the victims as Pods; the answer is MetaVictims all the same."""
    emulator, _ = cluster
    args = {
        "Pod": preemptor(),
        "NodeNameToVictims": {
            node: {"Pods": [emulator.pod("default", name) for name in names], "NumPDBViolations": 0}
            for node, names in (("h100-a", SPLIT_VICTIMS), ("h100-b", WHOLE_VICTIMS))
        },
        "NodeNameToMetaVictims": None,
    }
    assert post(f"{extender_url}/preempt", args) == {"NodeNameToMetaVictims": {"h100-b": meta_victims(WHOLE_VICTIMS)}}


def test_too_few_victims_and_nodes_without_victims_are_dropped(extender_url: str) -> None:
    args = {
        "Pod": preemptor(),
        "NodeNameToMetaVictims": {
            "h100-b": meta_victims(WHOLE_VICTIMS[:1]),  # 2 GPUs freed: the pod asks 4
            "h100-a": {"Pods": [], "NumPDBViolations": 0},  # kube-scheduler refuses a node kept without victims
        },
    }
    assert post(f"{extender_url}/preempt", args) == {"NodeNameToMetaVictims": {}}
    assert post(f"{extender_url}/preempt", {"Pod": preemptor()}) == {"NodeNameToMetaVictims": {}}


def test_malformed_preemption_args_are_a_400_naming_what_is_wrong(extender_url: str) -> None:
    url = f"{extender_url}/preempt"
    assert refused(url, {"Pod": "big", "NodeNameToMetaVictims": {}}) == (
        400,
        "ExtenderPreemptionArgs.Pod must be a Pod object",
    )
    assert refused(url, {"Pod": preemptor(), "NodeNameToMetaVictims": ["h100-b"]}) == (
        400,
        "ExtenderPreemptionArgs.NodeNameToMetaVictims must map node names to victims",
    )
    assert refused(
        url, {"Pod": preemptor(), "NodeNameToMetaVictims": {"h100-b": {"Pods": [{"uid": "uid-b-low-0"}]}}}
    ) == (
        400,
        "the victims on node 'h100-b': every victim must be {UID: <pod uid>}",
    )
    assert refused(url, {"Pod": preemptor(), "NodeNameToVictims": "h100-b"}) == (
        400,
        "ExtenderPreemptionArgs.NodeNameToVictims must map node names to victims",
    )
    assert refused(url, {"Pod": preemptor(), "NodeNameToVictims": {"h100-b": {"Pods": [{"metadata": {}}]}}}) == (
        400,
        "the victims on node 'h100-b': every victim must be a Pod with metadata.uid",
    )
    assert refused(url, {"Pod": preemptor(), "NodeNameToMetaVictims": {"h100-b": {"Pods": "uid-b-low-0"}}}) == (
        400,
        "the victims on node 'h100-b' must be {Pods: [...], NumPDBViolations: n}",
    )


def test_an_unreachable_service_fails_the_preemption_rather_than_approve_it(tmp_path: Path) -> None:
    """No answer from the service: a non-200, which fails kube-scheduler's preemption this cycle (the extender
    is not ignorable) instead of letting it evict for room nobody checked."""
    with ShimEmulator() as emulator:
        api = connect(str(emulator.write_kubeconfig(tmp_path / "kubeconfig")), field_manager=FIELD_MANAGER)
        nowhere = PlacementClient.connect("127.0.0.1:1", deadline_s=1.0)
        server = serve(Extender(api, nowhere), ("127.0.0.1", 0))
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/preempt"
            status, message = refused(
                url, {"Pod": preemptor(), "NodeNameToMetaVictims": {"h100-b": meta_victims(WHOLE_VICTIMS)}}
            )
        finally:
            server.shutdown()
            server.server_close()
            nowhere.close()
            api.close()
    assert status == 503
    assert message.startswith("placement service: UNAVAILABLE")
