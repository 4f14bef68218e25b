"""The kubelet Topology Manager model against the kubelet's own test tables, plus a brute-force property.

Ported tables live in ``tests/kubelet_cases/``; each module names its kubernetes/kubernetes source file and
the commit it was read at (``pkg/kubelet/cm/topologymanager/policy*_test.go``, ``bitmask/bitmask_test.go``,
``cpumanager/topology_hints_test.go``, ``devicemanager/topology_hints_test.go``). Case ids are the upstream
case names. Not ported: the "regenerate hints if already allocated" cases (kubelet restart; a pod being
admitted has no allocations), the CPU manager ``align-by-socket`` option, the alpha NUMA allocation-strategy
scores, feature-gate checks of policy options (both options are GA), and the scope tests that only check
that a mock policy receives the providers' maps (Go plumbing with no counterpart here).

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.core.topology_manager import (
    TOPOLOGY_AFFINITY_ERROR,
    TOPOLOGY_AFFINITY_MESSAGE,
    TOPOLOGY_MANAGER_UNAVAILABLE,
    UNEXPECTED_ADMISSION_ERROR,
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    NumaInfo,
    NumaMask,
    Pod,
    PolicyOptionError,
    PolicyOptions,
    QOSClass,
    TopologyHint,
    TopologyPolicy,
    TopologyScope,
    admit,
    parse_policy_options,
    policy_merge,
)
from placement.core.topology_manager.admission import (
    NO_NUMA_DISTANCES_MESSAGE,
    NUMA_ID_ABOVE_63,
    SPARSE_NUMA_DISTANCES_MESSAGE,
)
from placement.core.topology_manager.bitmask import iterate_masks
from placement.core.topology_manager.merge import (
    HintMerger,
    ProviderHints,
    can_admit,
    filter_single_numa_hints,
    max_of_min_affinity_counts,
)
from placement.core.topology_manager.providers import NodeState, guaranteed_cpus, pod_level_request
from tests.kubelet_cases import bitmask as bm
from tests.kubelet_cases import cpu_hints, device_hints
from tests.kubelet_cases import policy_merge as pm
from tests.kubelet_cases.hints import ANY_NOT_PREFERRED, ANY_PREFERRED, nonpref, pref

# --- policy merge tables ----------------------------------------------------------------------------

BEST_EFFORT_LIKE = [TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED]
FOUR = pm.FOUR_NODES.nodes
EIGHT = pm.EIGHT_NODES.nodes


def _merge_params() -> list[object]:
    runs: list[object] = []
    for policy in BEST_EFFORT_LIKE:
        # TestPolicyBestEffortMerge / TestPolicyRestrictedMerge
        for case in pm.common_cases() + pm.best_effort_cases(FOUR) + pm.no_policy_option_cases():
            runs.append(pytest.param(policy, pm.FOUR_NODES, False, case, id=f"{policy}-{case.name}"))
        # TestPolicyBestEffortMergeClosestNUMA / TestPolicyRestrictedMergeClosestNUMA
        for case in pm.common_cases() + pm.best_effort_cases(EIGHT) + pm.closest_numa_cases():
            runs.append(pytest.param(policy, pm.EIGHT_NODES, True, case, id=f"{policy}-closest-{case.name}"))
    # TestPolicySingleNumaNodeMerge
    for case in pm.common_cases() + pm.single_numa_node_cases():
        runs.append(pytest.param(TopologyPolicy.SINGLE_NUMA_NODE, pm.FOUR_NODES, False, case, id=f"snn-{case.name}"))
    return runs


@pytest.mark.parametrize(("policy", "numa_info", "closest", "case"), _merge_params())
def test_policy_merge(policy: TopologyPolicy, numa_info: NumaInfo, closest: bool, case: pm.MergeCase) -> None:
    hint, _ = policy_merge(policy, numa_info, PolicyOptions(prefer_closest_numa=closest), case.providers)
    assert hint == case.expected


@pytest.mark.parametrize(
    ("description", "target", "current", "candidate", "expected"),
    pm.COMPARE_NARROWEST,
    ids=[c[0] for c in pm.COMPARE_NARROWEST],
)
def test_compare_hints_narrowest(
    description: str, target: int, current: TopologyHint | None, candidate: TopologyHint, expected: str
) -> None:
    merger = HintMerger(NumaInfo(()), (), target, use_closest=False)
    result = merger.compare(current, candidate)
    assert result is (current if expected == "current" else candidate)


@pytest.mark.parametrize(("hints", "expected"), pm.MAX_OF_MIN_AFFINITY_COUNTS)
def test_max_of_min_affinity_counts(hints: list[list[TopologyHint]], expected: int) -> None:
    assert max_of_min_affinity_counts(hints) == expected


@pytest.mark.parametrize(
    ("name", "hints", "expected"), pm.FILTER_SINGLE_NUMA_HINTS, ids=[c[0] for c in pm.FILTER_SINGLE_NUMA_HINTS]
)
def test_filter_single_numa_hints(
    name: str, hints: list[list[TopologyHint]], expected: list[list[TopologyHint]]
) -> None:
    assert filter_single_numa_hints(hints) == expected


@pytest.mark.parametrize(
    ("policy", "hint", "expected"),
    [
        # TestPolicyBestEffortCanAdmitPodResult
        (TopologyPolicy.BEST_EFFORT, ANY_NOT_PREFERRED, True),
        (TopologyPolicy.BEST_EFFORT, ANY_PREFERRED, True),
        # TestPolicyRestrictedCanAdmitPodResult
        (TopologyPolicy.RESTRICTED, ANY_NOT_PREFERRED, False),
        (TopologyPolicy.RESTRICTED, ANY_PREFERRED, True),
        # TestPolicySingleNumaNodeCanAdmitPodResult
        (TopologyPolicy.SINGLE_NUMA_NODE, ANY_NOT_PREFERRED, False),
    ],
)
def test_can_admit_pod_result(policy: TopologyPolicy, hint: TopologyHint, expected: bool) -> None:
    assert can_admit(policy, hint) is expected


# --- policy options (policy_options_test.go TestNewTopologyManagerOptions, topology_manager_test.go) ---


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "8"},
            PolicyOptions(True, 8),
            id="return TopologyManagerOptions with PreferClosestNUMA set to true",
        ),
        pytest.param(
            {"max-allowable-numa-nodes": "12"},
            PolicyOptions(False, 12),
            id="return TopologyManagerOptions with MaxAllowableNUMANodes set to 12",
        ),
        pytest.param({}, PolicyOptions(False, 8), id="return empty TopologyManagerOptions"),
    ],
)
def test_policy_options(raw: dict[str, str], expected: PolicyOptions) -> None:
    assert parse_policy_options(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"prefer-closest-numa-nodes": "not a boolean"},
            "bad value for option",
            id="fail to parse options with error PreferClosestNUMANodes",
        ),
        pytest.param(
            {"max-allowable-numa-nodes": "can't parse to int"},
            "unable to convert policy option to integer",
            id="fail to parse options with error MaxAllowableNUMANodes",
        ),
        pytest.param(
            {"unknown-option": "true"},
            "unknown Topology Manager Policy option:",
            id="Unknown policy name best-effort policy",
        ),
        pytest.param(
            {"max-allowable-numa-nodes": "7"}, 'the minimum value of "max-allowable-numa-nodes"', id="below default"
        ),
    ],
)
def test_policy_options_errors(raw: dict[str, str], message: str) -> None:
    with pytest.raises(PolicyOptionError, match=message):
        parse_policy_options(raw)


def test_more_than_max_allowable_numa_nodes() -> None:
    """topology_manager_test.go TestNewManager "more than 8 NUMA nodes": the kubelet does not start."""
    cells = tuple(NumaCellResources(i, 4, 4) for i in range(9))
    node = NodeResources(cells, kubelet=KubeletConfig(topology_policy=TopologyPolicy.BEST_EFFORT))
    result = admit(node, Pod((Container("c"),)))
    assert (result.admit, result.reason) == (False, TOPOLOGY_MANAGER_UNAVAILABLE)
    assert result.message == "unsupported on machines with more than 8 NUMA Nodes"
    raised = KubeletConfig(topology_policy=TopologyPolicy.BEST_EFFORT, options=PolicyOptions(False, 9))
    assert admit(NodeResources(cells, kubelet=raised), Pod((Container("c"),))).admit


def test_prefer_closest_without_distances_is_unavailable() -> None:
    """topology_manager_test.go "can't get NUMA distances": the kubelet does not start."""
    options = PolicyOptions(prefer_closest_numa=True)
    kubelet = KubeletConfig(topology_policy=TopologyPolicy.BEST_EFFORT, options=options)
    node = NodeResources((NumaCellResources(0, 4, 4),), kubelet=kubelet)
    result = admit(node, Pod((Container("c"),)))
    assert (result.admit, result.reason, result.message) == (
        False,
        TOPOLOGY_MANAGER_UNAVAILABLE,
        NO_NUMA_DISTANCES_MESSAGE,
    )


# --- bitmask (bitmask_test.go) -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "masks", "expected"), bm.AND, ids=[c[0] for c in bm.AND])
def test_bitmask_and(name: str, masks: list[list[int]], expected: list[int]) -> None:
    result = NumaMask.from_ids(masks[0])
    for ids in masks:
        result = result & NumaMask.from_ids(ids)
    assert result.ids == tuple(expected)


@pytest.mark.parametrize(("name", "masks", "expected"), bm.OR, ids=[c[0] for c in bm.OR])
def test_bitmask_or(name: str, masks: list[list[int]], expected: list[int]) -> None:
    result = NumaMask.from_ids(masks[0])
    for ids in masks:
        result = result | NumaMask.from_ids(ids)
    assert result.ids == tuple(expected)


@pytest.mark.parametrize(("name", "ids", "expected"), bm.IS_EMPTY, ids=[c[0] for c in bm.IS_EMPTY])
def test_bitmask_is_empty(name: str, ids: list[int], expected: bool) -> None:
    assert NumaMask.from_ids(ids).is_empty() is expected


@pytest.mark.parametrize(("name", "ids", "bit", "expected"), bm.IS_SET, ids=[c[0] for c in bm.IS_SET])
def test_bitmask_is_set(name: str, ids: list[int], bit: int, expected: bool) -> None:
    assert NumaMask.from_ids(ids).is_set(bit) is expected


@pytest.mark.parametrize(("name", "ids", "bits", "expected"), bm.ANY_SET, ids=[c[0] for c in bm.ANY_SET])
def test_bitmask_any_set(name: str, ids: list[int], bits: list[int], expected: bool) -> None:
    assert NumaMask.from_ids(ids).any_set(bits) is expected


@pytest.mark.parametrize(("name", "first", "second", "expected"), bm.IS_EQUAL, ids=[c[0] for c in bm.IS_EQUAL])
def test_bitmask_is_equal(name: str, first: list[int], second: list[int], expected: bool) -> None:
    assert (NumaMask.from_ids(first) == NumaMask.from_ids(second)) is expected


@pytest.mark.parametrize(("name", "ids", "expected"), bm.COUNT, ids=[c[0] for c in bm.COUNT])
def test_bitmask_count(name: str, ids: list[int], expected: int) -> None:
    assert NumaMask.from_ids(ids).count() == expected


@pytest.mark.parametrize(("name", "ids", "expected"), bm.GET_BITS, ids=[c[0] for c in bm.GET_BITS])
def test_bitmask_get_bits(name: str, ids: list[int], expected: list[int]) -> None:
    assert NumaMask.from_ids(ids).ids == tuple(expected)


@pytest.mark.parametrize(
    ("name", "first", "second", "expected"), bm.IS_NARROWER_THAN, ids=[c[0] for c in bm.IS_NARROWER_THAN]
)
def test_bitmask_is_narrower_than(name: str, first: list[int], second: list[int], expected: bool) -> None:
    assert NumaMask.from_ids(first).is_narrower_than(NumaMask.from_ids(second)) is expected


@pytest.mark.parametrize(("name", "bits"), bm.ITERATE_BIT_MASKS, ids=[c[0] for c in bm.ITERATE_BIT_MASKS])
def test_iterate_bit_masks(name: str, bits: int) -> None:
    assert sum(1 for _ in iterate_masks(range(bits))) == (1 << bits) - 1


def test_bitmask_rejects_bits_outside_0_63() -> None:
    """TestAdd "Add BitMask with bits outside range 0-63": bitmask.Add returns an error."""
    with pytest.raises(ValueError, match="range 0-63"):
        NumaMask.of(-1, 64)


def test_is_less_than_compares_the_integer() -> None:
    """IsLessThan is ``*s < *mask``: {1,2} (0b110) is less than {0,3} (0b1001)."""
    assert NumaMask.of(1, 2).is_less_than(NumaMask.of(0, 3))
    assert NumaMask.of(1, 2).is_narrower_than(NumaMask.of(0, 3))


# --- CPU manager (cpumanager/topology_hints_test.go) -------------------------------------------------


def _sorted(hints: Sequence[TopologyHint]) -> list[TopologyHint]:
    """``TopologyHint.LessThan`` order, as the upstream test sorts both sides."""
    return sorted(hints, key=lambda h: (not h.preferred, h.affinity.count() if h.affinity else 0, str(h.affinity)))


def _two_by_six(free0: int, free1: int) -> NodeResources:
    return NodeResources(
        (NumaCellResources(0, 6, free0), NumaCellResources(1, 6, free1)),
        kubelet=KubeletConfig(cpu_manager_policy=CpuManagerPolicy.STATIC),
    )


@pytest.mark.parametrize("pod_scope", [False, True], ids=["TestGetTopologyHints", "TestGetPodTopologyHints"])
@pytest.mark.parametrize(
    ("name", "cpus", "free", "expected"),
    cpu_hints.TOPOLOGY_HINTS,
    ids=[c[0] for c in cpu_hints.TOPOLOGY_HINTS],
)
def test_cpu_topology_hints(
    pod_scope: bool, name: str, cpus: int, free: tuple[int, int], expected: list[TopologyHint]
) -> None:
    container = Container("fakeContainer", cpu_millis=cpus * 1000)
    pod = Pod((container,), qos=QOSClass.GUARANTEED)
    if pod_scope:
        request = pod_level_request(pod, lambda c: guaranteed_cpus(pod, c))
    else:
        request = guaranteed_cpus(pod, container)
    hints = NodeState(_two_by_six(*free)).cpu_provider(request)
    assert hints is not None
    assert _sorted(hints["cpu"] or []) == _sorted(expected)


@pytest.mark.parametrize(
    ("name", "qos", "init", "app", "expected"),
    cpu_hints.POD_GUARANTEED_CPUS,
    ids=[f"{i}-{c[0]}" for i, c in enumerate(cpu_hints.POD_GUARANTEED_CPUS)],
)
def test_pod_guaranteed_cpus(
    name: str, qos: QOSClass, init: cpu_hints.Spec, app: cpu_hints.Spec, expected: int
) -> None:
    def containers(spec: cpu_hints.Spec, prefix: str) -> tuple[Container, ...]:
        return tuple(Container(f"{prefix}{i}", cpu_millis=n * 1000, restartable=r) for i, (n, r) in enumerate(spec))

    pod = Pod(containers(app, "app"), containers(init, "init"), qos)
    assert pod_level_request(pod, lambda c: guaranteed_cpus(pod, c)) == expected


def test_non_integral_cpu_gets_no_exclusive_cpus() -> None:
    pod = Pod((Container("c", cpu_millis=1500),), qos=QOSClass.GUARANTEED)
    assert NodeState(_two_by_six(6, 6)).cpu_provider(guaranteed_cpus(pod, pod.containers[0])) is None


# --- device manager (devicemanager/topology_hints_test.go) -------------------------------------------


def _device_node(groups: Sequence[DeviceGroup], cells: int = 2) -> NodeResources:
    return NodeResources(tuple(NumaCellResources(i, 0, 0) for i in range(cells)), devices=tuple(groups))


@pytest.mark.parametrize(
    ("description", "groups", "requests", "expected"),
    device_hints.TOPOLOGY_HINTS,
    ids=[c[0] for c in device_hints.TOPOLOGY_HINTS],
)
def test_device_topology_hints(
    description: str,
    groups: list[DeviceGroup],
    requests: dict[str, int],
    expected: dict[str, list[TopologyHint] | None],
) -> None:
    hints = NodeState(_device_node(groups)).device_provider(requests)
    assert hints is not None
    for resource, want in expected.items():
        got = hints[resource]
        assert (got is None) == (want is None)
        assert _sorted(got or []) == _sorted(want or [])


@pytest.mark.parametrize(
    ("description", "wanted", "groups", "hint", "expected"),
    device_hints.ALIGNED_ALLOCATION,
    ids=[c[0] for c in device_hints.ALIGNED_ALLOCATION],
)
def test_topology_aligned_allocation(
    description: str, wanted: int, groups: list[DeviceGroup], hint: TopologyHint, expected: dict[int, int]
) -> None:
    state = NodeState(_device_node(groups, cells=4))
    state.allocate_devices({"resource": wanted}, hint.affinity, init_container=False)
    taken: dict[int, int] = {}
    for group, free in zip(groups, state.free_devices, strict=True):
        if group.free != free and group.numa_ids:
            taken[group.numa_ids[0]] = taken.get(group.numa_ids[0], 0) + group.free - free
    assert taken == expected


# --- whole-pod admission (not upstream tables: scenarios that exercise scope and allocation) ----------


def _gpu_node(
    policy: TopologyPolicy, scope: TopologyScope = TopologyScope.CONTAINER, free_gpus: int = 2
) -> NodeResources:
    """Two cells of 8 CPUs and 64 GiB, two GPUs per cell."""
    gib = 1 << 30
    cells = tuple(NumaCellResources(i, 8, 8, memory=(MemoryPool("memory", 64 * gib, 64 * gib),)) for i in range(2))
    gpus = (DeviceGroup("nvidia.com/gpu", (0,), 2, free_gpus), DeviceGroup("nvidia.com/gpu", (1,), 2, 2))
    kubelet = KubeletConfig(
        topology_policy=policy,
        scope=scope,
        cpu_manager_policy=CpuManagerPolicy.STATIC,
        memory_manager_policy=MemoryManagerPolicy.STATIC,
    )
    return NodeResources(cells, ((10, 21), (21, 10)), gpus, kubelet)


def _gpu_pod(*containers: tuple[int, int]) -> Pod:
    """Guaranteed containers of (CPUs, GPUs) with 1 GiB each."""
    return Pod(
        tuple(
            Container(f"c{i}", cpu_millis=c * 1000, memory=1 << 30, devices=(("nvidia.com/gpu", g),))
            for i, (c, g) in enumerate(containers)
        ),
        qos=QOSClass.GUARANTEED,
    )


def test_single_numa_node_admits_an_aligned_pod() -> None:
    result = admit(_gpu_node(TopologyPolicy.SINGLE_NUMA_NODE), _gpu_pod((4, 2)))
    assert result.admit
    assert result.affinities[0].hint == pref(0)


def test_single_numa_node_rejects_a_pod_that_needs_two_cells() -> None:
    result = admit(_gpu_node(TopologyPolicy.SINGLE_NUMA_NODE), _gpu_pod((4, 3)))
    assert (result.admit, result.reason, result.message) == (False, TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE)


def test_best_effort_admits_the_same_pod_across_cells() -> None:
    result = admit(_gpu_node(TopologyPolicy.BEST_EFFORT), _gpu_pod((4, 3)))
    assert result.admit
    assert result.affinities[0].hint == nonpref(0, 1)


def test_preferred_is_judged_on_total_not_free() -> None:
    """Cell 0 has one free GPU left: a 2-GPU request is still 'preferred' only on one cell (cell 1)."""
    result = admit(_gpu_node(TopologyPolicy.RESTRICTED, free_gpus=1), _gpu_pod((2, 2)))
    assert result.admit
    assert result.affinities[0].hint == pref(1)


def test_container_scope_allocates_as_it_goes() -> None:
    """Each container fits one cell; together they exhaust both: the third container is rejected."""
    node = _gpu_node(TopologyPolicy.SINGLE_NUMA_NODE)
    result = admit(node, _gpu_pod((2, 2), (2, 2), (2, 1)))
    assert [a.hint for a in result.affinities] == [pref(0), pref(1)]
    assert (result.admit, result.container) == (False, "c2")


def test_pod_scope_needs_the_whole_pod_on_one_cell() -> None:
    node = _gpu_node(TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.POD)
    assert admit(node, _gpu_pod((2, 1), (2, 1))).admit
    assert not admit(node, _gpu_pod((2, 2), (2, 1))).admit
    container_scope = _gpu_node(TopologyPolicy.SINGLE_NUMA_NODE)
    assert admit(container_scope, _gpu_pod((2, 2), (2, 1))).admit


def test_policy_none_still_fails_allocation() -> None:
    result = admit(_gpu_node(TopologyPolicy.NONE), _gpu_pod((4, 5)))
    assert (result.admit, result.reason) == (False, UNEXPECTED_ADMISSION_ERROR)
    assert "requested number of devices unavailable for nvidia.com/gpu" in result.message


def test_init_container_cpus_are_reused() -> None:
    """An init container's exclusive CPUs are handed on (cpusToReuse), so 8 + 8 fits a 16-CPU node."""
    node = _gpu_node(TopologyPolicy.BEST_EFFORT)
    init = Container("init", cpu_millis=8000, memory=1 << 30)
    app = Container("app", cpu_millis=16000, memory=1 << 30)
    result = admit(node, Pod((app,), (init,), QOSClass.GUARANTEED))
    assert result.admit
    # The init container's 1 GiB went to cell 0 alone, which bars cell 0 from a cross-NUMA memory hint
    # (calculateHints): the memory manager offers {0} and {1} only, so the CPUs' {0,1} merges down to {0}.
    assert [a.hint for a in result.affinities] == [pref(0), nonpref(0)]


