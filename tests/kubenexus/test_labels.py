"""Node labels and annotations: valid values only, the documented encodings, and a lossless model.

The fixture topologies (every real sysfs snapshot, every ``nvidia-smi topo -m`` capture, every fake-NVML
GPU machine) come from ``tests.discovered_topologies`` through the ``built`` fixture.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable

import pytest

from kubenexus.topology import labels as labels_module
from kubenexus.topology.json_codec import TopologyDecodeError, to_dict
from kubenexus.topology.labels import (
    ENCODING_GZIP_BASE64,
    ENCODING_JSON,
    MODEL_ENCODING_KEY,
    MODEL_KEY,
    MODEL_SIZE_LIMIT,
    NodeMetadata,
    decode_node_metadata,
    drop_invalid_labels,
    encode_node_metadata,
    is_owned_key,
    label_safe,
    valid_label_key,
    valid_label_value,
)
from kubenexus.topology.model import (
    SCHEMA_VERSION,
    DeviceLink,
    DiscoveryWarning,
    Distances,
    Gpu,
    NodeTopology,
    NumaCell,
    NvLink,
    NvLinkRemote,
    PathKind,
)
from tests.discovered_topologies import FIXTURES
from tests.machines.gpu_hardware import GB200_CLIQUE_ID, GB200_CLUSTER_UUID
from tests.machines.node_topologies import GIB, two_socket


@pytest.mark.parametrize("value", ["", "a", "0", "0-15_32-47", "NVIDIA-H100-80GB-HBM3", "a.b_c-d", "x" * 63])
def test_valid_label_values(value: str) -> None:
    assert valid_label_value(value)


@pytest.mark.parametrize("value", ["0-15,32-47", "-1", "a-", "_a", "a b", "ä", "x" * 64, "a/b"])
def test_invalid_label_values(value: str) -> None:
    assert not valid_label_value(value)


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("numa.kubenexus.io/node-0-cpus", True),
        ("plain-name", True),
        ("a" * 253 + "/" + "n" * 63, True),
        ("Numa.kubenexus.io/x", False),  # prefixes are lower-case DNS subdomains
        ("numa.kubenexus.io/", False),
        ("/name", False),
        ("a/b/c", False),
        ("numa.kubenexus.io/" + "n" * 64, False),
        ("numa.kubenexus.io/-x", False),
        ("a" * 254 + "/n", False),
    ],
)
def test_label_keys(key: str, valid: bool) -> None:
    assert valid_label_key(key) is valid


def test_invalid_labels_are_dropped_with_a_message_each() -> None:
    labels = {
        "numa.kubenexus.io/node-0-cpus": "0-15,32-47",
        "numa.kubenexus.io/node-1-cpus": "16-31_48-63",
        "gpu.kubenexus.io/model": "x" * 64,
        "bad key": "1",
    }

    kept, dropped = drop_invalid_labels(labels)

    assert kept == {"numa.kubenexus.io/node-1-cpus": "16-31_48-63"}
    assert len(dropped) == 3
    assert "numa.kubenexus.io/node-0-cpus='0-15,32-47'" in dropped[0]
    assert "longer than 63" in dropped[1]
    assert "'bad key'" in dropped[2]


def test_owned_keys() -> None:
    assert is_owned_key("numa.kubenexus.io/node-count")
    assert is_owned_key("gpu.kubenexus.io/count")
    assert is_owned_key(MODEL_KEY)
    assert not is_owned_key("nvidia.com/gpu.count")
    assert not is_owned_key("kubenexus.io/other")
    assert not is_owned_key("feature.node.kubernetes.io/numa.kubenexus.io/x")


def test_a_two_socket_machine() -> None:
    metadata = encode_node_metadata(two_socket())

    assert metadata.labels == {
        "numa.kubenexus.io/node-count": "2",
        "numa.kubenexus.io/node-0-cpus": "0-15_32-47",
        "numa.kubenexus.io/node-0-memory": str(64 * GIB),
        "numa.kubenexus.io/node-0-bandwidth": "131072",
        "numa.kubenexus.io/node-0-distance-1": "21",
        "numa.kubenexus.io/node-1-cpus": "16-31_48-63",
        "numa.kubenexus.io/node-1-memory": str(64 * GIB),
        "numa.kubenexus.io/node-1-distance-0": "21",
        "gpu.kubenexus.io/count": "0",
    }
    assert metadata.annotations.keys() == {MODEL_KEY, MODEL_ENCODING_KEY}
    assert metadata.annotations[MODEL_ENCODING_KEY] == ENCODING_JSON
    assert json.loads(metadata.annotations[MODEL_KEY]) == to_dict(two_socket())
    assert metadata.dropped == ()


@pytest.mark.parametrize(
    "cpus",
    [
        tuple(range(100, 132, 2)),  # "100_102_..._130": 63 characters, the longest label value
        (*range(100, 130, 2), 1000),  # 64 characters
        tuple(range(100, 400, 2)),
    ],
    ids=["63", "64", "599"],
)
def test_a_cpu_list_too_long_for_a_label_moves_to_the_annotation(cpus: tuple[int, ...]) -> None:
    compact = "_".join(map(str, cpus))
    topology = two_socket(numa_cells=(NumaCell(0, cpus, GIB),), distances=None, memory_attributes=())

    metadata = encode_node_metadata(topology)

    key = "numa.kubenexus.io/node-0-cpus"
    if len(compact) <= 63:
        assert metadata.labels[key] == compact
        assert key not in metadata.annotations
    else:
        assert key not in metadata.labels
        assert metadata.annotations[key] == ",".join(map(str, cpus))
    assert metadata.dropped == ()
    assert decode_node_metadata(metadata.labels, metadata.annotations) == topology


def test_an_invalid_value_is_dropped_not_sent_and_the_model_keeps_it() -> None:
    topology = two_socket(distances=Distances((0, 1), ((10, -1), (21, 10))))  # garbled firmware

    metadata = encode_node_metadata(topology)

    assert "numa.kubenexus.io/node-0-distance-1" not in metadata.labels
    assert metadata.labels["numa.kubenexus.io/node-1-distance-0"] == "21"
    assert metadata.dropped == (
        "label numa.kubenexus.io/node-0-distance-1='-1' dropped: a value must be alphanumerics, '-', '_' or '.', "
        "beginning and ending with an alphanumeric",
    )
    assert all(valid_label_value(value) for value in metadata.labels.values())
    assert decode_node_metadata(metadata.labels, metadata.annotations) == topology


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fixture_publishes_valid_labels_and_a_lossless_model(
    fixture: str, built: Callable[[str], NodeTopology]
) -> None:
    topology = built(fixture)

    metadata = encode_node_metadata(topology)

    assert metadata.dropped == ()
    assert all(valid_label_key(key) and is_owned_key(key) for key in metadata.labels)
    assert all(valid_label_value(value) for value in metadata.labels.values())
    assert all(valid_label_key(key) and is_owned_key(key) for key in metadata.annotations)
    assert metadata.labels["numa.kubenexus.io/node-count"] == str(len(topology.numa_cells))
    assert metadata.labels["gpu.kubenexus.io/count"] == str(len(topology.gpus))
    for cell in topology.numa_cells:
        published = metadata.labels.get(f"numa.kubenexus.io/node-{cell.id}-cpus")
        if published is None:
            published = metadata.annotations[f"numa.kubenexus.io/node-{cell.id}-cpus"].replace(",", "_")
        assert _expand(published) == set(cell.cpus)
    assert decode_node_metadata(metadata.labels, metadata.annotations) == topology
    assert encode_node_metadata(topology) == metadata  # deterministic: an unchanged node writes nothing


def _expand(compact: str) -> set[int]:
    cpus: set[int] = set()
    for part in filter(None, compact.split("_")):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _gpu_labels(metadata: NodeMetadata) -> dict[str, str]:
    return {key.removeprefix("gpu.kubenexus.io/"): value for key, value in metadata.labels.items() if "gpu." in key}


def _numa_of(*nodes: int) -> dict[str, str]:
    return {f"gpu{index}-numa": str(node) for index, node in enumerate(nodes)}


GPU_LABELS = {
    "nvml/dgx_a100": {
        "count": "8",
        **_numa_of(3, 3, 1, 1, 7, 7, 5, 5),
        "model": "NVIDIA-A100-SXM4-40GB",
        "memory": "40960",
        "nvlink-domain": "nvswitch",
    },
    "nvml/hgx_h100": {
        "count": "8",
        **_numa_of(0, 0, 0, 0, 1, 1, 1, 1),
        "model": "NVIDIA-H100-80GB-HBM3",
        "memory": "81559",
        "nvlink-domain": "nvswitch",
    },
    "nvml/hgx_h100_gpu3_lost": {  # the lost GPU has no name, memory or links
        "count": "8",
        **_numa_of(0, 0, 0, 0, 1, 1, 1, 1),
        "memory": "81559",
        "nvlink-domain": "partial",
    },
    "nvml/gb200_tray": {
        "count": "4",
        **_numa_of(0, 0, 1, 1),
        "model": "NVIDIA-GB200",
        "memory": "189471",
        "nvlink-domain": "nvswitch",
        "fabric-clique": f"{GB200_CLUSTER_UUID}.{GB200_CLIQUE_ID}",
    },
    "nvml/l40s_4x": {
        "count": "4",
        **_numa_of(0, 0, 0, 0),
        "model": "NVIDIA-L40S",
        "memory": "46068",
        "nvlink-domain": "none",
    },
    "nvml/pcie_8gpu_nvlink_bridges": {
        "count": "8",
        **_numa_of(0, 0, 0, 0, 1, 1, 1, 1),
        "model": "NVIDIA-A100-80GB-PCIe",
        "memory": "81920",
        "nvlink-domain": "partial",
    },
    # A capture tells neither names nor memory, nor whether NVLinks go through switches.
    "nvidia-smi/aws_p4d.24xlarge_8xA100__gnosia93-training-on-eks.txt": {
        "count": "8",
        **_numa_of(0, 0, 0, 0, 1, 1, 1, 1),
        "nvlink-domain": "full",
    },
    "nvidia-smi/workstation_2x1080Ti_PHB__XueSongTap.txt": {"count": "2", "nvlink-domain": "none"},  # NUMA N/A
}


@pytest.mark.parametrize("fixture", sorted(GPU_LABELS))
def test_gpu_labels(fixture: str, built: Callable[[str], NodeTopology]) -> None:
    assert _gpu_labels(encode_node_metadata(built(fixture))) == GPU_LABELS[fixture]


def _switched_gpu(index: int) -> Gpu:
    return Gpu(index, f"0000:{index + 1:02x}:00.0", nvlinks=(NvLink(0, True, 4, NvLinkRemote.SWITCH, "0000:05:00.0"),))


@pytest.mark.parametrize(
    ("gpus", "links", "domain"),
    [
        ((_switched_gpu(0),), (), "nvswitch"),  # one GPU on a switch fabric (a GB200 tray slice)
        ((Gpu(0, "0000:01:00.0"),), (), "none"),
        ((_switched_gpu(0), _switched_gpu(1)), (DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 1),), "nvswitch"),
        # switch links, but the fabric manager keeps the two apart (separate partitions)
        ((_switched_gpu(0), _switched_gpu(1)), (DeviceLink("GPU0", "GPU1", PathKind.SYS),), "none"),
        (
            (_switched_gpu(0), _switched_gpu(1), _switched_gpu(2)),
            (DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 4), DeviceLink("GPU1", "GPU2", PathKind.SYS)),
            "partial",
        ),
        (
            (Gpu(0, "0000:01:00.0"), Gpu(1, "0000:02:00.0")),
            (DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 4),),
            "full",
        ),
    ],
)
def test_nvlink_domain(gpus: tuple[Gpu, ...], links: tuple[DeviceLink, ...], domain: str) -> None:
    assert _gpu_labels(encode_node_metadata(two_socket(gpus=gpus, links=links)))["nvlink-domain"] == domain


def test_gpu_model_and_memory_across_different_gpus() -> None:
    gpus = (Gpu(0, "0000:01:00.0", name="NVIDIA A", memory_bytes=80 * GIB), Gpu(1, "0000:02:00.0", name="NVIDIA B"))

    labels = _gpu_labels(encode_node_metadata(two_socket(gpus=gpus)))

    assert "model" not in labels  # no single product to name
    assert labels["memory"] == str(80 * 1024)  # from the GPU that tells


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("  Tesla V100-SXM2-16GB (rev a1)!", "Tesla-V100-SXM2-16GB-rev-a1"),
        ("(((", ""),
        ("A" * 62 + " B", "A" * 62),
    ],
)
def test_label_safe(name: str, safe: str) -> None:
    assert label_safe(name) == safe
    assert valid_label_value(label_safe(name))


def _with_warnings(count: int, text: Callable[[int], str]) -> NodeTopology:
    return two_socket(warnings=tuple(DiscoveryWarning("test", text(i)) for i in range(count)))


def test_a_large_model_is_compressed_and_still_lossless() -> None:
    topology = _with_warnings(5000, lambda i: f"cell {i % 8}: value ignored, the file was garbled")

    metadata = encode_node_metadata(topology)

    assert metadata.annotations[MODEL_ENCODING_KEY] == ENCODING_GZIP_BASE64
    assert len(metadata.annotations[MODEL_KEY]) < MODEL_SIZE_LIMIT
    assert metadata.dropped == ()
    assert decode_node_metadata(metadata.labels, metadata.annotations) == topology
    assert encode_node_metadata(topology) == metadata  # no timestamp in the gzip header


def test_a_model_too_large_even_compressed_is_left_out_with_a_message() -> None:
    noise = random.Random(4)
    topology = _with_warnings(300, lambda _: "".join(noise.choices(string.ascii_letters, k=1000)))

    metadata = encode_node_metadata(topology)

    assert MODEL_KEY not in metadata.annotations
    assert MODEL_ENCODING_KEY not in metadata.annotations
    assert len(metadata.dropped) == 1
    assert metadata.dropped[0].startswith(f"annotation {MODEL_KEY} dropped")
    assert metadata.labels["numa.kubenexus.io/node-0-cpus"] == "0-15_32-47"  # the labels still go out
    with pytest.raises(TopologyDecodeError, match=f"annotation {MODEL_KEY} is missing"):
        decode_node_metadata(metadata.labels, metadata.annotations)


def _published() -> NodeMetadata:
    return encode_node_metadata(two_socket())


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({}, f"annotation {MODEL_KEY} is missing"),
        ({MODEL_KEY: "{"}, f"annotation {MODEL_KEY}: not JSON"),
        ({MODEL_KEY: "[]"}, f"annotation {MODEL_KEY}: a topology document must be a JSON object"),
        ({MODEL_KEY: '{"schema_version": 1}'}, f"annotation {MODEL_KEY}: topology: missing field 'machine'"),
        ({MODEL_KEY: "H4sI!!", MODEL_ENCODING_KEY: ENCODING_GZIP_BASE64}, f"annotation {MODEL_KEY}: not gzip"),
        ({MODEL_KEY: "aGVsbG8=", MODEL_ENCODING_KEY: ENCODING_GZIP_BASE64}, f"annotation {MODEL_KEY}: not gzip"),
        ({MODEL_KEY: "{}", MODEL_ENCODING_KEY: "xz"}, f"annotation {MODEL_KEY}: unknown encoding 'xz'"),
    ],
)
def test_garbled_annotations_are_refused_naming_the_key(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyDecodeError, match=message):
        decode_node_metadata(_published().labels, annotations)


def test_a_newer_model_is_refused_naming_the_key() -> None:
    document = to_dict(two_socket())
    document["schema_version"] = SCHEMA_VERSION + 1

    with pytest.raises(TopologyDecodeError, match=f"annotation {MODEL_KEY}: schema_version {SCHEMA_VERSION + 1}"):
        decode_node_metadata({}, {MODEL_KEY: json.dumps(document)})


def test_a_truncated_compressed_model_is_refused() -> None:
    metadata = encode_node_metadata(_with_warnings(5000, lambda i: f"warning {i % 3}"))
    annotations = dict(metadata.annotations)
    annotations[MODEL_KEY] = annotations[MODEL_KEY][:400]

    with pytest.raises(TopologyDecodeError, match="truncated"):
        decode_node_metadata(metadata.labels, annotations)


def test_a_model_expanding_past_the_reader_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = encode_node_metadata(_with_warnings(5000, lambda i: f"warning {i % 3}"))
    monkeypatch.setattr(labels_module, "MAX_DECODED_MODEL", 100_000)

    with pytest.raises(TopologyDecodeError, match="expands to more than 100000 bytes"):
        decode_node_metadata(metadata.labels, metadata.annotations)


def test_a_label_that_disagrees_with_the_model_is_refused() -> None:
    metadata = _published()
    labels = {**metadata.labels, "numa.kubenexus.io/node-0-cpus": "0-7"}

    with pytest.raises(TopologyDecodeError, match=re.escape("label numa.kubenexus.io/node-0-cpus='0-7' disagrees")):
        decode_node_metadata(labels, metadata.annotations)


def test_foreign_and_unknown_labels_do_not_matter() -> None:
    metadata = _published()
    labels = {**metadata.labels, "kubernetes.io/hostname": "n1", "numa.kubenexus.io/future-key": "x"}

    assert decode_node_metadata(labels, metadata.annotations) == two_socket()
