"""The few-rows admission kernel, compiled by numba: the vectorised rules of ``feasibility`` and the per-node
score parts of ``scoring``, one node at a time, over the index's own arrays (no gather, no temporaries).

Imported only by ``placement.core.kernel.enable`` (importing numba costs start time and memory). Each function
is the loop form of its numpy reference, in the same order of checks and the same float operations; sums
over a node's cells are exact because the quantities are integers below 2**53 (``feasibility``).
"""

# numba compiles positional parameters, plain loops and comparisons, not keyword-only parameters, generator
# expressions or membership in a tuple of mixed integer types.
# ruff: noqa: PLR0917, SIM110, PLR1714

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from placement.core.kernel import CPU_PROVIDER, MEMORY_PROVIDER
from placement.core.vocabulary import MAX_NUMA, PolicyCode, ScopeCode

Array = Any  # numba dispatches on the arrays' dtypes; the typed wrappers live in placement.core.kernel

_NONE = int(PolicyCode.NONE)
_RESTRICTED = int(PolicyCode.RESTRICTED)
_SINGLE_NUMA_NODE = int(PolicyCode.SINGLE_NUMA_NODE)
_CONTAINER_SCOPE = int(ScopeCode.CONTAINER)
_NO_FIT = MAX_NUMA + 1
_MASKS = 1 << MAX_NUMA

# scoring's constants, copied (scoring imports this package, and placement.core's packages import no cycle) and
# folded as Python folds them in fit_curve, so that the float operations are the same; the tests hold them equal.
_SWEET_SPOT = 0.85
_FALL = 1.0 - 0.5  # 1 - FULL_CELL_SCORE
_FALL_SPAN = 1.0 - _SWEET_SPOT
_NEUTRAL = 0.5
_LOCAL_DISTANCE = np.float32(10.0)  # float32, as the reference divides float32 distances by it


@numba.njit(cache=True)
def _fit_curve(x: float) -> float:
    u = min(max(x, 0.0), 1.0)
    if u <= _SWEET_SPOT:
        return u / _SWEET_SPOT
    return 1.0 - _FALL * (u - _SWEET_SPOT) / _FALL_SPAN


@numba.njit(cache=True)
def _sum_cells(amounts: Array, column: int, row: int, mask: int) -> float:
    total = 0.0
    for k in range(MAX_NUMA):
        if mask >> k & 1:
            total += amounts[column, row, k]
    return total


@numba.njit(cache=True)
def _fits_mask(amounts: Array, row: int, columns: Array, requests: Array, first: int, last: int, mask: int) -> bool:
    """Every resource of one provider (``columns[first:last]``) fits in the sum over ``mask``'s cells."""
    for i in range(first, last):
        if _sum_cells(amounts, columns[i], row, mask) < requests[i]:
            return False
    return True


@numba.njit(cache=True)
def _narrowest(total: Array, row: int, columns: Array, requests: Array, first: int, last: int) -> int:
    """feasibility._narrowest for one node and provider."""
    if last - first == 1:
        largest_first = np.sort(total[columns[first], row, :])[::-1]
        covered = 0.0
        short = 0
        for k in range(MAX_NUMA):
            covered += largest_first[k]
            if covered < requests[first]:
                short += 1
        return _NO_FIT if short + 1 > MAX_NUMA else short + 1
    narrowest = _NO_FIT
    for mask in range(1, _MASKS):
        width = 0
        for k in range(MAX_NUMA):
            width += mask >> k & 1
        if width < narrowest and _fits_mask(total, row, columns, requests, first, last, mask):
            narrowest = width
    return narrowest


@numba.njit(cache=True)
def _single_numa_admits(
    total: Array, free: Array, row: int, cells: int, active: Array, starts: Array, columns: Array, requests: Array
) -> bool:
    """feasibility._single_numa_admits for one node without memory groups."""
    providers = len(active)
    for cell in range(cells):
        ok = True
        for p in range(providers):
            if not active[p]:
                continue
            first, last = starts[p], starts[p + 1]
            if not _fits_mask(free, row, columns, requests, first, last, 1 << cell):
                ok = False
                break
            covered_by_one = False
            for k in range(MAX_NUMA):
                if _fits_mask(total, row, columns, requests, first, last, 1 << k):
                    covered_by_one = True
                    break
            if not covered_by_one:
                ok = False
                break
        if ok:
            return True
    return False