# --- property: the merge against a brute-force reference ---------------------------------------------


def _reference_merge(numa_info: NumaInfo, providers: Sequence[ProviderHints], closest: bool) -> TopologyHint:
    """All permutations, AND, then the best by an explicit ranking instead of the kubelet's pairwise fold:
    preferred first; among preferred the narrowest (or closest) mask; among non-preferred the masks whose
    width equals the widest per-resource minimum, then narrower ones from the widest down, then wider ones
    from the narrowest up. Ties go to the lower mask integer."""
    lists: list[list[TopologyHint]] = []
    for hints in providers:
        if not hints:
            lists.append([ANY_PREFERRED])
            continue
        lists.extend(
            [ANY_PREFERRED] if h is None else [ANY_NOT_PREFERRED] if not h else list(h) for h in hints.values()
        )
    everything = numa_info.default_affinity()
    merged: list[TopologyHint] = []
    for permutation in itertools.product(*lists):
        masks = [h.affinity for h in permutation if h.affinity is not None]
        mask = everything
        for m in masks:
            mask = mask & m
        preferred = all(h.preferred for h in permutation) and len(set(masks)) <= 1
        if mask.count():
            merged.append(TopologyHint(mask, preferred))
    if not merged:
        return TopologyHint(everything, False)
    widest_min = max(
        (min(h.affinity.count() for h in hs if h.affinity is not None) for hs in lists if any(h.affinity for h in hs)),
        default=0,
    )

    def tie(mask: NumaMask) -> tuple[float, int]:
        return (numa_info.average_distance(mask) if closest else 0.0, mask.bits)

    def rank(hint: TopologyHint) -> tuple[int, int, float, int]:
        assert hint.affinity is not None
        n = hint.affinity.count()
        if hint.preferred:
            return (0, n, *tie(hint.affinity))
        if n == widest_min:
            return (1, 0, *tie(hint.affinity))
        if n < widest_min:
            return (2, -n, *tie(hint.affinity))
        return (3, n, *tie(hint.affinity))

    return min(merged, key=rank)


