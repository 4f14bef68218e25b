"""Members joining and leaving groups: a PlaceGang request registered whole or refused whole, pods the watch
shows (added, bound, deleted), and Unreserve.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.core.annotations import (
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    PREFERRED_TOPOLOGY_KEY,
    REQUIRED_TOPOLOGY_KEY,
    SCHEDULER_PLUGINS_KEY,
    SPREAD_KEY,
)
from placement.core.domains import TopologyLevelError
from placement.core.gang_plan import GangMember
from placement.core.podgroup import (
    DomainConstraint,
    GroupRef,
    Membership,
    PodGroupError,
    PodGroupSpec,
    parse_membership,
)
from placement.core.pods import PendingPod, PodUsage
from placement.core.vocabulary import demand_of
from placement.state.gang_coordinator.gang_records import (
    GangPhase,
    GangRefused,
    GangStatus,
    Key,
    _Gang,
    _Member,
    _State,
)
from placement.state.gang_coordinator.timeouts import GangTimeouts


class GangMembership(GangTimeouts):
    """The membership role: which pods are members of which group, checked before anything changes."""

    def register(
        self,
        group: GroupRef,
        members: Sequence[tuple[PendingPod, PodGroupSpec | None]],
        *,
        candidates: Sequence[str] | None = None,
        topology: Sequence[DomainConstraint] = (),
        permit_timeout_s: float | None = None,
    ) -> GangStatus:
        """Record a request's members of ``group`` all at once, or refuse the request whole (``GangRefused``).

        Each member comes with the spec of the PodGroup object it names, when known. Every member is
        checked first (namespace, group labels, duplicates, the cap on members, agreement with the other
        members); only then is anything recorded. Members the pod watch has not shown are dropped unless
        it shows them within the permit timeout. ``candidates``: the nodes later tries may use.
        ``topology``: the group object's topology constraints, which win over the members' labels.
        ``permit_timeout_s``: the group object's permit timeout (None: the configured one).
        """
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            memberships = self._check_request(group, members)
            for constraint in topology:
                try:
                    self._config.levels.resolve(constraint.level)
                except TopologyLevelError as error:
                    raise GangRefused(f"pod group {group}: {error}") from None
            gang = self._gangs.get(group)
            if gang is None:
                self._sequence += 1
                gang = self._gangs[group] = _Gang(ref=group, sequence=self._sequence)
            gang.permit_timeout_s = permit_timeout_s
            changed = False
            for (pod, _), membership in zip(members, memberships, strict=True):
                changed |= self._record(gang, pod, membership, now, seen=pod.key in self._present)
            names = None if candidates is None else tuple(candidates)
            if changed or names != gang.candidates or tuple(topology) != gang.topology_object:
                gang.candidates = names
                gang.topology_object = tuple(topology)
                gang.changed()
            self._refresh(gang, now)
            return self._status(gang)

    def add_member(self, pod: PendingPod, *, pod_group: PodGroupSpec | None = None) -> GangStatus | None:
        """Record a pod seen by the service; None for a pod outside any group (place it on its own).

        ``pod_group``: the spec of the scheduler-plugins PodGroup object the pod names, when known. A pod
        with invalid group labels is refused with a status that says why; it never gets a placement, and
        while it exists its group places nothing.
        """
        with self._index.lock:
            now = self._clock()
            self._expire(now)
            try:
                membership = self._membership(pod, pod_group)
            except PodGroupError as error:
                return self._refuse(pod, _named_group(pod), str(error))
            if membership is None:
                return None
            gang = self._gangs.get(membership.group)
            if gang is None:
                self._sequence += 1
                gang = self._gangs[membership.group] = _Gang(ref=membership.group, sequence=self._sequence)
            conflict = self._conflict(gang, membership, pod.key, from_object=pod_group is not None)
            if conflict is None and pod.key not in gang.members and len(gang.members) >= self._config.max_members:
                conflict = f"pod group {gang.ref} already has {len(gang.members)} members, the most a group may have"
            if conflict is not None:
                return self._refuse(pod, gang.ref, conflict)
            fixed = gang.invalid.pop(pod.key, None) is not None
            if self._record(gang, pod, membership, now, seen=True) or fixed:
                gang.changed()
            self._refresh(gang, now)
            return self._status(gang)

    def observe_present(self, namespace: str, name: str) -> None:
        """The pod watch shows the pod, not bound: a member registered by a request is now known to exist."""
        key = (namespace, name)
        with self._index.lock:
            self._present.add(key)
            _, member = self._find(key)
            if member is not None:
                member.unseen_until = None

    def observe_bound(self, usage: PodUsage) -> GangStatus | None:
        """The pod watch shows a member bound: confirms its reservation; a group fully bound is done."""
        with self._index.lock:
            self._present.discard(usage.key)
            gang, member = self._find(usage.key)
            if gang is None or member is None:
                return None
            self._reservations.observe_pod(usage)
            member.state, member.node, member.rejected, member.unseen_until = _State.BOUND, usage.node, None, None
            if not gang.count(_State.RESERVED):
                gang.deadline = None
            gang.changed()
            self._refresh(gang, self._clock())
            return self._status(gang)

    def observe_deleted(self, namespace: str, name: str) -> GangStatus | None:
        """A member was deleted or failed: releases exactly its own reservation (its charge if bound).

        A group that falls below min-available before it is bound is released entirely.
        """
        key = (namespace, name)
        with self._index.lock:
            self._present.discard(key)
            gang = self._gangs.get(self._member_of.get(key) or GroupRef("", ""))
            if gang is None:
                return None
            self._remove(gang, [key])
            if not gang.members and not gang.invalid:
                return GangStatus(
                    str(gang.ref), GangPhase.WAITING_FOR_MEMBERS, "no members left", 0, gang.min_available, 0, 0
                )
            self._refresh(gang, self._clock())
            return self._status(gang)

    def unreserve(self, namespace: str, name: str) -> bool:
        """The scheduler gave up on a reserved member: the whole group's reservations go (all or nothing)."""
        with self._index.lock:
            gang, member = self._find((namespace, name))
            if gang is None or member is None or member.state is not _State.RESERVED:
                return False
            self._release(gang, f"the scheduler gave up on member {namespace}/{name}")
            return True

    def _membership(self, pod: PendingPod, pod_group: PodGroupSpec | None) -> Membership | None:
        """The pod's group labels, refused (``PodGroupError``) when they ask more members than the cap."""
        membership = parse_membership(
            pod.namespace, pod.labels, pod.annotations, pod_group=pod_group, levels=self._config.levels.names
        )
        cap = self._config.max_members
        if membership is not None and membership.min_available is not None and membership.min_available > cap:
            key = MIN_AVAILABLE_KEY if pod_group is None else "PodGroup spec.minMember"
            accepted = f"a positive integer up to {cap}, the most members a pod group may have"
            raise PodGroupError(key, str(membership.min_available), accepted, "more members than a group may have")
        return membership

    def _check_request(
        self, group: GroupRef, members: Sequence[tuple[PendingPod, PodGroupSpec | None]]
    ) -> list[Membership]:
        """Every member's membership of ``group``, or ``GangRefused`` naming the first member at fault."""
        cap = self._config.max_members
        if len(members) > cap:
            raise GangRefused(f"pod group {group}: {len(members)} members, more than the {cap} a group may have")
        gang = self._gangs.get(group)
        if gang is not None and gang.invalid:
            raise GangRefused("; ".join(gang.invalid.values()))
        memberships: list[Membership] = []
        seen: set[Key] = set()
        for pod, pod_group in members:
            where = f"pod {pod.namespace}/{pod.name}"
            if pod.namespace != group.namespace:
                raise GangRefused(f"{where} is not in the namespace of pod group {group}")
            if pod.key in seen:
                raise GangRefused(f"{where} appears more than once in pod group {group}")
            seen.add(pod.key)
            try:
                membership = self._membership(pod, pod_group)
            except PodGroupError as error:
                raise GangRefused(f"{where}: {error}") from None
            if membership is None:
                raise GangRefused(f"{where} carries no pod-group labels")
            if membership.group != group:
                raise GangRefused(f"{where} belongs to pod group {membership.group}")
            other = self._member_of.get(pod.key)
            if other is not None and other != group:
                raise GangRefused(f"{where} is already a member of pod group {other}")
            conflict = _disagreement(group, memberships, membership, from_object=pod_group is not None)
            if conflict is None and gang is not None:
                conflict = self._conflict(gang, membership, pod.key, from_object=pod_group is not None)
            if conflict is not None:
                raise GangRefused(f"{where}: {conflict}")
            memberships.append(membership)
        known = set(gang.members) if gang is not None else set()
        total = len(known | seen)
        if total > cap:
            raise GangRefused(f"pod group {group} would have {total} members, more than the {cap} a group may have")
        return memberships

    def _record(self, gang: _Gang, pod: PendingPod, membership: Membership, now: float, *, seen: bool) -> bool:
        """Add or update one member whose membership was checked; whether anything changed."""
        before = (gang.min_available, gang.spread, gang.topology_labels)
        if membership.min_available is not None:
            gang.min_available = membership.min_available
        gang.spread = membership.spread
        gang.topology_labels = membership.topology
        changed = before != (gang.min_available, gang.spread, gang.topology_labels)
        member = gang.members.get(pod.key)
        if member is None:
            self._sequence += 1
            member = gang.members[pod.key] = _Member(pod=pod, plan=self._gang_member(pod), arrival=self._sequence)
            self._member_of[pod.key] = gang.ref
            if not seen:
                member.unseen_until = now + self._config.permit_timeout_s
                self._next_due = min(self._next_due, member.unseen_until)
            return True
        if member.state is _State.PENDING and member.pod != pod:
            member.pod, member.plan = pod, self._gang_member(pod)
            return True
        return changed

    def _gang_member(self, pod: PendingPod) -> GangMember:
        demand = demand_of(pod.pod)
        return GangMember(key=pod.key, demand=demand, intent=pod.intent)

    def _conflict(self, gang: _Gang, membership: Membership, key: Key, *, from_object: bool) -> str | None:
        """Why a member ``key`` with ``membership`` disagrees with the others in ``gang`` (None: it does not)."""
        if not gang.members or (len(gang.members) == 1 and key in gang.members):
            return None
        new, old = membership.min_available, gang.min_available
        # A PodGroup object's minMember is the group's own: an edit of it applies to every member.
        if new is not None and old is not None and new != old and not from_object:
            return (
                f"invalid value {str(new)!r} for {MIN_AVAILABLE_KEY} (members disagree: the other members of "
                f"{gang.ref} say {old}); accepted: the same positive integer on every member"
            )
        if gang.spread is not None and membership.spread is not gang.spread:
            return (
                f"invalid value {membership.spread.value!r} for {SPREAD_KEY} (members disagree: the other "
                f"members of {gang.ref} say {gang.spread.value}); accepted: the same policy on every member"
            )
        return _topology_disagreement(gang.ref, membership.topology, gang.topology_labels)

    def _refuse(self, pod: PendingPod, ref: GroupRef | None, message: str) -> GangStatus:
        """Record a member's invalid labels; its group places nothing more until the pod is fixed or gone."""
        if ref is None:
            return GangStatus("", GangPhase.INVALID, message, 0, None, 0, 0)
        gang = self._gangs.get(ref)
        if gang is None:
            self._sequence += 1
            gang = self._gangs[ref] = _Gang(ref=ref, sequence=self._sequence)
        previous = gang.members.pop(pod.key, None)
        if previous is not None and previous.state is _State.RESERVED:
            self._reservations.unreserve(*pod.key)
        gang.invalid[pod.key] = f"pod {pod.namespace}/{pod.name}: {message}"
        self._member_of[pod.key] = ref
        gang.changed()
        if gang.count(_State.RESERVED):
            self._release(gang, f"member {pod.namespace}/{pod.name} has invalid pod-group labels")
        return self._status(gang)

    def _find(self, key: Key) -> tuple[_Gang | None, _Member | None]:
        ref = self._member_of.get(key)
        gang = self._gangs.get(ref) if ref is not None else None
        return gang, None if gang is None else gang.members.get(key)


