"""benchmarks/agent_functions.py at small counts (the figures are the benchmark's, not the test's), and the bound
it measures: a host listing more GPU functions than any node has gets the first ``MAX_MODELLED_DEVICES``
modelled, with a warning, and discovery stays linear (issue 30, item 5)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from agent.discovery import MAX_MODELLED_DEVICES, discover
from agent.hostfs import HostFS
from benchmarks import agent_functions

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["gpu", "nic"])
def test_a_host_past_the_bound_is_modelled_up_to_it_with_a_warning(kind: str) -> None:
    listed = MAX_MODELLED_DEVICES + 2
    with tempfile.TemporaryDirectory() as scratch:
        root = agent_functions.build_host(Path(scratch) / "host", listed, kind)
        topology = discover(HostFS(str(root)), nvml=None)
    devices = topology.gpus if kind == "gpu" else topology.nics
    assert len(devices) == MAX_MODELLED_DEVICES
    assert len(topology.pci_devices) >= listed  # every function is still listed as a PCI device
    pairs = MAX_MODELLED_DEVICES * (MAX_MODELLED_DEVICES - 1) // 2
    assert len(topology.links) == pairs
    warned = [warning.message for warning in topology.warnings if "are modelled" in warning.message]
    assert warned == [
        f"{listed} {'GPU' if kind == 'gpu' else 'network'} functions: only the first {MAX_MODELLED_DEVICES} are "
        "modelled (no real node has that many; the link matrix grows with the square of the count)"
    ]


def test_the_benchmark_prints_its_table_and_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    agent_functions.main(["--counts", "64,256"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| gpu functions | seconds |")
    assert [line.split(" | ")[0] for line in lines[2:4]] == ["| 64", "| 256"]
    assert all(" s, " in line for line in lines[2:4])  # the unbounded run beside it
    assert lines[-1] in {"met"} or lines[-1].startswith("MISSED: ")
