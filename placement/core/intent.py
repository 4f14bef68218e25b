"""A pod's NUMA intent, read from its annotations (or labels), and how it adds to the kubelet's policy.

Keys::

    numa.scheduling.kubenexus.io/policy       best-effort | restricted | single-numa | isolated
    numa.scheduling.kubenexus.io/resources    resources that must align: cpu, memory, hugepages-<size>,
                                              <domain>/<name> (nvidia.com/gpu, ...); default: all of them
    scheduling.kubenexus.io/numa-affinity-node-id       NUMA ids the pod may use
    scheduling.kubenexus.io/numa-anti-affinity-node-id  NUMA ids the pod must not use

An annotation wins over a label of the same key. Label values cannot hold commas, so id lists may also be
written with ``_`` (``0_1``); everywhere else lists are comma-separated.

How the intent is enforced, *in addition* to the node's kubelet policy (never instead of it):

1. The kubelet's own decision comes first: a node whose kubelet would reject the pod
   (``topology_manager.admit``) is infeasible whatever the intent says.
2. The intent's policy is then applied to the same provider hints as a second, stricter merge, limited to
   the hints of the listed ``resources``: ``best-effort`` adds nothing; ``restricted`` requires the merged
   hint to be preferred; ``single-numa`` requires it to be preferred AND one NUMA cell, even when the
   kubelet runs ``none`` or ``best-effort``; ``isolated`` is ``single-numa`` plus an exclusive cell: no
   other pod placed by us may already use that cell, and none may be placed on it afterwards.
   ``PodIntent.merge_policy`` gives the Topology Manager policy that second merge runs with.
3. The affinity lists restrict which cells the merged hint may contain: every cell of the hint must be in
   ``cells_allowed(node ids)``. Ids a node lacks are ignored; an affinity list that names none of the
   node's cells leaves nothing allowed, so that node is infeasible (the pod asked for specific cells).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.core.annotations import AFFINITY_KEY, ANTI_AFFINITY_KEY, POLICY_KEY, RESOURCES_KEY, InvalidValue
from placement.core.topology_manager import TopologyPolicy

MAX_NUMA_ID = 63  # the kubelet's bitmask cannot name a higher NUMA node
_HUGEPAGES = re.compile(r"hugepages-[1-9][0-9]*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
# A qualified extended resource name: DNS-subdomain prefix, "/", then a name (validation.IsQualifiedName).
_EXTENDED = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_RESOURCES_ACCEPTED = "cpu, memory, hugepages-<size> (e.g. hugepages-1Gi), <domain>/<name> (e.g. nvidia.com/gpu)"
_IDS_ACCEPTED = f"NUMA ids 0-{MAX_NUMA_ID} separated by ',' (or '_' in a label), e.g. 0,1"


class NumaIntentPolicy(enum.StrEnum):
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA = "single-numa"
    ISOLATED = "isolated"


class IntentError(InvalidValue):
    """A NUMA intent annotation or label the placement service refuses."""


@dataclass(frozen=True)
class PodIntent:
    policy: NumaIntentPolicy | None = None  # None: the pod asks nothing beyond the kubelet's policy
    resources: tuple[str, ...] = ()  # () = every resource the kubelet aligns
    affinity_node_ids: frozenset[int] = frozenset()
    anti_affinity_node_ids: frozenset[int] = frozenset()

    @property
    def constrains(self) -> bool:
        """False for a pod that asks nothing beyond its node's kubelet policy."""
        return self.policy is not None or bool(self.affinity_node_ids or self.anti_affinity_node_ids)

    @property
    def exclusive(self) -> bool:
        return self.policy is NumaIntentPolicy.ISOLATED

    @property
    def merge_policy(self) -> TopologyPolicy | None:
        """The Topology Manager policy of the second, intent-only merge (rule 2 of the module doc)."""
        return None if self.policy is None else _MERGE_POLICY[self.policy]

    def cells_allowed(self, node_ids: Iterable[int]) -> frozenset[int]:
        """Cells of this node the merged hint may use (rule 3 of the module doc)."""
        cells = frozenset(node_ids)
        if self.affinity_node_ids:
            cells &= self.affinity_node_ids
        return cells - self.anti_affinity_node_ids


_MERGE_POLICY = {
    NumaIntentPolicy.BEST_EFFORT: TopologyPolicy.BEST_EFFORT,
    NumaIntentPolicy.RESTRICTED: TopologyPolicy.RESTRICTED,
    NumaIntentPolicy.SINGLE_NUMA: TopologyPolicy.SINGLE_NUMA_NODE,
    NumaIntentPolicy.ISOLATED: TopologyPolicy.SINGLE_NUMA_NODE,
}


def parse_pod_intent(annotations: Mapping[str, str], labels: Mapping[str, str] | None = None) -> PodIntent:
    """Read a pod's intent; raises ``IntentError`` on the first invalid value."""
    labels = labels or {}

    def raw(key: str) -> tuple[str, bool] | None:
        if key in annotations:
            return annotations[key], False
        if key in labels:
            return labels[key], True
        return None

    policy = raw(POLICY_KEY)
    resources = raw(RESOURCES_KEY)
    affinity = raw(AFFINITY_KEY)
    anti_affinity = raw(ANTI_AFFINITY_KEY)
    return PodIntent(
        policy=None if policy is None else _parse_policy(policy[0]),
        resources=() if resources is None else _parse_resources(resources[0]),
        affinity_node_ids=frozenset() if affinity is None else _parse_ids(AFFINITY_KEY, *affinity),
        anti_affinity_node_ids=frozenset() if anti_affinity is None else _parse_ids(ANTI_AFFINITY_KEY, *anti_affinity),
    )


def _parse_policy(value: str) -> NumaIntentPolicy:
    try:
        return NumaIntentPolicy(value.strip())
    except ValueError:
        raise IntentError(POLICY_KEY, value, " | ".join(p.value for p in NumaIntentPolicy)) from None


def _parse_resources(value: str) -> tuple[str, ...]:
    names: list[str] = []
    for item in value.split(","):
        name = item.strip()
        if not name:
            raise IntentError(RESOURCES_KEY, value, _RESOURCES_ACCEPTED, "empty entry")
        if name not in ("cpu", "memory") and not _HUGEPAGES.fullmatch(name) and not _EXTENDED.fullmatch(name):
            raise IntentError(RESOURCES_KEY, value, _RESOURCES_ACCEPTED, f"unknown resource {name!r}")
        if name not in names:
            names.append(name)
    return tuple(names)


def _parse_ids(key: str, value: str, from_label: bool) -> frozenset[int]:
    separators = ",_" if from_label else ","
    items = re.split(f"[{separators}]", value)
    ids: set[int] = set()
    for item in items:
        token = item.strip()
        if not token.isdigit() or not token.isascii():
            detail = "empty entry" if not token else f"{token!r} is not a NUMA id"
            raise IntentError(key, value, _IDS_ACCEPTED, detail)
        if int(token) > MAX_NUMA_ID:
            raise IntentError(key, value, _IDS_ACCEPTED, f"{token} is above {MAX_NUMA_ID}")
        ids.add(int(token))
    return frozenset(ids)
