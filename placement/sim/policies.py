"""The placement policies the simulator compares; each picks a node and GPUs for one pod.

Baselines score the simulator's own arrays (they are other schedulers, not ours) and keep to the pod's GPU
models through ``SimCluster.fits``; ``Ours`` goes through the real placement service: ``ClusterIndex`` +
``Reservations.decide`` (vectorised kubelet admission, the score, the exact check, the GPUs the kubelet is
predicted to hand out / ``least_fragmenting_gpu``), with the nodes' GPU model labels in the index's node facts
and the pod's GPU models as a required node affinity, judged by the constraint core as any pod's. Ties between
equal scores are broken at random, as kube-scheduler's ``selectHost`` does, except for the FGD paper's
policies (BestFit, FGD), which break them as the FGD simulator does: to the node whose name sorts first.
Whole GPUs "by lowest index" means the lowest free indices; a GPU share goes on the GPU with the least left
that fits (the FGD simulator's default) unless the policy says otherwise. ``cpu_cells`` None lets the
kubelet's hint place the exclusive CPUs.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY
from placement.core.constraints.constraint_types import NodeFacts, PodConstraints
from placement.core.gpuallocator import best_effort_allocate
from placement.core.intent import PodIntent
from placement.core.pods import PendingPod
from placement.core.vocabulary import GPU_MILLI, PodShape
from placement.sim.cluster import MAX_CELLS, SimCluster, exclusive_cpus, kubelet_pod
from placement.sim.trace import TracePod, gpu_model_affinity, node_labels, node_topology, parse_gpu_spec
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangConfig, GangCoordinator, GangPlacement
from placement.state.reservations import Reservations
from placement.state.workload import WorkloadModel

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NAMESPACE = "sim"
MAX_SPEC_CPU = 128_000.0  # the FGD simulator's BestFit normalisation (MaxSpecCpu, MaxSpecGpu)
MAX_SPEC_GPU = 8_000.0
TYPICAL_POD_POPULARITY = 95.0  # percent of pods FGD's typical shapes cover (the artifact's podPopularityThreshold)
NONZERO_CPU_MILLI = 100  # kube-scheduler's DefaultMilliCPURequest, for a pod that asks for none


@dataclass(frozen=True)
class Choice:
    node: int
    gpus: tuple[int, ...]
    cpu_cells: tuple[int, ...] | None = None


class Policy(Protocol):
    name: str
    gang_coordination: bool  # places a gang all or nothing

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        """Where ``pod`` goes; None when no node holds it."""
        ...

    def forget(self, key: str) -> None:
        """The simulator did not keep the placement (kubelet rejection, gang rollback)."""
        ...

    def keep(self, key: str) -> None:
        """The simulator kept the placement."""
        ...


def _pick(scores: FloatArray, feasible: BoolArray, rng: random.Random) -> int | None:
    """The feasible row with the highest score, ties at random (kube-scheduler's ``selectHost``)."""
    rows = np.flatnonzero(feasible)
    if not len(rows):
        return None
    values = scores[rows]
    best = rows[values == values.max()]
    return int(best[rng.randrange(len(best))])


def _pick_first_name(scores: FloatArray, feasible: BoolArray, names: Sequence[str]) -> int | None:
    """The feasible row with the highest score, ties to the node whose name sorts first.

    The FGD simulator's ``selectHost`` (its vendored kube-scheduler, pkg/scheduler/core/
    generic_scheduler.go) breaks ties so, "for reproducibility", where kube-scheduler draws at random.
    """
    rows = np.flatnonzero(feasible)
    if not len(rows):
        return None
    values = scores[rows]
    return min((int(r) for r in rows[values == values.max()]), key=names.__getitem__)


def pod_shape(pod: TracePod) -> PodShape:
    return PodShape(pod.cpu_milli, pod.gpu_milli, pod.gpus, pod.gpu_models)


def lowest_gpus(cluster: SimCluster, row: int, pod: TracePod, cells: Sequence[int] = ()) -> tuple[int, ...]:
    """Whole GPUs: the lowest free indices (``cells`` first, as the kubelet's device manager aligns);
    a share: the GPU with the least left that fits."""
    left = cluster.gpu_left[row]
    count = int(cluster.gpu_count[row])
    if pod.shares_gpu:
        fitting = [(left[g], g) for g in range(count) if left[g] >= pod.gpu_milli]
        return (min(fitting)[1],)
    free = [g for g in range(count) if left[g] >= GPU_MILLI]
    free.sort(key=lambda g: (int(cluster.gpu_cell[row, g]) not in cells, g))
    return tuple(sorted(free[: pod.gpus]))


def least_allocated(cluster: SimCluster, pod: TracePod) -> FloatArray:
    """kube-scheduler NodeResourcesFit LeastAllocated (CPU and memory, equal weights), integer scores."""
    cpu = (cluster.cpu_free - pod.cpu_milli) / cluster.cpu_capacity
    memory = (cluster.memory_free - pod.memory_mib) / cluster.memory_capacity
    result: FloatArray = np.floor(50 * (cpu + memory))
    return result


class DefaultScheduler:
    """Topology-blind kube-scheduler: NodeResourcesFit LeastAllocated, GPUs by lowest index."""

    name = "default"
    gang_coordination = False

    def __init__(self, cluster: SimCluster, rng: random.Random) -> None:
        self.cluster, self.rng = cluster, rng

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        row = _pick(least_allocated(self.cluster, pod), self.cluster.fits(pod), self.rng)
        return None if row is None else Choice(row, lowest_gpus(self.cluster, row, pod))

    def forget(self, key: str) -> None:
        return None

    def keep(self, key: str) -> None:
        return None


class GpuAllocator(DefaultScheduler):
    """kube-scheduler LeastAllocated for the node; NVIDIA go-gpuallocator best-effort for the GPU set."""

    name = "gpuallocator"

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        row = _pick(least_allocated(self.cluster, pod), self.cluster.fits(pod), self.rng)
        if row is None:
            return None
        if pod.gpus < 2 or pod.shares_gpu:
            return Choice(row, lowest_gpus(self.cluster, row, pod))
        free = sorted(self.cluster.free_gpus(row))
        # The trace's machines carry no NVLink records: the pair scores count the matrix's NV<n> links.
        chosen = best_effort_allocate(self.cluster.tables[row].plugin_scores, free, (), pod.gpus)
        return Choice(row, tuple(sorted(g for g in chosen if g is not None)))


def _cell_fit(cluster: SimCluster, pod: TracePod) -> npt.NDArray[np.bool_]:
    """[N, cells]: the cell alone holds the pod's exclusive CPUs and GPUs (the NRT zone view)."""
    fit = cluster.cell_cpus_free >= exclusive_cpus(pod)
    fit &= np.arange(MAX_CELLS)[None, :] < cluster.sockets[:, None]
    if pod.gpus:
        fitting = cluster.gpu_left >= pod.gpu_milli
        for cell in range(MAX_CELLS):
            fit[:, cell] &= (fitting & (cluster.gpu_cell == cell)).sum(axis=1) >= pod.gpus
    return fit


class NodeResourceTopologyMatch:
    """scheduler-plugins NodeResourceTopologyMatch: its filter (single-numa-node nodes need one NUMA zone
    that holds the pod) and one scoring strategy; the kubelet's device manager picks the GPUs, in the
    fitting zone first, by lowest index."""

    def __init__(self, cluster: SimCluster, rng: random.Random, *, strategy: str) -> None:
        self.cluster, self.rng, self.strategy = cluster, rng, strategy
        self.name = f"nrt-{strategy}"
        self.gang_coordination = False
        self.single_numa = np.array([p.value == "single-numa-node" for p in cluster.policies])

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        cluster = self.cluster
        cells = _cell_fit(cluster, pod)
        one_cell = cells.any(axis=1)
        feasible = cluster.fits(pod) & (one_cell | ~self.single_numa)
        if self.strategy == "LeastNUMANodes":
            scores = np.where(one_cell, 100.0, 50.0)
        else:  # MostAllocated: the fullest zone that holds the pod, over the resources it asks for
            scores = self._most_allocated(pod, cells)
        row = _pick(scores, feasible, self.rng)
        if row is None:
            return None
        fitting = [c for c in range(MAX_CELLS) if cells[row, c]]
        return Choice(row, lowest_gpus(cluster, row, pod, fitting[:1]))

    def _most_allocated(self, pod: TracePod, cells: npt.NDArray[np.bool_]) -> FloatArray:
        cluster = self.cluster
        used = np.zeros(cells.shape)
        wanted = exclusive_cpus(pod)
        parts = 0
        if wanted:
            total = np.maximum(cluster.cell_cpus, 1)
            used += (cluster.cell_cpus - cluster.cell_cpus_free + wanted) / total
            parts += 1
        if pod.gpus:
            for cell in range(MAX_CELLS):
                in_cell = cluster.gpu_cell == cell
                total_milli = (in_cell & (np.arange(8)[None, :] < cluster.gpu_count[:, None])).sum(axis=1) * GPU_MILLI
                left = np.where(in_cell, cluster.gpu_left, 0).sum(axis=1)
                used[:, cell] += (total_milli - left + pod.gpu_request_milli) / np.maximum(total_milli, 1)
            parts += 1
        if not parts:
            return least_allocated(cluster, pod) * 0  # nothing zone-bound: every node scores the same
        zone = np.where(cells, np.floor(100 * used / parts), -1.0)
        result: FloatArray = zone.max(axis=1)
        return result

    def forget(self, key: str) -> None:
        return None

    def keep(self, key: str) -> None:
        return None


class RandomFit(DefaultScheduler):
    """The FGD paper's Random: any feasible node, uniformly; a share on any GPU that fits, uniformly."""

    name = "random"

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        cluster = self.cluster
        row = _pick(np.zeros(len(cluster.names)), cluster.fits(pod), self.rng)
        if row is None:
            return None
        if pod.shares_gpu:
            fitting = np.flatnonzero(cluster.gpu_left[row] >= pod.gpu_milli)
            return Choice(row, (int(fitting[self.rng.randrange(len(fitting))]),))
        return Choice(row, lowest_gpus(cluster, row, pod))


class BestFit(DefaultScheduler):
    """The FGD paper's BestFit: least weighted free CPU and GPU left after placement (integer scores)."""

    name = "bestfit"

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        cluster = self.cluster
        left = 0.5 * (cluster.cpu_free - pod.cpu_milli) / MAX_SPEC_CPU
        left += 0.5 * (cluster.gpu_left.sum(axis=1) - pod.gpu_request_milli) / MAX_SPEC_GPU
        row = _pick_first_name(np.floor((1.0 - left) * 100), cluster.fits(pod), cluster.names)
        return None if row is None else Choice(row, lowest_gpus(cluster, row, pod))


@dataclass(frozen=True)
class TypicalPod:
    cpu_milli: int
    gpu_milli: int
    gpus: int
    share: float
    gpu_models: tuple[str, ...] = ()  # the shape's gpu_spec; () any model


def typical_pods(pods: Sequence[TracePod], popularity: float = TYPICAL_POD_POPULARITY) -> list[TypicalPod]:
    """FGD's target workload: the most frequent (CPU, GPU share, GPU count, GPU models) shapes of the trace.

    As the FGD simulator's ``GetTypicalPods`` (pkg/utils/frag.go) with the artifact's settings (CPU-only
    pods included, ``podPopularityThreshold`` ``popularity``, step 1): shapes by count, most frequent first
    (equally frequent ones the larger CPU, GPU share, GPU count, models first: its ``sort.Reverse`` of
    ``TargetPodList.Less``, pkg/type/resource.go, which decides the shapes the cut keeps among equally rare
    ones), taken until they cover ``popularity`` percent of the pods; their frequencies renormalised over the
    shapes taken. The GPU models are part of the shape, as its ``PodResource.GpuType`` is, keyed by the
    ``gpu_spec`` text as written (``_spec_of``); a pod asking for no CPU counts as 100 millicores
    (kube-scheduler's non-zero request, which the simulator's ``GetPodResource`` reads).
    """
    counts = Counter((max(p.cpu_milli, NONZERO_CPU_MILLI), p.gpu_milli, p.gpus, _spec_of(p)) for p in pods)
    ordered = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    wanted, covered, taken = popularity * len(pods) / 100, 0, 0
    while taken < len(ordered) and covered < wanted:
        covered += ordered[taken][1]
        taken += 1
    return [
        TypicalPod(cpu, milli, gpus, count / covered, parse_gpu_spec(spec))
        for (cpu, milli, gpus, spec), count in ordered[:taken]
    ]


def _spec_of(pod: TracePod) -> str:
    """The GPU model constraint as FGD's ``PodResource.GpuType`` holds it: the pod's annotation as written
    (``GetGpuModelFromPodAnnotation``), so "V100M16|V100M32|V100M32" is a shape of its own beside
    "V100M16|V100M32"; a pod built without the text (a derived list, a test) by its sorted models."""
    return pod.gpu_spec or "|".join(pod.gpu_models)


@dataclass
class _ShapeScores:
    """One pod shape's FGD scores on every node, valid where the node has not changed since."""

    scores: FloatArray  # [N] node score
    best_gpu: npt.NDArray[np.int64]  # [N] the GPU a share takes
    versions: npt.NDArray[np.int64]  # [N] the node's version when its score was computed; -1 never


class Fgd(DefaultScheduler):
    """Fragmentation Gradient Descent (Weng et al., ATC'23): the node and GPU whose placement grows the
    expected GPU fragmentation, measured against the trace's pod shapes (``typical_pods``), the least.

    A node's fragmentation for a typical pod is all its GPU thousandths left when the pod could not run
    there (GPUs or CPUs short, a GPU model its ``gpu_spec`` does not allow, or a CPU-only pod), else the
    thousandths on GPUs too small for it; the node's total weighs the typical pods by frequency
    (``NodeGpuShareFragAmountScore`` and ``GetNodePodFrag`` in the FGD simulator's pkg/utils/frag.go).
    Score: sigmoid(decrease / 1000) x 100, truncated to an integer as the FGD simulator does; a GPU share
    tries each GPU that fits.

    A node's score for a pod shape depends only on that node's CPUs and GPUs left, so it is kept per
    shape and recomputed only on the nodes that changed since (``_scores``): the same scores, computed
    once per node state instead of once per pod.
    """

    name = "fgd"

    def __init__(
        self,
        cluster: SimCluster,
        rng: random.Random,
        workload: Sequence[TracePod],
        popularity: float = TYPICAL_POD_POPULARITY,
    ) -> None:
        super().__init__(cluster, rng)
        typical = typical_pods(workload, popularity)
        # Shapes that differ only in CPUs share their GPU test: grouped, each GPU test runs once.
        self.cpu_only = sum(t.share for t in typical if t.gpu_milli == 0)
        groups: dict[tuple[int, int, tuple[str, ...]], list[TypicalPod]] = {}
        for t in typical:
            if t.gpu_milli:
                groups.setdefault((t.gpu_milli, t.gpus, t.gpu_models), []).append(t)
        self.groups = [
            (
                milli,
                gpus,
                cluster.allowed_models(models) if models else None,
                np.array([t.cpu_milli for t in ts], dtype=np.float64),
                np.array([t.share for t in ts]),
            )
            for (milli, gpus, models), ts in groups.items()
        ]
        self.all_shares = self.cpu_only + sum(float(g[-1].sum()) for g in self.groups)
        self._seen_cpu = cluster.cpu_free.copy()
        self._seen_gpu = cluster.gpu_left.copy()
        self._versions = np.zeros(len(cluster.names), dtype=np.int64)
        self._cache: dict[tuple[int, int, int], _ShapeScores] = {}

    def fragmentation(self, cpu_left: FloatArray, gpu_left: FloatArray, rows: npt.NDArray[np.intp]) -> FloatArray:
        """[...]: expected fragmentation of nodes ``rows`` [n] with ``cpu_left`` [n, ...] and ``gpu_left``
        [n, ..., 8].

        Per shape: all the GPU thousandths left where the pod could not run (GPUs or CPUs short, a GPU
        model it may not use, or a CPU-only pod), else those on GPUs too small for it; weighted by the
        shape's frequency.
        """
        total = gpu_left.sum(axis=-1)
        frag = total * self.all_shares
        extra_dims = cpu_left.ndim - 1
        for milli, gpus, allowed, cpus, shares in self.groups:
            gpu_fits = (gpu_left >= milli).sum(axis=-1) >= gpus
            if allowed is not None:
                gpu_fits &= allowed[rows].reshape(rows.shape + (1,) * extra_dims)
            small = np.where(gpu_left < milli, gpu_left, 0.0).sum(axis=-1)
            runs_share = (cpu_left[..., None] >= cpus).astype(np.float64) @ shares  # shares of shapes whose CPUs fit
            frag -= np.where(gpu_fits, runs_share * (total - small), 0.0)
        result: FloatArray = frag
        return result

    def choose(self, key: str, pod: TracePod) -> Choice | None:
        cluster = self.cluster
        feasible = cluster.fits(pod)
        if not feasible.any():
            return None
        shape = self._scores(pod, feasible)
        scores = np.where(feasible, shape.scores, -np.inf)
        row = _pick_first_name(scores, feasible, cluster.names)
        assert row is not None
        if pod.shares_gpu:
            return Choice(row, (int(shape.best_gpu[row]),))
        return Choice(row, lowest_gpus(cluster, row, pod))

    def _scores(self, pod: TracePod, feasible: BoolArray) -> _ShapeScores:
        """The pod shape's scores, brought up to date on the feasible nodes that changed since."""
        cluster = self.cluster
        changed = (cluster.cpu_free != self._seen_cpu) | (cluster.gpu_left != self._seen_gpu).any(axis=1)
        if changed.any():
            self._versions[changed] += 1
            self._seen_cpu[changed] = cluster.cpu_free[changed]
            self._seen_gpu[changed] = cluster.gpu_left[changed]
        key = (pod.cpu_milli, pod.gpu_milli, pod.gpus)
        shape = self._cache.get(key)
        if shape is None:
            n = len(cluster.names)
            shape = self._cache[key] = _ShapeScores(
                np.zeros(n), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
            )
        rows = np.flatnonzero(feasible & (shape.versions != self._versions))
        if len(rows):
            shape.scores[rows], shape.best_gpu[rows] = self._score_rows(pod, rows)
            shape.versions[rows] = self._versions[rows]
        return shape

    def _score_rows(self, pod: TracePod, rows: npt.NDArray[np.intp]) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """FGD's score of placing ``pod`` on each of ``rows``, and the GPU a share would take there."""
        cpu, gpu = self.cluster.cpu_free[rows], self.cluster.gpu_left[rows]
        before = self.fragmentation(cpu, gpu, rows)
        after_cpu = cpu - pod.cpu_milli
        if pod.shares_gpu:
            # One candidate per GPU: take the share from GPU j.
            variants = np.repeat(gpu[:, None, :], gpu.shape[1], axis=1)
            eye = np.eye(gpu.shape[1], dtype=np.bool_)[None, :, :]
            variants = np.where(eye, variants - pod.gpu_milli, variants)
            fits = np.diagonal(variants, axis1=1, axis2=2) >= 0
            after = self.fragmentation(np.repeat(after_cpu[:, None], gpu.shape[1], axis=1), variants, rows)
            score = np.floor(_sigmoid((before[:, None] - after) / 1000) * 100)
            score = np.where(fits, score, -1.0)
            # The first GPU with the best score, as FGD takes it.
            return score.max(axis=1), score.argmax(axis=1).astype(np.int64)
        after_gpu = gpu.copy()
        if pod.gpus:
            # Sub packs the least-left GPUs that fit first: for whole GPUs, free ones become 0.
            order = np.argsort(np.where(after_gpu >= pod.gpu_milli, after_gpu, np.inf), axis=1, kind="stable")
            take = order[:, : pod.gpus]
            np.put_along_axis(after_gpu, take, np.take_along_axis(after_gpu, take, axis=1) - pod.gpu_milli, axis=1)
        node_score = np.floor(_sigmoid((before - self.fragmentation(after_cpu, after_gpu, rows)) / 1000) * 100)
        return node_score, np.zeros(len(rows), dtype=np.int64)


def _sigmoid(values: FloatArray) -> FloatArray:
    result: FloatArray = 1.0 / (1.0 + np.exp(-values))
    return result


def pending_pod(key: str, pod: TracePod, *, labels: dict[str, str] | None = None) -> PendingPod:
    """The trace pod as the service is asked about it: its kubelet model, NUMA intent and GPU models."""
    return PendingPod(
        namespace=NAMESPACE,
        name=key,
        pod=kubelet_pod(pod),
        intent=PodIntent(policy=pod.intent),
        labels={} if labels is None else labels,
        priority=pod.priority,
        constraints=PodConstraints(node_affinity=gpu_model_affinity(pod)),
    )


def gang_member(key: str, pod: TracePod, *, group: str, size: int) -> PendingPod:
    """A member of gang ``group`` of ``size`` members, labelled as the service reads gang membership."""
    return pending_pod(key, pod, labels={GROUP_NAME_KEY: group, MIN_AVAILABLE_KEY: str(size)})


class Ours:
    """The placement service itself: ``Reservations.decide`` over a ``ClusterIndex`` of the trace nodes.

    With ``gangs``, a gang goes through the service's ``GangCoordinator`` (``placement.state.gang_coordinator``): its
    members are planned together and reserved all or nothing; without, each member is decided alone.
    The fragmentation score measures against ``workload``'s shapes by frequency, as FGD's does; with
    ``workload`` None, against what the service's own model learns from the pods it places.
    """

    def __init__(self, cluster: SimCluster, *, gangs: bool, workload: Sequence[TracePod] | None) -> None:
        self.name = "ours-gang" if gangs else "ours"
        self.gang_coordination = gangs
        self.index = ClusterIndex(
            initial_capacity=max(64, 1 << math.ceil(math.log2(len(cluster.names)))),
            workload=None if workload is None else WorkloadModel.fixed(Counter(pod_shape(p) for p in workload)),
        )
        for node in cluster.nodes:
            self.index.upsert_topology(node.name, node_topology(node, numa=cluster.numa))
            self.index.facts.set_node(NodeFacts(node.name, labels=node_labels(node)))
        self.reservations = Reservations(self.index, ttl_s=1e12, clock=lambda: 0.0)
        # No permit timeout: the simulator binds a reserved gang at once.
        self.coordinator = GangCoordinator(
            self.index, self.reservations, config=GangConfig(permit_timeout_s=1e12), clock=lambda: 0.0
        )
        self.rows = {name: row for row, name in enumerate(cluster.names)}

    def choose(self, key: str, pod: TracePod, candidate_names: Iterable[str] | None = None) -> Choice | None:
        """``candidate_names``: only these nodes (a preemptor on the node its victims freed); None: all."""
        placement = self.reservations.decide(pending_pod(key, pod), candidate_names).placement
        if placement is None:
            return None
        return Choice(self.rows[placement.node], placement.gpus, placement.cells)

    def choose_gang(
        self,
        group: str,
        keys: Sequence[str],
        pods: Sequence[TracePod],
        candidate_names: Iterable[str] | None = None,
    ) -> list[Choice] | None:
        """Where each member of a gang goes, all reserved at once; None when the gang does not fit."""
        for key, pod in zip(keys, pods, strict=True):
            self.coordinator.add_member(gang_member(key, pod, group=group, size=len(pods)))
        placement = self.coordinator.place(NAMESPACE, group, candidate_names)
        if not isinstance(placement, GangPlacement):
            for key in keys:  # a gang that cannot start now never comes back in this simulation
                self.coordinator.observe_deleted(NAMESPACE, key)
            return None
        where = {member.name: member for member in placement.members}
        return [Choice(self.rows[where[k].node], where[k].gpus, where[k].cells) for k in keys]

    def keep(self, key: str) -> None:
        # Bind at once: a bound pod leaves the reservation list, which every decision scans for expiry, and
        # only a bound pod can be preempted; the coordinator also marks a gang member bound.
        held = self.index.pod(NAMESPACE, key)
        if held is not None:
            self.reservations.observe_pod(held[0])
            self.coordinator.observe_bound(held[0])

    def forget(self, key: str) -> None:
        self.coordinator.observe_deleted(NAMESPACE, key)
        self.reservations.observe_pod_deleted(NAMESPACE, key)
        # Releasing a bound pod's charge leaves what the constraint plugins and preemption read of it (its
        # PlacedPod) for the pod watch to remove; here nothing else will.
        self.index.facts.remove_pod(NAMESPACE, key)


POLICY_NAMES = (
    "default",
    "nrt-LeastNUMANodes",
    "nrt-MostAllocated",
    "gpuallocator",
    "random",
    "bestfit",
    "fgd",
    "ours",
    "ours-gang",
)


def make_policy(
    name: str,
    cluster: SimCluster,
    rng: random.Random,
    workload: Sequence[TracePod],
    *,
    learned_workload: bool = False,
) -> Policy:
    if name == "default":
        return DefaultScheduler(cluster, rng)
    if name.startswith("nrt-"):
        return NodeResourceTopologyMatch(cluster, rng, strategy=name.removeprefix("nrt-"))
    if name == "gpuallocator":
        return GpuAllocator(cluster, rng)
    if name == "random":
        return RandomFit(cluster, rng)
    if name == "bestfit":
        return BestFit(cluster, rng)
    if name == "fgd":
        return Fgd(cluster, rng, workload)
    if name in ("ours", "ours-gang"):
        return Ours(cluster, gangs=name == "ours-gang", workload=None if learned_workload else workload)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
