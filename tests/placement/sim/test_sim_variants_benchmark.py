"""``benchmarks.sim_variants`` on a small sample of two of the trace's pod lists: it runs each policy and
seed once, resumes without running them again, and reports the gpu_spec share and the table."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from benchmarks.sim_variants import _append, main
from placement.sim.trace import DEFAULT_NODE_LIST, TRACE_DIR, shared_data_dir
from tests.conftest import require_shared

TRACE = shared_data_dir() / TRACE_DIR


def test_every_variant_and_policy_is_run_once_and_tabled(tmp_path: Path) -> None:
    require_shared(TRACE / DEFAULT_NODE_LIST)
    argv = ["--variants", "default,gpushare40", "--policies", "random,bestfit", "--seeds", "1", "--subsample", "40"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    with (tmp_path / "runs.csv").open(newline="") as handle:
        runs = list(csv.DictReader(handle))
    assert sorted((r["variant"], r["policy"], r["seed"]) for r in runs) == [
        ("default", "bestfit", "0"),
        ("default", "random", "0"),
        ("gpushare40", "bestfit", "0"),
        ("gpushare40", "random", "0"),
    ]
    assert all(0.0 <= float(r["unallocated_at_100"]) <= 100.0 for r in runs)
    assert main([*argv, "--out", str(tmp_path)]) == 0  # resumed: nothing left to run
    with (tmp_path / "runs.csv").open(newline="") as handle:
        assert len(list(csv.DictReader(handle))) == len(runs)
    with (tmp_path / "gpu_spec.csv").open(newline="") as handle:
        spec = {row["variant"]: row for row in csv.DictReader(handle)}
    assert spec["default"]["column_present"] == "True"
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0] == "| variant | GPU pods with gpu_spec | random | bestfit | seeds |"
    assert table[2].startswith("| default | 0 / ")


def test_the_papers_lists_are_derived_where_missing_and_tabled_beside_the_published_figure(tmp_path: Path) -> None:
    require_shared(TRACE / DEFAULT_NODE_LIST)
    argv = ["--paper", "--variants", "default,cpu050", "--policies", "random", "--seeds", "1", "--subsample", "40"]
    assert main([*argv, "--no-numa", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "derived" / "openb_pod_list_cpu050.csv").is_file()  # not in the trace folder: derived
    assert not (tmp_path / "derived" / "openb_pod_list_default.csv").exists()
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0] == "| variant | GPU pods with gpu_spec | random | published FGD | random - published | seeds |"
    cpu050 = next(line for line in table if line.startswith("| cpu050 |"))
    cells = [cell.strip() for cell in cpu050.strip("|").split("|")]
    median = float(cells[2].split()[0])
    assert cells[3] == "5.00"  # fgd-published-results.txt: cpu050, FGD
    assert float(cells[4].strip("*")) == pytest.approx(median - 5.00, abs=0.006)
    # Each run keeps its curve; the plots draw it beside the published figure (where matplotlib is installed).
    with (tmp_path / "runs.csv").open(newline="") as handle:
        curves = [row["unallocated_by_arrival"].split(";") for row in csv.DictReader(handle)]
    assert all(len(curve) == 131 for curve in curves)
    assert main([*argv, "--report-only", "--out", str(tmp_path), "--plots", str(tmp_path / "plots")]) == 0
    plotted = sorted(p.name for p in (tmp_path / "plots").glob("*.png")) if (tmp_path / "plots").exists() else []
    if importlib.util.find_spec("matplotlib") is None:
        assert plotted == []
    else:
        assert plotted == ["sim-variant-cpu050.png", "sim-variant-default.png"]


def test_a_runs_file_begun_without_curves_keeps_its_columns(tmp_path: Path) -> None:

    runs = tmp_path / "runs.csv"
    runs.write_text("variant,policy,seed,unallocated_at_100\ndefault,random,0,13.5\n")
    _append(runs, {"variant": "default", "policy": "random", "seed": "1", "unallocated_at_100": "13.9", "numa": "True"})
    with runs.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["seed"], r["unallocated_at_100"]) for r in rows] == [("0", "13.5"), ("1", "13.9")]
    assert all(None not in r for r in rows)  # no field spilled past the header
