"""The compiled admission kernel (``placement.core.kernel``) answers as the numpy path does, row for row.

The numpy path is the reference: every property runs a call with the kernel off, then on, and compares the
verdicts, the reason codes, messages and kinds, and every score component. Random node arrays cover every
kubelet policy, scope and manager setting, nodes without topology and with too many NUMA cells, memory
groups and several containers (which the kernel hands back to numpy), and pods with and without exclusive
CPUs, memory pools, GPUs and GPU shares; the fixture machines of the benchmarks are checked as well.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.compiled_kernel import calls as benchmark_calls
from benchmarks.compiled_kernel import churned_cluster, gpu_pod_spec
from benchmarks.compiled_kernel import decisions as benchmark_decisions
from benchmarks.placement_core import build, pods
from benchmarks.placement_service import node_names
from placement.core import feasibility, kernel
from placement.core.feasibility import FilterResult, filter_nodes
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.scoring import NodeComponents, node_components
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import CPU, GPU_SHARE, MAX_NUMA, MEMORY, NodeArrays, PodDemand, demand_of
from placement.service.engine import PlacementEngine
from placement.service.results import FilterOutcome
from tests.placement.core.test_feasibility import arrays_of
from tests.placement.core.test_feasibility import nodes as kubelet_nodes
from tests.placement.core.test_feasibility import pods as kubelet_pods

pytest.importorskip("numba", reason="numba is not installed: the compiled kernel is optional (the 'compiled' extra)")

GPU = "nvidia.com/gpu"
HUGE = "hugepages-1Gi"
RESOURCES = (CPU, MEMORY, HUGE, GPU, GPU_SHARE)
GIB = 1 << 30
_T = TypeVar("_T")
# Intents the score parts see: none, one that names no cells (the kernel's), one that limits them (numpy's).
INTENTS = (None, PodIntent(policy=NumaIntentPolicy.SINGLE_NUMA), PodIntent(affinity_node_ids=frozenset({0})))


class _Source:
    """Which way the tests' kernel is compiled: numba at run time, or the module built ahead of time."""

    ahead_of_time = False


SOURCE = _Source()


