"""The cluster index: both publishing modes, incremental node and pod updates, slot reuse, fingerprints."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.nrt import encode_nrt
from kubenexus.topology.podfingerprint import pods_fingerprint
from placement.cluster.feed import ClusterFeed
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, RESERVED_NODE_KEY
from placement.core.pods import PodParseError, PodUsage, pod_usage
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import PolicyCode, ScopeCode, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.machines.node_topologies import GIB, cpu_node, kubelet, nvswitch_node, with_usage


def _usage(name: str, node: str, cpus: int, *, cells: tuple[int, ...] = (), gpus: int = 0) -> PodUsage:
    devices = (("nvidia.com/gpu", gpus),) if gpus else ()
    pod = Pod(
        containers=(Container("c", cpu_millis=cpus * 1000, memory=GIB, devices=devices),), qos=QOSClass.GUARANTEED
    )
    return PodUsage("ns", name, node, demand_of(pod), cells=cells)


def _free_cpus(index: ClusterIndex, node: str) -> list[float]:
    slot = index.slot_of(node)
    assert slot is not None
    free: list[float] = index.cell_free[0, slot, :2].tolist()
    return free


def test_labels_and_nrt_modes_fill_the_same_row() -> None:
    topology = nvswitch_node(settings=kubelet("restricted", "container"))
    metadata = encode_node_metadata(topology)
    by_labels, by_nrt = ClusterIndex(), ClusterIndex()
    by_labels.upsert_node("n", metadata.labels, metadata.annotations)
    by_nrt.upsert_nrt(encode_nrt(topology, node_name="n"))
    for index in (by_labels, by_nrt):
        slot = index.slot_of("n")
        assert slot is not None
        assert index.numa_count[slot] == 2
        assert index.policy[slot] == PolicyCode.RESTRICTED
        assert index.scope[slot] == ScopeCode.CONTAINER
        gpu = index.arrays().column("nvidia.com/gpu")
        assert gpu is not None
        assert index.cell_total[gpu, slot, :2].tolist() == [4, 4]
    np.testing.assert_array_equal(by_labels.cell_free, by_nrt.cell_free)
    shape = by_nrt.gpu_shape(0)
    assert shape is not None
    assert shape.healthy == frozenset(range(8))


def test_slots_are_reused_and_capacity_grows() -> None:
    index = ClusterIndex(initial_capacity=2)
    for n in range(5):
        index.upsert_topology(f"n{n}", cpu_node())
    assert len(index) == 5
    freed = index.slot_of("n1")
    index.remove_node("n1")
    assert index.numa_count[freed] == 0
    index.upsert_topology("n9", cpu_node(cells=1))
    assert index.slot_of("n9") == freed
    assert index.numa_count[freed] == 1
    assert sorted(index.node_names()) == ["n0", "n2", "n3", "n4", "n9"]


def test_pods_are_charged_until_a_report_accounts_for_them() -> None:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cpus_per_cell=16))
    index.upsert_pod(_usage("placed", "n", 4, cells=(1,)))
    index.upsert_pod(_usage("foreign", "n", 2))  # cells unknown: charged on every cell
    assert _free_cpus(index, "n") == [14, 10]
    # A report that does not yet include the pods: availability plus our charges (never over-commit).
    index.upsert_topology("n", with_usage(cpu_node(cpus_per_cell=16), {}, pods_fingerprint([])))
    assert _free_cpus(index, "n") == [14, 10]
    # The next report accounts for both (its fingerprint names them): availability alone.
    fingerprint = pods_fingerprint([("ns", "placed"), ("ns", "foreign")])
    index.upsert_topology("n", with_usage(cpu_node(cpus_per_cell=16), {0: {"cpu": 2}, 1: {"cpu": 4}}, fingerprint))
    assert _free_cpus(index, "n") == [14, 12]
    slot = index.slot_of("n")
    assert slot is not None
    assert index.node_free[0, slot] == 26_000  # node-level: allocatable minus every request
    index.remove_pod("ns", "placed")
    assert index.node_free[0, slot] == 32_000 - 2_000


def test_a_pod_bound_after_the_report_is_accounted_by_the_fingerprint() -> None:
    index = ClusterIndex()
    fingerprint = pods_fingerprint([("ns", "p")])
    index.upsert_topology("n", with_usage(cpu_node(cpus_per_cell=16), {0: {"cpu": 4}}, fingerprint))
    index.upsert_pod(_usage("p", "n", 4, cells=(0,)))
    assert _free_cpus(index, "n") == [12, 16]
    entry = index.pod("ns", "p")
    assert entry is not None
    assert entry[2]  # accounted


def test_known_gpus_are_charged_on_their_cells() -> None:
    index = ClusterIndex()
    index.upsert_topology("g", nvswitch_node(cells=2))
    usage = _usage("p", "g", 4, cells=(0, 1), gpus=2)
    index.upsert_pod(PodUsage(usage.namespace, usage.name, usage.node, usage.demand, cells=(0, 1), gpus=(3, 4)))
    gpu = index.arrays().column("nvidia.com/gpu")
    slot = index.slot_of("g")
    assert gpu is not None
    assert slot is not None
    assert index.cell_free[gpu, slot, :2].tolist() == [3, 3]
    assert index.busy_gpus(slot) == frozenset({3, 4})


def _pod_object(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team", "name": "train", "annotations": annotations},
        "spec": {
            "nodeName": "g",
            "initContainers": [{"name": "warm", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2", "hugepages-1Gi": "2Gi"}
                    },
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def test_pod_objects_parse_into_usage() -> None:
    usage = pod_usage(_pod_object(**{ASSIGNED_CELLS_KEY: "1", ASSIGNED_GPUS_KEY: "4,5"}))
    assert usage is not None
    assert usage.node == "g"
    assert usage.demand.guaranteed
    assert usage.demand.exclusive_cpus == 4
    assert dict(usage.demand.node_requests) == {
        "cpu": 4000,
        "memory": 16 * GIB,
        "hugepages-1Gi": 2 * GIB,
        "nvidia.com/gpu": 2,
    }
    assert usage.cells == (1,)
    assert usage.gpus == (4, 5)
    pending = _pod_object()
    del pending["spec"]["nodeName"]
    assert pod_usage(pending) is None
    with pytest.raises(PodParseError, match="not a comma-separated list"):
        pod_usage(_pod_object(**{ASSIGNED_CELLS_KEY: "one"}))
    broken = _pod_object()
    broken["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "lots"
    with pytest.raises(PodParseError, match=r"container main: limits\.cpu: 'lots' is not a Kubernetes quantity"):
        pod_usage(broken)


def test_a_pod_reported_again_unchanged_changes_nothing() -> None:
    """Pod status updates are most of a pod watch's events: they must not make decisions judge the node again."""
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node())
    slot = index.slot_of("n")
    assert slot is not None
    reserved = _usage("p", "n", 4, cells=(1,))
    index.assume_pod(reserved)
    changes, stamp = index.changes, int(index.slot_changes[slot])
    index.assume_pod(reserved)  # the same reservation again
    assert (index.changes, int(index.slot_changes[slot])) == (changes, stamp)
    index.upsert_pod(_usage("p", "n", 4))  # now bound: a change, though the watch's copy names no cells
    assert index.changes == changes + 1
    assert int(index.slot_changes[slot]) == index.changes
    held = index.pod("ns", "p")
    assert held is not None
    assert held[0].cells == (1,)
    assert held[1]
    changes = index.changes
    index.upsert_pod(_usage("p", "n", 4))  # a status update: the same pod, bound as before
    index.upsert_pod(_usage("p", "n", 4, cells=(1,)))  # our annotations arrive: what we had already
    index.assume_pod(reserved)  # a reservation of a bound pod leaves it bound
    assert index.changes == changes
    assert _free_cpus(index, "n") == [32.0, 28.0]
    index.upsert_pod(_usage("p", "n", 6, cells=(1,)))  # resized: a change
    assert index.changes == changes + 1
    assert _free_cpus(index, "n") == [32.0, 26.0]


