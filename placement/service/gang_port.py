"""Gang scheduling as the engine consults it: ``GangPort``, and ``CoordinatedGangs`` over the coordinator.

A PlaceGang request's group becomes the members' group labels (when they name none), so the coordinator
sees exactly what a labelled pod shows; its phases become the three states a scheduler acts on. The
request is registered whole or refused whole (``GangCoordinator.register``): a refused request leaves
nothing behind for a later tick to reserve.

Groups defined by an object (a Volcano or native PodGroup, a Workload: ``placement.core.gang_sources``)
reach here by the name the binder gives them (``PodGroupKey.group_name``, a label value) and members that
carry no group label: they get ours, like any request's. A scheduler-plugins member keeps its label and
the request's minimum stands for its PodGroup's ``minMember``. A request's ``schedule_timeout_s`` is that
group's permit timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.domains import TopologyLevels
from placement.core.pod_placement import Placement
from placement.core.podgroup import GroupRef, PodGroupSpec
from placement.core.pods import PendingPod, PodUsage
from placement.service.errors import InvalidRequest
from placement.service.results import GangOutcome, GangSpec, GangState, PermitOutcome
from placement.state.gang_coordinator import GangCoordinator, GangPhase, GangPlacement, GangRefused


@dataclass(frozen=True)
class GangCounts:
    """Events of the gangs' life so far, for the metrics."""

    permit_timeouts: int  # groups whose reserved members were released for not binding in time
    members_dropped: int  # members registered by requests that the pod watch never showed


class GangPort(Protocol):
    """What the engine needs from gang scheduling; ``placement.state.gang_coordinator`` provides it."""

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome: ...

    def permit(self, namespace: str, name: str) -> PermitOutcome: ...

    def unreserve(self, namespace: str, name: str) -> bool: ...

    def waiting(self) -> int: ...

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]: ...

    def tick(self) -> None: ...

    def counts(self) -> GangCounts: ...

    @property
    def levels(self) -> TopologyLevels:
        """The cluster's topology levels, which a group's constraints name."""
        ...


class CoordinatedGangs:
    """``GangPort`` over ``placement.state.gang_coordinator.GangCoordinator``: a PlaceGang request's group becomes the
    members' group labels (when they name none), so the coordinator sees exactly what a labelled pod shows."""

    def __init__(self, coordinator: GangCoordinator, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.coordinator = coordinator
        self._clock = clock  # the coordinator's: turns its permit deadline into a TTL

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        """Register every member (all or none: ``InvalidRequest`` names the first at fault), then place."""
        namespace = group.namespace or "default"
        minimum = group.min_member or len(members)
        entries = []
        for member in members:
            labels = dict(member.labels)
            pod_group = None
            if SCHEDULER_PLUGINS_KEY in labels:
                pod_group = PodGroupSpec(min_member=minimum)
            elif GROUP_NAME_KEY not in labels:
                labels |= {GROUP_NAME_KEY: group.name, MIN_AVAILABLE_KEY: str(minimum)}
            entries.append((replace(member, labels=labels), pod_group))
        try:
            self.coordinator.register(
                GroupRef(namespace, group.name),
                entries,
                candidates=nodes,
                topology=group.topology,
                permit_timeout_s=group.schedule_timeout_s,
            )
        except GangRefused as error:
            raise InvalidRequest(str(error)) from None
        result = self.coordinator.place(namespace, group.name, nodes)
        status = result.status if isinstance(result, GangPlacement) else result
        if status.phase is GangPhase.INVALID:
            raise InvalidRequest(status.message)
        placements: tuple[Placement, ...] = ()
        if isinstance(result, GangPlacement):
            ttl = max(0.0, result.deadline - self._clock())
            index = self.coordinator.index
            placements = tuple(replace(m, ttl_s=ttl, notes=index.node_notes(m.node)) for m in result.members)
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

    @property
    def levels(self) -> TopologyLevels:
        return self.coordinator.config.levels

    def counts(self) -> GangCounts:
        return GangCounts(self.coordinator.permit_timeouts, self.coordinator.members_dropped)

    def observe_pod(self, key: tuple[str, str], usage: PodUsage | None, gone: bool) -> None:
        """The feed's pod changes (``ClusterFeed(on_pod=...)``): pods seen pending, bound, deleted or finished.

        A pending pod seen here confirms that a member a PlaceGang request named exists (members the watch
        never shows are dropped after the permit timeout).
        """
        if gone:
            self.coordinator.observe_deleted(*key)
        elif usage is not None:
            self.coordinator.observe_bound(usage)
        else:
            self.coordinator.observe_present(*key)

    def waiting(self) -> int:
        waiting = (GangPhase.WAITING_FOR_MEMBERS, GangPhase.WAITING_FOR_CAPACITY)
        return sum(1 for status in self.coordinator.statuses() if status.phase in waiting)