@pytest.fixture(autouse=True, params=[kernel.JIT, kernel.AHEAD_OF_TIME])
def kernel_source(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs with each kernel: compiled by numba now, and built ahead of time (where it was built:
    ``python -m placement.core.kernel.ahead_of_time``, as .ci/run does)."""
    SOURCE.ahead_of_time = request.param == kernel.AHEAD_OF_TIME
    if SOURCE.ahead_of_time:
        _, not_built = kernel.built_ahead_of_time()
        if not_built is not None:
            pytest.skip(f"the kernel is not built ahead of time: {not_built}")
    yield str(request.param)
    SOURCE.ahead_of_time = False
    kernel.disable()


@contextmanager
def compiled_kernel(max_rows: int | None = None) -> Iterator[None]:
    ahead = SOURCE.ahead_of_time
    reason = kernel.enable(max_rows=max_rows, allow_jit=not ahead, ahead_of_time=ahead)
    assert reason is None, reason
    assert kernel.active() == (kernel.AHEAD_OF_TIME if ahead else kernel.JIT)
    try:
        yield
    finally:
        kernel.disable()


def both(call: Callable[[], _T]) -> tuple[_T, _T]:
    """The numpy path's answer, then the compiled kernel's."""
    kernel.disable()
    reference = call()
    with compiled_kernel():
        compiled = call()
    return reference, compiled


def assert_same_verdicts(reference: FilterResult, compiled: FilterResult) -> None:
    assert compiled.feasible.tolist() == reference.feasible.tolist()
    assert compiled.reason_codes.tolist() == reference.reason_codes.tolist()
    assert compiled.reason_codes.dtype == reference.reason_codes.dtype
    assert compiled.messages == reference.messages
    assert compiled.kinds == reference.kinds
    assert compiled.exact_rows.tolist() == reference.exact_rows.tolist()


def assert_same_components(reference: NodeComponents, compiled: NodeComponents) -> None:
    for name in ("fit", "raw_bandwidth", "distance", "fragmentation", "landing_cell"):
        expected, got = getattr(reference, name), getattr(compiled, name)
        assert got.tolist() == expected.tolist(), name
    assert compiled.fit.dtype == reference.fit.dtype
    assert compiled.raw_bandwidth.dtype == reference.raw_bandwidth.dtype
    assert compiled.landing_cell.dtype == reference.landing_cell.dtype


@st.composite
def node_arrays(draw: st.DrawFn) -> NodeArrays:
    """Random rows as the index holds them (its dtypes, zeros past a node's cells), integer quantities."""
    count = draw(st.integers(1, 6))
    cells = draw(st.lists(st.sampled_from([0, 1, 1, 2, 2, 2, 3, 4, 4, 6, 8, 9]), min_size=count, max_size=count))
    per_cell_limits = (16, 8 * GIB, 4 * GIB, 4, 4000)  # CPUs, bytes, bytes, GPUs, GPU thousandths
    total = np.zeros((len(RESOURCES), count, MAX_NUMA))
    free = np.zeros_like(total)
    for n, cell_count in enumerate(cells):
        for k in range(min(cell_count, MAX_NUMA)):
            for r, limit in enumerate(per_cell_limits):
                unit = GIB if limit >= GIB else 1
                total[r, n, k] = draw(st.integers(0, limit // unit)) * unit
                free[r, n, k] = draw(st.integers(0, int(total[r, n, k]) // unit)) * unit
    node_total = total.sum(axis=2)
    node_total[0] *= 1000  # node arrays count millicores
    # Node-level room: none, some, all the cells hold, or more than they hold (so the checks after it run).
    room = st.sampled_from([0.0, 0.5, 1.0, 1.0, 1e6, 1e6])
    node_free = np.array([[draw(room) * node_total[r, n] for n in range(count)] for r in range(len(RESOURCES))])
    memory_group = np.zeros((count, MAX_NUMA), dtype=np.uint8)
    if draw(st.integers(0, 3)) == 0:
        memory_group[0, 0] = draw(st.sampled_from([1, 3, 7]))
    cell_ids = np.full((count, MAX_NUMA), -1, dtype=np.int16)
    for n, cell_count in enumerate(cells):
        cell_ids[n, : min(cell_count, MAX_NUMA)] = np.arange(min(cell_count, MAX_NUMA))
    floats = st.sampled_from([0.0, 0.0, 10.0, 11.0, 12.0, 21.0, 32.0, 120000.0, 300000.0])

    def draws(shape: tuple[int, ...]) -> np.ndarray[tuple[int, ...], np.dtype[np.float32]]:
        size = int(np.prod(shape))
        return np.array(draw(st.lists(floats, min_size=size, max_size=size)), dtype=np.float32).reshape(shape)

    return NodeArrays(
        resources=RESOURCES,
        cell_total=total,
        cell_free=free,
        node_allocatable=node_total,
        node_free=node_free,
        numa_count=np.array(cells, dtype=np.int8),
        policy=np.array(draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)), dtype=np.int8),
        scope=np.array(draw(st.lists(st.integers(0, 1), min_size=count, max_size=count)), dtype=np.int8),
        cpu_static=np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count))),
        memory_static=np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count))),
        cell_ids=cell_ids,
        cell_claimed=np.zeros((count, MAX_NUMA), dtype=np.bool_),
        cell_isolated=np.zeros((count, MAX_NUMA), dtype=np.bool_),
        memory_group=memory_group,
        unaligned_gpus=np.zeros(count, dtype=np.int16),
        bandwidth=draws((count, MAX_NUMA)),
        spanning_bandwidth=draws((count,)),
        local_distance=draws((count, MAX_NUMA)),
        spanning_distance=draws((count,)),
        gpu_share_free=draw(st.sampled_from([None, np.full(count, 500.0), np.full(count, 1000.0)])),
    )


