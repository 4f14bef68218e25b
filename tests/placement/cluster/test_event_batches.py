"""Watch events applied in batches: in arrival order, under the lock, a list after what came before it, a
handler's bug costing one event; and the cluster feed wired through them."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from types import TracebackType
from typing import Any

import pytest

from kubenexus.kube.client import Json
from kubenexus.kube.paths import PODS_PATH
from placement.cluster.batches import EventBatches
from placement.cluster.feed import ClusterFeed
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.conftest import wait_until
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import pod_object


class CountingLock:
    """A reentrant lock that says whether it is held."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.depth = 0
        self.holds = 0

    def __enter__(self) -> object:
        self._lock.acquire()
        self.depth += 1
        if self.depth == 1:
            self.holds += 1
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.depth -= 1
        self._lock.release()


class Recorder:
    """A handler that records what it is given, and whether the lock was held meanwhile."""

    def __init__(self, name: str, log: list[tuple[str, ...]], lock: CountingLock) -> None:
        self._name = name
        self._log = log
        self._lock = lock

    def replace(self, objects: list[Json]) -> None:
        self._log.append((self._name, "LIST", str(len(objects)), str(self._lock.depth > 0)))

    def apply(self, kind: str, obj: Json) -> None:
        if obj.get("bug"):
            raise KeyError("a bug in the handler")
        self._log.append((self._name, kind, str(obj["n"]), str(self._lock.depth > 0)))


def test_events_wait_for_the_batch_then_apply_in_order_under_the_lock() -> None:
    lock, log = CountingLock(), list[tuple[str, ...]]()
    batches = EventBatches(lock)
    nodes, pods = batches.handler(Recorder("nodes", log, lock)), batches.handler(Recorder("pods", log, lock))
    nodes.apply("ADDED", {"n": 1})
    pods.apply("ADDED", {"n": 2})
    nodes.apply("DELETED", {"n": 3})
    assert log == []  # queued only
    batches.flush()
    assert log == [
        ("nodes", "ADDED", "1", "True"),
        ("pods", "ADDED", "2", "True"),
        ("nodes", "DELETED", "3", "True"),
    ]
    assert (batches.batches, batches.events, lock.holds) == (1, 3, 1)  # one hold for the batch


def test_a_list_comes_after_the_events_queued_before_it() -> None:
    lock, log = CountingLock(), list[tuple[str, ...]]()
    batches = EventBatches(lock)
    pods = batches.handler(Recorder("pods", log, lock))
    pods.apply("MODIFIED", {"n": 1})
    pods.replace([{"n": 2}, {"n": 3}])  # applied at once, by the caller's thread
    assert log == [("pods", "MODIFIED", "1", "True"), ("pods", "LIST", "2", "True")]


def test_a_handler_bug_costs_its_event_only(caplog: pytest.LogCaptureFixture) -> None:
    lock, log = CountingLock(), list[tuple[str, ...]]()
    batches = EventBatches(lock)
    pods = batches.handler(Recorder("pods", log, lock))
    pods.apply("ADDED", {"n": 1})
    pods.apply("ADDED", {"n": 2, "bug": True, "metadata": {"namespace": "ns", "name": "broken"}})
    pods.apply("ADDED", {"n": 3})
    with caplog.at_level(logging.ERROR, logger="kubenexus.placement.feed"):
        batches.flush()
    assert [entry[2] for entry in log] == ["1", "3"]
    assert "bug while applying a watch event" in caplog.text
    assert any(getattr(record, "object", "") == "ns/broken" for record in caplog.records)


def test_the_applier_thread_gathers_what_arrives_within_its_window() -> None:
    lock, log = CountingLock(), list[tuple[str, ...]]()
    batches = EventBatches(lock, interval_s=0.5)  # far longer than the loop below takes
    pods = batches.handler(Recorder("pods", log, lock))
    stop = threading.Event()
    applier = threading.Thread(target=batches.run, args=(stop,))
    applier.start()
    try:
        for n in range(50):
            pods.apply("ADDED", {"n": n})
        wait_until(lambda: len(log) == 50, timeout_s=10)
    finally:
        stop.set()
        applier.join(5)
    assert [int(entry[2]) for entry in log] == list(range(50))
    assert (batches.batches, batches.events) == (1, 50)
    assert not applier.is_alive()


def test_the_feed_batches_its_watch_events() -> None:
    """A pod bound through the feed's pod handler reaches the index with its batch, not before."""
    index = ClusterIndex()
    index.upsert_topology("h100-a", nvswitch_node())
    feed = ClusterFeed(None, index, Reservations(index))  # type: ignore[arg-type]  # no watch here
    assert feed.batches is not None
    pod: dict[str, Any] = pod_object("trainer", gpus=2)
    pod["spec"]["nodeName"] = "h100-a"
    pod["status"] = {"phase": "Running"}
    feed.handlers[PODS_PATH].apply("ADDED", pod)
    assert index.pod("default", "trainer") is None
    feed.batches.flush()
    assert index.pod("default", "trainer") is not None
    unbatched = ClusterFeed(None, ClusterIndex(), Reservations(index), batch_interval_s=None)  # type: ignore[arg-type]
    assert unbatched.batches is None


def test_a_batch_window_out_of_range_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "placement.main", "serve", "--kubeconfig", "/nonexistent", "--watch-batch-ms", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--watch-batch-ms -1: accepted 0 (no batches) to 1000" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(ValueError, match="positive"):
        EventBatches(threading.RLock(), interval_s=0)
