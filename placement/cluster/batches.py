"""Watch events applied in batches: one thread wake-up and one hold of the index lock per batch.

Applied one by one as the streams deliver them, 500 pod events a second cost a service 500 thread wake-ups
and 500 lock hand-overs with the thread answering Filter and Score, each paid by the decision it
interrupts. Here every reflector only queues its events (an append, under no lock); one applier thread
waits ``interval_s`` after the first event of a batch, then applies everything queued, in arrival order,
under the index lock. A decision sees a batch wholly or not at all.

What it costs is staleness: an event waits at most ``interval_s`` (plus the batch's own apply time) before
decisions see it, on top of the API server's watch latency. That does not weaken what the service promises:
a decision of this service is charged in the index at once (its reservation), not when its bind comes back
through the watch, and the kubelet admits or refuses what is bound whatever the cache said.

A list (``replace``) is applied at once, by the reflector's own thread, after whatever was queued before
it: the feed calls itself synced only once its lists have landed.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the Kubernetes client stays unloaded for whoever reads only the default
    from kubenexus.kube.client import Json
    from kubenexus.kube.reflector import Handler

log = logging.getLogger("kubenexus.placement.feed")

DEFAULT_INTERVAL_S = 0.01  # 10 ms: 500 events/s become at most 100 batches a second


class EventBatches:
    """The queue shared by the feed's reflectors and the thread that applies it (``run``); ``lock`` is
    reentrant (the index's)."""

    def __init__(self, lock: AbstractContextManager[object], *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError("the batch interval must be positive")
        self._lock = lock
        self.interval_s = interval_s
        self._queued: deque[tuple[Handler, str, Json]] = deque()
        self._arrived = threading.Event()
        # Over the queue's life (tests, metrics): batches applied and the events in them.
        self.batches = 0
        self.events = 0

    def handler(self, inner: Handler) -> Handler:
        """``inner`` behind the queue: its events are applied by the applier thread, its lists at once."""
        return _Queued(self, inner)

    def run(self, stop: threading.Event) -> None:
        """The applier thread: a batch every ``interval_s`` while events arrive, until ``stop``."""
        while not stop.is_set():
            if not self._arrived.wait(timeout=0.5):
                continue
            stop.wait(self.interval_s)  # let the batch fill
            self._arrived.clear()
            self.flush()
        self.flush()

    def flush(self) -> None:
        """Apply everything queued, in order, under the lock."""
        with self._lock:
            applied = 0
            queued = self._queued
            while queued:
                inner, kind, obj = queued.popleft()
                _apply(inner.apply, kind, obj)
                applied += 1
            if applied:
                self.batches += 1
                self.events += applied

    def replace(self, inner: Handler, objects: list[Json]) -> None:
        """A list, applied now: after the events queued before it."""
        with self._lock:
            self.flush()
            inner.replace(objects)

    def put(self, inner: Handler, kind: str, obj: Json) -> None:
        self._queued.append((inner, kind, obj))
        self._arrived.set()


class _Queued:
    def __init__(self, batches: EventBatches, inner: Handler) -> None:
        self._batches = batches
        self._inner = inner

    def replace(self, objects: list[Json]) -> None:
        self._batches.replace(self._inner, objects)

    def apply(self, kind: str, obj: Json) -> None:
        self._batches.put(self._inner, kind, obj)


def _apply(apply: Callable[[str, Json], None], kind: str, obj: Json) -> None:
    """One event; a handler's bug costs that event only (logged with its traceback), not the batch or the
    applier thread."""
    try:
        apply(kind, obj)
    except Exception:
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        log.exception(
            "bug while applying a watch event; skipping it",
            extra={"kind": kind, "object": f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"},
        )
