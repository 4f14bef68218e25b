"""Gang plan time over 1,000 nodes, and the joint planner against placing members one by one.

``python -m benchmarks.gang`` builds a 1,000-node index from the fixture machines (8x H100 NVSwitch with
2 cells under single-numa-node and with 4 cells under restricted + the Static memory manager, 2-socket
PCIe nodes with bridged pairs and RDMA NICs, 2-socket CPU nodes), labelled with 4 zones, racks of 20
nodes and NVLink fabric cliques of 18 on a third of the GPU nodes. Snapshots are fragmented by random
single pods (1, 2 or 4 GPUs; 8 to 32 CPUs) placed with the exact model until a target share of GPUs is
in use. Then:

* plan time: ``placement.core.gang_plan.plan_gang`` for gangs of 8 (4 GPUs each), 64 (2 GPUs) and 256
  (1 GPU) members, per spread policy, p50/p99 over several snapshots (the whole plan: filter, scoring,
  node choice, the exact kubelet check and GPU choice of every member);
* the naive baseline: members one by one, each ranked by ``decision.rank`` with the SAME scoring (the
  gang component set to 1 on nodes the gang already uses) and checked exactly on the best nodes, on
  snapshots from 55% to 97% of GPUs in use: how often it strands a partial gang (some members placed,
  the rest fit nowhere, where the joint planner holds nothing) and how often it spreads a gang it
  does place over more nodes than the joint planner.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubenexus.topology.model import NodeTopology
from placement.core.decision import rank
from placement.core.gang_plan import GangMember, GangPlan, Locality, NodeGpus, Workspace, plan_gang
from placement.core.podgroup import SpreadPolicy
from placement.core.vocabulary import IntArray, NodeArrays, demand_of
from placement.state.cluster_index import ClusterIndex
from tests.gang_fixtures import pod
from tests.machines.node_topologies import cpu_node, kubelet, nvswitch_node, pcie_node

NODES = 1_000
TARGET_P99_MS = {8: 10.0, 64: 50.0, 256: 200.0}
GPUS_PER_MEMBER = {8: 4, 64: 2, 256: 1}
NAIVE_TRIES = 16  # ranked nodes the naive way checks exactly per member, as Reservations.decide does

GpusOf = Callable[[int], NodeGpus | None]


def machines() -> list[NodeTopology]:
    kinds = [
        nvswitch_node(cells=2),
        nvswitch_node(cells=4, settings=kubelet("restricted", "pod", memory=True)),
        pcie_node(),
        nvswitch_node(cells=2),
        cpu_node(),
    ]
    return kinds


@dataclass
class Cluster:
    index: ClusterIndex
    locality: Locality

    def gpus(self, row: int) -> NodeGpus | None:
        shape = self.index.gpu_shape(row)
        return None if shape is None else NodeGpus(shape.table, shape.healthy)


def build() -> Cluster:
    kinds = machines()
    index = ClusterIndex(initial_capacity=NODES)
    labels: list[dict[str, str]] = []
    for n in range(NODES):
        topology = kinds[n % len(kinds)]
        name = f"node-{n:04d}"
        index.upsert_topology(name, topology)
        node_labels = {"zone": f"z{n * 4 // NODES}", "rack": f"r{n // 20}"}
        if topology.gpus and n % 3 == 0:
            node_labels["clique"] = f"c{n // 54}"
        labels.append(node_labels)
    codes: dict[str, int] = {}

    def level(key: str) -> IntArray:
        slots = np.full(len(index.slot_names()), -1, dtype=np.int64)
        for n, node_labels in enumerate(labels):
            if key in node_labels:
                slots[index.slot_of(f"node-{n:04d}") or 0] = codes.setdefault(key + node_labels[key], len(codes))
        return slots

    return Cluster(index, Locality(zone=level("zone"), rack=level("rack"), clique=level("clique")))


def fragment(cluster: Cluster, used_share: float, rng: random.Random) -> tuple[NodeArrays, GpusOf]:
    """A snapshot with random single pods on ``used_share`` of the GPUs (exactly admitted, as if bound)."""
    arrays = cluster.index.arrays()
    workspace = Workspace(arrays, cluster.gpus)
    gpu_rows = [r for r in cluster.index.slots().tolist() if cluster.index.gpu_shape(r) is not None]
    total = sum(len(g.free) for r in gpu_rows if (g := cluster.gpus(r)) is not None)
    used = 0
    shapes = [demand_of(pod(cpus=c, memory_gib=32, gpus=g)) for g in (1, 2, 4) for c in (8, 16, 32)]
    misses = 0
    while used < used_share * total and misses < 5 * len(gpu_rows):
        demand = rng.choice(shapes)
        plan = workspace.place(GangMember(("bg", str(used)), demand), rng.choice(gpu_rows))
        if isinstance(plan, str):
            misses += 1
            continue
        used += len(plan.gpus)
    return workspace.arrays, workspace.gpus


def members(size: int) -> list[GangMember]:
    demand = demand_of(pod(cpus=8, memory_gib=64, gpus=GPUS_PER_MEMBER[size]))
    return [GangMember(("job", f"m{i}"), demand) for i in range(size)]


def naive(arrays: NodeArrays, rows: IntArray, gang: list[GangMember], gpus: GpusOf) -> tuple[int, int]:
    """Members one by one with the same scoring; (members placed, nodes used)."""
    workspace = Workspace(arrays, gpus)
    affinity = np.zeros(arrays.numa_count.shape[0])
    placed = 0
    for member in gang:
        ranking = rank(workspace.arrays, rows, member.demand, gang=affinity[rows])
        for row in ranking.ranked_rows()[:NAIVE_TRIES].tolist():
            if not isinstance(workspace.place(member, row), str):
                affinity[row] = 1.0
                placed += 1
                break
        else:
            break
    return placed, int(affinity.sum())


def time_plans(cluster: Cluster, snapshots: list[tuple[NodeArrays, GpusOf]], runs: dict[int, int]) -> None:
    rows = cluster.index.slots()
    print("| members | GPUs each | policy | placed | nodes (median) | p50 ms | p99 ms | target p99 | met |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, count in runs.items():
        gang = members(size)
        for policy in SpreadPolicy:
            timings, nodes, placed = [], [], 0
            for run in range(count):
                arrays, gpus = snapshots[run % len(snapshots)]
                start = time.perf_counter()
                plan = plan_gang(arrays, rows, gang, gpus=gpus, policy=policy, locality=cluster.locality)
                timings.append((time.perf_counter() - start) * 1000)
                if isinstance(plan, GangPlan):
                    placed += 1
                    nodes.append(len(plan.rows()))
            p50, p99 = statistics.median(timings), float(np.percentile(timings, 99))
            target = TARGET_P99_MS[size]
            print(
                f"| {size} | {GPUS_PER_MEMBER[size]} | {policy.value} | {placed}/{count} | "
                f"{statistics.median(nodes) if nodes else '-'} | {p50:.1f} | {p99:.1f} | <= {target:g} | "
                f"{'yes' if p99 <= target else 'NO'} |"
            )


def compare(cluster: Cluster, trials: int, rng: random.Random) -> None:
    rows = cluster.index.slots()
    print()
    print(
        "| members | trials | joint placed | naive placed | naive stranded a partial gang | "
        "naive used more nodes | nodes joint / naive (mean, both placed) |"
    )
    print("|---|---|---|---|---|---|---|")
    for size in TARGET_P99_MS:
        gang = members(size)
        joint_ok = naive_ok = stranded = more = 0
        joint_nodes, naive_nodes = [], []
        for _ in range(trials):
            arrays, gpus = fragment(cluster, rng.uniform(0.55, 0.97), rng)
            plan = plan_gang(arrays, rows, gang, gpus=gpus, locality=cluster.locality)
            placed, used = naive(arrays, rows, gang, gpus)
            joint_ok += isinstance(plan, GangPlan)
            naive_ok += placed == size
            stranded += 0 < placed < size
            if isinstance(plan, GangPlan) and placed == size:
                joint_nodes.append(len(plan.rows()))
                naive_nodes.append(used)
                more += used > len(plan.rows())
        both = len(joint_nodes)
        ratio = f"{statistics.mean(joint_nodes):.1f} / {statistics.mean(naive_nodes):.1f}" if both else "-"
        print(f"| {size} | {trials} | {joint_ok} | {naive_ok} | {stranded} | {more} of {both} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test of the script)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    start = time.perf_counter()
    cluster = build()
    snapshots = [fragment(cluster, share, rng) for share in (0.3, 0.45, 0.6, 0.7)]
    print(f"{NODES} nodes built and fragmented in {time.perf_counter() - start:.1f} s")
    print()
    runs = {8: 20, 64: 8, 256: 4} if args.quick else {8: 200, 64: 100, 256: 40}
    time_plans(cluster, snapshots, runs)
    compare(cluster, 3 if args.quick else 30, rng)


if __name__ == "__main__":
    main()
