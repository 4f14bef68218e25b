"""Node labels and annotations: what ``kubectl get nodes -L`` shows, plus the whole model, losslessly.

Labels are a lossy, selector-friendly projection; the annotation ``topology.kubenexus.io/model``
carries the complete ``NodeTopology`` and is what readers decode. Every key and encoding is listed
in docs/labels.md. Label values must match ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`` (or be empty)
and be at most 63 characters, so CPU lists use ``_`` between ranges ("0-15_32-47"); a list too long
for that moves to the annotation of the same key in the kernel's own form ("0-15,32-47").
"""

from __future__ import annotations

import base64
import itertools
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from kubenexus.topology.cpulist import format_cpulist
from kubenexus.topology.json_codec import TopologyDecodeError, dumps, loads
from kubenexus.topology.model import NodeTopology, NvLinkRemote, PathKind

OWNED_PREFIXES = ("numa.kubenexus.io/", "gpu.kubenexus.io/", "topology.kubenexus.io/")
NUMA_PREFIX, GPU_PREFIX, TOPOLOGY_PREFIX = OWNED_PREFIXES

NODE_COUNT_KEY = f"{NUMA_PREFIX}node-count"
GPU_COUNT_KEY = f"{GPU_PREFIX}count"
GPU_MODEL_KEY = f"{GPU_PREFIX}model"
GPU_MEMORY_KEY = f"{GPU_PREFIX}memory"  # MiB per GPU, the smallest GPU's
NVLINK_DOMAIN_KEY = f"{GPU_PREFIX}nvlink-domain"
FABRIC_CLIQUE_KEY = f"{GPU_PREFIX}fabric-clique"
MODEL_KEY = f"{TOPOLOGY_PREFIX}model"
# Set by the cluster's operators, never by the agent: a node's rack and block (topology levels, docs/gang.md;
# Kueue's Topology names them too, docs/kueue.md). The agent leaves them alone although they are under a prefix
# the agent owns.
RACK_KEY = f"{TOPOLOGY_PREFIX}rack"
BLOCK_KEY = f"{TOPOLOGY_PREFIX}block"
OPERATORS_KEYS = frozenset({RACK_KEY, BLOCK_KEY})
MODEL_ENCODING_KEY = f"{TOPOLOGY_PREFIX}model-encoding"

ENCODING_JSON = "json"
ENCODING_GZIP_BASE64 = "gzip+base64"
# Kubernetes caps all annotations of one object at 256 KiB together; the rest is left to the
# overflow CPU lists and to annotations other tools put on the node.
MODEL_SIZE_LIMIT = 200 * 1024
# Bounds what a hostile or corrupt compressed model can expand to in a reader (a zip bomb).
MAX_DECODED_MODEL = 64 * 1024 * 1024

NVLINK_NVSWITCH = "nvswitch"  # every GPU pair NVLinked, every GPU's links end at NVSwitches
NVLINK_FULL = "full"  # every GPU pair NVLinked, no switch seen (a direct mesh, or a capture that does not tell)
NVLINK_PARTIAL = "partial"  # some pairs NVLinked, e.g. NVLink bridges on PCIe cards
NVLINK_NONE = "none"

MAX_LABEL_VALUE = 63
_MAX_DNS_SUBDOMAIN = 253
_MIB = 1024 * 1024
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_NOT_LABEL_SAFE = re.compile(r"[^-A-Za-z0-9_.]+")
_GZIP_WBITS = 16 + zlib.MAX_WBITS


@dataclass(frozen=True)
class NodeMetadata:
    """What the agent puts on its Node. ``dropped`` says what was left out and why, for the caller to log."""

    labels: dict[str, str]
    annotations: dict[str, str]
    dropped: tuple[str, ...] = ()


def is_owned_key(key: str) -> bool:
    """Whether the agent owns ``key``: it may change or remove only these, never anyone else's (nor the
    operators' keys under its prefixes)."""
    return key.startswith(OWNED_PREFIXES) and key not in OPERATORS_KEYS


def valid_label_value(value: str) -> bool:
    return len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(value) is not None


def valid_dns_subdomain(name: str) -> bool:
    """An RFC 1123 subdomain of at most 253 characters: most object names (nodes, pods, claims, classes)."""
    return len(name) <= _MAX_DNS_SUBDOMAIN and _DNS_SUBDOMAIN.fullmatch(name) is not None


