"""Nodes held for preemptors while their victims terminate: kube-scheduler's nominated pods.

When a preemption is decided (``placement.state.preemption_search``), its victims are evicted and take their
grace period to leave; the room they free must go to the preemptor, not to whichever pod asks first.
kube-scheduler records the preemptor's ``status.nominatedNodeName`` and, filtering any other pod, adds
the nominated pods of priority >= that pod's onto their nodes first (``addNominatedPods`` in
pkg/scheduler/framework/runtime/framework.go, ``RunFilterPluginsWithNominatedPods``), so a pod of lower
or equal priority does not take the room, and one of higher priority may.

Here the hold is coarse: a node nominated for one preemptor is closed to every other pod of priority <=
the preemptor's for the whole node, not only for the preemptor's share of it. A hold ends when the
preemptor is placed, bound or deleted (``release``), or after ``hold_s`` (victims that never leave, or a
preemptor that never comes back, do not close a node for good; upstream keeps a nomination until the pod
is scheduled elsewhere or deleted, and clears it when a later cycle finds it no longer fits).

A nomination also lives in the cluster, on the pending preemptor (``status.nominatedNodeName``, written by
the binder): every replica's pod watch finds it there (``restore``), so a follower answers Filter as the
leader does and a new leader, after a failover or a restart, keeps the room for the preemptor, as
kube-scheduler's nominator reads nominations back from its pod informer.

Thread-safe: every method takes the object's own lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from placement.state.preemption_search import Preemption

# The default grace period of a pod is 30 s (terminationGracePeriodSeconds); the hold covers it, the
# eviction's round trips and the preemptor's next scheduling cycle.
DEFAULT_HOLD_S = 60.0

Key = tuple[str, str]  # (namespace, name) of a pod


@dataclass(frozen=True)
class _Hold:
    nodes: tuple[str, ...]
    priority: int
    expires_at: float


class Nominations:
    """Nodes held for preemptors while their victims terminate (kube-scheduler's nominated pods)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, hold_s: float = DEFAULT_HOLD_S) -> None:
        if hold_s <= 0:
            raise ValueError(f"a nomination's hold must be positive seconds, got {hold_s}")
        self._clock = clock
        self._hold_s = hold_s
        self._holds: dict[Key, _Hold] = {}
        # The node each preemptor was last held for: a nomination the pod watch shows again (any status
        # update of the pending pod) is not held anew, so a hold still ends after ``hold_s``.
        self._known: dict[Key, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def hold(self, preemption: Preemption, priority: int) -> float:
        """Hold each nominated node for its preemptor (``priority`` is the preemptors'); returns how long.
        A preemptor nominated again replaces its earlier hold."""
        expires_at = self._clock() + self._hold_s
        nodes: dict[Key, list[str]] = {}
        for key, node in preemption.nominations:
            nodes.setdefault(key, []).append(node)
        with self._lock:
            for key, held in nodes.items():
                self._holds[key] = _Hold(tuple(dict.fromkeys(held)), priority, expires_at)
                self._known[key] = self._holds[key].nodes
        return self._hold_s

    def restore(self, key: Key, node: str, priority: int) -> None:
        """A pending pod's ``status.nominatedNodeName``: held for ``hold_s`` from now, unless this replica
        holds nodes for it already or held this very nomination before (then it ran its course)."""
        with self._lock:
            if key in self._holds or node in self._known.get(key, ()):
                return
            self._holds[key] = _Hold((node,), priority, self._clock() + self._hold_s)
            self._known[key] = (node,)

    def open_to(self, key: Key, priority: int, nodes: Sequence[str]) -> list[str]:
        """The nodes of ``nodes`` a pod of ``priority`` may use now: all but those held for ANOTHER
        preemptor of priority >= its own (kube-scheduler's ``addNominatedPods``, per node)."""
        closed = self.closed_to((key,), priority)
        return [node for node in nodes if node not in closed]

    def closed_to(self, keys: Collection[Key], priority: int) -> frozenset[str]:
        """``open_to`` for a gang whose members are ``keys``: the nodes held for preemptors outside it of
        priority >= ``priority`` (its members' own holds stay open to it), as a set."""
        with self._lock:
            self._expire_locked()
            return frozenset(
                node
                for other, held in self._holds.items()
                if other not in keys and held.priority >= priority
                for node in held.nodes
            )

    def release(self, key: Key) -> None:
        """The preemptor was placed, bound or deleted: its nodes are open again."""
        with self._lock:
            self._holds.pop(key, None)
            self._known.pop(key, None)

    def nominated(self, key: Key) -> tuple[str, ...]:
        """The nodes held for ``key`` (what ``status.nominatedNodeName`` says); () when none is."""
        with self._lock:
            self._expire_locked()
            held = self._holds.get(key)
            return () if held is None else held.nodes

    def expire(self) -> None:
        """Drop the holds past their time."""
        with self._lock:
            self._expire_locked()

    def __len__(self) -> int:
        with self._lock:
            return len(self._holds)

    def _expire_locked(self) -> None:
        now = self._clock()
        for key in [key for key, held in self._holds.items() if held.expires_at <= now]:
            del self._holds[key]
