"""Filter + score of one pod over 1,000 and 10,000 nodes, in-process, and the index's memory per node.

``python -m benchmarks.placement_core`` builds a cluster index from the fixture machines (2-socket CPU
nodes, 8x H100 NVSwitch nodes with 2 and with 4 NUMA cells, 4x L40S nodes; kubelet policies mixed),
then times ``placement.core.decision.rank`` (the vectorised kubelet admission, the intent, scoring and
ordering) for a CPU pod and a GPU pod, and reports the memory the index holds per node (tracemalloc
over the whole build: arrays, per-node records and the shared GPU tables).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from kubenexus.topology.model import NodeTopology
from placement.core.decision import rank
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import demand_of
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import GIB, cpu_node, kubelet, l40s_node, nvswitch_node

TARGET_P99_MS = {1_000: 2.0, 10_000: 20.0}
TARGET_BYTES_PER_NODE = 4096
POLICIES = ("single-numa-node", "restricted", "best-effort", "none")


def machines() -> list[NodeTopology]:
    """One of each machine kind under each kubelet policy: the cluster cycles through them."""
    kinds: list[NodeTopology] = []
    for policy in POLICIES:
        settings = kubelet(policy, "pod", memory=policy == "restricted")
        kinds += [
            cpu_node(settings=settings),
            cpu_node(settings=settings),
            nvswitch_node(cells=2, settings=settings),
            nvswitch_node(cells=4, settings=settings),
            l40s_node(settings=settings),
        ]
    return kinds


def build(count: int) -> tuple[ClusterIndex, int]:
    """The index over ``count`` nodes, and the bytes tracemalloc saw it keep."""
    kinds = machines()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    index = ClusterIndex(initial_capacity=count)
    for n in range(count):
        index.upsert_topology(f"node-{n:05d}", kinds[n % len(kinds)])
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return index, kept


def pods() -> dict[str, Pod]:
    def guaranteed(cpus: int, memory_gib: int, gpus: int) -> Pod:
        devices = (("nvidia.com/gpu", gpus),) if gpus else ()
        container = Container("main", cpu_millis=cpus * 1000, memory=memory_gib * GIB, devices=devices)
        return Pod(containers=(container,), qos=QOSClass.GUARANTEED)

    return {
        "cpu pod (8 CPUs, 32 GiB)": guaranteed(8, 32, 0),
        "gpu pod (24 CPUs, 256 GiB, 4 GPUs)": guaranteed(24, 256, 4),
    }


def measure(index: ClusterIndex, pod: Pod, decisions: int) -> tuple[float, float, int]:
    """p50 and p99 in ms of ``rank`` over every node, and how many nodes were feasible."""
    demand = demand_of(pod)
    rows = index.slots()
    arrays = index.arrays()
    timings = []
    feasible = 0
    for _ in range(decisions):
        start = time.perf_counter()
        ranking = rank(arrays, rows, demand)
        timings.append((time.perf_counter() - start) * 1000)
        feasible = len(ranking.scores.rows)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.99) - 1], feasible


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000)
    args = parser.parse_args()
    print("| nodes | pod | feasible | p50 ms | p99 ms | target p99 | met |")
    print("|---|---|---|---|---|---|---|")
    memory: list[tuple[int, float, float]] = []
    for count, target in TARGET_P99_MS.items():
        index, kept = build(count)
        memory.append((count, kept / count, index.nbytes() / count))
        for name, pod in pods().items():
            p50, p99, feasible = measure(index, pod, args.decisions)
            met = "yes" if p99 <= target else "NO"
            print(f"| {count:,} | {name} | {feasible:,} | {p50:.2f} | {p99:.2f} | <= {target:g} | {met} |")
    print()
    print("| nodes | index bytes/node (tracemalloc) | of which arrays | target | met |")
    print("|---|---|---|---|---|")
    for count, per_node, arrays in memory:
        met = "yes" if per_node <= TARGET_BYTES_PER_NODE else "NO"
        print(f"| {count:,} | {per_node:,.0f} | {arrays:,.0f} | <= {TARGET_BYTES_PER_NODE:,} | {met} |")


if __name__ == "__main__":
    main()
