"""The admission kernel compiled with numba: ahead of time (no numba at run time), or by numba when asked.

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

Two ways to load it (docs/benchmarks.md, "Compiled admission kernel"). Built ahead of time
(``python -m placement.core.kernel.ahead_of_time``, once per install), it is a small C extension module that
needs numpy only: about 0.3 MB, and the service turns it on by default (``enable`` with ``allow_jit`` False).
Compiled by numba at run time (``allow_jit``, the service's ``--compiled-kernel``), loading numba and LLVM
adds about 110 MB, past the service's 150 MB target at 10,000 nodes. ``enable`` prefers the module built
ahead of time when it was built from these rules (``ahead_of_time.SOURCE_DIGEST_FILE``); where neither
loads (not built, numba missing, a cache it cannot write: this package's ``__pycache__``, or
``NUMBA_CACHE_DIR`` where set) the numpy path answers and ``enable`` returns why, also logged at debug.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from placement.core.vocabulary import MAX_NUMA, BoolArray, FloatArray, IntArray, PolicyCode

if TYPE_CHECKING:  # imported when first used: ``python -m`` runs it as a script
    from placement.core.kernel.ahead_of_time import CheckedModule

_log = logging.getLogger(__name__)
_TERMINAL_COLOURS = re.compile(r"\x1b\[[0-9;]*m")

CPU_PROVIDER, MEMORY_PROVIDER, DEVICE_PROVIDER = 0, 1, 2  # the kinds of hint providers (``compiled``)
AHEAD_OF_TIME, JIT = "built ahead of time", "compiled by numba at run time"


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

    module: ModuleType | CheckedModule
    max_rows: int | None
    source: str = JIT  # AHEAD_OF_TIME or JIT: how its functions were compiled

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


def enable(*, max_rows: int | None = None, allow_jit: bool = True, ahead_of_time: bool = True) -> str | None:
    """Turns the kernel on: the module built ahead of time when there is one built from these rules (and
    ``ahead_of_time``), else (``allow_jit``) numba compiling it now or loading it from numba's cache. From
    then on the calls it covers use it, those of at most ``max_rows`` rows where given. Returns None when it
    is on (``active`` says which way), else the reason it is not (the numpy path answers)."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"the compiled kernel's row limit must be at least 1, not {max_rows}")
    started = time.perf_counter()
    built, not_built = built_ahead_of_time() if ahead_of_time else (None, None)
    reasons = [] if not_built is None else [f"not built ahead of time ({not_built})"]
    if built is not None:
        kernel, failure = _loaded(built, max_rows, AHEAD_OF_TIME)
        if kernel is not None:
            _switch_on(kernel, started)
            return None
        reasons.append(f"the module built ahead of time fails: {failure}")
    if allow_jit:
        try:
            module = importlib.import_module("placement.core.kernel.compiled")
        except Exception as error:  # numba missing or broken: numpy answers
            reasons.append(_first_line(error))
        else:
            kernel, failure = _loaded(module, max_rows, JIT)
            if kernel is not None:
                _switch_on(kernel, started)
                return None
            reasons.append(failure)
    reason = f"compiled admission kernel off, the numpy path answers: {'; '.join(reasons)}"
    _log.debug(reason)
    return reason


def active() -> str | None:
    """How the kernel in use was compiled (``AHEAD_OF_TIME`` or ``JIT``); None when the numpy path answers."""
    kernel = _SWITCH.kernel
    return None if kernel is None else kernel.source


def built_ahead_of_time() -> tuple[CheckedModule | None, str | None]:
    """The module ``ahead_of_time`` built, when it was built from the rules in ``compiled.py``; else why not."""
    from placement.core.kernel import ahead_of_time  # noqa: PLC0415 - numpy only; not at import (see above)

    recorded = ahead_of_time.PACKAGE_DIR / ahead_of_time.SOURCE_DIGEST_FILE
    try:
        module = importlib.import_module(f"placement.core.kernel.{ahead_of_time.MODULE}")
    except ImportError:
        return None, "run python -m placement.core.kernel.ahead_of_time"
    try:
        digest = recorded.read_text().strip()
    except OSError:
        digest = ""
    if digest != ahead_of_time.source_digest():
        return None, f"{ahead_of_time.MODULE} was built from other rules than compiled.py's: build it again"
    return ahead_of_time.CheckedModule(module), None


def _loaded(module: ModuleType | CheckedModule, max_rows: int | None, source: str) -> tuple[CompiledKernel | None, str]:
    """The kernel over ``module``, warmed up (numba compiles both functions now); else the reason it fails."""
    kernel = CompiledKernel(module=module, max_rows=max_rows, source=source)
    try:
        _warm_up(kernel)
    except Exception as error:  # an unsupported CPU, an unwritable cache, a signature that no longer fits
        return None, _first_line(error)
    return kernel, ""


def _switch_on(kernel: CompiledKernel, started: float) -> None:
    _SWITCH.kernel = kernel
    _log.debug("compiled admission kernel on, %s (%.2f s to load)", kernel.source, time.perf_counter() - started)


def _first_line(error: Exception) -> str:
    # numba's typing errors run to pages, in terminal colours: the first line names the problem.
    text = _TERMINAL_COLOURS.sub("", str(error)).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


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
            np.full(1, PolicyCode.RESTRICTED, dtype=np.int8),
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
