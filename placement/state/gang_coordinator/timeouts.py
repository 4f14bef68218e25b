"""Time in the gang coordinator: members a pod watch never shows are dropped, reserved members that do not bind
within the permit timeout are released together (and told REJECT once), and what Permit answers meanwhile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from placement.core.podgroup import PermitVerdict
from placement.state.gang_coordinator.gang_records import (
    Key,
    PermitStatus,
    _Gang,
    _names_of,
    _State,
    log,
)
from placement.state.gang_coordinator.status import GangStatusViews


class GangTimeouts(GangStatusViews):
    """The timeouts role: what expires, and releasing a group's reservations."""

    def permit_status(self, namespace: str, name: str) -> PermitStatus:
        """May this pod bind now? ALLOW once its whole group is reserved; REJECT once after a release."""
        key = (namespace or "default", name)
        with self._index.lock:
            self._expire(self._clock())
            ref = self._member_of.get(key)
            gang = self._gangs.get(ref) if ref is not None else None
            if gang is None:
                return PermitStatus(PermitVerdict.ALLOW, "not a member of any pod group", "", 0, 0)
            ready = gang.count(_State.RESERVED) + gang.count(_State.BOUND)
            minimum = gang.min_available or 0
            if key in gang.invalid:
                return PermitStatus(PermitVerdict.REJECT, gang.invalid[key], str(gang.ref), ready, minimum)
            member = gang.members[key]
            if member.rejected is not None:
                reason, member.rejected = member.rejected, None
                return PermitStatus(PermitVerdict.REJECT, reason, str(gang.ref), ready, minimum)
            if member.state is not _State.PENDING:
                reason = f"pod group {gang.ref} is placed: {ready}/{minimum} member(s) reserved or bound"
                return PermitStatus(PermitVerdict.ALLOW, reason, str(gang.ref), ready, minimum)
            return PermitStatus(PermitVerdict.WAIT, self._status(gang).message, str(gang.ref), ready, minimum)

    def _expire(self, now: float) -> None:
        """Drop the members never seen in time, then release the groups whose permit timed out."""
        if now < self._next_due:
            return
        for gang in list(self._gangs.values()):
            self._drop_unseen(gang, now)
            if gang.deadline is not None and gang.deadline <= now and gang.count(_State.RESERVED):
                self._time_out(gang)
        self._next_due = min(
            (
                due
                for gang in self._gangs.values()
                for due in (gang.deadline, *(m.unseen_until for m in gang.members.values()))
                if due is not None
            ),
            default=math.inf,
        )

    def _drop_unseen(self, gang: _Gang, now: float) -> None:
        gone = [key for key, m in gang.members.items() if m.unseen_until is not None and m.unseen_until <= now]
        if not gone:
            return
        released = self._remove(gang, gone)
        self._members_dropped += len(gone)
        why = (
            f"{len(gone)} member(s) of {gang.ref} were never seen as pods within "
            f"{self._config.permit_timeout_s:g} s of the request that named them; dropped"
        )
        if self._gangs.get(gang.ref) is gang:
            gang.message = why
        log.warning(
            "pod group members dropped: never seen as pods",
            extra={"group": str(gang.ref), "members": _names_of(gone), "released": _names_of(released), "why": why},
        )

    def _time_out(self, gang: _Gang) -> None:
        waiting = [key for key, m in gang.members.items() if m.state is _State.RESERVED]
        why = (
            f"permit timeout: {len(waiting)} member(s) of {gang.ref} not bound within "
            f"{self._permit_timeout(gang):g} s; their reservations were released"
        )
        self._release(gang, why)
        self._permit_timeouts += 1
        log.warning(
            "pod group permit timed out: reservations released",
            extra={"group": str(gang.ref), "members": _names_of(waiting), "why": why},
        )

    def _permit_timeout(self, gang: _Gang) -> float:
        return gang.permit_timeout_s or self._config.permit_timeout_s

    def _release(self, gang: _Gang, why: str) -> list[Key]:
        """Release every reserved (not bound) member together; they wait to be placed again."""
        released = []
        for member in gang.members.values():
            if member.state is _State.RESERVED:
                self._reservations.unreserve(*member.pod.key)
                member.state, member.node, member.rejected = _State.PENDING, None, why
                released.append(member.pod.key)
        gang.deadline = None
        gang.message = why
        gang.changed()
        self._refresh(gang, self._clock())
        return released

    def _refresh(self, gang: _Gang, now: float) -> None:
        """Start the waiting clock once the group could be placed; stop it once placed."""
        pending = gang.count(_State.PENDING)
        if pending and self._ready(gang) and not gang.invalid:
            if gang.waiting_since is None:
                gang.waiting_since = now
        else:
            gang.waiting_since = None

    def _remove(self, gang: _Gang, keys: Iterable[Key]) -> list[Key]:
        """Forget members: exactly their own reservations or charges go, or the whole group's reservations
        when it falls below min-available before binding. Returns the members whose reservations went."""
        released = []
        for key in keys:
            gang.invalid.pop(key, None)
            member = gang.members.pop(key, None)
            self._member_of.pop(key, None)
            if member is not None and member.state is not _State.PENDING:
                self._reservations.observe_pod_deleted(*key)
                if member.state is _State.RESERVED:
                    released.append(key)
        gang.changed()
        minimum = gang.min_available or 0
        if gang.count(_State.BOUND) < minimum and len(gang.members) < minimum and gang.count(_State.RESERVED):
            released += self._release(
                gang, f"pod group fell below min-available ({len(gang.members)}/{minimum}) before binding"
            )
        if not gang.members and not gang.invalid:
            del self._gangs[gang.ref]
            if self._hold is not None and self._hold[0] == gang.ref:
                self._hold = None
        return released
