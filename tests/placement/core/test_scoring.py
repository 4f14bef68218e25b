"""Scoring: the fit curve, the breakdown adding up to the total, weights, and the components' meaning."""

from __future__ import annotations

import numpy as np
import pytest

from placement.core.pods import PodUsage
from placement.core.scoring import SWEET_SPOT, ScoringWeights, fit_curve, score_nodes
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import GPU_SHARE, demand_of
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import GIB, cpu_node, kubelet, nvswitch_node

CPU_POD = Pod(containers=(Container("c", cpu_millis=8000, memory=32 * GIB),), qos=QOSClass.GUARANTEED)


def _gpu_pod(*, gpus: int = 0, share: int = 0) -> Pod:
    """8 CPUs with ``gpus`` whole GPUs, or ``share`` thousandths of one."""
    devices = (("nvidia.com/gpu", gpus),) if gpus else ((GPU_SHARE, share),)
    return Pod(containers=(Container("c", cpu_millis=8000, memory=GIB, devices=devices),), qos=QOSClass.GUARANTEED)


def _index() -> ClusterIndex:
    index = ClusterIndex()
    index.upsert_topology("cpu", cpu_node())
    index.upsert_topology("gpu", nvswitch_node())
    index.upsert_topology("wide", cpu_node(cells=2, cpus_per_cell=4, settings=kubelet("best-effort")))
    return index


def test_fit_curve_peaks_at_the_sweet_spot() -> None:
    values = fit_curve(np.array([0.0, SWEET_SPOT / 2, SWEET_SPOT, 1.0, 1.5]))
    assert values.tolist() == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.5])


def test_breakdown_adds_up_to_the_total() -> None:
    index = _index()
    scores = score_nodes(index.arrays(), index.slots(), demand_of(CPU_POD))
    for position in range(len(scores.rows)):
        breakdown = scores.breakdown(position)
        assert set(breakdown) == {"fit", "bandwidth", "distance", "gang", "fragmentation"}
        assert sum(breakdown.values()) == pytest.approx(scores.total[position])


def test_weights_change_the_total() -> None:
    index = _index()
    rows = index.slots()
    default = score_nodes(index.arrays(), rows, demand_of(CPU_POD))
    only_fit = score_nodes(index.arrays(), rows, demand_of(CPU_POD), weights=ScoringWeights(1, 0, 0, 0, 0))
    assert only_fit.total == pytest.approx(100 * default.components["fit"])
    assert not np.allclose(only_fit.total, default.total)
    with pytest.raises(ValueError, match="non-negative"):
        ScoringWeights(fit=-1)


def test_spanning_pods_lose_on_distance_and_gang_counts() -> None:
    index = _index()
    rows = index.slots(["cpu", "wide"])
    pod = Pod(containers=(Container("c", cpu_millis=6000, memory=GIB),), qos=QOSClass.GUARANTEED)
    scores = score_nodes(index.arrays(), rows, demand_of(pod), gang=np.array([0.0, 1.0]))
    # 6 CPUs fit one 32-CPU cell of "cpu" but need both 4-CPU cells of "wide": SLIT 10/21 average.
    assert scores.landing_cell.tolist() == [0, -1]
    assert scores.components["distance"].tolist() == pytest.approx([1.0, 10 / 15.5])
    weights = ScoringWeights().as_dict()
    assert scores.breakdown(1)["gang"] == pytest.approx(100 * weights["gang"] / sum(weights.values()))
    assert scores.breakdown(0)["gang"] == 0.0


def test_fit_on_gpu_nodes_is_the_gpus_taken_for_a_cpu_pod_and_neutral_for_a_gpu_pod() -> None:
    index = _index()
    scores = score_nodes(index.arrays(), index.slots(["cpu", "gpu"]), demand_of(CPU_POD))
    # "cpu": 8 of 32 CPUs and 32 of 256 GiB in cell 0; "gpu": none of its 8 GPUs taken yet.
    assert scores.components["fit"].tolist() == pytest.approx([fit_curve(np.array([(8 / 32 + 32 / 256) / 2]))[0], 0.0])
    assert scores.components["fragmentation"][0] == 0.5  # no GPU on "cpu": nothing to fragment
    # Two GPUs held whole and 300 thousandths of a third: 2.3 of 8 taken.
    index.upsert_pod(PodUsage("ns", "two", "gpu", demand_of(_gpu_pod(gpus=2)), cells=(0,), gpus=(0, 1)))
    index.upsert_pod(PodUsage("ns", "share", "gpu", demand_of(_gpu_pod(share=300)), cells=(0,), gpus=(2,)))
    taken = score_nodes(index.arrays(), index.slots(["cpu", "gpu"]), demand_of(CPU_POD)).components["fit"]
    assert taken[1] == pytest.approx(2.3 / 8)
    assert taken[0] == scores.components["fit"][0]  # a node without GPUs keeps its cell fit
    # A pod asking for GPUs leaves the packing of GPU nodes to the fragmentation component.
    gpu_fit = score_nodes(index.arrays(), index.slots(["gpu"]), demand_of(_gpu_pod(gpus=1))).components["fit"]
    assert gpu_fit.tolist() == [0.5]


def test_among_equally_fragmenting_gpu_nodes_a_cpu_pod_goes_where_gpus_are_taken() -> None:
    index = ClusterIndex()
    for name in ("idle", "busy"):
        index.upsert_topology(name, nvswitch_node())
    index.upsert_pod(PodUsage("ns", "four", "busy", demand_of(_gpu_pod(gpus=4)), cells=(0,), gpus=(0, 1, 2, 3)))
    small = Pod(containers=(Container("c", cpu_millis=1000, memory=GIB),), qos=QOSClass.BURSTABLE)
    scores = score_nodes(index.arrays(), index.slots(["idle", "busy"]), demand_of(small))
    assert scores.components["fragmentation"][0] == scores.components["fragmentation"][1]
    assert scores.total[1] > scores.total[0]
