"""What a pod placed on a node takes from the node's free amounts: the one charging rule.

The cluster index charges every pod it knows this way (``ClusterIndex``, when it rebuilds a node's free
arrays), and the gang planner charges each member it plans on its private copy of the arrays the same
way (``core.gang.Workspace``), so a gang planned on the copy fits the index it is then reserved in.

* The node: every node-level request; a whole GPU is gone for sharing too (``GPU_MILLI`` thousandths).
* The NUMA cells: what the kubelet's resource managers pin (exclusive CPUs, a Guaranteed pod's memory and
  hugepages, devices), the full amount on every cell the pod uses (an over-estimate for a pod that spans
  cells, never an under-estimate). GPUs whose indices are known are charged on exactly the cell each sits
  on, a whole GPU with all its thousandths; GPUs not known are charged on the pod's cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.core.vocabulary import CPU, GPU_MILLI, GPU_RESOURCE, GPU_SHARE, FloatArray, PodDemand


def pinned_amounts(demand: PodDemand) -> list[tuple[str, float]]:
    """What the kubelet pins to NUMA cells: exclusive CPUs, a Guaranteed pod's memory, devices (positive)."""
    amounts: list[tuple[str, float]] = []
    if demand.exclusive_cpus:
        amounts.append((CPU, float(demand.exclusive_cpus)))
    if demand.guaranteed:
        amounts.extend(demand.memory_requests)
    amounts.extend(demand.device_requests)
    return [(name, amount) for name, amount in amounts if amount > 0]


def charge_node(free: FloatArray, resources: Sequence[str], demand: PodDemand) -> None:
    """Take the pod's node-level amounts off ``free`` ([R], rows named by ``resources``)."""
    for name, amount in demand.node_requests:
        if name in resources:
            free[resources.index(name)] -= amount
    if GPU_SHARE in resources:
        free[resources.index(GPU_SHARE)] -= GPU_MILLI * dict(demand.device_requests).get(GPU_RESOURCE, 0.0)


def charge_cells(
    free: FloatArray,
    resources: Sequence[str],
    demand: PodDemand,
    cells: Sequence[int],
    gpu_cells: Sequence[int | None] | None = None,
) -> None:
    """Take the pod's pinned amounts off ``free`` ([R, K]: rows named by ``resources``, cell positions).

    ``cells``: the positions of the cells the pod uses. ``gpu_cells``: when the pod's GPUs are known, the
    position of the cell each sits on (None for a GPU outside the node's cells, which no cell is charged
    for); None when they are not known.
    """
    share = resources.index(GPU_SHARE) if GPU_SHARE in resources else None
    for name, amount in pinned_amounts(demand):
        if name not in resources:
            continue
        column = resources.index(name)
        if name in (GPU_RESOURCE, GPU_SHARE) and gpu_cells:
            for cell in gpu_cells:
                if cell is None:
                    continue
                if name == GPU_RESOURCE:
                    free[column, cell] -= 1
                    if share is not None:
                        free[share, cell] -= GPU_MILLI
                elif share is not None:
                    free[share, cell] -= amount
            continue
        free[column, list(cells)] -= amount
        if name == GPU_RESOURCE and share is not None:
            free[share, list(cells)] -= GPU_MILLI * amount
