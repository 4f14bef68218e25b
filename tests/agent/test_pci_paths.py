"""PCIe path classes on hand-built PCI trees, and the device links built from them.

The tree (bus ids in sysfs form)::

    pci0000:00 (NUMA 0)
      00:01.0 root port
        01:00.0 switch upstream port
          02:00.0 downstream port -> gpu0 03:00.0
          02:01.0 downstream port -> nic0 04:00.0, nic0 port 2 04:00.1
          02:02.0 downstream port
            05:00.0 nested switch upstream port
              06:00.0 downstream port -> gpu1 07:00.0
              06:01.0 downstream port -> gpu2 08:00.0
      00:02.0 root port -> gpu3 09:00.0
      00:1f.0 on the root bus itself (no bridge)
    pci0000:40 (NUMA 0)  40:01.0 root port -> gpu4 41:00.0
    pci0000:80 (NUMA 1)  80:01.0 root port -> gpu5 81:00.0
    pci0000:c0 (device NUMA unknown, root port says 1)  c0:01.0 -> gpu6 c1:00.0
"""

from __future__ import annotations

import itertools

import pytest

from kubenexus.topology.model import DeviceLink, Gpu, Nic, PathKind, PciDevice
from kubenexus.topology.paths import build_device_links, classify_pci_path

GPU_CLASS = 0x030200
NIC_CLASS = 0x020700
BRIDGE_CLASS = 0x060400


def _device(
    bus_id: str, bridges: tuple[str, ...], root: str, numa: int | None, class_code: int = GPU_CLASS
) -> PciDevice:
    return PciDevice(
        bus_id=bus_id,
        class_code=class_code,
        vendor_id=0x10DE,
        device_id=0x2330,
        numa_node=numa,
        local_cpus=(),
        bridge_path=bridges,
        root=root,
    )


SWITCH = ("0000:00:01.0", "0000:01:00.0")
NESTED = (*SWITCH, "0000:02:02.0", "0000:05:00.0")

DEVICES = {
    "gpu0": _device("0000:03:00.0", (*SWITCH, "0000:02:00.0"), "pci0000:00", 0),
    "nic0": _device("0000:04:00.0", (*SWITCH, "0000:02:01.0"), "pci0000:00", 0, NIC_CLASS),
    "nic0b": _device("0000:04:00.1", (*SWITCH, "0000:02:01.0"), "pci0000:00", 0, NIC_CLASS),
    "gpu1": _device("0000:07:00.0", (*NESTED, "0000:06:00.0"), "pci0000:00", 0),
    "gpu2": _device("0000:08:00.0", (*NESTED, "0000:06:01.0"), "pci0000:00", 0),
    "gpu3": _device("0000:09:00.0", ("0000:00:02.0",), "pci0000:00", 0),
    "rootbus": _device("0000:00:1f.0", (), "pci0000:00", 0),
    "gpu4": _device("0000:41:00.0", ("0000:40:01.0",), "pci0000:40", 0),
    "gpu5": _device("0000:81:00.0", ("0000:80:01.0",), "pci0000:80", 1),
    "gpu6": _device("0000:c1:00.0", ("0000:c0:01.0",), "pci0000:c0", None),
}
BRIDGES = {"rp_c0": _device("0000:c0:01.0", (), "pci0000:c0", 1, BRIDGE_CLASS)}
BY_BUS_ID = {device.bus_id: device for device in (*DEVICES.values(), *BRIDGES.values())}

EXPECTED = [
    ("gpu0", "nic0", PathKind.PIX),  # the two sides of one switch
    ("nic0", "nic0b", PathKind.PIX),  # two functions behind one switch port
    ("gpu1", "gpu2", PathKind.PIX),  # the two sides of the nested switch
    ("gpu0", "gpu1", PathKind.PXB),  # through the nested switch as well
    ("nic0", "gpu2", PathKind.PXB),
    ("gpu0", "gpu3", PathKind.PHB),  # different root ports of one root complex
    ("gpu1", "gpu3", PathKind.PHB),
    ("gpu0", "rootbus", PathKind.PHB),
    ("gpu3", "rootbus", PathKind.PHB),
    ("gpu0", "gpu4", PathKind.NODE),  # different root complexes, both on NUMA 0
    ("gpu3", "gpu4", PathKind.NODE),
    ("gpu0", "gpu5", PathKind.SYS),  # NUMA 0 and NUMA 1
    ("gpu4", "gpu5", PathKind.SYS),
]


@pytest.mark.parametrize(("first", "second", "expected"), EXPECTED)
def test_each_pair_has_its_nvidia_smi_class_both_ways(first: str, second: str, expected: PathKind) -> None:
    a, b = DEVICES[first], DEVICES[second]
    assert classify_pci_path(a, b) is expected
    assert classify_pci_path(b, a) is expected
    assert classify_pci_path(a, b, BY_BUS_ID) is expected


def test_a_device_is_x_to_itself() -> None:
    for device in DEVICES.values():
        assert classify_pci_path(device, device) is PathKind.SELF


