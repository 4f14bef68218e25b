"""The NodeResourceTopology object (``topology.node.k8s.io/v1alpha2``), both ways.

Written for the upstream scheduler-plugins NodeResourceTopologyMatch plugin, which reads only
zones of type ``Node`` named ``node-<id>``, their ``costs`` (entries named ``node-<id>``) and the
``available`` of their resources, plus the top-level attributes ``topologyManagerPolicy``,
``topologyManagerScope`` and the pods fingerprint pair. Everything else here is for KubeNexus
readers and is ignored by the plugin: zone attributes, child zones ``gpu-<index>`` (type ``GPU``)
and ``nic-<position>`` (type ``NIC``) whose ``parent`` is their NUMA zone, and the complete model
in the top-level attribute ``kubenexus.io/topology``, which is what ``decode_nrt`` reads back.

The deprecated ``topologyPolicies`` field is left out: the plugin reads the attributes first-class
and logs a deprecation notice for every object that still carries the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubenexus.topology.cpulist import format_cpulist
from kubenexus.topology.json_codec import TopologyDecodeError
from kubenexus.topology.labels import ENCODING_JSON, decode_model, encode_model
from kubenexus.topology.model import Gpu, KubeletSettings, NodeTopology, NumaCell, ResourceAmount

API_VERSION = "topology.node.k8s.io/v1alpha2"
KIND = "NodeResourceTopology"

ZONE_NODE = "Node"
ZONE_GPU = "GPU"
ZONE_NIC = "NIC"

POLICY_ATTRIBUTE = "topologyManagerPolicy"
SCOPE_ATTRIBUTE = "topologyManagerScope"
# Names and methods as the upstream podfingerprint library declares them.
FINGERPRINT_ATTRIBUTE = "nodeTopologyPodsFingerprint"
FINGERPRINT_METHOD_ATTRIBUTE = "nodeTopologyPodsFingerprintMethod"
METHOD_ALL = "all"
METHOD_WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"
FINGERPRINT_METHODS = (METHOD_ALL, METHOD_WITH_EXCLUSIVE_RESOURCES)
MODEL_ATTRIBUTE = "kubenexus.io/topology"
MODEL_ENCODING_ATTRIBUTE = "kubenexus.io/topology-encoding"

CPU = "cpu"
MEMORY = "memory"
GPU_RESOURCE = "nvidia.com/gpu"
_HMAT_CPU_INITIATORS = 1  # access class 1 counts CPU initiators only
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def encode_nrt(topology: NodeTopology, *, node_name: str) -> dict[str, Any]:
    """The complete NRT object for ``node_name``, ready to create or replace.

    ``topology.pods_fingerprint_method`` says which pods ``topology.pods_fingerprint`` was computed
    over (upstream's default, ``all``, when unset); it is published only beside a fingerprint.
    """
    pods_fingerprint_method = topology.pods_fingerprint_method or METHOD_ALL
    if pods_fingerprint_method not in FINGERPRINT_METHODS:
        raise ValueError(f"pods fingerprint method {pods_fingerprint_method!r} is not one of {FINGERPRINT_METHODS}")
    kubelet = topology.kubelet or KubeletSettings()
    attributes = [
        _attribute(POLICY_ATTRIBUTE, kubelet.topology_manager_policy),
        _attribute(SCOPE_ATTRIBUTE, kubelet.topology_manager_scope),
    ]
    if topology.pods_fingerprint is not None:
        attributes.append(_attribute(FINGERPRINT_ATTRIBUTE, topology.pods_fingerprint))
        attributes.append(_attribute(FINGERPRINT_METHOD_ATTRIBUTE, pods_fingerprint_method))
    encoding, model = encode_model(topology)
    attributes.append(_attribute(MODEL_ENCODING_ATTRIBUTE, encoding))
    attributes.append(_attribute(MODEL_ATTRIBUTE, model))
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node_name},
        "zones": _zones(topology),
        "attributes": attributes,
    }


def nrt_name(obj: Any) -> str:
    """The node an NRT object is for (its name), once it is known to be one; ``TopologyDecodeError`` otherwise."""
    if not isinstance(obj, Mapping):
        raise TopologyDecodeError(f"a {KIND} object must be a mapping, found {type(obj).__name__}")
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        raise TopologyDecodeError(
            f"not a {API_VERSION} {KIND}: apiVersion={obj.get('apiVersion')!r}, kind={obj.get('kind')!r}"
        )
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise TopologyDecodeError(f"{KIND}: metadata.name is missing")
    return name


def written_by_kubenexus(obj: Mapping[str, Any]) -> bool:
    """Whether the NRT carries the agent's model: else another wrote it (Node Feature Discovery's
    nfd-topology-updater replaces the attributes, the model with them, whenever it applies its own)."""
    attributes = obj.get("attributes")
    return isinstance(attributes, list) and any(
        isinstance(attribute, Mapping) and attribute.get("name") == MODEL_ATTRIBUTE for attribute in attributes
    )


def nrt_writers(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The field managers that wrote the object's content (``metadata.managedFields``: e.g.
    ``node-feature-discovery-topology-updater``), for messages; () when the server kept none."""
    metadata = obj.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, Mapping) else None
    if not isinstance(entries, list):
        return ()
    managers = (entry.get("manager") for entry in entries if isinstance(entry, Mapping))
    return tuple(dict.fromkeys(m for m in managers if isinstance(m, str) and m))


