"""The preemption rules, pure: who may be evicted, which budgets an eviction breaks, which victims a
node can do without (the reprieve), and which candidate is cheapest.

A port of kube-scheduler's DefaultPreemption (docs/preemption.md cites the upstream code):

* ``reprieve`` is ``SelectVictimsOnNode`` (pkg/scheduler/framework/plugins/defaultpreemption/
  default_preemption.go): with every lower-priority unit gone the plan must hold; then the units are
  added back most important first, those whose eviction would break a budget before the others, and
  each that still lets the plan hold is kept. The rest are the victims.
* ``budget_violations`` is ``filterPodsWithPDBViolation`` (same file): budgets are counted across all
  the victims of one candidate, a pod already in a budget's ``disruptedPods`` is not counted again, a
  budget with an empty selector matches nothing.
* ``CandidateKey`` orders candidates as ``pickOneNodeForPreemption`` (pkg/scheduler/framework/
  preemption/preemption.go) does after its PDB criterion, which is not needed here: a candidate that
  breaks a budget is never chosen (the Eviction API would refuse it with 429), so every candidate has
  zero violations.

A *unit* is what is evicted as one: a lone pod, or every placed member of a pod group (never half a
gang). Its priority is the highest of its members'.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from placement.core.constraints.constraint_types import Labels
from placement.core.constraints.selectors import Selector
from placement.core.vocabulary import Rejected

# ``pickOneNodeForPreemption`` sums priorities shifted by MaxInt32 + 1, so every term is positive and a
# candidate with more victims never sums lower only because their priorities are negative.
_PRIORITY_SHIFT = 2**31
# The disruption controller forgets a pod in ``disruptedPods`` it has not seen deleted after this long
# (DeletionTimeout in pkg/controller/disruption/disruption.go) and counts it against the budget again.
DISRUPTED_POD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DisruptionBudget:
    """What preemption reads of a PodDisruptionBudget (policy/v1)."""

    namespace: str
    name: str
    selector: Selector  # spec.selector; an empty one matches nothing here (see the module docstring)
    disruptions_allowed: int  # status.disruptionsAllowed
    disrupted_pods: Mapping[str, float] = field(default_factory=dict)  # status.disruptedPods: name -> epoch s

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the budget covers a pod (``filterPodsWithPDBViolation``'s match)."""
        if namespace != self.namespace or not labels or self.selector.is_everything:
            return False
        return self.selector.matches(labels)

    def already_disrupted(self, name: str, now: float) -> bool:
        """The API server already counted the pod's eviction (and the controller has not given up on it)."""
        at = self.disrupted_pods.get(name)
        return at is not None and now - at < DISRUPTED_POD_TIMEOUT_S


@dataclass(frozen=True)
class UnitPod:
    """One pod of a unit: where it runs and what the budgets read of it."""

    key: tuple[str, str]
    node: str
    priority: int
    labels: Labels
    gpus: int  # whole GPUs it holds (topology damage counts the GPUs freed and left unused)


@dataclass(frozen=True)
class Unit:
    """What is evicted as one: a lone pod (``group`` "") or every placed member of a pod group."""

    group: str
    pods: tuple[UnitPod, ...]

    @property
    def priority(self) -> int:
        return max(pod.priority for pod in self.pods)

    @property
    def name(self) -> str:
        """For people: the group, or the lone pod's namespace/name."""
        return self.group or "/".join(self.pods[0].key)

    def pod_keys(self) -> tuple[tuple[str, str], ...]:
        return tuple(pod.key for pod in self.pods)


def more_important_first(units: Sequence[Unit]) -> list[Unit]:
    """``MoreImportantPod``'s order: higher priority first; then larger units (a gang before a pod of its
    priority: keeping it spares more), then by name, where upstream compares start times we do not read."""
    return sorted(units, key=lambda unit: (-unit.priority, -len(unit.pods), unit.name))


