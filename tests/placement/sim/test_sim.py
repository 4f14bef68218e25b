"""The trace-driven simulator: accounting on tiny hand-checked clusters, and calibration on the real trace."""

from __future__ import annotations

import csv
import itertools
import random
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from placement.core.constraints.constraint_types import PodConstraints
from placement.core.pods import PodUsage
from placement.core.topology_manager import TOPOLOGY_AFFINITY_ERROR
from placement.core.vocabulary import GPU_MILLI, GPU_SHARE, PodShape, demand_of
from placement.sim.cli import main
from placement.sim.cluster import OvercommitError, SimCluster, kubelet_pod
from placement.sim.policies import POLICY_NAMES, DefaultScheduler, Ours, make_policy, pending_pod
from placement.sim.run import MAX_ARRIVAL, RunResult, _place_group, arrivals, simulate
from placement.sim.trace import (
    DEFAULT_NODE_LIST,
    DEFAULT_POD_LIST,
    GPU_MODEL_LABEL,
    TRACE_DIR,
    TraceNode,
    TracePod,
    kubelet_policy,
    load_nodes,
    load_pods,
    name_hash,
    node_topology,
    parse_gpu_spec,
    shared_data_dir,
)
from placement.state.cluster_index import ClusterIndex
from tests import TESTS
from tests.conftest import require_shared

TRACE = shared_data_dir() / TRACE_DIR
PUBLISHED_RANDOM = 13.75  # fgd-published-results.txt: default trace, unallocated GPU % at 100% arrival
PUBLISHED_BESTFIT = 7.09
PUBLISHED_FGD = 4.77
# An authored trace in the published format: two V100M16 nodes, two T4 nodes and a CPU node; pods with a
# gpu_spec (one naming a model no node has besides one that some do), an empty one and "nan".
GPU_SPEC_NODES = TESTS / "sim_traces" / "gpu_spec_nodes.csv"
GPU_SPEC_PODS = TESTS / "sim_traces" / "gpu_spec_pods.csv"


def _name_with(policy: str, *, odd: bool | None = None) -> str:
    """A node name whose hash gives the kubelet ``policy`` (and, when asked, an odd or even hash)."""
    return next(
        n
        for i in itertools.count()
        if kubelet_policy(n := f"node-{i}") == policy and (odd is None or name_hash(n) % 2 == odd)
    )


def _pod(name: str, *, cpu: int = 4000, gpus: int = 0, milli: int = 1000, guaranteed: bool = True) -> TracePod:
    return TracePod(name, cpu, 8192, gpus, milli if gpus else 0, guaranteed)


def _eight_gpu(policy: str) -> TraceNode:
    return TraceNode(_name_with(policy), 96_000, 393_216, 8, "G2")


def test_topology_blind_scheduler_counts_every_kubelet_rejection() -> None:
    # An 8-GPU Guaranteed pod on a 2-socket single-numa-node node: its GPUs span both sockets, so the
    # kubelet rejects it whatever the free state; the default scheduler sends it there anyway.
    cluster = SimCluster([_eight_gpu("single-numa-node")])
    result = RunResult(policy="default", seed=0)
    policy = DefaultScheduler(cluster, random.Random(0))
    pods = [_pod(f"p{i}", cpu=8000, gpus=8) for i in range(3)]
    for number, pod in enumerate(pods):
        assert _place_group(cluster, policy, [pod], result, number=number) == [None]
    assert result.affinity_errors == 3
    assert cluster.gpu_left.sum() == 8000  # nothing was charged for a rejected pod
    assert cluster.admit(0, pods[0]).reason == TOPOLOGY_AFFINITY_ERROR


def test_ours_never_sends_a_pod_the_kubelet_rejects() -> None:
    nodes = [_eight_gpu("single-numa-node"), _eight_gpu("restricted")]
    cluster = SimCluster(nodes)
    pods = [_pod(f"p{i}", cpu=8000, gpus=8, guaranteed=False) for i in range(3)]
    policy = Ours(cluster, gangs=False, workload=pods)
    result = RunResult(policy="ours", seed=0)
    placed = [_place_group(cluster, policy, [pod], result, number=n) for n, pod in enumerate(pods)]
    assert result.affinity_errors == 0
    assert result.other_rejections == 0
    # Only the restricted node admits 8 GPUs over two sockets (no exclusive CPUs to disagree): one pod fits.
    assert [p[0] is not None for p in placed] == [True, False, False]
    first = placed[0][0]
    assert first is not None
    assert first.node == 1
    cluster.check()


