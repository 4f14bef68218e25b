"""Publishes the node's topology to the Kubernetes API; the only agent module that talks to it.

Two targets, chosen by the mode: the labels and annotations of the agent's own Node, and the
cluster-scoped NodeResourceTopology (NRT) named after the node. Each pass

* skips the API entirely when the desired state equals what this process last published and no
  resync is due, so a steady node costs zero API requests between resyncs;
* otherwise reads the object, plans the minimal change with the pure ``plan_*`` functions below
  and writes only that change (nothing when the plan is empty);
* retries conflicts, throttling, server errors and connection failures with capped exponential
  backoff and jitter, re-reading before every retry, and reports a failure as a result, never as
  an exception, so an API outage cannot crash-loop the agent.

Writes are JSON merge patches (RFC 7386): ``null`` removes a key, maps merge, lists replace.
On the Node only keys the agent owns (``is_owned_key``) ever appear in a patch, so labels and
annotations written by anyone else are never touched. The NRT object is the agent's own; its
content (zones, attributes, policies) is replaced wholesale by the patch, its metadata is
patched key by key like the Node's.

An NRT of the node's name that another wrote (it carries no KubeNexus model: Node Feature Discovery's
nfd-topology-updater applies its own, with ``Force``, every minute) is left to that writer: the pass reports
``Outcome.LEFT`` and writes nothing, so the two never fight over the object. The model then reaches the
placement service through the Node's annotations (``--mode both``, the default deployment). Deleting that
NRT gives it back to the agent at its next pass (docs/deploy.md, "Beside Node Feature Discovery").
"""

from __future__ import annotations

import enum
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import MERGE_PATCH, Json, KubeClient, connect
from kubenexus.kube.errors import API_ERRORS, ApiError, describe, is_retryable
from kubenexus.kube.paths import NODES_PATH, NRT_GROUP, NRT_PLURAL, NRT_VERSION, NRTS_PATH
from kubenexus.topology.labels import NodeMetadata, is_owned_key
from kubenexus.topology.nrt import nrt_writers, written_by_kubenexus

FIELD_MANAGER = "kubenexus-agent"
# The NRT's identity and bookkeeping: everything else at the top level is content the agent owns.
_NRT_ENVELOPE = frozenset({"apiVersion", "kind", "metadata"})

log = logging.getLogger("kubenexus.publish")


class Mode(enum.StrEnum):
    LABELS = "labels"
    NRT = "nrt"
    BOTH = "both"

    @property
    def labels(self) -> bool:
        return self is not Mode.NRT

    @property
    def nrt(self) -> bool:
        return self is not Mode.LABELS


class Target(enum.StrEnum):
    NODE = "node"
    NRT = "nrt"


class Outcome(enum.StrEnum):
    UPDATED = "updated"  # a change was written
    UNCHANGED = "unchanged"  # read back, already as desired, nothing written
    SKIPPED = "skipped"  # same desired state as last published and no resync due: no API call
    LEFT = "left"  # another writer's object (an NFD NodeResourceTopology): read, left as it is
    DRY_RUN = "dry-run"  # the change was printed instead of written
    FAILED = "failed"


@dataclass(frozen=True)
class PublishResult:
    target: Target
    outcome: Outcome
    attempts: int = 0  # API round trips of read-plan-write, retries included
    writes: int = 0
    error: str | None = None
    left_to: tuple[str, ...] = ()  # LEFT: the object's writers (its field managers), when the server names them


@dataclass(frozen=True)
class NrtWrite:
    verb: str  # "create" or "patch"
    body: Json


@dataclass(frozen=True)
class AnotherWriters:
    """The NRT is another writer's: nothing to write (``plan_nrt_write``)."""

    writers: tuple[str, ...]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): the shared ``Backoff``."""
        return Backoff(self.base_delay_s, self.max_delay_s).delay(retry + 1, rng)


class PublishError(Exception):
    """A failure that retrying will not fix (node missing, forbidden, CRD not installed)."""


class NodeNotFound(PublishError):
    """The Node does not exist. The message is the agent's (its node name comes from --node-name or
    NODE_NAME); the kubectl plugin, which takes the name as an argument, words its own hint."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        super().__init__(f"node {node_name!r} not found (check --node-name / NODE_NAME)")


# ---------------------------------------------------------------------------------------------
# Pure planning: what to write, given what is there and what is wanted.


def plan_node_patch(
    current_labels: Mapping[str, str], current_annotations: Mapping[str, str], desired: NodeMetadata
) -> Json | None:
    """The merge patch that turns the Node's owned keys into ``desired``; None when nothing differs."""
    metadata: Json = {}
    labels = _owned_keys_patch(current_labels, desired.labels)
    if labels:
        metadata["labels"] = labels
    annotations = _owned_keys_patch(current_annotations, desired.annotations)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata} if metadata else None


