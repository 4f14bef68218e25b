"""What Kueue writes on pods, read in one place: the pod group a plain pod joins, and whether Kueue admitted it.

Kueue (sigs.k8s.io/kueue v0.19.2) admits workloads by quota; the service places their pods. Two marks matter:

* **A pod group** (Kueue's pod integration): plain pods name their group and its size themselves
  (pkg/controller/jobs/pod/constants/constants.go). The name is the annotation ``GroupNameAnnotation`` when
  set, else the label ``GroupNameLabel`` (the same key ``kueue.x-k8s.io/pod-group-name``): with the gate
  WorkloadIdentifierAnnotations (beta, on by default since v0.18) Kueue reads the annotation first
  (pkg/util/pod/pod.go ``GetPodGroupName``) and writes only the annotation itself (``SetPodGroupName``, e.g.
  for a LeaderWorkerSet's pods). The size is the annotation ``GroupTotalCountAnnotation``
  (``kueue.x-k8s.io/pod-group-total-count``), a positive integer (``strconv.Atoi``, refused below 1:
  pod_controller.go ``groupTotalCount``) that every member carries (its pod webhook's
  ``validatePodGroupMetadata`` requires it beside the name) with one value (its reconciler's
  ``(*Pod).validatePodGroupMetadata`` refuses a group whose members disagree).
* **Who evicts what**: a pod Kueue admitted is Kueue's to evict (by quota, in its ClusterQueue and cohort),
  never the service's preemption. Kueue marks its pods two ways (pkg/constants/constants.go): the label
  ``ManagedByKueueLabelKey`` = ``"true"`` on the plain pods of its pod integration (set by its pod webhook,
  pod_webhook.go ``Default``), and the label ``PodSetLabel`` on the pods of every job-framework workload,
  set from the admission when the job starts and removed when it stops (pkg/controller/jobframework/
  reconciler.go ``getPodSetsInfoFromStatus``).
"""

from __future__ import annotations

from collections.abc import Mapping

# The pod group's name: an annotation first, else a label of the same key (GroupNameAnnotation, GroupNameLabel).
KUEUE_GROUP_NAME_KEY = "kueue.x-k8s.io/pod-group-name"
# The pod group's member count, an annotation (GroupTotalCountAnnotation).
KUEUE_GROUP_TOTAL_COUNT_KEY = "kueue.x-k8s.io/pod-group-total-count"
# The label on the plain pods Kueue manages (ManagedByKueueLabelKey, ManagedByKueueLabelValue).
KUEUE_MANAGED_KEY = "kueue.x-k8s.io/managed"
KUEUE_MANAGED_VALUE = "true"
# The label on the pods of an admitted job-framework workload, naming its pod set (PodSetLabel).
KUEUE_PODSET_KEY = "kueue.x-k8s.io/podset"
# What a refusal to evict a pod Kueue admitted says.
KUEUE_EVICTS_ITS_OWN = "pods admitted by Kueue are evicted by Kueue only"


def kueue_group_name(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """The name of the Kueue pod group a pod joins, as Kueue reads it; "" for a pod in none."""
    return annotations.get(KUEUE_GROUP_NAME_KEY) or labels.get(KUEUE_GROUP_NAME_KEY) or ""


def kueue_admitted(labels: Mapping[str, str]) -> bool:
    """Kueue admitted the pod (or manages it): only Kueue evicts it."""
    return labels.get(KUEUE_MANAGED_KEY) == KUEUE_MANAGED_VALUE or KUEUE_PODSET_KEY in labels
