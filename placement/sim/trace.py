"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") as simulator input.

The trace gives each node's CPUs, memory, GPU count and model, and each pod's CPUs, memory, GPU count
and share of one GPU; it has no topology, no gangs and no NUMA policy. Those are added here,
deterministically, so that every run and every policy sees the same cluster (docs/benchmarks.md,
"Trace-driven comparison", lists the rules):

* Node topology, per node class. 8-GPU nodes: 2 sockets x 4 GPUs; NVSwitch (NV12 on every pair) for the
  top models (``NVSWITCH_MODELS``), PCIe for the rest (two GPUs per PCIe switch: PIX; same socket: NODE;
  across sockets: SYS). 4-GPU nodes: PCIe, 2 sockets x 2 GPUs, or 1 socket when the node-name hash is
  odd. 2-GPU nodes: PCIe, 1 socket, or 2 sockets x 1 GPU when the hash is odd. 1-GPU nodes: 1 socket.
  CPUs and memory split evenly over the sockets; one NIC per socket. The hash is CRC-32 of the name.
* Kubelet policy mix, from the same hash: 40% ``single-numa-node``, 30% ``restricted``, 20%
  ``best-effort``, 10% ``none``; pod scope, static CPU manager everywhere.
* Pods: QoS ``LS`` and ``Guaranteed`` run Guaranteed (integral CPUs become exclusive), the rest Burstable.
  NUMA intent mix from the pod-name hash: 20% ``single-numa``, 10% ``restricted``, the rest none; a pod
  that no socket of any node could hold whole (more GPUs than a socket has) gets no single-numa intent.
* Gangs: multi-GPU pods (2+ GPUs) with the same shape (CPUs, memory, GPUs, GPU models), in trace order,
  form gangs of 2 to 4 members (size from the first member's hash; a shape's last gang takes what is
  left, a lone pod stays alone). A gang arrives when its first member would have arrived.

