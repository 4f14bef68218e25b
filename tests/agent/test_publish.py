"""The publisher's planning (pure) and its retry, skip and resync behaviour (against a scripted fake API)."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import urllib3

from agent.publish import (
    AnotherWriters,
    NrtWrite,
    Outcome,
    Publisher,
    PublishError,
    RetryPolicy,
    Target,
    plan_node_patch,
    plan_nrt_write,
)
from kubenexus.kube.errors import ApiError, is_retryable
from kubenexus.topology.labels import NodeMetadata
from kubenexus.topology.nrt import MODEL_ATTRIBUTE

OWNED = "numa.kubenexus.io/node-count"
POOL = urllib3.HTTPConnectionPool("127.0.0.1", 9)
MODEL = "topology.kubenexus.io/model"


def desired(labels: dict[str, str], annotations: dict[str, str] | None = None) -> NodeMetadata:
    return NodeMetadata(labels=labels, annotations=annotations or {})


# --- plan_node_patch ---------------------------------------------------------------------------


def test_node_patch_sets_new_and_changed_owned_keys_only() -> None:
    current = {OWNED: "1", "numa.kubenexus.io/node-0-cpus": "0-7", "example.com/team": "ml"}
    patch = plan_node_patch(current, {}, desired({OWNED: "2", "numa.kubenexus.io/node-0-cpus": "0-7"}, {MODEL: "{}"}))
    assert patch == {"metadata": {"labels": {OWNED: "2"}, "annotations": {MODEL: "{}"}}}


def test_node_patch_removes_stale_owned_keys_and_never_foreign_ones() -> None:
    current = {OWNED: "2", "gpu.kubenexus.io/gpu7-numa": "1", "example.com/team": "ml", "kubernetes.io/os": "linux"}
    annotations = {"topology.kubenexus.io/old": "x", "node.alpha.kubernetes.io/ttl": "0"}
    patch = plan_node_patch(current, annotations, desired({OWNED: "2"}))
    assert patch == {
        "metadata": {"labels": {"gpu.kubenexus.io/gpu7-numa": None}, "annotations": {"topology.kubenexus.io/old": None}}
    }


def test_node_patch_keeps_the_rack_label_operators_set_under_our_prefix() -> None:
    current = {OWNED: "2", "topology.kubenexus.io/rack": "r1", "topology.kubenexus.io/stale": "x"}
    patch = plan_node_patch(current, {}, desired({OWNED: "2", "topology.kubenexus.io/rack": "r9"}))
    assert patch == {"metadata": {"labels": {"topology.kubenexus.io/stale": None}}}


def test_node_patch_is_none_when_owned_keys_match() -> None:
    current = {OWNED: "2", "example.com/team": "ml"}
    assert plan_node_patch(current, {MODEL: "m"}, desired({OWNED: "2"}, {MODEL: "m"})) is None


def test_node_patch_never_writes_a_key_the_agent_does_not_own() -> None:
    patch = plan_node_patch({}, {}, desired({"example.com/team": "hijack", OWNED: "1"}))
    assert patch == {"metadata": {"labels": {OWNED: "1"}}}


# --- plan_nrt_write ----------------------------------------------------------------------------

NRT = {
    "apiVersion": "topology.node.k8s.io/v1alpha2",
    "kind": "NodeResourceTopology",
    "metadata": {"name": "n1"},
    "zones": [{"name": "node-0", "type": "Node"}],
    "attributes": [{"name": "topologyManagerPolicy", "value": "none"}, {"name": MODEL_ATTRIBUTE, "value": "m"}],
}
# Node Feature Discovery's: the same zone shape, its own attributes and no model, applied by its field manager.
NFD_NRT = {
    **NRT,
    "metadata": {
        "name": "n1",
        "managedFields": [
            {"manager": "node-feature-discovery-topology-updater", "operation": "Apply"},
            {"manager": "kubenexus-agent", "operation": "Update"},  # a write of ours NFD took over since
        ],
    },
    "attributes": [{"name": "topologyManagerPolicy", "value": "none"}],
}


def as_stored(nrt: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What the API server returns: the object plus its own bookkeeping and others' metadata."""
    return {**nrt, "metadata": {**nrt["metadata"], "uid": "u1", "resourceVersion": "7"}, **extra}