# --- pods listed before their node's report --------------------------------------------------------------
# After a restart or a failover the feed's pod list often lands before a node's NRT or annotation: the
# pods bound to, or reserved on, that node must be charged once its report gives it a slot.


def _free_gpus(index: ClusterIndex, node: str) -> list[float]:
    slot = index.slot_of(node)
    gpu = index.arrays().column("nvidia.com/gpu")
    assert slot is not None
    assert gpu is not None
    free: list[float] = index.cell_free[gpu, slot, :2].tolist()
    return free


def test_a_pod_listed_before_its_nodes_report_is_charged_when_the_report_arrives() -> None:
    index = ClusterIndex()
    index.upsert_pod(replace(_usage("early", "g", 4, cells=(0,), gpus=2), gpus=(0, 1)))
    index.upsert_pod(_usage("foreign", "g", 2))  # cells unknown: charged on every cell once slotted
    assert len(index) == 0
    held = index.pod("ns", "early")
    assert held is not None
    assert held[0].gpus == (0, 1)
    assert (held[1], held[2]) == (True, False)  # bound, not accounted by any report yet

    index.upsert_topology("g", nvswitch_node())
    slot = index.slot_of("g")
    assert slot is not None
    assert index.busy_gpus(slot) == frozenset({0, 1})
    assert _free_gpus(index, "g") == [2, 4]
    total = index.cell_total[0, slot, :2].tolist()
    assert _free_cpus(index, "g") == [total[0] - 6, total[1] - 2]
    gpu = index.arrays().column("nvidia.com/gpu")
    assert gpu is not None
    assert index.node_free[gpu, slot] == 6
    assert sorted(u.name for u, _, _ in index.pods_on("g")) == ["early", "foreign"]


