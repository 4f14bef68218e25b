"""Preemption on the trace (``placement.sim.preemption_trace``): kube-scheduler's rule against ours on authored
clusters, and the priority mix on the real trace."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks.sim_preemption import TARGETS, main
from placement.sim.cluster import Placed
from placement.sim.policies import NAMESPACE
from placement.sim.preemption_trace import (
    BATCH_PRIORITY,
    HIGH_PRIORITY,
    KUBE_SCHEDULER,
    OURS,
    RULES,
    SERVICE_PRIORITY,
    KubeCandidate,
    PreemptionRun,
    Running,
    pick_one_node,
    select_victims_on_node,
    simulate_preemption,
    with_priorities,
)
from placement.sim.run import arrivals
from placement.sim.trace import (
    DEFAULT_POD_LIST,
    TRACE_DIR,
    TracePod,
    kubelet_policy,
    load_nodes,
    load_pods,
    shared_data_dir,
)
from tests import TESTS
from tests.conftest import require_shared

# Seven 8-GPU V100M16 nodes (PCIe, 2 sockets x 4 GPUs) whose names give single-numa-node (gpu8-0, 2, 3, 5),
# restricted (gpu8-1, 4) and best-effort (gpu8-6) kubelets; pods of every class: a gang of two 8-GPU pods,
# a gang of four 4-GPU pods, whole single GPUs, GPU shares and CPU-only pods.
NODES = TESTS / "sim_traces" / "preemption_nodes.csv"
PODS = TESTS / "sim_traces" / "preemption_pods.csv"
TRACE = shared_data_dir() / TRACE_DIR
SEEDS = range(4)


def _pod(name: str, *, gpus: int, cpu: int, priority: int) -> TracePod:
    return TracePod(
        name=name,
        cpu_milli=cpu,
        memory_mib=8192 * gpus or 4096,
        gpus=gpus,
        gpu_milli=1000 if gpus else 0,
        guaranteed=True,
        priority=priority,
    )


def _interleaved_node(rule: str) -> tuple[PreemptionRun, int]:
    """One single-numa-node 8-GPU node holding eight low-priority single-GPU pods, bound socket by socket
    in turn (GPU 0, 4, 1, 5, 2, 6, 3, 7): the pods started last sit two in each socket."""
    node = next(n for n in load_nodes(NODES) if kubelet_policy(n.name) == "single-numa-node")
    run = PreemptionRun([node], None, rule=rule, seed=0)
    for order, gpu in enumerate((0, 4, 1, 5, 2, 6, 3, 7)):
        low = _pod(f"low-{order}", gpus=1, cpu=2000, priority=BATCH_PRIORITY)
        assert run.bind_on(low.name, low, 0, gpus=(gpu,)) is not None
    return run, 0


def test_kube_rule_evicts_for_a_preemptor_the_kubelet_then_refuses_where_ours_frees_one_socket() -> None:
    preemptor = _pod("train-4", gpus=4, cpu=8000, priority=HIGH_PRIORITY)

    kube, _ = _interleaved_node(KUBE_SCHEDULER)
    kube.arrive("h0", [preemptor])
    # Reprieved oldest first, the four pods left hold GPUs 0, 4, 1, 5: the freed GPUs 2, 3, 6, 7 count four,
    # but no socket holds the four a single-numa-node kubelet needs in one NUMA cell.
    assert kube.result.unusable == 1
    assert sorted(e.victim.placed.gpus[0] for e in kube.result.evictions) == [2, 3, 6, 7]
    assert kube.result.high_placed == 0
    assert "h0-0" not in kube.running
    kube.finish()

    ours, _ = _interleaved_node(OURS)
    ours.arrive("h0", [preemptor])
    assert ours.result.unusable == 0
    assert ours.result.placed_by_preemption == 1
    assert len(ours.result.evictions) == 4
    freed_cells = {int(ours.cluster.gpu_cell[0, e.victim.placed.gpus[0]]) for e in ours.result.evictions}
    assert len(freed_cells) == 1
    placed = ours.running["h0-0"].placed
    assert {int(ours.cluster.gpu_cell[0, g]) for g in placed.gpus} == freed_cells
    ours.finish()


@pytest.mark.parametrize("rule", RULES)
def test_victims_have_lower_priority_and_leave_the_cluster_and_the_index(rule: str) -> None:
    nodes, pods = load_nodes(NODES), load_pods(PODS)
    preempted = 0
    for seed in SEEDS:
        mixed = with_priorities(pods, seed)
        run = PreemptionRun(nodes, mixed, rule=rule, seed=seed)
        run.fill(arrivals([p for p in mixed if p.priority < HIGH_PRIORITY], run.cluster.gpu_capacity_milli, seed))
        for number, group in enumerate(arrivals([p for p in mixed if p.priority >= HIGH_PRIORITY], 0.0, seed)):
            run.arrive(f"h{number}", group)
        result = run.finish()  # checks that the ground truth holds exactly the running pods
        preempted += len(result.evictions)
        for eviction in result.evictions:
            assert eviction.victim.pod.priority < eviction.preemptor_priority
            assert eviction.victim.key not in run.running
            assert run.service.index.pod(NAMESPACE, eviction.victim.key) is None
            assert run.service.index.facts.pod(NAMESPACE, eviction.victim.key) is None
        assert len({e.victim.key for e in result.evictions}) == len(result.evictions)
        assert result.high_placed == result.placed_at_arrival + result.placed_by_preemption
        assert result.high_placed == sum(1 for r in run.running.values() if r.pod.priority == HIGH_PRIORITY)
        assert len(result.attempts) == result.placed_by_preemption
        for running in run.running.values():
            held = run.service.index.pod(NAMESPACE, running.key)
            assert held is not None
            assert held[0].node == run.cluster.names[running.placed.node]
            assert held[1]  # bound: the only pods preemption may take
    assert preempted > 0


def test_ours_never_wastes_an_eviction_where_the_kube_rule_does() -> None:
    nodes, pods = load_nodes(NODES), load_pods(PODS)
    ours = [simulate_preemption(nodes, pods, OURS, seed) for seed in SEEDS]
    kube = [simulate_preemption(nodes, pods, KUBE_SCHEDULER, seed) for seed in SEEDS]
    assert sum(r.unusable for r in ours) == 0
    assert sum(r.unusable for r in kube) > 0
    # Both start from the same full cluster: the rules differ only once the first preemptor arrives.
    for mine, theirs in zip(ours, kube, strict=True):
        assert mine.fill_allocated == theirs.fill_allocated
        assert mine.fill_placed == theirs.fill_placed
    # kube-scheduler's replacements evict again after each refusal; ours evicts only for pods that then run.
    assert sum(len(r.evictions) for r in ours) < sum(len(r.evictions) for r in kube)


def test_both_rules_start_from_the_same_cluster() -> None:
    nodes, pods = load_nodes(NODES), load_pods(PODS)
    mixed = with_priorities(pods, 1)
    low = [p for p in mixed if p.priority < HIGH_PRIORITY]
    runs = [PreemptionRun(nodes, mixed, rule=rule, seed=1) for rule in RULES]
    for run in runs:
        run.fill(arrivals(low, run.cluster.gpu_capacity_milli, 1))
    first, second = runs
    assert np.array_equal(first.cluster.gpu_left, second.cluster.gpu_left)
    assert np.array_equal(first.cluster.cell_cpus_free, second.cluster.cell_cpus_free)
    assert {k: r.placed for k, r in first.running.items()} == {k: r.placed for k, r in second.running.items()}
    assert first.result.fill_allocated > 95.0


def _running(key: str, *, priority: int, started: int, gpu: int) -> Running:
    pod = _pod(key, gpus=1, cpu=1000, priority=priority)
    return Running(key=key, pod=pod, placed=Placed(node=0, gpus=(gpu,), cpu_cells=(0, 0)), started=started, gang=None)


def test_the_kube_rule_picks_the_node_in_pick_one_node_for_preemption_order() -> None:
    rng = random.Random(0)
    service = _running("service", priority=SERVICE_PRIORITY, started=0, gpu=0)
    old, new, newer = (_running(f"batch-{i}", priority=BATCH_PRIORITY, started=i, gpu=i) for i in (1, 2, 3))
    # The lowest highest-priority victim first: two batch pods beat one service pod.
    assert pick_one_node([KubeCandidate(0, (service,)), KubeCandidate(1, (old, new))], rng).node == 1
    # Same highest priority: the smaller sum of priorities (+2^31 each), so the fewer victims.
    assert pick_one_node([KubeCandidate(0, (old, new)), KubeCandidate(1, (newer,))], rng).node == 1
    # Still tied: the node whose highest-priority victims started latest.
    assert pick_one_node([KubeCandidate(0, (old,)), KubeCandidate(1, (newer,))], rng).node == 1


def test_the_kube_rule_reprieves_the_most_important_pods_and_sees_counts_only() -> None:
    run, row = _interleaved_node(KUBE_SCHEDULER)
    running = list(run.on_node[row].values())
    preemptor = _pod("train-2", gpus=2, cpu=2000, priority=HIGH_PRIORITY)
    victims = select_victims_on_node(run.cluster, row, running, preemptor)
    assert [v.key for v in victims] == ["low-6", "low-7"]  # the two started last, on GPUs 3 and 7
    equal = _pod("peer", gpus=2, cpu=2000, priority=BATCH_PRIORITY)
    assert select_victims_on_node(run.cluster, row, running, equal) == ()


def test_the_priority_mix_on_the_trace() -> None:
    pods = load_pods(require_shared(TRACE / DEFAULT_POD_LIST))
    mixed = with_priorities(pods, 0)
    high = [p for p in mixed if p.priority == HIGH_PRIORITY]
    assert all(p.gpus == 8 or (p.gpus == 1 and p.gpu_milli == 1000 and p.gang is None) for p in high)
    assert all(p.priority == HIGH_PRIORITY for p in mixed if p.gpus == 8)
    assert all(p.priority == BATCH_PRIORITY for p in mixed if p.gang is not None and p.gpus < 8)
    single = [p for p in mixed if p.gpus == 1 and p.gpu_milli == 1000 and p.gang is None]
    assert 0.08 < sum(p.priority == HIGH_PRIORITY for p in single) / len(single) < 0.12
    others = [p for p in mixed if p.gang is None and p.priority != HIGH_PRIORITY]
    assert 0.17 < sum(p.priority == SERVICE_PRIORITY for p in others) / len(others) < 0.23
    assert with_priorities(pods, 1) != mixed  # the seed draws the shares afresh


def test_the_command_prints_both_rules_and_the_targets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["--nodes", str(NODES), "--pods", str(PODS), "--seeds", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| rule | high-priority pods placed (arrived) |")
    assert [line.split(" | ")[0] for line in out[2:4]] == ["| kube-scheduler", "| ours"]
    assert TARGETS in out
    assert "0 unusable preemptions (ours): met" in out
    assert (tmp_path / "runs.csv").read_text().count("\n") == 1 + 2 * len(RULES)
    assert main(["--nodes", str(NODES), "--pods", str(PODS), "--rules", "fifo"]) == 2
