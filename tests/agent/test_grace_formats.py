"""The published formats carry a Grace GPU's CPU-side node, its NUMA affinity and its own memory node apart.

Topologies come from the authored GH200 captures in tests/machines/captures and an authored matrix whose
NUMA Affinity names several nodes; an x86 GPU keeps every new field empty.
"""

from __future__ import annotations

import json
from typing import Any

from kubenexus.topology.json_codec import dumps, loads, to_dict
from kubenexus.topology.labels import decode_node_metadata, encode_node_metadata
from kubenexus.topology.model import Gpu, MemoryKind, NodeTopology
from kubenexus.topology.nrt import decode_nrt, encode_nrt
from kubenexus.topology.topo_matrix import parse_topo_matrix
from tests import TESTS

CAPTURES = TESTS / "machines" / "captures"
MULTI_NODE = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tSYS\t0-63\t0-1\t\tN/A\n"
    "GPU1\tSYS\t X \t64-127\t2,4\t\t2\n"
)


def _gh200(name: str = "gh200_1gpu") -> NodeTopology:
    return parse_topo_matrix((CAPTURES / f"{name}_nvidia-smi_topo_m.txt").read_text())


def _gpu_zone_attributes(obj: dict[str, Any], index: int) -> dict[str, str]:
    zone = next(zone for zone in obj["zones"] if zone["name"] == f"gpu-{index}")
    return {attribute["name"]: attribute["value"] for attribute in zone["attributes"]}


def test_json_round_trip_keeps_the_new_fields() -> None:
    for topology in (_gh200(), _gh200("gh200_2gpu"), parse_topo_matrix(MULTI_NODE)):
        document = json.loads(dumps(topology))
        assert loads(dumps(topology)) == topology
        assert [gpu["gpu_numa_node"] for gpu in document["gpus"]] == [gpu.gpu_numa_node for gpu in topology.gpus]
    document = json.loads(dumps(parse_topo_matrix(MULTI_NODE)))
    assert [gpu["numa_affinity"] for gpu in document["gpus"]] == [[0, 1], [2, 4]]
    assert [gpu["numa_node"] for gpu in document["gpus"]] == [0, 4]


def test_a_document_from_an_agent_before_numa_affinity_still_decodes() -> None:
    topology = parse_topo_matrix(MULTI_NODE)
    document = to_dict(topology)
    for gpu in document["gpus"]:
        del gpu["numa_affinity"]
    decoded = loads(json.dumps(document))
    assert [gpu.numa_affinity for gpu in decoded.gpus] == [(), ()]
    assert [(gpu.numa_node, gpu.gpu_numa_node) for gpu in decoded.gpus] == [(0, None), (4, 2)]


def test_labels_name_the_grace_node_and_the_model_keeps_the_memory_node() -> None:
    for topology, grace_nodes, memory_node in ((_gh200(), ["0"], 1), (_gh200("gh200_2gpu"), ["0", "1"], 2)):
        metadata = encode_node_metadata(topology)
        labels = metadata.labels
        assert [labels[f"gpu.kubenexus.io/gpu{i}-numa"] for i in range(len(grace_nodes))] == grace_nodes
        assert labels[f"numa.kubenexus.io/node-{memory_node}-cpus"] == ""  # a memory-only cell
        assert decode_node_metadata(labels, metadata.annotations) == topology


def test_nrt_gpu_zone_hangs_off_the_grace_and_names_its_memory_node() -> None:
    topology = _gh200()
    obj = encode_nrt(topology, node_name="gh200")
    gpu_zone = next(zone for zone in obj["zones"] if zone["name"] == "gpu-0")
    assert gpu_zone["parent"] == "node-0"
    assert _gpu_zone_attributes(obj, 0)["gpu-numa-node"] == "1"
    assert "numa-affinity" not in _gpu_zone_attributes(obj, 0)
    memory_zone = next(zone for zone in obj["zones"] if zone["name"] == "node-1")
    assert {"name": "memory-kind", "value": MemoryKind.GPU.value} in memory_zone["attributes"]
    assert {"name": "cpus", "value": ""} in memory_zone["attributes"]
    resources = {resource["name"]: resource["capacity"] for resource in memory_zone["resources"]}
    assert (resources["cpu"], resources["nvidia.com/gpu"]) == ("0", "0")
    assert decode_nrt(obj) == topology


def test_nrt_names_a_multi_node_affinity() -> None:
    topology = parse_topo_matrix(MULTI_NODE)
    obj = encode_nrt(topology, node_name="multi")
    assert _gpu_zone_attributes(obj, 0)["numa-affinity"] == "0-1"
    assert _gpu_zone_attributes(obj, 1)["numa-affinity"] == "2,4"
    assert decode_nrt(obj) == topology


def test_an_x86_gpu_publishes_none_of_the_grace_fields() -> None:
    gpu = Gpu(index=0, pci_bus_id="0000:18:00.0", numa_node=1)
    assert (gpu.numa_affinity, gpu.gpu_numa_node) == ((), None)
    document = to_dict(gpu)
    assert (document["numa_affinity"], document["gpu_numa_node"]) == ([], None)
