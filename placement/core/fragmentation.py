"""Expected GPU fragmentation against a target workload (FGD: Weng et al., "Beware of Fragmentation", ATC'23).

A node's fragmentation for one pod shape is the GPU capacity it has left that the shape cannot use: all of
it when the shape cannot run there (too few GPUs with enough left, too few CPUs, or a shape asking no GPU),
else what is left on GPUs too small for the shape. The node's expected fragmentation weighs the shapes of
the target workload by frequency. The ``fragmentation`` score component (``scoring``) is how much a
placement lowers it: ``sigmoid(decrease / GPU_MILLI)``, 0.5 when it leaves the node's fragmentation as it
was, lower when it breaks up GPUs or CPUs that the workload's pods need whole.

Computed for every candidate node at once, without per-shape work: shapes differ in CPUs, in the thousandths
of ONE GPU a share asks (``GPU_SHARE``), or in how many whole GPUs they ask. ``TargetWorkload`` folds the
frequencies into two cumulative tables, so that with ``c`` the number of the shapes' CPU levels the node's
free CPUs reach, ``v_g`` each GPU's thousandths left and ``whole`` its free whole GPUs::

    F = sum over GPUs g of lost[c, v_g] - GPU_MILLI * whole * whole_table[c, whole]

A shape asking one GPU (whole or part) can use every GPU with at least its thousandths left (FGD's rule);
a shape of n whole GPUs needs n free ones and uses them all; a shape asking no GPU uses none; a shape that
names GPU models uses none of a node of another model (its tables are the node model's:
``TargetWorkload.for_model``, ``NodeArrays.workload_of``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from placement.core.gpu_sets import choose_shared_gpu
from placement.core.vocabulary import (
    CPU,
    DEFAULT_WORKLOAD,
    GPU_MILLI,
    FloatArray,
    IntArray,
    NodeArrays,
    PodDemand,
    TargetWorkload,
    shape_of,
)

GpuLeftArray = npt.NDArray[np.integer[Any]]  # thousandths left per GPU, 0..GPU_MILLI

NEUTRAL = 0.5  # the component where the placement leaves the expected fragmentation unchanged
# The component moves in steps of 1/STEPS, as FGD's integer scores do: nearer than a step (about 40
# thousandths of a GPU), two placements count as equal and the other components, then the lower slot,
# decide. The workload is an estimate; ordering by its noise packs worse (docs/benchmarks.md).
STEPS = 100


def _cpu_bucket(workload: TargetWorkload, cpu_left: FloatArray) -> IntArray:
    bucket: IntArray = np.searchsorted(workload.cpu_levels, cpu_left, side="right")
    return bucket


def _lost(workload: TargetWorkload, bucket: IntArray, milli: GpuLeftArray) -> FloatArray:
    """The ``lost`` table at (``bucket``, ``milli``), broadcast: [N, 1] and [N, G] give [N, G]."""
    lost: FloatArray = workload.lost.take(bucket * (GPU_MILLI + 1) + milli)
    return lost


def _whole_used(workload: TargetWorkload, bucket: IntArray, whole: IntArray) -> FloatArray:
    """GPU thousandths the multi-GPU shapes can use of ``whole`` free GPUs, weighted by frequency."""
    width = workload.whole_table.shape[1]
    used: FloatArray = GPU_MILLI * whole * workload.whole_table.take(bucket * width + np.minimum(whole, width - 1))
    return used


def _row_sum(values: npt.NDArray[Any]) -> FloatArray:
    """Sum over the last axis; a product with ones is several times faster than ``sum`` on short rows."""
    total: FloatArray = values @ np.ones(values.shape[-1])
    return total


def _whole_count(milli: GpuLeftArray) -> IntArray:
    count: IntArray = _row_sum(milli == GPU_MILLI).astype(np.int64)
    return count


def expected_fragmentation(workload: TargetWorkload, cpu_left: FloatArray, gpu_left: FloatArray) -> FloatArray:
    """[N]: expected fragmentation (GPU thousandths) of nodes with ``cpu_left`` [N] millicores and
    ``gpu_left`` [N, G] thousandths left per GPU (0 for a GPU that is taken, missing or unhealthy)."""
    bucket = _cpu_bucket(workload, cpu_left)
    milli = np.clip(gpu_left, 0, GPU_MILLI).astype(np.int64)
    result: FloatArray = _row_sum(_lost(workload, bucket[:, None], milli)) - _whole_used(
        workload, bucket, _whole_count(milli)
    )
    return result


def fragmentation_component(arrays: NodeArrays, rows: IntArray, demand: PodDemand) -> FloatArray:
    """[N] in [0, 1]: sigmoid of the fall in expected fragmentation, in GPUs, that placing the pod on each
    of ``rows`` brings (``arrays.workload``, the default workload when the caller keeps none), in steps
    of 1/``STEPS``. A share is scored on the GPU where it fragments the least (``least_fragmenting_gpu``
    puts it there).

    Only the pod's node changes, so the measure after placement is the one before, at the node's CPUs
    after placement, corrected for the GPUs the pod takes: whole GPUs from the free ones; a share from
    GPU j, v_j to v_j - share, for each j that holds it.
    """
    count = len(rows)
    if arrays.gpu_left is None or not count:
        return np.full(count, NEUTRAL)
    workload = arrays.workload if arrays.workload is not None else DEFAULT_WORKLOAD
    if not workload.constrained:
        return _component(workload, arrays, rows, demand)
    # The shapes naming GPU models make the tables differ by the node's model: one pass per model.
    codes = np.full(count, -1) if arrays.gpu_model is None else arrays.gpu_model[rows]
    result = np.empty(count)
    for code in np.unique(codes).tolist():
        at = np.flatnonzero(codes == code)
        model = arrays.gpu_model_names[code] if code >= 0 else None
        result[at] = _component(workload.for_model(model), arrays, rows[at], demand)
    return result


def _component(workload: TargetWorkload, arrays: NodeArrays, rows: IntArray, demand: PodDemand) -> FloatArray:
    """``fragmentation_component`` of ``rows`` against the one set of tables ``workload``."""
    assert arrays.gpu_left is not None
    count = len(rows)
    shape = shape_of(demand)
    column = arrays.column(CPU)
    cpu = arrays.node_free[column][rows] if column is not None else np.zeros(count)
    bucket = _cpu_bucket(workload, cpu)
    after_bucket = _cpu_bucket(workload, cpu - shape.cpu_milli)
    # The CPUs the pod takes change the measure only on nodes where fewer of the shapes' CPUs fit after.
    crossed = np.flatnonzero(after_bucket != bucket)
    if shape.gpus == 0:
        # No GPU taken: only those nodes can change at all.
        result = np.full(count, NEUTRAL)
        if crossed.size:
            milli = arrays.gpu_left[rows[crossed]]
            whole = _whole_count(milli)
            before = _row_sum(_lost(workload, bucket[crossed, None], milli)) - _whole_used(
                workload, bucket[crossed], whole
            )
            after = _row_sum(_lost(workload, after_bucket[crossed, None], milli)) - _whole_used(
                workload, after_bucket[crossed], whole
            )
            result[crossed] = _stepped(before - after)
        return result
    milli = arrays.gpu_left[rows]
    whole = _whole_count(milli)
    lost = _lost(workload, bucket[:, None], milli)
    before = _row_sum(lost) - _whole_used(workload, bucket, whole)
    if crossed.size:  # the same GPUs, at the CPUs left after placement
        lost = lost.copy()
        lost[crossed] = _lost(workload, after_bucket[crossed, None], milli[crossed])
    if shape.gpu_milli >= GPU_MILLI:
        taken = shape.gpus * _lost(workload, after_bucket, np.full(count, GPU_MILLI))
        after = _row_sum(lost) - taken - _whole_used(workload, after_bucket, whole - shape.gpus)
    else:
        fits = milli >= shape.gpu_milli
        rest = np.where(fits, milli - shape.gpu_milli, 0)
        now_whole = milli == GPU_MILLI
        variants = (
            (_row_sum(lost) - _whole_used(workload, after_bucket, whole))[:, None]
            - lost
            + _lost(workload, after_bucket[:, None], rest)
            + np.where(now_whole, _whole_used(workload, after_bucket, whole)[:, None], 0.0)
            - np.where(now_whole, _whole_used(workload, after_bucket, whole - 1)[:, None], 0.0)
        )
        after = np.where(fits, variants, np.inf).min(axis=1)
    return _stepped(before - after)


def _stepped(decrease: FloatArray) -> FloatArray:
    """sigmoid(decrease / GPU_MILLI) in steps of 1/STEPS."""
    result: FloatArray = np.floor(STEPS / (1.0 + np.exp(-decrease / GPU_MILLI))) / STEPS
    return result


def least_fragmenting_gpu(
    workload: TargetWorkload | None, cpu_left: float, left: Mapping[int, int], sharable: Iterable[int], share: int
) -> int | None:
    """The GPU among ``sharable`` a pod asking ``share`` thousandths goes on: the one that leaves the node's
    expected fragmentation lowest; among equals, ``choose_shared_gpu``'s (best fit, then the lowest index).

    ``left``: thousandths left on every GPU of the node that pods may share; ``cpu_left``: the node's free
    millicores once the pod is placed. None when no sharable GPU holds the share.
    """
    indices = sorted(left)
    fitting = [i for i in sorted(set(sharable) & set(indices)) if left[i] >= share]
    if not fitting:
        return None
    variants = np.repeat(np.array([[float(left[i]) for i in indices]]), len(fitting), axis=0)
    variants[np.arange(len(fitting)), [indices.index(i) for i in fitting]] -= share
    frag = expected_fragmentation(
        workload if workload is not None else DEFAULT_WORKLOAD, np.full(len(fitting), float(cpu_left)), variants
    )
    least = frag.min()
    return choose_shared_gpu({i: left[i] for i, f in zip(fitting, frag.tolist(), strict=True) if f == least}, share)
