"""benchmarks.dra_allocation at a tiny size: the cluster it builds, the decisions and the figures it reports
are what they claim to be (no timing is asserted)."""

from __future__ import annotations

import random

import pytest

from benchmarks.dra_allocation import (
    DraNode,
    Verdict,
    cluster,
    decide_best_fit,
    decide_first_fit,
    device_classes,
    gpu_claim,
    judge,
    machine_templates,
    main,
    make_node,
    nvlink_counts,
    nvlink_score,
    percentile,
    preferred_cell,
    quality,
    shares,
)
from placement.core.dra.best_fit import BestFit, best_fit
from placement.core.dra.gpu_devices import dra_gpus
from placement.core.dra.join import join_topology

SEED = 7


def _node(kind: str, *taken: int) -> DraNode:
    return make_node(machine_templates()[kind], kind, 3, [f"gpu-{i}" for i in taken], random.Random(SEED))


def test_the_cluster_clones_the_authored_machines_under_their_own_names() -> None:
    nodes = cluster(4, SEED)
    assert [n.kind for n in nodes] == ["nvswitch", "pcie-bridged", "nvswitch", "pcie-bridged"]
    assert len({n.name for n in nodes}) == 4
    uuids = set()
    for node in nodes:
        assert len(node.inventory.devices) == 8
        assert {ref.pool for ref in node.inventory.taken} <= {node.name}
        assert sorted(node.gpu_of.values()) == list(range(8))
        # The agent's topology joins every device (by UUID), so best fit sees the links and cells.
        join = join_topology(dra_gpus(node.inventory.devices), node.topology)
        assert len(join.matches) == 8
        assert all(node.gpu_of[m.device.ref] == m.gpu.index for m in join.matches)
        # The prepared view is of the node's own devices, joined to the same GPUs.
        assert node.prepared.devices is node.inventory.devices
        assert node.prepared.scored
        assert sorted(node.prepared.gpu_bit) == [1 << g for g in range(8)]
        uuids |= {g.uuid for g in node.topology.gpus}
        assert len(node.free_gpus()) == 8 - len(node.inventory.taken)
    assert len(uuids) == 32  # every node has its own GPUs


def test_the_preferred_cell_has_the_most_free_gpus_and_the_lower_id_on_a_tie() -> None:
    assert preferred_cell(_node("nvswitch", 0, 1, 2)) == 1
    assert preferred_cell(_node("nvswitch", 4)) == 0
    assert preferred_cell(_node("nvswitch")) == 0
    assert preferred_cell(_node("nvswitch", *range(8))) is None


def test_the_exhaustive_check_reads_the_links_and_cells() -> None:
    # PCIe node, bridges 0-2, 1-3, 4-5, 6-7; free 0, 1 (cell 0) and 4, 5 (cell 1): the cells tie, so cell 0
    # is preferred, and the only bridged free pair (4, 5) is on the other cell: the goals conflict.
    node = _node("pcie-bridged", 2, 3, 6, 7)
    counts = nvlink_counts(node.topology)
    assert nvlink_score(counts, [0, 2]) == (12, 12)
    assert nvlink_score(counts, [0, 1]) == (0, 0)
    assert nvlink_score(counts, [0, 2, 4, 5]) == (0, 24)
    assert preferred_cell(node) == 0
    assert judge(node, [4, 5], 0) == Verdict(
        best_connected=True, numa_eligible=True, numa_aligned=False, both_possible=False
    )
    assert judge(node, [0, 1], 0) == Verdict(
        best_connected=False, numa_eligible=True, numa_aligned=True, both_possible=False
    )
    # Free 0, 1, 2 on cell 0: the bridged pair (0, 2) is on the cell, so both goals can be met.
    assert judge(_node("pcie-bridged", 3, 4, 5, 6, 7), [0, 2], 0).both_possible
    # Every NVSwitch pair has the same links: any set is best-connected.
    nvswitch = _node("nvswitch", 0)
    assert judge(nvswitch, [1, 5, 6, 7], 1) == Verdict(
        best_connected=True, numa_eligible=True, numa_aligned=False, both_possible=True
    )


def test_the_decisions_take_the_best_node_and_the_first_node_that_fits() -> None:
    # The decision uses each node's prepared view; the totals here are best fit's given the topology.
    nodes = cluster(6, SEED)
    classes = device_classes()
    claim = gpu_claim(4)
    chosen = decide_best_fit(claim, nodes, classes)
    assert chosen is not None
    totals = []
    for node in nodes:
        result = best_fit(
            [claim],
            classes=classes,
            inventory=node.inventory,
            topology=node.topology,
            preferred_numa=preferred_cell(node),
        )
        totals.append(result.score.total if isinstance(result, BestFit) else None)
    best = max(t for t in totals if t is not None)
    assert chosen[0] is nodes[totals.index(best)]
    assert chosen[1].score.total == best
    first = decide_first_fit(claim, nodes, classes)
    assert first is not None
    assert first[0] is next(n for n in nodes if len(n.free_gpus()) >= 4)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([float(v) for v in range(1, 101)], 0.99) == 99.0
    assert percentile([float(v) for v in range(1, 101)], 0.5) == 50.0
    assert percentile([3.0, 1.0, 2.0], 0.99) == 3.0  # few values: the maximum
    assert percentile([5.0], 0.5) == 5.0


def test_shares_count_over_the_right_claims() -> None:
    verdicts = [
        Verdict(best_connected=True, numa_eligible=True, numa_aligned=True, both_possible=True),
        Verdict(best_connected=False, numa_eligible=True, numa_aligned=True, both_possible=False),
        Verdict(best_connected=False, numa_eligible=False, numa_aligned=False, both_possible=False),
        Verdict(best_connected=True, numa_eligible=True, numa_aligned=False, both_possible=True),
    ]
    figures = shares(verdicts)
    assert figures.claims == 4
    assert figures.best_connected == 0.5
    assert figures.numa_eligible == 3
    assert figures.numa_aligned == pytest.approx(2 / 3)
    assert (figures.both_possible, figures.aligned_and_connected_where_possible) == (2, 0.5)
    assert (figures.unconnected_in_conflict, figures.unconnected_cell_short, figures.unconnected_otherwise) == (1, 1, 0)


def test_quality_judges_both_allocators_on_the_same_nodes() -> None:
    tally = quality(8, SEED, device_classes())
    assert sorted(tally.ours) == [("nvswitch", 2), ("nvswitch", 4), ("pcie-bridged", 2), ("pcie-bridged", 4)]
    assert all(len(v) == 2 for v in tally.ours.values())
    assert {k: len(v) for k, v in tally.first_fit.items()} == {k: len(v) for k, v in tally.ours.items()}
    # Eligibility depends on the node only, not on the allocator.
    for key, ours in tally.ours.items():
        assert [v.numa_eligible for v in ours] == [v.numa_eligible for v in tally.first_fit[key]]


def test_main_prints_the_figures_next_to_the_targets(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--nodes", "4", "--decisions", "2", "--claims", "4", "--seed", str(SEED)])
    out = capsys.readouterr().out
    assert "over 4 DRA nodes" in out
    assert "| best fit per node, then the best node |" in out
    assert "| best fit with the node prepared beforehand (what the service pays) |" in out
    assert "| preparing a node (prepare_node; once per change of its slices or topology) |" in out
    assert "| first fit per node, then the first node |" in out
    assert "<= 10 |" in out
    assert "2. quality: 4 claims" in out
    assert "target for ours: best-connected 100%" in out
