"""DRA ResourceSlices as a topology source: parsing, pools, node applicability, GPU identity, the join with
the agent's topology, and MIG/partitionable conflicts.

Real captures (../shared/data/dra: EKS H100 nodes, the example driver, MIG fragments) are read in place;
the authored fixtures in tests/dra_fixtures cover what no capture shows (incomplete pools, generations,
malformed objects, counters).

Pools, generations, node selection and shared counters are now also judged by upstream's allocator on
random clusters: tests/upstream/test_oracle_dra.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubenexus.topology.model import Gpu
from placement.core.dra.device_types import (
    Attribute,
    AttributeKind,
    CounterConsumption,
    CounterSet,
    Device,
    NodeSelection,
    PoolRef,
    QualifiedName,
    Quantity,
    ResourceSlice,
    SliceError,
    Version,
)
from placement.core.dra.footprints import conflicts, footprint, overdrawn_counters
from placement.core.dra.gpu_devices import DraGpu, GpuKind, dra_gpus, gpu_identity, normalize_pci_bus_id
from placement.core.dra.join import MatchedBy, infer_topology, join_topology
from placement.core.dra.pools import Pool, PoolDevice, PoolStatus, gather_pools, node_devices
from placement.core.dra.slices import Where, parse_attributes, parse_device, parse_resource_slice
from tests import TESTS
from tests.conftest import SHARED_DATA, require_shared
from tests.machines.node_topologies import nvswitch_node

DRA = SHARED_DATA / "dra"
SLICES = DRA / "resourceslices"
FRAGMENTS = DRA / "resourceslices-fragments"
FIXTURES = TESTS / "dra_fixtures"
MIB = 1 << 20
GIB = 1 << 30
NVIDIA = "gpu.nvidia.com"
EKS_NODE = "ip-10-0-171-111.ec2.internal"
EKS_CAPTURE = SLICES / "nvidia-gpu_h100-80gb-hbm3_eks_ip-10-0-171-111_k8s-v1.35.yaml"
# The capture's devices, in its (unsorted) order, with their bus ids and PCIe roots.
EKS_DEVICES = (
    ("gpu-1", "0000:64:00.0", "pci0000:55"),
    ("gpu-2", "0000:75:00.0", "pci0000:66"),
    ("gpu-3", "0000:86:00.0", "pci0000:77"),
    ("gpu-4", "0000:97:00.0", "pci0000:88"),
    ("gpu-5", "0000:a8:00.0", "pci0000:99"),
    ("gpu-6", "0000:b9:00.0", "pci0000:aa"),
    ("gpu-7", "0000:ca:00.0", "pci0000:bb"),
    ("gpu-0", "0000:53:00.0", "pci0000:44"),
)


def _load(path: Path) -> Any:
    return yaml.safe_load(require_shared(path).read_text())


def _documents(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d is not None]


def _slices(name: str) -> list[ResourceSlice]:
    return [parse_resource_slice(d) for d in _documents(name)]


def _eks_slice() -> ResourceSlice:
    return parse_resource_slice(_load(EKS_CAPTURE))


def _fragment_device(name: str, *, api_version: str = "resource.k8s.io/v1") -> Device:
    (entry,) = _load(FRAGMENTS / name)
    return parse_device(entry, driver=NVIDIA, api_version=api_version, where=Where(name))


def _blog_mig() -> Device:
    """The EKS A100 MIG device of the Pulumi blog capture: no parentUUID, no PCI attributes."""
    blog = _load(FRAGMENTS / "pulumi-blog_a100-sxm4-40gb_mig-1g.5gb_eks_TRIMMED.yaml")
    return parse_device(blog["spec"]["devices"][0], driver=NVIDIA, api_version=blog["apiVersion"], where=Where("blog"))


def _in_pool(*devices: Device, pool: str = "node-x", counters: tuple[CounterSet, ...] = ()) -> list[PoolDevice]:
    item = ResourceSlice(
        name=pool,
        api_version="resource.k8s.io/v1",
        driver=NVIDIA,
        pool=PoolRef(pool, 0, 1),
        node_selection=NodeSelection(node_name=pool),
        shared_counters=counters,
        devices=devices,
    )
    return [PoolDevice(item, d) for d in devices]


# --- parsing the real captures ---------------------------------------------------------------------------


def test_eks_h100_capture_parses_in_published_order_with_exact_memory_and_pci_attributes() -> None:
    item = _eks_slice()
    assert item.driver == NVIDIA
    assert item.pool == PoolRef(EKS_NODE, 1, 1)
    assert item.node_selection == NodeSelection(node_name=EKS_NODE)
    assert [d.name for d in item.devices] == [name for name, _, _ in EKS_DEVICES]
    for device, (_, bus_id, root) in zip(item.devices, EKS_DEVICES, strict=True):
        memory = device.capacity_of(NVIDIA, "memory")
        assert memory is not None
        assert memory.value == 81559 * MIB == 85_520_809_984
        assert memory.text == "81559Mi"
        assert device.attribute("resource.kubernetes.io", "pciBusID") == Attribute(AttributeKind.STRING, bus_id)
        assert device.attribute("resource.kubernetes.io", "pcieRoot") == Attribute(AttributeKind.STRING, root)
        # a bare name is filed under the driver's domain, never under the standard one
        assert device.attribute(NVIDIA, "productName") == Attribute(AttributeKind.STRING, "NVIDIA H100 80GB HBM3")
        assert device.attribute("resource.kubernetes.io", "productName") is None


def test_version_attributes_keep_the_semver_triple_and_the_text() -> None:
    device = _eks_slice().devices[0]
    driver_version = device.attribute(NVIDIA, "driverVersion")
    assert driver_version is not None
    assert driver_version.kind is AttributeKind.VERSION
    assert driver_version.value == Version(580, 105, 8, text="580.105.8")
    assert isinstance(driver_version.value, Version)
    assert driver_version.value.triple == (580, 105, 8)


def test_every_real_capture_parses_and_forms_complete_pools() -> None:
    slices = [parse_resource_slice(_load(p)) for p in sorted(require_shared(SLICES).glob("*.yaml"))]
    pools = gather_pools(slices)
    assert all(p.status is PoolStatus.COMPLETE for p in pools)
    counts = {(p.driver, p.name): len(p.devices) for p in pools}
    assert counts[(NVIDIA, EKS_NODE)] == 8
    assert counts[("compute-domain.nvidia.com", EKS_NODE)] == 2
    assert counts[("gpu.example.com", "dra-example-driver-cluster-worker")] == 8


def test_example_driver_capture_reads_mock_gpus_with_80gi_and_int_index() -> None:
    item = parse_resource_slice(_load(SLICES / "example-driver_gpu.example.com_kind-worker_8-mock-gpus_readme.yaml"))
    assert item.pool.generation == 0
    assert [d.attribute("gpu.example.com", "index") for d in item.devices[:2]] == [
        Attribute(AttributeKind.INT, 0),
        Attribute(AttributeKind.INT, 1),
    ]
    memory = item.devices[0].capacity_of("gpu.example.com", "memory")
    assert memory is not None
    assert memory.value == 80 * GIB


def test_v1alpha3_capture_nests_device_fields_under_basic_and_selects_nodes_by_labels() -> None:
    item = parse_resource_slice(_load(SLICES / "nvidia-imex-channels_static-demo-fixture_v1alpha3_clique-1.yaml"))
    assert len(item.devices) == 10
    assert item.devices[3].attribute(NVIDIA, "channel") == Attribute(AttributeKind.INT, 3)
    clique = {"nvidia.com/gpu.clusteruuid": "0f884867-ba2f-4294-9155-b495ff367eea", "nvidia.com/gpu.cliqueid": "1"}
    pools = gather_pools([item])
    assert len(node_devices(pools, "any-node", clique).devices) == 10
    assert node_devices(pools, "any-node", {**clique, "nvidia.com/gpu.cliqueid": "2"}).devices == ()
    # an IMEX channel is not a GPU, although its driver is gpu.nvidia.com
    assert dra_gpus(pools[0].devices) == ()


def test_api_roundtrip_fixture_with_every_field_is_refused_cleanly_then_read_once_made_consistent() -> None:
    """The API's own fuzz fixture sets every field (both union members, placeholder versions)."""
    obj = _load(DRA / "api-roundtrip-fixtures" / "k8s-1.36.3_resource.k8s.io_v1_ResourceSlice_roundtrip-fuzz.yaml")
    with pytest.raises(SliceError) as caught:
        parse_resource_slice(obj)
    assert caught.value.path == "spec"  # nodeName, allNodes and nodeSelector all set
    spec = obj["spec"]
    for field in ("nodeName", "nodeSelector"):
        del spec[field]
    spec["perDeviceNodeSelection"] = False
    (device,) = spec["devices"]
    for field in ("nodeName", "nodeSelector", "allNodes"):
        del device[field]
    attribute = device["attributes"]["attributesKey"]
    device["attributes"] = {f"{kind}Key": {kind: value} for kind, value in attribute.items()}
    device["attributes"]["versionKey"] = {"version": "1.0.0"}
    device["attributes"]["versionsKey"] = {"versions": ["1.0.0", "2.0.0-alpha"]}
    item = parse_resource_slice(obj)
    assert item.node_selection == NodeSelection(all_nodes=True)
    assert item.pool == PoolRef("nameValue", 2, 3)
    assert item.shared_counters[0].name == "nameValue"
    (parsed,) = item.devices
    kinds = {name.id: a.kind for name, a in parsed.attributes}
    assert kinds == {f"{kind.value}Key": kind for kind in AttributeKind}
    assert parsed.attribute("driverValue", "versionsKey") == Attribute(
        AttributeKind.VERSIONS, (Version(1, 0, 0, text="1.0.0"), Version(2, 0, 0, "alpha", text="2.0.0-alpha"))
    )
    assert parsed.allow_multiple_allocations
    assert parsed.taints[0].effect == "effectValue"
    assert parsed.consumes_counters[0].counter_set == "counterSetValue"
    assert parsed.capacity_of("driverValue", "capacityKey") is not None