The trace's own GPU model constraint is kept: a pod's ``gpu_spec`` ("V100M16|V100M32": any of these
models; empty or ``nan``: any node) becomes ``TracePod.gpu_models``, and each GPU node carries its model
as the ``GPU_MODEL_LABEL`` label (``node_labels``), the label NVIDIA GPU feature discovery publishes. A
pod with models may run only on a node of one of them, whatever its GPU count: the required node
affinity ``gpu_model_affinity`` says so to the real constraint core, ``SimCluster.fits`` to the baselines.
"""

from __future__ import annotations

import csv
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubenexus.topology.model import (
    DeviceLink,
    Distances,
    Gpu,
    KubeletSettings,
    Machine,
    Nic,
    NodeTopology,
    NumaCell,
    PathKind,
)
from placement.core.constraints.constraint_types import (
    Labels,
    NodeAffinity,
    NodeSelectorTerm,
    Operator,
    Requirement,
)
from placement.core.intent import NumaIntentPolicy

DEFAULT_NODE_LIST = "openb_node_list_gpu_node.csv"
DEFAULT_POD_LIST = "openb_pod_list_default.csv"
TRACE_DIR = Path("traces") / "alibaba-gpu-v2023"
NVSWITCH_MODELS = frozenset({"G3", "V100M32"})  # the largest 8-GPU classes (128 CPUs / 768 GiB, V100 32 GB)
NVSWITCH_LINKS = 12
SOCKET_DISTANCE = 21  # SLIT distance between two sockets (10 within one)
MIB = 1 << 20
GPU_MILLI = 1000
GUARANTEED_QOS = frozenset({"LS", "Guaranteed"})
# (upper bound of the hash bucket out of 100, kubelet Topology Manager policy)
KUBELET_MIX = ((40, "single-numa-node"), (70, "restricted"), (90, "best-effort"), (100, "none"))
INTENT_MIX = ((20, NumaIntentPolicy.SINGLE_NUMA), (30, NumaIntentPolicy.RESTRICTED))
GANG_SIZES = (2, 3, 4)
GPU_MODEL_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery's label; here the trace's model code
_NO_SPEC = frozenset({"", "nan"})  # how the trace writes "no GPU model constraint"


def shared_data_dir() -> Path:
    """``KUBENEXUS_SHARED_DATA`` or ../shared/data beside the repository (as tests/conftest.py)."""
    repo = Path(__file__).resolve().parent.parent.parent
    return Path(os.environ.get("KUBENEXUS_SHARED_DATA", repo.parent / "shared" / "data"))


def name_hash(name: str) -> int:
    return zlib.crc32(name.encode())


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs; 1 for a pod that shares one
    gpu_milli: int  # per GPU: GPU_MILLI for whole GPUs, less for a pod that shares one, 0 without GPUs
    guaranteed: bool
    intent: NumaIntentPolicy | None = None
    gang: str | None = None  # gang name, for members of a synthesised gang
    gpu_models: tuple[str, ...] = ()  # the trace's gpu_spec: the node's GPU model must be one of these; () any
    priority: int = 0  # spec.priority; the trace has none (placement.sim.preemption_trace assigns a mix)
    # The gpu_spec field as written ("V100M16|V100M32|V100M32"), "" without one: what FGD keys its typical pods
    # by (placement.sim.policies.typical_pods); gpu_models is its set, what a node is judged by.
    gpu_spec: str = ""

    @property
    def shares_gpu(self) -> bool:
        return 0 < self.gpu_milli < GPU_MILLI

    @property
    def gpu_request_milli(self) -> int:
        """Thousandths of a GPU the pod takes in all (the FGD paper's GPU demand)."""
        return self.gpus * self.gpu_milli


class TraceError(ValueError):
    """A trace file the simulator cannot read; names the file, the row and the field."""


def _int(row: dict[str, str], key: str, where: str) -> int:
    try:
        return int(float(row[key] or 0))
    except (KeyError, ValueError):
        raise TraceError(f"{where}: field {key!r} is missing or not a number ({row.get(key)!r})") from None


def parse_gpu_spec(text: str | None) -> tuple[str, ...]:
    """The GPU models of a ``gpu_spec`` field ("V100M16|V100M32"), sorted; () for none (empty, ``nan``)."""
    if text is None or text.strip() in _NO_SPEC:
        return ()
    return tuple(sorted({model.strip() for model in text.split("|")} - _NO_SPEC))


def node_labels(node: TraceNode) -> Labels:
    """The labels of a trace node the constraints read: its GPU model, when it has one."""
    return ((GPU_MODEL_LABEL, node.model),) if node.model else ()


def gpu_model_affinity(pod: TracePod) -> NodeAffinity | None:
    """The pod's ``gpu_spec`` as a required node affinity (In on ``GPU_MODEL_LABEL``); None without one."""
    if not pod.gpu_models:
        return None
    requirement = Requirement(GPU_MODEL_LABEL, Operator.IN, pod.gpu_models)
    return NodeAffinity(required=(NodeSelectorTerm(match_expressions=(requirement,)),))


def load_nodes(path: Path) -> list[TraceNode]:
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    nodes = []
    for number, row in enumerate(rows, start=2):
        where = f"{path}:{number}"
        nodes.append(
            TraceNode(
                name=row.get("sn") or f"node-{number}",
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                gpus=_int(row, "gpu", where),
                model=row.get("model") or "",
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: Path, *, largest_socket_gpus: int = 4) -> list[TracePod]:
    """The pods in trace order, with QoS, NUMA intent and gangs added (module docstring)."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    pods = []
    for number, row in enumerate(rows, start=2):
        where = f"{path}:{number}"
        name = row.get("name") or f"pod-{number}"
        gpus = _int(row, "num_gpu", where)
        gpu_milli = _int(row, "gpu_milli", where) if gpus else 0
        if gpus > 1 and gpu_milli != GPU_MILLI:
            raise TraceError(f"{where}: a pod sharing a GPU asks for one GPU, not {gpus}")
        bucket = name_hash(name) % 100
        intent = next((policy for bound, policy in INTENT_MIX if bucket < bound), None)
        if intent is NumaIntentPolicy.SINGLE_NUMA and gpus > largest_socket_gpus:
            intent = None
        pods.append(
            TracePod(
                name=name,
                cpu_milli=_int(row, "cpu_milli", where),
                memory_mib=_int(row, "memory_mib", where),
                gpus=gpus,
                gpu_milli=gpu_milli,
                guaranteed=(row.get("qos") or "") in GUARANTEED_QOS,
                intent=intent,
                gpu_models=(models := parse_gpu_spec(row.get("gpu_spec"))),
                gpu_spec=str(row.get("gpu_spec") or "").strip() if models else "",
            )
        )
    return synthesise_gangs(pods)


def synthesise_gangs(pods: Sequence[TracePod]) -> list[TracePod]:
    by_shape: dict[tuple[int, int, int, tuple[str, ...]], list[int]] = {}
    for position, pod in enumerate(pods):
        if pod.gpus >= 2:
            by_shape.setdefault((pod.cpu_milli, pod.memory_mib, pod.gpus, pod.gpu_models), []).append(position)
    gang_of: dict[int, str] = {}
    for positions in by_shape.values():
        start = 0
        while len(positions) - start >= 2:
            first = pods[positions[start]].name
            size = GANG_SIZES[name_hash(first) % len(GANG_SIZES)]
            if len(positions) - start - size < 2:
                size = len(positions) - start  # no lone member left behind
            for position in positions[start : start + size]:
                gang_of[position] = f"gang-{first}"
            start += size
    return [
        TracePod(**{**pod.__dict__, "gang": gang_of.get(position)}) if position in gang_of else pod
        for position, pod in enumerate(pods)
    ]


def kubelet_policy(name: str, *, numa: bool = True) -> str:
    """The node's Topology Manager policy from the mix; ``none`` everywhere without ``numa`` (the FGD
    paper's setting, where no kubelet aligns anything)."""
    if not numa:
        return "none"
    bucket = name_hash(name) % 100
    return next(policy for bound, policy in KUBELET_MIX if bucket < bound)


def socket_layout(node: TraceNode) -> tuple[int, tuple[int, ...]]:
    """(sockets, the socket of each GPU) for a node (module docstring)."""
    odd = name_hash(node.name) % 2 == 1
    if node.gpus == 8:
        return 2, tuple(i // 4 for i in range(8))
    if node.gpus == 4:
        return (1, (0,) * 4) if odd else (2, (0, 0, 1, 1))
    if node.gpus == 2:
        return (2, (0, 1)) if odd else (1, (0, 0))
    return 1, (0,) * node.gpus


def node_topology(node: TraceNode, *, numa: bool = True) -> NodeTopology:
    """The synthetic topology of one trace node (module docstring)."""
    sockets, gpu_socket = socket_layout(node)
    cpus = node.cpu_milli // 1000
    per_socket = cpus // sockets
    cells = tuple(
        NumaCell(
            id=s,
            cpus=tuple(range(s * per_socket, (s + 1) * per_socket if s < sockets - 1 else cpus)),
            memory_bytes=node.memory_mib * MIB // sockets,
        )
        for s in range(sockets)
    )
    switched = node.gpus == 8 and node.model in NVSWITCH_MODELS
    gpus = tuple(
        Gpu(index=i, pci_bus_id=f"0000:{0x10 + i:02x}:00.0", name=node.model, numa_node=gpu_socket[i])
        for i in range(node.gpus)
    )
    nics = tuple(Nic(name=f"mlx5_{s}", pci_bus_id=f"0000:{0x80 + s:02x}:00.0") for s in range(sockets))
    links: list[DeviceLink] = []
    for a in range(node.gpus):
        for b in range(a + 1, node.gpus):
            if switched:
                links.append(DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, NVSWITCH_LINKS))
            elif gpu_socket[a] != gpu_socket[b]:
                links.append(DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.SYS))
            else:
                links.append(DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.PIX if a // 2 == b // 2 else PathKind.NODE))
        for s in range(sockets):
            links.append(DeviceLink(f"GPU{a}", f"NIC{s}", PathKind.NODE if gpu_socket[a] == s else PathKind.SYS))
    distances = Distances(
        ids=tuple(range(sockets)),
        matrix=tuple(tuple(10 if a == b else SOCKET_DISTANCE for b in range(sockets)) for a in range(sockets)),
    )
    return NodeTopology(
        machine=Machine(node.model or None, "x86_64", sockets, cpus, cpus, tuple(range(cpus)), ()),
        numa_cells=cells,
        distances=distances,
        nics=nics,
        gpus=gpus,
        links=tuple(links),
        gpu_source="trace",
        kubelet=KubeletSettings(
            topology_manager_policy=kubelet_policy(node.name, numa=numa),
            topology_manager_scope="pod",
            cpu_manager_policy="static",
        ),
    )


def missing_trace(*paths: Path) -> str | None:
    """One sentence naming the first trace file that is not there and what to set; None when all are."""
    missing = next((path for path in paths if not path.is_file()), None)
    if missing is None:
        return None
    return (
        f"no trace file at {missing}: set KUBENEXUS_SHARED_DATA to the shared data folder (the one holding "
        f"{TRACE_DIR}/) or pass --nodes and --pods, or try --sample (a small made-up trace)"
    )


def read_trace(nodes: Path, pods: Path, *, subsample: int = 1) -> tuple[list[TraceNode], list[TracePod]]:
    """Every ``subsample``-th node and pod of the trace; ``TraceError`` saying why it cannot be read."""
    try:
        return load_nodes(nodes)[::subsample], load_pods(pods)[::subsample]
    except OSError as error:
        raise TraceError(str(error)) from None
