"""Candidate node lists resolved to index slots once, and kept by the bytes they arrived as.

A scheduler names the same candidates call after call: kube-scheduler sends its extender every node that
passed its own filters, the same list for every pod of a template and every retry, and the Score call names
the nodes Filter just passed. Turning a list of names into slots is work per name (a string object and a
dict lookup each, ~0.25 ms per 1,000 names and two calls per decision); doing it once per distinct list
leaves a decision no Python work per name: it gathers from numpy arrays by slot.

A list is kept by a key its caller gives, which must determine the names exactly: the serialized bytes of
the request's node-name field (``placement.api.node_names``). A kept list holds while no node gains or loses
its slot (``ClusterIndex.membership``); then it is resolved again on its next use. Call under the index lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np
import numpy.typing as npt

from placement.core.vocabulary import IntArray
from placement.state.cluster_index import ClusterIndex

DEFAULT_LISTS = 32  # distinct candidate lists kept (kube-scheduler sends one per set of its own filters)
DEFAULT_BYTES = 16 << 20  # and at most this many bytes of keys: 16 MB is ~90 lists of 10,000 names


@dataclass(frozen=True)
class Candidates:
    """A candidate list split into the nodes the index holds (with their slots, in request order) and the
    names it does not."""

    names: npt.NDArray[np.object_]  # known names, request order
    rows: IntArray  # their slots
    unknown: tuple[str, ...]


class CandidateLists:
    """Resolved candidate lists by key, least recently used dropped first."""

    def __init__(self, index: ClusterIndex, *, lists: int = DEFAULT_LISTS, max_bytes: int = DEFAULT_BYTES) -> None:
        self._index = index
        self._lists = lists
        self._max_bytes = max_bytes
        self._bytes = 0
        self._kept: OrderedDict[bytes, tuple[int, Candidates]] = OrderedDict()
        self.resolved = 0  # lists resolved name by name over the cache's life (tests, metrics)

    def resolve(self, key: bytes | None, names: Callable[[], Sequence[str]]) -> Candidates:
        """The candidates ``names()`` lists; ``key`` (None: not kept) names them exactly."""
        membership = self._index.membership
        if key is not None:
            kept = self._kept.get(key)
            if kept is not None and kept[0] == membership:
                self._kept.move_to_end(key)
                return kept[1]
        candidates = self._split(names())
        self.resolved += 1
        if key is not None and len(key) <= self._max_bytes:
            self._keep(key, membership, candidates)
        return candidates

    def _split(self, names: Sequence[str]) -> Candidates:
        index = self._index
        slots = index.slots_of(names)
        held = slots >= 0
        if held.all():
            return Candidates(index.name_array(slots), slots, ())
        rows = slots[held]
        return Candidates(index.name_array(rows), rows, tuple(compress(names, (~held).tolist())))

    def _keep(self, key: bytes, membership: int, candidates: Candidates) -> None:
        previous = self._kept.pop(key, None)
        if previous is not None:
            self._bytes -= len(key)
        self._kept[key] = (membership, candidates)
        self._bytes += len(key)
        while len(self._kept) > self._lists or self._bytes > self._max_bytes:
            dropped, _ = self._kept.popitem(last=False)
            self._bytes -= len(dropped)