# --- the v1beta1 and v1 shapes ---------------------------------------------------------------------------


def test_v1beta1_basic_shape_reads_the_same_as_v1() -> None:
    (flat,) = _slices("shape_v1.yaml")
    (nested,) = _slices("shape_v1beta1.yaml")
    assert nested.api_version == "resource.k8s.io/v1beta1"
    assert nested.devices == flat.devices
    device = flat.devices[0]
    assert device.allow_multiple_allocations
    assert device.attribute("gpu.example.com", "healthy") == Attribute(AttributeKind.BOOL, True)
    assert device.attribute("gpu.example.com", "index") == Attribute(AttributeKind.INT, 0)
    version = device.attribute("gpu.example.com", "driverVersion")
    assert version == Attribute(AttributeKind.VERSION, Version(1, 2, 3, "rc.1", "build.5", "1.2.3-rc.1+build.5"))
    assert device.attribute("resource.kubernetes.io", "numaNode") == Attribute(AttributeKind.INTS, (1, 0))
    assert device.attribute("example.com", "links") == Attribute(AttributeKind.STRINGS, ("nvlink", "pcie"))
    memory = device.capacity_of("gpu.example.com", "memory")
    assert memory is not None
    assert memory.value == 3 * GIB // 2
    assert device.consumes_counters[0].counter_set == "gpu-0-set"
    assert device.consumes_counters[0].counters[0][1].value == GIB
    assert device.taints[0].key == "example.com/unhealthy"
    assert device.taints[0].value == "ecc"