def test_a_report_that_accounts_for_pods_listed_before_it_is_not_charged_twice() -> None:
    index = ClusterIndex()
    index.upsert_pod(_usage("early", "n", 4, cells=(1,)))
    used = with_usage(cpu_node(cpus_per_cell=16), {1: {"cpu": 4}}, pods_fingerprint([("ns", "early")]))
    index.upsert_topology("n", used)
    assert _free_cpus(index, "n") == [16, 12]
    held = index.pod("ns", "early")
    assert held is not None
    assert held[2], "the report names the pod: its availability already includes it"


def test_a_pod_deleted_before_its_nodes_report_is_never_charged() -> None:
    index = ClusterIndex()
    index.upsert_pod(replace(_usage("gone", "g", 4, cells=(0,), gpus=2), gpus=(0, 1)))
    index.assume_pod(_usage("released", "g", 8, cells=(1,)))
    removed = index.remove_pod("ns", "gone")
    assert removed is not None
    assert removed.gpus == (0, 1)
    removed = index.remove_pod("ns", "released")
    assert removed is not None
    assert index.pod("ns", "gone") is None
    assert index.pod("ns", "released") is None

    index.upsert_topology("g", nvswitch_node())
    slot = index.slot_of("g")
    assert slot is not None
    assert index.busy_gpus(slot) == frozenset()
    assert _free_gpus(index, "g") == [4, 4]
    np.testing.assert_array_equal(index.cell_free[:, slot], index.cell_total[:, slot])
    assert index.pods_on("g") == []


