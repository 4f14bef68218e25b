"""The one-command demo: an embedded cluster of real machine types, a sample mix of pods, every decision explained.

``kubenexus-placement serve --demo`` (``placement.main``) calls ``build_demo_cluster`` for an engine over
the embedded cluster, starts the gRPC service on it, calls ``run_demo`` and keeps serving. The machine
types are the NodeTopology JSON files under ``machines/`` (``python -m tools.build_demo_machines``, a
development-time tool, writes them from published facts); this machine's own topology joins them when
the caller passes a way to discover it (``placement`` may not import ``agent.discovery``: the import
contracts keep host access in the agent, so ``placement.main`` hands over
``lambda: discover(HostFS("/"), nvml=...)``).

Every node carries what a real cluster's Node object does (``node_facts``): the kubelet's labels
(hostname, OS, architecture), the cloud provider's (instance type, zone: the fleet alternates between two
zones) and, on GPU nodes, the NVIDIA GPU operator's ``nvidia.com/gpu.present`` label and the
``nvidia.com/gpu=present:NoSchedule`` taint GPU node pools carry. The demo's GPU pods tolerate that taint,
as GPU operator users' pods do; its nodeSelectors are real ones, judged by the service's port of
kube-scheduler's plugins like any pod's constraints.

Decisions go through ``PlacementEngine``, the same facade the gRPC servicer uses, so what the demo
prints is what ``Reserve`` and ``PlaceGang`` answer.
"""

from __future__ import annotations

import importlib.resources
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from kubenexus.topology import json_codec
from kubenexus.topology.model import NodeTopology
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, POLICY_KEY
from placement.core.constraints.constraint_types import NodeFacts, Taint, TaintEffect
from placement.core.constraints.selectors import HOSTNAME_LABEL
from placement.core.dra.claims import parse_device_class, parse_resource_claim
from placement.core.dra.pod_claims import PodResourceClaim
from placement.core.dra.slices import parse_resource_slice
from placement.core.pod_placement import Placement
from placement.core.pods import ContainerSpec, PodSpec, PodUsage, validate_pod
from placement.core.vocabulary import GPU_RESOURCE, demand_of
from placement.demo.dra import (
    DRA_SUFFIX,
    DRA_TAINT,
    DRA_TOLERATION,
    DRIVER,
    EXPLAIN_CLAIM,
    TRAIN_CLAIM,
    dra_node_names,
    gpu_claim,
    gpu_device_class,
    gpu_slice,
)
from placement.service.engine import PlacementEngine
from placement.service.errors import InvalidRequest, PlacementError
from placement.service.gang_port import CoordinatedGangs
from placement.service.results import GangOutcome, GangSpec, GangState, Rejections
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangCoordinator, GangPhase, GangPlacement

# Machine type (file stem under machines/) and how many nodes of it the demo cluster has.
FLEET: tuple[tuple[str, int], ...] = (
    ("hgx-h100", 4),
    ("dgx-a100", 2),
    ("l40s-4x", 4),
    ("a100-pcie-nvbridge", 2),
    ("cpu-2s", 6),
)
THIS_MACHINE = "this-machine"
NAMESPACE = "demo"
DEFAULT_LISTEN_ADDRESS = "127.0.0.1:50051"
SERVICE = "kubenexus.placement.v1.Placement"
_TOP_REASONS = 3
_EXAMPLE_NODES = 3

# What a real cluster's Node carries (node_facts): well-known labels (k8s.io/api/core/v1), GPU feature
# discovery's, and the taint a GPU node pool is given so that only pods tolerating it land there.
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
ZONES = ("zone-a", "zone-b")  # node <type>-<n> is in ZONES[n % 2]
GPU_TAINT = Taint(GPU_RESOURCE, TaintEffect.NO_SCHEDULE, "present")
# What the ExtendedResourceToleration admission plugin adds to a pod asking for nvidia.com/gpu, and what
# GPU operator users write themselves where the plugin is off.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}  # the kernel's machine name -> GOARCH, the label's value


def load_machine(stem: str) -> NodeTopology:
    """One embedded machine type, decoded with the agent's own codec (package data, so it works installed)."""
    text = importlib.resources.files(__name__).joinpath("machines", f"{stem}.json").read_text()
    return json_codec.loads(text)


def machine_type(node: str) -> str:
    """The machine type of a demo node: its name less the ``-<n>`` suffix (and ``-dra`` for a DRA node)."""
    return node if node == THIS_MACHINE else node.rsplit("-", 1)[0].removesuffix(DRA_SUFFIX)