def decode_nrt(obj: Mapping[str, Any]) -> NodeTopology:
    """The model embedded in an NRT object, refused unless its zones and attributes agree with it."""
    name = nrt_name(obj)
    attributes = attribute_map(obj.get("attributes"), "attributes")
    model = attributes.get(MODEL_ATTRIBUTE)
    if model is None:
        raise TopologyDecodeError(f"{KIND} {name}: attribute {MODEL_ATTRIBUTE} is missing (not written by KubeNexus)")
    encoding = attributes.get(MODEL_ENCODING_ATTRIBUTE, ENCODING_JSON)
    topology = decode_model(encoding, model, where=f"{KIND} {name} attribute {MODEL_ATTRIBUTE}")
    method = attributes.get(FINGERPRINT_METHOD_ATTRIBUTE, METHOD_ALL)
    if method not in FINGERPRINT_METHODS:
        raise TopologyDecodeError(f"{KIND} {name}: attribute {FINGERPRINT_METHOD_ATTRIBUTE}={method!r} is unknown")
    try:
        expected = encode_nrt(topology, node_name=name)
    except ValueError as error:
        raise TopologyDecodeError(f"{KIND} {name}: {error}") from None
    _check_zones(name, obj.get("zones"), expected["zones"])
    _check_attributes(name, attributes, attribute_map(expected["attributes"], "attributes"))
    return topology


def binary_quantity(value: int) -> str:
    """A byte count as Kubernetes prints it: the largest exact binary suffix ("64Gi", "1536", "2Mi")."""
    exponent = 0
    while value and value % 1024 == 0 and exponent < len(_BINARY_SUFFIXES) - 1:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def hugepages_resource(size_kib: int) -> str:
    """The kubelet's resource name for a hugepage size: ``hugepages-2Mi``, ``hugepages-1Gi``."""
    return f"hugepages-{binary_quantity(size_kib * 1024)}"


