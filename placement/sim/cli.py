"""``kubenexus-placement simulate`` / ``python -m placement.sim``: the trace-driven policy comparison.

Writes into ``--out``: ``summary.csv`` and ``summary.json`` (median over seeds per policy),
``runs.csv`` (every policy and seed), ``steps.csv`` (allocated GPU share at every 1% of arrival, per
policy and seed) and, when matplotlib is installed (``pip install .[plots]``), ``allocation.png`` /
``.svg`` and ``unallocated.png`` / ``.svg``. A progress bar goes to stderr.

The trace is read from KUBENEXUS_SHARED_DATA (default: ../shared/data beside a source checkout), under
traces/alibaba-gpu-v2023/, or from the files --nodes and --pods name. An installed package has no
../shared/data: set the variable or the two flags.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TextIO

import argcomplete

from kubenexus import __version__
from placement.sim.plots import plot_results
from placement.sim.policies import POLICY_NAMES
from placement.sim.run import RunResult, arrivals, median_summary, simulate
from placement.sim.sample import write_sample
from placement.sim.trace import (
    DEFAULT_NODE_LIST,
    DEFAULT_POD_LIST,
    TRACE_DIR,
    TraceError,
    TraceNode,
    TracePod,
    missing_trace,
    read_trace,
    shared_data_dir,
)

SUMMARY_COLUMNS = (
    "policy",
    "seeds",
    "unallocated_at_first_failure",
    "first_failure_arrival",
    "unallocated_at_100",
    "unallocated_at_130",
    "topology_affinity_errors_per_1000",
    "other_rejections_per_1000",
    "multi_gpu_best_connected",
    "single_numa_aligned",
    "gangs",
    "gangs_minimal_nodes",
    "partial_gang_holds",
    "latency_p50_ms",
    "latency_p99_ms",
)


class ProgressBar:
    """A one-line bar on ``stream`` (stderr), redrawn at most every 0.2 s."""

    def __init__(self, total: int, stream: TextIO, width: int = 30) -> None:
        self.total, self.stream, self.width = max(total, 1), stream, width
        self.done = 0
        self.label = ""
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, label: str, fraction_of_one: float) -> None:
        """Progress within the current unit of work (one policy x seed run)."""
        self.label = label
        now = time.monotonic()
        if now - self._drawn >= 0.2 or fraction_of_one >= 1:
            self._draw(self.done + min(fraction_of_one, 1.0))
            self._drawn = now

    def finish_unit(self) -> None:
        self.done += 1
        self._draw(self.done)

    def _draw(self, position: float) -> None:
        share = position / self.total
        filled = int(share * self.width)
        elapsed = time.monotonic() - self.started
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {share:6.1%} {elapsed:6.0f}s {self.label:<32}")
        if position >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _help_text(docstring: str | None) -> str:
    """The module docstring as a terminal shows it: reStructuredText's literal markup (````x````) dropped."""
    return (docstring or "").replace("``", "")


def add_simulate_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``simulate`` on an ``argparse`` subparsers object; ``run_simulate`` runs it."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="compare placement policies on the Alibaba GPU trace",
        description=_help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(handler=run_simulate)
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    data = shared_data_dir() / TRACE_DIR
    parser.add_argument(
        "--nodes",
        type=Path,
        default=data / DEFAULT_NODE_LIST,
        metavar="CSV",
        help="the trace's node list (default: %(default)s, from $KUBENEXUS_SHARED_DATA)",
    )
    parser.add_argument(
        "--pods",
        type=Path,
        default=data / DEFAULT_POD_LIST,
        metavar="CSV",
        help="the trace's pod list (default: %(default)s, from $KUBENEXUS_SHARED_DATA)",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="run on a small made-up trace of the same format instead (written into --out; placement.sim.sample): "
        "to try the command where the trace is not at hand",
    )
    policies = parser.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        metavar="NAME[,NAME...]",
        help=f"comma-separated policy names among {', '.join(POLICY_NAMES)} (default: all of them)",
    )
    # argcomplete calls this attribute for the flag's candidates (keyword arguments: prefix, action, parser, ...);
    # without it the shell would offer file names.
    policies.completer = lambda **_: POLICY_NAMES  # type: ignore[attr-defined]
    parser.add_argument(
        "--seeds", type=int, default=10, metavar="N", help="seeds 0..N-1; the median is reported (default: %(default)s)"
    )
    parser.add_argument(
        "--subsample",
        type=int,
        default=1,
        metavar="N",
        help="keep every Nth node and pod, a smaller cluster of the same mix (default: %(default)s, all)",
    )
    parser.add_argument(
        "--no-numa",
        action="store_true",
        help="the FGD paper's setting: no kubelet Topology Manager policy, no pod NUMA intents, the pods in its "
        "artifact's arrival order (the trace's pods shuffled, then the copies)",
    )
    parser.add_argument(
        "--learned-workload",
        action="store_true",
        help="ours measures fragmentation against the workload it learns from the pods it places (from the "
        "service's default), not the trace's shapes",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="runs (policy x seed) in parallel processes (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("sim-results"),
        metavar="DIR",
        help="folder for CSV, JSON and plots (default: %(default)s)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the plots even when matplotlib is installed")


