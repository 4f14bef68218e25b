"""GpuTopology: the exact plan on a node, as the kubelet will carry it out: the NUMA cells its Topology Manager
picks and the GPUs its device plugin hands out (NVLink- and PCIe-best, ``placement.core.gpu_sets``).

PlanNode plans every node Reserve tries with it (``placement.state.reservations.plan_on_slot``). Filter confirms a
pod whose intent restricts its cells (an affinity or an anti-affinity) with the same plan: for such an intent the
vectorised rules are necessary conditions only (some allowed cell set fits: ``feasibility._apply_intent``);
whether the kubelet's own choice of cells is among the allowed ones only the plan says. An intent that names no
cell allows every cell, so no plan is needed (it costs about 0.4 ms a node: 0.4 s over 1,000 feasible nodes,
measured). Without this a scheduler that binds on Filter's answer (kube-scheduler with the extender) would pick a
node that Reserve then refuses at bind, again at every retry, while another node might hold the pod. Reserve's own
ranking skips the confirmation: it plans each node it tries anyway, best first, and stops at the first that holds
(the binder asks Reserve about every node).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from placement.core.feasibility import FilterResult
from placement.core.vocabulary import Rejected
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import NodeDraft
from placement.service.framework.handle import Handle
from placement.service.framework.verdict_edits import refused
from placement.state.reservations import plan_on_slot


class GpuTopology:
    name = "GpuTopology"

    def __init__(self, handle: Handle) -> None:
        self._index = handle.index
        self._verdicts = handle.verdicts

    def filter(self, cycle: CycleState, verdict: FilterResult) -> FilterResult:
        intent = cycle.pending.intent
        if cycle.reserving or cycle.intent is None or not (intent.affinity_node_ids or intent.anti_affinity_node_ids):
            return verdict
        positions = np.flatnonzero(verdict.feasible)
        if not len(positions):
            return verdict
        rows = verdict.rows[positions]
        landing = self._verdicts.components(rows, cycle.demand, cycle.intent).landing_cell
        refusals = []
        for position, row, cell in zip(positions.tolist(), rows.tolist(), landing.tolist(), strict=True):
            plan = plan_on_slot(self._index, row, cycle.demand, intent, cell)
            if isinstance(plan, Rejected):
                refusals.append((position, plan))
        return refused(verdict, refusals, exact=True)

    def plan_node(self, cycle: CycleState, draft: NodeDraft) -> NodeDraft | Rejected:
        plan = plan_on_slot(self._index, draft.row, cycle.demand, cycle.pending.intent, draft.landing_cell)
        return plan if isinstance(plan, Rejected) else replace(draft, plan=plan)