def valid_label_key(key: str) -> bool:
    """A qualified name: an optional DNS-subdomain prefix and ``/``, then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and not valid_dns_subdomain(prefix):
        return False
    return len(name) <= MAX_LABEL_VALUE and _LABEL_NAME.fullmatch(name) is not None


def drop_invalid_labels(labels: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The labels the API server would accept, and one message per label left out.

    Every label map goes through here before it is sent: the API server rejects a whole update for
    one bad label, so a bad one is dropped rather than costing all the others.
    """
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in labels.items():
        if not valid_label_key(key):
            dropped.append(f"label {key!r} dropped: the key is not a valid qualified name")
        elif len(value) > MAX_LABEL_VALUE:
            dropped.append(f"label {key}={value!r} dropped: the value is longer than {MAX_LABEL_VALUE} characters")
        elif not valid_label_value(value):
            dropped.append(
                f"label {key}={value!r} dropped: a value must be alphanumerics, '-', '_' or '.', "
                "beginning and ending with an alphanumeric"
            )
        else:
            kept[key] = value
    return kept, tuple(dropped)


def label_safe(text: str) -> str:
    """``text`` as a label value: "NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3"; may be empty."""
    value = _NOT_LABEL_SAFE.sub("-", text).strip("-_.")
    return value[:MAX_LABEL_VALUE].rstrip("-_.")


def encode_model(topology: NodeTopology) -> tuple[str, str]:
    """``(encoding, text)``: compact JSON, or gzip+base64 of it when the JSON is over ``MODEL_SIZE_LIMIT``.

    Compression is deterministic (no timestamp in the gzip header), so an unchanged model encodes to
    the same text and the publisher's "write only on change" holds.
    """
    text = dumps(topology)
    if len(text.encode()) <= MODEL_SIZE_LIMIT:
        return ENCODING_JSON, text
    compressed = zlib.compress(text.encode(), level=9, wbits=_GZIP_WBITS)
    return ENCODING_GZIP_BASE64, base64.b64encode(compressed).decode("ascii")


def decode_model(encoding: str, text: str, *, where: str) -> NodeTopology:
    """The model ``encode_model`` wrote; ``where`` names the annotation or attribute in errors."""
    if encoding == ENCODING_JSON:
        document: str | bytes = text
    elif encoding == ENCODING_GZIP_BASE64:
        document = _gunzip(text, where)
    else:
        raise TopologyDecodeError(
            f"{where}: unknown encoding {encoding!r} (expected {ENCODING_JSON} or {ENCODING_GZIP_BASE64})"
        )
    try:
        return loads(document)
    except TopologyDecodeError as error:
        raise TopologyDecodeError(f"{where}: {error}") from None


def encode_node_metadata(topology: NodeTopology) -> NodeMetadata:
    labels, annotations = _numa_labels(topology)
    labels.update(_gpu_labels(topology))
    labels, dropped = drop_invalid_labels(labels)
    encoding, model = encode_model(topology)
    if len(model) <= MODEL_SIZE_LIMIT:
        annotations[MODEL_KEY] = model
        annotations[MODEL_ENCODING_KEY] = encoding
    else:
        dropped += (
            f"annotation {MODEL_KEY} dropped: the model is {len(model)} bytes even as {encoding}, "
            f"over the {MODEL_SIZE_LIMIT}-byte limit; readers will find no model on this node",
        )
    return NodeMetadata(labels=labels, annotations=annotations, dropped=dropped)


def decode_node_metadata(labels: Mapping[str, str], annotations: Mapping[str, str]) -> NodeTopology:
    """The model from the annotation, checked against the owned labels written beside it.

    A label the decoded model would encode differently means the two were not written together (a
    hand edit, or a writer other than the agent), so neither can be trusted.
    """
    model = annotations.get(MODEL_KEY)
    if model is None:
        raise TopologyDecodeError(f"annotation {MODEL_KEY} is missing: no topology was published on this node")
    topology = decode_model(annotations.get(MODEL_ENCODING_KEY, ENCODING_JSON), model, where=f"annotation {MODEL_KEY}")
    expected = encode_node_metadata(topology).labels
    for key, value in labels.items():
        if key in expected and expected[key] != value:
            raise TopologyDecodeError(
                f"label {key}={value!r} disagrees with annotation {MODEL_KEY}, which gives {expected[key]!r}"
            )
    return topology


