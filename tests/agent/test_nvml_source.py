"""GPU discovery through NVML, against a faithful fake pynvml for machines described from published facts."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pynvml
import pytest

from agent.hostfs import HostFS
from agent.sources.nvml import GpuReport, discover_gpus, load_nvml, normalise_bus_id
from kubenexus.topology.model import NvLinkRemote, PathKind
from kubenexus.topology.nvlink import naive_remote_bus_matching, nvlink_pair_counts
from tests.conftest import GPU_DIR, require_shared
from tests.fake_nvml import FUNCTIONS, FakeNvml
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import (
    ALL_MACHINES,
    DGX_A100,
    GB200_CLIQUE_ID,
    GB200_CLUSTER_UUID,
    GB200_TRAY,
    GH200,
    HEALTHY_MACHINES,
    HGX_H100,
    HGX_H100_BUS_IDS,
    HGX_H100_GPU0_UUID,
    HGX_H100_GPU3_LOST,
    L40S_4X,
    PCIE_NVLINK_BRIDGES,
    GpuMachine,
    pci_devices,
)

NVSWITCH_MACHINES = (DGX_A100, HGX_H100)


def run_discovery(
    tmp_path: Path, machine: GpuMachine, *, init_error: int | None = None, errors: Mapping[str, int] | None = None
) -> tuple[GpuReport, FakeNvml]:
    fake = FakeNvml(machine, init_error=init_error, errors=errors)
    fs = HostFS(str(build_gpu_sysfs(tmp_path / machine.name, machine)))
    report = discover_gpus(fs, pci_devices(machine), nvml=fake.module, allow_fake_root=True)
    return report, fake


def all_pairs(count: int, links: int) -> dict[tuple[int, int], int]:
    return {(a, b): links for a in range(count) for b in range(a + 1, count)}


def capture_nvlink_matrix(name: str) -> dict[tuple[int, int], int]:
    """The NV<n> cells of a real ``nvidia-smi topo -m`` capture, keyed (lower, higher) GPU index."""
    text = require_shared(GPU_DIR / name).read_text()
    counts: dict[tuple[int, int], int] = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        row = int(cells[0][3:])
        for column, cell in enumerate(cells[1:]):
            match = re.fullmatch(r"NV(\d+)", cell)
            if match and row < column:
                counts[(row, column)] = int(match.group(1))
    return counts


@pytest.mark.parametrize("machine", ALL_MACHINES, ids=lambda m: m.name)
def test_every_gpu_found_with_sysfs_bus_ids_and_numa(tmp_path: Path, machine: GpuMachine) -> None:
    report, fake = run_discovery(tmp_path, machine)

    assert report.source == "nvml"
    assert [gpu.index for gpu in report.gpus] == list(range(len(machine.gpus)))
    assert [gpu.pci_bus_id for gpu in report.gpus] == [spec.sysfs_bus_id for spec in machine.gpus]
    assert all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", gpu.pci_bus_id) for gpu in report.gpus)
    assert [gpu.numa_node for gpu in report.gpus] == [spec.numa_node for spec in machine.gpus]
    assert [gpu.cpu_affinity for gpu in report.gpus] == [spec.cpus for spec in machine.gpus]
    assert (fake.init_calls, fake.shutdown_calls, fake.initialised) == (1, 1, 0)


@pytest.mark.parametrize("machine", HEALTHY_MACHINES, ids=lambda m: m.name)
def test_identity_fields_and_no_warnings_on_a_healthy_machine(tmp_path: Path, machine: GpuMachine) -> None:
    report, _ = run_discovery(tmp_path, machine)

    assert report.warnings == ()  # NotSupported answers are expected, not worth a warning
    for gpu, spec in zip(report.gpus, machine.gpus, strict=True):
        assert gpu.healthy
        assert gpu.health_reason is None
        assert (gpu.uuid, gpu.name) == (spec.uuid, spec.name)
        assert gpu.memory_bytes == spec.memory_mib * 1024 * 1024
        assert gpu.compute_capability == "{}.{}".format(*spec.compute_capability)
        assert gpu.mig_enabled == (None if spec.mig_mode is None else False)


def test_hgx_h100_matches_its_nvidia_smi_capture(tmp_path: Path) -> None:
    captured = require_shared(GPU_DIR / "hgx_h100_bus_ids__thamada-nvidia-smi.txt").read_text().split()
    assert tuple(captured[1::2]) == HGX_H100_BUS_IDS

    report, _ = run_discovery(tmp_path, HGX_H100)

    gpu0 = report.gpus[0]
    assert (gpu0.pci_bus_id, gpu0.uuid, gpu0.name) == ("0000:18:00.0", HGX_H100_GPU0_UUID, "NVIDIA H100 80GB HBM3")
    assert gpu0.memory_bytes == 81559 << 20
    assert (gpu0.compute_capability, gpu0.mig_enabled) == ("9.0", False)


def test_gpu_numa_node_only_where_gpu_memory_is_a_numa_node(tmp_path: Path) -> None:
    for machine in HEALTHY_MACHINES:
        report, _ = run_discovery(tmp_path, machine)
        gpu_nodes = [gpu.gpu_numa_node for gpu in report.gpus]
        if machine is GB200_TRAY:
            assert gpu_nodes == [2, 10, 18, 26]
            assert [gpu.numa_node for gpu in report.gpus] == [0, 0, 1, 1]  # the Grace each GPU hangs off
        else:
            assert gpu_nodes == [None] * len(machine.gpus), machine.name


@pytest.mark.parametrize("sysfs_hides_numa", [False, True])
def test_gh200_keeps_the_grace_node_and_the_gpu_memory_node_apart(tmp_path: Path, sysfs_hides_numa: bool) -> None:
    # The CPU-side node from sysfs, or NVML's memory affinity when sysfs says -1; the memory node from NVML.
    machine = dataclasses.replace(
        GH200, gpus=tuple(dataclasses.replace(gpu, sysfs_hides_numa=sysfs_hides_numa) for gpu in GH200.gpus)
    )
    report, _ = run_discovery(tmp_path, machine)
    (gpu,) = report.gpus
    assert (gpu.numa_node, gpu.gpu_numa_node, gpu.cpu_affinity) == (0, 1, tuple(range(72)))
    assert report.warnings == ()


def test_the_fake_answers_the_numa_node_id_as_nvml_does_on_each_platform() -> None:
    for machine, expected in ((GH200, 1), (GB200_TRAY, 2), (HGX_H100, None), (L40S_4X, None)):
        nvml = FakeNvml(machine).module
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        if expected is None:  # x86: NVML_ERROR_NOT_SUPPORTED, raised as pynvml's own class
            with pytest.raises(pynvml.NVMLError_NotSupported) as error:
                nvml.nvmlDeviceGetNumaNodeId(handle)
            assert error.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED
        else:
            assert nvml.nvmlDeviceGetNumaNodeId(handle) == expected
        nvml.nvmlShutdown()


def test_fabric_clique_only_with_a_real_cluster(tmp_path: Path) -> None:
    for machine in HEALTHY_MACHINES:
        report, _ = run_discovery(tmp_path, machine)
        cliques = {gpu.fabric_clique for gpu in report.gpus}
        if machine is GB200_TRAY:
            assert cliques == {f"{GB200_CLUSTER_UUID}.{GB200_CLIQUE_ID}"}
        else:
            # HGX H100: state COMPLETED but an all-zero cluster UUID, i.e. no multi-node fabric.
            assert cliques == {None}, machine.name


def test_fabric_falls_back_to_the_legacy_call_on_older_drivers(tmp_path: Path) -> None:
    errors = {"nvmlDeviceGetGpuFabricInfoV": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    report, _ = run_discovery(tmp_path, GB200_TRAY, errors=errors)

    assert {gpu.fabric_clique for gpu in report.gpus} == {f"{GB200_CLUSTER_UUID}.{GB200_CLIQUE_ID}"}
    assert report.warnings == ()


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (DGX_A100, all_pairs(8, 12)),
        (HGX_H100, all_pairs(8, 18)),
        (GB200_TRAY, all_pairs(4, 18)),
        (PCIE_NVLINK_BRIDGES, {(0, 2): 12, (1, 3): 12, (4, 5): 12, (6, 7): 12}),
        (L40S_4X, {}),
    ],
    ids=lambda value: value.name if isinstance(value, GpuMachine) else "",
)
def test_nvlink_pair_counts(tmp_path: Path, machine: GpuMachine, expected: dict[tuple[int, int], int]) -> None:
    report, _ = run_discovery(tmp_path, machine)

    assert nvlink_pair_counts(report.gpus) == expected


@pytest.mark.parametrize(
    ("machine", "capture"),
    [
        # The p4d and p5 boards are the HGX A100 and HGX H100 baseboards: the same NVSwitch wiring.
        (DGX_A100, "aws_p4d.24xlarge_8xA100__gnosia93-training-on-eks.txt"),
        (HGX_H100, "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt"),
        (PCIE_NVLINK_BRIDGES, "pcie_8gpu_nvlink_bridge_pairs_NV12__k8s-device-plugin-issue546.txt"),
        (L40S_4X, "aws_g6e.12xlarge_4xL40S__gnosia93-training-on-eks.txt"),
    ],
    ids=lambda value: value.name if isinstance(value, GpuMachine) else "",
)
def test_nvlink_pair_counts_match_real_topo_captures(tmp_path: Path, machine: GpuMachine, capture: str) -> None:
    report, _ = run_discovery(tmp_path, machine)

    assert nvlink_pair_counts(report.gpus) == capture_nvlink_matrix(capture)


def test_nvlinks_read_per_link(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, HGX_H100)
    links = report.gpus[0].nvlinks
    assert [link.link for link in links] == list(range(18))  # links 18-35: InvalidArgument, skipped
    assert all(link.active and link.remote_type is NvLinkRemote.SWITCH for link in links)
    assert {link.remote_bus_id for link in links} == {"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}
    assert {link.version for link in links} == {pynvml.NVML_NVLINK_VERSION_4_0}

    report, _ = run_discovery(tmp_path, PCIE_NVLINK_BRIDGES)
    assert {(link.remote_type, link.remote_bus_id) for link in report.gpus[0].nvlinks} == {
        (NvLinkRemote.GPU, "0000:41:00.0")
    }

    report, _ = run_discovery(tmp_path, GB200_TRAY)
    assert {link.remote_bus_id for link in report.gpus[0].nvlinks} == {None}  # switch trays are off this PCI bus

    report, _ = run_discovery(tmp_path, L40S_4X)
    assert all(gpu.nvlinks == () for gpu in report.gpus)


@pytest.mark.parametrize("machine", NVSWITCH_MACHINES, ids=lambda m: m.name)
def test_remote_bus_matching_finds_no_nvlink_behind_nvswitches(tmp_path: Path, machine: GpuMachine) -> None:
    report, _ = run_discovery(tmp_path, machine)

    assert naive_remote_bus_matching(report.gpus) == {}
    assert set(nvlink_pair_counts(report.gpus).values()) == {12 if machine is DGX_A100 else 18}


def test_remote_bus_matching_agrees_on_direct_bridges(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, PCIE_NVLINK_BRIDGES)

    assert naive_remote_bus_matching(report.gpus) == nvlink_pair_counts(report.gpus)


def test_a_lost_gpu_is_unhealthy_and_the_others_are_intact(tmp_path: Path) -> None:
    report, fake = run_discovery(tmp_path, HGX_H100_GPU3_LOST)

    lost = report.gpus[3]
    assert not lost.healthy
    assert lost.health_reason is not None
    assert "GPU is lost" in lost.health_reason
    assert lost.pci_bus_id == "0000:5d:00.0"  # its slot, from sysfs
    assert (lost.numa_node, lost.uuid, lost.nvlinks) == (0, None, ())
    others = [gpu for gpu in report.gpus if gpu.index != 3]
    assert all(gpu.healthy and gpu.uuid and gpu.memory_bytes for gpu in others)
    assert nvlink_pair_counts(report.gpus) == {pair: links for pair, links in all_pairs(8, 18).items() if 3 not in pair}
    assert not any(3 in pair for pair in report.nvml_paths)
    assert fake.initialised == 0


def test_gpus_lost_before_a_handle_keep_their_sysfs_slots(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, L40S_4X, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST})

    assert [gpu.pci_bus_id for gpu in report.gpus] == [spec.sysfs_bus_id for spec in L40S_4X.gpus]
    assert not any(gpu.healthy for gpu in report.gpus)
    assert report.warnings == ()


def test_gpus_without_a_handle_are_left_out_with_warnings(tmp_path: Path) -> None:
    errors = {"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION}
    report, fake = run_discovery(tmp_path, L40S_4X, errors=errors)

    assert report.gpus == ()
    assert len(report.warnings) == 2 * len(L40S_4X.gpus)  # no handle, and sysfs shows a GPU NVML did not give
    assert fake.initialised == 0


def test_not_supported_field_is_none_and_the_rest_stays(tmp_path: Path) -> None:
    not_supported = {"nvmlDeviceGetCudaComputeCapability": pynvml.NVML_ERROR_NOT_SUPPORTED}
    report, _ = run_discovery(tmp_path, HGX_H100, errors=not_supported)

    assert report.source == "nvml"
    assert report.warnings == ()
    assert all(gpu.compute_capability is None for gpu in report.gpus)
    assert all(gpu.uuid and gpu.memory_bytes and gpu.healthy for gpu in report.gpus)
    assert nvlink_pair_counts(report.gpus) == all_pairs(8, 18)


def test_l40s_without_mig_or_nvlink_or_fabric(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, L40S_4X)

    assert all(gpu.mig_enabled is None and gpu.fabric_clique is None for gpu in report.gpus)
    assert {report.nvml_paths[pair] for pair in all_pairs(4, 0)} == {PathKind.NODE}  # the capture: NODE


def test_another_failure_is_a_warning_and_none(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, DGX_A100, errors={"nvmlDeviceGetMemoryInfo": pynvml.NVML_ERROR_NO_PERMISSION})

    assert all(gpu.memory_bytes is None and gpu.healthy for gpu in report.gpus)
    assert len(report.warnings) == len(DGX_A100.gpus)
    assert "Insufficient Permissions" in report.warnings[0].message


def test_numa_from_nvml_when_sysfs_does_not_say(tmp_path: Path) -> None:
    hidden = dataclasses.replace(
        DGX_A100, gpus=tuple(dataclasses.replace(gpu, sysfs_hides_numa=True) for gpu in DGX_A100.gpus)
    )
    report, _ = run_discovery(tmp_path, hidden)

    assert [gpu.numa_node for gpu in report.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_nvml_common_ancestor_paths(tmp_path: Path) -> None:
    report, _ = run_discovery(tmp_path, DGX_A100)
    assert report.nvml_paths[(0, 1)] is PathKind.PIX  # one PCIe switch per GPU pair
    assert report.nvml_paths[(0, 2)] is PathKind.SYS  # NPS4: another NUMA node
    assert len(report.nvml_paths) == 28

    report, _ = run_discovery(tmp_path, PCIE_NVLINK_BRIDGES)
    assert report.nvml_paths[(0, 1)] is PathKind.SYS  # what NVML said there, though sysfs says NODE


@pytest.mark.parametrize(
    "error",
    [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED],
    ids=["library-not-found", "driver-not-loaded"],
)
def test_without_nvml_the_gpus_come_from_sysfs(tmp_path: Path, error: int) -> None:
    report, fake = run_discovery(tmp_path, HGX_H100, init_error=error)

    assert report.source.startswith("sysfs: NVML unavailable (nvmlInit failed: ")
    assert str(pynvml.NVMLError(error)) in report.source
    assert fake.shutdown_calls == 0  # nothing to shut down after a failed init
    assert_sysfs_gpus(report, HGX_H100)
    assert [w.message for w in report.warnings] == [f"GPUs from sysfs only: nvmlInit failed: {pynvml.NVMLError(error)}"]


def test_without_pynvml_the_gpus_come_from_sysfs(tmp_path: Path) -> None:
    fs = HostFS(str(build_gpu_sysfs(tmp_path, DGX_A100)))
    report = discover_gpus(fs, pci_devices(DGX_A100), nvml=None)

    assert report.source == "sysfs: NVML unavailable (NVML not used (disabled, or pynvml not installed))"
    assert_sysfs_gpus(report, DGX_A100)
    assert report.warnings == ()  # NVML was left out on purpose, nothing went wrong


def test_a_fake_root_does_not_ask_the_live_nvml(tmp_path: Path) -> None:
    fake = FakeNvml(GB200_TRAY)
    fs = HostFS(str(build_gpu_sysfs(tmp_path, GB200_TRAY)))
    report = discover_gpus(fs, pci_devices(GB200_TRAY), nvml=fake.module)

    assert fake.init_calls == 0
    assert report.source == f"sysfs: NVML unavailable (host root {fs.root} is not the live host)"
    assert_sysfs_gpus(report, GB200_TRAY)
    assert report.warnings == ()


def assert_sysfs_gpus(report: GpuReport, machine: GpuMachine) -> None:
    # NVSwitches are NVIDIA functions too (class 0x0680); only display/3D controllers are GPUs.
    assert [gpu.pci_bus_id for gpu in report.gpus] == sorted(spec.sysfs_bus_id for spec in machine.gpus)
    assert [gpu.numa_node for gpu in report.gpus] == [spec.numa_node for spec in machine.gpus]
    assert [gpu.cpu_affinity for gpu in report.gpus] == [spec.cpus for spec in machine.gpus]
    assert all(gpu.uuid is None and gpu.nvlinks == () for gpu in report.gpus)
    assert report.nvml_paths == {}


def test_load_nvml_returns_the_module() -> None:
    module, reason = load_nvml()
    assert (module, reason) == (pynvml, None)


@pytest.mark.parametrize(
    ("nvml_form", "sysfs_form"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:AB:00.0", "0000:ab:00.0"),
        ("00000008:01:00.0", "0008:01:00.0"),
        ("00010000:C1:00.1", "10000:c1:00.1"),  # VMD domains are wider than four digits in sysfs too
    ],
)
def test_normalise_bus_id(nvml_form: str, sysfs_form: str) -> None:
    assert normalise_bus_id(nvml_form) == sysfs_form


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_fake_has_pynvml_signatures(name: str) -> None:
    fake = FakeNvml(L40S_4X)

    assert parameters(getattr(fake.module, name)) == parameters(getattr(pynvml, name))


def parameters(function: Callable[..., object]) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults; the fake's type hints are its own."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_fake_hands_back_pynvml_types(tmp_path: Path) -> None:
    fake = FakeNvml(HGX_H100)
    nvml = fake.module
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)

    assert isinstance(nvml.nvmlDeviceGetPciInfo(handle), pynvml.nvmlPciInfo_t)
    assert nvml.nvmlDeviceGetPciInfo(handle).busId == "00000000:18:00.0"  # pynvml decodes to str
    assert isinstance(nvml.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNumaNodeId(handle)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(handle, pynvml.NVML_NVLINK_MAX_LINKS - 1)
    with pytest.raises(TypeError):
        nvml.nvmlDeviceGetGpuFabricInfoV(handle, pynvml.c_nvmlGpuFabricInfoV_t())  # not by reference
    nvml.nvmlShutdown()