def test_fractional_gpus_share_one_gpu_up_to_its_capacity() -> None:
    node = TraceNode(_name_with("none"), 16_000, 65_536, 2, "T4")
    cluster = SimCluster([node])
    shares = [600, 500, 400, 300, 200]
    policy = Ours(cluster, gangs=False, workload=[_pod(f"s{m}", cpu=1000, gpus=1, milli=m) for m in shares])
    result = RunResult(policy="ours", seed=0)
    placed = [
        _place_group(cluster, policy, [_pod(f"s{m}", cpu=1000, gpus=1, milli=m)], result, number=10 + n)[0]
        for n, m in enumerate(shares)
    ]
    assert all(p is not None for p in placed)
    on_gpu: dict[int, int] = {}
    for milli, where in zip(shares, placed, strict=True):
        assert where is not None
        on_gpu[where.gpus[0]] = on_gpu.get(where.gpus[0], 0) + milli
    assert sorted(on_gpu.values()) == [1000, 1000]  # best fit: 600+400, 500+300+200
    assert (cluster.gpu_left == 0).all()
    # Nothing is left for a whole GPU, nor for another share.
    assert _place_group(cluster, policy, [_pod("whole", gpus=1)], result, number=1) == [None]
    assert _place_group(cluster, policy, [_pod("tiny", gpus=1, milli=10)], result, number=2) == [None]
    cluster.check()


def test_a_pinned_share_stays_in_the_kubelets_cell() -> None:
    # 2 sockets x 2 GPUs, single-numa-node: GPUs 0 and 1 (socket 0) have 300 left each, GPU 3 is free.
    # The kubelet pins a 460 share to socket 0 (600 left there in all), where no single GPU holds it:
    # ours skips the node, the topology-blind default puts it on GPU 3, away from its pinned CPUs.
    node = TraceNode(_name_with("single-numa-node", odd=False), 32_000, 131_072, 4, "V100M16")
    share = _pod("share", cpu=2000, gpus=1, milli=460)
    for name, expected in (("ours", None), ("default", (3,))):
        cluster = SimCluster([node])
        policy = make_policy(name, cluster, random.Random(0), [share])
        result = RunResult(policy=name, seed=0)
        setup = [_pod("a", gpus=1, milli=700), _pod("b", gpus=1, milli=700), _pod("c", gpus=1)]
        for pod, gpu in zip(setup, (0, 1, 2), strict=True):
            cluster.apply(0, pod, (gpu,), (0,))
            if isinstance(policy, Ours):
                policy.index.upsert_pod(
                    PodUsage("sim", pod.name, node.name, demand_of(kubelet_pod(pod)), cells=(0,), gpus=(gpu,))
                )
        placed = _place_group(cluster, policy, [share], result, number=0)[0]
        assert (None if placed is None else placed.gpus) == expected


def test_index_accounts_a_shared_gpu_once_for_whole_gpu_requests() -> None:
    node = TraceNode("n", 16_000, 65_536, 2, "T4")
    index = ClusterIndex()
    index.upsert_topology("n", node_topology(node, numa=False))
    slot = int(index.slots(["n"])[0])
    share = demand_of(kubelet_pod(_pod("a", gpus=1, milli=300)))
    index.upsert_pod(PodUsage("ns", "a", "n", share, gpus=(1,)))
    index.upsert_pod(PodUsage("ns", "b", "n", share, gpus=(1,)))
    arrays = index.arrays()
    gpu, milli = arrays.column("nvidia.com/gpu"), arrays.column(GPU_SHARE)
    assert gpu is not None
    assert milli is not None
    assert arrays.node_free[gpu, slot] == 1  # GPU 1 is shared: one whole GPU left
    assert arrays.node_free[milli, slot] == 1400
    assert index.gpu_share_left(slot) == {0: 1000, 1: 400}
    assert arrays.gpu_share_free is not None
    assert arrays.gpu_share_free[slot] == 1000
    index.upsert_pod(PodUsage("ns", "c", "n", demand_of(kubelet_pod(_pod("c", gpus=1))), gpus=(0,)))
    assert index.gpu_share_left(slot) == {1: 400}
    assert index.arrays().node_free[milli, slot] == 400