def test_bool_and_int_attributes_stay_distinct() -> None:
    attributes = dict(
        parse_attributes({"a": {"bool": True}, "b": {"int": 1}}, driver="d.example.com", where=Where("inline"))
    )
    assert attributes[QualifiedName("d.example.com", "a")].kind is AttributeKind.BOOL
    assert attributes[QualifiedName("d.example.com", "b")].kind is AttributeKind.INT
    with pytest.raises(SliceError, match=r"\['c'\]\.int: expected int, got True"):
        parse_attributes({"c": {"int": True}}, driver="d.example.com", where=Where("inline"))


# --- malformed objects -----------------------------------------------------------------------------------


@pytest.mark.parametrize("document", _documents("malformed.yaml"), ids=lambda d: d["metadata"]["name"])
def test_malformed_slice_raises_one_error_naming_the_object_and_the_field(document: dict[str, Any]) -> None:
    expected = document["metadata"]["annotations"]["test.kubenexus.io/expect-path"]
    with pytest.raises(SliceError) as caught:
        parse_resource_slice(document)
    assert caught.value.object_name == document["metadata"]["name"]
    assert caught.value.path == expected
    assert str(caught.value).startswith(f"ResourceSlice {document['metadata']['name']!r}: {expected}: ")


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ([], "(object)"),
        ({"apiVersion": "resource.k8s.io/v2", "spec": {}}, "apiVersion"),
        ({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "spec": {}}, "kind"),
        ({"apiVersion": "resource.k8s.io/v1beta1", "spec": {"driver": "d", "devices": [{"name": "x"}]}}, None),
    ],
)
def test_wrong_top_level_shapes_are_refused_with_slice_error(obj: Any, path: str | None) -> None:
    with pytest.raises(SliceError) as caught:
        parse_resource_slice(obj)
    assert caught.value.path == (path or "spec.devices[0].basic")


