"""A Preempt request's gang, validated as PlaceGang validates it: its waiting members, their topology constraints
and their spread policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from placement.core.annotations import SPREAD_KEY
from placement.core.domains import TopologyLevelError, TopologyLevels
from placement.core.podgroup import DomainConstraint, PodGroupError, SpreadPolicy, parse_spread, parse_topology_labels
from placement.core.pods import PendingPod, PodSpec
from placement.service.errors import InvalidRequest
from placement.service.results import GangSpec


def gang_preemptors(
    group: GangSpec, validated: Callable[[PodSpec], PendingPod], levels: TopologyLevels
) -> tuple[list[PendingPod], tuple[DomainConstraint, ...], SpreadPolicy]:
    """The group's waiting members (each validated by ``validated``), its topology
    constraints and spread policy (the members' ``SPREAD_KEY``)."""
    where = f"pod group {group.namespace or 'default'}/{group.name}"
    if not group.name:
        raise InvalidRequest("pod group name is required")
    if not group.members:
        raise InvalidRequest(f"{where} has no members")
    members = [validated(member) for member in group.members]
    stated = {
        text
        for member in members
        if (text := member.annotations.get(SPREAD_KEY, member.labels.get(SPREAD_KEY))) is not None
    }
    if len(stated) > 1:
        raise InvalidRequest(f"{where}: members disagree about {SPREAD_KEY}: {', '.join(sorted(stated))}")
    try:
        policy = parse_spread(stated.pop()) if stated else SpreadPolicy.PACKED
    except PodGroupError as error:
        raise InvalidRequest(f"{where}: {error}") from None
    topology = group.topology or _labelled_topology(where, members, levels)
    for constraint in topology:
        try:
            levels.resolve(constraint.level)
        except TopologyLevelError as error:
            raise InvalidRequest(f"{where}: {error}") from None
    return members, topology, policy


def _labelled_topology(
    where: str, members: Sequence[PendingPod], levels: TopologyLevels
) -> tuple[DomainConstraint, ...]:
    """The required-/preferred-topology labels the members agree on, as the coordinator reads them."""
    stated = set()
    for member in members:
        try:
            stated.add(parse_topology_labels(member.labels, levels.names))
        except PodGroupError as error:
            raise InvalidRequest(f"{where}: {error}") from None
    if len(stated) > 1:
        raise InvalidRequest(f"{where}: members disagree about their required or preferred topology")
    return stated.pop() if stated else ()
