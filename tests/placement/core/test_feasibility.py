"""The vectorised admission rules against the exact Topology Manager port, node by node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubenexus.topology.model import NodeTopology, PathKind
from kubenexus.topology.topo_matrix import parse_topo_matrix
from placement.core.feasibility import filter_nodes
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.topology_manager import (
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    Pod,
    QOSClass,
    TopologyPolicy,
    TopologyScope,
    admit,
)
from placement.core.vocabulary import CPU, MAX_NUMA, POLICY_CODES, NodeArrays, PolicyCode, ScopeCode, demand_of
from tests.conftest import require_shared
from tests.machines.node_topologies import GIB, P5_CAPTURE, inline_nvswitch

GPU = "nvidia.com/gpu"
HUGE = "hugepages-1Gi"
RESOURCES = (CPU, "memory", HUGE, GPU)
_PLENTY = 1e15  # node-level amounts that never bind: the property is about the NUMA rules


def arrays_of(nodes: Sequence[NodeResources]) -> NodeArrays:
    """``NodeArrays`` for exact-model nodes, one slot each, as the index would hold them."""
    count = len(nodes)
    shape = (len(RESOURCES), count, MAX_NUMA)
    total, free = np.zeros(shape), np.zeros(shape)
    allocatable = np.full((len(RESOURCES), count), _PLENTY)
    node_free = np.full((len(RESOURCES), count), _PLENTY)
    cell_ids = np.full((count, MAX_NUMA), -1, dtype=np.int16)
    memory_group = np.zeros((count, MAX_NUMA), dtype=np.uint8)
    unaligned_gpus = np.zeros(count, dtype=np.int16)
    for n, node in enumerate(nodes):
        cells = sorted(node.cells, key=lambda c: c.id)
        position = {cell.id: k for k, cell in enumerate(cells)}
        for k, cell in enumerate(cells):
            cell_ids[n, k] = cell.id
            if cell.memory_assignments:
                memory_group[n, k] = sum(1 << position[i] for i in cell.memory_group or (cell.id,))
            total[0, n, k], free[0, n, k] = cell.cpus, cell.free_cpus
            for pool in cell.memory:
                column = RESOURCES.index(pool.resource)
                total[column, n, k], free[column, n, k] = pool.allocatable, pool.free
            for group in node.devices:
                if group.numa_ids == (cell.id,):
                    total[3, n, k] += group.total
                    free[3, n, k] += group.free
        allocatable[3, n] = sum(g.total for g in node.devices)
        node_free[3, n] = sum(g.free for g in node.devices)
        unaligned_gpus[n] = sum(g.total for g in node.devices if not g.numa_ids)
    kubelets = [node.kubelet for node in nodes]
    return NodeArrays(
        resources=RESOURCES,
        cell_total=total,
        cell_free=free,
        node_allocatable=allocatable,
        node_free=node_free,
        numa_count=np.array([len(n.cells) for n in nodes], dtype=np.int8),
        policy=np.array([POLICY_CODES[k.topology_policy.value] for k in kubelets], dtype=np.int8),
        scope=np.array(
            [ScopeCode.POD if k.scope is TopologyScope.POD else ScopeCode.CONTAINER for k in kubelets], dtype=np.int8
        ),
        cpu_static=np.array([k.cpu_manager_policy is CpuManagerPolicy.STATIC for k in kubelets]),
        memory_static=np.array([k.memory_manager_policy is MemoryManagerPolicy.STATIC for k in kubelets]),
        cell_ids=cell_ids,
        cell_claimed=np.zeros((count, MAX_NUMA), dtype=np.bool_),
        cell_isolated=np.zeros((count, MAX_NUMA), dtype=np.bool_),
        memory_group=memory_group,
        unaligned_gpus=unaligned_gpus,
        bandwidth=np.zeros((count, MAX_NUMA), dtype=np.float32),
        spanning_bandwidth=np.zeros(count, dtype=np.float32),
        local_distance=np.zeros((count, MAX_NUMA), dtype=np.float32),
        spanning_distance=np.zeros(count, dtype=np.float32),
    )


@st.composite
def nodes(draw: st.DrawFn, *, memory_manager: bool = False) -> NodeResources:
    """A random node; ``memory_manager``: a Static memory manager that holds assignments, wider groups."""
    count = draw(st.integers(2 if memory_manager else 1, 4))
    ids = sorted(draw(st.sets(st.integers(0, 7), min_size=count, max_size=count)))
    hugepages = draw(st.booleans())
    # The memory manager's existing assignments, as the index holds them: groups partitioning some cells
    # (a group of one cell is a single-NUMA assignment; None: the cell holds none), where a cell of a
    # multi-NUMA group may hold a single-NUMA assignment made after the group (``alone``).
    choices = [None, 0, 0, 1] if memory_manager else [None, None, 0, 1, 2]
    labels = draw(st.lists(st.sampled_from(choices), min_size=count, max_size=count))
    alone = draw(st.lists(st.sampled_from([False, False, False, True]), min_size=count, max_size=count))
    if not memory_manager and not draw(st.booleans()):
        labels = [None] * count
    groups = {label: tuple(i for i, same in zip(ids, labels, strict=True) if same == label) for label in labels}
    cells = []
    devices = []
    for numa_id, label, single in zip(ids, labels, alone, strict=True):
        cpus = draw(st.integers(0, 8))
        memory = draw(st.integers(0, 8)) * GIB
        # Free memory matters less than the groups here: mostly ample.
        least_free = memory // GIB // 2 if memory_manager else 0
        pools = [MemoryPool("memory", memory, draw(st.integers(least_free, memory // GIB)) * GIB)]
        if hugepages:
            pages = draw(st.integers(0, 4)) * GIB
            pools.append(MemoryPool(HUGE, pages, draw(st.integers(0, pages // GIB)) * GIB))
        group = () if label is None else (numa_id,) if single else groups[label]
        cells.append(
            NumaCellResources(
                numa_id,
                cpus,
                draw(st.integers(0, cpus)),
                tuple(pools),
                memory_group=group,
                memory_assignments=len(group),
            )
        )
        gpus = draw(st.integers(0, 3))
        if gpus:
            devices.append(DeviceGroup(GPU, (numa_id,), gpus, draw(st.integers(0, gpus))))
    if draw(st.booleans()):
        loose = draw(st.integers(1, 2))
        devices.append(DeviceGroup(GPU, (), loose, draw(st.integers(0, loose))))
    kubelet = KubeletConfig(
        topology_policy=draw(st.sampled_from(list(TopologyPolicy))),
        scope=draw(st.sampled_from(list(TopologyScope))),
        cpu_manager_policy=draw(st.sampled_from(list(CpuManagerPolicy))),
        memory_manager_policy=(
            MemoryManagerPolicy.STATIC if memory_manager else draw(st.sampled_from(list(MemoryManagerPolicy)))
        ),
    )
    return NodeResources(cells=tuple(cells), devices=tuple(devices), kubelet=kubelet)


@st.composite
def containers(draw: st.DrawFn, name: str, *, guaranteed: bool) -> Container:
    # A Guaranteed container has CPU and memory limits (= requests), so both are above zero.
    cpu = draw(st.sampled_from([500, 1000, 2000, 3000, 4000, 6000, 1500] + ([] if guaranteed else [0])))
    hugepages = draw(st.integers(0, 3)) * GIB
    return Container(
        name=name,
        cpu_millis=cpu,
        memory=draw(st.integers(1 if guaranteed else 0, 10)) * GIB,
        hugepages=((HUGE, hugepages),) if hugepages else (),
        devices=((GPU, draw(st.integers(0, 4))),),
    )


@st.composite
def pods(draw: st.DrawFn) -> Pod:
    count = draw(st.sampled_from([1, 1, 1, 2, 3]))
    init = draw(st.sampled_from([0, 0, 0, 1]))
    qos = draw(st.sampled_from([QOSClass.GUARANTEED, QOSClass.GUARANTEED, QOSClass.BURSTABLE]))
    guaranteed = qos is QOSClass.GUARANTEED
    return Pod(
        containers=tuple(draw(containers(f"c{i}", guaranteed=guaranteed)) for i in range(count)),
        init_containers=tuple(draw(containers(f"init{i}", guaranteed=guaranteed)) for i in range(init)),
        qos=qos,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(), min_size=1, max_size=6), pods())
def test_vectorised_admission_is_the_kubelets(cluster: list[NodeResources], pod: Pod) -> None:
    """Every node called feasible is admitted by the exact kubelet model, and (node-level amounts aside,
    which never bind here) every admitted node is called feasible."""
    _assert_vectorised_is_exact(cluster, pod)


def _assert_vectorised_is_exact(cluster: list[NodeResources], pod: Pod) -> None:
    arrays = arrays_of(cluster)
    rows = np.arange(len(cluster), dtype=np.int64)
    result = filter_nodes(arrays, rows, demand_of(pod))
    for position, node in enumerate(cluster):
        expected = admit(node, pod)
        # A device resource no plugin registered on the node: the kubelet's device manager skips it
        # (isDevicePluginResource) and its resource fit ignores it (predicate.go removeMissingExtendedResources),
        # kube-scheduler's NodeResourcesFit refuses it, as the node-level fit does.
        registered = {group.resource for group in node.devices}
        unknown = any(n > 0 and name not in registered for c in pod.all_containers() for name, n in c.devices)
        admitted = expected.admit and not unknown
        assert bool(result.feasible[position]) == admitted, (node, pod, result.reason(position), expected)
        if not result.feasible[position]:
            assert result.reason(position)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(nodes(memory_manager=True), min_size=1, max_size=6), containers("c", guaranteed=True))
def test_vectorised_admission_with_memory_groups_is_the_kubelets(cluster: list[NodeResources], app: Container) -> None:
    """The same on nodes whose Static memory manager holds other pods' memory: the groups decide which
    masks the memory provider hints, and a Guaranteed pod of one container is decided by the vectorised
    rules but for best-effort with a group of 3+ cells and a single-NUMA assignment inside a group."""
    _assert_vectorised_is_exact(cluster, Pod((app,), qos=QOSClass.GUARANTEED))


def _node(
    policy: TopologyPolicy, cells: Sequence[tuple[int, int, int]], *, scope: TopologyScope = TopologyScope.POD
) -> NodeResources:
    """Cells as (cpus, free cpus, gpus) with every GPU free; static CPU manager."""
    return NodeResources(
        cells=tuple(NumaCellResources(i, c, f) for i, (c, f, _) in enumerate(cells)),
        devices=tuple(DeviceGroup(GPU, (i,), g, g) for i, (_, _, g) in enumerate(cells) if g),
        kubelet=KubeletConfig(topology_policy=policy, scope=scope, cpu_manager_policy=CpuManagerPolicy.STATIC),
    )


def _pod(cpus: int, gpus: int = 0) -> Pod:
    devices = ((GPU, gpus),) if gpus else ()
    return Pod(containers=(Container("c", cpu_millis=cpus * 1000, devices=devices),), qos=QOSClass.GUARANTEED)


@pytest.mark.parametrize(
    ("cells", "gpu_cell"),
    [
        # GPU hints span only cell 1 (since 1.36, the cells hosting the devices), memory's only cell 0.
        (((0, 1, None), (0, 0, 1)), 1),
        # CPU hints span only cell 0 (the cells with CPUs), memory's only cell 1.
        (((1, 0, None), (0, 1, 1)), None),
    ],
    ids=["gpus-apart-from-memory", "cpus-apart-from-memory"],
)
def test_best_effort_falls_back_to_every_cell_and_breaks_a_memory_group(
    cells: tuple[tuple[int, int, int | None], ...], gpu_cell: int | None
) -> None:
    """No cell is in a hint of every provider: best-effort's merge keeps its default (every cell), and the
    Static memory manager refuses it, since one of its cells holds a single-NUMA assignment."""
    node = NodeResources(
        cells=tuple(
            NumaCellResources(
                i,
                cpus,
                cpus,
                (MemoryPool("memory", gib * GIB, gib * GIB),),
                memory_group=() if group is None else (group,),
                memory_assignments=0 if group is None else 1,
            )
            for i, (cpus, gib, group) in enumerate(cells)
        ),
        devices=() if gpu_cell is None else (DeviceGroup(GPU, (gpu_cell,), 1, 1),),
        kubelet=KubeletConfig(
            topology_policy=TopologyPolicy.BEST_EFFORT,
            cpu_manager_policy=CpuManagerPolicy.STATIC,
            memory_manager_policy=MemoryManagerPolicy.STATIC,
        ),
    )
    devices = () if gpu_cell is None else ((GPU, 1),)
    app = Container("c", cpu_millis=1000 if gpu_cell is None else 500, memory=GIB, devices=devices)
    pod = Pod((app,), qos=QOSClass.GUARANTEED)
    assert "violates NUMA node allocation" in admit(node, pod).message
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(pod))
    assert not result.feasible[0]
    assert "other pods' memory groups" in result.reason(0)


def test_restricted_needs_one_mask_preferred_by_every_provider() -> None:
    # CPUs fit one cell (narrowest: {0}); 3 GPUs need both cells (narrowest: 2 cells). Every preferred
    # hint contains cell 0, but no single mask is preferred by both: the kubelet's merge is not preferred.
    node = _node(TopologyPolicy.RESTRICTED, [(8, 8, 2), (8, 8, 2)])
    pod = _pod(4, gpus=3)
    assert not admit(node, pod).admit
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(pod))
    assert not result.feasible[0]
    assert result.reason(0) == "kubelet restricted: no NUMA set is preferred by every resource"


def test_preferred_is_judged_on_total_not_free_capacity() -> None:
    # Cell 0 could hold 4 CPUs in total but has 2 free; cell 1 has 4 free: {1} is preferred and fits.
    node = _node(TopologyPolicy.SINGLE_NUMA_NODE, [(4, 2, 0), (4, 4, 0)])
    assert filter_nodes(arrays_of([node]), np.array([0]), demand_of(_pod(4))).feasible[0]
    # 6 CPUs: no cell's TOTAL covers it, so the narrowest is two cells and single-numa-node rejects.
    wide = _node(TopologyPolicy.SINGLE_NUMA_NODE, [(4, 4, 0), (4, 4, 0)])
    result = filter_nodes(arrays_of([wide]), np.array([0]), demand_of(_pod(6)))
    assert not result.feasible[0]
    assert not admit(wide, _pod(6)).admit


def test_best_effort_admits_whatever_fits_the_node() -> None:
    node = _node(TopologyPolicy.BEST_EFFORT, [(4, 4, 0), (4, 4, 0)])
    assert filter_nodes(arrays_of([node]), np.array([0]), demand_of(_pod(6))).feasible[0]
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(_pod(9)))
    assert result.reason(0) == "not enough CPUs left for exclusive allocation"


def _memory_node(
    policy: TopologyPolicy, cells: Sequence[tuple[int, tuple[int, ...]]], gpus: Sequence[int] = ()
) -> NodeResources:
    """Cells as (free GiB of memory, the memory manager's group: () for none) with ids 0..; one free GPU on
    each cell of ``gpus``; Static memory manager, no CPU manager."""
    return NodeResources(
        cells=tuple(
            NumaCellResources(
                i,
                0,
                0,
                (MemoryPool("memory", gib * GIB, gib * GIB),),
                memory_group=group,
                memory_assignments=len(group),
            )
            for i, (gib, group) in enumerate(cells)
        ),
        devices=tuple(DeviceGroup(GPU, (i,), 1, 1) for i in gpus),
        kubelet=KubeletConfig(topology_policy=policy, memory_manager_policy=MemoryManagerPolicy.STATIC),
    )


def _memory_pod(gib: int, gpus: int = 0) -> Pod:
    container = Container("c", cpu_millis=500, memory=gib * GIB, devices=((GPU, gpus),) if gpus else ())
    return Pod(containers=(container,), qos=QOSClass.GUARANTEED)


def _verdict(node: NodeResources, pod: Pod) -> tuple[bool, str, list[int]]:
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(pod))
    assert bool(result.feasible[0]) == admit(node, pod).admit
    return bool(result.feasible[0]), result.reason(0), list(result.exact_rows)


def _without_groups(node: NodeResources) -> NodeResources:
    return replace(node, cells=tuple(replace(c, memory_group=(), memory_assignments=0) for c in node.cells))


def test_a_cell_used_alone_joins_no_multi_numa_memory_hint() -> None:
    # 6 GiB need both cells; cell 0 already holds a single-NUMA assignment (calculateHints: len(Cells) == 1).
    node = _memory_node(TopologyPolicy.RESTRICTED, [(4, (0,)), (4, ())])
    assert _verdict(_without_groups(node), _memory_pod(6))[0]
    assert _verdict(node, _memory_pod(6)) == (
        False,
        "kubelet restricted: no NUMA set is preferred by every resource",
        [],
    )
    # Under none the memory manager's default hint is one of its hints: there is none either.
    loose = replace(node, kubelet=replace(node.kubelet, topology_policy=TopologyPolicy.NONE))
    feasible, reason, _ = _verdict(loose, _memory_pod(6))
    assert not feasible
    assert reason.startswith("kubelet memory manager:")
    # A cell of a multi-NUMA group gives no single-cell hint; the group itself is one.
    grouped = _memory_node(TopologyPolicy.SINGLE_NUMA_NODE, [(4, (0, 1)), (4, (0, 1))])
    assert not _verdict(grouped, _memory_pod(2))[0]
    assert _verdict(
        replace(grouped, kubelet=replace(grouped.kubelet, topology_policy=TopologyPolicy.RESTRICTED)), _memory_pod(6)
    )[0]


def test_best_effort_with_a_group_of_three_cells_uses_the_exact_model() -> None:
    # The GPUs' hint {2, 3} lies strictly inside the group {0, 2, 3}: the merged hint is {2, 3}, whose free
    # memory holds the pod, and the memory manager refuses it (isAffinityViolatingNUMAAllocations).
    node = _memory_node(
        TopologyPolicy.BEST_EFFORT, [(0, (0, 2, 3)), (1, ()), (0, (0, 2, 3)), (1, (0, 2, 3))], gpus=(2, 3)
    )
    assert _verdict(_without_groups(node), _memory_pod(1, gpus=2))[0]
    feasible, reason, exact = _verdict(node, _memory_pod(1, gpus=2))
    assert not feasible
    assert "preferred hint violates NUMA node allocation" in reason
    assert exact == [0]


def test_a_single_numa_assignment_inside_a_group_uses_the_exact_model() -> None:
    # Cell 2 was given memory alone after the group {0, 2} was formed: no memory hint is left (cell 0 is in
    # a group, the group has a cell used alone), so the memory manager hints nothing and the GPU's hint {0}
    # wins; cell 0's free memory holds the pod and the kubelet admits it there.
    node = _memory_node(TopologyPolicy.BEST_EFFORT, [(1, (0, 2)), (0, ()), (0, (2,)), (0, ())], gpus=(0,))
    assert _verdict(node, _memory_pod(1, gpus=1)) == (True, "", [0])


def test_container_scope_with_several_containers_uses_the_exact_model() -> None:
    node = _node(TopologyPolicy.SINGLE_NUMA_NODE, [(4, 4, 0), (4, 4, 0)], scope=TopologyScope.CONTAINER)
    pod = Pod(containers=(Container("a", cpu_millis=4000), Container("b", cpu_millis=4000)), qos=QOSClass.GUARANTEED)
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(pod))
    # Each container fits a cell of its own: admitted container by container, as the kubelet does.
    assert result.feasible[0]
    assert list(result.exact_rows) == [0]
    assert admit(node, pod).admit


@pytest.mark.parametrize(
    ("intent", "feasible"),
    [
        (PodIntent(), True),
        (PodIntent(policy=NumaIntentPolicy.SINGLE_NUMA), False),
        (PodIntent(affinity_node_ids=frozenset({1})), True),
        (PodIntent(anti_affinity_node_ids=frozenset({0, 1})), False),
        (PodIntent(affinity_node_ids=frozenset({5})), False),
    ],
)
def test_intent_adds_to_the_kubelet_policy(intent: PodIntent, feasible: bool) -> None:
    # best-effort kubelet, 6 CPUs over two 4-CPU cells: the kubelet admits; a single-numa intent does not.
    node = _node(TopologyPolicy.BEST_EFFORT, [(4, 4, 0), (4, 4, 0)])
    pod = _pod(3) if intent.affinity_node_ids else _pod(6)
    result = filter_nodes(arrays_of([node]), np.array([0]), demand_of(pod), intent)
    assert bool(result.feasible[0]) == feasible, result.reason(0)


def test_isolated_intent_needs_a_cell_without_our_pods() -> None:
    node = _node(TopologyPolicy.SINGLE_NUMA_NODE, [(8, 8, 0), (8, 8, 0)])
    arrays = arrays_of([node])
    arrays.cell_claimed[0, 0] = True
    intent = PodIntent(policy=NumaIntentPolicy.ISOLATED)
    assert filter_nodes(arrays, np.array([0]), demand_of(_pod(2)), intent).feasible[0]
    arrays.cell_claimed[0, 1] = True
    result = filter_nodes(arrays, np.array([0]), demand_of(_pod(2)), intent)
    assert result.reason(0).startswith("intent isolated")


def test_too_many_numa_nodes_for_the_topology_manager() -> None:
    node = _node(TopologyPolicy.RESTRICTED, [(2, 2, 0)] * 2)
    arrays = arrays_of([node])
    arrays.numa_count[0] = MAX_NUMA + 1
    result = filter_nodes(arrays, np.array([0]), demand_of(_pod(1)))
    assert "more than 8 NUMA nodes" in result.reason(0)
    arrays.policy[0] = PolicyCode.NONE
    assert filter_nodes(arrays, np.array([0]), demand_of(_pod(1))).feasible[0]


def test_inline_nvswitch_node_matches_the_p5_capture() -> None:
    """The stand-in used when ../shared is absent has the capture's CPUs, cells and links."""
    capture = parse_topo_matrix(require_shared(P5_CAPTURE).read_text())
    inline = inline_nvswitch()
    assert [(g.numa_node, g.cpu_affinity) for g in inline.gpus] == [(g.numa_node, g.cpu_affinity) for g in capture.gpus]
    assert [c.cpus for c in inline.numa_cells] == [c.cpus for c in capture.numa_cells]
    assert inline.machine.online_cpus == capture.machine.online_cpus

    def links(topology: NodeTopology) -> set[tuple[str, str, PathKind, int]]:
        return {(k.a, k.b, k.path, k.nvlinks) for k in topology.links}

    assert links(inline) == links(capture)