_MASKS = st.builds(NumaMask, st.integers(min_value=0, max_value=15))
_HINT = st.one_of(
    st.builds(TopologyHint, _MASKS, st.booleans()),
    st.builds(TopologyHint, st.none(), st.booleans()),
)
_RESOURCE = st.one_of(st.none(), st.lists(_HINT, max_size=4))
_PROVIDER = st.one_of(st.none(), st.dictionaries(st.sampled_from(["a", "b", "c"]), _RESOURCE, max_size=2))


@settings(max_examples=300, deadline=None)
@given(
    providers=st.lists(_PROVIDER, max_size=3),
    closest=st.booleans(),
    distances=st.lists(st.integers(min_value=11, max_value=40), min_size=6, max_size=6),
)
def test_merge_matches_brute_force(providers: list[ProviderHints], closest: bool, distances: list[int]) -> None:
    pairs = dict(zip(itertools.combinations(range(4), 2), distances, strict=True))
    rows = tuple(tuple(10 if a == b else pairs[(min(a, b), max(a, b))] for b in range(4)) for a in range(4))
    numa_info = NumaInfo((0, 1, 2, 3), rows)
    hint, _ = policy_merge(TopologyPolicy.BEST_EFFORT, numa_info, PolicyOptions(prefer_closest_numa=closest), providers)
    assert hint == _reference_merge(numa_info, providers, closest)