def test_ours_is_given_the_trace_workload_or_learns_it() -> None:
    cluster = SimCluster([_eight_gpu("restricted")])
    pods = [_pod("a", gpus=8), _pod("b", gpus=1)]
    given = make_policy("ours", cluster, random.Random(0), pods)
    learning = make_policy(
        "ours", SimCluster([_eight_gpu("restricted")]), random.Random(0), pods, learned_workload=True
    )
    assert isinstance(given, Ours)
    assert isinstance(learning, Ours)
    assert dict(given.index.workload.target().shapes) == {
        PodShape(4000, GPU_MILLI, 8): 0.5,
        PodShape(4000, GPU_MILLI, 1): 0.5,
    }
    for policy in (given, learning):
        assert policy.choose("p0", pods[1]) is not None
    assert given.index.workload.observed == 0  # a given workload does not move
    assert learning.index.workload.observed == 1
    assert PodShape(4000, GPU_MILLI, 1) in dict(learning.index.workload.target().shapes)


def test_apply_refuses_what_the_node_does_not_hold() -> None:
    cluster = SimCluster([TraceNode("n", 8000, 32_768, 1, "P100")])
    pod = _pod("big", cpu=4000, gpus=1, milli=700)
    cluster.apply(0, pod, (0,), ())
    with pytest.raises(OvercommitError):
        cluster.apply(0, _pod("more", cpu=1000, gpus=1, milli=400), (0,), ())
    cluster.check()


def test_a_gang_is_placed_whole_or_not_at_all_with_coordination() -> None:
    node = TraceNode(_name_with("none"), 96_000, 393_216, 8, "G2")
    gang = [TracePod(f"g{i}", 8000, 8192, 4, 1000, True, gang="gang-g") for i in range(3)]
    for name, partial in (("ours-gang", 0), ("default", 1)):
        cluster = SimCluster([node])
        policy = make_policy(name, cluster, random.Random(0), gang)
        result = RunResult(policy=name, seed=0)
        placed = _place_group(cluster, policy, gang, result, number=0)
        assert result.partial_gangs == partial
        assert sum(p is not None for p in placed) == (0 if partial == 0 else 2)
        cluster.check()


def test_arrivals_reach_the_target_and_keep_gangs_together() -> None:
    pods = [_pod(f"p{i}", gpus=1) for i in range(10)] + [
        TracePod(f"g{i}", 1000, 1024, 2, 1000, False, gang="gang-x") for i in range(2)
    ]
    groups = arrivals(pods, capacity_milli=8000, seed=3)
    assert groups == arrivals(pods, capacity_milli=8000, seed=3)
    demand = sum(p.gpu_request_milli for g in groups for p in g)
    assert demand >= 8000 * MAX_ARRIVAL / 100
    assert [len(g) for g in groups if g[0].gang] == [2]


def test_arrivals_in_the_artifacts_order_bring_the_trace_first_then_its_copies() -> None:
    pods = [_pod(f"p{i}", gpus=1) for i in range(10)]
    order = [p.name for g in arrivals(pods, capacity_milli=8000, seed=3, copies_last=True) for p in g]
    assert sorted(order[:10]) == sorted(p.name for p in pods)
    assert order[:10] != [p.name for p in pods]  # shuffled
    assert all("-copy" in name for name in order[10:])
    assert sum(1000 for _ in order) >= 8000 * MAX_ARRIVAL / 100
    mixed = [p.name for g in arrivals(pods, capacity_milli=8000, seed=3) for p in g]
    assert any("-copy" in name for name in mixed[:10])  # by default the copies arrive among the trace's pods


# --- gpu_spec: the trace's GPU model constraint ---------------------------------------------------------


def test_gpu_spec_is_read_from_the_trace() -> None:
    pods = {pod.name: pod for pod in load_pods(GPU_SPEC_PODS)}
    assert {name: pod.gpu_models for name, pod in pods.items()} == {
        "v100-whole-0": ("V100M16", "V100M32"),
        "v100-share-0": ("V100M16",),
        "t4-share-0": ("T4",),
        "t4-pair-0": ("T4",),
        "t4-pair-1": ("T4",),
        "any-0": (),
        "any-1": (),  # "nan": no constraint, as the trace's README says
        "cpu-0": (),
    }
    assert pods["t4-pair-0"].gang == pods["t4-pair-1"].gang is not None
    assert parse_gpu_spec(" V100M32 | V100M16 |") == ("V100M16", "V100M32")
    assert parse_gpu_spec(None) == parse_gpu_spec("") == parse_gpu_spec("nan") == ()


