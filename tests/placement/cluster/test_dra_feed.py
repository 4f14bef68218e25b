"""The DRA feed against kmock's Kubernetes emulator: which version it reads, what it does without DRA, and
what it keeps when an object cannot be read; and the DRA state the feed writes. Verified against the
emulator only, whose DRA lists here are answered as kube-apiserver answers them (``untyped_list_items``)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.paths import dra_path
from placement.cluster.dra_feed import DraFeed
from placement.core.dra.claims import parse_resource_claim
from placement.core.dra.pools import DeviceRef
from placement.core.dra.slices import parse_resource_slice
from placement.main import UsageError, gpu_drivers
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_state import DraState, Hold
from tests.conftest import wait_until
from tests.deploy.test_shim_deploy import one
from tests.dra_cluster import (
    CLAIMS,
    DEVICE_CLASSES,
    FIXTURES,
    NVIDIA,
    SLICES,
    DraEmulator,
    fixture_slice,
    gpu_claim,
    gpu_class,
)
from tests.kube_emulator import api_version_of
from tests.shim_cluster import ShimEmulator, synced_feed

NVSWITCH = "alloc_nvswitch_8gpu.yaml"
DRA_GROUP = "resource.k8s.io"
LISTED_KINDS = {"resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass", "resourceclaims": "ResourceClaim"}


def untyped_list_items(emulator: DraEmulator) -> None:
    """The emulator's DRA lists answered as kube-apiserver answers a list of a built-in kind: ``apiVersion`` and
    ``kind`` on the list, not on its items (the emulator serves every item as it was written, with both). A
    watch event's object carries both, on the real server as here."""
    store = emulator.kmock

    async def untyped_list(request: kmock.Request) -> dict[str, Any]:
        resource = request.resource
        assert resource is not None
        items = [
            {key: value for key, value in obj.raw.items() if key not in ("apiVersion", "kind")}
            for (listed, namespace, _), obj in store.objects.items()
            if listed == resource and not obj.deleted and request.namespace in (None, namespace)
        ]
        return {
            "apiVersion": api_version_of(resource),
            "kind": f"{store.resources[resource].kind}List",
            "metadata": {"resourceVersion": str(store.resource_version)},
            "items": items,
        }

    for resource in [resource for resource in store.resources if resource.group == DRA_GROUP]:
        store[kmock.action.LIST, resource] << untyped_list


def allocated_claim(name: str, pool: str, devices: tuple[str, ...]) -> dict[str, Any]:
    """``gpu_claim`` allocated ``devices`` of ``pool``."""
    claim = gpu_claim(name, len(devices))
    results = [{"request": "gpus", "driver": NVIDIA, "pool": pool, "device": device} for device in devices]
    claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[DraEmulator, ClusterIndex]]:
    with DraEmulator() as emulator:
        untyped_list_items(emulator)
        emulator.put_object(SLICES, fixture_slice(NVSWITCH, "a"))
        with synced_feed(emulator.write_kubeconfig(tmp_path / "kubeconfig")) as (_, index):
            yield emulator, index


def test_a_cluster_without_dra_is_synced_and_has_no_devices(tmp_path: Path) -> None:
    # The shim emulator serves no resource.k8s.io: its discovery answers 404.
    with ShimEmulator() as emulator, synced_feed(emulator.write_kubeconfig(tmp_path / "kubeconfig")) as (_, index):
        assert not index.dra.served
        assert index.dra.inventory("h100-a", {}).devices == ()


@pytest.mark.slow
def test_the_feed_reads_v1_slices_and_follows_claims(running: tuple[DraEmulator, ClusterIndex]) -> None:
    emulator, index = running
    assert index.dra.served
    assert [e.device.name for e in index.dra.inventory("a", {}).devices] == [f"gpu-{i}" for i in range(8)]
    emulator.put_object(CLAIMS, allocated_claim("two", "a", ("gpu-0", "gpu-5")))
    wait_until(lambda: index.dra.claim("default", "two") is not None, what="the claim in the cache")
    assert {ref.device for ref in index.dra.inventory("a", {}).taken} == {"gpu-0", "gpu-5"}
    emulator.delete_object(CLAIMS, "two", "default")
    wait_until(lambda: index.dra.claim("default", "two") is None, what="the claim to go")
    assert index.dra.inventory("a", {}).taken == frozenset()