def local_read_bandwidth(topology: NodeTopology, numa_id: int) -> int | None:
    """HMAT read bandwidth (MB/s) of a cell as seen from its nearest CPUs (access class 1), when known."""
    return next(
        (
            attribute.read_bandwidth_mbps
            for attribute in topology.memory_attributes
            if attribute.target == numa_id and attribute.access_class == 1 and attribute.read_bandwidth_mbps
        ),
        None,
    )


def nvlink_domain(topology: NodeTopology) -> str:
    """How far NVLink reaches among the node's GPUs: one of the ``NVLINK_*`` values."""
    names = [f"GPU{gpu.index}" for gpu in topology.gpus]
    nvlinked = {frozenset((link.a, link.b)) for link in topology.links if link.path is PathKind.NVLINK}
    pairs = [frozenset(pair) for pair in itertools.combinations(names, 2)]
    every_pair = all(pair in nvlinked for pair in pairs)
    switched = bool(topology.gpus) and all(
        any(link.active and link.remote_type is NvLinkRemote.SWITCH for link in gpu.nvlinks) for gpu in topology.gpus
    )
    if switched and every_pair:
        return NVLINK_NVSWITCH
    if pairs and every_pair:
        return NVLINK_FULL
    if any(pair in nvlinked for pair in pairs):
        return NVLINK_PARTIAL
    return NVLINK_NONE


def _numa_labels(topology: NodeTopology) -> tuple[dict[str, str], dict[str, str]]:
    """The NUMA labels, and the annotations that carry the CPU lists too long for a label."""
    labels = {NODE_COUNT_KEY: str(len(topology.numa_cells))}
    annotations: dict[str, str] = {}
    for cell in topology.numa_cells:
        prefix = f"{NUMA_PREFIX}node-{cell.id}-"
        cpus = format_cpulist(cell.cpus, separator="_")
        if len(cpus) <= MAX_LABEL_VALUE:
            labels[f"{prefix}cpus"] = cpus
        else:
            annotations[f"{prefix}cpus"] = format_cpulist(cell.cpus)
        if cell.memory_bytes is not None:
            labels[f"{prefix}memory"] = str(cell.memory_bytes)
        bandwidth = local_read_bandwidth(topology, cell.id)
        if bandwidth is not None:
            labels[f"{prefix}bandwidth"] = str(bandwidth)
    distances = topology.distances
    if distances is not None:
        for source, row in zip(distances.ids, distances.matrix, strict=True):
            for target, distance in zip(distances.ids, row, strict=True):
                # A cell's distance to itself is 10 by definition (ACPI SLIT); the model keeps it.
                if source != target:
                    labels[f"{NUMA_PREFIX}node-{source}-distance-{target}"] = str(distance)
    return labels, annotations


