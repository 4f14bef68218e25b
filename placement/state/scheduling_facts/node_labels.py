"""Nodes' labels, taints, cordon and readiness, written into per-slot columns (kept by name until a slot is
attached).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from placement.core.constraints.constraint_types import (
    Labels,
    NodeFacts,
    Taint,
)
from placement.core.vocabulary import IntArray
from placement.state.scheduling_facts.facts_records import (
    _SPARE_VALUES,
    _UNKNOWN,
    ABSENT,
    FactsState,
    _LabelColumn,
)


class FactsNodes(FactsState):
    """The nodes role: a node's facts in its slot's columns."""

    def label_column(self, key: str) -> tuple[IntArray, tuple[str, ...]]:
        with self.lock:
            column = self._columns.get(key)
            if column is None:
                if key not in self._key_slots:
                    return self._absent, ()
                column = self._columns[key] = self._made_column(key)
            return column.codes, column.values_by_code()

    def set_node(self, facts: NodeFacts) -> bool:
        """A Node object's facts; False (and nothing bumped) when they did not change (a status heartbeat)."""
        with self.lock:
            if self._nodes.get(facts.name) == facts:
                return False
            facts = replace(
                facts,
                labels=tuple(self._node_labels.shared(pair, self._node_pairs) for pair in facts.labels),
                taints=tuple(self._node_taints.shared(taint, self._node_taint_values) for taint in facts.taints),
            )
            self._nodes[facts.name] = facts
            slot = self._slot_of.get(facts.name)
            if slot is not None:
                self._write(slot, facts)
            return True

    def node(self, name: str) -> NodeFacts | None:
        """The facts of a Node object seen, slot or not."""
        with self.lock:
            return self._nodes.get(name)

    def remove_node(self, name: str) -> None:
        """The Node object is gone; a slot it still holds keeps the defaults until the index frees it."""
        with self.lock:
            if self._nodes.pop(name, None) is None:
                return
            slot = self._slot_of.get(name)
            if slot is not None:
                self._write(slot, _UNKNOWN)

    def _node_pairs(self) -> Iterator[tuple[str, str]]:
        return (pair for facts in self._nodes.values() for pair in facts.labels)

    def _node_taint_values(self) -> Iterator[Taint]:
        return (taint for facts in self._nodes.values() for taint in facts.taints)

    def _write(self, slot: int, facts: NodeFacts) -> None:
        held = self._slot_facts[slot]
        if held == facts:
            return
        self._slot_facts[slot] = facts
        before: Labels = () if held is None else held.labels
        if before != facts.labels:
            self._write_labels(slot, dict(before), dict(facts.labels))
        taints: tuple[Taint, ...] = () if held is None else held.taints
        if taints != facts.taints:
            self._write_taints(slot, set(taints), set(facts.taints))
        self._unschedulable[slot] = facts.unschedulable
        self._labels_version += 1

    def _clear(self, slot: int) -> None:
        held = self._slot_facts[slot]
        if held is None:
            return
        self._write_labels(slot, dict(held.labels), {})
        self._write_taints(slot, set(held.taints), set())
        self._slot_facts[slot] = None
        self._unschedulable[slot] = False

    def _write_labels(self, slot: int, before: dict[str, str], after: dict[str, str]) -> None:
        for key in before.keys() - after.keys():
            self._key_slots[key] -= 1
            if not self._key_slots[key]:
                del self._key_slots[key]
                self._columns.pop(key, None)
            elif (column := self._columns.get(key)) is not None:
                column.codes[slot] = ABSENT
        for key, value in after.items():
            if key not in before:
                self._key_slots[key] = self._key_slots.get(key, 0) + 1
            elif before[key] == value:
                continue
            column = self._columns.get(key)
            if column is None:
                continue
            column.codes[slot] = column.code(value)
            if len(column.values) > 2 * self._key_slots[key] + _SPARE_VALUES:
                del self._columns[key]  # mostly values no node carries now (renamed hosts): made again when read

    def _made_column(self, key: str) -> _LabelColumn:
        column = _LabelColumn(self._capacity)
        for slot, facts in enumerate(self._slot_facts):
            if facts is not None:
                for label, value in facts.labels:
                    if label == key:
                        column.codes[slot] = column.code(value)
                        break
        return column

    def _write_taints(self, slot: int, before: set[Taint], after: set[Taint]) -> None:
        for taint in before - after:
            column = self._taint_column[taint]
            self._taint_matrix[slot, column] = False
            self._taint_slots[column] -= 1
            if not self._taint_slots[column]:
                self._drop_taint(column)
        for taint in after - before:
            found = self._taint_column.get(taint)
            column = self._add_taint(taint) if found is None else found
            self._taint_matrix[slot, column] = True
            self._taint_slots[column] += 1

    def _add_taint(self, taint: Taint) -> int:
        column = len(self._taints)
        if column == self._taint_matrix.shape[1]:
            wider = np.zeros((self._capacity, 2 * column), dtype=np.bool_)
            wider[:, :column] = self._taint_matrix
            self._taint_matrix = wider
        self._taints.append(taint)
        self._taint_slots.append(0)
        self._taint_column[taint] = column
        self._taints_tuple = None
        return column

    def _drop_taint(self, column: int) -> None:
        """No slot carries the taint of ``column`` any more: the last column moves into its place."""
        last = len(self._taints) - 1
        del self._taint_column[self._taints[column]]
        if column != last:
            moved = self._taints[last]
            self._taints[column] = moved
            self._taint_slots[column] = self._taint_slots[last]
            self._taint_column[moved] = column
            self._taint_matrix[:, column] = self._taint_matrix[:, last]
            self._taint_matrix[:, last] = False
        self._taints.pop()
        self._taint_slots.pop()
        self._taints_tuple = None
