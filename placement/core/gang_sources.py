"""Pod groups from the APIs operators create, read into one model: which group a pod joins, and what it asks.

Six ways to define a gang, one internal model (``GroupDefinition``) for all of them::

    source                       the group's object                            how a pod joins
    kubenexus                    none: the pods' labels                        pod-group.scheduling.kubenexus.io/name
    kueue.x-k8s.io               none: the pods' label or annotations (Kueue   kueue.x-k8s.io/pod-group-name
                                 pod groups; size: pod-group-total-count)      (annotation, else label)
    scheduling.x-k8s.io          scheduler-plugins PodGroup (v1alpha1)         label scheduling.x-k8s.io/pod-group
    scheduling.volcano.sh        Volcano PodGroup (v1beta1)                    annotation scheduling.k8s.io/group-name
    scheduling.k8s.io            native PodGroup: v1beta1 or v1alpha3          spec.schedulingGroup.podGroupName
                                 (Kubernetes 1.37), v1alpha2 (1.36)
    scheduling.k8s.io/v1alpha1   native Workload (Kubernetes 1.35)             spec.workloadRef {name, podGroup,
                                                                               podGroupReplicaKey}

Upstream sources of each rule:

* Volcano's scheduler reads the group from the pod annotation ``scheduling.k8s.io/group-name`` only
  (``KubeGroupNameAnnotationKey``, volcano.sh/apis pkg/apis/scheduling/v1beta1/labels.go; read by
  ``getJobID`` in volcano pkg/scheduler/api/job_info.go); the group is ``namespace/annotation``.
* scheduler-plugins reads the label ``scheduling.x-k8s.io/pod-group`` (``PodGroupLabel``,
  apis/scheduling/v1alpha1/types.go; ``util.GetPodGroupLabel``).
* Kueue (v0.19.2) forms a pod group from plain pods naming it, its size in an annotation every member
  carries (``placement.core.kueue`` cites the keys); Kueue admits the group by quota once that many pods
  exist, and it is placed whole. Like our labels, no object defines it (``LABEL_DEFINED_SOURCES``,
  ``label_group_definition``).
* Kubernetes 1.35 (KEP-4671): ``Pod.spec.workloadRef`` names a Workload and one of its ``podGroups``; each
  distinct ``podGroupReplicaKey`` is a gang of its own. A pod group's ``policy`` is a union of ``basic``
  (each pod scheduled on its own: no gang) and ``gang`` (``minCount`` > 0 required); the API server's
  validation (pkg/apis/scheduling/validation) refuses any other shape, so a missing ``minCount`` or both
  members set never reach a real cluster's store and are refused here with the same rule.
* Kubernetes 1.36 (KEP-5832, KEP-5732): ``Pod.spec.schedulingGroup.podGroupName`` names a PodGroup, which
  carries its own copy of the policy (``spec.schedulingPolicy``, the same union) and at most one
  ``schedulingConstraints.topology[].key``: every member on nodes with one value of that node label.
* Kubernetes 1.37 (``scheduling.k8s.io`` v1beta1 and v1alpha3, gate GenericWorkload): the pod still names
  its group by ``spec.schedulingGroup.podGroupName`` (k8s.io/api core/v1 types.go ``PodSchedulingGroup``;
  ``spec.workloadRef`` is tombstoned), and the PodGroup keeps the 1.36 ``schedulingPolicy`` and
  ``schedulingConstraints`` shapes (k8s.io/api scheduling/v1beta1 types.go ``PodGroupSpec``). The PodGroup
  is the gang: kube-scheduler's gangscheduling plugin (pkg/scheduler/framework/plugins/gangscheduling/
  gangscheduling.go, ``preEnqueueHierarchiesDisabled`` and ``permitPodGroup``) reads the pod's PodGroup
  and its ``schedulingPolicy.gang.minCount``, the topologyaware plugin (topologyaware/topology_placement.go,
  ``getTopologyKey``) its ``schedulingConstraints.topology[0].key`` (gate TopologyAwareWorkloadScheduling,
  alpha in 1.37); neither reads a Workload. A 1.37 Workload holds only templates
  (``spec.podGroupTemplates``) that controllers copy into PodGroups, and a PodGroup's ``spec.workloadRef
  {workloadName, templateName}`` (1.36: ``podGroupTemplateRef.workload``) only records the template it
  came from: neither is read here. A PodGroup with ``spec.parentCompositePodGroupName``
  (gate CompositePodGroup, alpha: the v1alpha3 CompositePodGroup's ``minGroupCount`` child groups placed
  all or nothing, gangscheduling.go ``permitPodForHierarchy``) is refused: that hierarchy is not modelled.

The coordinator keys groups by ``GroupRef(namespace, name)`` and writes that name into its members' group
labels, so the name must be a label value and must not collide across sources (``PodGroupKey.group_name``):

* our labels and scheduler-plugins: the label value itself (one namespace of names: a pod may carry both
  labels when they name the same group, ``placement.core.podgroup``);
* Volcano ``volcano_<name>``, native PodGroup ``podgroup_<name>``, Kueue ``kueue_<name>``, Workload
  ``workload_<workload>_<podGroup>[_<replicaKey>]``: object names (and Kueue's group names, which its pod
  webhook validates as object names) never contain ``_``, so these never collide with each other; a label
  group named so is documented as reserved (docs/gang.md);
* a name longer than 63 characters keeps its first characters and ends with ``_`` and 10 hex digits of the
  SHA-256 of the full name: stable across restarts and replicas.

Errors name the object (or pod), the field, the value and what is accepted, one sentence each.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubenexus.topology.labels import MAX_LABEL_VALUE, valid_dns_subdomain, valid_label_value
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SCHEDULER_PLUGINS_KEY
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY, kueue_group_name
from placement.core.podgroup import DomainConstraint, GroupRef

SOURCE_OURS = "kubenexus"
SOURCE_SCHEDULER_PLUGINS = "scheduling.x-k8s.io"
SOURCE_VOLCANO = "scheduling.volcano.sh"
# Native PodGroups, whichever version the cluster serves: a pod names its PodGroup without a version.
SOURCE_PODGROUP = "scheduling.k8s.io"
SOURCE_WORKLOAD = "scheduling.k8s.io/v1alpha1"
SOURCE_KUEUE = "kueue.x-k8s.io"
SOURCES = (SOURCE_OURS, SOURCE_SCHEDULER_PLUGINS, SOURCE_VOLCANO, SOURCE_PODGROUP, SOURCE_WORKLOAD, SOURCE_KUEUE)
# The sources whose groups their pods define alone, no object: ``label_group_definition`` reads them.
LABEL_DEFINED_SOURCES = (SOURCE_OURS, SOURCE_KUEUE)

# Volcano's pod annotation naming the PodGroup (volcano.sh/apis scheduling/v1beta1 KubeGroupNameAnnotationKey).
VOLCANO_GROUP_KEY = "scheduling.k8s.io/group-name"

# What a Volcano PodGroup's ``spec.networkTopology.highestTierAllowed`` tier N means here: the members stay
# within one domain of DEFAULT_VOLCANO_TIERS[N - 1] (tier 1 is the closest hyperNode tier). Configurable.
DEFAULT_VOLCANO_TIERS = ("rack", "block", "zone")

# The prefix of each source's group names but ours and scheduler-plugins'; their names never contain "_".
_NAME_PREFIX = {
    SOURCE_VOLCANO: "volcano",
    SOURCE_PODGROUP: "podgroup",
    SOURCE_WORKLOAD: "workload",
    SOURCE_KUEUE: "kueue",
}
_DIGEST_CHARS = 10
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_OBJECT_NAME = "an object name: a lowercase DNS subdomain of at most 253 characters"
_REPLICA_KEY = "a DNS label: at most 63 lowercase alphanumerics or '-'"
_MIN_COUNT = "a positive integer, e.g. 8"
_COUNT = re.compile(r"[+-]?[0-9]+")  # Go's strconv.Atoi, which Kueue parses its total count with
_POLICY = "exactly one of basic: {} or gang: {minCount: N}"


class GangSourceError(ValueError):
    """A pod's group reference or a group object the service refuses; the message names what and why."""


