"""The kubelet device manager's choice of device ids for each container of a pod, ported.

kubernetes ``pkg/kubelet/cm/devicemanager/manager.go`` (Kubernetes 1.28-1.33, ``sets.Set[string]``):

* ``ManagerImpl.Allocate`` (``allocate_pod``): containers in admission order, init containers first; a
  run-to-completion init container's devices are handed on to the containers after it
  (``devicesToReuse``: ``addContainerAllocatedResources``), a sidecar's and an app container's are taken
  out of that pool (``removeContainerAllocatedResources``).
* ``devicesToAllocate`` (``devices_to_allocate``): reusable devices first; then, with the device's NUMA
  split by the Topology Manager's hint for the container (``filter_by_affinity``): if fewer are needed
  than there are aligned devices, the plugin's preferred allocation among the aligned ones (and those
  already taken), then the aligned ones; otherwise every aligned device, then the plugin's preferred
  allocation among all available ones, then the unaligned devices, then those without NUMA affinity.
* ``callGetPreferredAllocationIfAvailable``: the plugin is asked for ``required`` devices (the
  container's whole request) out of the candidates plus the devices already taken, which it must
  include; a plugin that does not implement it answers nothing, an RPC error fails the allocation.

**Order.** Where the kubelet takes some of a set larger than it needs (``allocateRemainingFrom``:
``for device := range devices.Difference(allocated)``) and where it lists candidates for the plugin
(``available.UnsortedList()``), it goes in Go map order, which is random on every run: nothing upstream
is sorted (``sets.List`` appears only in a log line). So the device ids are not always determined; the
upstream tests assert counts per NUMA node where they are not (``topology_hints_test.go``
``TestTopologyAlignedAllocation``). This port goes in ascending id order, one of the equally possible
outcomes: exact wherever the outcome is forced (a plugin's unique best answer, a set taken whole), one
sample of the kubelet's draw elsewhere.

Devices on several NUMA nodes: ``filterByAffinity`` files a device under the first of its nodes in an
order that puts the hint's nodes first, so a device with any node in the hint is aligned; the order
within the hint's nodes changes nothing once the lists become sets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from typing import TypeVar

from placement.core.topology_manager.admission_inputs import Pod
from placement.core.topology_manager.bitmask import NumaMask

Device = TypeVar("Device", int, str)
# GetPreferredAllocation(available, mustInclude, size) -> the device ids the plugin prefers.
PreferredAllocation = Callable[[Sequence[Device], Sequence[Device], int], Sequence[Device]]


class DeviceAllocationError(Exception):
    """The device manager's ``Allocate`` fails: the kubelet rejects the pod (UnexpectedAdmissionError)."""


class PreferredAllocationError(Exception):
    """The plugin's ``GetPreferredAllocation`` RPC failed."""


def filter_by_affinity(
    available: Set[Device], numa_nodes: Mapping[Device, tuple[int, ...]], affinity: NumaMask | None
) -> tuple[frozenset[Device], frozenset[Device], frozenset[Device]]:
    """``filterByAffinity``: (aligned, unaligned, without NUMA affinity).

    ``numa_nodes`` holds every device of the resource (``allDevices``: in use and unhealthy ones too);
    without a hint, or when no device of the resource reports a NUMA node (``deviceHasTopologyAlignment``),
    every available device counts as without affinity.
    """
    if affinity is None or not any(numa_nodes.values()):
        return frozenset(), frozenset(), frozenset(available)
    aligned = frozenset(d for d in available if affinity.any_set(numa_nodes.get(d, ())))
    without = frozenset(d for d in available if not numa_nodes.get(d, ()))
    return aligned, frozenset(available) - aligned - without, without


def devices_to_allocate(
    *,
    resource: str,
    required: int,
    available: Set[Device],
    numa_nodes: Mapping[Device, tuple[int, ...]],
    affinity: NumaMask | None,
    preferred: PreferredAllocation[Device] | None,
    reusable: Set[Device] = frozenset(),
) -> frozenset[Device]:
    """``devicesToAllocate`` for one resource of one container (see the module docstring).

    ``available``: healthy devices no container holds (``healthyDevices - allocatedDevices``);
    ``reusable``: the devices of this pod's finished init containers; ``preferred``: the plugin's
    ``GetPreferredAllocation``, None when it does not implement it.
    """
    allocated: set[Device] = set()
    needed = required

    def take_from(devices: Set[Device]) -> bool:
        """``allocateRemainingFrom``: True once nothing more is needed."""
        nonlocal needed
        for device in sorted(set(devices) - allocated):  # Go map order upstream (module docstring)
            allocated.add(device)
            needed -= 1
            if needed == 0:
                return True
        return False

    def ask_plugin(candidates: Set[Device]) -> frozenset[Device]:
        if preferred is None:
            return frozenset()
        try:
            return frozenset(preferred(sorted(candidates), sorted(allocated), required))
        except PreferredAllocationError as error:
            raise DeviceAllocationError(f"device plugin GetPreferredAllocation rpc failed with err: {error}") from None

    if needed == 0 or take_from(reusable):
        return frozenset(allocated)
    if len(available) < needed:
        raise DeviceAllocationError(
            f"requested number of devices unavailable for {resource}. Requested: {needed}, Available: {len(available)}"
        )
    aligned, unaligned, without = filter_by_affinity(available, numa_nodes, affinity)
    if needed < len(aligned):
        if take_from(ask_plugin(aligned | allocated) & aligned) or take_from(aligned):
            return frozenset(allocated)
    elif (
        take_from(aligned)
        or take_from(ask_plugin(set(available) | allocated) & available)
        or take_from(unaligned)
        or take_from(without)
    ):
        return frozenset(allocated)
    raise DeviceAllocationError(
        f"unexpectedly allocated less resources than required. Requested: {required}, Got: {required - needed}"
    )


def allocate_pod(
    pod: Pod,
    resource: str,
    *,
    available: Set[Device],
    numa_nodes: Mapping[Device, tuple[int, ...]],
    affinities: Mapping[str, NumaMask | None],
    preferred: PreferredAllocation[Device] | None,
) -> frozenset[Device]:
    """``Allocate`` for every container of ``pod`` in admission order: the devices of ``resource`` the pod
    ends up holding. ``affinities``: the Topology Manager's hint per container name (absent or None: no
    hint, as under policy ``none``)."""
    free = set(available)
    reusable: set[Device] = set()
    held: set[Device] = set()
    # Only a run-to-completion init container hands its devices on.
    containers = [(c, not c.restartable) for c in pod.init_containers] + [(c, False) for c in pod.containers]
    for container, hands_on in containers:
        got = devices_to_allocate(
            resource=resource,
            required=dict(container.devices).get(resource, 0),
            available=free,
            numa_nodes=numa_nodes,
            affinity=affinities.get(container.name),
            preferred=preferred,
            reusable=reusable,
        )
        free -= got
        held |= got
        if hands_on:
            reusable |= got
        else:
            reusable -= got
    return frozenset(held)
