"""The emulated API is as strict as a real API server (``tests.kube_emulator``): a write a real server would
refuse is answered 422 and recorded, a stale or refused write stores nothing, and watches resume from a
resourceVersion. Every end-to-end test goes through the same emulator; these prove that it bites."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kmock
import pytest

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import Json, KubeClient, connect
from kubenexus.kube.errors import ApiError
from kubenexus.kube.leader import LeaderElector, LeaseConfig
from kubenexus.kube.paths import NODES_PATH
from kubenexus.kube.reflector import Reflector
from tests.conftest import wait_until
from tests.kube_emulator import NODES, Emulator, merge_patch
from tests.shim_cluster import LEASES, NAMESPACE, ShimEmulator, pod_object

pytestmark = pytest.mark.slow

LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
COMMA_LABEL = {"metadata": {"labels": {"numa.kubenexus.io/node-0-cpus": "0-15,32-47"}}}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ShimEmulator]:
    with ShimEmulator() as emulator:
        emulator.write_kubeconfig(tmp_path / "kubeconfig")
        yield emulator


@pytest.fixture
def client(api: ShimEmulator, tmp_path: Path) -> Iterator[KubeClient]:
    kube = connect(str(tmp_path / "kubeconfig"), field_manager="conformance-tests")
    yield kube
    kube.close()


def refused(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


def lease(name: str = "kubenexus-placement", **spec: Any) -> Json:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "placement-0", "leaseDurationSeconds": 15, **spec},
    }


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- non-conformant writes: 422, recorded, nothing stored ------------------------------------------------------


def test_an_event_with_an_unknown_field_is_refused_and_recorded(api: ShimEmulator, client: KubeClient) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "worker-0.1", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "default", "name": "worker-0"},
        "reason": "Scheduled",
        "message": "assigned",
        "reportingController": "kubenexus-scheduler",  # events.k8s.io/v1's name; core/v1 calls it reportingComponent
    }
    error = refused(lambda: client.create("/api/v1/namespaces/default/events", event))
    assert error.status == 422
    assert "'reportingController' was unexpected" in error.message
    assert api.events("worker-0") == []
    (recorded,) = api.take_violations()
    assert recorded.startswith("Event 'worker-0.1': $: Additional properties are not allowed ('reportingController'")


def test_a_lease_with_a_string_duration_is_refused_created_or_patched(api: ShimEmulator, client: KubeClient) -> None:
    assert refused(lambda: client.create(LEASES_PATH, lease(leaseDurationSeconds="x"))).status == 422
    client.create(LEASES_PATH, lease())
    stored = api.kmock.current((LEASES, NAMESPACE, "kubenexus-placement"))
    patch = {"spec": {"leaseDurationSeconds": "x"}}
    assert refused(lambda: client.merge_patch(f"{LEASES_PATH}/kubenexus-placement", patch)).status == 422
    assert api.kmock.current((LEASES, NAMESPACE, "kubenexus-placement")) == stored
    recorded = api.take_violations()
    assert len(recorded) == 2
    assert all("$.spec.leaseDurationSeconds: 'x' is not of type 'integer'" in line for line in recorded)


def send_a_comma_label(tmp_path: Path, then: Callable[[], object] = lambda: None) -> None:
    with Emulator() as api:
        api.add_node("gpu-1")
        kube = connect(str(api.write_kubeconfig(tmp_path / "kubeconfig")), field_manager="conformance-tests")
        try:
            assert refused(lambda: kube.merge_patch("/api/v1/nodes/gpu-1", COMMA_LABEL)).status == 422
        finally:
            kube.close()
        then()


def test_leaving_the_emulator_with_a_refused_write_fails_the_test(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"refuses:\nNode 'gpu-1': metadata.labels: Invalid value '0-15,32-47'"):
        send_a_comma_label(tmp_path)


def test_a_refused_write_is_added_to_a_failure_already_on_its_way(tmp_path: Path) -> None:
    def fail() -> None:
        raise RuntimeError("the test failed first")

    with pytest.raises(RuntimeError, match="the test failed first") as failure:
        send_a_comma_label(tmp_path, then=fail)
    assert "Invalid value '0-15,32-47'" in "\n".join(failure.value.__notes__)


def test_a_binding_is_checked_as_the_api_server_checks_it(api: ShimEmulator, client: KubeClient) -> None:
    created = client.create("/api/v1/namespaces/default/pods", pod_object("p"))
    client.merge_patch("/api/v1/namespaces/default/pods/p", {"metadata": {"annotations": {"team": "ml"}}})
    path = "/api/v1/namespaces/default/pods/p/binding"

    def binding(**metadata: str) -> Json:
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p", "namespace": "default", **metadata},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "h100-a"},
        }

    assert refused(lambda: client.create(path, binding() | {"node": "h100-a"})).status == 422
    assert refused(lambda: client.create(path, binding(uid="uid-someone-else"))).status == 409
    stale = binding(resourceVersion=created["metadata"]["resourceVersion"])  # the pod has been patched since
    assert refused(lambda: client.create(path, stale)).status == 409
    client.create(path, binding(uid="uid-p"))
    assert api.pod("default", "p")["spec"]["nodeName"] == "h100-a"
    already = refused(lambda: client.create(path, binding()))
    assert (already.status, already.message) == (
        409,
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "h100-a"',
    )
    assert api.bindings == [("default", "p", "h100-a")]
    (recorded,) = api.take_violations()
    assert "'node' was unexpected" in recorded


def test_only_merge_patches_are_taken(api: ShimEmulator) -> None:
    api.add_node("n1")
    json_patch = urllib.request.Request(
        f"{api.url}/api/v1/nodes/n1",
        data=b'[{"op": "add", "path": "/metadata/labels/a", "value": "b"}]',
        headers={"Content-Type": "application/json-patch+json"},
        method="PATCH",
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(json_patch, timeout=5)
    error.value.close()
    assert error.value.code == 415


# --- resourceVersion: every write bumps it, a stale one is refused, a refused write stores nothing ----------


def test_a_stale_resource_version_is_refused_409_and_changes_nothing(api: ShimEmulator, client: KubeClient) -> None:
    path = f"{LEASES_PATH}/kubenexus-placement"
    created = client.create(LEASES_PATH, lease())
    read = created["metadata"]["resourceVersion"]
    renewed = client.merge_patch(path, {"metadata": {"resourceVersion": read}, "spec": {"renewTime": now()}})
    assert int(renewed["metadata"]["resourceVersion"]) > int(read)
    version = api.kmock.resource_version

    stale = {"metadata": {"resourceVersion": read}, "spec": {"holderIdentity": "placement-1"}}
    error = refused(lambda: client.merge_patch(path, stale))
    assert error.status == 409
    assert error.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "kubenexus-placement": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    assert refused(lambda: client.merge_patch(path, {"metadata": {"uid": "someone-else"}})).status == 409
    assert client.get(path) == renewed
    assert api.kmock.resource_version == version, "a refused write must not reach the store or the watches"


def test_a_scripted_refusal_stores_nothing(api: ShimEmulator, client: KubeClient) -> None:
    api.add_node("n1")
    before = api.node("n1")
    api.kmock["patch", NODES][:1] << 409 << {"kind": "Status", "code": 409, "reason": "Conflict", "message": "retry"}
    patch = {"metadata": {"labels": {"team": "ml"}}}
    assert refused(lambda: client.merge_patch("/api/v1/nodes/n1", patch)).status == 409
    assert api.node("n1") == before
    client.merge_patch("/api/v1/nodes/n1", patch)
    assert api.node("n1")["metadata"]["labels"] == {"team": "ml"}
    assert int(api.node("n1")["metadata"]["resourceVersion"]) == int(before["metadata"]["resourceVersion"]) + 1


def test_a_renewal_that_lost_the_race_loses_the_lease(api: ShimEmulator, client: KubeClient) -> None:
    """Another replica writes the Lease between the leader's read and its renewal: the renewal carries the
    version it read, is answered 409 and stores nothing, and the leader steps down by its renew deadline."""
    config = LeaseConfig(
        namespace=NAMESPACE,
        name="race",
        identity="placement-0",
        lease_duration_s=3.0,
        renew_deadline_s=1.0,
        retry_period_s=0.1,
    )
    key = (LEASES, NAMESPACE, "race")
    rival: Json = {}

    async def rival_renews_first(request: kmock.Request) -> None:
        takeover = {"spec": {"holderIdentity": "placement-1", "renewTime": now(), "leaseDurationSeconds": 30}}
        rival.update(await api.kmock.put_object(key, merge_patch(api.kmock.existing(key), takeover)))

    elector = LeaderElector(client, config)
    elector.start()
    try:
        wait_until(elector.is_leader, what="the leader")
        api.kmock["patch", LEASES][:1] << rival_renews_first
        wait_until(lambda: elector.leader_identity() == "placement-1", what="the step-down")
        assert not elector.is_leader()
    finally:
        elector.stop()
    assert api.kmock.current(key) == rival, "the renewal answered 409 was stored"


@pytest.mark.parametrize(("duration_s", "renew_deadline_s", "published"), [(0.4, 0.3, 1), (2.4, 2.3, 3)])
def test_the_lease_duration_is_published_in_whole_seconds_rounded_up(
    api: ShimEmulator, client: KubeClient, duration_s: float, renew_deadline_s: float, published: int
) -> None:
    """Rounded to nearest, 0.4 s was published as 0 (refused by the API server: never a leader) and 2.4 s as 2,
    less than the 2.3 s renew deadline (the others could take over from a leader still deciding)."""
    config = LeaseConfig(
        namespace=NAMESPACE,
        name="short",
        identity="placement-0",
        lease_duration_s=duration_s,
        renew_deadline_s=renew_deadline_s,
        retry_period_s=0.1,
    )
    elector = LeaderElector(client, config)
    elector.start()
    try:
        wait_until(elector.is_leader, timeout_s=5, what="the leader")
        spec = (api.kmock.current((LEASES, NAMESPACE, "short")) or {})["spec"]
    finally:
        elector.stop()
    assert spec["leaseDurationSeconds"] == published >= renew_deadline_s


# --- watches ------------------------------------------------------------------------------------------------


def test_a_watch_sends_what_changed_after_its_version_then_a_bookmark(api: ShimEmulator, client: KubeClient) -> None:
    api.add_node("n1")
    listed = client.list(NODES_PATH)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "NodeList")
    version = int(listed["metadata"]["resourceVersion"])
    client.merge_patch("/api/v1/nodes/n1", {"metadata": {"labels": {"team": "ml"}}})
    api.add_node("n2")

    def seen(resource_version: str) -> list[tuple[str, str | None, str]]:
        events = client.watch(NODES_PATH, resource_version=resource_version, timeout_s=1)
        return [
            (e["type"], e["object"]["metadata"].get("name"), e["object"]["metadata"]["resourceVersion"]) for e in events
        ]

    assert seen(str(version)) == [
        ("MODIFIED", "n1", str(version + 1)),
        ("ADDED", "n2", str(version + 2)),
        ("BOOKMARK", None, str(version + 2)),
    ]
    assert seen("") == [
        ("ADDED", "n1", str(version + 1)),
        ("ADDED", "n2", str(version + 2)),
        ("BOOKMARK", None, str(version + 2)),
    ]
    with urllib.request.urlopen(urllib.request.Request(f"{api.url}/api/v1/nodes/n2", method="DELETE"), timeout=5):
        pass
    assert seen(str(version + 2)) == [("DELETED", "n2", str(version + 3)), ("BOOKMARK", None, str(version + 3))]
    assert [node["metadata"]["name"] for node in client.list(NODES_PATH)["items"]] == ["n1"]


def test_a_reflector_resumes_from_the_last_version_and_misses_nothing(api: ShimEmulator, client: KubeClient) -> None:
    api.add_node("n1")
    applied: list[tuple[str, str]] = []
    lists: list[int] = []

    class Recorder:
        def replace(self, objects: list[Json]) -> None:
            lists.append(len(objects))

        def apply(self, kind: str, obj: Json) -> None:
            applied.append((kind, obj["metadata"]["labels"].get("pass", "")))

    def watches() -> list[kmock.Request]:
        return [r for r in api.requests() if r.url.path == NODES_PATH and r.url.query.get("watch")]

    stop = threading.Event()
    reflector = Reflector(client, NODES_PATH, Recorder(), stop=stop, watch_timeout_s=1, backoff=Backoff(0.05, 0.1))
    thread = threading.Thread(target=reflector.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: reflector.listed and watches(), what="the first watch")
        for number in ("1", "2", "3"):
            resumed = len(watches()) + 1
            client.merge_patch("/api/v1/nodes/n1", {"metadata": {"labels": {"pass": number}}})
            wait_until(lambda: len(watches()) >= resumed, what="the server to end the stream and the watch to resume")  # noqa: B023
        wait_until(lambda: len(applied) == 3, what="the third change")
    finally:
        stop.set()
        client.close_streams()
        thread.join(10)
    assert applied == [("MODIFIED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3")]  # each once, in order
    assert lists == [1], "a resume must not relist"
    versions = [int(r.url.query["resourceVersion"]) for r in watches()]
    assert versions == sorted(versions)
    assert versions[-1] == api.kmock.resource_version