def _gpu_labels(topology: NodeTopology) -> dict[str, str]:
    gpus = topology.gpus
    labels = {GPU_COUNT_KEY: str(len(gpus))}
    if not gpus:
        return labels
    for gpu in gpus:
        if gpu.numa_node is not None:
            labels[f"{GPU_PREFIX}gpu{gpu.index}-numa"] = str(gpu.numa_node)
    names = {gpu.name for gpu in gpus}
    if len(names) == 1 and (name := names.pop()) is not None and label_safe(name):
        labels[GPU_MODEL_KEY] = label_safe(name)
    memories = [gpu.memory_bytes for gpu in gpus if gpu.memory_bytes is not None]
    if memories:
        # The smallest GPU's: what a pod selecting on this label can count on from any GPU here.
        labels[GPU_MEMORY_KEY] = str(min(memories) // _MIB)
    labels[NVLINK_DOMAIN_KEY] = nvlink_domain(topology)
    cliques = {gpu.fabric_clique for gpu in gpus}
    if len(cliques) == 1 and (clique := cliques.pop()) is not None:
        labels[FABRIC_CLIQUE_KEY] = clique
    return labels


def _gunzip(text: str, where: str) -> bytes:
    try:
        compressed = base64.b64decode(text, validate=True)
        decompressor = zlib.decompressobj(wbits=_GZIP_WBITS)
        document = decompressor.decompress(compressed, MAX_DECODED_MODEL)
    except (ValueError, zlib.error) as error:
        raise TopologyDecodeError(f"{where}: not {ENCODING_GZIP_BASE64}: {error}") from None
    if decompressor.unconsumed_tail:
        raise TopologyDecodeError(f"{where}: the model expands to more than {MAX_DECODED_MODEL} bytes")
    if not decompressor.eof:
        raise TopologyDecodeError(f"{where}: the compressed model is truncated")
    return document


# --- what docs/labels.md lists (``python -m tools.labels_doc``), kept beside the code that writes it ---------------


@dataclass(frozen=True)
class PublishedKey:
    """One key the encoder writes, as docs/labels.md lists it; ``N`` and ``M`` in ``key`` stand for ids."""

    key: str
    value: str
    left_out: str = "never"

    def matches(self, key: str) -> bool:
        pattern = re.escape(self.key).replace("N", "[0-9]+").replace("M", "[0-9]+")
        return re.fullmatch(pattern, key) is not None


# ``N`` and ``M``: kernel NUMA node ids (sparse ids stay sparse); for ``gpuN``, the GPU's index (NVML's, else
# sysfs bus order).
PUBLISHED_LABELS = (
    PublishedKey(NODE_COUNT_KEY, "number of NUMA cells"),
    PublishedKey(
        f"{NUMA_PREFIX}node-N-cpus",
        "the cell's online CPUs, ranges joined by `_` (`0-15_32-47`: a label value cannot hold `,`); empty for a "
        "memory-only cell",
        "over 63 characters: the annotation of the same key holds the kernel's form",
    ),
    PublishedKey(f"{NUMA_PREFIX}node-N-memory", "the cell's MemTotal in bytes, hugepages included", "not told"),
    PublishedKey(
        f"{NUMA_PREFIX}node-N-bandwidth",
        "HMAT read bandwidth in MB/s from the cell's nearest CPUs (access class 1)",
        "no HMAT",
    ),
    PublishedKey(f"{NUMA_PREFIX}node-N-distance-M", "SLIT distance from cell N to cell M, N != M", "no SLIT"),
    PublishedKey(GPU_COUNT_KEY, "GPUs found, healthy or not; `0` without GPUs"),
    PublishedKey(
        f"{GPU_PREFIX}gpuN-numa",
        "the host NUMA node GPU N is attached to (never its own memory node on GH200/GB200)",
        "not told",
    ),
    PublishedKey(
        GPU_MODEL_KEY,
        "the product name made label-safe (`NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`)",
        "no GPUs, GPUs of different products, or an unknown name",
    ),
    PublishedKey(GPU_MEMORY_KEY, "MiB per GPU (as GPU Feature Discovery); the smallest GPU's", "not told"),
    PublishedKey(
        NVLINK_DOMAIN_KEY,
        f"`{NVLINK_NVSWITCH}` (every pair NVLinked through NVSwitches), `{NVLINK_FULL}` (every pair, no switch "
        f"seen), `{NVLINK_PARTIAL}` (some pairs), `{NVLINK_NONE}`",
        "no GPUs",
    ),
    PublishedKey(
        FABRIC_CLIQUE_KEY,
        "the NVLink fabric clique all GPUs share, `<clusterUuid>.<cliqueId>` (as `nvidia.com/gpu.clique`)",
        "no GPUs, a GPU outside any fabric, or several cliques",
    ),
)
PUBLISHED_ANNOTATIONS = (
    PublishedKey(
        f"{NUMA_PREFIX}node-N-cpus",
        "the kernel's CPU list (`0-15,32-47`), for a cell whose label form would be too long",
        "the label holds it",
    ),
    PublishedKey(
        MODEL_KEY,
        f"the complete model: compact JSON, or gzip of it in base64 over {MODEL_SIZE_LIMIT // 1024} KiB",
        f"still over {MODEL_SIZE_LIMIT // 1024} KiB compressed (the NRT object carries it)",
    ),
    PublishedKey(MODEL_ENCODING_KEY, f"`{ENCODING_JSON}` or `{ENCODING_GZIP_BASE64}`: how to read the model"),
)