def zone_of(node: str) -> str | None:
    """The zone of a demo node (``ZONES`` alternate with the node number); None for this machine."""
    return None if node == THIS_MACHINE else ZONES[int(node.rsplit("-", 1)[1]) % len(ZONES)]


def node_facts(name: str, topology: NodeTopology) -> NodeFacts:
    """The labels and taints the Node object of a demo node carries in a real cluster.

    The kubelet's hostname, OS and architecture labels; the cloud provider's instance type (the machine
    type) and zone; on a GPU node, GPU feature discovery's ``nvidia.com/gpu.present=true`` and the
    ``GPU_TAINT`` of GPU node pools. This machine is a bare-metal node: no cloud provider labels it.
    """
    labels = {HOSTNAME_LABEL: name, OS_LABEL: "linux"}
    architecture = topology.machine.architecture
    if architecture:
        labels[ARCH_LABEL] = _GO_ARCH.get(architecture, architecture)
    zone = zone_of(name)
    if zone is not None:
        labels[INSTANCE_TYPE_LABEL] = machine_type(name)
        labels[ZONE_LABEL] = zone
    if topology.gpus:
        labels[GPU_PRESENT_LABEL] = "true"
    taints = (DRA_TAINT if DRA_SUFFIX in name else GPU_TAINT,) if topology.gpus else ()
    return NodeFacts(name, labels=tuple(sorted(labels.items())), taints=taints)


def demo_nodes() -> list[tuple[str, NodeTopology]]:
    """The embedded cluster: ``<type>-<n>`` for every machine type of ``FLEET``, then the DRA nodes."""
    nodes = []
    for stem, count in FLEET:
        topology = load_machine(stem)
        nodes += [(f"{stem}-{n}", topology) for n in range(count)]
    return nodes + [(name, load_machine(stem)) for name, stem in dra_node_names()]


def build_demo_cluster(
    *,
    discover_this_machine: Callable[[], NodeTopology] | None = None,
    out: TextIO | None = None,
) -> PlacementEngine:
    """An engine over the embedded cluster, plus this machine as node ``this-machine`` when discoverable.

    ``discover_this_machine`` failing in any way only leaves this machine out, with a note on ``out``
    (stderr by default): the embedded cluster is the demo, this machine is a bonus that a container
    without /sys, a host without NUMA, or a driver error must not take away.
    """
    note = out if out is not None else sys.stderr
    nodes = demo_nodes()
    if discover_this_machine is not None:
        try:
            nodes.append((THIS_MACHINE, discover_this_machine()))
        except Exception as error:  # see the docstring: any failure here only loses the bonus node
            print(f"note: this machine is not in the demo cluster ({type(error).__name__}: {error})", file=note)
    index = ClusterIndex()
    engine = PlacementEngine.over(index)
    for name, topology in nodes:
        # What the cluster feed does with a Node and its topology report: the index takes the topology and
        # the constraints' facts, the gang coordinator the locality labels.
        facts = node_facts(name, topology)
        index.upsert_topology(name, topology)
        index.facts.set_node(facts)
        if isinstance(engine.gangs, CoordinatedGangs):
            engine.gangs.coordinator.observe_node(name, dict(facts.labels), topology)
        if DRA_SUFFIX in name:  # what the DRA feed reads: the driver's slice for the node
            index.dra.set_slice(name, parse_resource_slice(gpu_slice(name, topology)))
    index.dra.set_class(DRIVER, parse_device_class(gpu_device_class()))
    for claim, count in (TRAIN_CLAIM, EXPLAIN_CLAIM):
        index.dra.set_claim(parse_resource_claim(gpu_claim(NAMESPACE, claim, count)))
    return engine