def cell_resources(topology: NodeTopology, cell: NumaCell) -> tuple[ResourceAmount, ...]:
    """A cell's resources: the kubelet's view when the model has one, else derived from the hardware.

    Without the kubelet's PodResources view nothing is known to be in use, so allocatable and
    available are what the hardware offers: all the cell's CPUs but the kubelet's reserved ones; its
    memory less the hugepage pools (the kubelet offers those as ``hugepages-*``, not as memory); each
    pool's pages (available: the free ones, when the kernel said); its GPUs (allocatable: the healthy
    ones, as the device plugin advertises them). Only ``capacity`` of memory keeps the pools in.
    """
    if topology.zone_resources:
        reported = next((zone for zone in topology.zone_resources if zone.numa_id == cell.id), None)
        return reported.resources if reported is not None else ()
    reserved = set(topology.kubelet.reserved_cpus) if topology.kubelet else set()
    cpus = len(set(cell.cpus) - reserved)
    resources = [ResourceAmount(CPU, len(cell.cpus), cpus, cpus)]
    pools = sorted(cell.hugepages, key=lambda pool: pool.size_kib)
    if cell.memory_bytes is not None:
        pooled = sum(pool.size_kib * 1024 * pool.total for pool in pools)
        memory = cell.memory_bytes - pooled
        resources.append(ResourceAmount(MEMORY, cell.memory_bytes, memory, memory))
    for pool in pools:
        size = pool.size_kib * 1024
        free = pool.total if pool.free is None else pool.free
        resources.append(
            ResourceAmount(hugepages_resource(pool.size_kib), size * pool.total, size * pool.total, size * free)
        )
    if topology.gpus:
        attached = [gpu for gpu in topology.gpus if gpu.numa_node == cell.id]
        healthy = sum(1 for gpu in attached if gpu.healthy)
        resources.append(ResourceAmount(GPU_RESOURCE, len(attached), healthy, healthy))
    return tuple(resources)


def _zones(topology: NodeTopology) -> list[dict[str, Any]]:
    zones = [_node_zone(topology, cell) for cell in topology.numa_cells]
    zones += [_gpu_zone(topology, gpu) for gpu in topology.gpus]
    zones += [_nic_zone(topology, position) for position in range(len(topology.nics))]
    return zones


def _node_zone(topology: NodeTopology, cell: NumaCell) -> dict[str, Any]:
    zone: dict[str, Any] = {"name": _node_zone_name(cell.id), "type": ZONE_NODE}
    distances = topology.distances
    if distances is not None and cell.id in distances.ids:
        row = distances.matrix[distances.ids.index(cell.id)]
        zone["costs"] = [
            {"name": _node_zone_name(target), "value": value} for target, value in zip(distances.ids, row, strict=True)
        ]
    attributes = [_attribute("cpus", format_cpulist(cell.cpus)), _attribute("memory-kind", cell.memory_kind.value)]
    performance = next(
        (
            attribute
            for attribute in topology.memory_attributes
            if attribute.target == cell.id and attribute.access_class == _HMAT_CPU_INITIATORS
        ),
        None,
    )
    if performance is not None:
        attributes += _optional_attributes(
            ("read-bandwidth-mbps", performance.read_bandwidth_mbps),
            ("write-bandwidth-mbps", performance.write_bandwidth_mbps),
            ("read-latency-ns", performance.read_latency_ns),
            ("write-latency-ns", performance.write_latency_ns),
        )
    zone["attributes"] = attributes
    resources = [_resource(amount) for amount in cell_resources(topology, cell)]
    if resources:
        zone["resources"] = resources
    return zone


def _gpu_zone(topology: NodeTopology, gpu: Gpu) -> dict[str, Any]:
    zone: dict[str, Any] = {"name": f"gpu-{gpu.index}", "type": ZONE_GPU}
    if gpu.numa_node is not None:
        zone["parent"] = _node_zone_name(gpu.numa_node)
    zone["attributes"] = [
        _attribute("pci-bus-id", gpu.pci_bus_id),
        _attribute("healthy", "true" if gpu.healthy else "false"),
        *_optional_attributes(
            ("uuid", gpu.uuid),
            ("product", gpu.name),
            ("memory-bytes", gpu.memory_bytes),
            ("compute-capability", gpu.compute_capability),
            ("numa-affinity", format_cpulist(gpu.numa_affinity) or None),
            ("gpu-numa-node", gpu.gpu_numa_node),
            ("health-reason", gpu.health_reason),
            ("fabric-clique", gpu.fabric_clique),
        ),
        _attribute("nvlinks-active", str(sum(1 for link in gpu.nvlinks if link.active))),
        *_link_attributes(topology, f"GPU{gpu.index}"),
    ]
    return zone


