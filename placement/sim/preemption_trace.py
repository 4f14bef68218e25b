"""Preemption on the trace: the service's preemption against kube-scheduler's, on the same cluster and arrivals.

The trace has no priorities; ``with_priorities`` assigns a mix from CRC-32 of the seed and the pod name
(docs/benchmarks.md, "Preemption on the trace"):

* training, ``HIGH_PRIORITY``: every pod with ``TRAINING_GPUS`` GPUs (in the trace all of them are gang
  members, and their gangs arrive whole);
* inference, ``HIGH_PRIORITY``: ``INFERENCE_PERCENT`` of the pods asking for one whole GPU;
* service, ``SERVICE_PRIORITY``: ``SERVICE_PERCENT`` of the other pods outside gangs;
* batch, ``BATCH_PRIORITY``: the rest, the gangs of 2- and 4-GPU pods among them (batch training).

A run (``simulate_preemption``): the service and batch pods arrive first, as in the trace-driven comparison
(uniformly drawn copies, shuffled with the seed; a gang arrives whole) and are placed by the service
(``Ours`` with gang coordination) until their arrived GPU demand reaches ``FILL_PERCENT`` of the GPUs: the
cluster is full. Then every high-priority pod arrives once, shuffled with the seed. Each is placed by the
service when it fits somewhere; otherwise the run's rule preempts:

* ``kube-scheduler``: DefaultPreemption as upstream writes it, topology-blind (``kube_preemption``).
  Members of a gang preempt one by one, as kube-scheduler schedules them.
* ``ours``: ``placement.state.preemption_search.find_preemption`` on the service's own index; a gang preempts as
  one unit.

The victims leave the ground truth (``SimCluster``) and the service's index; the preemptor is then bound
on the node its preemption was for and the kubelet's admission (the exact model) judges it there. A
refusal makes the preemption UNUSABLE: the victims are gone and the preemptor waits. Its replacement (a
Job's pod rejected by the kubelet fails, the Job controller creates another, up to its ``backoffLimit``)
is scheduled again, normal placement first, at most ``MAX_ATTEMPTS`` times in all. A pod no preemption
helps is not tried again: in this run nothing leaves but victims, whose capacity goes to their preemptor.

Both rules sit behind the same placement (the service, ``Ours``), as kube-scheduler's DefaultPreemption
sits behind an extender without a preemption verb: only how victims are chosen differs.
"""

from __future__ import annotations

import enum
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from placement.core.pods import PendingPod, PodUsage
from placement.core.topology_manager import ContainerAffinity
from placement.core.vocabulary import GPU_MILLI, demand_of
from placement.sim.cluster import Placed, SimCluster
from placement.sim.policies import NAMESPACE, Choice, Ours, gang_member, lowest_gpus, pending_pod
from placement.sim.run import arrivals, median_of
from placement.sim.trace import TraceNode, TracePod, name_hash
from placement.state.preemption_search import NoPreemption, find_preemption

HIGH_PRIORITY = 1000
SERVICE_PRIORITY = 100
BATCH_PRIORITY = 0
TRAINING_GPUS = 8
INFERENCE_PERCENT = 10
SERVICE_PERCENT = 20
FILL_PERCENT = 100  # the low-priority arrivals' GPU demand, percent of the cluster's GPUs
MAX_ATTEMPTS = 7  # the first try and a Job's default backoffLimit (6) of replacements
# DefaultPreemptionArgs' defaults (pkg/scheduler/apis/config/v1/defaults.go): the dry run stops once it has
# max(10% of the nodes, 100) candidates.
MIN_CANDIDATE_NODES_PERCENTAGE = 10
MIN_CANDIDATE_NODES_ABSOLUTE = 100
PRIORITY_OFFSET = 2**31  # pickOneNodeForPreemption adds MaxInt32+1 to each victim's priority before summing
KUBE_SCHEDULER = "kube-scheduler"
OURS = "ours"
RULES = (KUBE_SCHEDULER, OURS)