# --- the sample mix -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One item of the sample mix: a pod or a gang. Every node is a candidate; the pods' own nodeSelector
    and tolerations say where they may go."""

    key: str
    title: str
    shows: str  # what this decision demonstrates, one sentence
    pods: tuple[PodSpec, ...]
    gang_min_member: int | None = None  # None: a single pod

    @property
    def is_gang(self) -> bool:
        return self.gang_min_member is not None


@dataclass(frozen=True)
class Result:
    """What the engine answered for one workload."""

    workload: Workload
    placements: tuple[Placement, ...] = ()
    rejected: tuple[Rejections, ...] = ()  # single pods: why each other candidate was not chosen
    gang: GangOutcome | None = None
    error: str | None = None  # the request was refused before any placement (InvalidRequest)
    candidates: int = 0
    links: Mapping[str, Mapping[frozenset[int], str]] = field(default_factory=dict)  # node -> GPU pair -> class
    gpu_numa: Mapping[str, Mapping[int, int | None]] = field(default_factory=dict)  # node -> GPU -> NUMA
    policies: Mapping[str, str] = field(default_factory=dict)  # node -> Topology Manager policy

    @property
    def placed(self) -> bool:
        return bool(self.placements)


def demo_pod(
    name: str,
    *,
    cpu: str,
    memory: str,
    gpus: int = 0,
    hugepages_1gi: str | None = None,
    policy: str | None = None,
    guaranteed: bool = True,
    group: tuple[str, int] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerate_gpu_taint: bool = True,
    claim: str | None = None,
) -> PodSpec:
    """A demo pod; one asking for GPUs tolerates ``GPU_TAINT`` unless ``tolerate_gpu_taint`` is False. With
    ``claim`` its GPUs come from that ResourceClaim (DRA), and it tolerates the DRA nodes' taint instead."""
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests[GPU_RESOURCE] = str(gpus)
    if hugepages_1gi is not None:
        requests["hugepages-1Gi"] = hugepages_1gi
    # Guaranteed (limits = requests) is what gets exclusive CPUs and NUMA pinning from the kubelet.
    limits = dict(requests) if guaranteed else {}
    return PodSpec(
        namespace=NAMESPACE,
        name=name,
        containers=(ContainerSpec("main", requests=requests, limits=limits),),
        # The pod-group labels as users put them on a job's pod template (placement.core.podgroup).
        labels={} if group is None else {GROUP_NAME_KEY: group[0], MIN_AVAILABLE_KEY: str(group[1])},
        annotations={} if policy is None else {POLICY_KEY: policy},
        node_selector={} if node_selector is None else dict(node_selector),
        tolerations=(DRA_TOLERATION,) if claim else (GPU_TOLERATION,) if gpus and tolerate_gpu_taint else (),
        resource_claims=() if claim is None else (PodResourceClaim("gpus", claim_name=claim),),
        uid=f"demo-{name}",
    )


def _instance(machine: str) -> dict[str, str]:
    return {INSTANCE_TYPE_LABEL: machine}


def sample_mix() -> tuple[Workload, ...]:
    """The demo's workloads, in the order they are decided (each sees what the earlier ones reserved)."""
    spark, cpu_2s = ("spark-etl", 7), _instance("cpu-2s")
    return (
        Workload(
            "single-numa",
            "single-numa GPU pod",
            "1 GPU, 8 CPUs and 32Gi that must share one NUMA cell, even on a node whose kubelet would not insist",
            (demo_pod("inference-0", cpu="8", memory="32Gi", gpus=1, policy="single-numa"),),
        ),
        Workload(
            "isolated",
            "isolated HPC pod",
            "32 exclusive CPUs and 16 x 1Gi hugepages on a NUMA cell no other pod of ours may use",
            (demo_pod("hpc-solver", cpu="32", memory="64Gi", hugepages_1gi="16Gi", policy="isolated"),),
        ),
        Workload(
            "llm-train",
            "8-member training gang",
            "8 workers x 4 GPUs, all or nothing: each worker gets an NVLink-connected GPU set on one NUMA cell",
            tuple(
                demo_pod(f"llm-train-{n}", cpu="48", memory="256Gi", gpus=4, group=("llm-train", 8)) for n in range(8)
            ),
            gang_min_member=8,
        ),
        Workload(
            "nvlink-bridge",
            "2-GPU pod on the NVLink-bridge machines",
            "of 4 GPUs on a NUMA cell, the pair joined by an NVLink bridge (NV12) beats the PCIe-only pairs (NODE)",
            (demo_pod("finetune-0", cpu="8", memory="64Gi", gpus=2, node_selector=_instance("a100-pcie-nvbridge")),),
        ),
        Workload(
            "spark-etl",
            "Spark driver + 6 executors",
            "a CPU gang on the CPU nodes (nodeSelector), min-available 7, kept off the isolated pod's cell",
            (
                demo_pod("spark-driver", cpu="2", memory="8Gi", guaranteed=False, group=spark, node_selector=cpu_2s),
                *(
                    demo_pod(f"spark-exec-{n}", cpu="8", memory="32Gi", group=spark, node_selector=cpu_2s)
                    for n in range(6)
                ),
            ),
            gang_min_member=7,
        ),
        Workload(
            "dra-claim",
            "4-GPU ResourceClaim on a DRA node",
            "NVIDIA's DRA driver publishes the GPUs; the service picks node and devices together: "
            "NVSwitch-connected, on the NUMA cell the kubelet will pin the pod's CPUs to",
            (demo_pod("dra-train-0", cpu="16", memory="64Gi", claim=TRAIN_CLAIM[0]),),
        ),
        Workload(
            "zone-pinned",
            "CPU pod pinned to a zone",
            "zone-a CPU nodes fail its nodeSelector, every GPU node its taint (checked first, as kube-scheduler does)",
            (demo_pod("cache-0", cpu="4", memory="16Gi", node_selector={ZONE_LABEL: "zone-b"}),),
        ),
        Workload(
            "untolerated",
            "GPU pod without the GPU taint's toleration",
            "every GPU node carries nvidia.com/gpu=present:NoSchedule: a pod that does not tolerate it fits nowhere",
            (demo_pod("notebook-0", cpu="4", memory="16Gi", gpus=1, tolerate_gpu_taint=False),),
        ),
        Workload(
            "invalid-policy",
            "pod with an invalid NUMA policy",
            "the kubelet's policy name is not a pod intent: the request is refused with the accepted values",
            (demo_pod("typo-0", cpu="4", memory="8Gi", gpus=1, policy="single-numa-node"),),
        ),
        Workload(
            "infeasible",
            "pod that cannot fit",
            "8 GPUs on one NUMA cell exist nowhere: every node says why",
            (demo_pod("too-big-0", cpu="16", memory="128Gi", gpus=8, policy="single-numa"),),
        ),
    )