@pytest.mark.slow
def test_a_slice_that_cannot_be_read_leaves_what_was_known(running: tuple[DraEmulator, ClusterIndex]) -> None:
    emulator, index = running
    broken = fixture_slice(NVSWITCH, "a")
    broken["spec"]["devices"][1]["attributes"]["uuid"] = {"string": "GPU-1", "int": 1}  # two value types
    emulator.put_object(SLICES, broken)
    emulator.put_object(SLICES, fixture_slice(NVSWITCH, "b"))  # an event after it: the broken one was seen
    wait_until(lambda: len(index.dra.inventory("b", {}).devices) == 8, what="the next slice")
    assert len(index.dra.inventory("a", {}).devices) == 8


@pytest.mark.slow
def test_a_cluster_serving_only_v1beta1_is_read_in_that_version(tmp_path: Path) -> None:
    (document,) = yaml.safe_load_all((FIXTURES / "shape_v1beta1.yaml").read_text())
    document["spec"]["pool"]["resourceSliceCount"] = 1
    basic = document["spec"]["devices"][0]["basic"]
    for listed in ("resource.kubernetes.io/numaNode", "example.com/links"):  # list types arrived with 1.36
        del basic["attributes"][listed]
    del basic["consumesCounters"]  # its counter set is declared by the fixture's other slice
    with DraEmulator(version="v1beta1") as emulator:
        untyped_list_items(emulator)  # the listed slice is read as the discovered version's
        emulator.put_object(kmock.resource("resource.k8s.io", "v1beta1", "resourceslices"), document)
        with synced_feed(emulator.write_kubeconfig(tmp_path / "kubeconfig")) as (_, index):
            (device,) = index.dra.inventory("node-a", {}).devices
            assert device.slice.api_version == "resource.k8s.io/v1beta1"


@pytest.mark.slow
def test_listed_objects_without_api_version_and_kind_are_read(tmp_path: Path) -> None:
    """kube-apiserver writes ``apiVersion`` and ``kind`` on a list but not on its items (a watch event's object
    carries both), and the readers check both: the listed slice, class and claim are read all the same, and
    so is a slice watched after them."""
    with DraEmulator() as emulator:
        untyped_list_items(emulator)
        emulator.put_object(SLICES, fixture_slice(NVSWITCH, "a"))
        emulator.put_object(DEVICE_CLASSES, gpu_class())
        emulator.put_object(CLAIMS, allocated_claim("two", "a", ("gpu-0", "gpu-5")))
        for plural, kind in LISTED_KINDS.items():
            with urllib.request.urlopen(f"{emulator.url}{dra_path('v1', plural)}", timeout=10) as answer:
                listed = json.load(answer)
            assert (listed["apiVersion"], listed["kind"]) == ("resource.k8s.io/v1", f"{kind}List")
            (item,) = listed["items"]
            assert not {"apiVersion", "kind"} & set(item), plural
        with synced_feed(emulator.write_kubeconfig(tmp_path / "kubeconfig")) as (_, index):
            assert [e.device.name for e in index.dra.inventory("a", {}).devices] == [f"gpu-{i}" for i in range(8)]
            assert list(index.dra.classes) == [NVIDIA]
            assert index.dra.claim("default", "two") is not None
            assert {ref.device for ref in index.dra.inventory("a", {}).taken} == {"gpu-0", "gpu-5"}
            emulator.put_object(SLICES, fixture_slice(NVSWITCH, "b"))  # a watch event: its object is typed
            wait_until(lambda: len(index.dra.inventory("b", {}).devices) == 8, what="the watched slice")


def test_discovery_that_fails_is_retried_and_the_feed_is_not_synced_meanwhile() -> None:
    answers: list[Any] = [OSError("connection refused"), OSError("connection refused"), None]

    class Flaky:
        def get(self, path: str) -> Any:
            answer = answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

    stop = threading.Event()
    feed = DraFeed(Flaky(), DraState(threading.RLock()), stop=stop, watch_timeout_s=1, backoff=Backoff(0.01, 0.02))  # type: ignore[arg-type]
    assert not feed.synced
    feed.run()  # 404 on the third call: no DRA
    assert feed.synced
    assert answers == []


