"""Gang scheduling as the engine consults it: ``GangPort``, and ``CoordinatedGangs`` over the coordinator.

A PlaceGang request's group becomes the members' group labels (when they name none), so the coordinator
sees exactly what a labelled pod shows; its phases become the three states a scheduler acts on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.podgroup import PodGroupSpec
from placement.core.pods import PendingPod, PodUsage
from placement.service.errors import InvalidRequest
from placement.service.results import GangOutcome, GangSpec, GangState, PermitOutcome, Placement
from placement.state.gangs import GangCoordinator, GangPhase, GangPlacement


class GangPort(Protocol):
    """What the engine needs from gang scheduling; ``placement.state.gangs`` provides it."""

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome: ...

    def permit(self, namespace: str, name: str) -> PermitOutcome: ...

    def unreserve(self, namespace: str, name: str) -> bool: ...

    def waiting(self) -> int: ...

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]: ...

    def tick(self) -> None: ...


class CoordinatedGangs:
    """``GangPort`` over ``placement.state.gangs.GangCoordinator``: a PlaceGang request's group becomes the
    members' group labels (when they name none), so the coordinator sees exactly what a labelled pod shows."""

    def __init__(self, coordinator: GangCoordinator, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.coordinator = coordinator
        self._clock = clock  # the coordinator's: turns its permit deadline into a TTL

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        namespace = group.namespace or "default"
        minimum = group.min_member or len(members)
        for member in members:
            if member.namespace != namespace:
                where = f"pod {member.namespace}/{member.name}"
                raise InvalidRequest(f"{where} is not in the namespace of pod group {namespace}/{group.name}")
            labels = dict(member.labels)
            pod_group = None
            if SCHEDULER_PLUGINS_KEY in labels:
                pod_group = PodGroupSpec(min_member=minimum)
            elif GROUP_NAME_KEY not in labels:
                labels |= {GROUP_NAME_KEY: group.name, MIN_AVAILABLE_KEY: str(minimum)}
            status = self.coordinator.add_member(replace(member, labels=labels), pod_group=pod_group)
            if status is not None and status.phase is GangPhase.INVALID:
                raise InvalidRequest(status.message)
            if status is not None and status.group != f"{namespace}/{group.name}":
                raise InvalidRequest(f"pod {member.namespace}/{member.name} belongs to pod group {status.group}")
        result = self.coordinator.place(namespace, group.name, nodes)
        status = result.status if isinstance(result, GangPlacement) else result
        if status.phase is GangPhase.INVALID:
            raise InvalidRequest(status.message)
        placements: tuple[Placement, ...] = ()
        if isinstance(result, GangPlacement):
            ttl = max(0.0, result.deadline - self._clock())
            placements = tuple(
                Placement(m.namespace, m.name, m.node, m.cells, m.gpus, m.pinned, 0.0, {}, ttl) for m in result.members
            )
        state = {
            GangPhase.RESERVED: GangState.PLACED,
            GangPhase.BOUND: GangState.PLACED,
            GangPhase.UNSCHEDULABLE: GangState.INFEASIBLE,
        }.get(status.phase, GangState.WAITING)
        return GangOutcome(state, status.message, placements, status.placed, status.min_available or minimum)

    def permit(self, namespace: str, name: str) -> PermitOutcome:
        verdict = self.coordinator.permit_status(namespace, name)
        return PermitOutcome(verdict.verdict, verdict.reason, verdict.group, verdict.ready, verdict.min_available)

    def unreserve(self, namespace: str, name: str) -> bool:
        return self.coordinator.unreserve(namespace, name)

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]:
        """The nodes a single pod may use: all but those held for a starving head gang."""
        return self.coordinator.nodes_open_to_backfill(nodes)

    def tick(self) -> None:
        self.coordinator.tick()

    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        """The feed's pod changes (``ClusterFeed(on_pod=...)``): members bound, deleted or finished."""
        if gone:
            self.coordinator.observe_deleted(*key)
        elif usage is not None:
            self.coordinator.observe_bound(usage)

    def waiting(self) -> int:
        waiting = (GangPhase.WAITING_FOR_MEMBERS, GangPhase.WAITING_FOR_CAPACITY)
        return sum(1 for status in self.coordinator.statuses() if status.phase in waiting)
