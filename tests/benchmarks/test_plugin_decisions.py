"""benchmarks.plugin_decisions: kubenexus-loadgen's figures read, its failures told, and one real run of the
plugin's code against a real service child."""

from __future__ import annotations

import json
import random
import stat
from pathlib import Path

import pytest

from benchmarks import plugin_decisions
from benchmarks.placement_service import Service
from benchmarks.plugin_decisions import PluginLatency, measure
from tools.kubenexus_scheduler import PROGRAMS, BuildError


def _output(decisions: list[float], prefilter: list[float], reserve: list[float]) -> str:
    return json.dumps({"decision_ms": decisions, "prefilter_ms": prefilter, "reserve_ms": reserve})


def test_parse_reads_the_percentiles_as_the_extender_run_does() -> None:
    decisions = [float(n) for n in range(1, 101)]
    random.Random(3).shuffle(decisions)
    figures = PluginLatency.parse(_output(decisions, [n / 2 for n in decisions], [n / 4 for n in decisions]))
    assert figures == PluginLatency(
        decisions=100, p50_ms=50.5, p99_ms=99.0, prefilter_p50_ms=25.25, reserve_p50_ms=12.625
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "printed no JSON"),
        ("[1, 2]", "printed list, not an object"),
        (json.dumps({"decision_ms": [1.0], "prefilter_ms": [1.0]}), "reserve_ms is not a list"),
        (_output([], [], []), "decision_ms is not a list"),
        (_output([1.0, "2"], [1.0, 1.0], [1.0, 1.0]), "decision_ms is not a list"),  # type: ignore[list-item]
        (_output([1.0, 2.0], [1.0], [1.0, 1.0]), "differ in length"),
    ],
)
def test_parse_refuses_what_is_not_the_loadgens_output(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PluginLatency.parse(text)


def _program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "kubenexus-loadgen"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_measure_runs_the_program_with_the_address_and_counts(tmp_path: Path) -> None:
    args = tmp_path / "args"
    output = _output([2.0, 4.0], [1.0, 1.5], [1.0, 2.5])
    program = _program(tmp_path, f"echo \"$@\" > {args}\necho '{output}'")
    assert measure("127.0.0.1:5050", 2, binary=program) == PluginLatency(
        decisions=2, p50_ms=3.0, p99_ms=2.0, prefilter_p50_ms=1.25, reserve_p50_ms=1.75
    )
    assert args.read_text().split() == ["-address", "127.0.0.1:5050", "-decisions", "2", "-warm-up", "50"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            "echo 'dialing' >&2\necho 'pod 0: PreFilter: refused' >&2\nexit 3",
            "kubenexus-loadgen failed (exit status 3): pod 0: PreFilter: refused",
        ),
        ("exit 1", "kubenexus-loadgen failed (exit status 1): no message"),
        ("echo '{\"decision_ms\": []}'", "kubenexus-loadgen's decision_ms is not a list of milliseconds"),
    ],
)
def test_measure_says_why_there_are_no_figures(tmp_path: Path, body: str, reason: str) -> None:
    assert measure("127.0.0.1:5050", 1, binary=_program(tmp_path, body)) == reason


def test_measure_gives_up_on_a_run_that_does_not_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin_decisions, "SECONDS_PER_DECISION", 0.002)  # 51 pods: about 0.1 s
    assert measure("127.0.0.1:5050", 1, binary=_program(tmp_path, "exec sleep 60")) == (
        "kubenexus-loadgen did not finish in 0.102 s"
    )


def test_measure_says_a_missing_program_could_not_run(tmp_path: Path) -> None:
    reason = measure("127.0.0.1:5050", 1, binary=tmp_path / "absent")
    assert isinstance(reason, str)
    assert reason.startswith("kubenexus-loadgen could not run:")


@pytest.mark.cluster  # not the control plane: kubenexus-scheduler's Go build, which the cluster lane makes
@pytest.mark.slow
def test_the_plugins_own_code_schedules_pods_against_a_real_service() -> None:
    try:
        program = PROGRAMS.build() / plugin_decisions.LOADGEN
    except BuildError as error:
        pytest.fail(f"kubenexus-loadgen could not be built: {error}")
    # One node of each of the 20 fixture machines: about 20 places for a 4-GPU pod, against the 80 pods of the
    # run (its warm-up's 50 and 30 timed), so the run ends only if the plugin's Unreserve gave each place back.
    service = Service(20)
    try:
        figures = measure(service.address, 30, binary=program)
    finally:
        service.close()
    assert isinstance(figures, PluginLatency), figures
    assert figures.decisions == 30
    assert 0 < figures.prefilter_p50_ms < figures.p50_ms <= figures.p99_ms
    assert 0 < figures.reserve_p50_ms < figures.p50_ms