# --- pools -----------------------------------------------------------------------------------------------


def test_pool_missing_a_slice_is_incomplete_and_contributes_no_devices() -> None:
    (pool,) = gather_pools(_slices("pool_missing_slice.yaml"))
    assert pool.status is PoolStatus.INCOMPLETE
    assert pool.problem == "1 of 2 slices of generation 3 seen"
    assert pool.devices == ()
    result = node_devices([pool], "node-a", {})
    assert result.devices == ()
    assert result.unusable_pools == (pool,)


def test_older_generation_is_ignored() -> None:
    (pool,) = gather_pools(_slices("pool_generations.yaml"))
    assert pool.status is PoolStatus.COMPLETE
    assert pool.generation == 2
    assert [s.name for s in pool.slices] == ["node-a-new"]
    (entry,) = node_devices([pool], "node-a", {}).devices
    assert entry.device.attribute(NVIDIA, "uuid") == Attribute(AttributeKind.STRING, "GPU-new-0")


def test_duplicate_device_names_make_the_pool_invalid() -> None:
    (pool,) = gather_pools(_slices("pool_duplicate_names.yaml"))
    assert pool.status is PoolStatus.INVALID
    assert pool.problem == "device 'gpu-0' is published twice"
    assert pool.devices == ()
    assert node_devices([pool], "node-a", {}).unusable_pools == (pool,)


def test_counters_from_an_undeclared_counter_set_make_the_pool_invalid() -> None:
    (flat,) = _slices("shape_v1.yaml")
    (pool,) = gather_pools([replace(flat, pool=PoolRef("node-a", 4, 1))])
    assert pool.status is PoolStatus.INVALID
    assert pool.problem == "device 'gpu-0' consumes from unknown counter set 'gpu-0-set'"


def test_a_counter_set_declared_in_two_slices_of_a_pool_makes_it_invalid_not_merged() -> None:
    """DRA-lib pools_incubating.go: getAndValidateCounterSets: "duplicate counter set name"; found by the
    upstream oracle (tests/upstream/test_oracle_dra.py), where the sets used to be merged and the devices kept."""
    counters = CounterSet("gpu-0-set", (("memory", Quantity(8, "8")),))
    consumer = Device("gpu-0", consumes_counters=(CounterConsumption("gpu-0-set", (("memory", Quantity(8, "8")),)),))
    slices = [
        ResourceSlice(
            name=f"node-a-{part}",
            api_version="resource.k8s.io/v1",
            driver=NVIDIA,
            pool=PoolRef("node-a", 1, 3),
            node_selection=NodeSelection(node_name="node-a"),
            shared_counters=shared,
            devices=devices,
        )
        for part, shared, devices in (
            ("devices", (), (consumer,)),
            ("counters", (counters,), ()),
            ("again", (counters,), ()),
        )
    ]
    (pool,) = gather_pools(slices)
    assert pool.status is PoolStatus.INVALID
    assert pool.problem == "counter set 'gpu-0-set' is declared twice"
    assert node_devices([pool], "node-a", {}).devices == ()


# --- which devices apply to a node -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "labels", "expected"),
    [
        ("node-a", {}, ["gpu-0", "channel-0", "region-a", "region-all"]),
        ("node-b", {"example.com/rack": "r1"}, ["channel-0", "switch-0", "region-b", "region-all"]),
        ("node-c", {"example.com/rack": "r2"}, ["channel-0", "switch-0", "region-all"]),  # by matchFields
        ("node-d", {"example.com/rack": "r2"}, ["channel-0", "region-all"]),
    ],
)
def test_node_applicability_by_name_all_nodes_selector_and_per_device(
    node: str, labels: dict[str, str], expected: list[str]
) -> None:
    slices = _slices("node_selection.yaml")
    by_position = {s.pool.name: i for i, s in enumerate(slices)}
    result = node_devices(gather_pools(slices), node, labels)
    found = sorted(result.devices, key=lambda e: by_position[e.slice.pool.name])
    assert [e.device.name for e in found] == expected
    assert result.unusable_pools == ()


