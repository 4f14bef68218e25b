"""Every pod annotation and label the placement service and its shim read or write, with their value formats.

What users write on their pods::

    numa.scheduling.kubenexus.io/policy, .../resources, scheduling.kubenexus.io/numa-affinity-node-id,
    scheduling.kubenexus.io/numa-anti-affinity-node-id       the NUMA intent (``placement.core.intent``)
    pod-group.scheduling.kubenexus.io/name, .../min-available, scheduling.x-k8s.io/pod-group,
    scheduling.kubenexus.io/gang-numa-spread                 gang membership (``placement.core.podgroup``)
    pod-group.scheduling.kubenexus.io/required-topology,
    .../preferred-topology                                   where the members land together: a topology
                                                             level's name (``placement.core.domains``)
    gpu.scheduling.kubenexus.io/min-memory, .../models       what the pod's GPUs must be
                                                             (``placement.core.gpu_annotations``)

What the service and the shim write::

    numa.scheduling.kubenexus.io/assigned-numa-nodes, .../assigned-gpus   where a placed pod sits
    scheduling.kubenexus.io/reserved-node     the binder's reservation, written before it binds
    placement.kubenexus.io/leader             the label of the leader replica's own Pod

Standard library only: the shim, a process of its own, imports this and nothing else of the service.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

POLICY_KEY = "numa.scheduling.kubenexus.io/policy"
RESOURCES_KEY = "numa.scheduling.kubenexus.io/resources"
AFFINITY_KEY = "scheduling.kubenexus.io/numa-affinity-node-id"
ANTI_AFFINITY_KEY = "scheduling.kubenexus.io/numa-anti-affinity-node-id"

# What a pod asks of its node's GPUs: the memory of each GPU at least (a quantity), and the GPU models it
# accepts (GPU Feature Discovery product names, comma-separated). Their own prefix: they are about GPUs,
# not NUMA, and nothing here places pods by a GPU's memory or model besides them.
GPU_MIN_MEMORY_KEY = "gpu.scheduling.kubenexus.io/min-memory"
GPU_MODELS_KEY = "gpu.scheduling.kubenexus.io/models"

GROUP_NAME_KEY = "pod-group.scheduling.kubenexus.io/name"
MIN_AVAILABLE_KEY = "pod-group.scheduling.kubenexus.io/min-available"
SCHEDULER_PLUGINS_KEY = "scheduling.x-k8s.io/pod-group"
SPREAD_KEY = "scheduling.kubenexus.io/gang-numa-spread"
# Every member in one domain of the named topology level (or wait), or in the fewest of them; the values
# are level names: DEFAULT_TOPOLOGY_LEVELS unless ``serve --topology-levels`` configures others.
REQUIRED_TOPOLOGY_KEY = "pod-group.scheduling.kubenexus.io/required-topology"
PREFERRED_TOPOLOGY_KEY = "pod-group.scheduling.kubenexus.io/preferred-topology"
DEFAULT_TOPOLOGY_LEVELS = ("nvlink", "rack", "block", "zone")  # nearest first

ASSIGNED_CELLS_KEY = "numa.scheduling.kubenexus.io/assigned-numa-nodes"
ASSIGNED_GPUS_KEY = "numa.scheduling.kubenexus.io/assigned-gpus"
# Written by the binder on a pod it has placed but not yet bound (value: the node name), beside the
# assigned cells / GPUs. It stays on the bound pod as a record; once ``spec.nodeName`` is set that wins.
RESERVED_NODE_KEY = "scheduling.kubenexus.io/reserved-node"
LEADER_LABEL = "placement.kubenexus.io/leader"
# The writer's name in the managed fields of every write of the service and its shim.
FIELD_MANAGER = "kubenexus-placement"


class InvalidValue(ValueError):
    """A pod label or annotation value the placement service refuses; names the key, value and accepted values."""

    def __init__(self, key: str, value: str, accepted: str, detail: str = "") -> None:
        self.key = key
        self.value = value
        self.accepted = accepted
        reason = f" ({detail})" if detail else ""
        super().__init__(f"invalid value {value!r} for {key}{reason}; accepted: {accepted}")


def format_ids(ids: Sequence[int]) -> str:
    """NUMA or GPU ids as the assigned-* annotations carry them: ascending, comma-separated."""
    return ",".join(str(i) for i in sorted(ids))


def parse_ids(key: str, text: str | None) -> tuple[int, ...]:
    """The ids of an assigned-* annotation (``format_ids``), ascending; () when absent or empty."""
    if not text:
        return ()
    try:
        return tuple(sorted({int(item) for item in text.split(",")}))
    except ValueError:
        raise InvalidValue(key, text, "a comma-separated list of ids, e.g. 0,1", "not a comma-separated list") from None


def pod_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a Pod object: how the service and the shim key what they know of a pod."""
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