@dataclass(frozen=True, order=True)
class PodGroupKey:
    """Which group a pod joins: the source, the namespace, the object (or label) name, and for a 1.35
    Workload the pod group within it and the replica key (each replica key its own gang)."""

    source: str
    namespace: str
    name: str
    pod_group: str = ""
    replica_key: str = ""

    @property
    def group_name(self) -> str:
        """The coordinator's name for the group: a label value, unique in the namespace across sources."""
        if self.source in (SOURCE_OURS, SOURCE_SCHEDULER_PLUGINS):
            return self.name
        parts = [_NAME_PREFIX[self.source], self.name]
        if self.source == SOURCE_WORKLOAD:
            parts.append(self.pod_group)
            if self.replica_key:
                parts.append(self.replica_key)
        full = "_".join(parts)
        if valid_label_value(full):
            return full
        digest = hashlib.sha256(full.encode()).hexdigest()[:_DIGEST_CHARS]
        head = full[: MAX_LABEL_VALUE - _DIGEST_CHARS - 1].rstrip("-_.")
        return f"{head}_{digest}"

    @property
    def ref(self) -> GroupRef:
        return GroupRef(self.namespace, self.group_name)

    @property
    def object_name(self) -> str:
        """The object that defines the group, as users name it: ``ns/name`` (and the pod group, replica)."""
        where = f"{self.namespace}/{self.name}"
        if self.source == SOURCE_WORKLOAD:
            where += f" pod group {self.pod_group}"
            if self.replica_key:
                where += f" replica {self.replica_key}"
        return where

    def __str__(self) -> str:
        return f"{self.object_name} ({self.source})"


