"""The admission kernel compiled with numba: opt-in, off unless ``enable`` turns it on.

Under churn the service judges afresh only the nodes changed since the last call (``state.decision_cache``):
one or two rows a decision, where ``feasibility.filter_nodes`` and ``scoring.node_components`` spend their
time in the fixed cost of some sixty small numpy operations, not in the rows. ``compiled`` holds the same
rules as loops over the index's arrays, compiled by numba. Both functions hand it the calls it covers and
keep the numpy path for the rest; the numpy path stays the reference, and the tests hold the two equal row
for row. Built for the few rows, the kernel wins at every call size measured, up to all 10,000 nodes
(benchmarks/compiled_kernel.py), so it takes every call it covers unless ``enable`` is given a row limit.

Covered: a pod without a constraining intent, on nodes the vectorised rules decide without the memory
manager's groups (no groups held on a node whose Static memory manager hints for the pod; one container,
or several on a node that aligns them at pod scope and pins no memory for the pod); and the per-node score
parts (fit, bandwidth, distance, landing cell) for a pod whose intent names no cells. Left to numpy: the
exact model, memory groups, intents, a resource no node offers, and the fragmentation component.

Opt-in (docs/benchmarks.md, "Compiled admission kernel"): loading numba and the compiled code adds about
110 MB to the process, which takes the service past its 150 MB target at 10,000 nodes. ``enable`` turns it
on for the process (the service's wiring calls it when asked to); where numba is missing or cannot compile
or cache the code (in this package's ``__pycache__``, or ``NUMBA_CACHE_DIR`` where set), the numpy path
answers and ``enable`` returns why, also logged at debug.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import numpy.typing as npt

from placement.core.vocabulary import MAX_NUMA, BoolArray, FloatArray, IntArray, PolicyCode

_log = logging.getLogger(__name__)
_TERMINAL_COLOURS = re.compile(r"\x1b\[[0-9;]*m")

CPU_PROVIDER, MEMORY_PROVIDER, DEVICE_PROVIDER = 0, 1, 2  # the kinds of hint providers (``compiled``)


@dataclass(frozen=True)
class AdmissionChecks:
    """Each row's first failing check (-1 where admitted), or ``covered`` False: the numpy path must answer."""

    first_failing: IntArray
    covered: bool


@dataclass(frozen=True)
class NodeParts:
    """``scoring.NodeComponents`` less the fragmentation component."""

    fit: FloatArray
    raw_bandwidth: npt.NDArray[np.float32]
    distance: FloatArray
    landing_cell: IntArray


@dataclass(frozen=True)
class CompiledKernel:
    """The compiled functions, loaded and compiled; calls of at most ``max_rows`` rows go to them (None: all)."""

    module: ModuleType
    max_rows: int | None

    def admission_checks(
        self,
        rows: IntArray,
        arrays: tuple[npt.NDArray[np.generic], ...],
        requests: tuple[IntArray, FloatArray, float, int, float, IntArray, FloatArray],
        providers: tuple[IntArray, IntArray, IntArray, FloatArray],
        *,
        containers: int,
        guaranteed: bool,
    ) -> AdmissionChecks:
        """``compiled.admission_checks``: ``arrays`` the node columns it reads, ``requests`` and ``providers``
        as ``feasibility`` packs them."""
        codes, covered = self.module.admission_checks(rows, *arrays, *requests, *providers, containers, guaranteed)
        return AdmissionChecks(first_failing=codes, covered=bool(covered))

    def node_parts(
        self,
        rows: IntArray,
        arrays: tuple[npt.NDArray[np.generic], ...],
        columns: IntArray,
        requests: FloatArray,
        gpu_column: int,
    ) -> NodeParts:
        """``compiled.node_parts`` over the node columns ``scoring`` hands it."""
        cell_ids, cell_total, cell_free, node_allocatable, bandwidth, spanning_bw, local, spanning = arrays
        fit, raw_bandwidth, distance, landing = self.module.node_parts(
            rows,
            cell_ids,
            cell_total,
            cell_free,
            columns,
            requests,
            gpu_column,
            node_allocatable,
            bandwidth,
            spanning_bw,
            local,
            spanning,
        )
        return NodeParts(fit=fit, raw_bandwidth=raw_bandwidth, distance=distance, landing_cell=landing)


class _Switch:
    """The process's choice: a module-level setting, like logging's, so that every caller of the core
    functions (the service, the gang and preemption planners) gets it without passing it along."""

    kernel: CompiledKernel | None = None


_SWITCH = _Switch()


def enable(*, max_rows: int | None = None) -> str | None:
    """Loads numba and compiles the kernel (or loads it from numba's cache); from then on the calls it covers
    use it, those of at most ``max_rows`` rows where given. Returns None when it is on, else the reason it is
    not (the numpy path answers)."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"the compiled kernel's row limit must be at least 1, not {max_rows}")
    started = time.perf_counter()
    try:
        module = importlib.import_module("placement.core.kernel.compiled")
        kernel = CompiledKernel(module=module, max_rows=max_rows)
        _warm_up(kernel)
    except Exception as error:  # numba missing, an unsupported CPU, an unwritable cache: numpy answers
        # numba's typing errors run to pages, in terminal colours: the first line names the problem.
        text = _TERMINAL_COLOURS.sub("", str(error)).strip()
        first_line = text.splitlines()[0] if text else ""
        reason = f"compiled admission kernel off, the numpy path answers: {type(error).__name__}: {first_line}"
        _log.debug(reason)
        return reason
    _SWITCH.kernel = kernel
    _log.debug("compiled admission kernel on (%.2f s to load)", time.perf_counter() - started)
    return None


def disable() -> None:
    """Every call goes to the numpy path again."""
    _SWITCH.kernel = None


def for_rows(count: int) -> CompiledKernel | None:
    """The kernel, where it is on and a call of ``count`` rows should use it."""
    kernel = _SWITCH.kernel
    if kernel is None or count == 0 or (kernel.max_rows is not None and count > kernel.max_rows):
        return None
    return kernel


def _warm_up(kernel: CompiledKernel) -> None:
    """Compiles both functions for the index's dtypes now, so the first decision does not wait for it."""
    rows = np.zeros(1, dtype=np.int64)
    cells = np.zeros((1, 1, MAX_NUMA))
    per_node = np.zeros((1, 1))
    flags: BoolArray = np.zeros(1, dtype=np.bool_)
    small = np.ones(1, dtype=np.int8)
    none = np.zeros(0, dtype=np.int64)
    kernel.admission_checks(
        rows,
        (
            small,
            small * PolicyCode.RESTRICTED,
            small,
            flags,
            flags,
            np.zeros((1, MAX_NUMA), dtype=np.uint8),
            cells,
            cells,
            per_node,
            np.zeros(1),
        ),
        (none, np.zeros(0), 0.0, 0, 1.0, none, np.zeros(0)),
        (none, np.zeros(1, dtype=np.int64), none, np.zeros(0)),
        containers=1,
        guaranteed=True,
    )
    kernel.node_parts(
        rows,
        (
            np.zeros((1, MAX_NUMA), dtype=np.int16),
            cells,
            cells,
            per_node,
            np.zeros((1, MAX_NUMA), dtype=np.float32),
            np.zeros(1, dtype=np.float32),
            np.zeros((1, MAX_NUMA), dtype=np.float32),
            np.zeros(1, dtype=np.float32),
        ),
        np.zeros(1, dtype=np.int64),
        np.ones(1),
        0,
    )
