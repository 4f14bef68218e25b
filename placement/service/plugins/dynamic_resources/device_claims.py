"""DynamicResources: a pod's ResourceClaims (DRA), as kube-scheduler's DynamicResources plugin judges them, with
the device choice scored for NVLink connectivity and NUMA alignment (``placement.state.dra_verdicts``).

Filter refuses a node where a claim allocated already cannot be used, or where the unallocated claims find no
devices (the allocator's port, judged against ``k8s.io/dynamic-resource-allocation/structured`` by the DRA
oracle). Score adds the best device set's points. PlanNode chooses the devices on each node Reserve tries, after
GpuTopology planned it, preferring the one NUMA cell the plan puts the pod in (``dra_verdicts.choose_devices``);
the reservation holds them until the claims show them allocated. A pod without claims is not this plugin's: it
passes as it came.
"""

from __future__ import annotations

from dataclasses import replace

from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores
from placement.core.vocabulary import Rejected
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import NodeDraft
from placement.service.framework.handle import Handle
from placement.state.dra_verdicts import choose_devices


class DynamicResources:
    name = "DynamicResources"

    def __init__(self, handle: Handle) -> None:
        del handle  # the claims' judge is the cycle's (``CycleState.devices``)

    def filter(self, cycle: CycleState, verdict: FilterResult) -> FilterResult:
        devices = cycle.devices
        return verdict if devices is None else devices.claims_filtered(verdict)

    def score(self, cycle: CycleState, scores: Scores) -> Scores:
        devices = cycle.devices
        return scores if devices is None else devices.devices_scored(scores)

    def plan_node(self, cycle: CycleState, draft: NodeDraft) -> NodeDraft | Rejected:
        if cycle.devices is None:
            return draft
        if draft.plan is None:
            raise ValueError("DynamicResources chooses devices on a planned node: the registry lists GpuTopology first")
        devices = choose_devices(cycle.devices, draft.plan)
        return devices if isinstance(devices, Rejected) else replace(draft, devices=devices)
