"""The FGD paper's pod lists that the shared trace folder lacks, derived from the default one.

The FGD paper (Weng et al., ATC'23, section 6) and its artifact evaluate 17 pod lists. The shared trace
folder holds the default list and the gpushare and multigpu ones; the CPU-heavy (``cpu050`` ...
``cpu250``) and GPU-model (``gpuspec10`` ... ``gpuspec33``) lists are derived here, as the trace's README
says they were made (README.upstream.md: "sampled from the default one, emphasizing certain types of
workloads"; the gpuspec lists "augment tasks with GPU type requirements", 33% being the production
share, paper section 6.5):

* ``cpuNNN``: the default list's GPU pods, unchanged and in order, then ``CPU_ONLY_PODS[name]`` CPU-only
  pods drawn from the default's 1,088: without replacement when fewer, else all of them and the rest
  drawn with replacement. The counts are the published lists'; neither the paper nor the artifact says
  what the suffix measures, so it cannot be derived from it.
* ``gpuspecNN``: the default list with ``SPEC_PODS[name]`` of its GPU pods given a ``gpu_spec``. Pods are
  drawn without replacement, weighted by their class (``SPEC_RATE``: a GPU share, one whole GPU, 2, 4 or
  8 GPUs), and each draws its models from its class's table (``SPEC_MODELS``). Counts, class rates and
  tables are those of the published ``openb_pod_list_gpuspec*.csv`` lists (the tables from gpuspec33, the
  production mix); every model set in them has nodes that can hold its class.

Each list is drawn with its own fixed seed (CRC-32 of its name), so a list is the same on every run.
``python -m placement.sim.pod_lists --out DIR`` writes them as CSV files beside no others.
"""

from __future__ import annotations

import argparse
import csv
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from placement.sim.trace import DEFAULT_POD_LIST, TRACE_DIR, TraceError, shared_data_dir

Row = dict[str, str]
POD_LIST_PREFIX = "openb_pod_list_"

CPU_ONLY_PODS: Mapping[str, int] = {"cpu050": 375, "cpu100": 789, "cpu200": 1768, "cpu250": 2356}
SPEC_PODS: Mapping[str, int] = {"gpuspec10": 732, "gpuspec20": 1444, "gpuspec25": 1759, "gpuspec33": 2388}
# Share of a class's GPU pods that carry a gpu_spec in the published gpuspec33 list.
SPEC_RATE: Mapping[str, float] = {
    "share": 884 / 3078,
    "1": 1476 / 3911,
    "2": 7 / 16,
    "4": 9 / 15,
    "8": 12 / 44,
}
# gpu_spec -> count among the class's constrained pods in the published gpuspec33 list (a model written twice
# there, as in "V100M16|V100M32|V100M32", counted with the set it names).
SPEC_MODELS: Mapping[str, Mapping[str, int]] = {
    "share": {"T4": 593, "P100": 278, "G2|P100|T4|V100M16|V100M32": 13},
    "1": {
        "T4": 698,
        "G2": 321,
        "V100M16|V100M32": 156,
        "P100|V100M16|V100M32": 102,
        "G3": 80,
        "P100|T4|V100M16|V100M32": 33,
        "G2|P100|T4|V100M16|V100M32": 26,
        "A10|G2|T4|V100M16|V100M32": 24,
        "V100M32": 18,
        "A10|T4": 6,
        "A10|G2|P100|T4|V100M16|V100M32": 3,
        "P100|V100M16": 4,
        "V100M16": 3,
        "P100": 1,
        "T4|V100M16|V100M32": 1,
    },
    "2": {"T4|V100M16|V100M32": 2, "V100M16|V100M32": 2, "V100M32": 2, "P100|V100M16|V100M32": 1},
    "4": {"G2": 4, "V100M16|V100M32": 5},
    "8": {"G2": 6, "G3": 6},
}
DERIVED = tuple(CPU_ONLY_PODS) + tuple(SPEC_PODS)
# The 17 pod lists of the paper's evaluation (its artifact's experiments/run_scripts/generate_run_scripts.py).
PAPER_LISTS = (
    "default",
    *CPU_ONLY_PODS,
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    *SPEC_PODS,
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
)
PUBLISHED_RESULTS = Path("traces") / "fgd-published-results.txt"
_ALL_LISTS_HEADER = "UNALLOCATED GPU % at arrive=100%"


