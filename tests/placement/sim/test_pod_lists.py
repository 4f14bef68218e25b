"""The FGD paper's pod lists derived from the default one (``placement.sim.pod_lists``), and the
published results table they are compared with."""

from __future__ import annotations

import csv
import os
from collections import Counter
from pathlib import Path

import pytest

from placement.sim.pod_lists import (
    CPU_ONLY_PODS,
    DERIVED,
    PAPER_LISTS,
    PUBLISHED_RESULTS,
    SPEC_PODS,
    derive,
    main,
    published_unallocated,
    read_rows,
)
from placement.sim.trace import DEFAULT_NODE_LIST, DEFAULT_POD_LIST, TRACE_DIR, TraceError, load_pods, shared_data_dir
from tests.conftest import require_shared

DATA = shared_data_dir()
TRACE = DATA / TRACE_DIR
# A folder holding the artifact's own lists (openb_pod_list_cpu050.csv, ...), to compare the derived ones
# with; the shared data does not have them.
PUBLISHED_LISTS = os.environ.get("KUBENEXUS_FGD_POD_LISTS")


def _default() -> list[dict[str, str]]:
    return read_rows(require_shared(TRACE / DEFAULT_POD_LIST))


def _shape(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[k] for k in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "qos"))


@pytest.mark.parametrize("name", sorted(CPU_ONLY_PODS))
def test_a_cpu_heavy_list_keeps_the_gpu_pods_and_draws_cpu_only_pods(name: str) -> None:
    default = _default()
    derived = derive(default, name)
    gpu = [r for r in default if r["num_gpu"] != "0"]
    assert derived[: len(gpu)] == gpu  # every GPU pod, unchanged and in order
    drawn = derived[len(gpu) :]
    assert len(drawn) == CPU_ONLY_PODS[name]
    assert all(r["num_gpu"] == "0" for r in drawn)
    shapes = Counter(_shape(r) for r in default if r["num_gpu"] == "0")
    assert {_shape(r) for r in drawn} <= set(shapes)
    assert len({r["name"] for r in derived}) == len(derived)  # names stay unique
    if len(drawn) > sum(shapes.values()):  # more than the default has: all of them, then draws
        assert all(Counter(_shape(r) for r in drawn)[s] >= n for s, n in shapes.items())
    else:
        assert all(Counter(_shape(r) for r in drawn)[s] <= n for s, n in shapes.items())
    assert derive(default, name) == derived  # the same list on every run


@pytest.mark.parametrize("name", sorted(SPEC_PODS))
def test_a_gpu_spec_list_gives_models_to_gpu_pods_that_some_node_can_hold(name: str) -> None:
    default = _default()
    derived = derive(default, name)
    assert len(derived) == len(default)
    constrained = [r for r in derived if r.get("gpu_spec")]
    assert len(constrained) == SPEC_PODS[name]
    assert all(r["num_gpu"] != "0" for r in constrained)
    for before, after in zip(default, derived, strict=True):  # nothing else changes
        assert {k: v for k, v in after.items() if k != "gpu_spec"} == {
            k: v for k, v in before.items() if k != "gpu_spec"
        }
    with (TRACE / DEFAULT_NODE_LIST).open(newline="") as handle:
        largest = Counter[str]()
        for node in csv.DictReader(handle):
            largest[node["model"]] = max(largest[node["model"]], int(node["gpu"]))
    for row in constrained:
        models = row["gpu_spec"].split("|")
        assert max(largest[m] for m in models) >= int(row["num_gpu"]), row
    assert derive(default, name) == derived


def test_an_unknown_list_is_refused_by_name() -> None:
    with pytest.raises(TraceError, match="no rule derives the pod list 'gpuspec99'"):
        derive([], "gpuspec99")


def test_the_command_writes_the_lists_the_loader_reads(tmp_path: Path) -> None:
    require_shared(TRACE / DEFAULT_POD_LIST)
    assert main(["--out", str(tmp_path), "--lists", "cpu050,gpuspec10"]) == 0
    spec = load_pods(tmp_path / "openb_pod_list_gpuspec10.csv")
    assert sum(1 for p in spec if p.gpu_models) == SPEC_PODS["gpuspec10"]
    assert sum(1 for p in load_pods(tmp_path / "openb_pod_list_cpu050.csv") if not p.gpus) == CPU_ONLY_PODS["cpu050"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path), "--lists", "nope"])
    assert exit_info.value.code == 2


def test_the_published_table_names_every_list_of_the_paper() -> None:
    table = published_unallocated(require_shared(DATA / PUBLISHED_RESULTS))
    assert sorted(table) == sorted(PAPER_LISTS)
    assert set(DERIVED) <= set(PAPER_LISTS)
    assert table["default"] == {
        "Random": 13.75,
        "DotProd": 9.44,
        "GpuClustering": 8.42,
        "GpuPacking": 8.19,
        "BestFit": 7.09,
        "FGD": 4.77,
    }
    assert table["gpuspec33"]["FGD"] == 12.12


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("nothing here\n", "no 'UNALLOCATED GPU % at arrive=100%' table"),
        (
            "== UNALLOCATED GPU % at arrive=100% (median)\nworkload Random FGD\nopenb_pod_list_default 1.0 x\n",
            "not a number",
        ),
        ("== UNALLOCATED GPU % at arrive=100%\nworkload Random FGD\nopenb_pod_list_default 1.0\n", "1 values for 2"),
    ],
)
def test_a_malformed_published_table_is_refused(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "results.txt"
    path.write_text(text)
    with pytest.raises(TraceError, match=error):
        published_unallocated(path)


@pytest.mark.skipif(not PUBLISHED_LISTS, reason="KUBENEXUS_FGD_POD_LISTS names no folder of the artifact's pod lists")
@pytest.mark.parametrize("name", DERIVED)
def test_derived_lists_match_the_artifacts_own(name: str) -> None:
    published = read_rows(Path(str(PUBLISHED_LISTS)) / f"openb_pod_list_{name}.csv")
    derived = derive(_default(), name)
    assert len(derived) == len(published)

    def cpu_only_cpu(rows: list[dict[str, str]]) -> int:
        return sum(int(r["cpu_milli"]) for r in rows if r["num_gpu"] == "0")

    assert cpu_only_cpu(derived) == pytest.approx(cpu_only_cpu(published), rel=0.03)
    assert sum(1 for r in derived if r.get("gpu_spec") not in ("", "nan", None)) == sum(
        1 for r in published if r.get("gpu_spec") not in ("", "nan", None)
    )
