"""Plots of a comparison (PNG and SVG), when matplotlib is installed (the ``plots`` extra)."""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from placement.sim.run import MAX_ARRIVAL, RunResult


def plot_results(runs: Mapping[str, Sequence[RunResult]], out: Path) -> bool:
    """Allocated and unallocated GPU share against arrival, median over seeds; False without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return False
    # matplotlib is an optional extra: imported only once it is known to be installed.
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # noqa: PLC0415

    arrivals = list(range(MAX_ARRIVAL + 1))
    for name, ylabel, unallocated in (
        ("allocation", "allocated GPUs, % of capacity", False),
        ("unallocated", "unallocated GPUs, % of capacity", True),
    ):
        figure, axes = plt.subplots(figsize=(8, 5))
        for policy, results in runs.items():
            curve = []
            for percent in arrivals:
                values = [100 - r.unallocated_at(percent) for r in results]
                allocated = statistics.median(values)
                curve.append(100 - allocated if unallocated else allocated)
            axes.plot(arrivals, curve, label=policy, linewidth=1.2)
        if unallocated:
            axes.set_xlim(80, MAX_ARRIVAL)
            axes.set_ylim(0, 25)
        axes.set_xlabel("arrived GPU demand, % of capacity")
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
        figure.tight_layout()
        for suffix in ("png", "svg"):
            figure.savefig(out / f"{name}.{suffix}", dpi=110)
        plt.close(figure)
    return True