def _disagreement(
    group: GroupRef, earlier: Sequence[Membership], membership: Membership, *, from_object: bool
) -> str | None:
    """Why a request's member disagrees with the request's earlier members (None: it does not)."""
    if not earlier:
        return None
    first = earlier[0]
    new, old = membership.min_available, first.min_available
    if new is not None and old is not None and new != old and not from_object:
        return (
            f"invalid value {str(new)!r} for {MIN_AVAILABLE_KEY} (members disagree: the other members of "
            f"{group} say {old}); accepted: the same positive integer on every member"
        )
    if membership.spread is not first.spread:
        return (
            f"invalid value {membership.spread.value!r} for {SPREAD_KEY} (members disagree: the other "
            f"members of {group} say {first.spread.value}); accepted: the same policy on every member"
        )
    return _topology_disagreement(group, membership.topology, first.topology)


def _topology_disagreement(
    group: GroupRef, mine: tuple[DomainConstraint, ...], theirs: tuple[DomainConstraint, ...]
) -> str | None:
    """Why a member's topology labels disagree with the other members' (None: they agree)."""
    for key, required in ((REQUIRED_TOPOLOGY_KEY, True), (PREFERRED_TOPOLOGY_KEY, False)):
        own = next((c.level for c in mine if c.required is required), None)
        other = next((c.level for c in theirs if c.required is required), None)
        if own != other:
            say = "carry none" if other is None else f"say {other}"
            return (
                f"invalid value {own or ''!r} for {key} (members disagree: the other members of {group} "
                f"{say}); accepted: the same level on every member, or none on any"
            )
    return None


def _named_group(pod: PendingPod) -> GroupRef | None:
    """The group a pod's labels name, even when another of its group labels is invalid."""
    for key in (GROUP_NAME_KEY, SCHEDULER_PLUGINS_KEY):
        name = pod.labels.get(key)
        if name:
            return GroupRef(pod.namespace or "default", name)
    return None