def budget_violations(units: Sequence[Unit], budgets: Sequence[DisruptionBudget], now: float) -> list[bool]:
    """For each unit, in order, whether evicting it together with the units before it breaks a budget
    (``filterPodsWithPDBViolation``, over every pod of each unit)."""
    allowed = [budget.disruptions_allowed for budget in budgets]
    violating = []
    for unit in units:
        broken = False
        for pod in unit.pods:
            labels = dict(pod.labels)
            for position, budget in enumerate(budgets):
                if not budget.matches(pod.key[0], labels) or budget.already_disrupted(pod.key[1], now):
                    continue
                allowed[position] -= 1
                broken = broken or allowed[position] < 0
        violating.append(broken)
    return violating


def broken_budget(
    units: Sequence[Unit], budgets: Sequence[DisruptionBudget], now: float
) -> tuple[DisruptionBudget, int] | None:
    """The first budget that evicting every unit of ``units`` breaks, with how many of its pods they hold."""
    for budget in budgets:
        covered = sum(
            1
            for unit in units
            for pod in unit.pods
            if budget.matches(pod.key[0], dict(pod.labels)) and not budget.already_disrupted(pod.key[1], now)
        )
        if covered > budget.disruptions_allowed:
            return budget, covered
    return None


def reprieve(
    units: Sequence[Unit],
    fits: Callable[[frozenset[tuple[str, str]]], bool],
    budgets: Sequence[DisruptionBudget],
    now: float,
) -> list[Unit] | None:
    """``SelectVictimsOnNode``: the victims among ``units`` (all of lower priority), or None when the
    plan fails even with every one of them gone. ``fits(evicted)``: the plan holds with those pods gone."""
    everything = frozenset(key for unit in units for key in unit.pod_keys())
    if not fits(everything):
        return None
    ordered = more_important_first(units)
    violating = budget_violations(ordered, budgets, now)
    # Reprieve the units whose eviction would break a budget first, as upstream does.
    attempts = [u for u, v in zip(ordered, violating, strict=True) if v]
    attempts += [u for u, v in zip(ordered, violating, strict=True) if not v]
    evicted = set(everything)
    victims = []
    for unit in attempts:
        kept = evicted.difference(unit.pod_keys())
        if fits(frozenset(kept)):
            evicted = kept
        else:
            victims.append(unit)
    return victims


@dataclass(frozen=True, order=True)
class CandidateKey:
    """How candidates compare, smaller first: ``pickOneNodeForPreemption``'s criteria, then ours."""

    highest_priority: int  # the highest priority among the victims
    priority_sum: int  # the victims' priorities summed, each shifted to be positive
    victims: int  # pods evicted
    damage: int  # GPUs freed that the preemptor does not use: fragmentation it leaves others
    tier: int  # the highest tenant tier among the victims (``victim_tier``); 0 without tiers
    where: tuple[str, ...]  # the nodes, sorted: the last tie-break

    @classmethod
    def of(
        cls,
        victims: Sequence[Unit],
        *,
        gpus_used: int,
        where: Sequence[str],
        tier: Callable[[UnitPod], int] | None = None,
    ) -> CandidateKey:
        pods = [pod for unit in victims for pod in unit.pods]
        freed = sum(pod.gpus for pod in pods)
        return cls(
            highest_priority=max((pod.priority for pod in pods), default=-_PRIORITY_SHIFT),
            priority_sum=sum(pod.priority + _PRIORITY_SHIFT for pod in pods),
            victims=len(pods),
            damage=max(freed - gpus_used, 0),
            tier=max((tier(pod) for pod in pods), default=0) if tier is not None else 0,
            where=tuple(sorted(where)),
        )


def candidate_count(nodes: int, *, percentage: int = 10, minimum: int = 100) -> int:
    """How many candidates to find before choosing (``calculateNumCandidates`` with DefaultPreemption's
    MinCandidateNodesPercentage 10 and MinCandidateNodesAbsolute 100)."""
    count = nodes * percentage // 100
    return min(max(count, minimum), nodes)


@dataclass(frozen=True)
class EvictionCandidate:
    """One node and the pods that would be evicted from it."""

    node: str
    victims: tuple[tuple[str, str], ...] = ()  # (namespace, name)
    victim_uids: tuple[str, ...] = ()  # metadata.uid


@dataclass(frozen=True)
class EvictionVerdict:
    """Whether the pod fits ``node`` once the candidate's victims are gone; ``refusal`` says why not."""

    node: str
    refusal: Rejected | None  # None: it fits

    @property
    def fits(self) -> bool:
        return self.refusal is None
