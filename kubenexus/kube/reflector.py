"""List then watch one collection, as client-go's reflector does.

* **list**, then hand the whole set to the handler (``replace``: anything not in the list is gone);
* **watch** from the list's ``resourceVersion``, applying events in order and remembering the version of
  the last one (bookmarks included), and when the stream ends (server timeout, idle read timeout)
  watch again from there: a resume, nothing re-read;
* **410 Gone** (the version is older than etcd keeps) means events were lost: list again;
* any other failure (connection refused, 5xx, 403) waits a capped, jittered exponential backoff and
  resumes from the last version; one log line per failure, never an exception out of the thread.

``healthy`` is True once the initial list landed and while a watch is connected: a cache that is known
to miss events must not be decided on. A watch is connected once the server accepted it (HTTP 200), not
once an event arrives: a collection that rarely changes (priority classes, storage classes) may send
nothing for minutes after a resume, and waiting for its first event or bookmark would keep the whole
service not ready that long for no missed event. (client-go's ``Request.Watch`` likewise hands its
reflector the watch once the server answered 200, before any event.)
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping
from typing import Protocol

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, ApiError, describe

log = logging.getLogger("kubenexus.kube.reflector")


class Handler(Protocol):
    """What a reflector feeds: the full set after a list, then one event at a time."""

    def replace(self, objects: list[Json]) -> None: ...
    def apply(self, kind: str, obj: Json) -> None: ...  # kind: ADDED, MODIFIED, DELETED


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410 / an ERROR event with code 410): relist."""


class Reflector:
    """List then watch one collection into ``handler``; run ``run`` on its own thread."""

    def __init__(
        self,
        api: KubeClient,
        path: str,
        handler: Handler,
        *,
        stop: threading.Event,
        query: Mapping[str, str] | None = None,
        watch_timeout_s: float = 300.0,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.path = path
        self._api = api
        self._handler = handler
        self._stop = stop
        self._query = dict(query or {})
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self.listed = False  # the initial list has landed
        self.connected = False  # a watch stream is open (or the list just succeeded)
        self.relists = 0

    @property
    def healthy(self) -> bool:
        return self.listed and self.connected

    def run(self) -> None:
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                version = self._watch(version)
                failures = 0
            except Gone:
                # Not an outage: the history we would resume from was compacted. Relist at once.
                self.connected = False  # before the line that says so: whoever reads it sees the cache not ready
                log.info("watch history expired (410 Gone); relisting", extra={"resource": self.path})
                self.relists += 1
                version = None
            except API_ERRORS as error:
                self.connected = False
                if self._stop.is_set():
                    return
                failures += 1
                delay = self._backoff.delay(failures, self._rng)
                log.warning(
                    "watch failed; retrying",
                    extra={"resource": self.path, "error": describe(error), "retry_in_s": round(delay, 2)},
                )
                self._stop.wait(delay)
        self.connected = False

    def _list(self) -> str:
        document = self._api.list(self.path, self._query)
        items = document.get("items") or []
        self._handler.replace([item for item in items if isinstance(item, dict)])
        self.listed = self.connected = True
        return str((document.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        """Apply events until the stream ends; returns the version to resume from."""
        try:
            events = self._api.watch(
                self.path, resource_version=version, timeout_s=self._watch_timeout_s, query=self._query
            )
            self.connected = True  # the server accepted the watch: nothing is missed from here on
            for event in events:
                kind = str(event.get("type", ""))
                obj = event.get("object")
                if not isinstance(obj, dict):
                    raise ValueError(f"watch event without an object: {str(event)[:120]}")
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone
                    raise ApiError(int(obj.get("code") or 500), str(obj.get("message", "")))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    self._handler.apply(kind, obj)
                if self._stop.is_set():
                    break
        except ApiError as error:
            if error.status == 410:
                raise Gone from None
            raise
        except API_ERRORS:
            if self._stop.is_set():
                return version
            raise
        return version