@st.composite
def demands(draw: st.DrawFn) -> PodDemand:
    """A pod's demand as ``demand_of`` shapes it, including a resource no node offers now and then."""
    cpus = draw(st.integers(0, 24))
    memory = draw(st.integers(0, 24)) * GIB
    hugepages = draw(st.sampled_from([0, 0, 1, 3])) * GIB
    gpus = draw(st.sampled_from([0, 0, 1, 2, 4, 8]))
    share = draw(st.sampled_from([0, 0, 0, 300, 700]))
    unknown = draw(st.sampled_from([(), (), (), (("example.com/fpga", 1.0),)]))
    memory_requests = tuple((name, float(v)) for name, v in ((HUGE, hugepages), (MEMORY, memory)) if v)
    devices = tuple((name, float(v)) for name, v in ((GPU_SHARE, share), (GPU, gpus)) if v) + unknown
    guaranteed = draw(st.booleans())
    node_requests = ((CPU, cpus * 1000.0),) if cpus else ()
    return PodDemand(
        node_requests=node_requests + memory_requests + devices,
        exclusive_cpus=cpus if guaranteed and draw(st.booleans()) else 0,
        memory_requests=memory_requests,
        device_requests=devices,
        guaranteed=guaranteed,
        containers=draw(st.sampled_from([1, 1, 1, 2, 3])),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_arrays(), demands())
