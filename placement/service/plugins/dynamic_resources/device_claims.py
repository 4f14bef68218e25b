"""DynamicResources: a pod's ResourceClaims (DRA), as kube-scheduler's DynamicResources plugin judges them, with
the device choice scored for NVLink connectivity and NUMA alignment (``placement.state.dra_verdicts``).

Filter refuses a node where a claim allocated already cannot be used, or where the unallocated claims find no
devices (the allocator's port, judged against ``k8s.io/dynamic-resource-allocation/structured`` by the DRA
oracle). Score adds the best device set's points. Reserve chooses the devices on the node it plans, preferring
the one NUMA cell the plan puts the pod in (``dra_verdicts.choose_devices``), and holds them until the claims show
them allocated. A pod without claims is not this plugin's: it passes as it came.
"""

from __future__ import annotations

from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.handle import Handle


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