def published_unallocated(path: Path) -> dict[str, dict[str, float]]:
    """The FGD authors' unallocated GPU % at 100% arrival (median of 10 seeds): list -> policy -> value.

    Read from the "all workloads" table of ``fgd-published-results.txt`` (its header row names the
    policies: Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD).
    """
    lines = read_lines(path)
    start = next((n for n, line in enumerate(lines) if _ALL_LISTS_HEADER in line), None)
    if start is None or start + 1 >= len(lines):
        raise TraceError(f"{path}: no {_ALL_LISTS_HEADER!r} table")
    # The file's header runs two names together ("DotProdGpuClustering"): the columns are fixed-width.
    policies = lines[start + 1].replace("GpuClustering", " GpuClustering ").split()[1:]
    table: dict[str, dict[str, float]] = {}
    for line in lines[start + 2 :]:
        fields = line.split()
        if not fields or not fields[0].startswith(POD_LIST_PREFIX):
            break
        try:
            values = [float(v) for v in fields[1:]]
        except ValueError:
            raise TraceError(f"{path}: not a number in {line!r}") from None
        if len(values) != len(policies):
            raise TraceError(f"{path}: {len(values)} values for {len(policies)} policies in {line!r}")
        table[fields[0].removeprefix(POD_LIST_PREFIX)] = dict(zip(policies, values, strict=True))
    return table


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError as error:
        raise TraceError(str(error)) from None


def _gpus(row: Row) -> int:
    return int(float(row.get("num_gpu") or 0))


def pod_class(row: Row) -> str:
    """``share``, or the number of whole GPUs, of a GPU pod's row."""
    if _gpus(row) == 1 and int(float(row.get("gpu_milli") or 0)) < 1000:
        return "share"
    return str(_gpus(row))


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def cpu_heavy(default: Sequence[Row], name: str) -> list[Row]:
    """``cpuNNN``: the GPU pods, then ``CPU_ONLY_PODS[name]`` CPU-only pods drawn from the default's."""
    wanted = CPU_ONLY_PODS[name]
    cpu_only = [row for row in default if _gpus(row) == 0]
    if not cpu_only:
        raise TraceError(f"{name}: the default pod list has no CPU-only pod to draw from")
    rng = _rng(name)
    if wanted <= len(cpu_only):
        picks = sorted(rng.choice(len(cpu_only), size=wanted, replace=False).tolist())
    else:
        picks = list(range(len(cpu_only))) + rng.choice(len(cpu_only), size=wanted - len(cpu_only)).tolist()
    drawn = [{**cpu_only[i], "name": f"{cpu_only[i]['name']}-{name}-{n}"} for n, i in enumerate(picks)]
    return [row for row in default if _gpus(row) > 0] + drawn


def gpu_spec(default: Sequence[Row], name: str) -> list[Row]:
    """``gpuspecNN``: the default list with ``SPEC_PODS[name]`` GPU pods given models (module docstring)."""
    gpu_rows = [i for i, row in enumerate(default) if _gpus(row) > 0]
    wanted = SPEC_PODS[name]
    if wanted > len(gpu_rows):
        raise TraceError(f"{name}: {wanted} GPU pods wanted, the default pod list has {len(gpu_rows)}")
    rng = _rng(name)
    weights = np.array([SPEC_RATE[pod_class(default[i])] for i in gpu_rows])
    chosen = rng.choice(len(gpu_rows), size=wanted, replace=False, p=weights / weights.sum())
    rows = [dict(row) for row in default]
    for position in sorted(chosen.tolist()):
        row = rows[gpu_rows[position]]
        table = SPEC_MODELS[pod_class(row)]
        counts = np.array(list(table.values()), dtype=np.float64)
        row["gpu_spec"] = list(table)[int(rng.choice(len(table), p=counts / counts.sum()))]
    return rows


def derive(default: Sequence[Row], name: str) -> list[Row]:
    """The pod list ``name`` (one of ``DERIVED``) from the default list's rows."""
    if name in CPU_ONLY_PODS:
        return cpu_heavy(default, name)
    if name in SPEC_PODS:
        return gpu_spec(default, name)
    raise TraceError(f"no rule derives the pod list {name!r}; derived ones: {', '.join(DERIVED)}")


def read_rows(path: Path) -> list[Row]:
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as error:
        raise TraceError(str(error)) from None


def write_rows(path: Path, rows: Sequence[Row]) -> None:
    fields = list(rows[0]) if rows else []
    if "gpu_spec" not in fields:
        fields.insert(fields.index("gpu_milli") + 1 if "gpu_milli" in fields else len(fields), "gpu_spec")
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)


def write_derived(default_list: Path, out: Path, names: Sequence[str] = DERIVED) -> list[Path]:
    """Write each derived pod list as ``out``/openb_pod_list_<name>.csv; the paths written."""
    default = read_rows(default_list)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        path = out / f"{POD_LIST_PREFIX}{name}.csv"
        write_rows(path, derive(default, name))
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placement.sim.pod_lists", description=__doc__.split("\n")[0])
    parser.add_argument("--default", type=Path, default=shared_data_dir() / TRACE_DIR / DEFAULT_POD_LIST)
    parser.add_argument("--out", type=Path, required=True, help="folder for the derived CSV files")
    parser.add_argument("--lists", default=",".join(DERIVED), help="comma-separated names; default: all")
    args = parser.parse_args(argv)
    names = [n.strip() for n in str(args.lists).split(",") if n.strip()]
    unknown = [n for n in names if n not in DERIVED]
    if unknown:
        parser.error(f"no rule derives {', '.join(unknown)}; derived ones: {', '.join(DERIVED)}")
    try:
        for path in write_derived(args.default, args.out, names):
            print(path)
    except TraceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
