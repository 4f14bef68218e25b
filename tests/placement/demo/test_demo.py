"""The one-command demo: its embedded machines, its cluster, and what each sample decision shows."""

from __future__ import annotations

import io
import json
import shlex
import time
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import json_format

from agent.discovery import discover
from agent.hostfs import HostFS
from kubenexus.topology import json_codec
from kubenexus.topology.model import NodeTopology, PathKind
from kubenexus.topology.topo_matrix import parse_topo_matrix
from placement.api.codec import decode_pod
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import POLICY_KEY
from placement.core.constraints.constraint_types import NodeFacts, Taint, TaintEffect
from placement.core.intent import NumaIntentPolicy
from placement.demo import (
    FLEET,
    THIS_MACHINE,
    Result,
    Workload,
    build_demo_cluster,
    demo_pod,
    grpcurl_commands,
    load_machine,
    machine_type,
    node_facts,
    run_demo,
    schedule_sample_mix,
)
from placement.demo.dra import DRA_TAINT, DRA_TOLERATION, dra_node_names
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.service.results import GangState
from placement.state.gang_coordinator import DEFAULT_PERMIT_TIMEOUT_S, GangPhase
from tests import REPO
from tests.conftest import GPU_DIR, require_shared
from tests.fake_sysfs import build_two_socket_host
from tools.build_demo_machines import MACHINES_DIR, machine_documents, main

GPU_MACHINES = ("hgx-h100", "dgx-a100", "l40s-4x", "a100-pcie-nvbridge")
FLEET_SIZE = sum(count for _, count in FLEET)
DRA_NODES = [name for name, _ in dra_node_names()]
ZONE = "topology.kubernetes.io/zone"
# The taint GPU node pools carry, and kube-scheduler's words (v1.37) for a node whose taint a pod does not
# tolerate (the DRA nodes' taint reads the same).
GPU_TAINT = Taint("nvidia.com/gpu", TaintEffect.NO_SCHEDULE, "present")
UNTOLERATED = "node(s) had untolerated taint(s)"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


# --- the machine files ------------------------------------------------------------------------------


def test_machine_files_are_what_the_generator_writes() -> None:
    documents = machine_documents()
    assert sorted(documents) == sorted(p.name for p in MACHINES_DIR.glob("*.json"))
    for name, text in documents.items():
        assert (MACHINES_DIR / name).read_text() == text, f"run python -m tools.build_demo_machines ({name})"
    assert main(["--check"]) == 0


