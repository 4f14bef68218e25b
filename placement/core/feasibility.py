"""The kubelet's admission decision, vectorised over nodes: which nodes would admit a pod, and why not.

The index hands over per-node arrays (``NodeArrays``); this module answers for all of them at once with
numpy, and only the nodes the vectorised rules cannot decide go through the exact, per-node port of the
Topology Manager (``placement.core.topology_manager.admit``).

The vectorised rules (pod scope, or a pod with one container; at most ``MAX_NUMA`` NUMA cells):

* Providers. CPU (static CPU manager, Guaranteed pod with integral CPUs), memory (Static memory manager,
  Guaranteed pod: memory and hugepages together, one joint hint list as ``calculateHints`` builds it),
  and each device resource with NUMA topology on the node. Others give no hints and do not constrain.
* For provider p and NUMA mask m (all masks as a [masks, cells] 0/1 matrix): ``fits_p[n, m]`` is free
  capacity in m >= request (every resource of p); ``min_affinity_p[n]`` is the smallest popcount of a
  mask whose TOTAL capacity covers the request (the kubelet judges "preferred" on total, not free);
  ``preferred_p = fits_p & (popcount == min_affinity_p)``.
* ``none`` and ``best-effort`` admit at the merge; the allocation must still succeed, which is the
  node-level fit checked for every policy.
* ``restricted`` admits iff some mask m is preferred by EVERY hinting provider: ``mergePermutation``
  marks a merged hint preferred only when all its hints are preferred and all their masks are equal.
* ``single-numa-node`` admits iff some cell u has ``fits_p({u})`` and ``min_affinity_p == 1`` for every
  hinting provider (``filterSingleNumaHints`` keeps only preferred one-cell hints).

Masks over cells a node lacks never matter: such a cell has zero total and zero free capacity, so a mask
containing it is never the narrowest one that fits. Quantities are float64 (exact for integers below 2**53):
cell arrays count CPUs, bytes and devices; node arrays count millicores, bytes and devices.

The Static memory manager's existing NUMA assignments (``NodeArrays.memory_group``, from the pods we know)
limit the memory hints (``memorymanager/policy_static.go``, ``calculateHints``): a mask is a hint only if
each of its cells holds no assignment or has exactly that mask as its group, so a cell of a multi-NUMA group
gives no single-cell hint and a cell holding a single-NUMA assignment joins no multi-NUMA mask. The
memory provider's ``fits`` is on those masks only; ``min_affinity`` is not (``minAffinitySize`` is counted
before the group checks). Where the groups partition their cells (every cell of a group has the group as
its own), a provider without hints means nothing fits anywhere, and:

* ``none``: the memory manager's default hint (``getDefaultHint``) is one of its hints: admitted iff a
  hint fits (whatever the groups).
* ``best-effort``: the same. The merged hint lies within a memory hint; ``Allocate`` extends a merged hint
  whose free memory falls short (``extendTopologyManagerHint``), and takes one that suffices as it is;
  as it is, only a multi-NUMA mask strictly inside a group of 3+ cells breaks the groups
  (``isAffinityViolatingNUMAAllocations``), so a group of 3+ cells sends the node to the exact model.
  Unless no cell lies in a hint of every provider (CPU and device hints span only the cells hosting CPUs
  or the resource's devices): the merge then keeps its default, every cell, which breaks any group
  narrower than the node (``_default_hint_breaks_groups``).
* ``restricted`` and ``single-numa-node``: the rules above, on the masks the groups allow.

Not decided here, sent to the exact model: a pod with several containers (init containers count) on a
container-scope node whose Topology Manager aligns anything (the kubelet merges and allocates container by
container), or on a node whose Static memory manager pins a Guaranteed pod's memory (each container's
allocation forms NUMA groups that constrain the next one, whatever the scope). For a Guaranteed pod on a
Static memory manager: a ``best-effort`` node with a memory group of 3 or more cells, and a node (any policy
but ``none``) whose groups do not partition their cells (a single-NUMA assignment made inside a group: a
cell then takes memory that no hint offers it, as the merged hint of the other providers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.core import kernel
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
from placement.core.vocabulary import (
    CPU,
    GPU_MILLI,
    GPU_RESOURCE,
    GPU_SHARE,
    MAX_NUMA,
    MEMORY,
    POLICY_CODES,
    BoolArray,
    FloatArray,
    IntArray,
    MemoryGroupArray,
    NodeArrays,
    PodDemand,
    PolicyCode,
    Rejected,
    RejectionKind,
    ScopeCode,
    SmallIntArray,
    is_memory_resource,
)

_MILLI = 1000.0
_SHORT = RejectionKind.INSUFFICIENT_RESOURCES
_POLICY_OF_CODE = {code: TopologyPolicy(name) for name, code in POLICY_CODES.items()}
# The vectorised rules' reasons, shared with the compiled kernel's answers (``_compiled_filter``).
_NO_TOPOLOGY = "node has no published topology"
_EXCLUSIVE_CPUS_SHORT = "not enough CPUs left for exclusive allocation"
_TOO_MANY_NUMA = f"kubelet Topology Manager refuses machines with more than {MAX_NUMA} NUMA nodes"
_SINGLE_NUMA_REFUSES = "kubelet single-numa-node: no single NUMA cell is preferred by every resource"
_RESTRICTED_REFUSES = "kubelet restricted: no NUMA set is preferred by every resource"


def _insufficient(name: str) -> str:
    return f"Insufficient {name}"


def _share_short(share: float) -> str:
    return f"no single GPU has {share:g} thousandths left to share"


def _memory_short(name: str) -> str:
    return f"memory manager: not enough free {name} across NUMA cells"


def _all_masks(cells: int) -> tuple[FloatArray, IntArray]:
    """Every non-empty subset of ``cells`` slots as a [2**cells - 1, cells] 0/1 matrix, with popcounts."""
    values = np.arange(1, 1 << cells, dtype=np.int64)
    matrix = ((values[:, None] >> np.arange(cells, dtype=np.int64)[None, :]) & 1).astype(np.float64)
    return matrix, matrix.sum(axis=1).astype(np.int64)


MASKS, POPCOUNT = _all_masks(MAX_NUMA)
MASK_VALUES: IntArray = np.arange(1, 1 << MAX_NUMA, dtype=np.int64)  # the bitmask of each row of MASKS
_NO_FIT = MAX_NUMA + 1  # min affinity of a provider whose request no mask's total covers
_CELL_BITS: IntArray = np.left_shift(1, np.arange(MAX_NUMA, dtype=np.int64))  # the one-cell masks
_CELLS_IN_GROUP: IntArray = np.concatenate([[0], POPCOUNT])  # a memory group's bitmask -> its cell count


def _any_cell(values: BoolArray) -> BoolArray:
    """[N, K] -> [N]: some cell qualifies (typed, where ``ndarray.any`` is not)."""
    result: BoolArray = np.logical_or.reduce(values, axis=1)
    return result


@dataclass(frozen=True)
class FilterResult:
    """Feasibility of each candidate row; ``reason(i)`` says why row ``rows[i]`` was rejected."""

    rows: IntArray  # the index slots asked about, in the order given
    feasible: BoolArray
    reason_codes: npt.NDArray[np.int16]  # 0 when feasible, else 1 + an index into ``messages``
    messages: tuple[str, ...]
    kinds: tuple[RejectionKind, ...]  # of each message
    exact_rows: IntArray  # slots decided by the exact per-node model rather than the vectorised rules

    def reason(self, position: int) -> str:
        rejected = self.rejected(position)
        return "" if rejected is None else rejected.message

    def rejected(self, position: int) -> Rejected | None:
        code = int(self.reason_codes[position])
        return None if code == 0 else Rejected(self.messages[code - 1], self.kinds[code - 1])


class _Reasons:
    """Assigns a node its FIRST failing reason; reasons are interned so rows carry small codes."""

    def __init__(self, size: int) -> None:
        self.codes = np.zeros(size, dtype=np.int16)
        self.messages: list[str] = []
        self.kinds: list[RejectionKind] = []
        self._index: dict[str, int] = {}

    def reject(self, failing: BoolArray, message: str, kind: RejectionKind) -> None:
        target = failing & (self.codes == 0)
        if not target.any():
            return
        code = self._index.get(message)
        if code is None:
            self.messages.append(message)
            self.kinds.append(kind)
            code = self._index[message] = len(self.messages)
        self.codes[target] = code

    def set_code(self, position: int, message: str, kind: RejectionKind) -> None:
        mask = np.zeros(self.codes.shape, dtype=np.bool_)
        mask[position] = True
        self.codes[position] = 0
        self.reject(mask, message, kind)


@dataclass(frozen=True)
class _Provider:
    """One hint provider on the candidate rows: the resources it aligns, requests, and where it hints."""

    name: str
    columns: tuple[int, ...]
    requests: tuple[float, ...]
    active: BoolArray  # [N] whether the provider gives hints on the node
    # [N, K] the memory manager's groups where the provider hints (0 elsewhere); None when no row has any.
    groups: MemoryGroupArray | None = None


class _View:
    """The candidate rows of the arrays; a resource column is gathered on first use, then kept."""

    def __init__(self, arrays: NodeArrays, rows: IntArray, numa_count: IntArray) -> None:
        self._arrays = arrays
        self._rows = rows
        self._total: dict[int, FloatArray] = {}
        self._free: dict[int, FloatArray] = {}
        self.valid_cell: BoolArray = np.arange(MAX_NUMA)[None, :] < numa_count[:, None]

    def total(self, column: int) -> FloatArray:
        """[N, K] totals of one resource."""
        if column not in self._total:
            self._total[column] = self._arrays.cell_total[column][self._rows]
        return self._total[column]

    def free(self, column: int) -> FloatArray:
        """[N, K] free amounts of one resource."""
        if column not in self._free:
            self._free[column] = self._arrays.cell_free[column][self._rows]
        return self._free[column]


def filter_nodes(
    arrays: NodeArrays, rows: IntArray, demand: PodDemand, intent: PodIntent | None = None
) -> FilterResult:
    """Which of ``rows`` would admit the pod (kubelet policy AND the pod's intent), with a reason for the rest."""
    if intent is None or not intent.constrains:
        compiled = _compiled_filter(arrays, rows, demand)
        if compiled is not None:
            return compiled
    count = len(rows)
    reasons = _Reasons(count)
    numa_count = arrays.numa_count[rows].astype(np.int64)
    policy = arrays.policy[rows]
    view = _View(arrays, rows, numa_count)
    reasons.reject(numa_count == 0, _NO_TOPOLOGY, RejectionKind.NO_TOPOLOGY)
    _node_level_fit(arrays, rows, demand, view, reasons)
    too_many = numa_count > MAX_NUMA
    reasons.reject(too_many & (policy != PolicyCode.NONE), _TOO_MANY_NUMA, RejectionKind.KUBELET_TOPOLOGY)
    providers = _providers(arrays, rows, demand, view)
    # The memory provider, where the memory manager holds groups on some candidate (else None).
    memory = next((p for p in providers if p.groups is not None), None)
    # Several containers are allocated one after another: under container scope each gets its own merge,
    # and under any scope the memory manager's groups formed by the first constrain the next.
    exact = (demand.containers > 1) & (
        ((arrays.scope[rows] == ScopeCode.CONTAINER) & (policy != PolicyCode.NONE))
        | (arrays.memory_static[rows] & demand.guaranteed)
    )
    if memory is not None and memory.groups is not None:
        exact |= _beyond_the_group_rules(memory.groups, policy)
    exact &= ~too_many
    vector = (reasons.codes == 0) & ~exact
    if memory is not None and memory.groups is not None:
        # none and best-effort admit at the merge; the memory manager still needs a hint that fits.
        merge_admits = (policy == PolicyCode.NONE) | (policy == PolicyCode.BEST_EFFORT)
        loose = vector & merge_admits & ~too_many & _any_cell(memory.groups != 0)
        if loose.any():
            reasons.reject(
                loose & ~_memory_hint_fits(memory, view, loose),
                "kubelet memory manager: the NUMA cells with room for the memory are bound to other pods' "
                "memory groups",
                RejectionKind.KUBELET_TOPOLOGY,
            )
        falls_back = loose & (policy == PolicyCode.BEST_EFFORT) & (reasons.codes == 0)
        if falls_back.any():
            reasons.reject(
                _default_hint_breaks_groups(providers, memory, view, numa_count, falls_back),
                "kubelet memory manager: no NUMA cell suits the memory and the CPUs or devices together, and the "
                "merged hint (every cell) spans other pods' memory groups",
                RejectionKind.KUBELET_TOPOLOGY,
            )
    single = vector & (policy == PolicyCode.SINGLE_NUMA_NODE)
    restricted = vector & (policy == PolicyCode.RESTRICTED)
    if single.any():
        admitted = _single_numa_admits(providers, view, single)
        reasons.reject(single & ~admitted, _SINGLE_NUMA_REFUSES, RejectionKind.KUBELET_TOPOLOGY)
    if restricted.any():
        admitted = _restricted_admits(providers, view, restricted)
        reasons.reject(restricted & ~admitted, _RESTRICTED_REFUSES, RejectionKind.KUBELET_TOPOLOGY)
    exact_positions = np.flatnonzero(exact & (reasons.codes == 0))
    for position in exact_positions:
        result = admit(node_resources(arrays, int(rows[position])), pod_of(demand))
        if not result.admit:
            message = f"kubelet {result.reason}: {result.message}"
            reasons.set_code(int(position), message, RejectionKind.KUBELET_TOPOLOGY)
    if intent is not None and intent.constrains:
        _apply_intent(arrays, rows=rows, demand=demand, intent=intent, providers=providers, view=view, reasons=reasons)
    return FilterResult(
        rows=rows,
        feasible=reasons.codes == 0,
        reason_codes=reasons.codes,
        messages=tuple(reasons.messages),
        kinds=tuple(reasons.kinds),
        exact_rows=rows[exact_positions],
    )


def _compiled_filter(arrays: NodeArrays, rows: IntArray, demand: PodDemand) -> FilterResult | None:
    """The compiled kernel's answer for a call of few rows without an intent (``placement.core.kernel``); None
    where the kernel is off, or the call needs what it leaves to the numpy path below."""
    compiled = kernel.for_rows(len(rows))
    if compiled is None:
        return None
    packed = _packed_checks(arrays.resources, demand, share_tracked=arrays.gpu_share_free is not None)
    if packed is None:
        return None
    answer = compiled.admission_checks(
        rows,
        (
            arrays.numa_count,
            arrays.policy,
            arrays.scope,
            arrays.cpu_static,
            arrays.memory_static,
            arrays.memory_group,
            arrays.cell_total,
            arrays.cell_free,
            arrays.node_free,
            arrays.gpu_share_free if arrays.gpu_share_free is not None else _NO_SHARES,
        ),
        packed.requests,
        packed.providers,
        containers=demand.containers,
        guaranteed=demand.guaranteed,
    )
    if not answer.covered:
        return None
    # The numpy path's codes: its messages in the order of the checks that fired, one code per text.
    messages: list[str] = []
    kinds: list[RejectionKind] = []
    table = np.zeros(len(packed.checks) + 1, dtype=np.int16)
    for check in np.unique(answer.first_failing[answer.first_failing >= 0]).tolist():
        message, kind = packed.checks[check]
        if message not in messages:
            messages.append(message)
            kinds.append(kind)
        table[check + 1] = messages.index(message) + 1
    codes = table[answer.first_failing + 1]
    return FilterResult(
        rows=rows,
        feasible=codes == 0,
        reason_codes=codes,
        messages=tuple(messages),
        kinds=tuple(kinds),
        exact_rows=rows[:0],
    )


_NO_SHARES = np.zeros(0)  # gpu_share_free where the caller tracks no sharing: the kernel then never reads it


@dataclass(frozen=True, eq=False)
class _PackedChecks:
    """A pod's checks as the compiled kernel takes them: the reasons in ``filter_nodes``'s order, the
    requests of each check, and the hint providers ``_providers`` picks (kind, resource offsets, columns,
    requests)."""

    checks: tuple[tuple[str, RejectionKind], ...]
    requests: tuple[IntArray, FloatArray, float, int, float, IntArray, FloatArray]
    providers: tuple[IntArray, IntArray, IntArray, FloatArray]


@functools.lru_cache(maxsize=64)
def _packed_checks(resources: tuple[str, ...], demand: PodDemand, *, share_tracked: bool) -> _PackedChecks | None:
    """Packed once per pod shape and resource layout; None where a request names a resource no node offers
    (the numpy path words that reason)."""
    column = {name: position for position, name in enumerate(resources)}.get
    node_columns = [column(name) for name, _ in demand.node_requests]
    if None in node_columns:
        return None
    checks = [(_NO_TOPOLOGY, RejectionKind.NO_TOPOLOGY)] + [(_insufficient(n), _SHORT) for n, _ in demand.node_requests]
    share = dict(demand.device_requests).get(GPU_SHARE, 0.0) if share_tracked else 0.0
    checks += [(_share_short(share), _SHORT)] if share else []
    cpu = column(CPU)
    exclusive = float(demand.exclusive_cpus) if cpu is not None else 0.0
    checks += [(_EXCLUSIVE_CPUS_SHORT, _SHORT)] if exclusive else []
    pools = [(name, column(name), r) for name, r in demand.memory_requests] if demand.guaranteed else []
    known_pools = [(name, c, r) for name, c, r in pools if c is not None]
    checks += [(_memory_short(name), _SHORT) for name, _, _ in known_pools]
    checks += [(_TOO_MANY_NUMA, RejectionKind.KUBELET_TOPOLOGY), (_SINGLE_NUMA_REFUSES, RejectionKind.KUBELET_TOPOLOGY)]
    checks += [(_RESTRICTED_REFUSES, RejectionKind.KUBELET_TOPOLOGY)]
    providers: list[tuple[int, list[tuple[int, float]]]] = []
    if demand.exclusive_cpus and cpu is not None:
        providers.append((kernel.CPU_PROVIDER, [(cpu, float(demand.exclusive_cpus))]))
    memory = [(column(n), r) for n, r in demand.memory_requests if r > 0]
    if demand.guaranteed and memory and all(c is not None for c, _ in memory):
        providers.append((kernel.MEMORY_PROVIDER, [(c, r) for c, r in memory if c is not None]))
    for name, request in demand.device_requests:
        device = column(name)
        if device is not None and request > 0:
            providers.append((kernel.DEVICE_PROVIDER, [(device, request)]))
    aligned = [resource for _, of_provider in providers for resource in of_provider]
    return _PackedChecks(
        checks=tuple(checks),
        requests=(
            np.array(node_columns, dtype=np.int64),
            np.array([r for _, r in demand.node_requests], dtype=np.float64),
            float(share),
            cpu if cpu is not None else -1,
            exclusive,
            np.array([c for _, c, _ in known_pools], dtype=np.int64),
            np.array([r for _, _, r in known_pools], dtype=np.float64),
        ),
        providers=(
            np.array([kind for kind, _ in providers], dtype=np.int64),
            np.cumsum([0] + [len(of_provider) for _, of_provider in providers], dtype=np.int64),
            np.array([c for c, _ in aligned], dtype=np.int64),
            np.array([r for _, r in aligned], dtype=np.float64),
        ),
    )


def _node_level_fit(arrays: NodeArrays, rows: IntArray, demand: PodDemand, view: _View, reasons: _Reasons) -> None:
    """The allocation must succeed whatever the policy: node-level requests, then exclusive pools."""
    for name, request in demand.node_requests:
        column = arrays.column(name)
        if column is None:
            reasons.reject(np.ones(len(rows), dtype=np.bool_), f"no node offers {name}", _SHORT)
            continue
        reasons.reject(arrays.node_free[column, rows] < request, _insufficient(name), _SHORT)
    share = dict(demand.device_requests).get(GPU_SHARE, 0.0)
    if share and arrays.gpu_share_free is not None:
        reasons.reject(arrays.gpu_share_free[rows] < share, _share_short(share), _SHORT)
    cpu = arrays.column(CPU)
    if demand.exclusive_cpus and cpu is not None:
        short = arrays.cpu_static[rows] & (view.free(cpu).sum(axis=1) < demand.exclusive_cpus)
        reasons.reject(short, _EXCLUSIVE_CPUS_SHORT, _SHORT)
    if demand.guaranteed:
        for name, request in demand.memory_requests:
            column = arrays.column(name)
            if column is not None:
                short = arrays.memory_static[rows] & (view.free(column).sum(axis=1) < request)
                reasons.reject(short, _memory_short(name), _SHORT)


def _providers(arrays: NodeArrays, rows: IntArray, demand: PodDemand, view: _View) -> list[_Provider]:
    providers: list[_Provider] = []
    cpu = arrays.column(CPU)
    if demand.exclusive_cpus and cpu is not None:
        providers.append(_Provider(CPU, (cpu,), (float(demand.exclusive_cpus),), arrays.cpu_static[rows]))
    memory = [(arrays.column(n), r) for n, r in demand.memory_requests if r > 0]
    if demand.guaranteed and memory and all(column is not None for column, _ in memory):
        active = arrays.memory_static[rows]
        providers.append(
            _Provider(
                MEMORY,
                tuple(c for c, _ in memory if c is not None),
                tuple(r for _, r in memory),
                active,
                _memory_groups(arrays, rows, active),
            )
        )
    for name, request in demand.device_requests:
        column = arrays.column(name)
        if column is not None and request > 0:
            # deviceHasTopologyAlignment: some device of the resource reports a NUMA node.
            providers.append(_Provider(name, (column,), (request,), view.total(column).sum(axis=1) > 0))
    return providers


def _memory_groups(arrays: NodeArrays, rows: IntArray, active: BoolArray) -> MemoryGroupArray | None:
    """[N, K] the memory manager's groups of ``rows`` where the memory provider hints (0 elsewhere); None
    where no such row holds any, which is the common case and is told without gathering the rows' cells."""
    words = arrays.memory_group.view(np.uint64)[:, 0]  # a node's MAX_NUMA one-byte groups as one word
    if not words.any():
        return None
    grouped = (words[rows] != 0) & active
    return arrays.memory_group[rows] * grouped[:, None] if grouped.any() else None


Amounts = Callable[[int], FloatArray]  # resource column -> [N, K] amounts of the rows in question


def _rows_of(amounts: Amounts, which: IntArray | BoolArray) -> Amounts:
    """``amounts`` limited to some of its rows (positions or a boolean mask)."""
    return lambda column: amounts(column)[which]


def _cells_fit(provider: _Provider, amounts: Amounts) -> BoolArray:
    """[N, K]: every resource of the provider fits in each single cell."""
    fit: BoolArray | None = None
    for column, request in zip(provider.columns, provider.requests, strict=True):
        fits = amounts(column) >= request
        fit = fits if fit is None else fit & fits
    assert fit is not None  # a provider aligns at least one resource
    return fit


def _masks_fit(provider: _Provider, amounts: Amounts, masks: FloatArray) -> BoolArray:
    """[N, masks]: every resource of the provider fits in the sum over each mask's cells."""
    fit: BoolArray | None = None
    for column, request in zip(provider.columns, provider.requests, strict=True):
        fits = amounts(column) @ masks.T >= request
        fit = fits if fit is None else fit & fits
    assert fit is not None
    return fit


def _narrowest(provider: _Provider, total: Amounts) -> IntArray:
    """[N]: popcount of the narrowest mask whose TOTAL covers the request; ``_NO_FIT`` when none does.

    For one resource the narrowest mask takes the largest cells first, so a sorted cumulative sum
    answers without enumerating masks; a joint provider (memory with hugepages) enumerates them.
    """
    if len(provider.columns) == 1:
        largest_first = -np.sort(-total(provider.columns[0]), axis=1)
        short = np.cumsum(largest_first, axis=1) < provider.requests[0]
        count: IntArray = short.sum(axis=1) + 1
        return np.where(count > MAX_NUMA, _NO_FIT, count)
    covers = _masks_fit(provider, total, MASKS)
    narrowest: IntArray = np.where(covers, POPCOUNT[None, :], _NO_FIT).min(axis=1)
    return narrowest


def _beyond_the_group_rules(groups: MemoryGroupArray, policy: SmallIntArray) -> BoolArray:
    """[N]: nodes whose memory groups the vectorised rules do not decide (see the module docstring):
    under best-effort a group of 3+ cells; under any policy but none groups that do not partition their
    cells."""
    held = groups.astype(np.int64)
    in_group = (held[:, :, None] & _CELL_BITS[None, None, :]) != 0  # [N, cell, cell of its group]
    same = held[:, :, None] == held[:, None, :]
    partition = np.logical_and.reduce((~in_group | same).reshape(len(held), -1), axis=1)
    wide = _CELLS_IN_GROUP[groups].max(axis=1) >= 3
    result: BoolArray = ((policy == PolicyCode.BEST_EFFORT) & wide) | ((policy != PolicyCode.NONE) & ~partition)
    return result


def _groups_allow(groups: MemoryGroupArray, masks: IntArray) -> BoolArray:
    """[n, M]: whether the memory manager's groups let a hint use each mask (``masks``: bitmasks over cell
    positions). ``calculateHints`` drops a single cell already in a group with other cells, and a multi-NUMA
    mask with a cell used alone or by a different group (``areGroupsEqual``); so every cell of the mask
    holds no assignment or has exactly the mask as its group."""
    in_mask = (masks[:, None] & _CELL_BITS[None, :]) != 0  # [M, K]
    group = groups.astype(np.int64)[:, None, :]  # [n, 1, K]
    conflict = in_mask[None, :, :] & (group != 0) & (group != masks[None, :, None])
    allowed: BoolArray = ~np.logical_or.reduce(conflict, axis=2)
    return allowed


def _memory_hint_fits(memory: _Provider, view: _View, rows: BoolArray) -> BoolArray:
    """[N]: on ``rows``, some mask the memory manager's groups allow has every memory type free."""
    assert memory.groups is not None
    subset = np.flatnonzero(rows)
    fits = _masks_fit(memory, _rows_of(view.free, subset), MASKS) & _groups_allow(memory.groups[subset], MASK_VALUES)
    result = np.zeros(rows.shape, dtype=np.bool_)
    result[subset] = _any_cell(fits)
    return result


def _default_hint_breaks_groups(
    providers: Sequence[_Provider], memory: _Provider, view: _View, numa_count: IntArray, rows: BoolArray
) -> BoolArray:
    """[N], on best-effort ``rows`` where a memory hint fits: no cell lies in a hint of every provider, so
    ``mergeFilteredHints`` keeps its default, every cell of the node, not preferred; ``Allocate`` takes it
    as it is and refuses it when one of its cells holds a single-NUMA assignment or another group
    (``isAffinityViolatingNUMAAllocations``).

    The CPU manager's hints span only the cells that have CPUs (``CPUDetails.NUMANodes``), and since 1.36 a
    device resource's only the cells hosting its devices (``deviceNUMANodes``), so they and the memory hints
    can be disjoint. A provider whose free amount on those cells falls short gives an empty list, which
    reads as no preference.
    """
    assert memory.groups is not None
    subset = np.flatnonzero(rows)
    valid = view.valid_cell[subset]
    free = _rows_of(view.free, subset)
    memory_hints = _masks_fit(memory, free, MASKS) & _groups_allow(memory.groups[subset], MASK_VALUES)
    common: BoolArray = ((memory_hints.astype(np.float64) @ MASKS) > 0) & valid  # cells in some memory hint
    for provider in providers:
        if provider is memory:
            continue
        (column,), (request,) = provider.columns, provider.requests
        hosting = view.total(column)[subset] > 0
        hinting = provider.active[subset] & (free(column).sum(axis=1) >= request)
        common &= hosting | ~hinting[:, None]
    groups = memory.groups[subset].astype(np.int64)
    whole = np.left_shift(1, numa_count[subset]) - 1
    breaks = _any_cell(valid & (groups != 0) & (groups != whole[:, None]))
    result = np.zeros(rows.shape, dtype=np.bool_)
    result[subset] = ~_any_cell(common) & breaks
    return result


def _single_numa_admits(providers: Sequence[_Provider], view: _View, rows: BoolArray) -> BoolArray:
    ok = view.valid_cell.copy()
    for provider in providers:
        preferred = _cells_fit(provider, view.free) & _any_cell(_cells_fit(provider, view.total))[:, None]
        if provider.groups is not None:
            preferred &= _groups_allow(provider.groups, _CELL_BITS)
        ok &= preferred | ~provider.active[:, None]
    return _any_cell(ok) & rows


def _restricted_admits(providers: Sequence[_Provider], view: _View, rows: BoolArray) -> BoolArray:
    """Some mask is preferred by every hinting provider: all narrowest widths agree on one width w, and
    some mask of w cells fits every provider. w = 1 is checked per cell, w = the node's cell count on the
    whole node, and only the widths in between enumerate the masks of that width."""
    subset = np.flatnonzero(rows)
    total, free = _rows_of(view.total, subset), _rows_of(view.free, subset)
    width = np.zeros(len(subset), dtype=np.int64)  # 0: no hinting provider yet
    agree = np.ones(len(subset), dtype=np.bool_)
    active_providers = []
    for provider in providers:
        active = provider.active[subset]
        if not active.any():
            continue
        groups = None if provider.groups is None else provider.groups[subset]
        active_providers.append((provider, active, groups))
        narrowest = _narrowest(provider, total)
        agree &= ~active | (width == 0) | (width == narrowest)
        width = np.where(active & (width == 0), narrowest, width)
    agree &= width != _NO_FIT
    admitted = agree.copy()
    cells = view.valid_cell[subset].sum(axis=1)
    for w in np.unique(width[agree]):
        at = agree & (width == w)
        if w == 0:
            continue  # no provider hints: the merge is {any, preferred}
        if w == 1:
            fit = view.valid_cell[subset][at]
            for provider, active, groups in active_providers:
                cell_fit = _cells_fit(provider, _rows_of(free, at))
                if groups is not None:
                    cell_fit &= _groups_allow(groups[at], _CELL_BITS)
                fit &= cell_fit | ~active[at][:, None]
            admitted[at] = _any_cell(fit)
            continue
        whole = at & (cells == w)
        if whole.any():
            fit_all = np.ones(int(whole.sum()), dtype=np.bool_)
            for provider, active, groups in active_providers:
                for column, request in zip(provider.columns, provider.requests, strict=True):
                    fit_all &= (free(column)[whole].sum(axis=1) >= request) | ~active[whole]
                if groups is not None:
                    # The mask of every cell: each cell holds no assignment or the whole node as its group.
                    held = groups[whole].astype(np.int64)
                    every_cell = np.left_shift(1, cells[whole]) - 1
                    allowed = np.logical_and.reduce((held == 0) | (held == every_cell[:, None]), axis=1)
                    fit_all &= allowed | ~active[whole]
            admitted[whole] = fit_all
        partial = at & (cells != w)
        if partial.any():
            of_width = w == POPCOUNT
            masks = MASKS[of_width]
            fit = np.ones((int(partial.sum()), len(masks)), dtype=np.bool_)
            for provider, active, groups in active_providers:
                mask_fit = _masks_fit(provider, _rows_of(free, partial), masks)
                if groups is not None:
                    mask_fit &= _groups_allow(groups[partial], MASK_VALUES[of_width])
                fit &= mask_fit | ~active[partial][:, None]
            admitted[partial] = _any_cell(fit)
    result = np.zeros(rows.shape, dtype=np.bool_)
    result[subset] = admitted
    return result


def allowed_cells(arrays: NodeArrays, rows: IntArray, intent: PodIntent | None) -> BoolArray:
    """[N, K]: the cells the intent's affinity lists leave to the pod (``PodIntent.cells_allowed``)."""
    ids = arrays.cell_ids[rows].astype(np.int64)
    allowed = ids >= 0
    if intent is None:
        return allowed
    if intent.affinity_node_ids:
        allowed &= np.isin(ids, sorted(intent.affinity_node_ids))
    if intent.anti_affinity_node_ids:
        allowed &= ~np.isin(ids, sorted(intent.anti_affinity_node_ids))
    return allowed


def _apply_intent(
    arrays: NodeArrays,
    *,
    rows: IntArray,
    demand: PodDemand,
    intent: PodIntent,
    providers: Sequence[_Provider],
    view: _View,
    reasons: _Reasons,
) -> None:
    """The intent's second merge, on the same providers limited to ``intent.resources`` (see intent.py).

    For ``single-numa`` and ``isolated`` every requested resource the cells account for must fit in one
    allowed cell even where the kubelet aligns nothing. The affinity lists are necessary conditions here
    (some allowed set fits); ``decide`` checks the kubelet's exact choice on the node it picks.
    """
    allowed = allowed_cells(arrays, rows, intent)
    named = set(intent.resources)
    chosen = [
        p for p in providers if not named or p.name in named or any(arrays.resources[c] in named for c in p.columns)
    ]
    if intent.policy in (NumaIntentPolicy.SINGLE_NUMA, NumaIntentPolicy.ISOLATED):
        ok = allowed.copy()
        for name, request in cell_requests(arrays, demand, named):
            column = arrays.column(name)
            if column is not None:
                ok &= view.free(column) >= request
        for provider in chosen:
            one_cell_covers = _any_cell(_cells_fit(provider, view.total))
            ok &= one_cell_covers[:, None] | ~provider.active[:, None]
        if intent.policy is NumaIntentPolicy.ISOLATED:
            ok &= ~arrays.cell_claimed[rows] & ~arrays.cell_isolated[rows]
            message = "intent isolated: no free NUMA cell without our other pods fits the pod"
            reasons.reject(~_any_cell(ok), message, RejectionKind.INTENT)
        else:
            message = "intent single-numa: no allowed NUMA cell fits the pod"
            reasons.reject(~_any_cell(ok), message, RejectionKind.INTENT)
        return
    pending = np.flatnonzero(reasons.codes == 0)
    if not len(pending) or (intent.policy is not NumaIntentPolicy.RESTRICTED and allowed.all()):
        return
    # [N, masks]: the mask lies within the allowed cells (a mask over missing cells is never chosen).
    allowed_masks = ((MASKS @ (~allowed).T.astype(np.float64)) == 0).T
    ok = allowed_masks[pending]
    total, free = _rows_of(view.total, pending), _rows_of(view.free, pending)
    for provider in chosen:
        active = provider.active[pending]
        possible = _masks_fit(provider, free, MASKS)
        if intent.policy is NumaIntentPolicy.RESTRICTED:
            possible &= POPCOUNT[None, :] == _narrowest(provider, total)[:, None]
        ok &= possible | ~active[:, None]
    failing = np.zeros(len(rows), dtype=np.bool_)
    failing[pending] = ~ok.any(axis=1)
    what = "no NUMA set in the allowed cells is preferred by every resource"
    reasons.reject(
        failing,
        f"intent restricted: {what}"
        if intent.policy is NumaIntentPolicy.RESTRICTED
        else "NUMA affinity: no allowed NUMA set fits the pod",
        RejectionKind.INTENT,
    )


def cell_requests(arrays: NodeArrays, demand: PodDemand, named: set[str]) -> Iterable[tuple[str, float]]:
    """Per-cell amounts the pod needs in one cell: exclusive (or whole) CPUs, memory, hugepages, devices."""
    cpus = float(demand.exclusive_cpus) or dict(demand.node_requests).get(CPU, 0.0) / _MILLI
    wanted: list[tuple[str, float]] = [(CPU, float(np.ceil(cpus)))] if cpus else []
    wanted += list(demand.memory_requests) + list(demand.device_requests)
    return [(name, request) for name, request in wanted if request > 0 and (not named or name in named)]


def pod_of(demand: PodDemand) -> Pod:
    """The pod for the exact model: the one the demand came from, else the demand as one container."""
    if demand.source is not None:
        return demand.source
    node = dict(demand.node_requests)
    memory = dict(demand.memory_requests)
    return Pod(
        containers=(
            Container(
                name="pod",
                cpu_millis=int(node.get(CPU, 0.0)),
                memory=int(memory.get(MEMORY, 0.0)),
                hugepages=tuple((n, int(v)) for n, v in demand.memory_requests if n != MEMORY),
                devices=tuple((n, int(v)) for n, v in demand.device_requests),
            ),
        ),
        qos=QOSClass.GUARANTEED if demand.guaranteed else QOSClass.BURSTABLE,
    )


def memory_groups(pods: Iterable[tuple[PodDemand, Sequence[int]]]) -> MemoryGroupArray:
    """One node's ``NodeArrays.memory_group`` row: the Static memory manager's state for the pods we know on
    it, each given by its demand and the positions of its cells.

    A Guaranteed pod's memory and hugepages are pinned to its cells as one group (``updateMachineState``
    sets each cell's ``Cells`` to the mask and counts an assignment); a pod on one cell is a single-NUMA
    assignment. A single-NUMA assignment inside a multi-NUMA group keeps its own cell single, the group's
    other cells keep the group: the kubelet makes such a pod only after the group (its best-effort merge
    may pin memory to one cell of a group whose free memory holds it), and the latest allocation sets
    ``Cells``. Multi-NUMA groups that share a cell are read as their union (records that disagree with
    each other; the kubelet never admits overlapping groups).
    """
    groups = np.zeros(MAX_NUMA, dtype=np.uint8)
    singles = 0
    for demand, positions in pods:
        if not demand.guaranteed or not any(amount > 0 for _, amount in demand.memory_requests):
            continue
        if len(positions) == 1:
            singles |= 1 << positions[0]
            continue
        mask = 0
        for k in positions:
            mask |= (1 << k) | int(groups[k])
        groups[[k for k in range(MAX_NUMA) if mask >> k & 1]] = mask
    for k in range(MAX_NUMA):
        if singles >> k & 1:
            groups[k] = 1 << k
    return groups


def node_resources(arrays: NodeArrays, row: int) -> NodeResources:
    """One row as the exact Topology Manager model reads it."""
    count = int(arrays.numa_count[row])
    cpu = arrays.column(CPU)
    ids = [int(i) for i in arrays.cell_ids[row, : min(count, MAX_NUMA)]]
    cells: list[NumaCellResources] = []
    for slot, numa_id in enumerate(ids):
        pools = tuple(
            MemoryPool(name, int(arrays.cell_total[c, row, slot]), int(arrays.cell_free[c, row, slot]))
            for c, name in enumerate(arrays.resources)
            if is_memory_resource(name)
        )
        group = int(arrays.memory_group[row, slot])
        cells.append(
            NumaCellResources(
                id=numa_id,
                cpus=0 if cpu is None else int(arrays.cell_total[cpu, row, slot]),
                free_cpus=0 if cpu is None else int(arrays.cell_free[cpu, row, slot]),
                memory=pools,
                memory_group=tuple(i for k, i in enumerate(ids) if group >> k & 1),
                memory_assignments=1 if group else 0,
            )
        )
    devices: list[DeviceGroup] = []
    for column, name in enumerate(arrays.resources):
        if name == CPU or is_memory_resource(name):
            continue
        for slot, cell in enumerate(cells):
            total = int(arrays.cell_total[column, row, slot])
            if total:
                devices.append(DeviceGroup(name, (cell.id,), total, int(arrays.cell_free[column, row, slot])))
        # Devices without NUMA topology count for the node-level fit only. Not node_allocatable less the
        # cells' totals: a cell's total counts its unhealthy GPUs too ("preferred" is judged on allDevices in
        # devicemanager/topology_hints.go, generateDeviceTopologyHints), node_allocatable only healthy ones
        # (getAvailableDevices), so the difference undercounts the GPUs outside the cells.
        elsewhere = _without_numa(arrays, name, row)
        if elsewhere > 0:
            free = int(arrays.node_free[column, row]) - int(arrays.cell_free[column, row, :count].sum())
            devices.append(DeviceGroup(name, (), elsewhere, max(0, min(free, elsewhere))))
    kubelet = KubeletConfig(
        topology_policy=_POLICY_OF_CODE[PolicyCode(int(arrays.policy[row]))],
        scope=TopologyScope.POD if arrays.scope[row] == ScopeCode.POD else TopologyScope.CONTAINER,
        cpu_manager_policy=CpuManagerPolicy.STATIC if arrays.cpu_static[row] else CpuManagerPolicy.NONE,
        memory_manager_policy=MemoryManagerPolicy.STATIC if arrays.memory_static[row] else MemoryManagerPolicy.NONE,
    )
    return NodeResources(cells=tuple(cells), devices=tuple(devices), kubelet=kubelet)


def _without_numa(arrays: NodeArrays, resource: str, row: int) -> int:
    """Healthy devices of ``resource`` that report no NUMA node: GPUs only (each offers GPU_MILLI to shares)."""
    gpus = int(arrays.unaligned_gpus[row])
    return {GPU_RESOURCE: gpus, GPU_SHARE: GPU_MILLI * gpus}.get(resource, 0)
