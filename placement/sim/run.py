"""One simulation: a cluster, an arrival sequence, a policy; and the FGD paper's method over seeds.

Method (Weng et al., ATC'23, section 6): the trace's pods are inflated with random copies until their GPU
demand reaches ``MAX_ARRIVAL`` (130%) of the cluster's GPUs, shuffled with the seed, and arrive one by one,
never leaving. In the paper's setting (``numa`` False) they arrive in its artifact's order instead: the
trace's pods shuffled, then the copies in the order drawn (``arrivals``' ``copies_last``). After each
arrival the allocated GPU share is recorded; "unallocated GPUs at X% arrival" is 100 - allocated% once the
arrived demand reaches X% of capacity; "at first failure" is the same figure when allocated first falls
``FAILURE_GAP`` points behind arrived. A gang arrives whole, at its first member's place in the sequence.

Every placement a policy proposes goes through the kubelet's admission on the node's current state
(``SimCluster.admit``); a rejection is a failure of that pod (``TopologyAffinityError`` and the like),
as it would be on a real node.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from placement.core import kernel
from placement.core.gpu_sets import choose_gpu_set, score_gpu_set
from placement.core.intent import NumaIntentPolicy
from placement.core.topology_manager import TOPOLOGY_AFFINITY_ERROR
from placement.sim.cluster import Placed, SimCluster
from placement.sim.policies import Choice, Ours, Policy, make_policy
from placement.sim.trace import TraceNode, TracePod

MAX_ARRIVAL = 130  # percent of the cluster's GPU capacity
REPORT_ARRIVALS = (100, 130)
# "First failure", as the FGD authors measure it: allocated falls this many points of capacity behind
# arrived, so that one pod no node could ever hold does not count as the cluster being full.
FAILURE_GAP = 0.5
MAX_GPUS_PER_NODE = 8


def arrivals(
    pods: Sequence[TracePod], capacity_milli: float, seed: int, *, copies_last: bool = False
) -> list[list[TracePod]]:
    """The arrival sequence: groups (a gang, or one pod) in the order they arrive.

    The copies are shuffled in among the trace's pods; with ``copies_last``, as the FGD artifact orders them,
    the trace's pods are shuffled and the copies follow in the order drawn (its simulator shuffles the pods,
    ``SortClusterPods``, before ``TunePodsByNodeTotalResource`` appends the copies: pkg/simulator/core.go).
    """
    rng = random.Random(seed)
    pool = list(pods)
    if copies_last:
        rng.shuffle(pool)
    demand = sum(p.gpu_request_milli for p in pool)
    while demand < capacity_milli * MAX_ARRIVAL / 100:
        clone = rng.choice(pods)
        # A copy is a pod of its own: outside the original's gang.
        pool.append(TracePod(**{**clone.__dict__, "gang": None, "name": f"{clone.name}-copy{len(pool)}"}))
        demand += clone.gpu_request_milli
    if not copies_last:
        rng.shuffle(pool)
    groups: list[list[TracePod]] = []
    gang_group: dict[str, list[TracePod]] = {}
    for pod in pool:
        if pod.gang is None:
            groups.append([pod])
        elif pod.gang in gang_group:
            gang_group[pod.gang].append(pod)
        else:
            gang_group[pod.gang] = [pod]
            groups.append(gang_group[pod.gang])
    return groups


@dataclass
class Checkpoint:
    arrival: float  # percent of GPU capacity arrived
    allocated: float  # percent of GPU capacity allocated
    pods: int
    failed: int
    rejected: int


@dataclass
class RunResult:
    policy: str
    seed: int
    checkpoints: list[Checkpoint] = field(default_factory=list)
    pods: int = 0
    failed: int = 0
    affinity_errors: int = 0  # kubelet TopologyAffinityError
    other_rejections: int = 0  # other kubelet admission errors
    first_failure_unallocated: float | None = None
    first_failure_arrival: float | None = None
    multi_gpu: int = 0
    multi_gpu_best: int = 0
    single_numa: int = 0
    single_numa_aligned: int = 0
    gangs: int = 0
    gangs_placed: int = 0
    gangs_minimal: int = 0
    partial_gangs: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def unallocated_at(self, arrival: int) -> float:
        """100 - allocated% at the first checkpoint whose arrival reaches ``arrival`` percent."""
        for point in self.checkpoints:
            if point.arrival >= arrival:
                return 100.0 - point.allocated
        return 100.0 - self.checkpoints[-1].allocated

    def summary(self) -> dict[str, float | int | str | None]:
        latencies = sorted(self.latencies_ms)
        return {
            "policy": self.policy,
            "seed": self.seed,
            "pods": self.pods,
            "failed": self.failed,
            "unallocated_at_first_failure": self.first_failure_unallocated,
            "first_failure_arrival": self.first_failure_arrival,
            **{f"unallocated_at_{a}": self.unallocated_at(a) for a in REPORT_ARRIVALS},
            "topology_affinity_errors_per_1000": 1000 * self.affinity_errors / max(self.pods, 1),
            "other_rejections_per_1000": 1000 * self.other_rejections / max(self.pods, 1),
            "multi_gpu_best_connected": _share(self.multi_gpu_best, self.multi_gpu),
            "single_numa_aligned": _share(self.single_numa_aligned, self.single_numa),
            "gangs": self.gangs,
            "gangs_minimal_nodes": _share(self.gangs_minimal, self.gangs_placed),
            "partial_gang_holds": self.partial_gangs,
            "latency_p50_ms": _percentile(latencies, 0.5),
            "latency_p99_ms": _percentile(latencies, 0.99),
        }


def _share(part: int, whole: int) -> float | None:
    return None if whole == 0 else part / whole


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else None


def is_the_service(policy_name: str) -> bool:
    """The policy is the placement service itself (``ours``, ``ours-gang``)."""
    return policy_name in ("ours", "ours-gang")


def simulate(
    nodes: Sequence[TraceNode],
    workload: Sequence[TracePod],
    policy_name: str,
    seed: int,
    *,
    numa: bool = True,
    learned_workload: bool = False,
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """One policy, one seed: arrivals until ``MAX_ARRIVAL``% of the GPUs were asked for.

    ``numa`` False is the FGD paper's setting: no kubelet policy, no pod intents, the artifact's arrival
    order (``arrivals``' ``copies_last``). ``learned_workload``:
    ours learns its target workload from the pods it places instead of being given ``workload``'s shapes.
    """
    if not numa:
        workload = [replace(pod, intent=None) for pod in workload]
    if is_the_service(policy_name):
        kernel.enable(allow_jit=False)  # as ``serve`` runs: the kernel built ahead of time where it is, else numpy
    cluster = SimCluster(nodes, numa=numa)
    policy = make_policy(
        policy_name, cluster, random.Random(seed * 7919 + 1), workload, learned_workload=learned_workload
    )
    groups = arrivals(workload, cluster.gpu_capacity_milli, seed, copies_last=not numa)
    result = RunResult(policy=policy_name, seed=seed)
    arrived = allocated = 0.0
    capacity = cluster.gpu_capacity_milli
    next_percent = 0
    for number, group in enumerate(groups):
        placed = _place_group(cluster, policy, group, result, number=number)
        for pod, where in zip(group, placed, strict=True):
            arrived += pod.gpu_request_milli
            result.pods += 1
            if where is not None:
                allocated += pod.gpu_request_milli
            else:
                result.failed += 1
        if result.first_failure_arrival is None and 100 * (arrived - allocated) / capacity > FAILURE_GAP:
            result.first_failure_arrival = 100 * arrived / capacity
            result.first_failure_unallocated = 100 * (1 - allocated / capacity)
        while next_percent <= min(MAX_ARRIVAL, 100 * arrived / capacity):
            result.checkpoints.append(
                Checkpoint(
                    arrival=100 * arrived / capacity,
                    allocated=100 * allocated / capacity,
                    pods=result.pods,
                    failed=result.failed,
                    rejected=result.affinity_errors + result.other_rejections,
                )
            )
            next_percent += 1
        if progress is not None:
            progress(number)
        if arrived >= capacity * MAX_ARRIVAL / 100:
            break
    cluster.check()
    return result


def _place_group(
    cluster: SimCluster, policy: Policy, group: Sequence[TracePod], result: RunResult, *, number: int
) -> list[Placed | None]:
    """Place one arrival: a pod, or a gang's members (together when the policy coordinates gangs)."""
    keys = [f"p{result.seed}-{number}-{i}" for i in range(len(group))]
    gang = group[0].gang is not None
    if gang and isinstance(policy, Ours) and policy.gang_coordination:
        placed = _place_gang(cluster, policy, f"g{result.seed}-{number}", keys, group, result=result)
    else:
        placed = [_place_one(cluster, policy, key, pod, result) for key, pod in zip(keys, group, strict=True)]
    if gang:
        result.gangs += 1
        count = sum(1 for p in placed if p is not None)
        if count == len(group):
            result.gangs_placed += 1
            demand = sum(p.gpus for p in group)
            if len({p.node for p in placed if p is not None}) <= math.ceil(demand / MAX_GPUS_PER_NODE):
                result.gangs_minimal += 1
        elif count:
            result.partial_gangs += 1
    return placed


def _place_gang(
    cluster: SimCluster, policy: Ours, group: str, keys: Sequence[str], pods: Sequence[TracePod], *, result: RunResult
) -> list[Placed | None]:
    """All members or none: nothing stays held for a gang that cannot start."""
    start = time.perf_counter()
    choices = policy.choose_gang(group, keys, pods)
    result.latencies_ms.append((time.perf_counter() - start) * 1000)
    if choices is None:
        return [None] * len(pods)
    placed = [
        _admit_and_apply(cluster, policy, key, pod, choice, result=result)
        for key, pod, choice in zip(keys, pods, choices, strict=True)
    ]
    if None in placed:
        for pod, key, where in zip(pods, keys, placed, strict=True):
            if where is not None:
                cluster.release(pod, where)
                policy.forget(key)
        return [None] * len(pods)
    return placed


def _place_one(cluster: SimCluster, policy: Policy, key: str, pod: TracePod, result: RunResult) -> Placed | None:
    start = time.perf_counter()
    choice = policy.choose(key, pod)
    result.latencies_ms.append((time.perf_counter() - start) * 1000)
    if choice is None:
        return None
    return _admit_and_apply(cluster, policy, key, pod, choice, result=result)


def _admit_and_apply(
    cluster: SimCluster, policy: Policy, key: str, pod: TracePod, choice: Choice, *, result: RunResult
) -> Placed | None:
    """The kubelet's verdict on the policy's choice, then the charge; a rejection counts by reason."""
    verdict = cluster.admit(choice.node, pod)
    if not verdict.admit:
        if verdict.reason == TOPOLOGY_AFFINITY_ERROR:
            result.affinity_errors += 1
        else:
            result.other_rejections += 1
        policy.forget(key)
        return None
    hint_cells = sorted({i for a in verdict.affinities if a.hint.affinity is not None for i in a.hint.affinity.ids})
    cpu_cells = choice.cpu_cells if choice.cpu_cells is not None else tuple(hint_cells)
    table = cluster.tables[choice.node]
    if pod.gpus >= 2:
        best = choose_gpu_set(table, cluster.free_gpus(choice.node), pod.gpus)
        chosen = score_gpu_set(table, choice.gpus)
        result.multi_gpu += 1
        if best is not None and (chosen.weakest_rank or 0, chosen.rank_sum) >= (
            best.score.weakest_rank or 0,
            best.score.rank_sum,
        ):
            result.multi_gpu_best += 1
    where = cluster.apply(choice.node, pod, choice.gpus, cpu_cells)
    policy.keep(key)
    if pod.intent is NumaIntentPolicy.SINGLE_NUMA:
        result.single_numa += 1
        used = {int(cluster.gpu_cell[where.node, g]) for g in where.gpus}
        used |= {cell for cell, taken in enumerate(where.cpu_cells) if taken}
        result.single_numa_aligned += len(used) <= 1
    return where


def median_summary(runs: Sequence[RunResult]) -> dict[str, float | int | str | None]:
    """The median over seeds of every numeric figure (None where no seed had one)."""
    return median_of([run.summary() for run in runs], "policy")


Summary = Mapping[str, float | int | str | None]


def median_of(summaries: Sequence[Summary], label: str) -> dict[str, float | int | str | None]:
    """The runs' summaries (one per seed) merged: ``label`` (what was compared) kept, ``seeds`` counted, and
    every numeric figure the median over seeds (None where no seed had one)."""
    merged: dict[str, float | int | str | None] = {label: summaries[0][label], "seeds": len(summaries)}
    for key in summaries[0]:
        if key in (label, "seed"):
            continue
        values = [s[key] for s in summaries if isinstance(s[key], int | float)]
        merged[key] = statistics.median(values) if values else None  # type: ignore[type-var]
    return merged