def test_generator_writes_and_removes_stale_files(tmp_path: Path) -> None:
    (tmp_path / "retired-machine.json").write_text("{}")
    assert main(["--check", "--output", str(tmp_path)]) == 1
    assert main(["--output", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(machine_documents())
    assert main(["--check", "--output", str(tmp_path)]) == 0


@pytest.mark.parametrize("stem", [stem for stem, _ in FLEET])
def test_machine_file_decodes_and_round_trips(stem: str) -> None:
    text = (MACHINES_DIR / f"{stem}.json").read_text()
    topology = json_codec.loads(text)
    assert json_codec.dumps(topology, indent=2) + "\n" == text
    assert load_machine(stem) == topology  # the package-data path reads the same file
    assert topology.kubelet is not None
    assert topology.distances is not None
    cpus = sorted(c for cell in topology.numa_cells for c in cell.cpus)
    assert cpus == list(topology.machine.online_cpus)
    assert {zone.numa_id for zone in topology.zone_resources} == {cell.id for cell in topology.numa_cells}


def _matrix(topology: NodeTopology) -> dict[frozenset[str], str]:
    """GPU pairs as ``nvidia-smi topo -m`` prints them: NVML's answer where the agent kept it apart."""
    return {
        frozenset((link.a, link.b)): link.label if link.path is PathKind.NVLINK else (link.nvml_path or link.path).value
        for link in topology.links
        if link.a.startswith("GPU") and link.b.startswith("GPU")
    }


@pytest.mark.parametrize(
    ("stem", "capture"),
    [
        ("hgx-h100", "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt"),
        ("l40s-4x", "aws_g6e.12xlarge_4xL40S__gnosia93-training-on-eks.txt"),
        ("a100-pcie-nvbridge", "pcie_8gpu_nvlink_bridge_pairs_NV12__k8s-device-plugin-issue546.txt"),
    ],
)
def test_gpu_machines_match_their_real_captures(stem: str, capture: str) -> None:
    real = parse_topo_matrix(require_shared(GPU_DIR / capture).read_text())
    machine = load_machine(stem)
    assert _matrix(machine) == _matrix(real)
    for ours, theirs in zip(machine.gpus, real.gpus, strict=True):
        assert (ours.index, ours.numa_node, ours.cpu_affinity) == (theirs.index, theirs.numa_node, theirs.cpu_affinity)


def test_dgx_a100_nvlink_matches_the_a100_nvswitch_capture() -> None:
    # p4d.24xlarge is another 8x A100 SXM4 NVSwitch board: same NV12 everywhere, different CPUs and NUMA.
    real = parse_topo_matrix(
        require_shared(GPU_DIR / "aws_p4d.24xlarge_8xA100__gnosia93-training-on-eks.txt").read_text()
    )
    assert _matrix(load_machine("dgx-a100")) == _matrix(real)


def test_published_facts_of_the_nvswitch_machines() -> None:
    dgx = load_machine("dgx-a100")
    assert [gpu.numa_node for gpu in dgx.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert len(dgx.numa_cells) == 8
    assert dgx.distances is not None
    assert dgx.distances.get(0, 1) == 12
    assert dgx.distances.get(0, 4) == 32
    hgx = load_machine("hgx-h100")
    links = {frozenset((link.a, link.b)): link.label for link in hgx.links}
    assert len(hgx.nics) == 8
    assert all(links[frozenset((f"GPU{i}", f"NIC{i}"))] == "PIX" for i in range(8))  # each GPU's own ConnectX-7
    assert {gpu.pci_bus_id for gpu in hgx.gpus} >= {"0000:18:00.0", "0000:db:00.0"}


def test_kubelet_policies_per_machine_type() -> None:
    policies = {stem: load_machine(stem).kubelet for stem, _ in FLEET}
    assert {stem: k.topology_manager_policy for stem, k in policies.items() if k is not None} == {
        "hgx-h100": "single-numa-node",
        "dgx-a100": "restricted",
        "l40s-4x": "best-effort",
        "a100-pcie-nvbridge": "best-effort",
        "cpu-2s": "none",
    }


# --- the cluster ------------------------------------------------------------------------------------


def test_cluster_builds_without_discovery_shared_data_or_nvml() -> None:
    engine = build_demo_cluster()
    names = engine.index.node_names()
    assert len(names) == FLEET_SIZE + len(DRA_NODES)
    assert Counter(machine_type(n) for n in names) == Counter(dict(FLEET)) + Counter(s for _, s in dra_node_names())
    assert all(len(engine.index.dra.inventory(n, {}).devices) == 8 for n in DRA_NODES)  # the driver's slices


def _facts(engine: PlacementEngine, node: str) -> NodeFacts:
    facts = engine.index.facts.node(node)
    assert facts is not None, node
    return facts


def test_every_node_carries_the_labels_and_taints_of_a_real_node() -> None:
    engine = build_demo_cluster()
    zones: Counter[str] = Counter()
    for node, stem in _fleet_names():
        facts = _facts(engine, node)
        labels = dict(facts.labels)
        gpu = stem in GPU_MACHINES
        assert labels == {
            "kubernetes.io/hostname": node,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": stem,
            ZONE: labels[ZONE],
            **({"nvidia.com/gpu.present": "true"} if gpu else {}),
        }
        assert facts.taints == ((GPU_TAINT,) if gpu else ())
        assert not facts.unschedulable
        zones[labels[ZONE]] += 1
    assert zones == {"zone-a": FLEET_SIZE // 2, "zone-b": FLEET_SIZE // 2}  # every machine type in both zones
    for node in DRA_NODES:  # GPUs from ResourceSlices: the DRA nodes keep device-plugin pods away
        assert _facts(engine, node).taints == (DRA_TAINT,)
    # The same facts are in the slots the constraint plugins read.
    taints, matrix = engine.index.facts.taint_columns()
    assert taints == (GPU_TAINT, DRA_TAINT)
    slots = engine.index.slots([node for node, stem in _fleet_names() if stem in GPU_MACHINES])
    assert int(matrix[:, 0].sum()) == len(slots) == 12
    assert matrix[slots, 0].all()


def test_this_machine_joins_when_discovered(tmp_path: Path) -> None:
    host = build_two_socket_host(tmp_path)
    engine = build_demo_cluster(discover_this_machine=lambda: discover(HostFS(str(host)), nvml=None))
    assert THIS_MACHINE in engine.index.node_names()
    assert len(engine.node_topology(THIS_MACHINE).cells) == 2
    facts = _facts(engine, THIS_MACHINE)
    # A bare-metal node: the kubelet's labels, no cloud provider's; no GPU, no GPU taint. This fake host
    # does not say its architecture (no /proc/cpuinfo model line): no label rather than a guess.
    assert engine.node_topology(THIS_MACHINE).gpus == ()
    assert dict(facts.labels) == {"kubernetes.io/hostname": THIS_MACHINE, "kubernetes.io/os": "linux"}
    assert facts.taints == ()
    # This machine with GPUs joins the GPU pool: labelled and tainted as the embedded GPU nodes are.
    gpu_host = node_facts(THIS_MACHINE, load_machine("hgx-h100"))
    assert dict(gpu_host.labels) == {
        "kubernetes.io/hostname": THIS_MACHINE,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.present": "true",
    }
    assert gpu_host.taints == (GPU_TAINT,)


def test_this_machine_is_skipped_with_a_note_when_discovery_fails(tmp_path: Path) -> None:
    note = io.StringIO()
    engine = build_demo_cluster(
        discover_this_machine=lambda: discover(HostFS(str(tmp_path / "absent")), nvml=None), out=note
    )
    assert THIS_MACHINE not in engine.index.node_names()
    assert len(engine.index.node_names()) == FLEET_SIZE + len(DRA_NODES)
    assert "this machine is not in the demo cluster" in note.getvalue()


# --- the sample mix ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def decided() -> tuple[PlacementEngine, dict[str, Result]]:
    engine = build_demo_cluster()
    return engine, {result.workload.key: result for result in schedule_sample_mix(engine)}


def test_single_numa_pod_lands_on_one_cell_of_a_gpu_node(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    _, results = decided
    (placement,) = results["single-numa"].placements
    assert machine_type(placement.node) in GPU_MACHINES
    assert len(placement.cells) == 1
    assert len(placement.gpus) == 1
    assert results["single-numa"].gpu_numa[placement.node][placement.gpus[0]] == placement.cells[0]


def test_isolated_pod_is_alone_on_its_cell(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    engine, results = decided
    (isolated,) = results["isolated"].placements
    assert len(isolated.cells) == 1
    others = [p for r in results.values() for p in r.placements if p.name != isolated.name]
    assert not [p for p in others if p.node == isolated.node and set(p.cells) & set(isolated.cells)]
    view = engine.node_topology(isolated.node)
    assert next(cell for cell in view.cells if cell.id == isolated.cells[0]).isolated


def test_training_gang_gets_nvlink_sets_all_together(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    _, results = decided
    result = results["llm-train"]
    assert result.gang is not None
    assert result.gang.state is GangState.PLACED
    assert len(result.placements) == 8 == result.gang.min_member
    held: Counter[tuple[str, int]] = Counter()
    for placement in result.placements:
        assert len(placement.gpus) == 4
        assert len(placement.cells) == 1
        links = result.links[placement.node]
        pairs = [frozenset((a, b)) for a in placement.gpus for b in placement.gpus if a < b]
        assert all(links[pair].startswith("NV") for pair in pairs)
        held.update((placement.node, gpu) for gpu in placement.gpus)
    assert max(held.values()) == 1  # no GPU handed out twice


def test_placed_pods_stay_bound_for_grpcurl(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    engine, results = decided
    placed = {(p.node, p.name) for r in results.values() for p in r.placements}
    on_nodes = {(node, pod.name) for node in engine.index.node_names() for pod in engine.node_topology(node).pods}
    assert placed == on_nodes
    assert all(pod.bound for node in engine.index.node_names() for pod in engine.node_topology(node).pods)
    assert engine.reservations.pending() == {}  # nothing left to expire


def test_gpu_pods_tolerate_the_gpu_taint_and_others_do_not(
    decided: tuple[PlacementEngine, dict[str, Result]],
) -> None:
    _, results = decided
    for result in results.values():
        for pod in result.workload.pods:
            gpus = "nvidia.com/gpu" in pod.containers[0].requests
            expected = gpus and result.workload.key != "untolerated"
            if pod.resource_claims:  # GPUs from a claim: the DRA nodes' taint instead
                assert pod.tolerations == (DRA_TOLERATION,), pod.name
                continue
            assert pod.tolerations == (
                ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},) if expected else ()
            ), pod.name
    # The CPU-only isolated pod could take a GPU node's hugepage-less cells only if it tolerated the taint.
    assert UNTOLERATED in {group.reason for group in results["isolated"].rejected}


def test_bridge_pair_is_preferred_on_pcie_machines(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    _, results = decided
    (placement,) = results["nvlink-bridge"].placements
    assert results["nvlink-bridge"].links[placement.node][frozenset(placement.gpus)] == "NV12"
    # Its nodeSelector (instance type) is judged by the service: every other node says so.
    reasons = {group.reason: set(group.nodes) for group in results["nvlink-bridge"].rejected}
    assert reasons[SELECTOR_MISMATCH] == {n for n, stem in _fleet_names() if stem != "a100-pcie-nvbridge"}


def test_zone_pinned_pod_lands_in_its_zone_on_a_cpu_node(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    engine, results = decided
    result = results["zone-pinned"]
    assert dict(result.workload.pods[0].node_selector) == {ZONE: "zone-b"}
    (placement,) = result.placements
    assert machine_type(placement.node) == "cpu-2s"
    assert dict(_facts(engine, placement.node).labels)[ZONE] == "zone-b"
    reasons = {group.reason: set(group.nodes) for group in result.rejected}
    names = _fleet_names()
    # kube-scheduler checks taints before node affinity: the GPU and DRA nodes of both zones refuse by taint.
    assert reasons[UNTOLERATED] == {n for n, stem in names if stem in GPU_MACHINES} | set(DRA_NODES)
    assert reasons[SELECTOR_MISMATCH] == {n for n, stem in names if stem == "cpu-2s" and int(n[-1]) % 2 == 0}


def test_gpu_pod_without_the_toleration_is_refused_by_every_gpu_node(
    decided: tuple[PlacementEngine, dict[str, Result]],
) -> None:
    _, results = decided
    result = results["untolerated"]
    assert not result.placed
    assert result.error is None
    reasons = {group.reason: set(group.nodes) for group in result.rejected}
    names = _fleet_names()
    assert reasons == {
        UNTOLERATED: {n for n, stem in names if stem in GPU_MACHINES} | set(DRA_NODES),
        "Insufficient nvidia.com/gpu": {n for n, stem in names if stem not in GPU_MACHINES},
    }


def test_spark_gang_stays_on_cpu_nodes_off_the_isolated_cell(
    decided: tuple[PlacementEngine, dict[str, Result]],
) -> None:
    _, results = decided
    (isolated,) = results["isolated"].placements
    spark = results["spark-etl"]
    assert spark.gang is not None
    assert spark.gang.state is GangState.PLACED
    assert len(spark.placements) == 7
    assert {machine_type(p.node) for p in spark.placements} == {"cpu-2s"}
    assert all(not (p.node == isolated.node and set(p.cells) & set(isolated.cells)) for p in spark.placements)


def test_invalid_policy_is_refused_with_the_accepted_values(
    decided: tuple[PlacementEngine, dict[str, Result]],
) -> None:
    _, results = decided
    result = results["invalid-policy"]
    assert not result.placed
    assert result.error is not None
    assert POLICY_KEY in result.error
    assert "'single-numa-node'" in result.error
    assert all(policy.value in result.error for policy in NumaIntentPolicy)


def test_infeasible_pod_lists_a_reason_for_every_node(decided: tuple[PlacementEngine, dict[str, Result]]) -> None:
    _, results = decided
    result = results["infeasible"]
    assert not result.placed
    assert result.error is None
    everyone = [n for n, _ in _fleet_names()] + DRA_NODES
    assert sorted(n for group in result.rejected for n in group.nodes) == sorted(everyone)
    assert all(group.reason for group in result.rejected)


def _fleet_names() -> list[tuple[str, str]]:
    return [(f"{stem}-{n}", stem) for stem, count in FLEET for n in range(count)]


def test_gang_that_cannot_fully_fit_holds_nothing() -> None:
    engine = build_demo_cluster()
    schedule_sample_mix(engine)
    before = {name: engine.node_topology(name).pods for name in engine.index.node_names()}
    # Three nodes at most still have 8 free GPUs: a gang of eight 8-GPU members must wait, holding nothing.
    members = tuple(
        demo_pod(f"big-train-{n}", cpu="8", memory="64Gi", gpus=8, group=("big-train", 8)) for n in range(8)
    )
    big = Workload("big-train", "8 x 8-GPU gang", "all or nothing", members, gang_min_member=8)
    (result,) = schedule_sample_mix(engine, [big])
    assert result.gang is not None
    assert result.gang.state is not GangState.PLACED
    assert result.placements == ()
    assert "can never fit" in result.gang.reason
    assert engine.reservations.pending() == {}
    assert {name: engine.node_topology(name).pods for name in engine.index.node_names()} == before


def test_demo_placements_stay_past_the_permit_timeout() -> None:
    """The demo binds its gangs itself: the coordinator sees every member bound, so no permit timeout fires
    and nothing is placed again, however long the demo service runs (docs/api.md's examples rely on it)."""
    engine = build_demo_cluster()
    schedule_sample_mix(engine)
    gangs = engine.gangs
    assert isinstance(gangs, CoordinatedGangs)
    before = {name: engine.node_topology(name).pods for name in engine.index.node_names()}
    later = time.monotonic() + 10 * DEFAULT_PERMIT_TIMEOUT_S
    gangs.coordinator.tick(now=later)
    assert {name: engine.node_topology(name).pods for name in engine.index.node_names()} == before
    assert {s.group: s.phase for s in gangs.coordinator.statuses()} == {
        "demo/llm-train": GangPhase.BOUND,
        "demo/spark-etl": GangPhase.BOUND,
    }
    assert gangs.coordinator.permit_timeouts == 0
    assert engine.reservations.pending() == {}


def test_run_demo_prints_every_decision_and_the_grpcurl_commands() -> None:
    engine = build_demo_cluster()
    out = io.StringIO()
    run_demo(engine, out=out, listen_address="127.0.0.1:7070")
    text = out.getvalue()
    reference = {r.workload.key: r for r in schedule_sample_mix(build_demo_cluster())}
    for result in reference.values():
        assert result.workload.title in text
        for placement in result.placements:
            assert f"{placement.name}" in text
            assert placement.node in text
    assert "REFUSED" in text
    assert POLICY_KEY in text
    assert "NOT PLACED" in text
    assert "Insufficient nvidia.com/gpu" in text
    # the GPU pod without the toleration, refused by every GPU node and every DRA node
    assert f"{12 + len(DRA_NODES)} x {UNTOLERATED}" in text
    assert "rules    nodeSelector topology.kubernetes.io/zone=zone-b\n" in text
    assert "rules    tolerates nvidia.com/gpu:NoSchedule op=Exists\n" in text
    assert "the taint nvidia.com/gpu=present:NoSchedule" in text
    assert "NV18 (every pair)" in text  # the training gang's GPU sets, with their link class
    assert "grpcurl -plaintext 127.0.0.1:7070 list" in text
    assert "kubenexus.placement.v1.Placement/GetNodeTopology" in text


def test_the_block_docs_demo_shows_is_what_the_demo_prints() -> None:
    """docs/demo.md explains the output on its first block: that block, verbatim, from the embedded cluster."""
    text = (REPO / "docs" / "demo.md").read_text()
    explained = text.split("## What the output means", 1)[1]
    shown = explained.split("```\n", 2)[1]
    out = io.StringIO()
    run_demo(build_demo_cluster(), out=out, listen_address="127.0.0.1:50051")
    assert shown.startswith("[1] ")
    assert shown in out.getvalue()


def test_printed_explain_command_tolerates_the_gpu_taint_and_fits() -> None:
    """The Explain the demo prints asks about a GPU pod on a GPU node: with its toleration it gets the
    NV12 pair on NUMA 1 of dgx-a100-0 (docs/demo.md), without it the node's taint refuses it."""
    engine = build_demo_cluster()
    schedule_sample_mix(engine)
    (explain,) = [c for c in grpcurl_commands("127.0.0.1:50051") if c.endswith("/Explain") and "dgx-a100-0" in c]
    request = json_format.Parse(shlex.split(explain)[3], pb.ExplainRequest())
    answer = engine.explain(decode_pod(request), request.node)
    assert answer.placement is not None
    assert (answer.placement.cells, answer.placement.gpus) == ((1,), (2, 3))
    document = json.loads(shlex.split(explain)[3])
    del document["pod"]["tolerations"]
    refused = engine.explain(decode_pod(json_format.ParseDict(document, pb.ExplainRequest())), request.node)
    assert refused.placement is None
    assert refused.rejection is not None
    assert refused.rejection.reason == UNTOLERATED


def test_the_dra_pod_gets_its_devices_and_the_printed_explain_shows_why() -> None:
    """The sample mix's claim gets 4 NVSwitch-connected GPUs of one DRA node on the cell its CPUs are pinned
    to; the Explain command the demo prints asks about the other claim and answers with devices and why."""
    engine = build_demo_cluster()
    results = {r.workload.key: r for r in schedule_sample_mix(engine)}
    (placement,) = results["dra-claim"].placements
    assert placement.node in DRA_NODES
    (claim,) = placement.claims
    gpu_cells = {gpu.index: gpu.numa_cell for gpu in engine.node_topology(placement.node).gpus}
    assert {gpu_cells[int(d.device.removeprefix("gpu-"))] for d in claim.devices} == set(placement.cells)
    assert len(claim.devices) == 4
    (explain,) = [c for c in grpcurl_commands("127.0.0.1:50051") if c.endswith("/Explain") and "try-dra" in c]
    request = json_format.Parse(shlex.split(explain)[3], pb.ExplainRequest())
    answer = engine.explain(decode_pod(request), request.node)
    assert answer.placement is not None
    (explained,) = answer.placement.claims
    assert (explained.name, len(explained.devices)) == ("try-gpus", 2)
    assert any(line.startswith("NVLink/NVSwitch connectivity 1.00") for line in explained.why)