@dataclass(frozen=True)
class GroupDefinition:
    """What a group's object asks: how many members are placed together, for how long reserved members may
    wait to bind, and where they must (or should) land. ``gang`` False: a basic policy, each pod placed on
    its own."""

    key: PodGroupKey
    min_member: int
    timeout_s: float | None = None
    topology: tuple[DomainConstraint, ...] = ()
    gang: bool = True

    @property
    def ref(self) -> GroupRef:
        return self.key.ref

    @property
    def source(self) -> str:
        return self.key.source


# --- which group a pod joins --------------------------------------------------------------------------------


def group_of(pod: Mapping[str, Any]) -> PodGroupKey | None:
    """The group a Pod object joins, or None for a pod of no group; ``GangSourceError`` when its reference
    is invalid or it names groups of two sources."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(metadata.get("namespace") or "default")
    where = f"pod {namespace}/{metadata.get('name') or ''}"
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    found: list[PodGroupKey] = []
    scheduling_group = spec.get("schedulingGroup")
    if scheduling_group is not None:
        name = _object_name(where, "spec.schedulingGroup.podGroupName", _mapping(scheduling_group).get("podGroupName"))
        found.append(PodGroupKey(SOURCE_PODGROUP, namespace, name))
    workload_ref = spec.get("workloadRef")
    if workload_ref is not None:
        found.append(_workload_key(where, namespace, _mapping(workload_ref)))
    # Our label and scheduler-plugins' may name one group together (placement.core.podgroup checks they agree).
    plugin_name = labels.get(SCHEDULER_PLUGINS_KEY)
    if plugin_name is not None:
        found.append(PodGroupKey(SOURCE_SCHEDULER_PLUGINS, namespace, plugin_name))
    elif labels.get(GROUP_NAME_KEY) is not None:
        found.append(PodGroupKey(SOURCE_OURS, namespace, labels[GROUP_NAME_KEY]))
    volcano_name = annotations.get(VOLCANO_GROUP_KEY)
    if volcano_name:  # Volcano reads a non-empty value only (getJobID)
        found.append(PodGroupKey(SOURCE_VOLCANO, namespace, _object_name(where, VOLCANO_GROUP_KEY, volcano_name)))
    kueue_name = kueue_group_name(labels, annotations)
    if kueue_name:
        found.append(PodGroupKey(SOURCE_KUEUE, namespace, _object_name(where, KUEUE_GROUP_NAME_KEY, kueue_name)))
    if len(found) > 1:
        named = " and ".join(str(key) for key in found)
        raise GangSourceError(f"{where} joins more than one pod group ({named}); accepted: one group per pod")
    return found[0] if found else None


def _workload_key(where: str, namespace: str, ref: Mapping[str, Any]) -> PodGroupKey:
    name = _object_name(where, "spec.workloadRef.name", ref.get("name"))
    pod_group = _object_name(where, "spec.workloadRef.podGroup", ref.get("podGroup"))
    replica = ref.get("podGroupReplicaKey") or ""
    if replica and not (isinstance(replica, str) and len(replica) <= 63 and _DNS_LABEL.fullmatch(replica)):
        raise GangSourceError(
            f"{where}: invalid spec.workloadRef.podGroupReplicaKey {replica!r}; accepted: {_REPLICA_KEY}"
        )
    return PodGroupKey(SOURCE_WORKLOAD, namespace, name, pod_group, str(replica))


# --- the groups their pods define ----------------------------------------------------------------------------


def label_group_definition(key: PodGroupKey, members: Sequence[Mapping[str, Any]]) -> GroupDefinition:
    """A group of ``LABEL_DEFINED_SOURCES`` from its members' Pod objects, who must agree on its size: ours
    from the label ``MIN_AVAILABLE_KEY`` (every member's count when none sets it), Kueue's from the
    annotation ``KUEUE_GROUP_TOTAL_COUNT_KEY``, which every member carries."""
    where = f"pod group {key}"
    kueue = key.source == SOURCE_KUEUE
    place, count_key = ("annotations", KUEUE_GROUP_TOTAL_COUNT_KEY) if kueue else ("labels", MIN_AVAILABLE_KEY)
    field = f"{place[:-1]} {count_key}"
    stated = [_mapping(_mapping(member.get("metadata")).get(place)).get(count_key) for member in members]
    if kueue and None in stated:
        missing = _pod_name(members[stated.index(None)])
        raise GangSourceError(f"{where}: {field} is missing on member {missing}; accepted: {_MIN_COUNT}")
    values = sorted({str(value) for value in stated if value is not None})
    if not values:
        return GroupDefinition(key, len(members))  # our labels without min-available: every member
    if len(values) > 1:
        shown = ", ".join(repr(value) for value in values)
        raise GangSourceError(f"{where}: members disagree about {field} ({shown}); accepted: one value for the group")
    text = values[0]
    if not _COUNT.fullmatch(text) or int(text) < 1:
        raise GangSourceError(f"{where}: invalid {field} {text!r}; accepted: {_MIN_COUNT}")
    return GroupDefinition(key, int(text))


# --- the group objects ---------------------------------------------------------------------------------------


def parse_scheduler_plugins_pod_group(obj: Mapping[str, Any]) -> GroupDefinition:
    """A scheduler-plugins PodGroup (``scheduling.x-k8s.io/v1alpha1``): ``spec.minMember`` (>= 1) and
    ``spec.scheduleTimeoutSeconds`` (how long reserved members wait, as coscheduling's Permit:
    ``util.GetWaitTimeDuration``)."""
    key = PodGroupKey(SOURCE_SCHEDULER_PLUGINS, *_namespaced_name(obj))
    spec = _mapping(obj.get("spec"))
    where = f"PodGroup {key.object_name} ({key.source})"
    minimum = _positive(where, "spec.minMember", spec.get("minMember"))
    timeout = spec.get("scheduleTimeoutSeconds")
    timeout_s = None if timeout is None else float(_positive(where, "spec.scheduleTimeoutSeconds", timeout))
    return GroupDefinition(key, minimum, timeout_s)


def parse_volcano_pod_group(obj: Mapping[str, Any], *, tiers: Sequence[str] = DEFAULT_VOLCANO_TIERS) -> GroupDefinition:
    """A Volcano PodGroup (``scheduling.volcano.sh/v1beta1``): ``spec.minMember`` and, when set,
    ``spec.networkTopology``: mode ``hard`` (the CRD's default) or ``soft`` and ``highestTierAllowed`` N
    become a required or preferred ``DomainConstraint`` at ``tiers[N - 1]``; a tier beyond ``tiers`` (or
    none) constrains nothing. ``highestTierName`` names the level itself."""
    key = PodGroupKey(SOURCE_VOLCANO, *_namespaced_name(obj))
    spec = _mapping(obj.get("spec"))
    where = f"PodGroup {key.object_name} ({key.source})"
    # Volcano's CRD allows minMember 0 (minimum: 0); a group of no members is no gang: each pod on its own.
    raw = spec.get("minMember", 0)
    minimum = 0 if raw == 0 and not isinstance(raw, bool) else _positive(where, "spec.minMember", raw)
    topology: tuple[DomainConstraint, ...] = ()
    network = spec.get("networkTopology")
    if network is not None:
        topology = _volcano_topology(where, _mapping(network), tiers)
    return GroupDefinition(key, max(minimum, 1), None, topology, gang=minimum > 0)


def _volcano_topology(where: str, network: Mapping[str, Any], tiers: Sequence[str]) -> tuple[DomainConstraint, ...]:
    mode = network.get("mode", "hard")
    if mode not in ("hard", "soft"):
        raise GangSourceError(f"{where}: invalid spec.networkTopology.mode {mode!r}; accepted: hard | soft")
    tier, tier_name = network.get("highestTierAllowed"), network.get("highestTierName")
    if tier is not None and tier_name is not None:
        raise GangSourceError(
            f"{where}: spec.networkTopology sets both highestTierAllowed and highestTierName; accepted: one of them"
        )
    if tier_name is not None:
        if not isinstance(tier_name, str) or not tier_name:
            raise GangSourceError(
                f"{where}: invalid spec.networkTopology.highestTierName {tier_name!r}; accepted: a level name"
            )
        return (DomainConstraint(tier_name, required=mode == "hard"),)
    if tier is None:
        return ()
    number = _positive(where, "spec.networkTopology.highestTierAllowed", tier)
    if number > len(tiers):
        return ()
    return (DomainConstraint(tiers[number - 1], required=mode == "hard"),)


def parse_native_pod_group(obj: Mapping[str, Any]) -> GroupDefinition:
    """A native PodGroup (``scheduling.k8s.io`` v1beta1 or v1alpha3, Kubernetes 1.37; v1alpha2, 1.36):
    ``spec.schedulingPolicy`` (basic, or gang with ``minCount``) and
    ``spec.schedulingConstraints.topology[].key``, each a required ``DomainConstraint`` at that node label
    key (the API allows one entry). The three versions share these fields' JSON."""
    key = PodGroupKey(SOURCE_PODGROUP, *_namespaced_name(obj))
    spec = _mapping(obj.get("spec"))
    where = f"PodGroup {key.object_name} ({key.source})"
    parent = spec.get("parentCompositePodGroupName")
    if parent is not None:
        raise GangSourceError(
            f"{where}: spec.parentCompositePodGroupName {parent!r} is set; accepted: a PodGroup of no "
            "CompositePodGroup (its all-or-nothing hierarchy is not read)"
        )
    minimum = _policy(where, "spec.schedulingPolicy", spec.get("schedulingPolicy"))
    constraints = _mapping(spec.get("schedulingConstraints"))
    topology = []
    for index, entry in enumerate(constraints.get("topology") or ()):
        level = _mapping(entry).get("key")
        if not isinstance(level, str) or not level:
            field = f"spec.schedulingConstraints.topology[{index}].key"
            raise GangSourceError(f"{where}: invalid {field} {level!r}; accepted: a node label key")
        topology.append(DomainConstraint(level, required=True))
    return GroupDefinition(key, minimum or 1, None, tuple(topology), gang=minimum is not None)


def parse_workload(obj: Mapping[str, Any]) -> dict[str, GroupDefinition]:
    """A native Workload (``scheduling.k8s.io/v1alpha1``, Kubernetes 1.35): one definition per entry of
    ``spec.podGroups`` by its name, for replica key "" (``definition_for_replica`` gives another key's)."""
    namespace, name = _namespaced_name(obj)
    where = f"Workload {namespace}/{name} ({SOURCE_WORKLOAD})"
    definitions: dict[str, GroupDefinition] = {}
    for index, entry in enumerate(_mapping(obj.get("spec")).get("podGroups") or ()):
        group = _mapping(entry)
        group_name = _object_name(where, f"spec.podGroups[{index}].name", group.get("name"))
        if group_name in definitions:
            raise GangSourceError(f"{where}: spec.podGroups names {group_name!r} twice; accepted: unique names")
        minimum = _policy(where, f"spec.podGroups[{index}].policy", group.get("policy"))
        key = PodGroupKey(SOURCE_WORKLOAD, namespace, name, group_name)
        definitions[group_name] = GroupDefinition(key, minimum or 1, None, (), gang=minimum is not None)
    return definitions


def definition_for_replica(definition: GroupDefinition, replica_key: str) -> GroupDefinition:
    """A Workload pod group's definition for one replica key: the same policy, a gang of its own."""
    key = definition.key
    replica = PodGroupKey(key.source, key.namespace, key.name, key.pod_group, replica_key)
    return GroupDefinition(replica, definition.min_member, definition.timeout_s, definition.topology, definition.gang)


# --- fields --------------------------------------------------------------------------------------------------


def _policy(where: str, field: str, raw: object) -> int | None:
    """A scheduling policy union: the gang's ``minCount``, or None for ``basic``."""
    policy = _mapping(raw)
    members = [name for name in ("basic", "gang") if policy.get(name) is not None]
    if len(members) != 1:
        shown = ", ".join(members) or "neither"
        raise GangSourceError(f"{where}: {field} sets {shown}; accepted: {_POLICY}")
    if members == ["basic"]:
        return None
    return _positive(where, f"{field}.gang.minCount", _mapping(policy["gang"]).get("minCount"))


def _positive(where: str, field: str, raw: object) -> int:
    if raw is None:
        raise GangSourceError(f"{where}: {field} is missing; accepted: {_MIN_COUNT}")
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise GangSourceError(f"{where}: invalid {field} {raw!r}; accepted: {_MIN_COUNT}")
    return raw


def _object_name(where: str, field: str, raw: object) -> str:
    if not isinstance(raw, str) or not raw:
        raise GangSourceError(f"{where}: {field} is missing; accepted: {_OBJECT_NAME}")
    if not valid_dns_subdomain(raw):
        raise GangSourceError(f"{where}: invalid {field} {raw!r}; accepted: {_OBJECT_NAME}")
    return raw


def _pod_name(pod: Mapping[str, Any]) -> str:
    namespace, name = _namespaced_name(pod)
    return f"{namespace}/{name}"


def _namespaced_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = _mapping(obj.get("metadata"))
    return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}