def priority_of(pod: TracePod, seed: int) -> int:
    """The pod's priority in the mix (module docstring)."""
    if pod.gpus >= TRAINING_GPUS and pod.gpu_milli == GPU_MILLI:
        return HIGH_PRIORITY
    if pod.gang is not None:
        return BATCH_PRIORITY
    bucket = name_hash(f"{seed}/{pod.name}") % 100
    if pod.gpus == 1 and pod.gpu_milli == GPU_MILLI and bucket < INFERENCE_PERCENT:
        return HIGH_PRIORITY
    return SERVICE_PRIORITY if bucket >= 100 - SERVICE_PERCENT else BATCH_PRIORITY


def with_priorities(pods: Sequence[TracePod], seed: int) -> list[TracePod]:
    """The pods with their priority in the mix (the members of a gang share their shape, so their class)."""
    return [replace(pod, priority=priority_of(pod, seed)) for pod in pods]


@dataclass(frozen=True)
class Running:
    """A pod the ground truth holds: what eviction gives back and what the rules read of it."""

    key: str
    pod: TracePod
    placed: Placed
    started: int  # bind order: kube-scheduler's start time
    gang: str | None  # the gang's name, for a gang member


@dataclass(frozen=True)
class Eviction:
    preemptor: str
    preemptor_priority: int
    victim: Running


@dataclass(frozen=True)
class KubeCandidate:
    """A node and the victims kube-scheduler would evict there, most important first."""

    node: int
    victims: tuple[Running, ...]


def _fits(pod: TracePod, cpu: float, memory: float, gpu_left: np.ndarray) -> bool:
    """NodeResourcesFit on one node: CPU, memory and the count of GPUs with the pod's thousandths left."""
    if cpu < pod.cpu_milli or memory < pod.memory_mib:
        return False
    return not pod.gpus or int((gpu_left >= pod.gpu_milli).sum()) >= pod.gpus


def select_victims_on_node(
    cluster: SimCluster, row: int, running: Iterable[Running], pod: TracePod
) -> tuple[Running, ...]:
    """kube-scheduler's ``SelectVictimsOnNode`` (pkg/scheduler/framework/plugins/defaultpreemption/
    default_preemption.go) with no PodDisruptionBudgets: remove every lower-priority pod; if the preemptor
    does not fit by node-level counts even then, no victims; else reprieve the pods most important first
    (``util.MoreImportantPod``: higher priority, then the longer running) while the preemptor still fits.
    () when the node is no candidate (upstream also drops a node that needs no victim)."""
    lower = [r for r in running if r.pod.priority < pod.priority]
    if not lower:
        return ()
    cpu = float(cluster.cpu_free[row])
    memory = float(cluster.memory_free[row])
    gpu_left = cluster.gpu_left[row].copy()
    for victim in lower:
        cpu += victim.pod.cpu_milli
        memory += victim.pod.memory_mib
        gpu_left[list(victim.placed.gpus)] += victim.pod.gpu_milli
    if not _fits(pod, cpu, memory, gpu_left):
        return ()
    victims = []
    for candidate in sorted(lower, key=lambda r: (-r.pod.priority, r.started)):
        cpu -= candidate.pod.cpu_milli
        memory -= candidate.pod.memory_mib
        gpu_left[list(candidate.placed.gpus)] -= candidate.pod.gpu_milli
        if _fits(pod, cpu, memory, gpu_left):
            continue  # reprieved
        cpu += candidate.pod.cpu_milli
        memory += candidate.pod.memory_mib
        gpu_left[list(candidate.placed.gpus)] += candidate.pod.gpu_milli
        victims.append(candidate)
    return tuple(victims)


def pick_one_node(candidates: Sequence[KubeCandidate], rng: random.Random) -> KubeCandidate:
    """``pickOneNodeForPreemption`` (pkg/scheduler/framework/preemption/preemption.go), no PDB violations
    here: the lowest highest-priority victim, then the smallest sum of (priority + 2^31), then the fewest
    victims, then the latest start among the highest-priority victims; a tie left goes to a random node
    (upstream takes the first of a Go map's iteration)."""

    def order(candidate: KubeCandidate) -> tuple[int, int, int, int]:
        highest = max(v.pod.priority for v in candidate.victims)
        total = sum(v.pod.priority + PRIORITY_OFFSET for v in candidate.victims)
        earliest = min(v.started for v in candidate.victims if v.pod.priority == highest)
        return (highest, total, len(candidate.victims), -earliest)

    ranked = [(order(c), c) for c in candidates]
    best = min(key for key, _ in ranked)
    ties = [c for key, c in ranked if key == best]
    return ties[rng.randrange(len(ties))]


