"""NodeResourceTopology objects: valid against the upstream CRD, shaped as the upstream plugin reads them, lossless."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from kubenexus.topology.json_codec import TopologyDecodeError
from kubenexus.topology.labels import ENCODING_GZIP_BASE64, ENCODING_JSON
from kubenexus.topology.model import (
    DeviceLink,
    DiscoveryWarning,
    Gpu,
    KubeletSettings,
    NodeTopology,
    PathKind,
    ResourceAmount,
    ZoneResources,
)
from kubenexus.topology.nrt import (
    API_VERSION,
    FINGERPRINT_ATTRIBUTE,
    FINGERPRINT_METHOD_ATTRIBUTE,
    KIND,
    METHOD_WITH_EXCLUSIVE_RESOURCES,
    MODEL_ATTRIBUTE,
    MODEL_ENCODING_ATTRIBUTE,
    POLICY_ATTRIBUTE,
    SCOPE_ATTRIBUTE,
    binary_quantity,
    decode_nrt,
    encode_nrt,
    hugepages_resource,
)
from tests import REPO
from tests.discovered_topologies import FIXTURES
from tests.machines.node_topologies import GIB, two_socket

CRD = REPO / "deploy" / "crd" / "noderesourcetopologies.yaml"
FINGERPRINT = "pfp0v001a1b2c3d4e5f60718"


def crd() -> dict[str, Any]:
    (document,) = [d for d in yaml.safe_load_all(Path(CRD).read_text()) if d]
    assert isinstance(document, dict)
    return document


@cache
def validator() -> jsonschema.Draft4Validator:
    """The v1alpha2 schema, with unknown fields refused: the API server would silently prune them."""
    (version,) = [v for v in crd()["spec"]["versions"] if v["name"] == "v1alpha2"]
    return jsonschema.Draft4Validator(_no_unknown_fields(version["schema"]["openAPIV3Schema"]))


def _no_unknown_fields(schema: Any) -> Any:
    if isinstance(schema, dict):
        strict = {key: _no_unknown_fields(value) for key, value in schema.items()}
        if "properties" in schema:
            strict["additionalProperties"] = False
        return strict
    if isinstance(schema, list):
        return [_no_unknown_fields(item) for item in schema]
    return schema


def plugin_view(obj: dict[str, Any]) -> dict[int, tuple[dict[str, str], dict[int, int]]]:
    """What NodeResourceTopologyMatch's createNUMANodeList takes from the object: per NUMA id, the
    ``available`` of each resource and the costs, from zones of type Node named ``node-<id>``."""
    view = {}
    for zone in obj["zones"]:
        if zone["type"] != "Node":
            continue
        match = re.fullmatch(r"node-(\d+)", zone["name"])  # numanode.NameToID
        assert match is not None, zone["name"]
        numa_id = int(match[1])
        available = {resource["name"]: resource["available"] for resource in zone.get("resources", [])}
        costs = {int(cost["name"].removeprefix("node-")): cost["value"] for cost in zone.get("costs", [])}
        view[numa_id] = (available, costs)
    return view


def top_attributes(obj: dict[str, Any]) -> dict[str, str]:
    return {attribute["name"]: attribute["value"] for attribute in obj["attributes"]}


def test_the_crd_is_the_upstream_cluster_scoped_v1alpha2() -> None:
    document = crd()

    assert (document["apiVersion"], document["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert document["metadata"]["name"] == "noderesourcetopologies.topology.node.k8s.io"
    spec = document["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == ("topology.node.k8s.io", "Cluster", KIND)
    assert {v["name"]: (v["served"], v["storage"]) for v in spec["versions"]} == {
        "v1alpha1": (True, False),
        "v1alpha2": (True, True),
    }
    assert f"{spec['group']}/v1alpha2" == API_VERSION


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fixture_validates_reads_as_the_plugin_expects_and_round_trips(
    fixture: str, built: Callable[[str], NodeTopology]
) -> None:
    topology = built(fixture)

    obj = encode_nrt(topology, node_name="gpu-node-7")

    validator().validate(obj)
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]) == (API_VERSION, KIND, {"name": "gpu-node-7"})
    view = plugin_view(obj)
    assert list(view) == [cell.id for cell in topology.numa_cells]
    distances = topology.distances
    for cell in topology.numa_cells:
        available, costs = view[cell.id]
        assert available["cpu"] == str(len(cell.cpus))
        assert costs == ({t: distances.get(cell.id, t) for t in distances.ids} if distances is not None else {})
    assert [zone["name"] for zone in obj["zones"] if zone["type"] == "GPU"] == [f"gpu-{g.index}" for g in topology.gpus]
    assert top_attributes(obj)[POLICY_ATTRIBUTE] == "none"
    assert top_attributes(obj)[SCOPE_ATTRIBUTE] == "container"
    assert decode_nrt(json.loads(json.dumps(obj))) == topology  # through the API's JSON
    assert encode_nrt(topology, node_name="gpu-node-7") == obj  # deterministic: an unchanged node writes nothing


def test_node_zones_of_a_two_socket_machine_without_the_kubelet() -> None:
    gpus = (
        Gpu(0, "0000:18:00.0", numa_node=0),
        Gpu(1, "0000:19:00.0", numa_node=0, healthy=False, health_reason="GPU is lost"),
        Gpu(2, "0000:98:00.0", numa_node=None),  # no NUMA affinity: counted in no zone
    )
    topology = two_socket(gpus=gpus, kubelet=KubeletSettings(reserved_cpus=(0, 32, 16)))

    zones = encode_nrt(topology, node_name="n")["zones"]

    assert zones[0] == {
        "name": "node-0",
        "type": "Node",
        "costs": [{"name": "node-0", "value": 10}, {"name": "node-1", "value": 21}],
        "attributes": [
            {"name": "cpus", "value": "0-15,32-47"},
            {"name": "memory-kind", "value": "unknown"},
            {"name": "read-bandwidth-mbps", "value": "131072"},
            {"name": "read-latency-ns", "value": "90"},
        ],
        "resources": [
            {"name": "cpu", "capacity": "32", "allocatable": "30", "available": "30"},
            # 512 2 MiB pages (1 GiB) and 4 1 GiB pages are offered as hugepages, not as memory
            {"name": "memory", "capacity": "64Gi", "allocatable": "59Gi", "available": "59Gi"},
            {"name": "hugepages-2Mi", "capacity": "1Gi", "allocatable": "1Gi", "available": "1000Mi"},
            {"name": "hugepages-1Gi", "capacity": "4Gi", "allocatable": "4Gi", "available": "4Gi"},
            {"name": "nvidia.com/gpu", "capacity": "2", "allocatable": "1", "available": "1"},
        ],
    }
    assert zones[1]["resources"] == [
        {"name": "cpu", "capacity": "32", "allocatable": "31", "available": "31"},
        {"name": "memory", "capacity": "64Gi", "allocatable": "64Gi", "available": "64Gi"},
        {"name": "nvidia.com/gpu", "capacity": "0", "allocatable": "0", "available": "0"},
    ]
    assert [zone["name"] for zone in zones] == ["node-0", "node-1", "gpu-0", "gpu-1", "gpu-2"]
    assert "parent" not in zones[4]


def test_the_kubelets_zone_resources_replace_the_derived_ones() -> None:
    reported = (
        ZoneResources(0, (ResourceAmount("cpu", 32, 30, 12), ResourceAmount("memory", 64 * GIB, 60 * GIB, 1 << 20))),
        ZoneResources(1, (ResourceAmount("example.com/nic", 4, 4, 3),)),
    )
    topology = two_socket(zone_resources=reported)

    view = plugin_view(encode_nrt(topology, node_name="n"))

    assert view[0][0] == {"cpu": "12", "memory": "1Mi"}
    assert view[1][0] == {"example.com/nic": "3"}
    assert decode_nrt(encode_nrt(topology, node_name="n")) == topology


def test_a_cell_the_kubelet_does_not_report_has_no_resources() -> None:
    topology = two_socket(zone_resources=(ZoneResources(0, (ResourceAmount("cpu", 32, 32, 32),)),))

    (_, node_1, *_) = encode_nrt(topology, node_name="n")["zones"]

    assert "resources" not in node_1
    validator().validate(encode_nrt(topology, node_name="n"))


def test_top_level_attributes_from_the_kubelet_and_the_fingerprint() -> None:
    topology = two_socket(
        kubelet=KubeletSettings(topology_manager_policy="single-numa-node", topology_manager_scope="pod"),
        pods_fingerprint=FINGERPRINT,
        pods_fingerprint_method=METHOD_WITH_EXCLUSIVE_RESOURCES,
    )

    obj = encode_nrt(topology, node_name="n")

    attributes = top_attributes(obj)
    assert [attribute["name"] for attribute in obj["attributes"]] == [
        POLICY_ATTRIBUTE,
        SCOPE_ATTRIBUTE,
        FINGERPRINT_ATTRIBUTE,
        FINGERPRINT_METHOD_ATTRIBUTE,
        MODEL_ENCODING_ATTRIBUTE,
        MODEL_ATTRIBUTE,
    ]
    assert attributes[POLICY_ATTRIBUTE] == "single-numa-node"
    assert attributes[SCOPE_ATTRIBUTE] == "pod"
    assert attributes[FINGERPRINT_ATTRIBUTE] == FINGERPRINT
    assert attributes[FINGERPRINT_METHOD_ATTRIBUTE] == "with-exclusive-resources"
    assert attributes[MODEL_ENCODING_ATTRIBUTE] == ENCODING_JSON
    assert "topologyPolicies" not in obj
    assert decode_nrt(obj) == topology


def test_no_fingerprint_attributes_without_a_fingerprint() -> None:
    attributes = top_attributes(encode_nrt(two_socket(), node_name="n"))

    assert FINGERPRINT_ATTRIBUTE not in attributes
    assert FINGERPRINT_METHOD_ATTRIBUTE not in attributes


def test_an_unknown_fingerprint_method_is_refused() -> None:
    with pytest.raises(ValueError, match="'sometimes' is not one of"):
        encode_nrt(two_socket(pods_fingerprint="pfp0v001", pods_fingerprint_method="sometimes"), node_name="n")


def test_gpu_and_nic_child_zones(built: Callable[[str], NodeTopology]) -> None:
    obj = encode_nrt(built("nvml/hgx_h100"), node_name="n")
    zones = {zone["name"]: zone for zone in obj["zones"]}

    gpu0 = zones["gpu-0"]
    assert (gpu0["type"], gpu0["parent"]) == ("GPU", "node-0")
    attributes = {attribute["name"]: attribute["value"] for attribute in gpu0["attributes"]}
    assert attributes["pci-bus-id"] == "0000:18:00.0"
    assert attributes["product"] == "NVIDIA H100 80GB HBM3"
    assert attributes["memory-bytes"] == str(81559 << 20)
    assert attributes["nvlinks-active"] == "18"
    assert attributes["link-GPU7"] == "NV18"
    assert attributes["link-NIC0"] == "PIX"  # its own ConnectX-7, behind the same PCIe switch
    assert "resources" not in gpu0
    assert "costs" not in gpu0
    nic0 = zones["nic-0"]
    assert (nic0["type"], nic0["parent"]) == ("NIC", "node-0")
    assert {"name": "rdma-devices", "value": "mlx5_0"} in nic0["attributes"]
    assert {"name": "link-GPU0", "value": "PIX"} in nic0["attributes"]
    assert {zone["type"] for zone in obj["zones"]} == {"Node", "GPU", "NIC"}


def test_a_large_model_is_compressed_in_the_object() -> None:
    topology = two_socket(warnings=tuple(DiscoveryWarning("test", f"garbled file {i % 7}") for i in range(8000)))

    obj = encode_nrt(topology, node_name="n")

    assert top_attributes(obj)[MODEL_ENCODING_ATTRIBUTE] == ENCODING_GZIP_BASE64
    validator().validate(obj)
    assert decode_nrt(obj) == topology


@pytest.mark.parametrize(
    ("value", "quantity"),
    [
        (0, "0"),
        (1536, "1536"),
        (2 << 20, "2Mi"),
        (64 * GIB, "64Gi"),
        (59 * GIB + (512 << 20), "60928Mi"),
        (1 << 70, "1024Ei"),
    ],
)
def test_binary_quantities(value: int, quantity: str) -> None:
    assert binary_quantity(value) == quantity


def test_hugepage_resource_names() -> None:
    assert [hugepages_resource(kib) for kib in (64, 2048, 32768, 1048576, 16777216)] == [
        "hugepages-64Ki",
        "hugepages-2Mi",
        "hugepages-32Mi",
        "hugepages-1Gi",
        "hugepages-16Gi",
    ]


def _published() -> dict[str, Any]:
    topology = two_socket(
        gpus=(Gpu(0, "0000:18:00.0", numa_node=0), Gpu(1, "0000:19:00.0", numa_node=1)),
        links=(DeviceLink("GPU0", "GPU1", PathKind.SYS),),
        pods_fingerprint=FINGERPRINT,
    )
    return encode_nrt(topology, node_name="n")


def _set_attribute(obj: dict[str, Any], name: str, value: str) -> None:
    (attribute,) = [a for a in obj["attributes"] if a["name"] == name]
    attribute["value"] = value


def _tamper(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    obj = copy.deepcopy(_published())
    change(obj)
    return obj


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "must be a mapping"),
        (
            _tamper(lambda o: o.update(apiVersion="topology.node.k8s.io/v1alpha1")),
            "not a topology.node.k8s.io/v1alpha2",
        ),
        (_tamper(lambda o: o.update(kind="Node")), "kind='Node'"),
        (_tamper(lambda o: o.pop("metadata")), "metadata.name is missing"),
        (_tamper(lambda o: o.update(attributes={})), "attributes: expected a list"),
        (_tamper(lambda o: o["attributes"].append({"name": "x"})), r"attributes\[6\]: expected an object"),
        (_tamper(lambda o: o["attributes"].append(dict(o["attributes"][0]))), "'topologyManagerPolicy' appears twice"),
        (_tamper(lambda o: o["attributes"].pop()), f"attribute {MODEL_ATTRIBUTE} is missing"),
        (_tamper(lambda o: _set_attribute(o, MODEL_ATTRIBUTE, "{")), f"attribute {MODEL_ATTRIBUTE}: not JSON"),
        (_tamper(lambda o: _set_attribute(o, MODEL_ENCODING_ATTRIBUTE, "zstd")), "unknown encoding 'zstd'"),
        (_tamper(lambda o: _set_attribute(o, FINGERPRINT_METHOD_ATTRIBUTE, "some")), "'some' is unknown"),
        (_tamper(lambda o: _set_attribute(o, POLICY_ATTRIBUTE, "restricted")), "topologyManagerPolicy='restricted'"),
        (_tamper(lambda o: _set_attribute(o, FINGERPRINT_ATTRIBUTE, "pfp0v001ff")), "nodeTopologyPodsFingerprint="),
        (_tamper(lambda o: o["attributes"].insert(0, {"name": "extra", "value": "1"})), "attribute extra='1'"),
        (_tamper(lambda o: o.update(zones="node-0")), "zones must be a list"),
        (_tamper(lambda o: o["zones"].pop(1)), r"zones \['node-0', 'gpu-0', 'gpu-1'\] disagree"),
        (_tamper(lambda o: o["zones"][1]["costs"][0].update(value=12)), "zone node-1 disagrees"),
        (_tamper(lambda o: o["zones"][0]["resources"][0].update(available="3")), "zone node-0 disagrees"),
        (_tamper(lambda o: o["zones"][3].update(parent="node-0")), "zone gpu-1 disagrees"),
    ],
)
def test_garbage_and_tampered_objects_are_refused(obj: Any, message: str) -> None:
    with pytest.raises(TopologyDecodeError, match=message):
        decode_nrt(obj)


def test_the_untampered_object_decodes() -> None:
    assert decode_nrt(_published()).pods_fingerprint == FINGERPRINT
