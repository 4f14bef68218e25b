"""Whole-node discovery of GPU machines: fake NVML (tests/fake_nvml.py) plus a matching sysfs tree,
through ``agent.discovery.discover`` and the ``topo`` renderer, checked against real captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.discovery import discover
from agent.hostfs import HostFS
from kubenexus.topology.json_codec import dumps, from_dict, loads, to_dict
from kubenexus.topology.model import NodeTopology, PathKind
from kubenexus.topology.topo_matrix import parse_topo_matrix, render_topo_matrix
from tests import TESTS
from tests.conftest import GPU_DIR, require_shared
from tests.fake_nvml import FakeNvml
from tests.fake_sysfs import build_one_cell_vm, build_two_socket_host
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import H200_VM, HGX_H100, L40S_4X, PCIE_NVLINK_BRIDGES, GpuMachine

REAL_CAPTURES = TESTS / "real_captures"


def discover_machine(tmp_path: Path, machine: GpuMachine, *, with_nvml: bool = True) -> NodeTopology:
    host = build_one_cell_vm if machine is H200_VM else build_two_socket_host
    root = build_gpu_sysfs(host(tmp_path / machine.name), machine)
    nvml = FakeNvml(machine).module if with_nvml else None
    return discover(HostFS(str(root)), nvml=nvml, nvml_with_host_root=True)


def gpu_cells(topology: NodeTopology) -> dict[tuple[str, str], str]:
    return {
        (link.a, link.b): link.label for link in topology.links if link.a.startswith("GPU") and link.b.startswith("GPU")
    }


def test_hgx_h100_renders_the_real_capture_gpu_matrix(tmp_path: Path) -> None:
    topology = discover_machine(tmp_path, HGX_H100)
    rendered = parse_topo_matrix(render_topo_matrix(topology))
    capture = parse_topo_matrix(
        require_shared(GPU_DIR / "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt").read_text()
    )
    assert gpu_cells(rendered) == gpu_cells(capture)
    assert set(gpu_cells(rendered).values()) == {"NV18"}
    assert [(g.cpu_affinity, g.numa_node) for g in rendered.gpus] == [
        (g.cpu_affinity, g.numa_node) for g in capture.gpus
    ]
    assert topology.gpu_source == "nvml"


def test_hgx_h100_nics_sit_on_their_gpus_switch(tmp_path: Path) -> None:
    topology = discover_machine(tmp_path, HGX_H100)
    assert [nic.name for nic in topology.nics] == [f"mlx5_{i}" for i in range(8)]
    paths = {(link.a, link.b): link.path for link in topology.links}
    for index in range(8):
        assert paths[(f"GPU{index}", f"NIC{index}")] is PathKind.PIX
    assert paths[("GPU0", "NIC7")] is PathKind.SYS  # other socket
    assert paths[("NIC0", "NIC1")] in {PathKind.NODE, PathKind.PHB, PathKind.PXB}
    text = render_topo_matrix(topology)
    assert "NIC Legend:" in text
    assert "  NIC0: mlx5_0" in text


def test_bridge_pairs_and_nvml_disagreement_are_kept(tmp_path: Path) -> None:
    topology = discover_machine(tmp_path, PCIE_NVLINK_BRIDGES)
    nvlinked = {pair for pair, label in gpu_cells(topology).items() if label.startswith("NV")}
    assert nvlinked == {("GPU0", "GPU2"), ("GPU1", "GPU3"), ("GPU4", "GPU5"), ("GPU6", "GPU7")}
    # The real machine's NVML answers SYS where sysfs sees one NUMA node: both answers are kept.
    assert any(link.nvml_path is PathKind.SYS and link.path is not PathKind.SYS for link in topology.links)


def test_without_nvml_the_gpus_still_come_from_sysfs(tmp_path: Path) -> None:
    topology = discover_machine(tmp_path, L40S_4X, with_nvml=False)
    assert len(topology.gpus) == 4
    assert topology.gpu_source is not None
    assert topology.gpu_source.startswith("sysfs")
    assert all(link.path is not PathKind.NVLINK for link in topology.links)


@pytest.mark.parametrize("machine", [HGX_H100, PCIE_NVLINK_BRIDGES], ids=lambda m: m.name)
def test_gpu_nodes_round_trip_through_json(tmp_path: Path, machine: GpuMachine) -> None:
    topology = discover_machine(tmp_path, machine)
    assert loads(dumps(topology)) == topology


def test_h200_vm_discovers_as_the_real_machine_did(tmp_path: Path) -> None:
    """The fake NVML and sysfs of the H200 VM give what the agent printed on the real VM, field by field."""
    sections = ("gpu_source", "gpus", "nics", "links", "warnings")
    printed = json.loads((REAL_CAPTURES / "h200_vm_discover.json").read_text())
    discovered = json.loads(dumps(discover_machine(tmp_path, H200_VM)))
    # Printed by an agent from before Gpu.numa_affinity: read through the codec, as any reader does,
    # the absent field takes its default.
    assert "numa_affinity" not in printed["gpus"][0]
    captured = to_dict(from_dict(discovered | {section: printed[section] for section in sections}))
    for section in sections:
        assert discovered[section] == captured[section], section
    # What the real run showed: no NVLink (NotSupported on every link), GPU NUMA from NVML's affinity
    # although sysfs says -1, the virtio NIC one host bridge away.
    assert captured["gpus"][0]["nvlinks"] == []
    assert captured["gpus"][0]["numa_node"] == 0
    assert captured["links"] == [{"a": "GPU0", "b": "NIC0", "nvlinks": 0, "nvml_path": None, "path": "PHB"}]


def test_real_h200_topo_matrix_with_terminal_escapes_parses(tmp_path: Path) -> None:
    """nvidia-smi underlines its header with ANSI escapes; the parser reads through them."""
    text = (REAL_CAPTURES / "h200_vm_nvidia-smi_topo_m.txt").read_text()
    assert "\x1b[4m" in text
    parsed = parse_topo_matrix(text)
    assert [(gpu.cpu_affinity, gpu.numa_node) for gpu in parsed.gpus] == [(tuple(range(16)), 0)]
    assert parsed.nics == ()
    assert parsed.links == ()