def test_a_pod_moved_off_a_node_without_a_report_is_charged_where_it_went() -> None:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cpus_per_cell=16))
    index.assume_pod(_usage("p", "later", 4, cells=(0,)))  # reserved on a node not reported yet
    index.upsert_pod(_usage("p", "n", 4, cells=(1,)))  # bound elsewhere
    assert _free_cpus(index, "n") == [16, 12]
    index.upsert_topology("later", cpu_node(cpus_per_cell=16))
    assert _free_cpus(index, "later") == [16, 16]


def test_a_reservation_restored_from_annotations_before_the_nodes_report_is_charged() -> None:
    """A new leader lists a gang member the binder reserved but had not bound (its annotations name the node,
    the cells and the GPUs) before the node's NRT: once the NRT lands those GPUs are taken."""
    index = ClusterIndex()
    feed = ClusterFeed(api=None, index=index, reservations=Reservations(index))  # type: ignore[arg-type]  # no watch
    pod = _pod_object(**{RESERVED_NODE_KEY: "g", ASSIGNED_CELLS_KEY: "1", ASSIGNED_GPUS_KEY: "6,7"})
    del pod["spec"]["nodeName"]
    pod["status"]["phase"] = "Pending"
    feed._pods.replace([pod])
    held = index.pod("team", "train")
    assert held is not None
    assert (held[0].node, held[0].gpus, held[1]) == ("g", (6, 7), False)

    feed._topology.nodes.apply("ADDED", {"metadata": {"name": "g"}})  # an NRT alone puts no node in the index
    feed._topology.nrts.apply("ADDED", encode_nrt(nvswitch_node(), node_name="g"))
    slot = index.slot_of("g")
    assert slot is not None
    assert index.busy_gpus(slot) == frozenset({6, 7})
    assert _free_gpus(index, "g") == [4, 2]

    # The binder binds it there: the same charge, now bound.
    bound = dict(pod, spec={**pod["spec"], "nodeName": "g"}, status={"phase": "Running"})
    feed._pods.apply("MODIFIED", bound)
    held = index.pod("team", "train")
    assert held is not None
    assert held[1]
    assert index.busy_gpus(slot) == frozenset({6, 7})
    assert _free_gpus(index, "g") == [4, 2]


def test_a_reservation_given_up_before_the_nodes_report_is_never_charged() -> None:
    index = ClusterIndex()
    feed = ClusterFeed(api=None, index=index, reservations=Reservations(index))  # type: ignore[arg-type]  # no watch
    pod = _pod_object(**{RESERVED_NODE_KEY: "g", ASSIGNED_CELLS_KEY: "1", ASSIGNED_GPUS_KEY: "6,7"})
    del pod["spec"]["nodeName"]
    pod["status"]["phase"] = "Pending"
    feed._pods.apply("ADDED", pod)
    assert index.pod("team", "train") is not None
    feed._pods.apply("MODIFIED", dict(pod, metadata={**pod["metadata"], "annotations": {}}))  # the binder cleared it
    assert index.pod("team", "train") is None
    feed._topology.nodes.apply("ADDED", {"metadata": {"name": "g"}})  # an NRT alone puts no node in the index
    feed._topology.nrts.apply("ADDED", encode_nrt(nvswitch_node(), node_name="g"))
    slot = index.slot_of("g")
    assert slot is not None
    assert index.busy_gpus(slot) == frozenset()
    assert _free_gpus(index, "g") == [4, 4]


def test_the_pods_of_a_removed_node_are_charged_again_when_it_returns() -> None:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cpus_per_cell=16))
    index.upsert_pod(_usage("p", "n", 4, cells=(1,)))
    index.remove_node("n")  # its NRT deleted (the agent restarting), the pods still running there
    assert index.pod("ns", "p") is not None
    index.upsert_topology("n", cpu_node(cpus_per_cell=16))
    assert _free_cpus(index, "n") == [16, 12]
    index.remove_node("n")
    index.remove_pod("ns", "p")
    index.upsert_topology("n", cpu_node(cpus_per_cell=16))
    assert _free_cpus(index, "n") == [16, 16]