# --- GPU identity ----------------------------------------------------------------------------------------


def test_eks_gpus_identity() -> None:
    pools = gather_pools([_eks_slice()])
    gpus = dra_gpus(node_devices(pools, EKS_NODE, {}).devices)
    assert [(g.ref.device, g.pci_bus_id, g.pcie_root) for g in gpus] == list(EKS_DEVICES)
    assert {g.kind for g in gpus} == {GpuKind.GPU}
    assert gpus[-1].uuid == "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005"
    assert gpus[-1].product_name == "NVIDIA H100 80GB HBM3"
    assert gpus[-1].memory_bytes == 81559 * MIB
    assert gpus[-1].numa_node is None  # not published by this driver version: unknown, not 0
    # another driver's devices are not GPUs unless asked for
    assert dra_gpus(node_devices(pools, EKS_NODE, {}).devices, drivers=("gpu.example.com",)) == ()


def test_gpu_identity_across_driver_generations() -> None:
    (pool,) = gather_pools(_slices("gpu_attributes.yaml"))
    old, scalar_numa, list_numa, vfio = dra_gpus(pool.devices)
    assert old.kind is GpuKind.GPU
    assert old.pci_bus_id == "0000:3b:00.0"  # the driver-local pcieBusID, lower-cased
    assert (old.index, old.minor) == (0, 0)
    assert old.numa_node is None
    assert scalar_numa.numa_nodes == (1,)
    assert list_numa.numa_node == 1
    assert list_numa.numa_nodes == (1, 0)
    assert vfio.kind is GpuKind.VFIO
    assert vfio.numa_node == 0
    assert vfio.memory_bytes == 40 * GIB


def test_real_pcie_bus_id_capture_of_an_older_driver() -> None:
    attributes = parse_attributes(
        json.loads(require_shared(FRAGMENTS / "pr717_a100-pcie-40gb_device-attributes_jq-output.json").read_text()),
        driver=NVIDIA,
        where=Where("pr717"),
    )
    (entry,) = _in_pool(Device(name="gpu-0", attributes=attributes))
    gpu = gpu_identity(entry)
    assert gpu is not None
    assert gpu.pci_bus_id == "0000:3b:00.0"
    assert gpu.pcie_root == "pci0000:3a"


def test_mig_fragments_are_recognised_with_their_parent() -> None:
    text = require_shared(
        FRAGMENTS / "sozercan-readme_a100-80gb-pcie_mig-1g.10gb_kind_v1alpha3_ONE-DEVICE-then-truncated.txt"
    )
    (item,) = yaml.safe_load(text.read_text())["items"]
    old_driver_mig = parse_device(
        item["spec"]["devices"][0], driver=NVIDIA, api_version=item["apiVersion"], where=Where("sozercan")
    )
    illustrative_mig = _fragment_device("nvidia-driver-docs_ILLUSTRATIVE_mig-device-entry.yaml")
    unparented_mig = _blog_mig()
    gpus = dra_gpus(_in_pool(old_driver_mig, illustrative_mig, unparented_mig))
    assert [g.kind for g in gpus] == [GpuKind.MIG] * 3
    old, illustrative, unparented = gpus
    assert old.parent_uuid == "GPU-08ca734a-eacd-b37e-189a-ba50997e441d"
    assert old.profile == "1g.10gb"
    assert old.index == 6
    assert old.memory_bytes == 9728 * MIB
    assert illustrative.parent_uuid == "GPU-2fa81118-5a5f-aa66-7660-471eed407181"
    assert illustrative.pci_bus_id == "0000:65:00.0"
    assert illustrative.memory_bytes == 4864 * MIB
    assert unparented.parent_uuid is None
    assert unparented.parent_device == "gpu-0"  # from the device name gpu-0-mig-19-2-1


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("0000:53:00.0", "0000:53:00.0"),
        ("00000000:53:00.0", "0000:53:00.0"),  # NVML's 8-digit domain
        ("0000:CA:00.0", "0000:ca:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("nvidia-smi:GPU0", None),
    ],
)
def test_pci_bus_ids_are_normalized(text: str, normalized: str | None) -> None:
    assert normalize_pci_bus_id(text) == normalized


