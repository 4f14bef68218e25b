"""Preemption: when a pod or a gang fits nowhere, the cheapest set of lower-priority victims whose eviction
lets the exact plan succeed, simulated before anything is evicted (docs/preemption.md).

``find_preemption`` decides and changes nothing; the caller holds ``index.lock``, evicts the victims
(Eviction API), nominates the preemptors (``Nominations``) and says who preempted whom.

* **Eligibility** (``PodEligibleToPreemptOthers``): a preemptor with ``preemptionPolicy: Never`` evicts
  nobody. Victims have a priority strictly lower than the preemptor's (a gang's: its lowest member's).
* **Units**: a pod of a pod group is evicted with every placed member of its group (``group_of``), on
  whatever node they run, never half a gang; the room they free elsewhere is the preemptor's too. A pod
  whose group holds any member of priority >= the preemptor's is not a victim at all. Only bound pods are
  victims: a reservation not yet bound is in flight, the Eviction API cannot evict it.
* **Candidates**: nodes the preemptor's constraints refuse for reasons eviction cannot fix (no topology
  report, its node name, selector or affinity, taints, cordon, readiness; and, a difference from
  upstream, pod constraints such as inter-pod anti-affinity, which upstream re-judges with the victims
  removed) are skipped. A cheap bound orders the rest: the lowest priority whose units, all gone, let the
  node-level requests fit; nodes are then judged exactly in that order until enough candidates are found
  (``candidate_count``: 10% of the nodes, at least 100, as upstream) or no later node can beat the best.
* **Exactness**: each candidate is judged on the node's arrays recomputed without the victims
  (``ClusterIndex.arrays_without``), through the same admission the placement uses: the vectorised filter
  (resources, the pod's NUMA intent), then the kubelet's Topology Manager model and the device plugin's GPU
  choice (``plan_on_node``) for a lone pod, the gang planner (``plan_gang``) for a gang. A node where even
  every lower-priority unit gone leaves the kubelet refusing takes no victims.
* **Reprieve and budgets**: ``placement.core.preemption_rules.reprieve``; a candidate whose victims would break a
  PodDisruptionBudget is not chosen at all (upstream only prefers fewer violations; the Eviction API we
  evict through refuses such an eviction).
* **Choice**: ``CandidateKey``: the lowest highest victim priority, the smallest priority sum, the fewest
  victims, the least topology damage (GPUs freed the preemptor leaves unused), the lowest tenant tier
  among the victims (``victim_tier``), then the node names.

* **DRA** (``state.eviction_devices``): a preemptor's claims are judged after the kubelet's admission,
  with the devices the victims on the node free (a claim whose every consumer is a victim): those
  allocated already keep the pod to their nodes, the others must fit by the best fit Reserve uses; for a
  lone pod the reprieve also keeps the devices' links and NUMA alignment as good as with every victim
  gone. A gang's members compete for a node's devices: a node counts a member only where its claims fit
  after those of the members before it there, and the confirmed plan is checked the same way, member by
  member in plan order, as ``gang_rules.allocate_members`` will hold them.

The search is one module per part: ``victim_units`` (what is weighed: victim units, budgets, candidate order, the
words of the answers), ``lone_pod_victims`` and ``gang_victims`` (the two searches), ``find_preemption`` (which
picks one).
"""

from __future__ import annotations

from placement.state.preemption_search.find_preemption import find_preemption
from placement.state.preemption_search.victim_units import NoPreemption, Preemption, TierOf, Victim

__all__ = ["NoPreemption", "Preemption", "TierOf", "Victim", "find_preemption"]