@numba.njit(cache=True)
def _restricted_admits(
    total: Array, free: Array, row: int, cells: int, active: Array, starts: Array, columns: Array, requests: Array
) -> bool:
    """feasibility._restricted_admits for one node without memory groups."""
    providers = len(active)
    width = 0
    for p in range(providers):
        if not active[p]:
            continue
        narrowest = _narrowest(total, row, columns, requests, starts[p], starts[p + 1])
        if width == 0:
            width = narrowest
        elif width != narrowest:
            return False
    if width == _NO_FIT:
        return False
    if width == 0:
        return True
    if width == 1 or width == cells:
        # One cell each, or the whole node: every slot summed, as the reference sums the row.
        candidates = range(cells) if width == 1 else range(1)
        for cell in candidates:
            mask = 1 << cell if width == 1 else _MASKS - 1
            ok = True
            for p in range(providers):
                if active[p] and not _fits_mask(free, row, columns, requests, starts[p], starts[p + 1], mask):
                    ok = False
                    break
            if ok:
                return True
        return False
    for mask in range(1, _MASKS):
        bits = 0
        for k in range(MAX_NUMA):
            bits += mask >> k & 1
        if bits != width:
            continue
        ok = True
        for p in range(providers):
            if active[p] and not _fits_mask(free, row, columns, requests, starts[p], starts[p + 1], mask):
                ok = False
                break
        if ok:
            return True
    return False


@numba.njit(cache=True)
def admission_checks(
    rows: Array,
    numa_count: Array,
    policy: Array,
    scope: Array,
    cpu_static: Array,
    memory_static: Array,
    memory_group: Array,
    cell_total: Array,
    cell_free: Array,
    node_free: Array,
    gpu_share_free: Array,
    node_columns: Array,
    node_requests: Array,
    share: float,
    cpu_column: int,
    exclusive_cpus: float,
    memory_columns: Array,
    memory_requests: Array,
    provider_kinds: Array,
    provider_starts: Array,
    provider_columns: Array,
    provider_requests: Array,
    containers: int,
    guaranteed: bool,
) -> tuple[Array, bool]:
    """Each row's first failing check (-1: admitted), in ``feasibility.filter_nodes``'s order: no topology,
    each node-level request, the GPU share (``share`` > 0), exclusive CPUs (``exclusive_cpus`` > 0), each
    memory manager pool (``memory_columns``), too many NUMA cells, single-numa-node, restricted.

    The second value is False when some row needs what the kernel leaves to the numpy path: the exact
    model (several containers) or the memory manager's groups; the codes are then incomplete.
    """
    providers = len(provider_kinds)
    has_memory_provider = False
    for p in range(providers):
        has_memory_provider |= provider_kinds[p] == MEMORY_PROVIDER
    active = np.zeros(providers, dtype=np.bool_)
    codes = np.full(len(rows), -1, dtype=np.int64)
    too_many_check = 1 + len(node_columns) + int(share > 0) + int(exclusive_cpus > 0) + len(memory_columns)
    for i in range(len(rows)):
        row = rows[i]
        count = numa_count[row]
        node_policy = policy[row]
        several = containers > 1 and (
            (scope[row] == _CONTAINER_SCOPE and node_policy != _NONE) or (memory_static[row] and guaranteed)
        )
        if several:
            return codes, False
        if has_memory_provider and memory_static[row]:
            for k in range(MAX_NUMA):
                if memory_group[row, k] != 0:
                    return codes, False
        check = 0
        if count == 0:
            codes[i] = check
            continue
        failed = False
        for j in range(len(node_columns)):
            check += 1
            if node_free[node_columns[j], row] < node_requests[j]:
                failed = True
                break
        if failed:
            codes[i] = check
            continue
        check = len(node_columns)
        if share > 0:
            check += 1
            if gpu_share_free[row] < share:
                codes[i] = check
                continue
        if exclusive_cpus > 0:
            check += 1
            if cpu_static[row] and _sum_cells(cell_free, cpu_column, row, _MASKS - 1) < exclusive_cpus:
                codes[i] = check
                continue
        for j in range(len(memory_columns)):
            check += 1
            if memory_static[row] and _sum_cells(cell_free, memory_columns[j], row, _MASKS - 1) < memory_requests[j]:
                failed = True
                break
        if failed:
            codes[i] = check
            continue
        if count > MAX_NUMA:
            if node_policy != _NONE:
                codes[i] = too_many_check
            continue
        if node_policy != _SINGLE_NUMA_NODE and node_policy != _RESTRICTED:
            continue
        for p in range(providers):
            kind = provider_kinds[p]
            if kind == CPU_PROVIDER:
                active[p] = cpu_static[row]
            elif kind == MEMORY_PROVIDER:
                active[p] = memory_static[row]
            else:
                active[p] = _sum_cells(cell_total, provider_columns[provider_starts[p]], row, _MASKS - 1) > 0
        if node_policy == _SINGLE_NUMA_NODE:
            if not _single_numa_admits(
                cell_total, cell_free, row, count, active, provider_starts, provider_columns, provider_requests
            ):
                codes[i] = too_many_check + 1
        elif not _restricted_admits(
            cell_total, cell_free, row, count, active, provider_starts, provider_columns, provider_requests
        ):
            codes[i] = too_many_check + 2
    return codes, True