# --- the join with the agent's topology ------------------------------------------------------------------


def _agent_gpus_for_eks(gpus: tuple[DraGpu, ...]) -> tuple[Gpu, ...]:
    """nvswitch_node()'s GPUs (the same p5 machine class) with the bus ids NVML gives for the capture's GPUs."""
    by_name = {g.ref.device: g for g in gpus}
    agent = []
    for gpu in nvswitch_node().gpus:
        dra = by_name[f"gpu-{gpu.index}"]
        assert dra.pci_bus_id is not None
        agent.append(replace(gpu, pci_bus_id=f"0000{dra.pci_bus_id.upper()}", uuid=dra.uuid))
    return tuple(agent)


def test_join_maps_every_eks_gpu_by_pci_bus_id() -> None:
    gpus = dra_gpus(gather_pools([_eks_slice()])[0].devices)
    topology = replace(nvswitch_node(), gpus=_agent_gpus_for_eks(gpus))
    join = join_topology(gpus, topology)
    assert len(join.matches) == 8
    assert {m.matched_by for m in join.matches} == {MatchedBy.PCI_BUS_ID}
    assert all(m.gpu.uuid == m.device.uuid for m in join.matches)
    gpu_0 = join.gpu_for("gpu-0")
    assert gpu_0 is not None
    assert gpu_0.index == 0
    assert gpu_0.numa_node == 0
    assert join.unmatched_devices == ()
    assert join.unmatched_gpus == ()


def test_join_falls_back_to_uuid_and_reports_both_sides_unmatched() -> None:
    gpus = dra_gpus(gather_pools([_eks_slice()])[0].devices)
    agent = list(_agent_gpus_for_eks(gpus))
    agent[3] = replace(agent[3], pci_bus_id="nvidia-smi:GPU3")  # imported from nvidia-smi: no bus id, a UUID
    agent[5] = replace(agent[5], pci_bus_id="0000:f0:00.0", uuid="GPU-not-published")  # a GPU the driver hides
    join = join_topology(gpus, replace(nvswitch_node(), gpus=tuple(agent)))
    by_device = {m.device.ref.device: m for m in join.matches}
    assert by_device["gpu-3"].matched_by is MatchedBy.UUID
    assert by_device["gpu-3"].gpu.index == 3
    assert [d.ref.device for d in join.unmatched_devices] == ["gpu-5"]
    assert [g.index for g in join.unmatched_gpus] == [5]


def test_join_maps_mig_devices_to_their_parent_gpu() -> None:
    (pool,) = gather_pools(_slices("dynamic_mig.yaml"))
    gpus = dra_gpus(pool.devices)
    parent = replace(
        nvswitch_node().gpus[0], pci_bus_id="0000:99:00.0", uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000"
    )
    join = join_topology(gpus, replace(nvswitch_node(), gpus=(parent,)))
    assert [(m.device.ref.device, m.matched_by) for m in join.matches] == [
        ("gpu-0", MatchedBy.UUID),
        ("gpu-0-mig-1g10gb-19-0", MatchedBy.PARENT_UUID),
        ("gpu-0-mig-1g10gb-19-1", MatchedBy.PARENT_UUID),
        ("gpu-0-mig-2g20gb-14-0", MatchedBy.PARENT_UUID),
    ]
    assert join.unmatched_gpus == ()


def test_without_an_agent_report_the_topology_is_inferred_from_pcie_root_and_numa_node() -> None:
    (pool,) = gather_pools(_slices("gpu_attributes.yaml"))
    inferred = infer_topology("node-c", dra_gpus(pool.devices))
    assert [(g.pcie_root, g.devices, g.numa_node) for g in inferred.groups] == [
        ("pci0000:3a", ("gpu-0",), None),
        ("pci0000:10", ("gpu-1", "gpu-2"), 1),
        (None, ("gpu-3",), 0),
    ]
    assert inferred.numa_nodes == ((0, ("gpu-3",)), (1, ("gpu-1", "gpu-2")))
    assert inferred.same_pcie_root("gpu-1", "gpu-2")
    assert not inferred.same_pcie_root("gpu-0", "gpu-1")
    assert not inferred.same_pcie_root("gpu-3", "gpu-3")  # no published root: unknown
    assert "inferred from the gpu.nvidia.com driver's attributes" in inferred.note
    assert "no KubeNexus agent report" in inferred.note