def test_pods_with_a_gpu_spec_go_to_their_models_under_every_policy() -> None:
    """Nine 1-GPU pods that need a V100M16 (or a V100M32, which no node has) on a cluster with eight V100M16
    GPUs and eight T4 GPUs: every policy puts the first eight on the V100 nodes and refuses the ninth while
    every T4 is free; a pod for a model absent from the cluster goes nowhere; a T4 share goes to a T4."""
    nodes = load_nodes(GPU_SPEC_NODES)
    trace_pods = {pod.name: pod for pod in load_pods(GPU_SPEC_PODS)}
    v100 = [replace(trace_pods["v100-whole-0"], name=f"v100-{i}") for i in range(9)]
    absent = replace(trace_pods["v100-whole-0"], name="a100", gpu_models=("A100",))
    share = trace_pods["t4-share-0"]
    for name in POLICY_NAMES:
        cluster = SimCluster(nodes)
        policy = make_policy(name, cluster, random.Random(0), list(trace_pods.values()))
        result = RunResult(policy=name, seed=0)
        placed = [_place_group(cluster, policy, [pod], result, number=n)[0] for n, pod in enumerate(v100)]
        assert [cluster.nodes[p.node].model if p else None for p in placed] == ["V100M16"] * 8 + [None], name
        assert cluster.gpu_left[[2, 3]].sum() == 8 * GPU_MILLI, name  # the T4s: all free
        assert _place_group(cluster, policy, [absent], result, number=9) == [None], name
        (on,) = _place_group(cluster, policy, [share], result, number=10)
        assert on is not None, name
        assert cluster.nodes[on.node].model == "T4", name
        assert result.affinity_errors == result.other_rejections == 0, name
        cluster.check()


def test_the_ground_truth_refuses_a_pod_on_another_model() -> None:
    nodes = load_nodes(GPU_SPEC_NODES)
    pod = next(p for p in load_pods(GPU_SPEC_PODS) if p.name == "v100-whole-0")
    cluster = SimCluster(nodes)
    assert cluster.fits(pod).tolist() == [True, True, False, False, False]
    with pytest.raises(OvercommitError, match=re.escape("V100M16|V100M32 only, not on t4-0 (T4)")):
        cluster.apply(2, pod, (0,), ())
    cluster.check()


def test_simulating_a_trace_with_gpu_specs_keeps_every_pod_on_its_models() -> None:
    """The whole method on the authored trace, every policy: ``apply`` raises on any pod placed on a model
    its gpu_spec does not allow, so finishing is the check; the gang of T4 pairs is among the arrivals."""
    nodes, pods = load_nodes(GPU_SPEC_NODES), load_pods(GPU_SPEC_PODS)
    for name in POLICY_NAMES:
        result = simulate(nodes, pods, name, seed=1)
        assert result.pods > len(pods), name
        assert result.pods - result.failed > 0, name
        assert result.gangs >= 1, name


def test_an_empty_gpu_spec_changes_nothing(tmp_path: Path) -> None:
    """Pods without a gpu_spec (empty, "nan", or a pod list without the column) carry no constraint: the
    baselines' fit is capacity alone, ours is asked with no constraint, and the GPU model labels ours'
    index now carries change none of its decisions."""
    nodes = load_nodes(GPU_SPEC_NODES)
    with GPU_SPEC_PODS.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for name, drop in (("blank.csv", False), ("without-column.csv", True)):
        fields = [f for f in rows[0] if not (drop and f == "gpu_spec")]
        with (tmp_path / name).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({**row, "gpu_spec": ""} for row in rows)
    blank, without = load_pods(tmp_path / "blank.csv"), load_pods(tmp_path / "without-column.csv")
    assert blank == without
    assert blank == [replace(pod, gpu_models=(), gpu_spec="") for pod in load_pods(GPU_SPEC_PODS)]
    cluster = SimCluster(nodes)
    for pod in blank:
        assert pending_pod("p", pod).constraints == PodConstraints()
        capacity = (cluster.cpu_free >= pod.cpu_milli) & (cluster.memory_free >= pod.memory_mib)
        if pod.gpus:
            capacity &= (cluster.gpu_left >= pod.gpu_milli).sum(axis=1) >= pod.gpus
        assert (cluster.fits(pod) == capacity).all()
    # Ours with the nodes' model labels and ours without them choose alike, pod after pod.
    labelled, bare = (Ours(SimCluster(nodes), gangs=False, workload=blank) for _ in range(2))
    for node in nodes:
        bare.index.facts.remove_node(node.name)
    assert labelled.index.facts.node("v100-0") is not None
    assert bare.index.facts.node("v100-0") is None
    for number, pod in enumerate(blank * 3):
        key = f"p{number}"
        assert labelled.choose(key, pod) == bare.choose(key, pod), pod.name
        labelled.keep(key)
        bare.keep(key)