def run_simulate(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in str(args.policies).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown:
        print(f"simulate: unknown policies {unknown}; known: {', '.join(POLICY_NAMES)}", file=sys.stderr)
        return 2
    if args.seeds < 1 or args.subsample < 1 or args.jobs < 1:
        print("simulate: --seeds, --subsample and --jobs must be at least 1", file=sys.stderr)
        return 2
    if args.sample:
        args.nodes, args.pods = write_sample(args.out)
        print(f"simulate: a made-up sample trace, not the trace: {args.nodes}, {args.pods}", file=sys.stderr)
    missing = missing_trace(args.nodes, args.pods)
    if missing is not None:
        print(f"simulate: {missing}", file=sys.stderr)
        return 2
    try:
        nodes, pods = read_trace(args.nodes, args.pods, subsample=args.subsample)
    except TraceError as error:
        print(f"simulate: cannot read the trace: {error}", file=sys.stderr)
        return 1
    runs = compare(
        nodes,
        pods,
        policies,
        seeds=args.seeds,
        numa=not args.no_numa,
        jobs=args.jobs,
        learned_workload=args.learned_workload,
    )
    write_results(runs, args.out, plots=not args.no_plots)
    print(format_table([median_summary(runs[p]) for p in policies]))
    print(f"results in {args.out}", file=sys.stderr)
    return 0


def compare(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policies: Sequence[str],
    *,
    seeds: int,
    numa: bool,
    jobs: int = 1,
    learned_workload: bool = False,
) -> dict[str, list[RunResult]]:
    """Every policy on every seed, with a progress bar on stderr; ``jobs`` > 1 runs them in processes."""
    bar = ProgressBar(len(policies) * seeds, sys.stderr)
    runs: dict[str, list[RunResult]] = {}
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [
                pool.submit(simulate, nodes, pods, policy, seed, numa=numa, learned_workload=learned_workload)
                for policy in policies
                for seed in range(seeds)
            ]
            for future in as_completed(futures):
                result = future.result()
                bar.advance(f"{result.policy} seed {result.seed}", 1.0)
                bar.finish_unit()
        for future in futures:  # submission order: policies as asked, seeds ascending
            result = future.result()
            runs.setdefault(result.policy, []).append(result)
        return runs
    for policy in policies:
        for seed in range(seeds):
            groups = len(arrivals(pods, 1000.0 * sum(n.gpus for n in nodes), seed))
            label = f"{policy} seed {seed}"

            def tick(number: int, label: str = label, groups: int = groups) -> None:
                bar.advance(label, (number + 1) / groups)

            result = simulate(nodes, pods, policy, seed, numa=numa, learned_workload=learned_workload, progress=tick)
            runs.setdefault(policy, []).append(result)
            bar.finish_unit()
    return runs


def write_results(runs: dict[str, list[RunResult]], out: Path, *, plots: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summaries = [median_summary(results) for results in runs.values()]
    with (out / "summary.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(summaries)
    (out / "summary.json").write_text(json.dumps(summaries, indent=2) + "\n")
    every = [run.summary() for results in runs.values() for run in results]
    with (out / "runs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(every[0]))
        writer.writeheader()
        writer.writerows(every)
    with (out / "steps.csv").open("w", newline="") as handle:
        steps = csv.writer(handle)
        steps.writerow(("policy", "seed", "arrival_pct", "allocated_pct", "pods", "failed", "kubelet_rejections"))
        for results in runs.values():
            for run in results:
                for point in run.checkpoints:
                    steps.writerow(
                        (
                            run.policy,
                            run.seed,
                            f"{point.arrival:.3f}",
                            f"{point.allocated:.3f}",
                            point.pods,
                            point.failed,
                            point.rejected,
                        )
                    )
    if plots and not plot_results(runs, out):
        print("simulate: matplotlib not installed (pip install .[plots]); no plots", file=sys.stderr)


def cell(value: object, percent: bool = False, *, digits: int = 2) -> str:
    """A table cell: "-" for no figure, a float to ``digits`` decimals (a share as a percentage)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}%" if percent else f"{value:.{digits}f}"
    return str(value)


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The comparison as a Markdown table (docs/benchmarks.md)."""
    header = (
        "| policy | unalloc. GPU % at first failure (arrival %) | at 100% | at 130% "
        "| TopologyAffinityError /1000 pods "
        "| multi-GPU on best set | single-numa aligned | gangs on min. nodes | partial-gang holds "
        "| latency p50 / p99 ms |"
    )
    lines = [header, "|" + "---|" * 10]
    for s in summaries:
        lines.append(
            f"| {s['policy']} | {cell(s['unallocated_at_first_failure'])} ({cell(s['first_failure_arrival'])}) "
            f"| {cell(s['unallocated_at_100'])} "
            f"| {cell(s['unallocated_at_130'])} | {cell(s['topology_affinity_errors_per_1000'])} "
            f"| {cell(s['multi_gpu_best_connected'], True)} | {cell(s['single_numa_aligned'], True)} "
            f"| {cell(s['gangs_minimal_nodes'], True)} | {cell(s['partial_gang_holds'])} "
            f"| {cell(s['latency_p50_ms'])} / {cell(s['latency_p99_ms'])} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """``python -m placement.sim``: the flags of ``kubenexus-placement simulate``, as a program of its own."""
    parser = argparse.ArgumentParser(
        prog="python -m placement.sim",
        description=_help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)
    return run_simulate(parser.parse_args(argv))
