"""The API paths both programs read or write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NODES_PATH = "/api/v1/nodes"
PODS_PATH = "/api/v1/pods"

# What the placement service reads besides, for the constraints kube-scheduler honours: namespaces' labels
# (pod affinity's namespace selectors), priority classes (a pod's priorityClassName), and claims with their
# volumes and classes (a volume's node affinity, binding on first consumer).
NAMESPACES_PATH = "/api/v1/namespaces"
PRIORITY_CLASSES_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
PERSISTENT_VOLUME_CLAIMS_PATH = "/api/v1/persistentvolumeclaims"
PERSISTENT_VOLUMES_PATH = "/api/v1/persistentvolumes"
STORAGE_CLASSES_PATH = "/apis/storage.k8s.io/v1/storageclasses"
# What preemption may not break: the budgets the Eviction API enforces.
POD_DISRUPTION_BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"

# NodeResourceTopology: the agent writes one per node, the placement service watches them.
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
NRTS_PATH = f"/apis/{NRT_GROUP}/{NRT_VERSION}/{NRT_PLURAL}"

# Dynamic Resource Allocation: the group's discovery document says which versions are served; the service
# reads the first of DRA_VERSIONS that is (v1 is GA since Kubernetes 1.34).
DRA_GROUP = "resource.k8s.io"
DRA_GROUP_PATH = f"/apis/{DRA_GROUP}"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")


def served_dra_version(group: Mapping[str, Any] | None) -> str | None:
    """The first of DRA_VERSIONS the group's discovery document (``GET DRA_GROUP_PATH``) lists; None when it
    lists none of them or the group is not served. The one reading of it: the service's feed and the binder's
    claim writer agree on the version."""
    if group is None:
        return None
    served = {str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, Mapping)}
    return next((version for version in DRA_VERSIONS if version in served), None)


def dra_path(version: str, plural: str) -> str:
    """``/apis/resource.k8s.io/<version>/<plural>``: every namespace's objects for a namespaced kind."""
    return f"{DRA_GROUP_PATH}/{version}/{plural}"


# Pod groups: the APIs whose objects define gangs (``placement.core.gang_sources``). Each group's discovery
# document says whether the version is served; the binder reads the served ones and writes their status.
SCHEDULING_GROUP = "scheduling.k8s.io"  # v1alpha1 Workload (1.35), v1alpha2 PodGroup (1.36)
SCHEDULER_PLUGINS_GROUP = "scheduling.x-k8s.io"  # scheduler-plugins' PodGroup CRD
VOLCANO_GROUP = "scheduling.volcano.sh"  # Volcano's PodGroup CRD


def api_group_path(group: str) -> str:
    """``/apis/<group>``: the group's discovery document (404 when the cluster serves none of it)."""
    return f"/apis/{group}"


def object_path(collection: str, namespace: str, name: str, subresource: str = "") -> str:
    """One namespaced object of ``collection`` (``collection_path``), or its ``subresource`` (``status``)."""
    group_version, plural = collection.rsplit("/", 1)
    path = f"{group_version}/namespaces/{namespace}/{plural}/{name}"
    return f"{path}/{subresource}" if subresource else path


def collection_path(group: str, version: str, plural: str) -> str:
    """Every namespace's objects of a namespaced kind of ``group/version``."""
    return f"/apis/{group}/{version}/{plural}"