@settings(max_examples=400, deadline=None)
@given(
    lists=st.lists(st.lists(_HINT, max_size=5), max_size=4),
    policy=st.sampled_from(list(TopologyPolicy)),
    closest=st.booleans(),
    distances=st.lists(st.integers(min_value=11, max_value=40), min_size=6, max_size=6),
)
def test_merge_matches_the_literal_fold(
    lists: list[list[TopologyHint]], policy: TopologyPolicy, closest: bool, distances: list[int]
) -> None:
    """The merge that skips the cartesian product gives the kubelet's fold over it, hint for hint."""
    pairs = dict(zip(itertools.combinations(range(4), 2), distances, strict=True))
    rows = tuple(tuple(10 if a == b else pairs[(min(a, b), max(a, b))] for b in range(4)) for a in range(4))
    merger = HintMerger.create(NumaInfo((0, 1, 2, 3), rows), lists, policy, PolicyOptions(prefer_closest_numa=closest))
    assert merger.merge() == merger.merge_exhaustive()


# --- what the kubelet oracle found (tests/upstream/test_oracle_kubelet.py) -------------------------------------------


def _oracle_node(groups: Sequence[DeviceGroup], free_cpus: Sequence[int] = (4, 4)) -> NodeResources:
    cells = tuple(NumaCellResources(i, 4, free) for i, free in enumerate(free_cpus))
    config = KubeletConfig(topology_policy=TopologyPolicy.BEST_EFFORT, cpu_manager_policy=CpuManagerPolicy.STATIC)
    return NodeResources(cells, devices=tuple(groups), kubelet=config)


