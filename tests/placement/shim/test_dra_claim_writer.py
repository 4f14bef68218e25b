"""The binder's claim writes against kmock's Kubernetes emulator: the finalizer then the status, a conflict
retried from a fresh read, a claim allocated meanwhile by someone else respected, a release. Verified
against the emulator only (its resourceVersion preconditions answer 409 as the API server's do)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kubenexus.kube.client import Json, KubeClient, connect
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import FIELD_MANAGER
from placement.shim.claim_writer import DELETE_PROTECTION, ClaimWriteError, ClaimWriter
from tests.dra_cluster import CLAIMS, DraEmulator, gpu_claim

POD: Json = {"metadata": {"name": "trainer", "namespace": "default", "uid": "uid-trainer"}}
ALLOCATION = {
    "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "a", "device": "gpu-4"}]},
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]
    },
}


class Meddling:
    """The real client, with ``before_status`` run once just before its first write to a claim's status: what
    another writer does between our read and our write."""

    def __init__(self, api: KubeClient, before_status: Callable[[], None]) -> None:
        self._api = api
        self._before: Callable[[], None] | None = before_status
        self.status_writes = 0

    def get(self, path: str) -> Json | None:
        return self._api.get(path)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Json:
        if path.endswith("/status"):
            self.status_writes += 1
            if self._before is not None:
                before, self._before = self._before, None
                before()
        return self._api.merge_patch(path, patch)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[DraEmulator, KubeClient]]:
    with DraEmulator() as emulator:
        emulator.put_object(CLAIMS, gpu_claim("one", 1))
        api = connect(str(emulator.write_kubeconfig(tmp_path / "kubeconfig")), field_manager=FIELD_MANAGER)
        try:
            yield emulator, api
        finally:
            api.close()


def _choice(allocation: Mapping[str, Any] | None = ALLOCATION) -> pb.ClaimAllocation:
    return pb.ClaimAllocation(
        namespace="default", name="one", allocation_json="" if allocation is None else json.dumps(allocation)
    )


def test_the_finalizer_then_the_allocation_and_the_reservation(cluster: tuple[DraEmulator, KubeClient]) -> None:
    emulator, api = cluster
    ClaimWriter(api).allocate(POD, _choice())
    claim = emulator.claim("default", "one")
    assert claim["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert claim["status"] == {
        "allocation": ALLOCATION,
        "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "uid-trainer"}],
    }
    ClaimWriter(api).allocate(POD, _choice())  # again (a retried pass): nothing more is written
    assert emulator.claim("default", "one")["status"]["reservedFor"] == claim["status"]["reservedFor"]


def test_a_conflict_is_retried_from_a_fresh_read(cluster: tuple[DraEmulator, KubeClient]) -> None:
    emulator, api = cluster

    def label_it() -> None:  # another writer changes the claim: its resourceVersion moves on
        claim = emulator.claim("default", "one")
        claim["metadata"]["labels"] = {"team": "ml"}
        emulator.put_object(CLAIMS, claim)

    meddling = Meddling(api, label_it)
    ClaimWriter(meddling).allocate(POD, _choice())  # type: ignore[arg-type]  # the client's two calls
    assert meddling.status_writes == 2  # the first answered 409, the second from the fresh read
    claim = emulator.claim("default", "one")
    assert claim["metadata"]["labels"] == {"team": "ml"}
    assert claim["status"]["allocation"] == ALLOCATION


def test_a_claim_allocated_meanwhile_to_other_devices_is_respected(cluster: tuple[DraEmulator, KubeClient]) -> None:
    emulator, api = cluster
    theirs = json.loads(json.dumps(ALLOCATION).replace("gpu-4", "gpu-0"))

    def allocate_it() -> None:  # kube-scheduler (or another replica) allocates it first
        claim = emulator.claim("default", "one")
        claim["status"] = {"allocation": theirs}
        emulator.put_object(CLAIMS, claim)

    with pytest.raises(ClaimWriteError, match="was allocated meanwhile, to other devices"):
        ClaimWriter(Meddling(api, allocate_it)).allocate(POD, _choice())  # type: ignore[arg-type]
    assert emulator.claim("default", "one")["status"] == {"allocation": theirs}


def test_a_shared_claim_allocated_already_is_only_reserved(cluster: tuple[DraEmulator, KubeClient]) -> None:
    emulator, api = cluster
    claim = emulator.claim("default", "one")
    claim["status"] = {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods", "name": "a", "uid": "uid-a"}]}
    emulator.put_object(CLAIMS, claim)
    ClaimWriter(api).allocate(POD, _choice(None))
    status = emulator.claim("default", "one")["status"]
    assert status["allocation"] == ALLOCATION
    assert [c["name"] for c in status["reservedFor"]] == ["a", "trainer"]
    ClaimWriter(api).release(POD, _choice(None))
    assert [c["name"] for c in emulator.claim("default", "one")["status"]["reservedFor"]] == ["a"]


def test_a_claim_that_is_gone_or_being_deleted_fails_the_write(cluster: tuple[DraEmulator, KubeClient]) -> None:
    emulator, api = cluster
    with pytest.raises(ClaimWriteError, match=r'resourceclaim\.resource\.k8s\.io "nope" not found'):
        ClaimWriter(api).allocate(POD, pb.ClaimAllocation(namespace="default", name="nope"))
    with pytest.raises(ClaimWriteError, match="is no longer allocated"):
        ClaimWriter(api).allocate(POD, _choice(None))
    claim = emulator.claim("default", "one")
    claim["metadata"] |= {"finalizers": [DELETE_PROTECTION], "deletionTimestamp": "2026-11-26T10:00:00Z"}
    emulator.put_object(CLAIMS, claim)
    with pytest.raises(ClaimWriteError, match="is being deleted"):
        ClaimWriter(api).allocate(POD, _choice())
    assert "status" not in emulator.claim("default", "one")