def test_nrt_is_created_when_absent() -> None:
    write = plan_nrt_write(None, NRT)
    assert isinstance(write, NrtWrite)
    assert (write.verb, write.body) == ("create", NRT)


def test_nrt_unchanged_content_needs_no_write_whatever_the_server_added() -> None:
    assert plan_nrt_write(as_stored(NRT), NRT) is None


def test_nrt_patch_replaces_changed_content_and_drops_content_the_agent_no_longer_writes() -> None:
    changed = {**NRT, "zones": [{"name": "node-0", "type": "Node"}, {"name": "node-1", "type": "Node"}]}
    stored = as_stored(NRT, topologyPolicies=["SingleNUMANodeContainerLevel"])
    write = plan_nrt_write(stored, changed)
    assert isinstance(write, NrtWrite)
    assert (write.verb, write.body) == ("patch", {"topologyPolicies": None, "zones": changed["zones"]})


def test_an_nrt_another_wrote_is_left_to_it() -> None:
    assert plan_nrt_write(as_stored(NFD_NRT), NRT) == AnotherWriters(("node-feature-discovery-topology-updater",))
    assert plan_nrt_write({**NRT, "attributes": []}, NRT) == AnotherWriters(())  # writers not named: still left


def test_nrt_metadata_is_patched_key_by_key() -> None:
    stored = as_stored(NRT)
    stored["metadata"]["labels"] = {"example.com/team": "ml", "topology.kubenexus.io/stale": "1"}
    write = plan_nrt_write(stored, NRT)
    assert isinstance(write, NrtWrite)
    assert write.body == {"metadata": {"labels": {"topology.kubenexus.io/stale": None}}}


# --- retry classification and backoff ----------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (ApiError(409, ""), True),
        (ApiError(429, ""), True),
        (ApiError(500, ""), True),
        (ApiError(503, ""), True),
        (urllib3.exceptions.MaxRetryError(POOL, "/", reason=ConnectionRefusedError()), True),
        (ConnectionResetError(), True),
        (ApiError(403, ""), False),
        (ApiError(404, ""), False),
        (ApiError(422, ""), False),
        (ValueError("bad JSON"), False),
    ],
)
def test_retryable_errors(error: BaseException, retryable: bool) -> None:
    assert is_retryable(error) is retryable


