"""One request's pod through the pipeline, as kube-scheduler's ``CycleState``: what is worked out once per request
and read by every plugin after that."""

from __future__ import annotations

from dataclasses import dataclass, field

from placement.core.constraints.context import PodInCluster
from placement.core.intent import PodIntent
from placement.core.pods import PendingPod
from placement.core.vocabulary import PodDemand, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import PodWithDevices

_NO_INTENT = PodIntent()


@dataclass
class CycleState:
    """The validated pod (its priority resolved), its demand and intent, and its judge over the cluster.

    Built by the pipeline's first entry of a request and used under the index lock: the judge reads the
    cluster's facts and placed pods as they are under that lock hold.
    """

    pending: PendingPod
    index: ClusterIndex
    demand: PodDemand = field(init=False)
    # None for a pod that asks nothing of its cells: the core then skips the intent's mask work (~30 ms per
    # 1,000 nodes).
    intent: PodIntent | None = field(init=False)
    # Reserve's ranking: it plans every node it tries (the PlanNode plugins), so a Filter plugin whose check is
    # that plan leaves it to the plan instead of planning every feasible node ahead.
    reserving: bool = field(default=False, init=False)
    _judge: PodInCluster | PodWithDevices | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.demand = demand_of(self.pending.pod)
        self.intent = None if self.pending.intent == _NO_INTENT else self.pending.intent

    @property
    def judge(self) -> PodInCluster | PodWithDevices:
        """The pod's kube-scheduler constraints, with its DRA claims when it has some (built once)."""
        if self._judge is None:
            self._judge = self.index.judge(self.pending)
        return self._judge

    @property
    def constraints(self) -> PodInCluster:
        judge = self.judge
        return judge.constraints if isinstance(judge, PodWithDevices) else judge

    @property
    def devices(self) -> PodWithDevices | None:
        """The claims' judge; None for a pod without ResourceClaims."""
        judge = self.judge
        return judge if isinstance(judge, PodWithDevices) else None
