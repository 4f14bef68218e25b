"""The kubelet: its resource-management configuration, and its PodResources API.

``read_kubelet_settings`` reads the KubeletConfiguration file through HostFS. ``fetch_pod_resources``
asks the kubelet's PodResources v1 gRPC service on its unix socket what it can hand out
(``GetAllocatableResources``) and what every container holds (``List``), and returns plain values:
nothing past this module sees protobuf. ``read_zone_resources`` is what a periodic publisher calls:
it re-reads both every time, because device plugins register late and change what is allocatable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc
import yaml

from agent.hostfs import HostFS, HostFSError
from agent.podresources.v1 import api_pb2, api_pb2_grpc
from kubenexus.topology.availability import (
    AllocatableResources,
    ContainerResources,
    DeviceSet,
    MemoryBlock,
    PodResources,
    pod_set_fingerprint,
    zone_resources,
)
from kubenexus.topology.cpulist import parse_cpulist
from kubenexus.topology.model import DiscoveryWarning, KubeletSettings, NodeTopology, ZoneResources
from kubenexus.topology.podfingerprint import METHOD_ALL

SOURCE = "kubelet"
DEFAULT_CONFIG_PATH = "/var/lib/kubelet/config.yaml"
DEFAULT_SOCKET_PATH = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT_S = 10.0  # the resource-topology-exporter's; the kubelet answers from memory
# The kubelet's own PodResources client allows 16 MiB; gRPC's 4 MiB default is short of a node with
# hundreds of pods with many devices each.
_MAX_MESSAGE_BYTES = 16 << 20

# The values each kubelet setting accepts today. An unknown one is kept as written (a newer kubelet may
# know it) and warned about, since an older kubelet would refuse to start with it.
_KNOWN_VALUES: Mapping[str, tuple[str, ...]] = {
    "topologyManagerPolicy": ("none", "best-effort", "restricted", "single-numa-node"),
    "topologyManagerScope": ("container", "pod"),
    "cpuManagerPolicy": ("none", "static"),
    "memoryManagerPolicy": ("None", "Static"),
}


@dataclass(frozen=True)
class KubeletOverrides:
    """Settings given on the agent's command line, for kubelets configured by flags rather than a file."""

    topology_manager_policy: str | None = None
    topology_manager_scope: str | None = None


@dataclass(frozen=True)
class KubeletReport:
    settings: KubeletSettings | None  # None when neither the file nor the overrides told anything
    warnings: tuple[DiscoveryWarning, ...] = ()


@dataclass(frozen=True)
class PodResourcesSnapshot:
    allocatable: AllocatableResources
    pods: tuple[PodResources, ...]


@dataclass(frozen=True)
class ZoneReading:
    """One reading of the PodResources API, ready for ``NodeTopology``'s fields of the same names."""

    zone_resources: tuple[ZoneResources, ...]
    pods_fingerprint: str | None  # None when the kubelet could not be read
    warnings: tuple[DiscoveryWarning, ...] = ()


class PodResourcesError(Exception):
    """The PodResources API could not be read; the message says why in one sentence."""

    def __init__(self, socket_path: str, problem: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(f"kubelet PodResources API at {socket_path}: {problem}")
        self.socket_path = socket_path
        self.problem = problem
        self.code = code


def read_kubelet_settings(
    fs: HostFS, path: str = DEFAULT_CONFIG_PATH, *, overrides: KubeletOverrides | None = None
) -> KubeletReport:
    """The kubelet's resource-management settings from its KubeletConfiguration file, then ``overrides``.

    A field the file leaves out takes the kubelet's default. When the file is missing or garbled the
    settings are None, unless an override is given: then they are the overrides over the kubelet's
    defaults, and a warning says the rest is assumed.
    """
    overrides = overrides or KubeletOverrides()
    warnings: list[DiscoveryWarning] = []
    config = _load_config(fs, path, warnings)
    has_override = overrides.topology_manager_policy is not None or overrides.topology_manager_scope is not None
    if config is None:
        if not has_override:
            return KubeletReport(None, tuple(warnings))
        warnings.append(_warning("CPU and memory manager policies are assumed to be the kubelet's defaults", path=path))
        config = {}

    defaults = KubeletSettings()
    settings = KubeletSettings(
        topology_manager_policy=overrides.topology_manager_policy
        or _policy(config, "topologyManagerPolicy", defaults.topology_manager_policy, path, warnings),
        topology_manager_scope=overrides.topology_manager_scope
        or _policy(config, "topologyManagerScope", defaults.topology_manager_scope, path, warnings),
        cpu_manager_policy=_policy(config, "cpuManagerPolicy", defaults.cpu_manager_policy, path, warnings),
        memory_manager_policy=_policy(config, "memoryManagerPolicy", defaults.memory_manager_policy, path, warnings),
        reserved_cpus=_reserved_cpus(config, path, warnings),
    )
    return KubeletReport(settings, tuple(warnings))


def fetch_pod_resources(
    socket_path: str = DEFAULT_SOCKET_PATH, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> PodResourcesSnapshot:
    """What the kubelet can allocate and what each pod holds; both calls share one ``timeout_s`` deadline.

    Raises PodResourcesError when the socket is absent, the kubelet does not answer in time, or it
    does not implement ``GetAllocatableResources`` (Kubernetes before 1.21, or 1.21-1.22 with the
    ``KubeletPodResourcesGetAllocatable`` feature gate off).
    """
    # The socket is reached in the agent's own mount namespace (the DaemonSet mounts it), not under
    # --host-root; a missing one is the usual misconfiguration and deserves its own message.
    if not os.path.exists(socket_path):
        raise PodResourcesError(
            socket_path, "the socket does not exist (is /var/lib/kubelet/pod-resources mounted into the agent?)"
        )
    deadline = time.monotonic() + timeout_s
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)]
    with grpc.insecure_channel(f"unix://{os.path.abspath(socket_path)}", options=options) as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        try:
            allocatable = stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=_remaining(deadline)
            )
            listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=_remaining(deadline))
        except grpc.RpcError as error:
            raise _rpc_failure(error, socket_path, timeout_s) from None
    return PodResourcesSnapshot(
        allocatable=AllocatableResources(
            devices=_device_sets(allocatable.devices),
            cpu_ids=tuple(int(cpu) for cpu in allocatable.cpu_ids),
            memory=_memory_blocks(allocatable.memory),
        ),
        pods=tuple(_pod(pod) for pod in listed.pod_resources),
    )


