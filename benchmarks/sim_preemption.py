"""Preemption on the trace: the service's preemption against kube-scheduler's rule (``placement.sim.preemption_trace``).

``python -m benchmarks.sim_preemption --seeds 3 --subsample 2 --jobs 2`` fills the trace's cluster with its
low-priority pods, lets the high-priority ones arrive, and prints per rule the medians over seeds
0..N-1 as a Markdown table, with the targets and whether ours meets them. ``--subsample N`` keeps every
Nth node and pod (a smaller cluster of the same mix); ``--nodes`` / ``--pods`` name other trace files
(default: the simulator's, ``KUBENEXUS_SHARED_DATA``/traces/alibaba-gpu-v2023); ``--rules`` picks the
rules; ``--out`` also writes ``runs.csv`` (every rule and seed) and ``summary.json`` there. A line per
finished run goes to stderr.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from placement.sim.cli import cell
from placement.sim.preemption_trace import OURS, RULES, PreemptionResult, median_summary, simulate_preemption
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

TARGETS = "targets: fewer evictions for the same placements, and 0 unusable preemptions (ours)"


def run_all(
    nodes: Sequence[TraceNode], pods: Sequence[TracePod], rules: Sequence[str], *, seeds: int, jobs: int
) -> dict[str, list[PreemptionResult]]:
    """Every rule on every seed; ``jobs`` > 1 runs them in processes. Results in seed order per rule."""
    work = [(rule, seed) for seed in range(seeds) for rule in rules]
    started = time.monotonic()
    results: dict[tuple[str, int], PreemptionResult] = {}

    def done(result: PreemptionResult) -> None:
        results[(result.rule, result.seed)] = result
        elapsed = time.monotonic() - started
        print(f"{result.rule} seed {result.seed} done ({elapsed:.0f} s)", file=sys.stderr, flush=True)

    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(simulate_preemption, nodes, pods, rule, seed) for rule, seed in work]
            for future in futures:
                done(future.result())
    else:
        for rule, seed in work:
            done(simulate_preemption(nodes, pods, rule, seed))
    return {rule: [results[(rule, seed)] for seed in range(seeds)] for rule in rules}


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The medians as a Markdown table (docs/benchmarks.md, "Preemption on the trace")."""
    header = (
        "| rule | high-priority pods placed (arrived) | of them by preemption | high gangs whole (arrived) "
        "| evictions | evicted GPUs | evictions per high-priority GPU placed | unusable preemptions "
        "| attempts per preemptor placed (mean / max) | low gangs broken | decision p50 / p99 ms |"
    )
    lines = [header, "|" + "---|" * 11]
    for s in summaries:
        lines.append(
            f"| {s['rule']} | {cell(s['high_placed'])} ({cell(s['high_pods'])}) "
            f"| {cell(s['placed_by_preemption'])} | {cell(s['high_gangs_placed'])} ({cell(s['high_gangs'])}) "
            f"| {cell(s['evictions'])} | {cell(s['evicted_gpus'], digits=1)} "
            f"| {cell(s['evictions_per_placed_high_gpu'])} "
            f"| {cell(s['unusable_preemptions'])} | {cell(s['attempts_mean'])} / {cell(s['attempts_max'])} "
            f"| {cell(s['broken_gangs'])} "
            f"| {cell(s['latency_p50_ms'], digits=1)} / {cell(s['latency_p99_ms'], digits=1)} |"
        )
    return "\n".join(lines)


def verdicts(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Ours against each other rule, on the two targets."""
    ours = next((s for s in summaries if s["rule"] == OURS), None)
    if ours is None:
        return []
    lines = [f"0 unusable preemptions (ours): {'met' if ours['unusable_preemptions'] == 0 else 'MISSED'}"]
    for other in summaries:
        if other is ours:
            continue
        same_or_more = ours["high_placed"] >= other["high_placed"]
        fewer = (ours["evictions_per_placed_high_gpu"] or 0.0) < (other["evictions_per_placed_high_gpu"] or 0.0)
        met = "met" if same_or_more and fewer else "MISSED"
        lines.append(
            f"fewer evictions for the same placements against {other['rule']}: {met} (ours places "
            f"{cell(ours['high_placed'])} high-priority pods with {cell(ours['evictions_per_placed_high_gpu'])} "
            f"evictions per high-priority GPU placed; {other['rule']} {cell(other['high_placed'])} with "
            f"{cell(other['evictions_per_placed_high_gpu'])})"
        )
    return lines


def write_results(runs: dict[str, list[PreemptionResult]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    every = [result.summary() for results in runs.values() for result in results]
    with (out / "runs.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(every[0]))
        writer.writeheader()
        writer.writerows(every)
    summaries = [median_summary(results) for results in runs.values()]
    (out / "summary.json").write_text(json.dumps(summaries, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    data = shared_data_dir() / TRACE_DIR
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim_preemption", description=__doc__)
    parser.add_argument("--nodes", type=Path, default=data / DEFAULT_NODE_LIST, help="node list CSV")
    parser.add_argument("--pods", type=Path, default=data / DEFAULT_POD_LIST, help="pod list CSV")
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated preemption rules")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1; the median is reported")
    parser.add_argument("--subsample", type=int, default=1, help="keep every Nth node and pod")
    parser.add_argument("--jobs", type=int, default=1, help="runs (rule x seed) in parallel processes")
    parser.add_argument("--out", type=Path, help="folder for runs.csv and summary.json")
    args = parser.parse_args(argv)
    rules = [r.strip() for r in str(args.rules).split(",") if r.strip()]
    unknown = [r for r in rules if r not in RULES]
    if unknown or not rules:
        print(f"sim_preemption: unknown rules {unknown}; known: {', '.join(RULES)}", file=sys.stderr)
        return 2
    if args.seeds < 1 or args.subsample < 1 or args.jobs < 1:
        print("sim_preemption: --seeds, --subsample and --jobs must be at least 1", file=sys.stderr)
        return 2
    missing = missing_trace(args.nodes, args.pods)
    if missing is not None:
        print(f"sim_preemption: {missing}", file=sys.stderr)
        return 2
    try:
        nodes, pods = read_trace(args.nodes, args.pods, subsample=args.subsample)
    except TraceError as error:
        print(f"sim_preemption: cannot read the trace: {error}", file=sys.stderr)
        return 1
    runs = run_all(nodes, pods, rules, seeds=args.seeds, jobs=args.jobs)
    summaries = [median_summary(runs[rule]) for rule in rules]
    print(format_table(summaries))
    print(TARGETS)
    for line in verdicts(summaries):
        print(line)
    if args.out is not None:
        write_results(runs, args.out)
        print(f"results in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
