"""Feeds the cluster index from the Kubernetes API: Nodes, NodeResourceTopology objects and Pods, and what
the constraint plugins read besides: Namespaces, PriorityClasses, PersistentVolumeClaims, PersistentVolumes
and StorageClasses, and what preemption reads: PodDisruptionBudgets (into ``index.facts``,
``state.scheduling_facts``); and DRA's ResourceSlices, DeviceClasses and ResourceClaims where the cluster
serves them (``dra_feed``, into ``index.dra``).

Each resource has one ``kubenexus.kube.reflector.Reflector`` thread (list, then watch with resume, relist
on 410 Gone, backoff on failure) feeding a handler here that turns objects into index updates. Their watch
events are queued and applied in batches by one thread, under the index lock (``batches``).

Every Node object gives the facts its labels, taints, cordon and readiness, whether or not the node has a
topology report (the facts keep them by name until the index gives the node a slot); every pod bound to
or reserved on a node gives them a ``PlacedPod`` (``core.pods.placed_pod``), whatever its node. Objects
are compared before they are written, so a Node or Pod status update that changes nothing the plugins
read bumps no version.

``ClusterFeed.synced`` is True only once every initial list has landed, while every watch is connected and
while the API server answers (``kubenexus.kube.liveness``: a hung server keeps its watches open and silent).
The service reports NOT_SERVING on its health check and refuses decisions while it is False: a cache that
is known to miss events, or may, must not place pods (it could double-book a cell).

State rebuild: everything the service needs to continue after a restart or a failover is in the API,
so the first lists rebuild it. Bound pods carry our ``assigned-numa-nodes`` / ``assigned-gpus``
annotations (``core.pods.pod_usage`` reads them); a pod the binder reserved but had not bound yet carries
``RESERVED_NODE_KEY`` beside those, and is charged on that node exactly like a reservation, so the
next leader neither loses it nor hands its cells to another pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.liveness import ApiLiveness
from kubenexus.kube.paths import (
    NAMESPACES_PATH,
    NODES_PATH,
    NRTS_PATH,
    PERSISTENT_VOLUME_CLAIMS_PATH,
    PERSISTENT_VOLUMES_PATH,
    POD_DISRUPTION_BUDGETS_PATH,
    PODS_PATH,
    PRIORITY_CLASSES_PATH,
    STORAGE_CLASSES_PATH,
)
from kubenexus.kube.reflector import Handler, Reflector
from kubenexus.topology.json_codec import TopologyDecodeError
from kubenexus.topology.labels import MODEL_KEY, decode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import decode_nrt, written_by_kubenexus
from placement.cluster.batches import DEFAULT_INTERVAL_S, EventBatches
from placement.cluster.dra_feed import DraFeed
from placement.cluster.keyed import KeyedObjects
from placement.cluster.objects import (
    ObjectError,
    claim_source,
    disruption_budget,
    labels_of,
    node_allocatable,
    node_facts,
    priority_class,
    volume_node_affinity,
    waits_for_first_consumer,
)
from placement.core.annotations import pod_key
from placement.core.dra.inferred import scheduling_topology
from placement.core.foreign_nrt import decode_foreign_nrt
from placement.core.pods import PodParseError, PodUsage, placed_pod, pod_usage, reserved_usage
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from placement.state.scheduling_facts import SchedulingFacts

log = logging.getLogger("kubenexus.placement.feed")
Key = TypeVar("Key", str, tuple[str, str])


# (node name, its labels, its topology when that changed else None)
NodeObserver = Callable[[str, Mapping[str, str], NodeTopology | None], None]
# (the pod's key, its usage when bound, whether it is gone: deleted, succeeded or failed)
PodObserver = Callable[[tuple[str, str], PodUsage | None, bool], None]
# (a pending pod's key, the node its status.nominatedNodeName names, its spec.priority): a preemptor
NominationObserver = Callable[[tuple[str, str], str, int], None]


FEED_BACKOFF = Backoff(base_s=0.5, max_s=3.0)


class ClusterFeed:
    """Nodes, NRTs and Pods into a ``ClusterIndex`` (and its ``Reservations``); ``start`` / ``stop``.

    ``on_pod`` (optional) sees every pod change after the index did, parsed: for gang progress (members
    bound, deleted or finished) without a watch of its own. ``on_nominated`` (optional) sees each pending
    pod's ``status.nominatedNodeName``: the preemptors whose nodes every replica holds. ``on_node``
    (optional) sees a node's labels, with its decoded topology when that changed (None otherwise), and
    ``on_node_removed`` its removal: the gang coordinator's locality (its topology levels).
    """

    def __init__(
        self,
        api: KubeClient,
        index: ClusterIndex,
        reservations: Reservations,
        *,
        watch_timeout_s: float = 300.0,
        backoff: Backoff | None = None,
        on_pod: PodObserver | None = None,
        on_node: NodeObserver | None = None,
        on_node_removed: Callable[[str], None] | None = None,
        on_nominated: NominationObserver | None = None,
        batch_interval_s: float | None = DEFAULT_INTERVAL_S,
    ) -> None:
        self._api = api
        self._stop = threading.Event()
        # Watch events queued and applied in batches (``batches``); None: each applied as it arrives.
        self.batches = None if batch_interval_s is None else EventBatches(index.lock, interval_s=batch_interval_s)
        self._topology = _TopologyHandler(index, on_node, on_node_removed)
        self._pods = _PodHandler(index, reservations, on_pod, on_nominated)
        self._facts = _FactsHandler(index.facts)
        # What each resource's reflector feeds, by API path (behind the batches when batched).
        self.handlers: dict[str, Handler] = {
            path: handler if self.batches is None else self.batches.handler(handler)
            for path, handler in (
                (NODES_PATH, self._topology.nodes),
                (NRTS_PATH, self._topology.nrts),
                (PODS_PATH, self._pods),
                (NAMESPACES_PATH, self._facts.namespaces),
                (PRIORITY_CLASSES_PATH, self._facts.priority_classes),
                (PERSISTENT_VOLUME_CLAIMS_PATH, self._facts.claims),
                (PERSISTENT_VOLUMES_PATH, self._facts.volumes),
                (STORAGE_CLASSES_PATH, self._facts.storage_classes),
                (POD_DISRUPTION_BUDGETS_PATH, self._facts.budgets),
            )
        }
        # The service decides nothing while a watch is broken: it retries within seconds of the API server's
        # return, not the default 30 s cap. Two replicas' dozen watches are no herd for a recovering server.
        backoff = backoff or FEED_BACKOFF
        self._reflectors = tuple(
            Reflector(api, path, handler, stop=self._stop, watch_timeout_s=watch_timeout_s, backoff=backoff)
            for path, handler in self.handlers.items()
        )
        self._dra = DraFeed(
            api,
            index.dra,
            stop=self._stop,
            watch_timeout_s=watch_timeout_s,
            backoff=backoff,
            on_node_devices=self._topology.infer,
        )
        # A hung API server keeps the watches open and silent: the cache may be stale though they look connected.
        self.liveness = ApiLiveness(api, stop=self._stop)
        self._threads: list[threading.Thread] = []

    @property
    def synced(self) -> bool:
        """Every initial list landed, every watch is connected and the API server answers: decisions may be
        served."""
        return all(reflector.healthy for reflector in self._reflectors) and self._dra.synced and self.liveness.answering

    @property
    def relists(self) -> int:
        return sum(reflector.relists for reflector in (*self._reflectors, *self._dra.reflectors))

    def start(self) -> None:
        discovery = threading.Thread(target=self._dra.run, name="feed resource.k8s.io", daemon=True)
        discovery.start()
        self._threads.append(discovery)
        if self.batches is not None:
            applier = threading.Thread(target=self.batches.run, args=(self._stop,), name="feed batches", daemon=True)
            applier.start()
            self._threads.append(applier)
        for reflector in self._reflectors:
            thread = threading.Thread(target=reflector.run, name=f"feed {reflector.path}", daemon=True)
            thread.start()
            self._threads.append(thread)
        liveness = threading.Thread(target=self.liveness.run, name="feed API liveness", daemon=True)
        liveness.start()
        self._threads.append(liveness)

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until ``synced`` (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while not self.synced and time.monotonic() < deadline and not self._stop.wait(0.05):
            pass
        return self.synced

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._api.close_streams()
        for thread in (*self._threads, *self._dra.threads):
            thread.join(timeout_s)


# --- handlers ------------------------------------------------------------------------------------------


class _TopologyHandler:
    """Node annotations and NRT objects into the index; for each node one report, the first of:

    1. the agent's NRT (it carries the model: ``written_by_kubenexus``);
    2. the agent's Node annotation;
    3. an NRT another wrote (Node Feature Discovery's nfd-topology-updater): NUMA cells and their amounts
       only (``placement.core.foreign_nrt``), read for a node without an agent.

    The agent's two carry the same model, but its NRT also carries the kubelet's per-zone availability, and a
    Node changes every few seconds for reasons that are not ours (status heartbeats): so a node with an NRT of
    ours is read from it, a node without one from its annotation, and an unchanged annotation is not
    re-decoded; another writer's NRT beside the annotation is not read at all (it changes every minute).
    Every Node, with an agent or not, also gives the scheduling facts its labels, taints, cordon and
    readiness; facts equal to those held are not written (a heartbeat costs a read and a comparison).

    A node is in the index only while its Node object exists: an NRT outlives its Node (the agent gives it no
    owner reference; NFD runs nfd-topology-gc for its own), and a deleted node must stay gone whether the
    deletion was watched or a relist (or a restart) finds the NRT alone. An NRT is kept while its Node is
    away and read when the Node arrives, whichever of the two lists lands first.
    """

    def __init__(
        self, index: ClusterIndex, on_node: NodeObserver | None, on_node_removed: Callable[[str], None] | None
    ) -> None:
        self._index = index
        self._on_node = on_node
        self._on_node_removed = on_node_removed
        # The index's own lock: the event batches apply under it, so a lock of our own would have to be taken
        # in one order by them and in the other by the DRA feed's thread (``infer``).
        self._lock = index.lock
        self._annotations: dict[str, tuple[Mapping[str, str], Mapping[str, str]]] = {}
        self._nrts: dict[str, Json] = {}
        self._nodes: set[str] = set()  # the Node objects that exist
        # Nodes without a report: their allocatable CPUs and memory, and those scheduled on it for their
        # DRA devices (``infer``).
        self._allocatable: dict[str, tuple[int, int] | None] = {}
        self._inferred: dict[str, tuple[int, int]] = {}  # node -> the allocatable it is scheduled on
        self.nodes = KeyedObjects(self._node_changed, self._node_removed, _name)
        self.nrts = KeyedObjects(self._nrt_changed, self._nrt_removed, _name)

    def _node_changed(self, name: str, obj: Json) -> None:
        _read(name, lambda: self._index.facts.set_node(node_facts(obj)))
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        with self._lock:
            arrived = name not in self._nodes
            self._nodes.add(name)
        if MODEL_KEY not in annotations:
            # No agent on this node (or NRT-only mode): nothing to read but its NRT, or its DRA devices.
            _read(name, lambda: self._note_allocatable(name, obj))
            with self._lock:
                annotated = self._annotations.pop(name, None) is not None  # the agent's annotation removed
            if annotated and name not in self._nrts:
                self._forget(name)
            elif arrived or (annotated and not self._own_nrt(name)):
                self._read_nrt(name)
            return
        report = (dict(metadata.get("labels") or {}), dict(annotations))
        with self._lock:
            unchanged = self._annotations.get(name, (None, {}))[1].get(MODEL_KEY) == annotations[MODEL_KEY]
            self._annotations[name] = report
            if self._on_node is not None:
                self._on_node(name, report[0], None)  # zone and rack labels may change on their own
            if self._own_nrt(name):
                if arrived:
                    self._read_nrt(name)
                return
            if unchanged:
                return
            self._decode(name, lambda: self._upsert(name, decode_node_metadata(*report)))

    def _own_nrt(self, name: str) -> bool:
        nrt = self._nrts.get(name)
        return nrt is not None and written_by_kubenexus(nrt)

    def _read_nrt(self, name: str) -> None:
        """The node's NRT, kept from a list or watch that came before its Node (or while it was away): the
        agent's; another writer's only for a node without the agent's annotation."""
        with self._lock:
            nrt = self._nrts.get(name)
            if nrt is None:
                return
            if written_by_kubenexus(nrt):
                self._decode(name, lambda: self._upsert(name, decode_nrt(nrt)))
            elif name not in self._annotations:
                self._decode(name, lambda: self._upsert(name, decode_foreign_nrt(nrt)))

    def _note_allocatable(self, name: str, obj: Json) -> None:
        self._allocatable[name] = node_allocatable(obj)
        self.infer(name)

    def infer(self, name: str) -> None:
        """A node without a report is scheduled on its allocatable CPUs and memory while slices naming it
        publish devices (``core.dra.inferred``); it leaves the index when they no longer do."""
        with self._lock:
            if name in self._annotations or name in self._nrts:
                self._inferred.pop(name, None)  # a report: the node is read from it
                return
            allocatable = self._allocatable.get(name)
            if allocatable is not None and self._index.dra.local_devices(name):
                if self._inferred.get(name) != allocatable:  # a heartbeat that changes nothing writes nothing
                    self._index.upsert_topology(name, scheduling_topology(name, *allocatable))
                    self._inferred[name] = allocatable
            elif self._inferred.pop(name, None) is not None:
                self._index.remove_node(name)

    def _node_removed(self, name: str) -> None:
        with self._lock:
            self._nodes.discard(name)
            self._allocatable.pop(name, None)
            self._inferred.pop(name, None)
            self._annotations.pop(name, None)
            self._index.remove_node(name)  # its NRT, if any, stays in ``_nrts``: read again if the Node returns
            self._index.facts.remove_node(name)
            if self._on_node_removed is not None:
                self._on_node_removed(name)

    def _nrt_changed(self, name: str, obj: Json) -> None:
        with self._lock:
            before = self._nrts.get(name)
            if before == obj:
                return
            self._nrts[name] = obj
            if name not in self._nodes:
                return  # no Node (yet, or any more): read when it arrives
            report = self._annotations.get(name)
            if report is not None and not written_by_kubenexus(obj):
                # Another writer's NRT beside the agent's annotation, which it does not replace; read the
                # annotation again only where the agent's own NRT was the report until now.
                if before is not None and written_by_kubenexus(before):
                    self._decode(name, lambda: self._upsert(name, decode_node_metadata(*report)))
                return
            self._read_nrt(name)

    def _nrt_removed(self, name: str) -> None:
        with self._lock:
            self._nrts.pop(name, None)
            if name not in self._nodes:
                return  # never read without its Node
            report = self._annotations.get(name)
            if report is None:
                self._forget(name)
            else:
                self._decode(name, lambda: self._upsert(name, decode_node_metadata(*report)))

    def _forget(self, name: str) -> None:
        """The node's last report is gone: out of the index (or scheduled on its DRA devices alone)."""
        with self._lock:
            self._index.remove_node(name)
            if self._on_node_removed is not None:
                self._on_node_removed(name)
            self.infer(name)

    def _upsert(self, name: str, topology: NodeTopology) -> None:
        self._index.upsert_topology(name, topology)
        if self._on_node is not None:
            labels = self._annotations.get(name, ({}, {}))[0]
            self._on_node(name, labels, topology)

    @staticmethod
    def _decode(name: str, upsert: Callable[[], None]) -> None:
        try:
            upsert()
        except (TopologyDecodeError, ValueError, KeyError, TypeError) as error:
            # The node keeps its last good report; the agent's next publish will repair it.
            log.warning(
                "cannot read the topology of a node; keeping its last report", extra={"node": name, "error": str(error)}
            )


class _FactsHandler:
    """Namespaces, PriorityClasses, claims with their volumes and classes, and PodDisruptionBudgets, into the
    scheduling facts."""

    def __init__(self, facts: SchedulingFacts) -> None:
        self._facts = facts
        self.namespaces = KeyedObjects(self._namespace_changed, facts.remove_namespace, _name)
        self.priority_classes = KeyedObjects(self._priority_class_changed, facts.remove_priority_class, _name)
        self.claims = KeyedObjects(self._claim_changed, self._claim_removed, _namespaced_name)
        self.volumes = KeyedObjects(self._volume_changed, facts.remove_volume, _name)
        self.storage_classes = KeyedObjects(self._storage_class_changed, facts.remove_storage_class, _name)
        self.budgets = KeyedObjects(self._budget_changed, self._budget_removed, _namespaced_name)

    def _namespace_changed(self, name: str, obj: Json) -> None:
        _read(name, lambda: self._facts.set_namespace(name, labels_of(obj)))

    def _priority_class_changed(self, name: str, obj: Json) -> None:
        def write() -> None:
            value, global_default = priority_class(obj)
            self._facts.set_priority_class(name, value, global_default=global_default)

        _read(name, write)

    def _claim_changed(self, key: tuple[str, str], obj: Json) -> None:
        _read("/".join(key), lambda: self._facts.set_claim(*key, claim_source(obj)))

    def _claim_removed(self, key: tuple[str, str]) -> None:
        self._facts.remove_claim(*key)

    def _volume_changed(self, name: str, obj: Json) -> None:
        _read(name, lambda: self._facts.set_volume(name, volume_node_affinity(obj)))

    def _storage_class_changed(self, name: str, obj: Json) -> None:
        self._facts.set_storage_class(name, wait_for_first_consumer=waits_for_first_consumer(obj))

    def _budget_changed(self, key: tuple[str, str], obj: Json) -> None:
        _read("/".join(key), lambda: self._facts.set_disruption_budget(disruption_budget(obj)))

    def _budget_removed(self, key: tuple[str, str]) -> None:
        self._facts.remove_disruption_budget(*key)


class _PodHandler:
    """Pods into the index and the reservations, including the binder's reserved-not-bound pods."""

    def __init__(
        self,
        index: ClusterIndex,
        reservations: Reservations,
        on_pod: PodObserver | None,
        on_nominated: NominationObserver | None = None,
    ) -> None:
        self._index = index
        self._reservations = reservations
        self._on_pod = on_pod
        self._on_nominated = on_nominated
        self._known: set[tuple[str, str]] = set()

    def replace(self, objects: list[Json]) -> None:
        listed = {pod_key(obj): obj for obj in objects}
        for key in self._known - set(listed):
            self._deleted(key)
        for obj in listed.values():
            self._changed(obj)

    def apply(self, kind: str, obj: Json) -> None:
        if kind == "DELETED":
            self._deleted(pod_key(obj))
        else:
            self._changed(obj)

    def _changed(self, obj: Json) -> None:
        key = pod_key(obj)
        self._known.add(key)
        finished = (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        self._place(key, obj, finished)
        try:
            bound = pod_usage(obj)
            reserved = None if bound is not None else reserved_usage(obj)
        except PodParseError as error:
            log.warning("cannot count a pod; ignoring it", extra={"pod": "/".join(key), "error": str(error)})
            return
        self._count(key, bound, reserved, finished)
        if self._on_pod is not None:
            self._on_pod(key, bound, finished)
        nominated = (obj.get("status") or {}).get("nominatedNodeName")
        if self._on_nominated is not None and nominated and bound is None and reserved is None and not finished:
            priority = (obj.get("spec") or {}).get("priority")
            self._on_nominated(key, str(nominated), priority if isinstance(priority, int) else 0)

    def _count(self, key: tuple[str, str], bound: PodUsage | None, reserved: PodUsage | None, finished: bool) -> None:
        if bound is not None:
            self._reservations.observe_pod(bound)
            return
        if finished:
            self._reservations.observe_pod_deleted(*key)
            return
        if key in self._reservations.pending():
            return  # a decision of this process, in flight: the reservation already charges it
        if reserved is not None:
            # The binder's reservation, written before it binds: charge it as one, so that a new
            # leader (or this one after a restart) sees those cells taken until the pod binds.
            self._index.assume_pod(reserved)
            return
        held = self._index.pod(*key)
        if held is not None and not held[1]:
            # Pending without the annotation: the binder gave up a reservation restored earlier.
            self._index.remove_pod(*key)

    def _place(self, key: tuple[str, str], obj: Json, finished: bool) -> None:
        """The pod as the constraint plugins see it: placed (bound or reserved) until it finishes or goes."""
        facts = self._index.facts
        try:
            placed = None if finished else placed_pod(obj)
        except PodParseError as error:
            log.warning(
                "cannot read a pod's constraints; keeping what was known",
                extra={"pod": "/".join(key), "error": str(error)},
            )
            return
        if placed is not None:
            facts.put_pod(placed)
        elif facts.pod(*key) is not None and (finished or key not in self._reservations.pending()):
            facts.remove_pod(*key)  # unless a decision of this process holds it, in flight

    def _deleted(self, key: tuple[str, str]) -> None:
        self._known.discard(key)
        self._index.facts.remove_pod(*key)
        self._reservations.observe_pod_deleted(*key)
        if self._on_pod is not None:
            self._on_pod(key, None, True)


def _read(name: str, write: Callable[[], object]) -> None:
    """Reads an object into the facts; one the feed cannot read leaves what was known of it."""
    try:
        write()
    except ObjectError as error:
        log.warning("cannot read an object; keeping what was known", extra={"object": name, "error": str(error)})


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespaced_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