def test_compiled_verdicts_are_the_numpy_paths(arrays: NodeArrays, demand: PodDemand) -> None:
    rows = np.arange(len(arrays.numa_count), dtype=np.int64)
    assert_same_verdicts(*both(lambda: filter_nodes(arrays, rows, demand)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node_arrays(), demands(), st.sampled_from(INTENTS))
def test_compiled_score_components_are_the_numpy_paths(
    arrays: NodeArrays, demand: PodDemand, intent: PodIntent | None
) -> None:
    rows = np.arange(len(arrays.numa_count), dtype=np.int64)[::-1].copy()
    assert_same_components(*both(lambda: node_components(arrays, rows, demand, intent=intent)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kubelet_nodes(), min_size=1, max_size=6), kubelet_pods())
def test_compiled_verdicts_on_kubelet_model_nodes(cluster: list[object], pod: Pod) -> None:
    """The nodes and pods of the kubelet-fidelity property (tests/placement/core/test_feasibility.py)."""
    arrays = arrays_of(cluster)  # type: ignore[arg-type]
    rows = np.arange(len(cluster), dtype=np.int64)
    demand = demand_of(pod)
    assert_same_verdicts(*both(lambda: filter_nodes(arrays, rows, demand)))
    assert_same_components(*both(lambda: node_components(arrays, rows, demand, intent=None)))


@pytest.fixture(scope="module")
def fixture_cluster() -> NodeArrays:
    """The benchmarks' cluster: CPU, 8x H100 (2 and 4 cells) and 4x L40S nodes under every kubelet policy."""
    index, _ = build(60)
    return index.arrays()


def _shapes() -> dict[str, Pod]:
    def pod(cpus: int, memory_gib: int, gpus: int, qos: QOSClass) -> Pod:
        devices = ((GPU, gpus),) if gpus else ()
        return Pod((Container("main", cpu_millis=cpus * 1000, memory=memory_gib * GIB, devices=devices),), qos=qos)

    return {
        **pods(),
        "burstable gpu pod": pod(6, 64, 2, QOSClass.BURSTABLE),
        "whole-node gpu pod": pod(96, 1024, 8, QOSClass.GUARANTEED),
        "cpu pod wider than a cell": pod(80, 600, 0, QOSClass.GUARANTEED),
    }


@pytest.mark.parametrize("shape", sorted(_shapes()))
@pytest.mark.parametrize("count", [1, 2, 4, 16, 60])
def test_compiled_kernel_on_the_fixture_machines(fixture_cluster: NodeArrays, shape: str, count: int) -> None:
    demand = demand_of(_shapes()[shape])
    rows = np.random.default_rng(count).choice(60, count, replace=False).astype(np.int64)
    reference, compiled = both(lambda: filter_nodes(fixture_cluster, rows, demand))
    assert_same_verdicts(reference, compiled)
    feasible = rows[reference.feasible]
    assert_same_components(*both(lambda: node_components(fixture_cluster, feasible, demand, intent=None)))


def test_the_benchmark_pods_are_answered_by_the_kernel(fixture_cluster: NodeArrays) -> None:
    """The pods the service benchmark sends are covered: the kernel answers, not the numpy fallback."""
    rows = np.arange(60, dtype=np.int64)
    with compiled_kernel():
        for pod in pods().values():
            compiled = kernel.for_rows(len(rows))
            assert compiled is not None
            demand = demand_of(pod)
            assert filter_nodes(fixture_cluster, rows, demand).feasible.any()
            assert feasibility._compiled_filter(fixture_cluster, rows, demand) is not None
            several = replace(demand, containers=2)
            assert feasibility._compiled_filter(fixture_cluster, rows, several) is None  # the exact model's
        gpu_pod = demand_of(pods()["gpu pod (24 CPUs, 256 GiB, 4 GPUs)"])
        refused = filter_nodes(fixture_cluster, rows, gpu_pod)
        assert refused.messages  # CPU nodes lack GPUs, and single-numa-node refuses 4 GPUs with 24 CPUs on one cell


def test_decisions_under_churn_are_the_same_with_the_kernel() -> None:
    """The service's path (the decision cache judging only changed nodes) decides as the numpy path does:
    the same feasible nodes, reasons, order and points, decision after decision while pods come and go."""
    outcomes: dict[bool, list[tuple[FilterOutcome, tuple[str, ...], list[float], dict[str, list[float]]]]] = {}
    for compiled in (False, True):
        index, churn = churned_cluster(60)
        engine = PlacementEngine.over(index)
        spec, names = gpu_pod_spec(), node_names(60)
        decisions = []
        if compiled:
            assert kernel.enable() is None
        try:
            for _ in range(40):
                churn.step()
                filtered = engine.filter(spec, names)
                scored = engine.score(spec, filtered.feasible)
                points = {name: list(values) for name, values in scored.points.items()}
                decisions.append((filtered, scored.nodes, list(scored.totals), points))
        finally:
            kernel.disable()
        outcomes[compiled] = decisions
    assert outcomes[True] == outcomes[False]
    assert any(filtered.rejected for filtered, *_ in outcomes[True])  # reasons are compared, not only verdicts


def test_calls_over_the_row_limit_go_to_numpy(fixture_cluster: NodeArrays) -> None:
    demand = demand_of(pods()["gpu pod (24 CPUs, 256 GiB, 4 GPUs)"])
    with compiled_kernel(max_rows=4):
        assert feasibility._compiled_filter(fixture_cluster, np.arange(4, dtype=np.int64), demand) is not None
        assert feasibility._compiled_filter(fixture_cluster, np.arange(5, dtype=np.int64), demand) is None
    assert kernel.for_rows(1) is None


def test_without_numba_the_numpy_path_answers_and_says_why(
    fixture_cluster: NodeArrays, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # what an import of a missing package raises
    monkeypatch.delitem(sys.modules, "placement.core.kernel.compiled", raising=False)
    reason = kernel.enable(ahead_of_time=False)
    assert reason is not None
    assert "numpy path answers" in reason
    assert "numba" in reason
    assert kernel.for_rows(1) is None
    rows = np.arange(3, dtype=np.int64)
    assert filter_nodes(fixture_cluster, rows, demand_of(pods()["cpu pod (8 CPUs, 32 GiB)"])).feasible.any()


def test_a_row_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1, not 0"):
        kernel.enable(max_rows=0)


@pytest.mark.slow
def test_the_benchmark_reports_every_figure_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks.compiled_kernel's call and decision parts at a tiny size: every row count, both functions and
    pods, and the decision figures, each path next to the other (no timing is asserted). Its cost part
    (fresh processes compiling and measuring memory, ~12 s) is left to the benchmark's own runs."""
    benchmark_calls(20, large=1_500)
    benchmark_decisions(20)
    report = capsys.readouterr().out
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith("| cpu pod") or "| gpu pod" in line]
    reported = {(row[0].strip("| "), row[1], row[2]) for row in rows}
    for pod in ("cpu pod", "gpu pod"):
        for function in ("filter_nodes", "node_components"):
            for count in ("1", "2", "4", "16", "1,000", "1,500"):
                assert (pod, function, count) in reported
    assert "| numpy path |" in report
    assert "| compiled kernel |" in report
    assert "CPU saved per decision" in report


def test_a_compile_failure_is_one_plain_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba's typing errors run to pages in terminal colours; the reason ``enable`` gives is their first line."""

    def failing(_: object) -> None:
        raise RuntimeError("\x1b[1m\x1b[1mFailed in nopython mode pipeline\x1b[0m\nNo implementation of function")

    monkeypatch.setattr(kernel, "_warm_up", failing)
    reason = kernel.enable(ahead_of_time=False)
    assert (
        reason
        == "compiled admission kernel off, the numpy path answers: RuntimeError: Failed in nopython mode pipeline"
    )
    assert kernel.for_rows(1) is None