def schedule_sample_mix(engine: PlacementEngine, workloads: Iterable[Workload] | None = None) -> list[Result]:
    """Decide every workload in order through ``engine``, then bind what was placed, as the binder would.

    Binding stops the reservations' TTL and, told to the gang coordinator for every member of a placed
    gang (``observe_bound``, as the pod watch tells it in a cluster), the gang's permit timeout: the demo's
    pods stay on their nodes for whoever explores the running service with grpcurl, however long after.
    """
    # The engine's gang port when the service has one; else the coordinator itself over the same index.
    coordinator = None if engine.gangs is not None else GangCoordinator(engine.index, engine.reservations)
    results = []
    for workload in sample_mix() if workloads is None else workloads:
        result = _decide(engine, coordinator, workload)
        _bind(engine, coordinator, result)
        results.append(result)
    return results


def _decide(engine: PlacementEngine, coordinator: GangCoordinator | None, workload: Workload) -> Result:
    nodes = sorted(engine.index.node_names())
    try:
        if workload.is_gang and coordinator is not None:
            result = _decide_gang(coordinator, workload, nodes)
        elif workload.is_gang:
            group = GangSpec(NAMESPACE, workload.key, workload.gang_min_member or 0, workload.pods)
            outcome = engine.place_gang(group, nodes)
            result = Result(workload, placements=outcome.placements, gang=outcome)
        else:
            reserved = engine.reserve(workload.pods[0], nodes)
            placements = () if reserved.placement is None else (reserved.placement,)
            result = Result(workload, placements=placements, rejected=reserved.rejected)
    except PlacementError as error:
        return Result(workload, error=str(error), candidates=len(nodes))
    return _with_node_facts(engine, result, len(nodes))


def _decide_gang(coordinator: GangCoordinator, workload: Workload, nodes: Sequence[str]) -> Result:
    """All or nothing through ``GangCoordinator``: every member planned against one snapshot, then reserved."""
    for spec in workload.pods:
        status = coordinator.add_member(validate_pod(spec))
        if status is not None and status.phase is GangPhase.INVALID:
            raise InvalidRequest(status.message)
    answer = coordinator.place(NAMESPACE, workload.key, nodes)
    if isinstance(answer, GangPlacement):
        placements = answer.members
        state, status = GangState.PLACED, answer.status
    else:
        placements = ()
        state = GangState.INFEASIBLE if answer.phase is GangPhase.UNSCHEDULABLE else GangState.WAITING
        status = answer
        # A demo gang that waits would otherwise be retried by nobody; drop it so it holds no place in a queue.
        for spec in workload.pods:
            coordinator.observe_deleted(spec.namespace, spec.name)
    minimum = status.min_available or len(workload.pods)
    outcome = GangOutcome(state, status.message, placements, placed=len(placements), min_member=minimum)
    return Result(workload, placements=placements, gang=outcome)