def kube_preemption(
    cluster: SimCluster, on_node: Sequence[Mapping[str, Running]], pod: TracePod, rng: random.Random
) -> KubeCandidate | None:
    """kube-scheduler's DefaultPreemption for ``pod``: ``DryRunPreemption`` from a random offset over the
    nodes the pod may run on (its GPU models), stopping at ``calculateNumCandidates`` candidates, then
    ``pick_one_node``. None when no node has victims whose eviction makes the pod fit."""
    rows = np.flatnonzero(cluster.allowed_models(pod.gpu_models)) if pod.gpu_models else np.arange(len(cluster.names))
    count = len(rows)
    if not count:
        return None
    wanted = min(count, max(count * MIN_CANDIDATE_NODES_PERCENTAGE // 100, MIN_CANDIDATE_NODES_ABSOLUTE))
    offset = rng.randrange(count)
    candidates: list[KubeCandidate] = []
    for step in range(count):
        row = int(rows[(offset + step) % count])
        victims = select_victims_on_node(cluster, row, on_node[row].values(), pod)
        if victims:
            candidates.append(KubeCandidate(row, victims))
            if len(candidates) >= wanted:
                break
    return pick_one_node(candidates, rng) if candidates else None


class Outcome(enum.Enum):
    PLACED = "placed"
    NO_PREEMPTION = "no preemption"
    UNUSABLE = "unusable"


@dataclass
class PreemptionResult:
    """What one rule's run on one seed counted (``summary`` names the figures the command reports)."""

    rule: str
    seed: int
    fill_pods: int = 0
    fill_placed: int = 0
    fill_allocated: float = 0.0  # percent of the GPUs allocated when the high-priority pods start arriving
    kubelet_rejections: int = 0  # of the service's own placements (normal placement, ours' preemptors)
    high_pods: int = 0
    high_gpus: int = 0
    high_placed: int = 0
    high_placed_gpus: int = 0
    placed_at_arrival: int = 0
    placed_by_preemption: int = 0
    high_gangs: int = 0
    high_gangs_placed: int = 0
    preemptions: int = 0  # decisions acted on: victims evicted
    unusable: int = 0
    attempts: list[int] = field(default_factory=list)  # per pod placed by preemption
    evictions: list[Eviction] = field(default_factory=list)
    broken_gangs: int = 0  # gangs left with some members evicted and others running
    latencies_ms: list[float] = field(default_factory=list)  # preemption decisions

    def summary(self) -> dict[str, float | int | str | None]:
        evicted_gpus = sum(e.victim.pod.gpu_request_milli for e in self.evictions) / GPU_MILLI
        return {
            "rule": self.rule,
            "seed": self.seed,
            "fill_allocated_pct": self.fill_allocated,
            "high_pods": self.high_pods,
            "high_placed": self.high_placed,
            "high_placed_gpus": self.high_placed_gpus,
            "placed_at_arrival": self.placed_at_arrival,
            "placed_by_preemption": self.placed_by_preemption,
            "high_gangs": self.high_gangs,
            "high_gangs_placed": self.high_gangs_placed,
            "preemptions": self.preemptions,
            "evictions": len(self.evictions),
            "evicted_gpus": evicted_gpus,
            "evictions_per_placed_high_gpu": _ratio(len(self.evictions), self.high_placed_gpus),
            "unusable_preemptions": self.unusable,
            "attempts_mean": statistics.fmean(self.attempts) if self.attempts else None,
            "attempts_max": max(self.attempts, default=None),
            "broken_gangs": self.broken_gangs,
            "kubelet_rejections": self.kubelet_rejections,
            "latency_p50_ms": _percentile(self.latencies_ms, 50),
            "latency_p99_ms": _percentile(self.latencies_ms, 99),
        }


def _ratio(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


class PreemptionRun:
    """One rule over one cluster: the ground truth, the service's index of it, and who runs where."""

    def __init__(
        self,
        nodes: Sequence[TraceNode],
        workload: Sequence[TracePod] | None,
        *,
        rule: str,
        seed: int,
        numa: bool = True,
    ) -> None:
        """``workload``: the pod shapes the service's fragmentation score measures against (the trace's, as in
        the trace-driven comparison); None: the service's default model, learning from what it places."""
        if rule not in RULES:
            raise ValueError(f"unknown preemption rule {rule!r}; known: {', '.join(RULES)}")
        self.cluster = SimCluster(nodes, numa=numa)
        self.service = Ours(self.cluster, gangs=True, workload=workload)
        self.rule = rule
        self.rng = random.Random(seed * 7919 + 2)
        self.result = PreemptionResult(rule=rule, seed=seed)
        self.running: dict[str, Running] = {}
        self.on_node: list[dict[str, Running]] = [{} for _ in nodes]
        self._started = 0

    # --- the two phases --------------------------------------------------------------------------------------

    def fill(self, groups: Iterable[Sequence[TracePod]]) -> None:
        """Low-priority arrivals, placed by the service, until their GPU demand reaches ``FILL_PERCENT``."""
        capacity = self.cluster.gpu_capacity_milli
        arrived = 0.0
        for number, group in enumerate(groups):
            if arrived >= capacity * FILL_PERCENT / 100:
                break
            name = f"f{number}"
            placed = self.place(_keys(name, group), group, gang=name if group[0].gang else None)
            self.result.fill_pods += len(group)
            self.result.fill_placed += len(group) if placed else 0
            arrived += sum(p.gpu_request_milli for p in group)
        self.result.fill_allocated = 100 * (1 - float(self.cluster.gpu_left.sum()) / capacity)

    def arrive(self, name: str, group: Sequence[TracePod]) -> None:
        """A high-priority arrival: placed when it fits, else preempting by the rule."""
        result = self.result
        keys = _keys(name, group)
        gang = name if group[0].gang else None
        result.high_pods += len(group)
        result.high_gpus += sum(p.gpus for p in group)
        if self.place(keys, group, gang=gang):
            result.placed_at_arrival += len(group)
            self._count_placed(group, by_preemption=False)
            placed = len(group)
        elif self.rule == OURS:
            placed = len(group) if self._preempt_until_placed(keys, group, gang=gang) else 0
        else:  # kube-scheduler schedules, and preempts for, each member alone
            placed = sum(1 for k, p in zip(keys, group, strict=True) if self._preempt_until_placed([k], [p], gang=gang))
        if gang is not None:
            result.high_gangs += 1
            result.high_gangs_placed += 1 if placed == len(group) else 0

    def finish(self) -> PreemptionResult:
        """The run's figures, after checking that the ground truth holds exactly the running pods."""
        self.check()
        evicted = Counter(e.victim.gang for e in self.result.evictions if e.victim.gang is not None)
        running = Counter(r.gang for r in self.running.values() if r.gang is not None)
        self.result.broken_gangs = sum(1 for gang in evicted if running[gang])
        return self.result

    # --- placing -------------------------------------------------------------------------------------------

    def place(
        self,
        keys: Sequence[str],
        pods: Sequence[TracePod],
        *,
        gang: str | None,
        candidate_names: Iterable[str] | None = None,
    ) -> bool:
        """Where the service puts ``pods`` (a gang all or nothing), each judged by the kubelet; False: none
        placed, nothing held."""
        service = self.service
        if gang is not None and len(pods) > 1:
            choices = service.choose_gang(gang, keys, pods, candidate_names)
            if choices is None:
                return False
            bound = [self._bind(k, p, c, gang) for k, p, c in zip(keys, pods, choices, strict=True)]
            if all(b is not None for b in bound):
                return True
            for running in bound:
                if running is not None:
                    self._remove(running)
            for key in keys:
                service.forget(key)
            return False
        placed: list[Running] = []
        for key, pod in zip(keys, pods, strict=True):
            choice = service.choose(key, pod, candidate_names)
            running = None if choice is None else self._bind(key, pod, choice, gang)
            if running is None:
                for earlier in placed:
                    self._remove(earlier)
                return False
            placed.append(running)
        return True

    def _bind(self, key: str, pod: TracePod, choice: Choice, gang: str | None) -> Running | None:
        """The kubelet's verdict on the service's choice, then the charge."""
        verdict = self.cluster.admit(choice.node, pod)
        if not verdict.admit:
            self.result.kubelet_rejections += 1
            self.service.forget(key)
            return None
        cells = choice.cpu_cells if choice.cpu_cells is not None else _hint_cells(verdict.affinities)
        placed = self.cluster.apply(choice.node, pod, choice.gpus, cells)
        self.service.keep(key)
        return self._record(key, pod, placed, gang)

    def _record(self, key: str, pod: TracePod, placed: Placed, gang: str | None) -> Running:
        running = Running(key=key, pod=pod, placed=placed, started=self._started, gang=gang)
        self._started += 1
        self.running[key] = running
        self.on_node[placed.node][key] = running
        return running

    def _remove(self, running: Running) -> None:
        """The pod leaves the ground truth and everything the service knows of it."""
        self.cluster.release(running.pod, running.placed)
        del self.running[running.key]
        del self.on_node[running.placed.node][running.key]
        self.service.forget(running.key)

    def _count_placed(self, pods: Sequence[TracePod], *, by_preemption: bool) -> None:
        result = self.result
        result.high_placed += len(pods)
        result.high_placed_gpus += sum(p.gpus for p in pods)
        if by_preemption:
            result.placed_by_preemption += len(pods)

    # --- preempting ----------------------------------------------------------------------------------------

    def _preempt_until_placed(self, keys: Sequence[str], pods: Sequence[TracePod], *, gang: str | None) -> bool:
        """Preempt for ``pods`` (one unit), and again for a replacement after an unusable preemption."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            if attempt > 1 and self.place(keys, pods, gang=gang):
                outcome = Outcome.PLACED
            else:
                outcome = self._preempt(keys, pods, gang=gang)
            if outcome is Outcome.PLACED:
                self.result.attempts.extend([attempt] * len(pods))
                self._count_placed(pods, by_preemption=True)
                return True
            if outcome is Outcome.NO_PREEMPTION:
                return False
        return False

    def _preempt(self, keys: Sequence[str], pods: Sequence[TracePod], *, gang: str | None) -> Outcome:
        if self.rule == OURS:
            return self._preempt_ours(keys, pods, gang=gang)
        return self._preempt_kube(keys[0], pods[0], gang=gang)

    def _preempt_kube(self, key: str, pod: TracePod, *, gang: str | None) -> Outcome:
        start = time.perf_counter()
        candidate = kube_preemption(self.cluster, self.on_node, pod, self.rng)
        self.result.latencies_ms.append((time.perf_counter() - start) * 1000)
        if candidate is None:
            return Outcome.NO_PREEMPTION
        self._evict(candidate.victims, key, pod.priority)
        if self.bind_on(key, pod, candidate.node, gang=gang) is None:
            self.result.unusable += 1
            return Outcome.UNUSABLE
        return Outcome.PLACED

    def bind_on(
        self, key: str, pod: TracePod, row: int, *, gpus: Sequence[int] | None = None, gang: str | None = None
    ) -> Running | None:
        """``pod`` bound to ``row`` by someone other than the service (kube-scheduler after its preemption, or
        a test): None when the kubelet refuses it. The device manager gives ``gpus``, or GPUs in the kubelet
        hint's cells first; exclusive CPUs go to the GPUs' cells, else the hint's. The service's index learns
        the pod as its watch would: bound, with its priority."""
        cluster = self.cluster
        verdict = cluster.admit(row, pod)
        if not verdict.admit:
            return None
        hint = _hint_cells(verdict.affinities)
        chosen = tuple(gpus) if gpus is not None else lowest_gpus(cluster, row, pod, hint)
        cells = tuple(sorted({int(cluster.gpu_cell[row, g]) for g in chosen})) if gpus is not None else hint
        placed = cluster.apply(row, pod, chosen, cells)
        used = {int(cluster.gpu_cell[row, g]) for g in placed.gpus}
        used |= {cell for cell, taken in enumerate(placed.cpu_cells) if taken}
        request = self._request(key, pod, gang)
        usage = PodUsage(
            namespace=NAMESPACE,
            name=key,
            node=cluster.names[row],
            demand=demand_of(request.pod),
            cells=tuple(sorted(used)),
            gpus=placed.gpus,
            isolated=request.intent.exclusive,
        )
        self.service.reservations.observe_pod(usage)
        self.service.index.facts.put_pod(request.placed_on(usage.node))
        return self._record(key, pod, placed, gang)

    def _preempt_ours(self, keys: Sequence[str], pods: Sequence[TracePod], *, gang: str | None) -> Outcome:
        index = self.service.index
        requests = [self._request(k, p, gang, size=len(pods)) for k, p in zip(keys, pods, strict=True)]
        with index.lock:
            start = time.perf_counter()
            decision = find_preemption(index, requests)
            self.result.latencies_ms.append((time.perf_counter() - start) * 1000)
        if isinstance(decision, NoPreemption):
            return Outcome.NO_PREEMPTION
        self._evict([self.running[v.name] for v in decision.victims], keys[0], pods[0].priority)
        nodes = {node for _, node in decision.nominations}
        if self.place(keys, pods, gang=gang, candidate_names=nodes):
            return Outcome.PLACED
        self.result.unusable += 1
        return Outcome.UNUSABLE

    def _request(self, key: str, pod: TracePod, gang: str | None, *, size: int = 1) -> PendingPod:
        if gang is not None and size > 1:
            return gang_member(key, pod, group=gang, size=size)
        return pending_pod(key, pod)

    def _evict(self, victims: Iterable[Running], preemptor: str, priority: int) -> None:
        self.result.preemptions += 1
        for victim in victims:
            self._remove(victim)
            self.result.evictions.append(Eviction(preemptor, priority, victim))

    # --- checking ------------------------------------------------------------------------------------------

    def check(self) -> None:
        """The ground truth's free CPUs, memory and GPU thousandths are exactly capacity less the running
        pods: evicted pods really left."""
        cluster = self.cluster
        cluster.check()
        cpu = cluster.cpu_capacity.copy()
        memory = cluster.memory_capacity.copy()
        gpu = np.zeros_like(cluster.gpu_left)
        for row, count in enumerate(cluster.gpu_count):
            gpu[row, : int(count)] = GPU_MILLI
        for running in self.running.values():
            row = running.placed.node
            cpu[row] -= running.pod.cpu_milli
            memory[row] -= running.pod.memory_mib
            gpu[row, list(running.placed.gpus)] -= running.pod.gpu_milli
        if not (
            np.array_equal(cpu, cluster.cpu_free)
            and np.array_equal(memory, cluster.memory_free)
            and np.array_equal(gpu, cluster.gpu_left)
        ):
            raise AssertionError("the ground truth does not hold exactly the running pods")


def _keys(name: str, group: Sequence[TracePod]) -> list[str]:
    return [f"{name}-{i}" for i in range(len(group))]


def _hint_cells(affinities: Iterable[ContainerAffinity]) -> tuple[int, ...]:
    """The NUMA cells of the kubelet's merged hints: where the static CPU manager pins, and the device
    manager takes devices first."""
    return tuple(sorted({i for a in affinities if a.hint.affinity is not None for i in a.hint.affinity.ids}))


def simulate_preemption(
    nodes: Sequence[TraceNode], pods: Sequence[TracePod], rule: str, seed: int, *, numa: bool = True
) -> PreemptionResult:
    """One rule, one seed (module docstring): fill with the low-priority pods, then the high-priority ones."""
    mixed = with_priorities(pods, seed)
    low = [p for p in mixed if p.priority < HIGH_PRIORITY]
    high = [p for p in mixed if p.priority >= HIGH_PRIORITY]
    if not numa:
        low = [replace(p, intent=None) for p in low]
        high = [replace(p, intent=None) for p in high]
    run = PreemptionRun(nodes, mixed, rule=rule, seed=seed, numa=numa)
    run.fill(arrivals(low, run.cluster.gpu_capacity_milli, seed))
    for number, group in enumerate(arrivals(high, 0.0, seed)):
        run.arrive(f"h{number}", group)
    return run.finish()


def median_summary(results: Sequence[PreemptionResult]) -> dict[str, float | int | str | None]:
    """The median over seeds of every numeric figure (None where no seed had one)."""
    return median_of([r.summary() for r in results], "rule")
