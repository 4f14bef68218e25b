"""The trace-driven comparison on every pod list of the Alibaba trace: unallocated GPUs at 100% arrival.

``python -m benchmarks.sim_variants --seeds 3 --jobs 1 --out /tmp/helper_sim/variants`` runs random,
bestfit, fgd and ours (``--policies``) on every ``openb_pod_list_*.csv`` of the trace folder
(``--trace-dir``; default the simulator's, ``KUBENEXUS_SHARED_DATA``/traces/alibaba-gpu-v2023; or the
files named with ``--variants default,gpushare20,...``) against ``openb_node_list_gpu_node.csv``, at the
simulator's settings (NUMA mix; ``--subsample`` keeps every Nth node and pod). Seeds run outermost (seed 0
on every variant and policy, then seed 1, ...), so a run cut short still has the same seeds everywhere.

Writes into ``--out``: ``runs.csv`` (one row per variant, policy and seed, ``RunResult.summary`` plus the
run's wall time; appended as each run finishes, and a run already there is not run again, so the command
resumes), ``gpu_spec.csv`` (per pod list: pods, GPU pods, pods with a non-empty ``gpu_spec``, whether the
column is there at all) and ``table.md``: unallocated GPU % at 100% arrival, variant x policy, median over
seeds 0..N-1 (``--seeds``; rows of other seeds in ``runs.csv`` are left out) with the range.
``--report-only`` rewrites ``table.md`` from ``runs.csv`` without running anything.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from placement.sim.pod_lists import DERIVED, PAPER_LISTS, PUBLISHED_RESULTS, published_unallocated, write_derived
from placement.sim.policies import POLICY_NAMES
from placement.sim.run import MAX_ARRIVAL, simulate
from placement.sim.trace import (
    DEFAULT_NODE_LIST,
    DEFAULT_POD_LIST,
    TRACE_DIR,
    TraceError,
    TraceNode,
    TracePod,
    load_nodes,
    load_pods,
    shared_data_dir,
)

POD_LIST_PREFIX = "openb_pod_list_"
PUBLISHED_FGD = "FGD"
CURVE = "unallocated_by_arrival"  # unallocated GPU % at 0, 1, ... MAX_ARRIVAL % arrival, ";"-separated
PLOTTED_FROM = 85  # % arrival where the plots start: below it every policy places all that arrives
DEFAULT_POLICIES = ("random", "bestfit", "fgd", "ours")
RUN_KEY = ("variant", "policy", "seed")
Row = dict[str, str]


@dataclass(frozen=True)
class Variant:
    name: str  # the pod list's name without prefix and suffix: "default", "gpushare20", ...
    path: Path


def find_variants(trace_dir: Path, names: Sequence[str] | None, derived_dir: Path | None = None) -> list[Variant]:
    """The pod lists in ``trace_dir`` (``default`` first, then by name), or the ``names`` given.

    A named list that ``trace_dir`` lacks and ``placement.sim.pod_lists`` derives is written into
    ``derived_dir`` from the default list (when given).
    """
    if names:
        variants = [Variant(n, trace_dir / f"{POD_LIST_PREFIX}{n}.csv") for n in names]
        missing = [v.name for v in variants if not v.path.exists() and v.name in DERIVED]
        if missing and derived_dir is not None:
            write_derived(trace_dir / DEFAULT_POD_LIST, derived_dir, missing)
            variants = [Variant(v.name, derived_dir / v.path.name) if v.name in missing else v for v in variants]
        return variants
    found = sorted(trace_dir.glob(f"{POD_LIST_PREFIX}*.csv"))
    variants = [Variant(p.name.removeprefix(POD_LIST_PREFIX).removesuffix(".csv"), p) for p in found]
    return sorted(variants, key=lambda v: (v.name != "default", _natural(v.name)))


def _natural(name: str) -> tuple[str, int]:
    stem = name.rstrip("0123456789")
    return stem, int(name[len(stem) :] or 0)


def gpu_spec_row(variant: Variant, pods: Sequence[TracePod]) -> Row:
    """How many pods of the list carry a GPU model constraint, and whether the column is there at all."""
    with variant.path.open(newline="") as handle:
        header = next(csv.reader(handle), [])
    gpu_pods = [p for p in pods if p.gpus]
    with_spec = [p for p in pods if p.gpu_models]
    return {
        "variant": variant.name,
        "column_present": str("gpu_spec" in header),
        "pods": str(len(pods)),
        "gpu_pods": str(len(gpu_pods)),
        "pods_with_gpu_spec": str(len(with_spec)),
        "gpu_pods_with_gpu_spec": str(sum(1 for p in gpu_pods if p.gpu_models)),
        "share_of_gpu_pods": f"{len([p for p in gpu_pods if p.gpu_models]) / max(len(gpu_pods), 1):.4f}",
    }


def _run(
    variant: str, nodes: Sequence[TraceNode], pods: Sequence[TracePod], policy: str, seed: int, *, numa: bool
) -> Row:
    start = time.perf_counter()
    result = simulate(nodes, pods, policy, seed, numa=numa)
    row = {key: "" if value is None else str(value) for key, value in result.summary().items()}
    curve = ";".join(f"{result.unallocated_at(arrival):.2f}" for arrival in range(MAX_ARRIVAL + 1))
    return {
        "variant": variant,
        **row,
        "numa": str(numa),
        "wall_s": f"{time.perf_counter() - start:.1f}",
        CURVE: curve,
    }


def read_runs(path: Path) -> list[Row]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _append(path: Path, row: Row) -> None:
    """One more row; a runs.csv begun by an earlier version keeps its own columns (a field it lacks, such as
    the curve, is left out of the row rather than shifting the columns)."""
    existing = read_header(path)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=existing or list(row), extrasaction="ignore", restval="")
        if not existing:
            writer.writeheader()
        writer.writerow(row)


def read_header(path: Path) -> list[str]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])


def run_all(
    variants: Sequence[Variant],
    nodes: Sequence[TraceNode],
    policies: Sequence[str],
    *,
    seeds: int,
    subsample: int,
    jobs: int,
    out: Path,
    numa: bool = True,
) -> None:
    """Every (seed, variant, policy) not yet in ``out``/runs.csv, seeds outermost; rows appended as they end."""
    runs_csv = out / "runs.csv"
    done = {tuple(r[k] for k in RUN_KEY) for r in read_runs(runs_csv)}
    pods = {v.name: load_pods(v.path)[::subsample] for v in variants}
    spec_rows = [gpu_spec_row(v, load_pods(v.path)) for v in variants]
    with (out / "gpu_spec.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(spec_rows[0]))
        writer.writeheader()
        writer.writerows(spec_rows)
    todo = [
        (v.name, policy, seed)
        for seed in range(seeds)
        for v in variants
        for policy in policies
        if (v.name, policy, str(seed)) not in done
    ]
    started = time.monotonic()

    def report(row: Row, number: int) -> None:
        _append(runs_csv, row)
        print(
            f"[{number}/{len(todo)}] {row['variant']} {row['policy']} seed {row['seed']}: "
            f"{float(row['unallocated_at_100']):.2f}% unallocated at 100% ({row['wall_s']} s; "
            f"{time.monotonic() - started:.0f} s in all)",
            file=sys.stderr,
            flush=True,
        )

    if jobs == 1:
        for number, (name, policy, seed) in enumerate(todo, start=1):
            report(_run(name, nodes, pods[name], policy, seed, numa=numa), number)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures: list[Future[Row]] = [
            pool.submit(partial(_run, numa=numa), name, nodes, pods[name], policy, seed) for name, policy, seed in todo
        ]
        for number, future in enumerate(as_completed(futures), start=1):
            report(future.result(), number)


def format_table(
    runs: Sequence[Row],
    variants: Sequence[str],
    policies: Sequence[str],
    spec: Sequence[Row],
    published: dict[str, dict[str, float]] | None = None,
) -> str:
    """Markdown: unallocated GPU % at 100% arrival, median over seeds (min - max), and the gpu_spec share.

    With ``published`` (``pod_lists.published_unallocated``): the FGD authors' FGD figure, and each
    policy's median minus it (bold where the policy leaves fewer GPUs unallocated than published FGD).
    """
    shares = {r["variant"]: r for r in spec}
    extra = ["published FGD", *(f"{p} - published" for p in policies)] if published else []
    header = "| variant | GPU pods with gpu_spec | " + " | ".join([*policies, *extra]) + " | seeds |"
    lines = [header, "|" + "---|" * (len(policies) + len(extra) + 3)]
    for variant in variants:
        cells, residuals = [], []
        seeds: set[str] = set()
        reference = (published or {}).get(variant, {}).get(PUBLISHED_FGD)
        for policy in policies:
            values = [float(r["unallocated_at_100"]) for r in runs if r["variant"] == variant and r["policy"] == policy]
            seeds |= {r["seed"] for r in runs if r["variant"] == variant and r["policy"] == policy}
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f} - {max(values):.2f})" if values else "-")
            if values and reference is not None:
                residual = statistics.median(values) - reference
                residuals.append(f"**{residual:+.2f}**" if residual < 0 else f"{residual:+.2f}")
            else:
                residuals.append("-")
        if published:
            cells += ["-" if reference is None else f"{reference:.2f}", *residuals]
        row = shares.get(variant)
        share = f"{row['gpu_pods_with_gpu_spec']} / {row['gpu_pods']}" if row else "?"
        lines.append(f"| {variant} | {share} | " + " | ".join(cells) + f" | {len(seeds)} |")
    return "\n".join(lines)


def plot_variants(
    runs: Sequence[Row], variants: Sequence[str], published: dict[str, dict[str, float]] | None, out: Path
) -> list[Path]:
    """One PNG per pod list, ``sim-variant-<list>.png`` in ``out``: unallocated GPU % against arrival, the
    median over seeds of each policy's runs that carry the curve (``CURVE``; a run of the paper's setting
    labelled so), and the published FGD figure at 100%. [] without matplotlib (the ``plots`` extra)."""
    if importlib.util.find_spec("matplotlib") is None:
        return []
    import matplotlib  # noqa: PLC0415 - an optional extra, imported once known to be installed

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    arrivals = list(range(PLOTTED_FROM, MAX_ARRIVAL + 1))
    written = []
    for variant in variants:
        curves: dict[str, list[list[float]]] = {}
        for row in runs:
            if row["variant"] == variant and row.get(CURVE):
                setting = "NUMA mix" if row.get("numa", "True") == "True" else "paper's setting: no NUMA"
                label = f"{row['policy']} ({setting})"
                curves.setdefault(label, []).append([float(v) for v in row[CURVE].split(";")])
        if not curves:
            continue
        figure, axes = plt.subplots(figsize=(7, 4.2))
        for label, seeds in sorted(curves.items()):
            median = [statistics.median(seed[a] for seed in seeds) for a in arrivals]
            how_many = f"median of {len(seeds)} seeds" if len(seeds) > 1 else "one seed"
            axes.plot(arrivals, median, label=f"{label}, {how_many}", linewidth=1.3)
        reference = (published or {}).get(variant, {}).get(PUBLISHED_FGD)
        if reference is not None:
            axes.plot([100], [reference], "k*", markersize=10, label="FGD, published (100% arrival)")
        axes.set_title(f"openb_pod_list_{variant}")
        axes.set_xlabel("arrived GPU demand, % of capacity")
        axes.set_ylabel("unallocated GPUs, % of capacity")
        axes.set_xlim(PLOTTED_FROM, MAX_ARRIVAL)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
        figure.tight_layout()
        path = out / f"sim-variant-{variant}.png"
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_variants", description=__doc__.split("\n")[0])
    parser.add_argument("--trace-dir", type=Path, default=shared_data_dir() / TRACE_DIR)
    parser.add_argument("--variants", default="", help="comma-separated pod list names; default: every one found")
    parser.add_argument("--published", type=Path, default=shared_data_dir() / PUBLISHED_RESULTS)
    parser.add_argument("--plots", type=Path, help="write a PNG per pod list into this folder (needs matplotlib)")
    parser.add_argument(
        "--plot-also",
        type=Path,
        action="append",
        default=[],
        metavar="OUT",
        help="another run folder whose runs (other policies or settings) join the plots",
    )
    parser.add_argument(
        "--paper",
        action="store_true",
        help="the paper's 17 pod lists (those the trace folder lacks derived into OUT/derived), and the "
        "published FGD figure beside each",
    )
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--subsample", type=int, default=1, help="keep every Nth node and pod")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel processes")
    parser.add_argument("--out", type=Path, default=Path("sim-variants"))
    parser.add_argument(
        "--no-numa",
        action="store_true",
        help="the FGD paper's setting: no kubelet Topology Manager policy, no intents, the pods in its artifact's "
        "arrival order (the trace's pods shuffled, then the copies)",
    )
    parser.add_argument("--report-only", action="store_true", help="write table.md from runs.csv; run nothing")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    policies = [p.strip() for p in str(args.policies).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or args.seeds < 1 or args.subsample < 1 or args.jobs < 1:
        parser.error(f"unknown policies {unknown}" if unknown else "--seeds, --subsample, --jobs must be >= 1")
    names = [n.strip() for n in str(args.variants).split(",") if n.strip()] or (list(PAPER_LISTS) if args.paper else [])
    try:
        variants = find_variants(args.trace_dir, names or None, args.out / "derived")
        published = published_unallocated(args.published) if args.paper else None
    except TraceError as error:
        parser.error(str(error))
    if not variants:
        parser.error(f"no {POD_LIST_PREFIX}*.csv in {args.trace_dir}")
    if not args.report_only:
        nodes = load_nodes(args.trace_dir / DEFAULT_NODE_LIST)[:: args.subsample]
        run_all(
            variants,
            nodes,
            policies,
            seeds=args.seeds,
            subsample=args.subsample,
            jobs=args.jobs,
            out=args.out,
            numa=not args.no_numa,
        )
    runs = [r for r in read_runs(args.out / "runs.csv") if int(r["seed"]) < args.seeds]
    table = format_table(runs, [v.name for v in variants], policies, read_runs(args.out / "gpu_spec.csv"), published)
    (args.out / "table.md").write_text(table + "\n")
    print(table)
    if args.plots is not None:
        plotted = [*runs, *(r for folder in args.plot_also for r in read_runs(folder / "runs.csv"))]
        plotted = [r for r in plotted if int(r["seed"]) < args.seeds]
        written = plot_variants(plotted, [v.name for v in variants], published, args.plots)
        print(f"{len(written)} plots in {args.plots}" if written else "no plots: matplotlib is not installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
