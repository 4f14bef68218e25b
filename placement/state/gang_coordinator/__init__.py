"""The gang coordinator: collects pod-group members, places each group all at once, and keeps it whole.

Life of a group (``GangPhase``)::

    WaitingForMembers ── min-available members seen ──> WaitingForCapacity ── plan + reserve all ──> Reserved
          ^                                               ^      │                                  │
          │ falls below min-available before binding      │      └─ can never fit ─> Unschedulable  │ every
          └───────────────────────────────────────────────┴── permit timeout / Unreserve ───────────┤ reserved
                                                                                                     v member bound
                                                                                                   Bound

* All or nothing. A group is planned against ONE snapshot of the cluster index (``placement.core.gang_plan``)
  and reserved through ``Reservations.reserve_all`` in one step, so no group is ever half reserved. The
  plan is made on a copy of the index's arrays taken under the index lock, then checked and reserved
  under the lock: the reservation goes ahead only if none of the nodes the plan uses changed since the
  copy (else the group is planned again under the lock). A group that does not fit holds nothing, so
  two groups can never deadlock each holding part of the cluster.
* Requests are whole. ``register`` (what a PlaceGang request becomes) checks every member before it
  changes anything: namespace, group labels, duplicates, the cap on members (``GangConfig.max_members``),
  agreement with the members already known. A refused request (``GangRefused``) leaves no trace.
* Members that never appear. A member registered from a request that the pod watch has not shown
  (``observe_present``, ``observe_bound``) within ``permit_timeout_s`` of its registration is dropped,
  its reservation released; its group then waits for members again, or ends when none is left.
* Permit. Once reserved, every member may bind (``permit_status`` says ALLOW). Members not bound within
  ``permit_timeout_s`` (default 10 s) are all released together, and those members are told REJECT once,
  so the scheduler puts them back in its queue; members already bound stay (they run). Each permit
  timeout and each drop is logged (one JSON line: the group, the members, why) and counted.
* Queue. Groups that wait are tried in order: starving groups first (waiting at least
  ``starvation_after_s``, default 60 s: the age boost), oldest first; then by pod priority, higher first;
  then by group creation (first member seen), oldest first. A group behind one that does not fit may
  still be placed (backfill) unless the head of the queue is starving: then the head holds the nodes it
  would use on an emptied cluster (the ones with the most free room for it first), no other group is
  placed on them, and ``nodes_open_to_backfill`` keeps single pods off them, so nothing placed after it
  can delay its start. A group that cannot fit even an empty cluster holds nothing (``Unschedulable``).
* Bounded retries. ``tick`` tries the head of the queue, then the other groups from where the last tick
  stopped, while they fit ``GangConfig.budget`` members (each group counts ``GROUP_PLAN_COST`` more for
  its node filter and scores): at most two groups at the cap a tick. A group whose last try failed is
  not planned again until the cluster, its members or the hold changed; whether a group could ever fit
  is decided once per group and set of nodes; a failed plan slower than ``GangConfig.slow_plan_s`` is not tried
  again for ``RETRY_COST_FACTOR`` times its duration, unless the group changes (kube-scheduler backs
  unschedulable pods off for the same reason). Planning never holds the index lock, and gives up the
  interpreter every ``YIELD_EVERY_S`` so that the event loop's calls do not wait on it.
* Churn. A member deleted (or failed) after placement releases exactly its own reservation; a group that
  falls below min-available before it is bound is released entirely; members added to a placed or bound
  group are planned next to the members already there, which never move.
* Topology. A group may require every member in one domain of a topology level, or prefer the fewest
  (its members' labels, or the group object's constraints, which win; ``placement.core.domains``). Every
  plan, the emptied-cluster verdict and the member-by-member fallback keep to it; configured levels'
  domains come from ``observe_node``, a node label key used as a level from the scheduling facts.

Every method takes the index lock (one lock for the index, the reservations and the coordinator: no
lock order to get wrong); planning runs between two holds of it. ``observe_bound`` and
``observe_deleted`` forward to ``Reservations``; calling ``Reservations.observe_pod`` /
``observe_pod_deleted`` for the same pod as well is harmless.

The coordinator is one object whose roles are its bases, each in a module of its own, each calling only the
roles below it: ``gang_records`` (the state), ``status``, ``timeouts``, ``membership`` and ``planning``, ``queue``;
``coordinator`` puts them together.
"""

from __future__ import annotations

from placement.state.gang_coordinator.coordinator import GangCoordinator
from placement.state.gang_coordinator.gang_records import (
    DEFAULT_MAX_MEMBERS,
    DEFAULT_PERMIT_TIMEOUT_S,
    DEFAULT_RACK_KEY,
    DEFAULT_ZONE_KEY,
    GROUP_PLAN_COST,
    GangConfig,
    GangPhase,
    GangPlacement,
    GangRefused,
    GangStatus,
    PermitStatus,
)

__all__ = [
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_PERMIT_TIMEOUT_S",
    "DEFAULT_RACK_KEY",
    "DEFAULT_ZONE_KEY",
    "GROUP_PLAN_COST",
    "GangConfig",
    "GangCoordinator",
    "GangPhase",
    "GangPlacement",
    "GangRefused",
    "GangStatus",
    "PermitStatus",
]