@numba.njit(cache=True)
def node_parts(
    rows: Array,
    cell_ids: Array,
    cell_total: Array,
    cell_free: Array,
    columns: Array,
    requests: Array,
    gpu_column: int,
    node_allocatable: Array,
    bandwidth: Array,
    spanning_bandwidth: Array,
    local_distance: Array,
    spanning_distance: Array,
) -> tuple[Array, Array, Array, Array]:
    """``scoring.node_components``'s fit, raw bandwidth, distance and landing cell of ``rows``, for a pod
    whose every cell is allowed; ``columns``/``requests``: what it needs in one cell (``cell_requests``)."""
    count = len(rows)
    fit = np.empty(count)
    raw_bandwidth = np.empty(count, dtype=np.float32)
    # Computed in float32 as the reference computes it from the float32 SLIT distances, kept as float64
    # (as the decision cache keeps it).
    distance = np.empty(count)
    landing_cell = np.empty(count, dtype=np.int64)
    divisor = max(len(columns), 1)
    used = np.empty(MAX_NUMA)
    fits = np.empty(MAX_NUMA, dtype=np.bool_)
    for i in range(count):
        row = rows[i]
        node_used = 0.0
        for k in range(MAX_NUMA):
            used[k] = 0.0
            fits[k] = cell_ids[row, k] >= 0
        for j in range(len(columns)):
            column, request = columns[j], requests[j]
            node_total = 0.0
            node_free = 0.0
            for k in range(MAX_NUMA):
                total, free = cell_total[column, row, k], cell_free[column, row, k]
                fits[k] = fits[k] and free >= request
                used[k] += (total - free + request) / total if total > 0 else 1.0
                node_total += total
                node_free += free
            node_taken = node_total - node_free + request
            node_used += node_taken / node_total if node_total > 0 else 1.0
        landing = 0
        best = -np.inf
        for k in range(MAX_NUMA):
            cell_fit = _fit_curve(used[k] / divisor) if fits[k] else -1.0
            if cell_fit > best:
                best, landing = cell_fit, k
        single = fits[landing]
        fit[i] = best if single else _fit_curve(node_used / divisor)
        if gpu_column >= 0 and node_allocatable[gpu_column, row] > 0:
            fit[i] = _NEUTRAL  # on a node with GPUs, as for a GPU pod; scoring.gpu_node_fit scores a CPU pod's
        one = np.float32(1.0)
        if single:
            raw_bandwidth[i] = bandwidth[row, landing]
            local = local_distance[row, landing]
            value = _LOCAL_DISTANCE / max(local, one) if local > 0 else one
            landing_cell[i] = landing
        else:
            raw_bandwidth[i] = spanning_bandwidth[row]
            spanning = spanning_distance[row]
            value = _LOCAL_DISTANCE / max(spanning, one) if spanning > 0 else np.float32(_NEUTRAL)
            landing_cell[i] = -1
        distance[i] = min(max(value, np.float32(0.0)), one)
    return fit, raw_bandwidth, distance, landing_cell
