"""A group's status as users see it (``GangStatus``), and its place in the queue: starving groups first, then
higher priority, then the oldest.
"""

from __future__ import annotations

from placement.core.podgroup import GroupRef
from placement.state.gang_coordinator.gang_records import (
    CoordinatorState,
    GangPhase,
    GangStatus,
    _Gang,
    _State,
)


class GangStatusViews(CoordinatorState):
    """The status role: reads the groups, changes nothing."""

    def status(self, namespace: str, group: str) -> GangStatus | None:
        with self._index.lock:
            gang = self._gangs.get(GroupRef(namespace or "default", group))
            return None if gang is None else self._status(gang)

    def statuses(self) -> list[GangStatus]:
        with self._index.lock:
            return [self._status(gang) for gang in self._gangs.values()]

    def _status(self, gang: _Gang) -> GangStatus:
        bound = gang.count(_State.BOUND)
        placed = bound + gang.count(_State.RESERVED)
        pending = gang.count(_State.PENDING)
        minimum = gang.min_available
        total = len(gang.members)
        if gang.invalid:
            phase, message = GangPhase.INVALID, "; ".join(gang.invalid.values())
        elif minimum is None:
            phase = GangPhase.WAITING_FOR_MEMBERS
            message = f"waiting for the PodGroup object {gang.ref} (scheduling.x-k8s.io) to read minMember"
        elif placed and (not pending or placed >= minimum):
            phase = GangPhase.BOUND if bound == placed else GangPhase.RESERVED
            message = gang.message if phase is GangPhase.RESERVED else f"all {bound} member(s) bound"
            if pending:
                message = f"{placed} member(s) placed, {pending} more waiting: {gang.message}"
        elif total < minimum:
            phase, message = GangPhase.WAITING_FOR_MEMBERS, f"waiting for pod group {total}/{minimum}"
        elif gang.unschedulable:
            phase, message = GangPhase.UNSCHEDULABLE, gang.message
        else:
            phase, message = GangPhase.WAITING_FOR_CAPACITY, gang.message or "waiting to be placed"
        return GangStatus(str(gang.ref), phase, message, total, minimum, placed, bound)

    def _ready(self, gang: _Gang) -> bool:
        """Enough members to place: min-available counted over bound, reserved and waiting members."""
        return gang.min_available is not None and len(gang.members) >= gang.min_available

    def _starving(self, gang: _Gang, now: float) -> bool:
        return gang.waiting_since is not None and now - gang.waiting_since >= self._config.starvation_after_s

    def _queue_key(self, gang: _Gang, now: float) -> tuple[int, int, int]:
        if self._starving(gang, now):
            return (0, 0, gang.sequence)
        return (1, -gang.priority, gang.sequence)

    def _head(self, now: float) -> _Gang | None:
        waiting = (g for g in self._gangs.values() if g.count(_State.PENDING) and self._ready(g) and not g.invalid)
        return min(waiting, key=lambda g: self._queue_key(g, now), default=None)