def _guaranteed_pod(*containers: Container, init: Sequence[Container] = ()) -> Pod:
    return Pod(tuple(containers), init_containers=tuple(init), qos=QOSClass.GUARANTEED)


def test_a_resource_no_device_plugin_registered_is_not_the_device_managers() -> None:
    """manager.go allocateContainerResources skips a resource isDevicePluginResource does not know."""
    pod = _guaranteed_pod(Container("c", cpu_millis=1000, devices=(("example.com/nic", 1),)))
    assert admit(_oracle_node([]), pod).admit


def test_devices_all_unhealthy_are_named_so() -> None:
    """devicesToAllocate checks the plugin's health before the count."""
    node = _oracle_node([DeviceGroup("nvidia.com/gpu", (0,), 2, 0, healthy=0)])
    result = admit(node, _guaranteed_pod(Container("c", cpu_millis=1000, devices=(("nvidia.com/gpu", 1),))))
    assert (result.reason, result.message) == (
        UNEXPECTED_ADMISSION_ERROR,
        "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu, "
        "which is unexpected",
    )


def test_device_hints_span_the_nodes_hosting_devices() -> None:
    """topology_hints.go generateDeviceTopologyHints (v1.36+): masks over deviceNUMANodes only."""
    node = _device_node([DeviceGroup("gpu", (0,), 1, 1), DeviceGroup("gpu", (2,), 1, 1)], cells=3)
    hints = NodeState(node).device_hints("gpu", 1)
    assert _sorted(hints or []) == _sorted([pref(0), pref(2), nonpref(0, 2)])


