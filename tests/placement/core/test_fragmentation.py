"""The fragmentation component: FGD's measure, hand-checked placements, shape weights, the workload model."""

from __future__ import annotations

import numpy as np
import pytest

from placement.core.constraints.constraint_types import NodeFacts
from placement.core.fragmentation import expected_fragmentation, least_fragmenting_gpu
from placement.core.gpu_sets import choose_shared_gpu
from placement.core.pods import PendingPod, PodUsage
from placement.core.scoring import score_nodes
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import (
    DEFAULT_SHAPES,
    GPU_MILLI,
    GPU_SHARE,
    PodShape,
    TargetWorkload,
    demand_of,
    shape_of,
)
from placement.sim.trace import TraceNode, node_labels, node_topology
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from placement.state.workload import WorkloadModel

MIB = 1 << 20


def _pod(cpus: float, *, gpus: int = 0, share: int = 0) -> Pod:
    devices: tuple[tuple[str, int], ...] = ()
    if gpus:
        devices = (("nvidia.com/gpu", gpus),)
    elif share:
        devices = ((GPU_SHARE, share),)
    container = Container("c", cpu_millis=int(cpus * 1000), memory=1024 * MIB, devices=devices)
    return Pod(containers=(container,), qos=QOSClass.BURSTABLE)


def _node(name: str, gpus: int, cpus: int = 96) -> TraceNode:
    return TraceNode(name, cpus * 1000, 512 * 1024, gpus, "T4")


def _index(nodes: list[TraceNode], workload: dict[PodShape, float]) -> ClusterIndex:
    index = ClusterIndex(workload=WorkloadModel.fixed(workload))
    for node in nodes:
        index.upsert_topology(node.name, node_topology(node, numa=False))
    return index


def _component(grown: list[float]) -> list[float]:
    """The component for fragmentation grown by ``grown`` thousandths: sigmoid(-grown / 1000) in 1/100 steps."""
    return [np.floor(100 / (1 + np.exp(g / GPU_MILLI))) / 100 for g in grown]


def _reference(shapes: list[tuple[PodShape, float]], cpu_left: float, gpu_left: list[float]) -> float:
    """FGD's definition, shape by shape (Weng et al., section 4)."""
    total = sum(gpu_left)
    expected = 0.0
    for shape, frequency in shapes:
        usable = [g for g in gpu_left if g >= shape.gpu_milli] if shape.gpus else []
        runs = shape.gpus > 0 and len(usable) >= shape.gpus and cpu_left >= shape.cpu_milli
        expected += frequency * (total - sum(usable) if runs else total)
    return expected


def test_expected_fragmentation_is_fgds_measure() -> None:
    rng = np.random.default_rng(7)
    cpus = [0.0, 2000.0, 8000.0, 32000.0]
    shapes: dict[PodShape, float] = {}
    for _ in range(40):
        kind = rng.integers(3)
        cpu = float(rng.choice(cpus))
        shape = (
            PodShape(cpu, 0, 0)
            if kind == 0
            else PodShape(cpu, int(rng.choice([100, 250, 500, 810, 1000])), 1)
            if kind == 1
            else PodShape(cpu, GPU_MILLI, int(rng.integers(1, 9)))
        )
        shapes[shape] = shapes.get(shape, 0.0) + float(rng.random())
    workload = TargetWorkload.of(shapes)
    gpu_left = rng.choice([0.0, 190.0, 500.0, 750.0, 1000.0, 1000.0], size=(300, 8))
    cpu_left = rng.choice([0.0, 1500.0, 8000.0, 40000.0], size=300)
    measured = expected_fragmentation(workload, cpu_left, gpu_left)
    expected = [_reference(list(workload.shapes), c, g.tolist()) for c, g in zip(cpu_left, gpu_left, strict=True)]
    assert measured == pytest.approx(expected)