def test_every_pair_is_symmetric_and_cross_root_pairs_are_node_or_sys() -> None:
    for a, b in itertools.combinations(DEVICES.values(), 2):
        path = classify_pci_path(a, b, BY_BUS_ID)
        assert path is classify_pci_path(b, a, BY_BUS_ID)
        assert (path in (PathKind.NODE, PathKind.SYS)) == (a.root != b.root)


def test_unknown_numa_across_roots_is_sys_unless_a_bridge_above_tells() -> None:
    gpu0, gpu5, gpu6 = DEVICES["gpu0"], DEVICES["gpu5"], DEVICES["gpu6"]
    for devices_by_bus_id in (None, {}, {device.bus_id: device for device in DEVICES.values()}):
        assert classify_pci_path(gpu5, gpu6, devices_by_bus_id) is PathKind.SYS
        assert classify_pci_path(gpu6, gpu5, devices_by_bus_id) is PathKind.SYS
    # gpu6's root port carries NUMA 1 (firmware put _PXM on the port only).
    assert classify_pci_path(gpu5, gpu6, BY_BUS_ID) is PathKind.NODE
    assert classify_pci_path(gpu6, gpu5, BY_BUS_ID) is PathKind.NODE
    assert classify_pci_path(gpu0, gpu6, BY_BUS_ID) is PathKind.SYS


def _gpu(index: int, name: str) -> Gpu:
    return Gpu(index=index, pci_bus_id=DEVICES[name].bus_id)


GPUS = (_gpu(0, "gpu0"), _gpu(1, "gpu1"), _gpu(2, "gpu3"), _gpu(3, "gpu5"))
NICS = (Nic(name="mlx5_0", pci_bus_id=DEVICES["nic0"].bus_id), Nic(name="mlx5_1", pci_bus_id=DEVICES["nic0b"].bus_id))


def _by_pair(links: tuple[DeviceLink, ...]) -> dict[tuple[str, str], DeviceLink]:
    return {(link.a, link.b): link for link in links}


def test_one_link_per_unordered_pair_gpus_first() -> None:
    links = build_device_links(GPUS, NICS, BY_BUS_ID, {})
    names = ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert [(link.a, link.b) for link in links] == list(itertools.combinations(names, 2))
    by_pair = _by_pair(links)
    assert by_pair["GPU0", "GPU1"].path is PathKind.PXB
    assert by_pair["GPU0", "GPU2"].path is PathKind.PHB
    assert by_pair["GPU0", "GPU3"].path is PathKind.SYS
    assert by_pair["GPU0", "NIC0"].path is PathKind.PIX
    assert by_pair["NIC0", "NIC1"].path is PathKind.PIX
    assert all(link.nvlinks == 0 and link.nvml_path is None for link in links)


def test_nvlink_takes_precedence_over_the_pcie_class() -> None:
    links = _by_pair(build_device_links(GPUS, NICS, BY_BUS_ID, {(1, 0): 12, (2, 3): 4, (0, 2): 0}))
    assert links["GPU0", "GPU1"] == DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 12)
    assert links["GPU0", "GPU1"].label == "NV12"
    assert links["GPU2", "GPU3"] == DeviceLink("GPU2", "GPU3", PathKind.NVLINK, 4)
    assert links["GPU0", "GPU2"] == DeviceLink("GPU0", "GPU2", PathKind.PHB)  # a count of 0 is no NVLink
    assert links["GPU0", "NIC0"].path is PathKind.PIX


def test_nvml_path_is_kept_only_where_it_disagrees_with_sysfs() -> None:
    nvml = {(0, 1): PathKind.PXB, (2, 0): PathKind.NODE, (0, 3): PathKind.SYS, (1, 2): PathKind.SYS}
    links = _by_pair(build_device_links(GPUS, NICS, BY_BUS_ID, {(1, 2): 6}, nvml))
    assert links["GPU0", "GPU1"].nvml_path is None  # agrees
    assert links["GPU0", "GPU3"].nvml_path is None  # agrees
    assert links["GPU0", "GPU2"] == DeviceLink("GPU0", "GPU2", PathKind.PHB, 0, nvml_path=PathKind.NODE)
    # NVML's answer is a PCIe answer: it is compared with the PCIe class, even under NVLink.
    assert links["GPU1", "GPU2"] == DeviceLink("GPU1", "GPU2", PathKind.NVLINK, 6, nvml_path=PathKind.SYS)
    assert all(link.nvml_path is None for (a, _), link in links.items() if a.startswith("NIC"))


def test_a_device_missing_from_sysfs_is_sys_unless_nvml_answers() -> None:
    ghost = Gpu(index=4, pci_bus_id="0000:ee:00.0")
    links = _by_pair(build_device_links((*GPUS, ghost), NICS, BY_BUS_ID, {}, {(0, 4): PathKind.PIX}))
    assert links["GPU0", "GPU4"] == DeviceLink("GPU0", "GPU4", PathKind.PIX)
    assert links["GPU1", "GPU4"] == DeviceLink("GPU1", "GPU4", PathKind.SYS)
    assert links["GPU4", "NIC0"] == DeviceLink("GPU4", "NIC0", PathKind.SYS)


def test_no_devices_no_links() -> None:
    assert build_device_links((), (), {}, {}) == ()
    assert build_device_links(GPUS[:1], (), BY_BUS_ID, {}) == ()
