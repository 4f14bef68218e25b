"""WorkloadPolicies: what the cluster's workload policies ask beyond kube-scheduler's plugins.

Score adds the policies' components (``placement.core.workload_policies``, configured with ``serve --policies``:
workload-aware packing, tenant hardware tiers) after kube-scheduler's. Reserve decides a driver (a Spark driver,
a Ray head) together with room held for its executors, and an executor into its application's held room
(``placement.state.driver_reservations``); any other pod is left to the assume cache. The tick releases the
room of drivers gone.
"""

from __future__ import annotations

from placement.core.annotations import InvalidValue
from placement.core.scoring import Scores
from placement.service.errors import InvalidRequest
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import ReserveAttempt
from placement.service.framework.handle import Handle


class WorkloadPolicies:
    name = "WorkloadPolicies"

    def __init__(self, handle: Handle) -> None:
        self._drivers = handle.drivers

    def score(self, cycle: CycleState, scores: Scores) -> Scores:
        return cycle.constraints.policy_scored(scores)

    def reserve(self, cycle: CycleState, attempt: ReserveAttempt) -> None:
        if self._drivers is None:
            return
        pending = cycle.pending
        try:
            attempt.decision = self._drivers.decide_held(pending, attempt.open_nodes)
        except InvalidValue as error:
            raise InvalidRequest(f"pod {pending.namespace}/{pending.name}: {error}") from None

    def unreserve(self, namespace: str, name: str) -> bool:
        del namespace, name  # a driver's held room goes at the tick after its own reservation is released
        return False

    def tick(self, *, leading: bool) -> None:
        del leading  # any replica: a driver gone gives its executors' room back to the cluster
        if self._drivers is not None:
            self._drivers.sweep()