def _bind(engine: PlacementEngine, coordinator: GangCoordinator | None, result: Result) -> None:
    if coordinator is None and isinstance(engine.gangs, CoordinatedGangs):
        coordinator = engine.gangs.coordinator  # the engine's own: it must see its members bound
    specs = {pod.name: pod for pod in result.workload.pods}
    for placement in result.placements:
        pending = validate_pod(specs[placement.name])
        usage = PodUsage(
            namespace=placement.namespace,
            name=placement.name,
            node=placement.node,
            demand=demand_of(pending.pod),
            cells=placement.cells,
            gpus=placement.gpus,
            isolated=pending.intent.exclusive,
        )
        if coordinator is not None and result.workload.is_gang:
            coordinator.observe_bound(usage)  # the member is bound: its group leaves the permit stage
        else:
            engine.reservations.observe_pod(usage)


def _with_node_facts(engine: PlacementEngine, result: Result, candidates: int) -> Result:
    """Add what the printout needs about the chosen nodes: GPU link classes, GPU NUMA, kubelet policy."""
    links: dict[str, dict[frozenset[int], str]] = {}
    gpu_numa: dict[str, dict[int, int | None]] = {}
    policies: dict[str, str] = {}
    for node in {p.node for p in result.placements}:
        view = engine.node_topology(node)
        links[node] = {frozenset((a, b)): kind for a, b, kind in view.gpu_links}
        gpu_numa[node] = {gpu.index: gpu.numa_cell for gpu in view.gpus}
        policies[node] = view.kubelet.topology_manager_policy
    return Result(
        result.workload,
        placements=result.placements,
        rejected=result.rejected,
        gang=result.gang,
        error=result.error,
        candidates=candidates,
        links=links,
        gpu_numa=gpu_numa,
        policies=policies,
    )


# --- printing -------------------------------------------------------------------------------------


def link_summary(links: Mapping[frozenset[int], str], gpus: Sequence[int]) -> str:
    """The link classes inside a GPU set: "NV18 (all 6 pairs)", or the weakest first with the pairs."""
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    if not pairs:
        return "single GPU"
    classes = Counter(links.get(frozenset(pair), "unknown") for pair in pairs)
    if len(classes) == 1:
        (kind,) = classes
        return f"{kind} (every pair)" if len(pairs) > 1 else f"{kind}"
    return ", ".join(f"{a}-{b} {links.get(frozenset((a, b)), 'unknown')}" for a, b in pairs)


def _requests(pod: PodSpec) -> str:
    requests = pod.containers[0].requests
    parts = []
    for name, value in requests.items():
        parts.append(f"{name} {value}")
    return ", ".join(parts)


def _breakdown(placement: Placement) -> str:
    parts = " + ".join(f"{name} {points:.1f}" for name, points in placement.breakdown.items())
    return f"{placement.score:.1f} = {parts}"


def _cells(placement: Placement, policy: str) -> str:
    cells = ",".join(str(c) for c in placement.cells) or "-"
    how = "pinned by the kubelet" if placement.pinned else f"predicted; kubelet policy {policy} pins nothing"
    return f"{cells} ({how})"


def _gpus(result: Result, placement: Placement) -> str:
    if not placement.gpus:
        return "none"
    numa = result.gpu_numa.get(placement.node, {})
    cells = sorted({numa.get(g) for g in placement.gpus}, key=lambda c: -1 if c is None else c)
    where = ",".join("?" if c is None else str(c) for c in cells)
    ids = ",".join(str(g) for g in placement.gpus)
    if len(placement.gpus) == 1:
        return f"{ids} on NUMA {where}"
    return f"{ids} on NUMA {where}, links {link_summary(result.links.get(placement.node, {}), placement.gpus)}"


def rejection_summary(rejected: Sequence[Rejections], limit: int = _TOP_REASONS) -> list[str]:
    """The most common reasons first, each with its node count and a few example nodes."""
    ordered = sorted(rejected, key=lambda group: (-len(group.nodes), group.reason))
    lines = []
    for reason, _, nodes in ordered[:limit]:
        examples = ", ".join(sorted(nodes)[:_EXAMPLE_NODES]) + (", ..." if len(nodes) > _EXAMPLE_NODES else "")
        lines.append(f"{len(nodes):>2} x {reason}  [{examples}]")
    if len(ordered) > limit:
        lines.append(f"     ... and {len(ordered) - limit} more reason(s)")
    return lines


