"""Reservations: no double booking under concurrent decisions, stale reports, the reservation lifecycle."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import replace

import pytest

from kubenexus.topology.podfingerprint import pods_fingerprint
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.pods import PendingPod
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Decision, Reservations
from tests.machines.node_topologies import GIB, cpu_node, kubelet, nvswitch_node, with_usage


def _cells(decision: Decision) -> tuple[int, ...]:
    """The NUMA cells of a decision that placed its pod."""
    assert decision.placement is not None
    return decision.placement.cells


def _pod(cpus: int, *, memory_gib: int = 1, gpus: int = 0) -> Pod:
    devices = (("nvidia.com/gpu", gpus),) if gpus else ()
    container = Container("c", cpu_millis=cpus * 1000, memory=memory_gib * GIB, devices=devices)
    return Pod(containers=(container,), qos=QOSClass.GUARANTEED)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_concurrent_decisions_never_double_book() -> None:
    index = ClusterIndex()
    single = kubelet("single-numa-node", "pod", memory=True)
    for n in range(2):
        index.upsert_topology(f"cpu-{n}", cpu_node(cpus_per_cell=16, memory_per_cell=64 * GIB, settings=single))
    index.upsert_topology("gpu-0", nvswitch_node(cells=2, settings=single))
    reservations = Reservations(index)
    placed: list[str] = []
    lock = threading.Lock()

    def worker(thread: int) -> None:
        for i in range(200):
            pod = _pod(1 + (i % 4), memory_gib=2, gpus=(i % 3 == 0) * (1 + i % 2))
            decision = reservations.decide(PendingPod("ns", f"t{thread}-{i}", pod))
            if decision.placement is not None:
                assert len(decision.placement.cells) == 1  # single-numa-node pins every pod to one cell
                with lock:
                    placed.append(decision.placement.node)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert 0 < len(placed) < 1600  # the cluster filled up
    arrays = index.arrays()
    for node in index.node_names():
        slot = index.slot_of(node)
        assert slot is not None
        used: dict[tuple[int, int], float] = defaultdict(float)
        for usage, _, _ in index.pods_on(node):
            (cell,) = usage.cells
            position = [int(i) for i in arrays.cell_ids[slot]].index(cell)
            used[(0, position)] += usage.demand.exclusive_cpus
            used[(1, position)] += dict(usage.demand.memory_requests)["memory"]
            used[(4, position)] += dict(usage.demand.device_requests).get("nvidia.com/gpu", 0)
            assert all(
                arrays.cell_ids[slot][position] == next(g for g in [shape.numa_of[i] for i in usage.gpus])
                for shape in [index.gpu_shape(slot)]
                if shape is not None and usage.gpus
            )
        for (column, position), amount in used.items():
            assert amount <= arrays.cell_total[column, slot, position], (node, column, position)
        gpus = [i for usage, _, _ in index.pods_on(node) for i in usage.gpus]
        assert len(gpus) == len(set(gpus))  # no GPU handed out twice


def test_stale_report_keeps_the_reservation_subtracted() -> None:
    index = ClusterIndex()
    node = cpu_node(cells=2, cpus_per_cell=8, settings=kubelet("single-numa-node"))
    index.upsert_topology("n", with_usage(node, {}, pods_fingerprint([])))
    reservations = Reservations(index)
    first = reservations.decide(PendingPod("ns", "a", _pod(6)))
    assert (first.node, _cells(first)) == ("n", (0,))
    # The agent reports again before the kubelet runs the pod: its data shows cell 0 all free. Taken at
    # its word, the next pod would go to cell 0 too (the kubelet's lowest preferred cell) and fail there.
    index.upsert_topology("n", with_usage(node, {}, pods_fingerprint([])))
    second = reservations.decide(PendingPod("ns", "b", _pod(7)))
    assert (second.node, _cells(second)) == ("n", (1,))
    assert reservations.decide(PendingPod("ns", "c", _pod(3))).node is None
    # Bound, and a report that accounts for both: availability alone decides, nothing counted twice.
    for name in ("a", "b"):
        entry = index.pod("ns", name)
        assert entry is not None
        reservations.observe_pod(entry[0])
    accounted = pods_fingerprint([("ns", "a"), ("ns", "b")])
    index.upsert_topology("n", with_usage(node, {0: {"cpu": 6}, 1: {"cpu": 7}}, accounted))
    assert [entry[2] for entry in index.pods_on("n")] == [True, True]
    assert index.cell_free[0, index.slot_of("n") or 0, :2].tolist() == [2, 1]
    assert _cells(reservations.decide(PendingPod("ns", "c", _pod(2)))) == (0,)


def test_unbound_reservations_expire_and_bound_ones_stay() -> None:
    clock = Clock()
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cells=1, cpus_per_cell=8))
    reservations = Reservations(index, ttl_s=10, clock=clock)
    assert reservations.decide(PendingPod("ns", "a", _pod(4))).node == "n"
    bound = reservations.decide(PendingPod("ns", "b", _pod(4)))
    assert bound.node == "n"
    assert reservations.decide(PendingPod("ns", "c", _pod(4))).node is None
    usage = index.pod("ns", "b")
    assert usage is not None
    reservations.observe_pod(usage[0])
    clock.now = 10.0
    assert reservations.expire() == [("ns", "a")]
    assert reservations.pending() == {}
    assert index.pod("ns", "b") is not None
    assert reservations.decide(PendingPod("ns", "c", _pod(4))).node == "n"
    assert reservations.unreserve("ns", "c")
    assert not reservations.unreserve("ns", "b")  # bound: only deletion releases it
    reservations.observe_pod_deleted("ns", "b")
    assert index.pods_on("n") == []
    with pytest.raises(ValueError, match="TTL"):
        Reservations(index, ttl_s=0)


def test_decision_explains_itself_and_keeps_gpus_in_the_pinned_cell() -> None:
    index = ClusterIndex()
    index.upsert_topology("gpu", nvswitch_node(cells=4))
    index.upsert_topology("cpu", cpu_node())
    reservations = Reservations(index)
    decision = reservations.decide(PendingPod("ns", "train", _pod(8, gpus=2)))
    assert decision.placement is not None
    assert decision.node == "gpu"
    assert decision.placement.pinned
    (cell,) = decision.placement.cells
    shape = index.gpu_shape(index.slot_of("gpu") or 0)
    assert shape is not None
    assert {shape.numa_of[i] for i in decision.placement.gpus} == {cell}
    assert sum(decision.placement.breakdown.values()) == pytest.approx(decision.placement.score)
    assert decision.reasons() == {"cpu": "Insufficient nvidia.com/gpu"}


def test_isolated_pods_get_a_cell_of_their_own() -> None:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cells=2, cpus_per_cell=16))
    reservations = Reservations(index)
    isolated = PodIntent(policy=NumaIntentPolicy.ISOLATED)
    first = reservations.decide(PendingPod("ns", "a", _pod(12), intent=isolated))
    # The kubelet, not us, picks the cell: 8 CPUs no longer fit cell 0, so it pins the pod to cell 1.
    second = reservations.decide(PendingPod("ns", "b", _pod(8), intent=isolated))
    assert (first.node, _cells(first), second.node, _cells(second)) == ("n", (0,), "n", (1,))
    third = reservations.decide(PendingPod("ns", "c", _pod(2), intent=isolated))
    assert third.node is None
    assert "intent isolated" in third.reasons()["n"]
    # A plain pod may not share an isolated cell either: the kubelet would put it on cell 0.
    plain = reservations.decide(PendingPod("ns", "d", _pod(2)))
    assert plain.node is None
    assert plain.reasons()["n"] == "NUMA cells [0] are held by an isolated pod"
    retried = reservations.decide(PendingPod("ns", "a", _pod(12), intent=replace(isolated)))
    assert _cells(retried) == (0,)  # a retry replaces the pod's earlier reservation


def test_gpus_are_the_device_plugins_answer_where_the_kubelet_pins_nothing() -> None:
    index = ClusterIndex()
    topology = nvswitch_node(cells=2, settings=kubelet("none", "pod"))
    cell0 = len(topology.numa_cells[0].cpus)
    index.upsert_topology("gpu-0", with_usage(topology, {0: {"cpu": cell0 - 2}}, fingerprint=None))
    decision = Reservations(index).decide(PendingPod("ns", "p", _pod(8, gpus=1)))
    assert decision.placement is not None
    assert decision.node == "gpu-0"
    assert not decision.placement.pinned
    assert decision.placement.cells == (1,)  # cell 0 has 2 free CPUs: the CPU manager takes the pod's 8 from cell 1
    # Under policy none the device manager has no hint: NVIDIA's plugin answers one GPU with the first it
    # is offered (every set of one scores 0), wherever the CPUs are. The kubelet offers them in Go map
    # order; the prediction takes them in index order, so GPU 0, in cell 0.
    gpu_cells = {gpu.index: gpu.numa_node for gpu in topology.gpus}
    assert decision.placement.gpus == (0,)
    assert gpu_cells[0] == 0