def test_ours_judges_the_gpu_model_label_through_the_constraint_core() -> None:
    nodes = load_nodes(GPU_SPEC_NODES)
    policy = Ours(SimCluster(nodes), gangs=False, workload=None)
    facts = policy.index.facts.node("t4-0")
    assert facts is not None
    assert facts.labels == ((GPU_MODEL_LABEL, "T4"),)
    assert policy.index.facts.node("cpu-0") is not None
    pod = next(p for p in load_pods(GPU_SPEC_PODS) if p.name == "v100-whole-0")
    decision = policy.reservations.decide(pending_pod("v", pod))
    assert decision.node in ("v100-0", "v100-1")
    rejections = decision.rejections()
    for node in ("t4-0", "t4-1"):
        assert rejections[node].message == "node(s) didn't match Pod's node affinity/selector"


@pytest.fixture(scope="module")
def trace() -> tuple[list[TraceNode], list[TracePod]]:
    require_shared(TRACE / DEFAULT_NODE_LIST)
    return load_nodes(TRACE / DEFAULT_NODE_LIST), load_pods(TRACE / DEFAULT_POD_LIST)


def test_trace_topology_is_deterministic_and_complete(trace: tuple[list[TraceNode], list[TracePod]]) -> None:
    nodes, pods = trace
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert len(pods) == 8152
    assert node_topology(nodes[0]) == node_topology(nodes[0])
    for node in nodes[::50]:
        topology = node_topology(node)
        assert len(topology.gpus) == node.gpus
        assert sum(len(c.cpus) for c in topology.numa_cells) * 1000 == node.cpu_milli
    assert sum(1 for p in pods if p.gang) > 0
    assert not any(p.gpu_models for p in pods)  # this trace's gpu_spec column is empty throughout


def test_calibration_against_the_fgd_paper_reduced(trace: tuple[list[TraceNode], list[TracePod]]) -> None:
    """One seed on every 4th node and pod (the full 10-seed run: docs/benchmarks.md): Random, BestFit and
    FGD land near the paper's figures; the subsample's noise allows 2 points here."""
    nodes, pods = trace[0][::4], trace[1][::4]
    random_fit = simulate(nodes, pods, "random", 0, numa=False).unallocated_at(100)
    best_fit = simulate(nodes, pods, "bestfit", 0, numa=False).unallocated_at(100)
    fgd = simulate(nodes, pods, "fgd", 0, numa=False).unallocated_at(100)
    assert abs(random_fit - PUBLISHED_RANDOM) <= 2.0, random_fit
    assert abs(best_fit - PUBLISHED_BESTFIT) <= 2.0, best_fit
    assert abs(fgd - PUBLISHED_FGD) <= 2.0, fgd
    assert fgd < best_fit < random_fit


def test_simulate_command_writes_its_results(tmp_path: Path, trace: tuple[list[TraceNode], list[TracePod]]) -> None:
    out = tmp_path / "out"
    code = main(["--subsample", "16", "--seeds", "1", "--policies", "default,ours", "--out", str(out), "--no-plots"])
    assert code == 0
    for name in ("summary.csv", "summary.json", "runs.csv", "steps.csv"):
        assert (out / name).stat().st_size > 0
    steps = np.loadtxt(out / "steps.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    assert (steps[:, 1] <= steps[:, 0] + 1e-9).all()  # never more allocated than arrived