@pytest.mark.parametrize("pod", [_pod(6), _pod(6, gpus=2), _pod(6, share=300)], ids=["cpu", "gpus", "share"])
def test_the_component_is_the_fall_in_fgds_measure(pod: Pod) -> None:
    # The component works on the measure incrementally; here the measure is taken before and after.
    rng = np.random.default_rng(3)
    shapes = {
        PodShape(float(c), int(m), 1 if m < GPU_MILLI else int(g)): float(w)
        for c, m, g, w in zip(
            rng.choice([0, 4000, 8000, 16000], 30),
            rng.choice([200, 500, 700, 1000, 1000], 30),
            rng.integers(1, 9, 30),
            rng.random(30),
            strict=True,
        )
    }
    shapes[PodShape(2000, 0, 0)] = 0.3
    index = _index([_node(f"n{i}", 8) for i in range(200)], shapes)
    rows = index.slots()
    index.gpu_left[rows] = rng.choice([0, 100, 300, 500, 700, 1000, 1000, 1000], size=(200, 8))
    index.node_free[0, rows] = rng.choice([3000.0, 6000.0, 9000.0, 14000.0, 20000.0], size=200)
    arrays = index.arrays()
    demand = demand_of(pod)
    shape = shape_of(demand)
    fits = (index.gpu_left[rows] >= shape.gpu_milli).sum(axis=1) >= max(shape.gpus, 1)
    rows = rows[fits]
    gpu = index.gpu_left[rows].astype(np.float64)
    cpu = index.node_free[0, rows]
    workload = TargetWorkload.of(shapes)
    before = expected_fragmentation(workload, cpu, gpu)
    after_cpu = cpu - shape.cpu_milli
    if shape.gpus == 0:
        after = expected_fragmentation(workload, after_cpu, gpu)
    elif shape.gpu_milli == GPU_MILLI:
        taken = gpu.copy()
        for row in taken:
            row[np.flatnonzero(row == GPU_MILLI)[: shape.gpus]] = 0
        after = expected_fragmentation(workload, after_cpu, taken)
    else:  # the best GPU for the share
        variants = []
        for g in range(8):
            moved = gpu.copy()
            moved[:, g] -= shape.gpu_milli
            measured = expected_fragmentation(workload, after_cpu, np.maximum(moved, 0))
            variants.append(np.where(gpu[:, g] >= shape.gpu_milli, measured, np.inf))
        after = np.min(variants, axis=0)
    expected = np.floor(100 / (1 + np.exp((after - before) / GPU_MILLI))) / 100
    assert score_nodes(arrays, rows, demand).components["fragmentation"] == pytest.approx(expected)
    assert len(set(expected.tolist())) > 5  # the nodes differ


def test_hand_checked_fragmentation() -> None:
    # Half the pods want one whole GPU, half want 600 thousandths of one.
    workload = TargetWorkload.of({PodShape(1000, GPU_MILLI, 1): 1, PodShape(1000, 600, 1): 1})
    # GPUs left 1000, 700, 300: the whole-GPU shape cannot use the 700 and 300 (1000 of fragments), the
    # share cannot use the 300: 0.5 * 1000 + 0.5 * 300.
    assert expected_fragmentation(workload, np.array([8000.0]), np.array([[1000.0, 700.0, 300.0]])) == [650.0]
    # Without the CPUs either shape needs, every thousandth left is a fragment.
    assert expected_fragmentation(workload, np.array([500.0]), np.array([[1000.0, 700.0, 300.0]])) == [2000.0]


def test_a_gpu_pod_fills_the_half_used_node_rather_than_break_a_whole_one() -> None:
    workload = {PodShape(8000, GPU_MILLI, 8): 0.5, PodShape(8000, GPU_MILLI, 1): 0.5}
    index = _index([_node("whole", 8), _node("half", 8)], workload)
    usage = PodUsage("ns", "four", "half", demand_of(_pod(8, gpus=4)), cells=(0,), gpus=(0, 1, 2, 3))
    index.upsert_pod(usage)
    scores = score_nodes(index.arrays(), index.slots(["whole", "half"]), demand_of(_pod(8, gpus=1)))
    # "whole" would no longer hold an 8-GPU pod: its 7 GPUs left become fragments for half the workload
    # (+3500); on "half" the 4 GPUs left were fragments for it already, and one fewer is left (-500).
    assert scores.components["fragmentation"] == pytest.approx(_component([3500, -500]))
    assert Reservations(index).decide(PendingPod("ns", "one", _pod(8, gpus=1))).node == "half"


@pytest.mark.parametrize(
    ("two_gpu_share", "expected"),
    [(0.9, "four"), (0.2, "two")],
)
def test_shape_weights_decide_which_node_keeps_its_gpus(two_gpu_share: float, expected: str) -> None:
    # One GPU from a 2-GPU node grows fragmentation by 1000 x (p2 - p4); from a 4-GPU node by 3000 x p4.
    workload = {PodShape(1000, GPU_MILLI, 2): two_gpu_share, PodShape(1000, GPU_MILLI, 4): 1 - two_gpu_share}
    index = _index([_node("two", 2), _node("four", 4)], workload)
    p2, p4 = two_gpu_share, 1 - two_gpu_share
    scores = score_nodes(index.arrays(), index.slots(["two", "four"]), demand_of(_pod(1, gpus=1)))
    grown = [1000 * (p2 - p4), 3000 * p4]
    assert scores.components["fragmentation"] == pytest.approx(_component(grown))
    assert Reservations(index).decide(PendingPod("ns", "one", _pod(1, gpus=1))).node == expected


