"""NodeResources: the node's free resources and the kubelet's admission (the Topology Manager over its CPU, memory
and device managers), and the topology score.

Filter is kube-scheduler's NodeResourcesFit and the kubelet's admission at once, vectorised over the candidates
(``placement.core.feasibility``); Score is the topology score (``placement.core.scoring``: fit, bandwidth,
distance, FGD's fragmentation, gang). Both are kept per node and pod shape while the node is unchanged
(``placement.state.decision_cache``), and both open their point: the registry lists this plugin first.
"""

from __future__ import annotations

from placement.core.feasibility import FilterResult
from placement.core.scoring import Scores, combine
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.handle import Handle
from placement.service.framework.verdict_edits import opens


class NodeResources:
    name = "NodeResources"

    def __init__(self, handle: Handle) -> None:
        self._index = handle.index
        self._verdicts = handle.verdicts

    def filter(self, cycle: CycleState, verdict: FilterResult) -> FilterResult:
        if not opens(verdict):
            raise ValueError("NodeResources opens the Filter verdict: the registry must list it first")
        return self._verdicts.filter(verdict.rows, cycle.demand, cycle.intent)

    def score(self, cycle: CycleState, scores: Scores) -> Scores:
        if scores.components:
            raise ValueError("NodeResources opens the score: the registry must list it first")
        rows = scores.rows
        return combine(self._index.arrays(), rows, self._verdicts.components(rows, cycle.demand, cycle.intent))