def print_result(number: int, result: Result, out: TextIO) -> None:
    workload = result.workload
    print(f"[{number}] {workload.title}", file=out)
    print(f"    why      {workload.shows}", file=out)
    print(f"    nodes    {result.candidates} candidates (every node)", file=out)
    rules = scheduling_rules(workload.pods[0])
    if rules:
        print(f"    rules    {rules}", file=out)
    if result.error is not None:
        pod = workload.pods[0]
        print(f"    pod      {pod.namespace}/{pod.name}: {_annotations(pod)}", file=out)
        print(f"    REFUSED  {result.error}", file=out)
        return
    if workload.is_gang:
        _print_gang(result, out)
        return
    pod = workload.pods[0]
    print(f"    pod      {pod.namespace}/{pod.name}: {_requests(pod)}{_annotation_suffix(pod)}", file=out)
    if not result.placements:
        print("    NOT PLACED: no candidate node holds it", file=out)
    for placement in result.placements:
        policy = result.policies.get(placement.node, "none")
        print(f"    node     {placement.node}  ({machine_type(placement.node)}, kubelet {policy})", file=out)
        print(f"    NUMA     {_cells(placement, policy)}", file=out)
        if placement.claims:
            for claim in placement.claims:
                devices = ",".join(d.device for d in claim.devices)
                print(f"    claim    {claim.namespace}/{claim.name}: devices {devices} ({DRIVER})", file=out)
                print(f"             {'; '.join(claim.why)}", file=out)
        else:
            print(f"    GPUs     {_gpus(result, placement)}", file=out)
        print(f"    score    {_breakdown(placement)}", file=out)
    _print_rejections(result.rejected, out)


def _print_gang(result: Result, out: TextIO) -> None:
    workload = result.workload
    gang = result.gang
    assert gang is not None  # a gang workload's result always carries its outcome
    print(
        f"    gang     {NAMESPACE}/{workload.key}: {len(workload.pods)} members, min-available {gang.min_member}, "
        "all or nothing (planned together against one snapshot, then reserved at once)",
        file=out,
    )
    print(f"    state    {gang.state.value}: {gang.reason}", file=out)
    for pod in workload.pods:
        placement = next((p for p in result.placements if p.name == pod.name), None)
        if placement is None:
            print(f"    - {pod.name:<15} {_requests(pod)}: nothing reserved", file=out)
            continue
        policy = result.policies.get(placement.node, "none")
        gpus = f"  GPUs {_gpus(result, placement)}" if placement.gpus else ""
        print(f"    - {pod.name:<15} -> {placement.node:<21} NUMA {_cells(placement, policy)}{gpus}", file=out)
        if placement.breakdown:  # the gang planner chooses nodes for the group; it gives no per-member score
            print(f"      {'':<15}    score {_breakdown(placement)}", file=out)
    _print_rejections(result.rejected, out)


def _print_rejections(rejected: Sequence[Rejections], out: TextIO) -> None:
    if not rejected:
        return
    print(f"    rejected {sum(len(group.nodes) for group in rejected)} node(s), top reasons:", file=out)
    for line in rejection_summary(rejected):
        print(f"      {line}", file=out)


def scheduling_rules(pod: PodSpec) -> str:
    """The pod's nodeSelector and tolerations as one line, tolerations as ``kubectl describe`` prints them."""
    parts = [f"nodeSelector {key}={value}" for key, value in sorted(pod.node_selector.items())]
    for toleration in pod.tolerations:
        taint = f"{toleration.get('key', '')}:{toleration.get('effect', '')}".strip(":")
        parts.append(f"tolerates {taint} op={toleration.get('operator') or 'Equal'}")
    return "; ".join(parts)


def _annotations(pod: PodSpec) -> str:
    return ", ".join(f"{k}={v}" for k, v in pod.annotations.items()) or "no annotations"


def _annotation_suffix(pod: PodSpec) -> str:
    return f"; {_annotations(pod)}" if pod.annotations else ""


PLAINTEXT = "-plaintext"


