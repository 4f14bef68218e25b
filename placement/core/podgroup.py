"""Pod-group membership, read from pod labels exactly as users write them.

Keys (labels; the spread policy may also be an annotation, which then wins)::

    pod-group.scheduling.kubenexus.io/name            the group's name, unique within the namespace
    pod-group.scheduling.kubenexus.io/min-available   members that must be placed together (>= 1)
    scheduling.x-k8s.io/pod-group                     scheduler-plugins: the name of a PodGroup object,
                                                      whose spec.minMember gives min-available
    scheduling.kubenexus.io/gang-numa-spread          packed | spread | balanced (default packed)
    pod-group.scheduling.kubenexus.io/required-topology   a topology level (nvlink | rack | block | zone
    pod-group.scheduling.kubenexus.io/preferred-topology  unless configured otherwise): every member in
                                                          one domain of it, or in the fewest

Every operator that lets users label the pods of a job (Job, PyTorchJob, SparkApplication, MPIJob, Ray)
can form a group without a change of its own: the labels go on the pod templates (docs/gang.md).

A group lives in one namespace: two namespaces may use one name for two different groups. Both label
families may name the group on one pod, but then they must name the same group, and a PodGroup's
``minMember`` must agree with ``min-available`` when both are given. Errors name the key, the value and
what is accepted, like ``placement.core.intent.IntentError``; they are raised, never half-applied.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from placement.core.annotations import (
    DEFAULT_TOPOLOGY_LEVELS,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    PREFERRED_TOPOLOGY_KEY,
    REQUIRED_TOPOLOGY_KEY,
    SCHEDULER_PLUGINS_KEY,
    SPREAD_KEY,
    InvalidValue,
)

# A label value: what the API server accepts, so the name also survives being written back onto pods.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE_MAX = 63
_NAME_ACCEPTED = "a label value: 1-63 characters [A-Za-z0-9-_.], starting and ending alphanumeric"
_MIN_ACCEPTED = "a positive integer, e.g. 8"


class SpreadPolicy(enum.StrEnum):
    """How a gang's members are laid out over nodes and NUMA cells (docs/gang.md)."""

    PACKED = "packed"  # fewest nodes, then one fabric clique, rack, zone, NUMA cell
    SPREAD = "spread"  # one member per node, zones round robin
    BALANCED = "balanced"  # fewest nodes, members even over them and over their NUMA cells


class PodGroupError(InvalidValue):
    """A pod-group label (or PodGroup field) the service refuses."""


@dataclass(frozen=True, order=True)
class GroupRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class DomainConstraint:
    """Where a gang's members go: all in one domain of a topology level (``required``), or in the fewest.

    ``level`` is a level the service is configured with (``nvlink``, ``rack``, ``block``, ``zone`` by
    default, each naming the node label keys that say a node's domain) or a node label key itself (what a
    native PodGroup's ``schedulingConstraints.topology[].key`` gives).
    """

    level: str
    required: bool


@dataclass(frozen=True)
class PodGroupSpec:
    """What the service needs from a scheduler-plugins PodGroup object (``scheduling.x-k8s.io``)."""

    min_member: int


@dataclass(frozen=True)
class Membership:
    """One pod's claim to belong to a group."""

    group: GroupRef
    min_available: int | None  # None: a scheduler-plugins member whose PodGroup object is not known yet
    spread: SpreadPolicy
    topology: tuple[DomainConstraint, ...] = ()  # the required-/preferred-topology labels, required first


