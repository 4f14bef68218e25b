"""Gangs: pod groups placed all or nothing, as the coscheduling plugin and kube-scheduler's gang scheduling do,
with their topology constraints (``placement.state.gang_coordinator``, through ``placement.service.gang_port``).

ReserveGroup (PlaceGang) registers the whole group and plans and reserves its members together, or none of them.
Permit tells a reserved member to wait until its group's quorum is reserved, then to bind, or that the group
timed out. Reserve closes to single pods the nodes held for a group that has waited too long (starvation
prevention, backfill around it), and Unreserve of a member releases its whole group. The tick expires permits
and places waiting groups in queue order (the leader only). The pod watch tells the coordinator which members
exist, bound or left.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.core.pods import PendingPod, PodUsage
from placement.core.vocabulary import Rejected, RejectionKind
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import ReserveAttempt
from placement.service.framework.handle import Handle
from placement.service.gang_port import CoordinatedGangs, GangPort
from placement.service.results import GangOutcome, GangSpec, PermitOutcome

HELD = Rejected("held for a waiting pod group (starvation prevention)", RejectionKind.HELD_FOR_GANG)


class Gangs:
    name = "Gangs"

    def __init__(self, gangs: GangPort) -> None:
        self._gangs = gangs

    @classmethod
    def over(cls, handle: Handle) -> Gangs | None:
        return None if handle.gangs is None else cls(handle.gangs)

    def reserve(self, cycle: CycleState, attempt: ReserveAttempt) -> None:
        del cycle  # every single pod backfills around a starving group alike
        attempt.keep_open(self._gangs.open_to_backfill(attempt.open_nodes), HELD)

    def unreserve(self, namespace: str, name: str) -> bool:
        return self._gangs.unreserve(namespace, name)

    def reserve_group(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        return self._gangs.place(group, members, nodes)

    def permit(self, namespace: str, name: str) -> PermitOutcome:
        return self._gangs.permit(namespace, name)

    def tick(self, *, leading: bool) -> None:
        if leading:  # a follower's or a stale cache's plan could double-book
            self._gangs.tick()

    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        if isinstance(self._gangs, CoordinatedGangs):
            self._gangs.observe_pod(key, usage, gone)