def grpcurl_connection(*, tls: bool, client_certificates: bool) -> str:
    """grpcurl's flags for how the demo service listens: ``-plaintext``, or the CA that signed its certificate
    and, when it asks for one, a client certificate (placeholders in capitals: the files are the user's)."""
    if not tls:
        return PLAINTEXT
    return "-cacert CA.crt" + (" -cert CLIENT.crt -key CLIENT.key" if client_certificates else "")


def grpcurl_commands(listen_address: str, connection: str = PLAINTEXT) -> list[str]:
    """Commands to try against the running demo service (server reflection is on, so no proto files);
    ``connection``: ``grpcurl_connection``'s flags."""
    address = listen_address
    explain = (
        '{"node":"dgx-a100-0","pod":{"namespace":"demo","name":"try-me",'
        '"annotations":{"numa.scheduling.kubenexus.io/policy":"single-numa"},'
        '"tolerations":[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}],'
        '"containers":[{"name":"main","requests":{"cpu":"8","memory":"32Gi","nvidia.com/gpu":"2"},'
        '"limits":{"cpu":"8","memory":"32Gi","nvidia.com/gpu":"2"}}]}}'
    )
    explain_claim = (
        '{"node":"hgx-h100-dra-1","pod":{"namespace":"demo","name":"try-dra","uid":"try-dra",'
        f'"resourceClaims":[{{"name":"gpus","resourceClaimName":"{EXPLAIN_CLAIM[0]}"}}],'
        f'"tolerations":[{{"key":"{DRA_TAINT.key}","operator":"Exists","effect":"NoSchedule"}}],'
        '"containers":[{"name":"main","requests":{"cpu":"8","memory":"32Gi"},"limits":{"cpu":"8","memory":"32Gi"}}]}}'
    )
    return [
        f"grpcurl {connection} {address} list",
        f"grpcurl {connection} {address} grpc.health.v1.Health/Check",
        f"grpcurl {connection} {address} {SERVICE}/ListNodes",
        f'grpcurl {connection} -d \'{{"node":"hgx-h100-0"}}\' {address} {SERVICE}/GetNodeTopology',
        f"grpcurl {connection} -d '{explain}' {address} {SERVICE}/Explain",
        f"grpcurl {connection} -d '{explain_claim}' {address} {SERVICE}/Explain",
    ]


def run_demo(
    engine: PlacementEngine,
    *,
    out: TextIO,
    listen_address: str = DEFAULT_LISTEN_ADDRESS,
    connection: str = PLAINTEXT,
) -> None:
    """Schedule the sample mix on ``engine``, print every decision, then the grpcurl commands to try
    (``connection``: how grpcurl reaches the service, ``grpcurl_connection``)."""
    names = engine.index.node_names()
    counts = Counter(machine_type(n) + (" (DRA)" if DRA_SUFFIX in n else "") for n in names)
    fleet = ", ".join(f"{count} x {stem}" for stem, count in counts.items())
    print(f"KubeNexus placement demo: {len(names)} nodes ({fleet})", file=out)
    print(
        f"Node labels as in a cluster: {HOSTNAME_LABEL}, {OS_LABEL}, {ARCH_LABEL}, {INSTANCE_TYPE_LABEL} (the "
        f"machine type), {ZONE_LABEL} ({' and '.join(ZONES)}: even and odd node numbers); GPU nodes also "
        f"{GPU_PRESENT_LABEL}=true and the taint {GPU_TAINT.key}={GPU_TAINT.value}:{GPU_TAINT.effect}, which "
        "the GPU pods below tolerate. The DRA nodes publish their GPUs as ResourceSlices (NVIDIA's DRA driver) "
        f"and carry {DRA_TAINT.key}={DRA_TAINT.value}:{DRA_TAINT.effect} instead: only pods with claims go there.",
        file=out,
    )
    print("Each block is one decision, taken in order; each sees what the earlier ones placed.", file=out)
    print("Placed pods are then marked bound, as the binder would bind them: they stay for grpcurl.\n", file=out)
    for number, result in enumerate(schedule_sample_mix(engine), start=1):
        print_result(number, result, out)
        print(file=out)
    print(f"The service keeps running on {listen_address}. Try:", file=out)
    if connection != PLAINTEXT:
        print("  (TLS: CA.crt is the CA that signed its certificate; CLIENT.crt/.key a client one it trusts)", file=out)
    for command in grpcurl_commands(listen_address, connection):
        print(f"  {command}", file=out)
