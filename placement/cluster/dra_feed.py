"""Feeds the DRA state from the Kubernetes API: ResourceSlices, DeviceClasses and ResourceClaims.

Which version of ``resource.k8s.io`` to read is asked once, from the group's discovery document
(``GET /apis/resource.k8s.io``): ``v1`` (GA since 1.34) where served, else ``v1beta2``, else ``v1beta1``
(the readers in ``placement.core.dra`` take all three). A cluster that serves none of them (404: DRA off,
or a release before it) has no DRA: the feed says so once in the log, leaves ``DraState.served`` False,
and counts as synced; a pod with claims is then refused on every node ("cannot allocate all claims").
Enabling DRA later takes a restart of the service. A discovery call that fails otherwise (connection
refused, 5xx, 403) is retried with backoff, and the feed is not synced meanwhile.

Each resource then gets its own ``Reflector``. An object the readers refuse is logged and skipped, and
what was known of it is kept (a claim that cannot be read is not taken for gone, so its devices stay
taken). The readers check each object's ``apiVersion`` and ``kind``, which the API server writes on a list
but not on the list's items (a watch event's object carries both): a listed object is given those of the
version the feed lists, as client-go decodes a list's items with the list's type.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, describe
from kubenexus.kube.paths import DRA_GROUP_PATH, dra_path, served_dra_version
from kubenexus.kube.reflector import Reflector
from placement.cluster.keyed import KeyedObjects
from placement.core.dra.claims import ClaimError, parse_device_class, parse_resource_claim
from placement.core.dra.device_types import SliceError
from placement.core.dra.slices import parse_resource_slice
from placement.state.dra_state import DraState

log = logging.getLogger("kubenexus.placement.feed")


class DraFeed:
    """Discovery, then one reflector per DRA resource; ``synced`` once discovery answered and they listed."""

    def __init__(
        self,
        api: KubeClient,
        dra: DraState,
        *,
        stop: threading.Event,
        watch_timeout_s: float,
        backoff: Backoff | None = None,
        on_node_devices: Callable[[str], None] | None = None,
    ) -> None:
        self._api = api
        # Told the node a slice names whenever the slice changes or goes: a node without an agent report
        # is scheduled on its DRA devices (``feed._TopologyHandler.infer``).
        self._on_node_devices = on_node_devices
        self._slice_nodes: dict[str, str] = {}
        self._dra = dra
        self._stop = stop
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff or Backoff()
        self._discovered = threading.Event()
        self._api_version = ""  # resource.k8s.io/<the version discovered>
        self.reflectors: tuple[Reflector, ...] = ()
        self.threads: list[threading.Thread] = []

    @property
    def synced(self) -> bool:
        return self._discovered.is_set() and all(reflector.healthy for reflector in self.reflectors)

    def run(self) -> None:
        """Discover the served version, then run the reflectors (each on its own thread)."""
        version = self._discover()
        if version is None:
            return
        self._api_version = f"resource.k8s.io/{version}"
        handlers: tuple[tuple[str, KeyedObjects[str] | KeyedObjects[tuple[str, str]]], ...] = (
            ("resourceslices", KeyedObjects(self._set_slice, self._remove_slice, _name)),
            ("deviceclasses", KeyedObjects(self._set_class, self._dra.remove_class, _name)),
            ("resourceclaims", KeyedObjects(self._set_claim, self._remove_claim, _namespaced)),
        )
        self.reflectors = tuple(
            Reflector(
                self._api,
                dra_path(version, plural),
                handler,
                stop=self._stop,
                watch_timeout_s=self._watch_timeout_s,
                backoff=self._backoff,
            )
            for plural, handler in handlers
        )
        with self._dra.lock:
            self._dra.served = True
        self._discovered.set()
        for reflector in self.reflectors:
            thread = threading.Thread(target=reflector.run, name=f"feed {reflector.path}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def _discover(self) -> str | None:
        failures = 0
        rng = random.Random()
        while not self._stop.is_set():
            try:
                group = self._api.get(DRA_GROUP_PATH)
            except API_ERRORS as error:
                failures += 1
                delay = self._backoff.delay(failures, rng)
                log.warning(
                    "cannot discover resource.k8s.io; retrying",
                    extra={"error": describe(error), "retry_in_s": round(delay, 2)},
                )
                self._stop.wait(delay)
                continue
            version = served_dra_version(group)
            if version is None:
                log.info("the cluster serves no resource.k8s.io version this service reads: DRA is off")
                self._discovered.set()
            else:
                log.info("reading DRA objects", extra={"version": f"resource.k8s.io/{version}"})
            return version
        return None

    def _set_slice(self, name: str, obj: Json) -> None:
        def write() -> None:
            resource_slice = parse_resource_slice(self._typed("ResourceSlice", obj))
            self._dra.set_slice(name, resource_slice)
            node = resource_slice.node_selection.node_name
            if node is not None:
                self._slice_nodes[name] = node
            self._tell(name)

        _read("ResourceSlice", name, write)

    def _remove_slice(self, name: str) -> None:
        self._dra.remove_slice(name)
        self._tell(name)
        self._slice_nodes.pop(name, None)

    def _tell(self, slice_name: str) -> None:
        node = self._slice_nodes.get(slice_name)
        if node is not None and self._on_node_devices is not None:
            self._on_node_devices(node)

    def _set_class(self, name: str, obj: Json) -> None:
        device_class = self._typed("DeviceClass", obj)
        _read("DeviceClass", name, lambda: self._dra.set_class(name, parse_device_class(device_class)))

    def _set_claim(self, key: tuple[str, str], obj: Json) -> None:
        claim = self._typed("ResourceClaim", obj)
        _read("ResourceClaim", "/".join(key), lambda: self._dra.set_claim(parse_resource_claim(claim)))

    def _remove_claim(self, key: tuple[str, str]) -> None:
        self._dra.remove_claim(*key)

    def _typed(self, kind: str, obj: Json) -> Json:
        """``obj`` with the ``apiVersion`` and ``kind`` a listed item lacks (an object's own are kept)."""
        return {"apiVersion": self._api_version, "kind": kind, **obj}


def _read(kind: str, name: str, write: Callable[[], None]) -> None:
    try:
        write()
    except (SliceError, ClaimError) as error:
        log.warning(f"cannot read a {kind}; keeping what was known", extra={"object": name, "error": str(error)})


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespaced(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