def test_inferred_topology_of_eks_node_puts_every_gpu_under_its_own_root() -> None:
    inferred = infer_topology(EKS_NODE, dra_gpus(gather_pools([_eks_slice()])[0].devices))
    assert len(inferred.groups) == 8
    assert inferred.numa_nodes == ()
    assert "NUMA nodes not published" in inferred.note


# --- MIG and partitionable devices -----------------------------------------------------------------------


def _footprints(pool: Pool) -> dict[str, Any]:
    return {e.device.name: footprint(e, pool.counter_sets) for e in pool.devices}


def test_dynamic_mig_conflicts_follow_the_shared_counters_and_the_parent() -> None:
    (pool,) = gather_pools(_slices("dynamic_mig.yaml"))
    assert pool.status is PoolStatus.COMPLETE
    prints = _footprints(pool)
    full, small_0, small_1, double = (prints[n] for n in prints)
    assert conflicts(full, small_0)
    assert conflicts(small_0, full)
    assert not conflicts(small_0, small_1)  # two 1g instances on different memory slices coexist
    assert conflicts(small_0, double)  # both need memorySlice0
    assert conflicts(small_1, double)
    assert conflicts(small_0, small_0)  # a device is not shareable with itself unless it says so
    assert overdrawn_counters((small_0, double))[0].counter == "memorySlice0"
    assert overdrawn_counters((small_0, small_1)) == ()
    assert "gpu:uuid:GPU-aaaaaaaa-0000-0000-0000-000000000000" in full.physical_units
    assert "counter:gpu.nvidia.com/node-a/gpu-0-counter-set/memorySlice0" in small_0.physical_units
    assert "part-of-gpu:uuid:GPU-aaaaaaaa-0000-0000-0000-000000000000" in small_0.physical_units


def test_static_mig_conflicts_follow_memory_slices_of_the_same_parent() -> None:
    (pool,) = gather_pools(_slices("static_mig.yaml"))
    prints = _footprints(pool)
    small_0, small_1, double, other_parent = (prints[n] for n in prints)
    assert not conflicts(small_0, small_1)
    assert conflicts(small_0, double)
    assert conflicts(double, small_1)
    assert not conflicts(small_0, other_parent)  # memorySlice0 of another GPU
    assert "gpu:uuid:GPU-bbbbbbbb-0000-0000-0000-000000000000/memorySlice0" in small_0.physical_units


def test_full_gpu_conflicts_with_mig_devices_carved_from_it_in_real_fragments() -> None:
    full = _fragment_device("nvidia-driver-docs_ILLUSTRATIVE_full-gpu-device-entry.yaml")
    mig = _fragment_device("nvidia-driver-docs_ILLUSTRATIVE_mig-device-entry.yaml")
    unparented = _blog_mig()
    entries = _in_pool(full, mig, unparented)
    full_print, mig_print, unparented_print = (footprint(e, {}) for e in entries)
    assert conflicts(full_print, mig_print)  # parentUUID is the full GPU's uuid
    assert conflicts(unparented_print, full_print)  # no parentUUID: the name gpu-0-mig-... names the parent
    other_pool = footprint(_in_pool(unparented, pool="node-y")[0], {})
    assert not conflicts(other_pool, full_print)  # gpu-0 of another node is another GPU
    assert not conflicts(mig_print, unparented_print)  # two MIG instances, no shared memory slice known


def test_shareable_device_may_be_allocated_twice() -> None:
    (flat,) = _slices("shape_v1.yaml")
    counters = (CounterSet("gpu-0-set", (("memory", flat.devices[0].consumes_counters[0].counters[0][1]),)),)
    (entry,) = _in_pool(flat.devices[0], counters=counters)
    shared = footprint(entry, {c.name: c for c in counters})
    assert shared.shareable
    assert not conflicts(replace(shared, counters=()), replace(shared, counters=()))
    assert conflicts(shared, shared)  # but not beyond its counters: 1Gi + 1Gi of a 1Gi counter