def test_backoff_grows_exponentially_is_capped_and_jittered() -> None:
    policy = RetryPolicy(attempts=10, base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(7)
    delays = [[policy.delay(retry, rng) for retry in range(6)] for _ in range(50)]
    for row in delays:
        for retry, delay in enumerate(row):
            ceiling = min(4.0, 0.5 * 2**retry)
            assert ceiling / 2 <= delay <= ceiling
    assert len({row[2] for row in delays}) > 40  # jittered: a fleet does not retry in lockstep


# --- the publisher against a scripted API ------------------------------------------------------


class FakeApi:
    """Holds one node and its NRT; ``failures`` are raised, in order, by the next calls."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        self.labels: dict[str, str] = dict(labels or {})
        self.annotations: dict[str, str] = {}
        self.nrt_object: dict[str, Any] | None = None
        self.calls: list[str] = []
        self.failures: list[BaseException] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.failures:
            raise self.failures.pop(0)

    def read_node(self, name: str) -> dict[str, Any]:
        self._call("read_node")
        return {"metadata": {"name": name, "labels": dict(self.labels), "annotations": dict(self.annotations)}}

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self._call("patch_node")
        for section, target in (("labels", self.labels), ("annotations", self.annotations)):
            for key, value in patch["metadata"].get(section, {}).items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value

    def read_nrt(self, name: str) -> dict[str, Any] | None:
        self._call("read_nrt")
        return self.nrt_object

    def create_nrt(self, body: dict[str, Any]) -> None:
        self._call("create_nrt")
        self.nrt_object = body

    def patch_nrt(self, name: str, patch: dict[str, Any]) -> None:
        self._call("patch_nrt")
        assert self.nrt_object is not None
        self.nrt_object = {**self.nrt_object, **patch}

    @property
    def writes(self) -> list[str]:
        return [call for call in self.calls if not call.startswith("read")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_publisher(
    api: FakeApi, *, clock: Clock | None = None, sleep: Callable[[float], bool] | None = None, **kwargs: Any
) -> tuple[Publisher, list[float]]:
    slept: list[float] = []

    def record(seconds: float) -> bool:
        slept.append(seconds)
        return False

    publisher = Publisher(
        api,
        "n1",
        clock=clock or Clock(),
        sleep=sleep or record,
        rng=random.Random(1),
        retry=RetryPolicy(attempts=3, base_delay_s=0.5, max_delay_s=30.0),
        **kwargs,
    )
    return publisher, slept


def test_first_publish_writes_then_an_unchanged_state_costs_no_api_call() -> None:
    api = FakeApi({"example.com/team": "ml"})
    publisher, _ = make_publisher(api)
    metadata = desired({OWNED: "2"}, {MODEL: "m"})
    first = publisher.publish(metadata=metadata, nrt=NRT)
    assert [(r.target, r.outcome, r.writes) for r in first] == [
        (Target.NODE, Outcome.UPDATED, 1),
        (Target.NRT, Outcome.UPDATED, 1),
    ]
    assert api.labels == {"example.com/team": "ml", OWNED: "2"}
    calls_after_first = len(api.calls)

    again = publisher.publish(metadata=desired({OWNED: "2"}, {MODEL: "m"}), nrt=dict(NRT))
    assert [r.outcome for r in again] == [Outcome.SKIPPED, Outcome.SKIPPED]
    assert len(api.calls) == calls_after_first


def test_an_nrt_node_feature_discovery_writes_is_never_written_and_the_node_still_is() -> None:
    api = FakeApi()
    api.nrt_object = as_stored(NFD_NRT)
    clock = Clock()
    publisher, _ = make_publisher(api, clock=clock)
    node, nrt = publisher.publish(metadata=desired({OWNED: "2"}, {MODEL: "m"}), nrt=NRT)
    assert (node.outcome, nrt.outcome, nrt.writes) == (Outcome.UPDATED, Outcome.LEFT, 0)
    assert nrt.left_to == ("node-feature-discovery-topology-updater",)
    assert api.writes == ["patch_node"]
    assert api.nrt_object == as_stored(NFD_NRT)
    # Left, as published: the same state is not read again before the resync; a new one is read, and left.
    assert publisher.publish(metadata=None, nrt=NRT)[0].outcome is Outcome.SKIPPED
    changed = {**NRT, "zones": []}
    assert publisher.publish(metadata=None, nrt=changed)[0].outcome is Outcome.LEFT
    # Deleted (NFD uninstalled): the agent's again, at its next pass.
    api.nrt_object = None
    clock.now += 3600
    assert publisher.publish(metadata=None, nrt=changed)[0].outcome is Outcome.UPDATED
    assert api.nrt_object == changed
    assert api.writes == ["patch_node", "create_nrt"]


def test_resync_reads_back_and_repairs_drift_but_writes_nothing_without_it() -> None:
    api = FakeApi()
    clock = Clock()
    publisher, _ = make_publisher(api, clock=clock, resync_s=3600)
    metadata = desired({OWNED: "2"})
    publisher.publish(metadata=metadata, nrt=None)

    clock.now += 3599
    assert publisher.publish(metadata=metadata, nrt=None)[0].outcome is Outcome.SKIPPED
    clock.now += 1
    writes_before = len(api.writes)
    assert publisher.publish(metadata=metadata, nrt=None)[0].outcome is Outcome.UNCHANGED
    assert len(api.writes) == writes_before

    del api.labels[OWNED]  # someone removed our label
    clock.now += 3600
    assert publisher.publish(metadata=metadata, nrt=None)[0].outcome is Outcome.UPDATED
    assert api.labels[OWNED] == "2"


def test_a_changed_desired_state_is_published_before_the_resync() -> None:
    api = FakeApi()
    publisher, _ = make_publisher(api)
    publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)
    result = publisher.publish(metadata=desired({OWNED: "3"}), nrt=None)
    assert result[0].outcome is Outcome.UPDATED
    assert api.labels[OWNED] == "3"


def test_conflict_and_server_error_are_retried_with_a_re_read_and_backoff() -> None:
    api = FakeApi()
    api.failures = [ApiError(409, "Conflict")]
    publisher, slept = make_publisher(api)
    result = publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0]
    assert (result.outcome, result.attempts, result.writes) == (Outcome.UPDATED, 2, 1)
    assert api.calls == ["read_node", "read_node", "patch_node"]
    assert len(slept) == 1

    api.failures = [ApiError(500, ""), ApiError(503, "")]
    nrt = publisher.publish(metadata=None, nrt=NRT)[0]
    assert (nrt.outcome, nrt.attempts) == (Outcome.UPDATED, 3)
    assert api.nrt_object == NRT
    assert 0.25 <= slept[1] <= 0.5
    assert 0.5 <= slept[2] <= 1.0


def test_an_outage_fails_the_pass_without_raising_and_the_next_pass_tries_again() -> None:
    api = FakeApi()
    outage = urllib3.exceptions.MaxRetryError(POOL, "/api", reason=ConnectionRefusedError("refused"))
    api.failures = [outage, outage, outage]
    publisher, slept = make_publisher(api)
    result = publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0]
    assert result.outcome is Outcome.FAILED
    assert result.attempts == 3
    assert result.error is not None
    assert "ConnectionRefusedError" in result.error
    assert len(slept) == 2  # no sleep after the last attempt

    # The failed state was not remembered as published, so the next pass is not skipped.
    assert publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0].outcome is Outcome.UPDATED


def test_errors_a_retry_cannot_fix_fail_at_once() -> None:
    api = FakeApi()
    api.failures = [ApiError(403, "Forbidden")]
    publisher, slept = make_publisher(api)
    result = publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0]
    assert (result.outcome, result.attempts, slept) == (Outcome.FAILED, 1, [])
    assert result.error == "HTTP 403: Forbidden"

    api.failures = [PublishError("node 'n1' not found (check --node-name / NODE_NAME)")]
    result = publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0]
    assert result.error == "node 'n1' not found (check --node-name / NODE_NAME)"


def test_shutdown_during_backoff_ends_the_retries() -> None:
    api = FakeApi()
    api.failures = [ApiError(500, ""), ApiError(500, "")]
    publisher, _ = make_publisher(api, sleep=lambda seconds: True)
    result = publisher.publish(metadata=desired({OWNED: "2"}), nrt=None)[0]
    assert (result.outcome, result.attempts) == (Outcome.FAILED, 1)
    assert result.error is not None
    assert result.error.startswith("shutting down")


def test_dry_run_prints_the_patches_and_writes_nothing() -> None:
    api = FakeApi({"example.com/team": "ml", "numa.kubenexus.io/stale": "1"})
    out = io.StringIO()
    publisher, _ = make_publisher(api, dry_run=True, out=out)
    results = publisher.publish(metadata=desired({OWNED: "2"}), nrt=NRT)
    assert [r.outcome for r in results] == [Outcome.DRY_RUN, Outcome.DRY_RUN]
    assert api.writes == []
    node_patch, nrt_create = (json.loads(line) for line in out.getvalue().splitlines())
    assert node_patch["verb"] == "patch"
    assert node_patch["contentType"] == "application/merge-patch+json"
    assert node_patch["body"] == {"metadata": {"labels": {OWNED: "2", "numa.kubenexus.io/stale": None}}}
    assert (nrt_create["verb"], nrt_create["body"]) == ("create", NRT)


def test_discover_does_not_load_the_kubernetes_client() -> None:
    # `kubenexus-agent discover` keeps its 40 MB RSS target: only `run` imports agent.publish.
    probe = "import sys, agent.main; sys.exit('kubernetes' in sys.modules or 'agent.publish' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False, timeout=60).returncode == 0
