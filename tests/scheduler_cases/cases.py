"""The shapes of a ported case: a Filter table row and a Score table row."""

from __future__ import annotations

from dataclasses import dataclass, field

from placement.core.constraints.constraint_types import Labels, NodeFacts, PlacedPod
from placement.core.constraints.terms import IncomingPod
from placement.core.vocabulary import Rejected, RejectionKind


@dataclass(frozen=True)
class Refused:
    """An expected refusal whose message upstream builds from Go error text: the kind and the message's
    start are compared (``parsing pod: requiredAffinityTerms: ...``)."""

    prefix: str
    kind: RejectionKind


Expected = Rejected | Refused | None


@dataclass(frozen=True)
class FilterCase:
    """One row of an upstream Filter table: the pod, the cluster, and per node what is expected.

    ``plugin`` names the reference function the Go test exercised alone (``reference.<plugin>``, or
    ``pod_refusal`` for a PreFilter verdict); ``expected`` is its answer per node; ``combined`` overrides
    the whole filter's answer for nodes where an earlier plugin answers first."""

    source: str  # file and test function
    name: str  # the upstream case name
    plugin: str
    pod: IncomingPod
    nodes: tuple[NodeFacts, ...]
    expected: dict[str, Expected]
    pods: tuple[PlacedPod, ...] = ()
    namespaces: dict[str, Labels] = field(default_factory=dict)
    combined: dict[str, Expected] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.source.rsplit(' ', 1)[-1]}: {self.name}"

    def overall(self, node: str) -> Expected:
        return self.combined[node] if node in self.combined else self.expected[node]


@dataclass(frozen=True)
class ScoreCase:
    """One row of an upstream Score table: the candidates (``nodes``, scored in order), the nodes that
    failed Filter (in the cluster, not scored), and the normalized scores upstream expects."""

    source: str
    name: str
    plugin: str  # NodeAffinity, TaintToleration, PodTopologySpread, InterPodAffinity
    pod: IncomingPod
    nodes: tuple[NodeFacts, ...]
    want: tuple[int, ...]
    pods: tuple[PlacedPod, ...] = ()
    failed: tuple[NodeFacts, ...] = ()
    namespaces: dict[str, Labels] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.source.rsplit(' ', 1)[-1]}: {self.name}"
