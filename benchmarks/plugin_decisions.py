"""The default install's decision: kubenexus-scheduler's plugin, its own Go code, scheduling pods one at a time.

The chart's default mode is ``plugin`` (deploy/helm/kubenexus/values.yaml): kube-scheduler with the KubeNexus
framework plugin asks the service once per pod at PreFilter (the Score RPC, the pod's JSON, every node) and
once at Reserve (the Reserve RPC, the chosen node). ``kubenexus-loadgen`` (scheduler/cmd/kubenexus-loadgen,
built with kubenexus-scheduler by tools/kubenexus_scheduler.py) runs exactly that code of the plugin against a
service: PreFilter, Filter and Score on every node PreFilter kept, the best node, Reserve; it times that span,
then gives the reservation back with the plugin's Unreserve, untimed. The pod is the benchmark's GPU pod as the
API server hands it over (defaulted requests, tolerations and token volume).

``measure`` returns the figures, or the reason they could not be had (no Go toolchain, a failed run).
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.kubenexus_scheduler import PROGRAMS, BuildError

LOADGEN = "kubenexus-loadgen"
WARM_UP = 50  # pods scheduled first, untimed
SECONDS_PER_DECISION = 0.2  # the run's timeout, generous: a decision takes a few ms


@dataclass(frozen=True)
class PluginLatency:
    """Milliseconds of one pod's PreFilter-to-Reserve span over the timed pods, and of its two calls alone."""

    decisions: int
    p50_ms: float
    p99_ms: float
    prefilter_p50_ms: float
    reserve_p50_ms: float

    @classmethod
    def parse(cls, text: str) -> PluginLatency:
        """kubenexus-loadgen's output: one JSON object of per-pod milliseconds. ValueError when malformed."""
        try:
            document = json.loads(text)
        except ValueError as error:
            raise ValueError(f"{LOADGEN} printed no JSON: {error}") from None
        if not isinstance(document, dict):
            raise ValueError(f"{LOADGEN} printed {type(document).__name__}, not an object")
        series = {}
        for key in ("decision_ms", "prefilter_ms", "reserve_ms"):
            values = document.get(key)
            if not isinstance(values, list) or not values or not all(isinstance(v, (int, float)) for v in values):
                raise ValueError(f"{LOADGEN}'s {key} is not a list of milliseconds")
            series[key] = [float(v) for v in values]
        if len({len(values) for values in series.values()}) != 1:
            raise ValueError(f"{LOADGEN}'s series differ in length")
        decisions = series["decision_ms"]
        return cls(
            decisions=len(decisions),
            p50_ms=statistics.median(decisions),
            p99_ms=percentile(decisions, 0.99),
            prefilter_p50_ms=statistics.median(series["prefilter_ms"]),
            reserve_p50_ms=statistics.median(series["reserve_ms"]),
        )


def percentile(values: Sequence[float], share: float) -> float:
    """The sorted value at ``share`` of the way (``benchmarks.placement_service.latency`` reads its own so)."""
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))]


def loadgen() -> Path | str:
    """The built kubenexus-loadgen (built with kubenexus-scheduler when not yet: minutes cold), or why not."""
    try:
        return PROGRAMS.build() / LOADGEN
    except BuildError as error:
        return f"{LOADGEN} could not be built: {error}"


def measure(address: str, decisions: int, *, binary: Path | None = None) -> PluginLatency | str:
    """``decisions`` pods scheduled through the plugin against the service at ``address``; the figures, or
    the reason there are none."""
    program = binary if binary is not None else loadgen()
    if isinstance(program, str):
        return program
    command = [str(program), "-address", address, "-decisions", str(decisions), "-warm-up", str(WARM_UP)]
    try:
        run = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=(decisions + WARM_UP) * SECONDS_PER_DECISION,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        return f"{LOADGEN} did not finish in {error.timeout:g} s"
    except OSError as error:
        return f"{LOADGEN} could not run: {error}"
    if run.returncode != 0:
        last = run.stderr.strip().splitlines()[-1:] or ["no message"]
        return f"{LOADGEN} failed (exit status {run.returncode}): {last[0].removeprefix(f'{LOADGEN}: ')}"
    try:
        return PluginLatency.parse(run.stdout)
    except ValueError as error:
        return str(error)
