"""The FGD port (``placement.sim.policies.Fgd``) against the FGD simulator's rules, case by case.

Rules from the FGD artifact (hkust-adsl/kubernetes-scheduler-simulator): pkg/utils/frag.go
(``GetNodePodFrag``, ``NodeGpuShareFragAmount``), pkg/utils/utils.go (``IsNodeAccessibleToPod``) and
pkg/simulator/plugin/fgd_score.go; checked here on clusters small enough to work out by hand.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from placement.sim.cluster import SimCluster
from placement.sim.policies import BestFit, Fgd, typical_pods
from placement.sim.trace import TraceNode, TracePod, load_nodes, load_pods
from tests import TESTS

GPU_SPEC_NODES = TESTS / "sim_traces" / "gpu_spec_nodes.csv"
GPU_SPEC_PODS = TESTS / "sim_traces" / "gpu_spec_pods.csv"


def _pod(name: str, *, cpu: int = 4000, gpus: int = 1, milli: int = 1000, models: tuple[str, ...] = ()) -> TracePod:
    return TracePod(name, cpu, 8192, gpus, milli if gpus else 0, False, gpu_models=models)


def _fgd(nodes: list[TraceNode], workload: list[TracePod]) -> Fgd:
    return Fgd(SimCluster(nodes, numa=False), random.Random(0), workload)


def _frag(policy: Fgd) -> np.ndarray:
    rows = np.arange(len(policy.cluster.names))
    return policy.fragmentation(policy.cluster.cpu_free, policy.cluster.gpu_left, rows)


def test_gpu_models_are_part_of_a_typical_pod() -> None:
    workload = [_pod("a", models=("T4",)), _pod("b"), _pod("c", models=("T4",)), _pod("d", gpus=0)]
    typical = typical_pods(workload)
    assert sorted((t.gpus, t.gpu_models, t.share) for t in typical) == [(0, (), 0.25), (1, (), 0.25), (1, ("T4",), 0.5)]


def test_typical_pods_cover_the_popularity_threshold_and_are_renormalised() -> None:
    # GetTypicalPods with podPopularityThreshold 95: 19 pods of one shape cover 95% of 20, so the rare
    # shape is left out and the kept one weighs 1; at 100 both are kept, by frequency.
    workload = [_pod(f"a{i}") for i in range(19)] + [_pod("rare", gpus=8)]
    assert [(t.gpus, t.share) for t in typical_pods(workload)] == [(1, 1.0)]
    assert [(t.gpus, t.share) for t in typical_pods(workload, 100)] == [(1, 0.95), (8, 0.05)]
    # A pod asking for no CPU counts as kube-scheduler's non-zero default, 100 millicores.
    assert typical_pods([_pod("zero", cpu=0)])[0].cpu_milli == 100


def test_a_model_set_written_another_way_is_a_shape_of_its_own_as_the_artifact_keys_it() -> None:
    # PodResource.GpuType is the pod's annotation as written: "V100M16|V100M32|V100M32" is not grouped with
    # "V100M16|V100M32" (both accept the same nodes), so each is counted, and cut, on its own.
    plain = [replace(_pod(f"p{i}", models=("V100M16", "V100M32")), gpu_spec="V100M16|V100M32") for i in range(3)]
    twice = replace(_pod("t", models=("V100M16", "V100M32")), gpu_spec="V100M16|V100M32|V100M32")
    typical = typical_pods([*plain, twice], 100)
    models = ("V100M16", "V100M32")
    assert [(t.gpu_models, t.share) for t in typical] == [(models, 0.75), (models, 0.25)]
    # At 75% of four pods the three plain ones suffice: the other spelling is cut.
    assert [(t.gpu_models, t.share) for t in typical_pods([*plain, twice], 75)] == [(models, 1.0)]


def test_among_equally_rare_shapes_the_cut_keeps_the_larger_as_the_artifacts_reverse_sort_does() -> None:
    # 18 pods of one shape and two singletons: 95% of 20 is 19, so the cut keeps one singleton. GetTypicalPods
    # sorts with sort.Reverse(TargetPodList): equal counts fall in the reverse of PodResource.Less, the larger
    # CPU first, so the 8-core singleton is kept, not the 2-core one (nor the 1-GPU before the 2-GPU).
    common = [_pod(f"a{i}") for i in range(18)]
    kept = typical_pods([*common, _pod("small", cpu=2000), _pod("large", cpu=8000)])
    assert [(t.cpu_milli, t.share) for t in kept] == [(4000, 18 / 19), (8000, 1 / 19)]
    kept = typical_pods([*common, _pod("one", cpu=2000, gpus=1), _pod("two", cpu=2000, gpus=2)])
    assert [(t.gpus, t.cpu_milli) for t in kept] == [(1, 4000), (2, 2000)]


def test_ties_go_to_the_node_whose_name_sorts_first() -> None:
    # The FGD simulator's selectHost breaks ties by the lowest node name (not at random): two empty,
    # identical nodes, the second named first, always get the pod there, under FGD and BestFit alike.
    nodes = [TraceNode("node-b", 32000, 131072, 4, "T4"), TraceNode("node-a", 32000, 131072, 4, "T4")]
    for seed in range(5):
        for policy in (
            Fgd(SimCluster(nodes, numa=False), random.Random(seed), [_pod("p")]),
            BestFit(SimCluster(nodes, numa=False), random.Random(seed)),
        ):
            choice = policy.choose("p", _pod("p"))
            assert choice is not None
            assert choice.node == 1


def test_a_node_of_another_model_is_wholly_fragmented_for_the_pod() -> None:
    # Two empty 4-GPU nodes, one V100M16 and one T4; the workload is one shape: a whole T4 GPU.
    nodes = [TraceNode("v100", 32000, 131072, 4, "V100M16"), TraceNode("t4", 32000, 131072, 4, "T4")]
    policy = _fgd(nodes, [_pod("p", models=("T4",))])
    # GetNodePodFrag: NoAccess on the V100 node, so all 4,000 thousandths count; the T4 node runs it: none.
    assert _frag(policy).tolist() == [4000.0, 0.0]
    # Without the model in the shape both nodes run it.
    assert _frag(_fgd(nodes, [_pod("p")])).tolist() == [0.0, 0.0]


def test_cpu_only_shapes_count_every_idle_gpu_and_small_gpus_count_for_larger_shapes() -> None:
    nodes = [TraceNode("n", 32000, 131072, 2, "T4")]
    workload = [_pod("cpu", gpus=0), _pod("share", milli=600)]
    policy = _fgd(nodes, workload)
    policy.cluster.gpu_left[0, :2] = [500.0, 1000.0]
    # CPU-only (XL): all 1,500 idle thousandths, weight 1/2; the 600-thousandths share runs on GPU 1, so
    # only GPU 0's 500 (too small for it) count, weight 1/2.
    assert _frag(policy).tolist() == [0.5 * 1500 + 0.5 * 500]


def test_kept_scores_equal_scores_computed_afresh() -> None:
    # After every placement, the scores the port keeps per pod shape equal the ones a fresh port computes
    # on the same cluster state (the cache is only a cache).
    nodes, pods = load_nodes(GPU_SPEC_NODES), load_pods(GPU_SPEC_PODS)
    kept = _fgd(nodes, pods)
    rng = random.Random(1)
    for step in range(40):
        pod = pods[rng.randrange(len(pods))]
        choice = kept.choose(f"p{step}", pod)
        if choice is None:
            continue
        fresh = Fgd(kept.cluster, random.Random(0), pods)
        feasible = kept.cluster.fits(pod)
        rows = np.flatnonzero(feasible)
        expected, best = fresh._score_rows(pod, rows)
        shape = kept._scores(pod, feasible)
        assert shape.scores[rows].tolist() == expected.tolist()
        if pod.shares_gpu:
            assert shape.best_gpu[rows].tolist() == best.tolist()
        kept.cluster.apply(choice.node, pod, choice.gpus, ())