def test_the_device_manager_allocates_first() -> None:
    """container_manager_linux.go adds the device manager as the first hint provider: short of GPUs and of
    CPUs, the pod is refused for the GPUs."""
    node = _oracle_node([DeviceGroup("nvidia.com/gpu", (0,), 1, 0, healthy=1)], free_cpus=(0, 0))
    result = admit(node, _guaranteed_pod(Container("c", cpu_millis=2000, devices=(("nvidia.com/gpu", 1),))))
    assert result.message == (
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, "
        "Available: 0, which is unexpected"
    )


def test_cpus_short_of_the_hint_name_the_rest() -> None:
    """policy_static.go allocateCPUs takes the aligned CPUs first; the second takeByTopology fails for the rest."""
    node = _oracle_node([], free_cpus=(2, 0))
    result = admit(node, _guaranteed_pod(Container("c", cpu_millis=4000)))
    assert result.message == (
        "Allocate failed due to not enough cpus available to satisfy request: requested=2, available=0, "
        "which is unexpected"
    )


def test_devices_short_after_the_reusable_ones_name_the_rest() -> None:
    """devicesToAllocate takes the init containers' devices first, then counts what is still needed."""
    node = _oracle_node([DeviceGroup("nvidia.com/gpu", (0,), 2, 2, healthy=2)])
    first = Container("i0", cpu_millis=1000, devices=(("nvidia.com/gpu", 2),))
    second = Container("i1", cpu_millis=1000, devices=(("nvidia.com/gpu", 3),))
    result = admit(node, _guaranteed_pod(Container("c", cpu_millis=1000), init=(first, second)))
    assert result.message == (
        "Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, "
        "Available: 0, which is unexpected"
    )