def test_a_share_goes_where_the_workloads_shares_still_fit() -> None:
    # Best fit puts 400 on the GPU with 700 left, leaving 300 no 600-share can use; the fragmentation-aware
    # choice takes the free GPU, leaving 600 and 700: both usable.
    workload = TargetWorkload.of({PodShape(0, 600, 1): 1})
    left = {0: 1000, 1: 700}
    assert choose_shared_gpu(left, 400) == 1
    assert least_fragmenting_gpu(workload, 8000, left, left, 400) == 0
    assert least_fragmenting_gpu(workload, 8000, left, {1}, 400) == 1  # the kubelet pins it elsewhere
    assert least_fragmenting_gpu(workload, 8000, left, left, 800) == 0
    assert least_fragmenting_gpu(workload, 8000, left, left, 1001) is None


def test_a_cpu_pod_keeps_off_the_cpus_gpu_pods_need() -> None:
    workload = {PodShape(16000, GPU_MILLI, 8): 1.0}
    index = _index([_node("gpu", 8, cpus=20), _node("cpu", 0, cpus=20)], workload)
    scores = score_nodes(index.arrays(), index.slots(["gpu", "cpu"]), demand_of(_pod(8)))
    # On "gpu" the 8-GPU pods would lack CPUs: all 8 GPUs become fragments.
    assert scores.components["fragmentation"].tolist() == pytest.approx([*_component([8000]), 0.5])
    assert Reservations(index).decide(PendingPod("ns", "web", _pod(8))).node == "cpu"


def test_the_index_keeps_what_each_gpu_has_left() -> None:
    index = _index([_node("n", 8)], dict(DEFAULT_SHAPES))
    slot = index.slot_of("n")
    assert slot is not None
    index.upsert_pod(PodUsage("ns", "share", "n", demand_of(_pod(1, share=300)), cells=(1,), gpus=(5,)))
    index.upsert_pod(PodUsage("ns", "whole", "n", demand_of(_pod(1, gpus=1)), cells=(1,), gpus=(6,)))
    # Two GPUs in cell 0 given out by the device plugin to a pod whose GPUs we do not know.
    index.upsert_pod(PodUsage("ns", "unknown", "n", demand_of(_pod(1, gpus=2)), cells=(0,)))
    assert index.arrays().gpu_left is not None
    assert index.gpu_left[slot].tolist() == [1000, 1000, 0, 0, 1000, 700, 0, 1000]
    index.remove_pod("ns", "share")
    assert index.gpu_left[slot].tolist() == [1000, 1000, 0, 0, 1000, 1000, 0, 1000]


def test_shapes_of_pods() -> None:
    assert shape_of(demand_of(_pod(2, gpus=4))) == PodShape(2000, GPU_MILLI, 4)
    assert shape_of(demand_of(_pod(0.5, share=250))) == PodShape(500, 250, 1)
    assert shape_of(demand_of(_pod(3))) == PodShape(3000, 0, 0)
    with pytest.raises(ValueError, match="ONE GPU"):
        PodShape(0, 500, 2)


def test_the_workload_model_learns_and_forgets() -> None:
    model = WorkloadModel(prior_pods=10, half_life_pods=100, refresh_pods=1)
    assert dict(model.target().shapes) == pytest.approx(dict(DEFAULT_SHAPES))
    eight = demand_of(_pod(8, gpus=8))
    for _ in range(200):
        model.observe(eight)
    heaviest, share = model.target().shapes[0]
    assert heaviest == PodShape(8000, GPU_MILLI, 8)
    # Pod weights halve every 100 pods: the 200 pods sum to (1 - 2**-2) / (1 - 2**-0.01) times the last one's;
    # the prior, 10 pods' worth, is as old as the first pod.
    eights = (1 - 2**-2) / (1 - 2**-0.01)
    assert share == pytest.approx(eights / (eights + 10 * 2**-1.99))
    half = demand_of(_pod(1, share=500))
    for _ in range(100):
        model.observe(half)
    # The last half-life's pods weigh 1 - 1/2, the 200 before them 1/2 - 1/8 (a geometric series).
    weights = dict(model.target().shapes)
    assert weights[PodShape(1000, 500, 1)] / weights[PodShape(8000, GPU_MILLI, 8)] == pytest.approx(0.5 / 0.375)


def test_the_workload_model_refreshes_in_batches_and_a_fixed_one_never_learns() -> None:
    model = WorkloadModel(refresh_pods=4)
    before = model.target()
    model.observe(demand_of(_pod(1, gpus=2)))
    assert model.target() is not before  # the first pods: after each one
    for _ in range(63):
        model.observe(demand_of(_pod(1, gpus=2)))
    before = model.target()  # 64 pods seen: every 4 pods from the next rebuild on
    while model.target() is before:
        model.observe(demand_of(_pod(1, gpus=2)))
    before = model.target()
    for _ in range(3):
        model.observe(demand_of(_pod(1, gpus=2)))
    assert model.target() is before
    model.observe(demand_of(_pod(1, gpus=2)))
    assert model.target() is not before
    fixed = WorkloadModel.fixed({PodShape(0, 0, 0): 1})
    fixed.observe(demand_of(_pod(1, gpus=2)))
    assert fixed.target().shapes == ((PodShape(0, 0, 0), 1.0),)