def read_zone_resources(
    topology: NodeTopology,
    socket_path: str = DEFAULT_SOCKET_PATH,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    fingerprint_method: str = METHOD_ALL,
) -> ZoneReading:
    """Per-NUMA-zone resources and the pods fingerprint for ``topology``; never raises for a kubelet problem.

    When the kubelet cannot be read the reading is empty, with a warning: a publisher should keep what
    it published last rather than publish zones it does not know.
    """
    try:
        snapshot = fetch_pod_resources(socket_path, timeout_s=timeout_s)
    except PodResourcesError as error:
        return ZoneReading((), None, (DiscoveryWarning(SOURCE, str(error), path=socket_path),))
    availability = zone_resources(topology, snapshot.allocatable, snapshot.pods)
    return ZoneReading(
        availability.zones,
        pod_set_fingerprint(snapshot.pods, method=fingerprint_method),
        availability.warnings,
    )


def _load_config(fs: HostFS, path: str, warnings: list[DiscoveryWarning]) -> dict[str, object] | None:
    try:
        text = fs.read_text(path)
    except HostFSError as error:
        warnings.append(_warning(f"kubelet configuration {error.problem}", path=path))
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        warnings.append(_warning(f"kubelet configuration is not valid YAML ({problem})", path=path))
        return None
    if not isinstance(document, dict):
        warnings.append(_warning("kubelet configuration is not a YAML mapping", path=path))
        return None
    kind = document.get("kind")
    if kind is not None and kind != "KubeletConfiguration":
        warnings.append(_warning(f"expected kind KubeletConfiguration, found {kind!r}", path=path))
        return None
    return {str(key): value for key, value in document.items()}


def _policy(config: Mapping[str, object], key: str, default: str, path: str, warnings: list[DiscoveryWarning]) -> str:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        warnings.append(_warning(f"{key} is {value!r}, not a string; using the kubelet's default {default!r}", path))
        return default
    if value not in _KNOWN_VALUES[key]:
        known = ", ".join(_KNOWN_VALUES[key])
        warnings.append(_warning(f"{key} {value!r} is not one this agent knows ({known}); published as written", path))
    return value


def _reserved_cpus(config: Mapping[str, object], path: str, warnings: list[DiscoveryWarning]) -> tuple[int, ...]:
    value = config.get("reservedSystemCPUs")
    if value is None:
        return ()
    # YAML reads a lone CPU (`reservedSystemCPUs: 0`) as an integer.
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else None
    try:
        if text is None:
            raise ValueError(f"not a CPU list: {value!r}")
        return parse_cpulist(text)
    except ValueError as error:
        warnings.append(_warning(f"reservedSystemCPUs is garbled ({error}); reported as none", path))
        return ()


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _rpc_failure(error: grpc.RpcError, socket_path: str, timeout_s: float) -> PodResourcesError:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else None
    if code is grpc.StatusCode.UNIMPLEMENTED:
        problem = (
            "the kubelet does not implement GetAllocatableResources (Kubernetes before 1.21, or the "
            "KubeletPodResourcesGetAllocatable feature gate is off)"
        )
    elif code is grpc.StatusCode.DEADLINE_EXCEEDED:
        problem = f"no answer within {timeout_s:g} s"
    elif code is grpc.StatusCode.UNAVAILABLE:
        problem = f"the kubelet is not answering ({details or 'unavailable'})"
    else:
        problem = f"{code.name if code else 'failed'}: {details or error}"
    return PodResourcesError(socket_path, problem, code)


def _numa_nodes(topology: api_pb2.TopologyInfo) -> tuple[int, ...]:
    return tuple(int(node.ID) for node in topology.nodes)


def _device_sets(devices: Iterable[api_pb2.ContainerDevices]) -> tuple[DeviceSet, ...]:
    return tuple(
        DeviceSet(device.resource_name, tuple(device.device_ids), _numa_nodes(device.topology)) for device in devices
    )


def _memory_blocks(blocks: Iterable[api_pb2.ContainerMemory]) -> tuple[MemoryBlock, ...]:
    return tuple(MemoryBlock(block.memory_type, int(block.size), _numa_nodes(block.topology)) for block in blocks)


def _pod(pod: api_pb2.PodResources) -> PodResources:
    return PodResources(
        namespace=pod.namespace,
        name=pod.name,
        containers=tuple(
            ContainerResources(
                name=container.name,
                devices=_device_sets(container.devices),
                cpu_ids=tuple(int(cpu) for cpu in container.cpu_ids),
                memory=_memory_blocks(container.memory),
            )
            for container in pod.containers
        ),
    )


def _warning(message: str, path: str | None = None) -> DiscoveryWarning:
    return DiscoveryWarning(SOURCE, message, path)
