"""The compiled admission kernel (``placement.core.kernel``) against the numpy path, side by side in one run.

``python -m benchmarks.compiled_kernel`` measures, on a cluster of the fixture machines
(``benchmarks.placement_core.machines``: CPU, 8x H100 with 2 and 4 cells and 4x L40S nodes under every
kubelet policy):

* calls: ``filter_nodes`` and ``scoring.node_components`` on 1, 2, 4, 16 and 1,000 rows drawn at random
  from 1,000 nodes, for the service benchmark's GPU pod (Guaranteed, 24 CPUs, 256 GiB, 4 GPUs) and a CPU
  pod (8 CPUs, 32 GiB); the numpy path and the kernel alternate in blocks over the same rows; p50 and p99
  microseconds per call;
* decisions: in process, as ``benchmarks.placement_service`` churns the cluster: one pod bound on (or
  deleted from) a random node through ``ClusterIndex`` (``Churn.step``), then ``engine.filter`` and
  ``engine.score`` of the GPU pod over the 1,000 nodes; kernel off and on alternately in blocks; p50 and
  p99 milliseconds and CPU per decision;
* costs, each in a fresh child process: importing numba, ``kernel.enable()`` with a cold numba cache (a new
  ``NUMBA_CACHE_DIR``) and a warm one, and the RSS of a process holding the 10,000-node index and an
  engine after a few decisions, without and with the kernel.

Targets printed beside the figures: the kernel is adopted where it wins, and by default only if the
service stays within its RSS target at 10,000 nodes (``benchmarks.placement_service``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import psutil

from benchmarks.placement_core import build, machines, pods
from benchmarks.placement_service import CHURN_WARM_UP, TARGET_RSS_MB_AT_10K, label_nodes, node_names
from placement.core import kernel
from placement.core.feasibility import filter_nodes
from placement.core.pods import ContainerSpec, PodSpec, PodUsage
from placement.core.scoring import node_components
from placement.core.topology_manager import Container, Pod
from placement.core.vocabulary import GPU_RESOURCE, IntArray, NodeArrays, PodDemand, demand_of
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex

ROW_COUNTS = (1, 2, 4, 16, 1_000)
NODES = 1_000
LARGE = 10_000  # every node of the large cluster in one call, as a new pod shape's first Filter asks
BLOCKS = 10  # the two paths alternate this many times in each measurement, so that load drifts hit both


def percentiles(timings: list[float]) -> tuple[float, float]:
    ordered = sorted(timings)
    return statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]


def side_by_side(call: Callable[[int], object], repetitions: int) -> dict[bool, list[float]]:
    """Seconds per ``call(i)``, kernel off (False) and on (True), alternating in ``BLOCKS`` blocks."""
    timings: dict[bool, list[float]] = {False: [], True: []}
    per_block = max(repetitions // BLOCKS, 1)
    for block in range(BLOCKS):
        for compiled in (False, True):
            _switch(compiled)
            for i in range(block * per_block, (block + 1) * per_block):
                started = time.perf_counter()
                call(i)
                timings[compiled].append(time.perf_counter() - started)
    kernel.disable()
    return timings


def _switch(on: bool) -> None:
    if not on:
        kernel.disable()
        return
    reason = kernel.enable()
    if reason is not None:
        raise SystemExit(reason)


def calls(repetitions: int, large: int = LARGE) -> None:
    """Every function, pod and row count, both paths side by side; ``large``: the larger cluster's size."""
    rng = np.random.default_rng(7)
    print(
        f"Kernel calls on rows drawn from {NODES:,} fixture nodes ({repetitions} calls each), and on all "
        f"{large:,} nodes of a larger cluster ({max(repetitions // 50, BLOCKS)} calls each); microseconds:"
    )
    print(
        "| pod | function | rows | numpy p50 | numpy p99 | compiled p50 | compiled p99 | p50 speed-up "
        "| wins (p50 and p99) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    small, whole = build(NODES)[0].arrays(), build(large)[0].arrays()
    for name, pod in pods().items():
        demand = demand_of(pod)
        for count in (*ROW_COUNTS, large):
            arrays, nodes = (whole, large) if count == large else (small, NODES)
            times = max(repetitions // 50, BLOCKS) if count == large else repetitions
            draws = [np.sort(rng.choice(nodes, count, replace=False)).astype(np.int64) for _ in range(times)]
            for function, call in _calls(arrays, demand, draws).items():
                timings = side_by_side(call, times)
                (numpy_p50, numpy_p99), (fast_p50, fast_p99) = (percentiles(timings[on]) for on in (False, True))
                print(
                    f"| {name.split(' (')[0]} | {function} | {count:,} | {numpy_p50 * 1e6:.1f} | {numpy_p99 * 1e6:.1f} "
                    f"| {fast_p50 * 1e6:.1f} | {fast_p99 * 1e6:.1f} | {numpy_p50 / fast_p50:.1f}x "
                    f"| {'yes' if fast_p50 < numpy_p50 and fast_p99 < numpy_p99 else 'NO'} |"
                )


def _calls(arrays: NodeArrays, demand: PodDemand, draws: list[IntArray]) -> dict[str, Callable[[int], object]]:
    def filtering(i: int) -> object:
        return filter_nodes(arrays, draws[i], demand)

    def scoring(i: int) -> object:
        return node_components(arrays, draws[i], demand, intent=None)

    return {"filter_nodes": filtering, "node_components": scoring}


def gpu_pod_spec() -> PodSpec:
    """The service benchmark's pod (``benchmarks.placement_service.gpu_pod``), as the engine takes it."""
    resources = {"cpu": "24", "memory": "256Gi", GPU_RESOURCE: "4"}
    return PodSpec("bench", "trainer", (ContainerSpec("main", resources, resources),))


class Churn:
    """Pod events through the index, as the cluster feed applies them: a 1-CPU pod bound to a random node,
    or the oldest deleted (alternately, 100 pods at most); what ``benchmarks.placement_service`` churns."""

    def __init__(self, index: ClusterIndex) -> None:
        self._index = index
        self._rng = np.random.default_rng(7)
        self._names = node_names(len(index))
        self._demand = demand_of(Pod(containers=(Container("c", cpu_millis=1000, memory=1 << 30),)))
        self._bound: deque[tuple[str, str]] = deque()
        self.made = 0

    def step(self) -> None:
        if len(self._bound) >= 100 or (self._bound and self.made % 2):
            self._index.remove_pod(*self._bound.popleft())
        else:
            node = self._names[int(self._rng.integers(len(self._names)))]
            usage = PodUsage("churn", f"pod-{self.made}", node, self._demand)
            self._index.upsert_pod(usage)
            self._bound.append(usage.key)
        self.made += 1


def churned_cluster(count: int) -> tuple[ClusterIndex, Churn]:
    """The service benchmark's cluster under churn: the fixture machines, labelled, after the warm-up events."""
    index, _ = build(count)
    kinds = [f"gpu-{len(topology.gpus)}" if topology.gpus else "cpu" for topology in machines()]
    label_nodes(index, kinds, constrained=False)
    churn = Churn(index)
    for _ in range(CHURN_WARM_UP):
        churn.step()
    return index, churn


def decisions(count: int) -> None:
    index, churn = churned_cluster(NODES)
    engine = PlacementEngine.over(index)
    spec, names = gpu_pod_spec(), node_names(NODES)

    def decide(_: int) -> None:
        churn.step()
        feasible = engine.filter(spec, names).feasible
        engine.score(spec, feasible)

    for _ in range(200):
        decide(0)
    cpu: dict[bool, float] = {False: 0.0, True: 0.0}
    per_block = max(count // BLOCKS, 1)
    timings: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(BLOCKS):
        for compiled in (False, True):
            _switch(compiled)
            started_cpu = time.process_time()
            for _ in range(per_block):
                started = time.perf_counter()
                decide(0)
                timings[compiled].append(time.perf_counter() - started)
            cpu[compiled] += time.process_time() - started_cpu
    kernel.disable()
    print()
    print(
        f"Decisions in process under churn: one pod event, then Filter + Score of the GPU pod over {NODES:,} "
        f"nodes; {per_block * BLOCKS} decisions each (milliseconds):"
    )
    print("| path | p50 | p99 | CPU per decision | decisions/s of CPU |")
    print("|---|---|---|---|---|")
    for compiled in (False, True):
        p50, p99 = percentiles(timings[compiled])
        per_decision = cpu[compiled] / len(timings[compiled])
        label = "compiled kernel" if compiled else "numpy path"
        print(f"| {label} | {p50 * 1e3:.3f} | {p99 * 1e3:.3f} | {per_decision * 1e3:.3f} | {1 / per_decision:,.0f} |")
    saved = (cpu[False] - cpu[True]) / len(timings[True])
    share = saved / (cpu[False] / len(timings[False]))
    print(
        f"CPU saved per decision: {saved * 1e3:.3f} ms ({share:.0%}); the kernel wins at the decision level "
        f"(target: less CPU per decision): {'yes' if saved > 0 else 'NO'}"
    )


def child(role: str, nodes: int) -> dict[str, float]:
    """One cost figure in a fresh process (``--child``): its output is a JSON line."""
    process = psutil.Process()
    figures: dict[str, float] = {}
    if role == "import":
        started = time.perf_counter()
        import numba  # noqa: F401, PLC0415  (the import is what is measured)

        figures["import_s"] = time.perf_counter() - started
        return figures
    if role == "enable":
        before = process.memory_info().rss
        started = time.perf_counter()
        reason = kernel.enable()
        figures["enable_s"] = time.perf_counter() - started
        figures["enable_rss_mb"] = (process.memory_info().rss - before) / 2**20
        if reason is not None:
            raise SystemExit(reason)
        return figures
    index, churn = churned_cluster(nodes)
    gc.collect()
    if role == "rss-kernel":
        reason = kernel.enable()
        if reason is not None:
            raise SystemExit(reason)
    engine = PlacementEngine.over(index)
    spec, names = gpu_pod_spec(), node_names(nodes)
    for _ in range(20):
        churn.step()
        engine.score(spec, engine.filter(spec, names).feasible)
    memory = process.memory_info()
    figures["rss_mb"] = memory.rss / 2**20
    figures["shared_mb"] = memory.shared / 2**20  # file-backed: shared libraries' pages, numba's and llvmlite's
    return figures


def _in_child(role: str, nodes: int = 0, environment: dict[str, str] | None = None) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.compiled_kernel", "--child", role, "--nodes", str(nodes)]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the {role} child failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def costs(nodes: int) -> None:
    imported = _in_child("import")
    with tempfile.TemporaryDirectory() as cache:
        cold_environment = {**os.environ, "NUMBA_CACHE_DIR": cache}
        cold = _in_child("enable", environment=cold_environment)
        warm = _in_child("enable", environment=cold_environment)
    without = _in_child("rss", nodes)
    with_kernel = _in_child("rss-kernel", nodes)
    added = with_kernel["rss_mb"] - without["rss_mb"]
    print()
    print("Costs, each in a fresh process:")
    print(f"  import numba: {imported['import_s']:.2f} s")
    print(
        f"  kernel.enable(), cold cache (compiles): {cold['enable_s']:.2f} s, +{cold['enable_rss_mb']:.0f} MB RSS; "
        f"warm cache (loads): {warm['enable_s']:.2f} s, +{warm['enable_rss_mb']:.0f} MB RSS"
    )
    print(
        f"  RSS with the {nodes:,}-node index and an engine after 20 decisions: {without['rss_mb']:.0f} MB without "
        f"the kernel, {with_kernel['rss_mb']:.0f} MB with it (+{added:.0f} MB, of which file-backed "
        f"+{with_kernel['shared_mb'] - without['shared_mb']:.0f} MB)"
    )
    for label, rss in (("without", without["rss_mb"]), ("with", with_kernel["rss_mb"])):
        met = "met" if rss <= TARGET_RSS_MB_AT_10K else "MISSED"
        print(
            f"  the service's RSS target at {nodes:,} nodes, <= {TARGET_RSS_MB_AT_10K:.0f} MB, {label} the kernel: "
            f"{met} by this process alone (the service adds its gRPC server)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2_000, help="calls per function, row count and path")
    parser.add_argument("--decisions", type=int, default=2_000, help="decisions per path")
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes of the index whose memory is measured")
    parser.add_argument("--child", choices=("import", "enable", "rss", "rss-kernel"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.nodes)))
        return 0
    print(f"{psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    calls(args.calls)
    decisions(args.decisions)
    costs(args.nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