def test_the_index_counts_each_pod_once() -> None:
    index = ClusterIndex(workload=WorkloadModel(refresh_pods=1))
    index.upsert_topology("n", node_topology(_node("n", 8), numa=False))
    usage = PodUsage("ns", "p", "n", demand_of(_pod(1, gpus=2)))
    index.assume_pod(usage)
    index.upsert_pod(usage)  # the watch shows the reserved pod bound
    assert index.workload.observed == 1


def test_a_share_stays_in_the_cell_of_its_cpus_where_the_kubelet_pins_nothing() -> None:
    # Policy none pins nothing: the CPUs land where the score predicts (cell 1, fuller since GPU 4 is
    # taken), and the GPU must be there too, although GPU 0 fragments no more than GPU 5 and has a lower index.
    index = _index([_node("n", 8)], dict(DEFAULT_SHAPES))
    index.upsert_pod(PodUsage("ns", "whole", "n", demand_of(_pod(1, gpus=1)), cells=(1,), gpus=(4,)))
    pod = Pod(
        containers=(Container("c", cpu_millis=4000, memory=1024 * MIB, devices=((GPU_SHARE, 400),)),),
        qos=QOSClass.GUARANTEED,
    )
    decision = Reservations(index).decide(PendingPod("ns", "share", pod))
    assert decision.placement is not None
    assert not decision.placement.pinned
    assert decision.placement.cells == (1,)
    assert decision.placement.gpus == (5,)


def test_a_shape_naming_gpu_models_counts_a_node_of_another_model_as_lost() -> None:
    # Half the pods want a whole T4, half any whole GPU (the FGD simulator's NoAccess for the first).
    workload = TargetWorkload.of({PodShape(1000, GPU_MILLI, 1, ("T4",)): 1, PodShape(1000, GPU_MILLI, 1): 1})
    assert workload.constrained
    assert workload.for_model("T4") is workload.for_model("T4")
    cpu, free = np.array([8000.0]), np.array([[1000.0, 1000.0]])
    assert expected_fragmentation(workload.for_model("T4"), cpu, free) == [0.0]
    assert expected_fragmentation(workload.for_model("V100M16"), cpu, free) == [1000.0]
    assert expected_fragmentation(workload.for_model(None), cpu, free) == [1000.0]  # a node of unknown model
    plain = TargetWorkload.of({PodShape(1000, GPU_MILLI, 1): 1})
    assert not plain.constrained
    assert plain.for_model("T4") is plain
    with pytest.raises(ValueError, match="accepts no GPU model"):
        PodShape(1000, 0, 0, ("T4",))


def test_a_pod_any_model_runs_goes_where_the_model_bound_shapes_lose_least() -> None:
    # Every pod of the workload wants a T4. A pod that runs anywhere breaks nothing they need on the V100
    # node (its GPUs are lost to them anyway) and one of their GPUs on the T4 node.
    workload = {PodShape(1000, GPU_MILLI, 1, ("T4",)): 1.0}
    nodes = [TraceNode("t4", 96_000, 512 * 1024, 2, "T4"), TraceNode("v100", 96_000, 512 * 1024, 2, "V100M16")]
    index = _index(nodes, workload)
    for node in nodes:
        index.facts.set_node(NodeFacts(node.name, labels=node_labels(node)))
    scores = score_nodes(index.arrays(), index.slots(["t4", "v100"]), demand_of(_pod(1, gpus=1)))
    assert scores.components["fragmentation"] == pytest.approx(_component([0, -1000]))
    assert Reservations(index).decide(PendingPod("ns", "any", _pod(1, gpus=1))).node == "v100"


def test_the_workload_model_learns_the_gpu_models_pods_accept() -> None:
    model = WorkloadModel(prior={PodShape(1000, GPU_MILLI, 1): 1.0}, prior_pods=1, refresh_pods=1)
    assert not model.target().constrained
    demand = demand_of(_pod(2, gpus=1))
    model.observe(demand, ("T4",))
    model.observe(demand_of(_pod(2)), ("T4",))  # a pod without GPUs names no model, whatever its rules
    shapes = dict(model.target().shapes)
    assert PodShape(2000, GPU_MILLI, 1, ("T4",)) in shapes
    assert PodShape(2000, 0, 0) in shapes
    assert model.target().constrained
