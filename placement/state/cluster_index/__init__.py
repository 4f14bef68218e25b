"""The cluster index: every node's NUMA resources as numpy arrays, fed incrementally by watches.

One slot per node; slots of removed nodes are reused. Per slot the index keeps what decisions read
(``NodeArrays``: [resources, nodes, cells] totals and free amounts, node-level allocatable and free,
kubelet policy codes, NUMA ids) plus what scoring reads (SLIT distances, HMAT bandwidth) and, outside
the arrays, a small Python record: the report's pods fingerprint, the pods we know on the node and a
shared reference to the node's GPU link table (interned: nodes of one machine type share one table).
No ``NodeTopology`` is kept per node. What kube-scheduler's constraint plugins read (labels, taints,
cordon, readiness, placed pods, claims) is in ``facts`` (``state.scheduling_facts``), which the index
tells when a slot is taken, freed or the slots grow.

How free capacity is derived, so that stale agent data never makes us over-commit:

* ``cell_free = reported available - charges of the pods the report does not account for``. A report
  accounts for the bound pods when its pods fingerprint equals the fingerprint of the bound pods we know
  (either fingerprint method); a pod stays accounted until it is removed. Pods reserved but not bound,
  and pods bound after the report, are charged on top of it.
* A charge lands on the pod's cells when we know them (our annotations or our reservation). A pod
  whose cells are unknown, or spread over several cells in amounts the kubelet chooses, is charged in
  full on every candidate cell: pessimistic, and only until a report accounts for it.
* ``node_free = allocatable - requests of every pod we know``: allocatable never accounts for pods.
* A pod bound to, or reserved on, a node without a slot (its report has not arrived yet: the pod list
  often lands before the node's after a restart; or its report was removed) is kept by node name and
  charged when a report gives the node a slot, as ``facts`` keeps its placed pods until ``attach``.
  Dropping it would leave the node looking emptier than it is, and the next decision double-booking it.
* ``memory_group``: on a Static memory manager node, the NUMA groups the kubelet's memory manager holds
  for the Guaranteed pods we know whose cells we know (``feasibility.memory_groups``), whether or not a
  report accounts for them: no report carries them. Pods placed by others cannot be modelled.

Every public method takes ``lock``; a caller that reads ``arrays()`` and decides on them (``decide``)
holds the lock for the whole decision, so no other decision or update interleaves.

The index is one object whose roles are its bases, each in a module of its own, each calling only the roles
below it: ``index_records`` (the arrays and slots), ``free_amounts``, ``pod_charges``, ``reports``, ``node_views``;
``index`` puts them together.
"""

from __future__ import annotations

from placement.state.cluster_index.index import ClusterIndex
from placement.state.cluster_index.index_records import (
    DEFAULT_GPU_COLUMNS,
    GpuShape,
)

__all__ = [
    "DEFAULT_GPU_COLUMNS",
    "ClusterIndex",
    "GpuShape",
]
