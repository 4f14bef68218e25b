"""Placed pods per slot (by node name until the node has a slot): what inter-pod affinity, spread and host ports
read.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from placement.core.constraints.constraint_types import (
    PlacedPod,
)
from placement.state.scheduling_facts.facts_records import (
    _UNKNOWN,
    PodKey,
    _grown,
)
from placement.state.scheduling_facts.node_labels import FactsNodes


class FactsPods(FactsNodes):
    """The pods role: which pods sit on which slot; attach and detach a slot."""

    def put_pod(self, pod: PlacedPod) -> None:
        with self.lock:
            key = (pod.namespace, pod.name)
            held = self._held(key)
            if held == pod:
                return
            pod = self._shared(pod)
            key = (pod.namespace, pod.name)  # the shared namespace: the key holds no copy of its own
            if held is None or held.node != pod.node:
                if held is not None:
                    self._unplace(key, held)
                self._place(key, pod)
            elif (position := self._position.get(key)) is not None:
                self._placed[position] = pod
                self._pods_version += 1
            else:
                self._unslotted[key] = pod

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            key = (namespace, name)
            held = self._held(key)
            if held is not None:
                self._unplace(key, held)

    def pod(self, namespace: str, name: str) -> PlacedPod | None:
        with self.lock:
            return self._held((namespace, name))

    def attach(self, name: str, slot: int) -> None:
        """The index gave ``name`` the free ``slot``: its facts and its pods are read there from now on."""
        with self.lock:
            self._names[slot] = name
            self._slot_of[name] = slot
            self._write(slot, self._nodes.get(name, _UNKNOWN))
            waiting = self._waiting.pop(name, ())
            for key in waiting:
                self._append(key, self._unslotted.pop(key), slot)
            if waiting:
                self._pods_version += 1

    def detach(self, slot: int) -> None:
        """The index freed ``slot``: its node's facts and pods are kept by name, for when it returns."""
        with self.lock:
            name = self._names[slot]
            if name is None:
                return
            self._clear(slot)
            self._names[slot] = None
            del self._slot_of[name]
            positions = np.flatnonzero(self._placed_slots[: len(self._placed)] == slot)
            if positions.size:
                waiting = self._waiting.setdefault(name, set())
                for position in positions[::-1].tolist():  # highest first: what a swap moves is already kept
                    pod = self._placed[position]
                    key = (pod.namespace, pod.name)
                    self._remove_at(key, position)
                    self._unslotted[key] = pod
                    waiting.add(key)
                self._pods_version += 1
            self._labels_version += 1

    def _held(self, key: PodKey) -> PlacedPod | None:
        position = self._position.get(key)
        return self._unslotted.get(key) if position is None else self._placed[position]

    def _shared(self, pod: PlacedPod) -> PlacedPod:
        """``pod`` with its labels, namespace and node shared with the pods that carry the same."""
        labels = self._pod_labels.find(pod.labels)
        if labels is None:
            interned = tuple((sys.intern(key), sys.intern(value)) for key, value in pod.labels)
            labels = self._pod_labels.add(interned, lambda: (p.labels for p in self._every_pod()))
        return replace(pod, namespace=sys.intern(pod.namespace), node=sys.intern(pod.node), labels=labels)

    def _every_pod(self) -> Iterator[PlacedPod]:
        return itertools.chain(self._placed, self._unslotted.values())

    def _place(self, key: PodKey, pod: PlacedPod) -> None:
        slot = self._slot_of.get(pod.node)
        if slot is None:
            self._unslotted[key] = pod
            self._waiting.setdefault(pod.node, set()).add(key)
            return
        self._append(key, pod, slot)
        self._pods_version += 1

    def _unplace(self, key: PodKey, held: PlacedPod) -> None:
        position = self._position.get(key)
        if position is not None:
            self._remove_at(key, position)
            self._pods_version += 1
            return
        del self._unslotted[key]
        waiting = self._waiting[held.node]
        waiting.discard(key)
        if not waiting:
            del self._waiting[held.node]

    def _append(self, key: PodKey, pod: PlacedPod, slot: int) -> None:
        position = len(self._placed)
        if position == len(self._placed_slots):
            self._placed_slots = _grown(self._placed_slots, 2 * position, 0)
        self._placed.append(pod)
        self._placed_slots[position] = slot
        self._position[key] = position

    def _remove_at(self, key: PodKey, position: int) -> None:
        """Swap-remove: the last placed pod takes ``position``."""
        del self._position[key]
        last = len(self._placed) - 1
        if position != last:
            moved = self._placed[last]
            self._placed[position] = moved
            self._placed_slots[position] = self._placed_slots[last]
            self._position[(moved.namespace, moved.name)] = position
        self._placed.pop()
