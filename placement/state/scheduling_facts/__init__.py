"""What kube-scheduler's constraint plugins read of the cluster besides resources, in step with the index's slots.

``SchedulingFacts`` is the ``ClusterView`` (``placement.core.constraints.view``) over the live index; the
``ClusterIndex`` keeps one (``index.facts``) and tells it when a slot is taken, freed or the slots grow.

* **Nodes.** ``NodeFacts`` (labels, taints, cordon: the Node watch) are kept by node name,
  whether or not the node has a slot: a Node object often arrives before its topology report, and a node
  without an agent never gets one. When the index gives the node a slot (``attach``), its facts are
  written into that slot's columns; when the index frees the slot (``detach``), they are cleared there and
  kept by name. A slot whose Node object has not been seen (or is gone) holds the model's defaults (no
  labels, no taints, schedulable): what every node was before the constraints existed.
* **Label columns** are made the first time a key is read (``label_column``) and then kept in step slot
  by slot: one column per key the plugins ask about, not per key the nodes carry (a key on one node
  would cost a column for every slot). A key no slot carries answers a shared read-only column of -1
  and allocates nothing. Codes stay stable while a column lives; a column whose dead values outnumber its
  live ones is dropped and made again on its next read.
* **Taints**: the distinct taints of the slotted nodes and a [slots, taints] presence matrix; a taint no
  slot carries any more gives its column to the last one, so the matrix stays dense.
* **Placed pods** (bound, or reserved by the binder) are kept by key, whatever their node. ``placed_pods``
  answers those on slotted nodes from a dense list and slot array kept incrementally, so a read copies
  nothing. A pod on a node without a slot counts once the node gets one: the service places nothing on
  such a node, and no plugin can read that node's labels to put it in a topology domain (upstream counts
  it: a known difference, see ``placed_pods``).
* **Namespaces** (labels), **PriorityClasses** (value, global default), **claims** (PersistentVolumeClaims
  with their PersistentVolumes and StorageClasses), **PodDisruptionBudgets** (what preemption may not
  break: ``placement.core.preemption_rules.DisruptionBudget``).

Memory: the nodes' label pairs and taints and the pods' label sets are pooled (one instance each, shared
by every node or pod that carries it; the pods of one template carry one set). Measured with 10,000 nodes
(10 labels, 3 taints each) and 100,000 placed pods (4 labels, 2,000 templates): about 10 MB for the nodes,
40 MB for the pods, 3 MB of arrays.

Versions: ``labels_version`` bumps when a slot's facts change (its node's labels, taints or cordon,
or the slot taken or freed); ``pods_version`` when the placed pods answered change (a pod
added, changed or removed, or brought in or out with its node's slot) and when a namespace's labels
change (pod affinity terms select namespaces by label). A write that changes nothing bumps nothing:
a Node status heartbeat costs one comparison.

Every method takes the index's lock (re-entrant). Arrays and sequences returned are the live ones: read
them under the lock, copy what you keep.

The facts are one object whose roles are its bases, each in a module of its own: ``facts_records`` (the
columns), ``cluster_objects``, ``node_labels``, ``placed_pods``; ``facts`` puts them together.
"""

from __future__ import annotations

from placement.state.scheduling_facts.facts import SchedulingFacts
from placement.state.scheduling_facts.facts_records import (
    ABSENT,
    ClaimSource,
    PodKey,
)

__all__ = [
    "ABSENT",
    "ClaimSource",
    "PodKey",
    "SchedulingFacts",
]