def parse_membership(
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    *,
    pod_group: PodGroupSpec | None = None,
    levels: Collection[str] = DEFAULT_TOPOLOGY_LEVELS,
) -> Membership | None:
    """The pod's group, or None for a pod outside any group; raises ``PodGroupError`` on invalid values.

    ``pod_group`` is the spec of the PodGroup object named by ``scheduling.x-k8s.io/pod-group``, when the
    caller has it. ``levels``: the topology level names the service is configured with (the values the
    required-/preferred-topology labels accept).
    """
    annotations = annotations or {}
    ours = labels.get(GROUP_NAME_KEY)
    theirs = labels.get(SCHEDULER_PLUGINS_KEY)
    minimum = labels.get(MIN_AVAILABLE_KEY)
    if ours is None and theirs is None:
        for key in (MIN_AVAILABLE_KEY, REQUIRED_TOPOLOGY_KEY, PREFERRED_TOPOLOGY_KEY):
            if key in labels:
                accepted = _MIN_ACCEPTED if key == MIN_AVAILABLE_KEY else _levels_accepted(levels)
                raise PodGroupError(key, labels[key], accepted, f"set without {GROUP_NAME_KEY}")
        return None
    name = _parse_name(GROUP_NAME_KEY, ours) if ours is not None else None
    plugin_name = _parse_name(SCHEDULER_PLUGINS_KEY, theirs) if theirs is not None else None
    if name is not None and plugin_name is not None and name != plugin_name:
        raise PodGroupError(
            SCHEDULER_PLUGINS_KEY, plugin_name, f"the same group as {GROUP_NAME_KEY} ({name!r})", "names another group"
        )
    min_available = None if minimum is None else parse_min_available(MIN_AVAILABLE_KEY, minimum)
    if name is not None and plugin_name is None and min_available is None:
        raise PodGroupError(MIN_AVAILABLE_KEY, "", _MIN_ACCEPTED, f"required with {GROUP_NAME_KEY}")
    if pod_group is not None:
        if min_available is not None and min_available != pod_group.min_member:
            raise PodGroupError(
                MIN_AVAILABLE_KEY,
                str(min_available),
                f"the PodGroup's minMember ({pod_group.min_member})",
                "disagrees with the PodGroup object",
            )
        min_available = pod_group.min_member
    spread_text = annotations.get(SPREAD_KEY, labels.get(SPREAD_KEY))
    return Membership(
        group=GroupRef(namespace or "default", name or plugin_name or ""),
        min_available=min_available,
        spread=SpreadPolicy.PACKED if spread_text is None else parse_spread(spread_text),
        topology=parse_topology_labels(labels, levels),
    )


def parse_topology_labels(
    labels: Mapping[str, str], levels: Collection[str] = DEFAULT_TOPOLOGY_LEVELS
) -> tuple[DomainConstraint, ...]:
    """The required- and preferred-topology labels (required first); ``PodGroupError`` for an unknown level."""
    return tuple(
        DomainConstraint(_parse_level(key, labels[key], levels), key == REQUIRED_TOPOLOGY_KEY)
        for key in (REQUIRED_TOPOLOGY_KEY, PREFERRED_TOPOLOGY_KEY)
        if key in labels
    )


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroupSpec:
    """A scheduler-plugins PodGroup object (``scheduling.x-k8s.io/v1alpha1``): its ``spec.minMember``."""
    spec = obj.get("spec") or {}
    raw = spec.get("minMember")
    if raw is None:
        raise PodGroupError("PodGroup spec.minMember", "", _MIN_ACCEPTED, "missing")
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise PodGroupError("PodGroup spec.minMember", str(raw), _MIN_ACCEPTED, "not an integer")
    return PodGroupSpec(min_member=parse_min_available("PodGroup spec.minMember", str(raw)))


def parse_min_available(key: str, value: str) -> int:
    text = value.strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isascii() or not digits.isdigit():
        raise PodGroupError(key, value, _MIN_ACCEPTED, "not an integer")
    number = int(text)
    if number < 0:
        raise PodGroupError(key, value, _MIN_ACCEPTED, "negative")
    if number == 0:
        raise PodGroupError(key, value, _MIN_ACCEPTED, "zero: a group needs at least one member")
    return number


def parse_spread(value: str) -> SpreadPolicy:
    try:
        return SpreadPolicy(value.strip())
    except ValueError:
        raise PodGroupError(SPREAD_KEY, value, " | ".join(p.value for p in SpreadPolicy)) from None


def _parse_level(key: str, value: str, levels: Collection[str]) -> str:
    if value.strip() not in levels:
        raise PodGroupError(key, value, _levels_accepted(levels), "not a configured topology level")
    return value.strip()


def _levels_accepted(levels: Collection[str]) -> str:
    return "a topology level: " + " | ".join(levels) if levels else "nothing: no topology level is configured"


def _parse_name(key: str, value: str) -> str:
    if not value:
        raise PodGroupError(key, value, _NAME_ACCEPTED, "empty")
    if len(value) > _LABEL_VALUE_MAX:
        raise PodGroupError(key, value, _NAME_ACCEPTED, f"{len(value)} characters")
    if not _LABEL_VALUE.fullmatch(value):
        raise PodGroupError(key, value, _NAME_ACCEPTED)
    return value


class PermitVerdict(enum.StrEnum):
    """What Permit answers for a member of a group: bind now, hold, or give up (unreserve)."""

    ALLOW = "Allow"
    WAIT = "Wait"
    REJECT = "Reject"