def test_rbac_grants_what_the_dra_feed_and_the_binder_use() -> None:
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in one("ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for plural in ("resourceslices", "deviceclasses", "resourceclaims"):
        path = dra_path("v1", plural).strip("/").split("/")
        assert {"list", "watch"} <= granted[(path[1], plural)]
    assert {"get", "patch"} <= granted[("resource.k8s.io", "resourceclaims")]  # the finalizer
    assert granted[("resource.k8s.io", "resourceclaims/status")] == {"patch"}  # allocation, reservedFor


# --- the state the feed writes ------------------------------------------------------------------------------


def _state_with_slice() -> DraState:
    state = DraState(threading.RLock())
    state.set_slice("a", parse_resource_slice(fixture_slice(NVSWITCH, "a")))
    return state


def test_a_hold_takes_devices_until_the_claim_shows_them() -> None:
    state = _state_with_slice()
    before = state.node_key("a", {})
    refs = frozenset(DeviceRef("gpu.nvidia.com", "a", f"gpu-{i}") for i in (4, 5))
    state.hold(("default", "trainer"), [Hold(("default", "two"), "a", refs)])
    assert state.inventory("a", {}).taken == refs
    assert state.node_key("a", {}) != before  # kept answers for the node are stale now

    claim = gpu_claim("two", 2)
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "a", "device": ref.device} for ref in refs
                ]
            }
        }
    }
    state.set_claim(parse_resource_claim(claim))
    assert state.held(("default", "trainer")) == ()  # settled: the claim holds them now
    assert state.inventory("a", {}).taken == refs
    state.release(("default", "trainer"))
    assert state.inventory("a", {}).taken == refs  # still the claim's
    state.remove_claim("default", "two")
    assert state.inventory("a", {}).taken == frozenset()


def test_a_released_hold_frees_its_devices_and_an_unrelated_node_keeps_its_key() -> None:
    state = _state_with_slice()
    state.set_slice("b", parse_resource_slice(fixture_slice(NVSWITCH, "b")))
    key_b = state.node_key("b", {})
    refs = frozenset({DeviceRef("gpu.nvidia.com", "a", "gpu-0")})
    state.hold(("default", "p"), [Hold(("default", "c"), "a", refs)])
    state.release(("default", "p"))
    assert state.inventory("a", {}).taken == frozenset()
    assert state.node_key("b", {}) == key_b


def test_claims_made_from_templates_are_found_by_owner_and_pod_claim_name() -> None:
    state = DraState(threading.RLock())
    claim = copy.deepcopy(gpu_claim("trainer-gpus-x7k2p", 4))
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpus"}
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": "uid-trainer", "controller": True}
    ]
    state.set_claim(parse_resource_claim(claim))
    found = state.owned_claim("default", "uid-trainer", "gpus")
    assert found is not None
    assert found.name == "trainer-gpus-x7k2p"
    assert state.owned_claim("default", "uid-other", "gpus") is None


def test_the_gpu_drivers_flag_is_checked_and_reaches_the_dra_state() -> None:
    assert gpu_drivers("gpu.nvidia.com, gpu.example.com") == ("gpu.nvidia.com", "gpu.example.com")
    for bad in ("", "GPU.nvidia.com", "gpu_nvidia", "a" * 64):
        with pytest.raises(UsageError, match="--dra-gpu-drivers"):
            gpu_drivers(bad)
    assert ClusterIndex(gpu_drivers=("gpu.example.com",)).dra.gpu_drivers == ("gpu.example.com",)
    done = subprocess.run(
        [sys.executable, "-m", "placement.main", "serve", "--kubeconfig", "/nonexistent", "--dra-gpu-drivers", "GPU"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--dra-gpu-drivers 'GPU': each name must be a DNS subdomain" in done.stderr
    assert "Traceback" not in done.stderr
