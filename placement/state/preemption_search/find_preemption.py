"""``find_preemption``: a lone pod's or a gang's cheapest victims (see the package's docstring)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from placement.core.domains import DEFAULT_LEVELS, TopologyLevels
from placement.core.gang_plan import Locality
from placement.core.podgroup import DomainConstraint, SpreadPolicy
from placement.core.pods import PendingPod
from placement.core.preemption_rules import DisruptionBudget
from placement.state.cluster_index import ClusterIndex
from placement.state.preemption_search.gang_victims import _preempt_for_gang
from placement.state.preemption_search.lone_pod_victims import _preempt_for_pod
from placement.state.preemption_search.victim_units import (
    NoPreemption,
    Preemption,
    TierOf,
    _candidate_rows,
    _Judge,
    _who,
)


def find_preemption(
    index: ClusterIndex,
    preemptors: Sequence[PendingPod],
    *,
    candidates: Sequence[str] | None = None,
    constraints: Sequence[DomainConstraint] = (),
    policy: SpreadPolicy = SpreadPolicy.PACKED,
    locality: Locality | None = None,
    now: float | None = None,
    victim_tier: TierOf | None = None,
    budgets: Sequence[DisruptionBudget] | None = None,
    levels: TopologyLevels = DEFAULT_LEVELS,
) -> Preemption | NoPreemption:
    """The cheapest preemption that lets ``preemptors`` (one lone pod, or a gang's pending members) be
    placed, or why there is none. Caller holds ``index.lock``. Pure decision: changes nothing.

    ``now``: wall-clock seconds, to age budgets' ``disruptedPods`` (default: the clock now). ``budgets``:
    the PodDisruptionBudgets (default: those in ``index.facts``). ``levels``: the cluster's topology levels,
    which a constraint's level names (``placement.core.domains``; the gang coordinator's).
    """
    if not preemptors:
        return NoPreemption("no preemptor was given")
    who = _who(preemptors)
    never = [p for p in preemptors if p.preempt_never]
    if never:
        return NoPreemption(f"{who} has preemptionPolicy Never: it waits for room and evicts nobody")
    judge = _Judge(
        index=index,
        priority=min(p.priority for p in preemptors),
        budgets=tuple(budgets if budgets is not None else index.facts.disruption_budgets()),
        now=time.time() if now is None else now,
        tier=victim_tier,
    )
    rows = _candidate_rows(index, preemptors, candidates)
    if rows.size == 0:
        return NoPreemption(
            f"no node can take {who} even with pods evicted: every candidate refuses it for reasons eviction "
            "cannot fix (no topology report, node selector or affinity, taints, pod constraints)"
        )
    if len(preemptors) == 1 and not constraints:
        return _preempt_for_pod(judge, preemptors[0], rows)
    return _preempt_for_gang(
        judge,
        preemptors,
        rows,
        constraints=constraints,
        policy=policy,
        locality=locality,
        levels=levels,
    )
