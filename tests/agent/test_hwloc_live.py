"""This machine's own topology against hwloc run live on the real /."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from agent.discovery import discover
from agent.hostfs import HostFS
from tests.conftest import SHARED_DATA, require_shared

ORACLE_TOOL = SHARED_DATA.parent / "tools" / "hwloc_oracle.py"


@pytest.fixture(scope="module")
def live_oracle() -> dict[str, Any]:
    if shutil.which("lstopo-no-graphics") is None:
        pytest.skip("lstopo-no-graphics not installed (apt-get install hwloc-nox)")
    require_shared(ORACLE_TOOL)
    result = subprocess.run(
        [sys.executable, str(ORACLE_TOOL), "/", "--disallowed"], capture_output=True, text=True, check=True, timeout=120
    )
    oracle: dict[str, Any] = json.loads(result.stdout)
    return oracle


def test_live_numa_cells_match_hwloc(live_oracle: dict[str, Any]) -> None:
    topology = discover(HostFS("/"), nvml=None)
    theirs = {node["os_index"]: node for node in live_oracle["numa_nodes"]}
    assert [cell.id for cell in topology.numa_cells] == sorted(theirs)
    for cell in topology.numa_cells:
        if cell.cpus:
            assert list(cell.cpus) == theirs[cell.id]["cpus"]
        assert cell.memory_bytes == theirs[cell.id]["local_memory_bytes"]
    distances = live_oracle["distances"]
    if distances is not None:
        assert topology.distances is not None
        assert [list(row) for row in topology.distances.matrix] == distances["matrix"]


def test_live_pci_devices_match_hwloc(live_oracle: dict[str, Any]) -> None:
    topology = discover(HostFS("/"), nvml=None)
    ours = {device.bus_id: device for device in topology.pci_devices}
    for entry in live_oracle["pci"]:
        assert entry["busid"] in ours
        device = ours[entry["busid"]]
        assert f"{device.vendor_id:04x}:{device.device_id:04x}" == entry["vendor_device"]
        assert f"{device.class_code >> 8:04x}" == entry["class"]
