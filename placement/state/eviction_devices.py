"""A pod's DRA claims on a node once some pods are evicted from it: the device half of preemption's exact
check (``state.preemption``) and of ``CheckEviction`` (``state.eviction_check``); docs/preemption.md, "DRA".

kube-scheduler's released DynamicResources plugin has no ``PreFilterExtensions`` (no ``RemovePod``), so its
preemption dry run never frees a victim's devices (kubernetes/enhancements#5690, KEP-5690, proposes it).
Here, as that proposal does:

* **What the victims free** (``DraState.freed_by``): an allocated claim's devices, when every consumer in
  its ``status.reservedFor`` is a victim on the node judged (a claim shared with a pod that stays keeps its
  devices) and it is reserved for a victim or controlled by one (a claim made from a victim's template is
  deleted with it); and the devices held for a victim's reservation.
* **The preemptor's claims**: those allocated already stay where they are: the node must be one their
  ``status.allocation.nodeSelector`` selects (``PodWithDevices.allocated_here``), as Filter says. The others
  must be allocatable on the node with the freed devices free, by the allocator Reserve uses: best fit,
  preferring the one NUMA cell the kubelet's plan puts the pod in (``dra_verdicts.choose_devices``), so the
  preemption promises what Reserve will do once the victims' claims are deallocated.
* **A gang's members** (``taken_again``): members planned on one node compete for its devices, as
  ``gang_rules.allocate_members`` holds them one after the other: each is judged with the devices chosen
  for the members before it taken again, freed or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.core.constraints.context import PodInCluster
from placement.core.decision import NodePlan
from placement.core.dra.best_fit import BestFit
from placement.core.dra.first_fit import Unallocatable
from placement.core.dra.pod_claims import ClaimsUnusable, PodClaims
from placement.core.dra.pools import DeviceRef
from placement.core.vocabulary import Rejected, RejectionKind
from placement.state.cluster_index import ClusterIndex
from placement.state.dra_verdicts import NOT_ON_NODE, PodWithDevices, unallocatable

Key = tuple[str, str]


@dataclass(frozen=True)
class ClaimsAfterEviction:
    """A pod's claims as the cache holds them, judged on nodes with victims gone."""

    judge: PodWithDevices
    claims: PodClaims

    @classmethod
    def of(cls, judge: PodInCluster | PodWithDevices) -> ClaimsAfterEviction | Rejected | None:
        """The claims of the pod ``judge`` judges (None: it has none; ``ClusterIndex.judge``), or why they
        cannot be used anywhere (upstream's words)."""
        if not isinstance(judge, PodWithDevices):
            return None
        try:
            return cls(judge, judge.claims())
        except ClaimsUnusable as error:
            return Rejected(str(error), RejectionKind.NODE_CONSTRAINT)

    def allocated_names(self) -> str:
        return ", ".join(f"{c.namespace}/{c.name}" for c in self.claims.allocated)

    def usable_on(self, slot: int) -> bool:
        """Whether the claims allocated already can be used on the node at ``slot`` (eviction moves none)."""
        return self.judge.allocated_here(slot, self.claims)

    def fit(
        self,
        index: ClusterIndex,
        slot: int,
        plan: NodePlan,
        gone: frozenset[Key],
        *,
        taken_again: frozenset[DeviceRef] = frozenset(),
    ) -> BestFit | Rejected | None:
        """Best fit of the unallocated claims on ``slot`` with the devices the pods ``gone`` free (None: none
        to allocate), preferring the NUMA cell of ``plan``; or why they do not fit even then. A gang's
        member is judged with the devices chosen for the members before it on the node ``taken_again``."""
        if not self.usable_on(slot):
            return NOT_ON_NODE
        unallocated = self.claims.unallocated
        if not unallocated:
            return None
        victims = {}
        for key in gone:
            placed = index.facts.pod(*key)
            victims[key] = "" if placed is None else placed.uid
        freed = index.dra.freed_by(victims)
        node = index.name_of(slot) or ""
        preferred = plan.cells[0] if len(plan.cells) == 1 else None
        labels = self.judge.node_labels(node)
        fit = self.judge.choices.best_fit(node, labels, unallocated, preferred, freed=freed, taken_again=taken_again)
        return unallocatable(fit) if isinstance(fit, Unallocatable) else fit


def chosen_devices(fit: BestFit) -> frozenset[DeviceRef]:
    """The devices best fit chose for the claims: taken for the gang members judged after."""
    return frozenset(chosen.device.ref for claim in fit.allocation.claims for chosen in claim.devices)
