"""NVIDIA k8s-device-plugin's ``GetPreferredAllocation`` for full GPUs, and the GPUs the kubelet then hands a
pod asking ``nvidia.com/gpu`` (``kubelet_gpus``).

``internal/plugin/server.go`` ``GetPreferredAllocation`` calls the resource manager per container;
``internal/rm/nvml_manager.go`` ``getPreferredAllocation`` takes ``alignedAlloc`` when every device is a
full GPU without replicas: go-gpuallocator's ``NewBestEffortPolicy().Allocate`` over the available and the
required GPUs, in the order the kubelet listed them (``DeviceList.Filter`` keeps it), answered as the
chosen devices' UUIDs (``placement.core.gpuallocator``). Not modelled: replicas (time-slicing and MPS
take ``greedyAlloc`` with the ``distributed`` or ``packed`` policy), MIG devices, WSL, and device
plugins other than NVIDIA's.

The plugin registers every GPU with the kubelet by its UUID (``rm/devices.go``: ``dev.ID = uuid``;
``DEVICE_ID_STRATEGY`` only changes what the container is told), so the kubelet's sets hold UUIDs. Here
a GPU's index stands for its UUID: nothing upstream orders UUIDs (the kubelet lists them in Go map order,
``placement.core.device_manager``), so the ids only have to be distinct, and the index is what the
service annotates and charges.

When the best-effort policy's best set holds a padding slot, ``alignedAlloc`` reads the UUID of a nil
device: the plugin panics, the RPC fails and the kubelet rejects the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placement.core.device_manager import PreferredAllocationError, allocate_pod
from placement.core.gpu_sets import GpuLinkTable
from placement.core.gpuallocator import PairScores, best_effort_allocate
from placement.core.topology_manager.admission_inputs import Pod
from placement.core.topology_manager.bitmask import NumaMask
from placement.core.vocabulary import GPU_RESOURCE


def preferred_allocation(
    scores: PairScores, available: Sequence[int], must_include: Sequence[int], size: int
) -> tuple[int, ...]:
    """``alignedAlloc(available, required, size)``; raises ``PreferredAllocationError`` where it panics."""
    chosen = best_effort_allocate(scores, available, must_include, size)
    gpus = tuple(gpu for gpu in chosen if gpu is not None)
    if len(gpus) < len(chosen):
        raise PreferredAllocationError("runtime error: invalid memory address or nil pointer dereference")
    return gpus


def kubelet_gpus(
    table: GpuLinkTable, free: frozenset[int], pod: Pod, affinities: Mapping[str, NumaMask | None]
) -> tuple[int, ...]:
    """The GPUs the kubelet's device manager gives ``pod``, asking NVIDIA's plugin, out of the ``free`` ones
    (healthy, held by no pod), with the Topology Manager's hint per container. Raises
    ``DeviceAllocationError`` where the kubelet's allocation fails and ``SearchTooLarge`` where the
    plugin's answer was not computed."""
    # The plugin reports each GPU's NUMA node from sysfs, one node or none (``rm.Device.GetNumaNode``).
    numa_nodes = {gpu: () if numa is None else (numa,) for gpu, numa in zip(table.gpus, table.numa_nodes, strict=True)}
    chosen = allocate_pod(
        pod,
        GPU_RESOURCE,
        available=free,
        numa_nodes=numa_nodes,
        affinities=affinities,
        preferred=lambda available, must_include, size: preferred_allocation(
            table.plugin_scores, available, must_include, size
        ),
    )
    return tuple(sorted(chosen))