def plan_nrt_write(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> NrtWrite | AnotherWriters | None:
    """Create the NRT when absent; leave it when another wrote it; else a merge patch of the content and owned
    metadata that differ."""
    if current is None:
        return NrtWrite("create", dict(desired))
    if not written_by_kubenexus(current):
        return AnotherWriters(tuple(w for w in nrt_writers(current) if w != FIELD_MANAGER))
    patch: Json = {}
    for key in sorted((set(desired) | set(current)) - _NRT_ENVELOPE):
        if key not in desired:
            patch[key] = None
        elif current.get(key) != desired[key]:
            patch[key] = desired[key]
    current_meta: Mapping[str, Any] = current.get("metadata") or {}
    desired_meta: Mapping[str, Any] = desired.get("metadata") or {}
    metadata: Json = {}
    for section in ("labels", "annotations"):
        changes = _owned_keys_patch(current_meta.get(section) or {}, desired_meta.get(section) or {})
        if changes:
            metadata[section] = changes
    if metadata:
        patch["metadata"] = metadata
    return NrtWrite("patch", patch) if patch else None


def _owned_keys_patch(current: Mapping[str, str], desired: Mapping[str, str]) -> dict[str, str | None]:
    # A desired key the agent does not own would be a codec bug; dropping it keeps the promise
    # (and the admission policy) that the agent never writes anyone else's keys.
    changes: dict[str, str | None] = {
        key: value for key, value in desired.items() if is_owned_key(key) and current.get(key) != value
    }
    changes.update({key: None for key in current if is_owned_key(key) and key not in desired})
    return dict(sorted(changes.items()))


# ---------------------------------------------------------------------------------------------
# I/O: the API calls.


class NodeApi(Protocol):
    """The five calls the publisher makes; ``KubeNodeApi`` is the real one."""

    def read_node(self, name: str) -> Json: ...
    def patch_node(self, name: str, patch: Json) -> None: ...
    def read_nrt(self, name: str) -> Json | None: ...
    def create_nrt(self, body: Json) -> None: ...
    def patch_nrt(self, name: str, patch: Json) -> None: ...


class KubeNodeApi:
    """The five calls over the shared ``KubeClient`` (``kubenexus.kube.client``: raw JSON, no generated models)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def read_node(self, name: str) -> Json:
        node = self._client.get(f"{NODES_PATH}/{quote(name, safe='')}")
        if node is None:
            raise NodeNotFound(name)
        return node

    def patch_node(self, name: str, patch: Json) -> None:
        self._client.merge_patch(f"{NODES_PATH}/{quote(name, safe='')}", patch)

    def read_nrt(self, name: str) -> Json | None:
        return self._client.get(f"{NRTS_PATH}/{quote(name, safe='')}")  # None: absent, or the CRD is missing

    def create_nrt(self, body: Json) -> None:
        try:
            self._client.create(NRTS_PATH, body)
        except ApiError as error:
            if error.status == 404:
                raise PublishError(
                    f"the API server does not serve {NRT_PLURAL}.{NRT_GROUP}/{NRT_VERSION}; "
                    "install deploy/crd/noderesourcetopologies.yaml"
                ) from None
            raise

    def patch_nrt(self, name: str, patch: Json) -> None:
        self._client.merge_patch(f"{NRTS_PATH}/{quote(name, safe='')}", patch)


def connect_nodes(kubeconfig: str | None, *, context: str | None = None, in_cluster: bool = True) -> KubeNodeApi:
    """The node calls over a connection from ``kubeconfig``, else (``in_cluster``) the pod's service account,
    else the default kubeconfig; ``ApiUnavailable`` without usable credentials."""
    return KubeNodeApi(connect(kubeconfig, context=context, in_cluster=in_cluster, field_manager=FIELD_MANAGER))


# ---------------------------------------------------------------------------------------------
# The publisher: state kept between passes is only what was last published and when.


@dataclass(frozen=True)
class Published:
    """What the API holds for one node, as read back (for ``kubectl kubenexus``)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    nrt: Json | None


def read_published(api: NodeApi, node_name: str) -> Published:
    """The node's labels, annotations and NRT; PublishError, in one sentence, when they cannot be read."""
    try:
        node = api.read_node(node_name)
        nrt = api.read_nrt(node_name)
    except API_ERRORS as error:
        raise PublishError(f"cannot read node {node_name!r}: {describe(error)}") from None
    metadata = node.get("metadata") or {}
    return Published(metadata.get("labels") or {}, metadata.get("annotations") or {}, nrt)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


@dataclass
class Publisher:
    """Publishes one node's desired state; call ``publish`` once per discovery pass."""

    api: NodeApi
    node_name: str
    resync_s: float = 3600.0
    dry_run: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Returns True when the agent is shutting down, which ends the retries of the current pass.
    sleep: Callable[[float], bool] = _sleep
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    _last: dict[Target, Any] = field(default_factory=dict, init=False)
    _synced_at: dict[Target, float] = field(default_factory=dict, init=False)
    _left_to: tuple[str, ...] = field(default=(), init=False)

    def publish(self, *, metadata: NodeMetadata | None, nrt: Mapping[str, Any] | None) -> tuple[PublishResult, ...]:
        """Publish what is given (None: not in this mode); one result per target."""
        results = []
        if metadata is not None:
            results.append(self._publish(Target.NODE, metadata, self._sync_node))
        if nrt is not None:
            results.append(self._publish(Target.NRT, nrt, self._sync_nrt))
        return tuple(results)

    def _publish(self, target: Target, desired: Any, sync: Callable[[Any], Outcome]) -> PublishResult:
        now = self.clock()
        resync_due = now - self._synced_at.get(target, -float("inf")) >= self.resync_s
        if not self.dry_run and not resync_due and self._last.get(target) == desired:
            return PublishResult(target, Outcome.SKIPPED)
        result = self._with_retries(target, lambda: sync(desired))
        if result.outcome is Outcome.LEFT:
            result = replace(result, left_to=self._left_to)
        if result.outcome in (Outcome.UPDATED, Outcome.UNCHANGED, Outcome.LEFT):
            self._last[target] = desired
            self._synced_at[target] = now
        return result

    def _with_retries(self, target: Target, attempt: Callable[[], Outcome]) -> PublishResult:
        for number in range(1, self.retry.attempts + 1):
            try:
                outcome = attempt()
            except PublishError as error:
                return PublishResult(target, Outcome.FAILED, number, error=str(error))
            except Exception as error:
                if not is_retryable(error):
                    return PublishResult(target, Outcome.FAILED, number, error=describe(error))
                if number == self.retry.attempts:
                    return PublishResult(target, Outcome.FAILED, number, error=f"gave up: {describe(error)}")
                delay = self.retry.delay(number - 1, self.rng)
                log.warning(
                    "API call failed, retrying",
                    extra={
                        "target": str(target),
                        "attempt": number,
                        "retry_in_s": round(delay, 3),
                        "error": describe(error),
                    },
                )
                if self.sleep(delay):
                    return PublishResult(target, Outcome.FAILED, number, error=f"shutting down: {describe(error)}")
                continue
            writes = 1 if outcome is Outcome.UPDATED else 0
            return PublishResult(target, outcome, number, writes)
        raise AssertionError("unreachable: RetryPolicy.attempts must be >= 1")

    def _sync_node(self, desired: NodeMetadata) -> Outcome:
        node = self.api.read_node(self.node_name)
        metadata = node.get("metadata") or {}
        patch = plan_node_patch(metadata.get("labels") or {}, metadata.get("annotations") or {}, desired)
        if patch is None:
            return Outcome.UNCHANGED
        if self.dry_run:
            self._print("patch", "v1", "nodes", patch, content_type=MERGE_PATCH)
            return Outcome.DRY_RUN
        self.api.patch_node(self.node_name, patch)
        return Outcome.UPDATED

    def _sync_nrt(self, desired: Mapping[str, Any]) -> Outcome:
        write = plan_nrt_write(self.api.read_nrt(self.node_name), desired)
        if write is None:
            return Outcome.UNCHANGED
        if isinstance(write, AnotherWriters):
            self._left_to = write.writers
            return Outcome.LEFT
        if self.dry_run:
            content_type = MERGE_PATCH if write.verb == "patch" else "application/json"
            self._print(write.verb, f"{NRT_GROUP}/{NRT_VERSION}", NRT_PLURAL, write.body, content_type=content_type)
            return Outcome.DRY_RUN
        if write.verb == "create":
            self.api.create_nrt(write.body)
        else:
            self.api.patch_nrt(self.node_name, write.body)
        return Outcome.UPDATED

    def _print(self, verb: str, api_version: str, resource: str, body: Json, *, content_type: str) -> None:
        record = {
            "dryRun": True,
            "verb": verb,
            "apiVersion": api_version,
            "resource": resource,
            "name": self.node_name,
            "contentType": content_type,
            "body": body,
        }
        self.out.write(json.dumps(record, sort_keys=True) + "\n")
        self.out.flush()