def _nic_zone(topology: NodeTopology, position: int) -> dict[str, Any]:
    nic = topology.nics[position]
    zone: dict[str, Any] = {"name": f"nic-{position}", "type": ZONE_NIC}
    device = topology.pci_device(nic.pci_bus_id)
    if device is not None and device.numa_node is not None:
        zone["parent"] = _node_zone_name(device.numa_node)
    zone["attributes"] = [
        _attribute("name", nic.name),
        _attribute("pci-bus-id", nic.pci_bus_id),
        *_optional_attributes(
            ("netdevs", ",".join(nic.netdevs) or None), ("rdma-devices", ",".join(nic.rdma_devices) or None)
        ),
        *_link_attributes(topology, f"NIC{position}"),
    ]
    return zone


def _link_attributes(topology: NodeTopology, device: str) -> list[dict[str, str]]:
    """``link-<peer>`` = ``NV18``, ``PIX``, ... : the row of ``nvidia-smi topo -m`` for ``device``."""
    attributes = []
    for link in topology.links:
        if device in (link.a, link.b):
            peer = link.b if link.a == device else link.a
            attributes.append(_attribute(f"link-{peer}", link.label))
    return attributes


def _node_zone_name(numa_id: int) -> str:
    return f"node-{numa_id}"


def _resource(amount: ResourceAmount) -> dict[str, str]:
    quantity = binary_quantity if amount.name == MEMORY or amount.name.startswith("hugepages-") else str
    return {
        "name": amount.name,
        "capacity": quantity(amount.capacity),
        "allocatable": quantity(amount.allocatable),
        "available": quantity(amount.available),
    }


def _attribute(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def _optional_attributes(*pairs: tuple[str, str | int | None]) -> list[dict[str, str]]:
    return [_attribute(name, str(value)) for name, value in pairs if value is not None]


def attribute_map(attributes: Any, where: str) -> dict[str, str]:
    """An NRT attribute list (``[{name, value}]``) as a map; ``TopologyDecodeError`` for a malformed one or a name
    given twice."""
    if attributes is None:
        return {}
    if not isinstance(attributes, list):
        raise TopologyDecodeError(f"{where}: expected a list")
    result: dict[str, str] = {}
    for position, attribute in enumerate(attributes):
        name = attribute.get("name") if isinstance(attribute, Mapping) else None
        value = attribute.get("value") if isinstance(attribute, Mapping) else None
        if not isinstance(name, str) or not isinstance(value, str):
            raise TopologyDecodeError(f"{where}[{position}]: expected an object with string name and value")
        if name in result:
            raise TopologyDecodeError(f"{where}: attribute {name!r} appears twice")
        result[name] = value
    return result


def _check_zones(node_name: str, zones: Any, expected: list[dict[str, Any]]) -> None:
    if not isinstance(zones, list):
        raise TopologyDecodeError(f"{KIND} {node_name}: zones must be a list")
    names = [zone.get("name") if isinstance(zone, Mapping) else None for zone in zones]
    expected_names = [zone["name"] for zone in expected]
    if names != expected_names:
        raise TopologyDecodeError(
            f"{KIND} {node_name}: zones {names} disagree with the embedded model, which has {expected_names}"
        )
    for zone, wanted in zip(zones, expected, strict=True):
        if zone != wanted:
            raise TopologyDecodeError(f"{KIND} {node_name}: zone {wanted['name']} disagrees with the embedded model")


def _check_attributes(node_name: str, attributes: dict[str, str], expected: dict[str, str]) -> None:
    # The model text itself is not compared: another zlib may compress the same model differently.
    for name in sorted((attributes.keys() | expected.keys()) - {MODEL_ATTRIBUTE}):
        if attributes.get(name) != expected.get(name):
            raise TopologyDecodeError(
                f"{KIND} {node_name}: attribute {name}={attributes.get(name)!r} disagrees with the embedded model, "
                f"which gives {expected.get(name)!r}"
            )
