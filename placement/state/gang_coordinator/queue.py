"""The queue of waiting groups: ``place`` (a request's group, now) and ``tick`` (the head of the queue, then the
others from where the last tick stopped, within the tick's budget).
"""

from __future__ import annotations

from collections.abc import Iterable

from placement.core.podgroup import GroupRef
from placement.state.gang_coordinator.gang_records import (
    GROUP_PLAN_COST,
    GangPhase,
    GangPlacement,
    GangStatus,
    _Gang,
    _State,
)
from placement.state.gang_coordinator.planning import GangPlanning, _by_arrival, _names


class GangQueue(GangPlanning):
    """The queue role: which group is tried when."""

    def place(
        self, namespace: str, group: str, candidate_names: Iterable[str] | None = None
    ) -> GangPlacement | GangStatus:
        """Plan and reserve the group's waiting members all at once, or say why it waits.

        Respects the queue: nodes held for a starving head group are off limits to every other group.
        """
        ref = GroupRef(namespace or "default", group)
        names = None if candidate_names is None else list(candidate_names)
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            gang = self._gangs.get(ref)
            if gang is None:
                return GangStatus(
                    str(ref), GangPhase.WAITING_FOR_MEMBERS, f"no member of pod group {ref} seen yet", 0, None, 0, 0
                )
            head = self._head(now)
        result = self._attempt(gang, names, now, head=head is gang, retry=False)
        assert result is not None  # a try made on request is never skipped
        with self._index.lock:
            reserved = [m.placement for m in _by_arrival(gang, _State.RESERVED) if m.placement is not None]
            if isinstance(result, GangStatus) and reserved and gang.deadline is not None:
                # Reserved by a retry since the caller last asked: the caller binds them now.
                return GangPlacement(status=self._status(gang), members=tuple(reserved), deadline=gang.deadline)
        return result

    def tick(self, now: float | None = None) -> list[GangStatus]:
        """Expire permits, then try the waiting groups in queue order within the budget; their statuses.

        The statuses are those of every group with members waiting, in queue order, tried or not.
        """
        with self._index.lock:
            now = self._clock() if now is None else now
            self._expire(now)
            queue = sorted(
                (g for g in self._gangs.values() if not g.invalid and g.count(_State.PENDING)),
                key=lambda g: self._queue_key(g, now),
            )
            ready = [g for g in queue if self._ready(g)]
            head = ready[0] if ready else None
            if self._hold is not None and (head is None or head.ref != self._hold[0] or not self._starving(head, now)):
                self._hold = None
            order = [
                (gang, gang.count(_State.PENDING) + GROUP_PLAN_COST, _names(gang.candidates))
                for gang in ready[:1] + _rotated(ready[1:], self._resume_after)
            ]
        # The head is always tried; the others share the budget, the first of them always tried too (a
        # group larger than the budget still gets its turn).
        budget, spent, last, stopped = self._config.budget, 0, None, False
        for gang, cost, names in order:
            if gang is not head and spent and spent + cost > budget:
                stopped = True  # the next tick goes on from here
                break
            tried = self._attempt(gang, names, now, head=gang is head, retry=True)
            if gang is not head:
                spent += cost if tried is not None else 0
                last = gang.ref
        with self._index.lock:
            self._resume_after = last if stopped else None
            return [self._status(g) for g in queue if self._gangs.get(g.ref) is g]


def _rotated(gangs: list[_Gang], after: GroupRef | None) -> list[_Gang]:
    """``gangs`` starting after the one named ``after`` (where the last tick stopped), wrapping around."""
    refs = [g.ref for g in gangs]
    if after not in refs:
        return gangs
    start = refs.index(after) + 1
    return gangs[start:] + gangs[:start]