def test_prefer_closest_on_sparse_ids_is_unavailable() -> None:
    """Distance rows indexed by id too short for sparse ids: the kubelet panics merging (numa_info.go
    NUMADistances.CalculateAverageFor); the model admits nothing there."""
    options = PolicyOptions(prefer_closest_numa=True)
    kubelet = KubeletConfig(topology_policy=TopologyPolicy.BEST_EFFORT, options=options)
    cells = (NumaCellResources(0, 4, 4), NumaCellResources(2, 4, 4))
    result = admit(NodeResources(cells, distances=((10, 20), (20, 10)), kubelet=kubelet), Pod((Container("c"),)))
    assert (result.reason, result.message) == (TOPOLOGY_MANAGER_UNAVAILABLE, SPARSE_NUMA_DISTANCES_MESSAGE)


@pytest.mark.parametrize(
    "kubelet",
    [
        KubeletConfig(topology_policy=TopologyPolicy.RESTRICTED),
        KubeletConfig(memory_manager_policy=MemoryManagerPolicy.STATIC),
    ],
    ids=["a merge", "Static memory hints"],
)
def test_a_numa_id_above_63_is_unavailable(kubelet: KubeletConfig) -> None:
    """bitmask.NewBitMask refuses it, its callers drop the error, the kubelet panics on the nil mask; before,
    the model raised ValueError."""
    cells = (NumaCellResources(0, 4, 4), NumaCellResources(250, 0, 0))
    result = admit(NodeResources(cells, kubelet=kubelet), Pod((Container("c"),)))
    assert (result.reason, result.message) == (TOPOLOGY_MANAGER_UNAVAILABLE, f"NUMA node 250 {NUMA_ID_ABOVE_63}")


def test_cpu_hints_span_the_nodes_with_cpus() -> None:
    """policy_static.go generateCPUTopologyHints iterates CPUDetails.NUMANodes(): a CPU-less node is in no
    CPU hint, so a best-effort merge with a memory hint over it keeps the CPUs' node alone."""
    cells = (NumaCellResources(0, 2, 2), NumaCellResources(1, 0, 0))
    node = NodeResources(cells, kubelet=KubeletConfig(cpu_manager_policy=CpuManagerPolicy.STATIC))
    assert _sorted(NodeState(node).cpu_hints(1)) == _sorted([pref(0)])
