"""GPU machines described from published facts, for the fake NVML module and the fake sysfs tree.

Their PCIe trees are laid out with ``tools.pcie_tree``, as the demo's machines are.

Where a fact is published it is used as published; what no public source gives (most PCI bus ids
of NVSwitches and NICs, the L40S and PCIe-bridge machines' bus ids) is marked illustrative.

- DGX A100: 8x A100-SXM4-40GB, 6 NVSwitches, 12 NVLink 3 links per GPU, 2 to each switch;
  bus ids and NUMA/CPU affinity (NPS4, 8 NUMA nodes) as DGX A100 ``nvidia-smi topo -m`` prints them.
- HGX H100: bus ids from ../shared/data/gpu/hgx_h100_bus_ids__thamada-nvidia-smi.txt, name, memory,
  MIG and fabric state (COMPLETED, all-zero cluster UUID) from the ``nvidia-smi -q`` excerpt beside
  it; 4 NVSwitches with 5+4+4+5 links per GPU (18, NVLink 4); CPU/NUMA layout of the 8x H100
  p5.48xlarge capture. One ConnectX-7 per GPU behind the GPU's PCIe switch.
- GH200: one 72-core Grace and one H100 96GB; the GPU's memory is NUMA node 1 (NVML answers 1).
- GB200 compute tray: 2 Grace CPUs, 4 GPUs; each GPU's memory is a NUMA node of its own (2, 10,
  18, 26), 18 NVLink 5 links to the external NVSwitch trays, fabric COMPLETED in a real cluster.
- 4x L40S (AWS g6e.12xlarge capture): no NVLink, no MIG, every GPU on its own host bridge, NUMA 0.
- 8x A100 PCIe with NVLink bridges on pairs 0-2, 1-3, 4-5, 6-7, NV12 (k8s-device-plugin issue 546
  capture); NVML there answered SYS even for GPUs on one NUMA node.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pynvml

from kubenexus.topology.cpulist import parse_cpulist
from kubenexus.topology.model import PciDevice
from tools.pcie_tree import (
    CLASS_3D_CONTROLLER,
    CLASS_BRIDGE_OTHER,
    CLASS_ETHERNET,
    CLASS_INFINIBAND,
    MELLANOX,
    NVIDIA,
    VIRTIO,
    PcieSlot,
    root_port_slot,
    switch_slot,
    with_switch_ports,
)


@dataclass(frozen=True)
class NvLinkSpec:
    remote_type: int  # pynvml.NVML_NVLINK_DEVICE_TYPE_*
    remote_bus_id: str | None  # NVML form; None where NVML cannot name the remote end (NotSupported)
    active: bool = True


@dataclass(frozen=True)
class FabricSpec:
    state: int  # pynvml.NVML_GPU_FABRIC_STATE_*
    cluster_uuid: uuid.UUID
    clique_id: int
    status: int = pynvml.NVML_SUCCESS


@dataclass(frozen=True)
class GpuSpec:
    bus_id: str  # NVML form, "00000000:18:00.0"
    name: str
    uuid: str
    device_id: int
    memory_mib: int
    compute_capability: tuple[int, int]
    slot: PcieSlot
    numa_node: int  # the host node NVML's memory affinity names
    cpus: tuple[int, ...]
    sysfs_hides_numa: bool = False  # sysfs numa_node says -1 (firmware without _PXM)
    gpu_numa_node: int | None = None  # None: nvmlDeviceGetNumaNodeId is NotSupported (x86)
    mig_mode: int | None = None  # None: MIG NotSupported
    nvlinks: tuple[NvLinkSpec, ...] | None = None  # by link number; None: no NVLink (NotSupported)
    nvlink_version: int = pynvml.NVML_NVLINK_VERSION_INVALID
    fabric: FabricSpec | None = None  # None: fabric info NotSupported (before Hopper, PCIe cards)
    lost: bool = False  # fallen off the bus: every call on its handle raises GpuIsLost
    class_code: int = CLASS_3D_CONTROLLER

    @property
    def sysfs_bus_id(self) -> str:
        return self.bus_id[4:].lower()


@dataclass(frozen=True)
class PciFunctionSpec:
    """A non-GPU function worth having in the tree: an NVSwitch or a NIC."""

    bus_id: str  # sysfs form
    vendor_id: int
    device_id: int
    class_code: int
    slot: PcieSlot
    numa_node: int | None  # None: sysfs numa_node says -1
    cpus: tuple[int, ...]
    netdev: str | None = None
    rdma_device: str | None = None


@dataclass(frozen=True)
class GpuMachine:
    name: str
    gpus: tuple[GpuSpec, ...]
    others: tuple[PciFunctionSpec, ...] = ()
    # NVML common-ancestor levels that differ from what the PCIe tree implies, by GPU index pair.
    nvml_level_overrides: Mapping[tuple[int, int], int] = field(default_factory=dict)

    def gpu_by_bus_id(self, nvml_bus_id: str) -> GpuSpec | None:
        return next((gpu for gpu in self.gpus if gpu.bus_id == nvml_bus_id), None)


def pci_devices(machine: GpuMachine) -> tuple[PciDevice, ...]:
    """What the PCI source would read from the machine's sysfs: every function, bridges included."""
    gpus = (
        gpu.slot.device(
            gpu.sysfs_bus_id,
            class_code=gpu.class_code,
            vendor_id=NVIDIA,
            device_id=gpu.device_id,
            numa_node=None if gpu.sysfs_hides_numa else gpu.numa_node,
            local_cpus=gpu.cpus,
        )
        for gpu in machine.gpus
    )
    others = (
        other.slot.device(
            other.bus_id,
            class_code=other.class_code,
            vendor_id=other.vendor_id,
            device_id=other.device_id,
            numa_node=other.numa_node,
            local_cpus=other.cpus,
        )
        for other in machine.others
    )
    return with_switch_ports((*gpus, *others))


def _gpu_uuid(machine: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'kubenexus-test/{machine}/{index}')}"


def _switch_links(links_per_switch: tuple[int, ...], switch_bus_ids: tuple[str | None, ...]) -> tuple[NvLinkSpec, ...]:
    return tuple(
        NvLinkSpec(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH, bus_id)
        for count, bus_id in zip(links_per_switch, switch_bus_ids, strict=True)
        for _ in range(count)
    )


def _dgx_a100() -> GpuMachine:
    name = "dgx_a100"
    # (bus, host bridge bus, switch port, NUMA node, CPUs) as DGX A100's topo -m shows them
    layout = [
        (0x07, 0x00, 0, 3, "48-63,176-191"),
        (0x0F, 0x00, 1, 3, "48-63,176-191"),
        (0x47, 0x40, 0, 1, "16-31,144-159"),
        (0x4E, 0x40, 1, 1, "16-31,144-159"),
        (0x87, 0x80, 0, 7, "112-127,240-255"),
        (0x90, 0x80, 1, 7, "112-127,240-255"),
        (0xB7, 0xB0, 0, 5, "80-95,208-223"),
        (0xBD, 0xB0, 1, 5, "80-95,208-223"),
    ]
    switch_buses = tuple(0xC4 + k for k in range(6))  # illustrative
    switches = tuple(
        PciFunctionSpec(
            bus_id=f"0000:{bus:02x}:00.0",
            vendor_id=NVIDIA,
            device_id=0x1AF1,
            class_code=CLASS_BRIDGE_OTHER,
            slot=switch_slot(0xC0, k),
            numa_node=5,
            cpus=parse_cpulist("80-95,208-223"),
        )
        for k, bus in enumerate(switch_buses)
    )
    links = _switch_links((2,) * 6, tuple(f"00000000:{bus:02X}:00.0" for bus in switch_buses))
    gpus = tuple(
        GpuSpec(
            bus_id=f"00000000:{bus:02X}:00.0",
            name="NVIDIA A100-SXM4-40GB",
            uuid=_gpu_uuid(name, index),
            device_id=0x20B0,
            memory_mib=40960,
            compute_capability=(8, 0),
            slot=switch_slot(root, port),
            numa_node=node,
            cpus=parse_cpulist(cpus),
            mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
            nvlinks=links,
            nvlink_version=pynvml.NVML_NVLINK_VERSION_3_0,
        )
        for index, (bus, root, port, node, cpus) in enumerate(layout)
    )
    return GpuMachine(name=name, gpus=gpus, others=switches)


HGX_H100_BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)
HGX_H100_GPU0_UUID = "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"


def _hgx_h100() -> GpuMachine:
    name = "hgx_h100"
    switch_buses = tuple(0x05 + k for k in range(4))  # illustrative
    others: list[PciFunctionSpec] = [
        PciFunctionSpec(
            bus_id=f"0000:{bus:02x}:00.0",
            vendor_id=NVIDIA,
            device_id=0x22A3,
            class_code=CLASS_BRIDGE_OTHER,
            slot=switch_slot(0x00, k),
            numa_node=0,
            cpus=parse_cpulist("0-47,96-143"),
        )
        for k, bus in enumerate(switch_buses)
    ]
    links = _switch_links((5, 4, 4, 5), tuple(f"00000000:{bus:02X}:00.0" for bus in switch_buses))
    gpus: list[GpuSpec] = []
    for index, bus_id in enumerate(HGX_H100_BUS_IDS):
        bus = int(bus_id.split(":")[1], 16)
        node, cpus = (0, parse_cpulist("0-47,96-143")) if index < 4 else (1, parse_cpulist("48-95,144-191"))
        gpus.append(
            GpuSpec(
                bus_id=bus_id,
                name="NVIDIA H100 80GB HBM3",
                uuid=HGX_H100_GPU0_UUID if index == 0 else _gpu_uuid(name, index),
                device_id=0x2330,
                memory_mib=81559,
                compute_capability=(9, 0),
                slot=switch_slot(bus - 3, 0),
                numa_node=node,
                cpus=cpus,
                mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
                nvlinks=links,
                nvlink_version=pynvml.NVML_NVLINK_VERSION_4_0,
                fabric=FabricSpec(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, uuid.UUID(int=0), 0),
            )
        )
        others.append(  # the GPU's ConnectX-7, on the other downstream port of its switch
            PciFunctionSpec(
                bus_id=f"0000:{bus + 1:02x}:00.0",
                vendor_id=MELLANOX,
                device_id=0x1021,
                class_code=CLASS_INFINIBAND,
                slot=switch_slot(bus - 3, 1),
                numa_node=node,
                cpus=cpus,
                netdev=f"ibp{bus + 1}s0",
                rdma_device=f"mlx5_{index}",
            )
        )
    return GpuMachine(name=name, gpus=tuple(gpus), others=tuple(others))


GB200_CLUSTER_UUID = uuid.UUID("6c1f3a52-9d4e-4b7a-8e21-3f5d0c9a7b14")
GB200_CLIQUE_ID = 32766


def _gb200_tray() -> GpuMachine:
    name = "gb200_tray"
    # (PCI domain, host NUMA node, Grace CPUs, the GPU memory's own NUMA node)
    layout = [
        (0x0008, 0, "0-71", 2),
        (0x0009, 0, "0-71", 10),
        (0x0018, 1, "72-143", 18),
        (0x0019, 1, "72-143", 26),
    ]
    gpus = tuple(
        GpuSpec(
            bus_id=f"{domain:08X}:01:00.0",
            name="NVIDIA GB200",
            uuid=_gpu_uuid(name, index),
            device_id=0x2941,
            memory_mib=189471,
            compute_capability=(10, 0),
            slot=PcieSlot(root=f"pci{domain:04x}:00", bridges=(f"{domain:04x}:00:00.0",)),
            numa_node=node,
            cpus=parse_cpulist(cpus),
            gpu_numa_node=gpu_node,
            mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
            # The switches sit in separate NVLink switch trays, not on this host's PCI bus.
            nvlinks=_switch_links((18,), (None,)),
            nvlink_version=pynvml.NVML_NVLINK_VERSION_5_0,
            fabric=FabricSpec(pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, GB200_CLUSTER_UUID, GB200_CLIQUE_ID),
        )
        for index, (domain, node, cpus, gpu_node) in enumerate(layout)
    )
    return GpuMachine(name=name, gpus=gpus)


def _l40s_4x() -> GpuMachine:
    name = "l40s_4x"
    gpus = tuple(
        GpuSpec(
            bus_id=f"00000000:{bus:02X}:00.0",  # illustrative
            name="NVIDIA L40S",
            uuid=_gpu_uuid(name, index),
            device_id=0x26B9,
            memory_mib=46068,
            compute_capability=(8, 9),
            slot=root_port_slot(bus),
            numa_node=0,
            cpus=parse_cpulist("0-47"),
        )
        for index, bus in enumerate((0x38, 0x3A, 0x3C, 0x3E))
    )
    return GpuMachine(name=name, gpus=gpus)


def _pcie_nvlink_bridges() -> GpuMachine:
    name = "pcie_8gpu_nvlink_bridges"
    buses = (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1)  # illustrative
    partners = {0: 2, 2: 0, 1: 3, 3: 1, 4: 5, 5: 4, 6: 7, 7: 6}
    gpus = tuple(
        GpuSpec(
            bus_id=f"00000000:{bus:02X}:00.0",
            name="NVIDIA A100 80GB PCIe",
            uuid=_gpu_uuid(name, index),
            device_id=0x20B5,
            memory_mib=81920,
            compute_capability=(8, 0),
            slot=root_port_slot(bus),
            numa_node=0 if index < 4 else 1,
            cpus=parse_cpulist("0-31" if index < 4 else "32-63"),
            mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
            # Three bridges of four links each join a pair.
            nvlinks=tuple(
                NvLinkSpec(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, f"00000000:{buses[partners[index]]:02X}:00.0")
                for _ in range(12)
            ),
            nvlink_version=pynvml.NVML_NVLINK_VERSION_3_0,
        )
        for index, bus in enumerate(buses)
    )
    same_node_pcie_pairs = [(0, 1), (0, 3), (1, 2), (2, 3), (4, 6), (4, 7), (5, 6), (5, 7)]
    return GpuMachine(
        name=name,
        gpus=gpus,
        nvml_level_overrides=dict.fromkeys(same_node_pcie_pairs, pynvml.NVML_TOPOLOGY_SYSTEM),
    )


def _h200_vm() -> GpuMachine:
    """A one-GPU virtual machine with an H200 passed through, as seen on a real one (driver 580.159.04).

    What NVML answered there: every NVLink call NotSupported on all 36 links (no NVLink peers in the VM),
    NUMA node id NotSupported, MIG mode supported and off, fabric info supported with state
    NOT_SUPPORTED and a zero cluster UUID. Sysfs: one NUMA cell, every PCI function directly on host
    bridge pci0000:00 with numa_node -1, a virtio NIC (eth0) and no RDMA device.
    """
    cpus = parse_cpulist("0-15")
    gpu = GpuSpec(
        bus_id="00000000:00:06.0",
        name="NVIDIA H200",
        uuid="GPU-1b2cdef2-d965-c8f6-af94-5832135dbfbe",
        device_id=0x2335,
        memory_mib=143771,
        compute_capability=(9, 0),
        slot=PcieSlot(root="pci0000:00", bridges=()),
        numa_node=0,
        cpus=cpus,
        sysfs_hides_numa=True,
        mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
        fabric=FabricSpec(state=pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, cluster_uuid=uuid.UUID(int=0), clique_id=0),
    )
    nic = PciFunctionSpec(
        bus_id="0000:00:03.0",
        vendor_id=VIRTIO,
        device_id=0x1041,
        class_code=CLASS_ETHERNET,
        slot=PcieSlot(root="pci0000:00", bridges=()),
        numa_node=None,
        cpus=cpus,
        netdev="eth0",
    )
    return GpuMachine(name="h200_vm", gpus=(gpu,), others=(nic,))


def _gh200() -> GpuMachine:
    """One GH200 superchip: a 72-core Grace (NUMA node 0, CPUs 0-71) and an H100 96GB whose HBM is
    NUMA node 1, so ``nvmlDeviceGetNumaNodeId`` answers 1 (published GH200 facts). The GPU hangs off
    the Grace's PCIe domain 0009; the bus id, the MiB NVML reports and the absence of NVLink are illustrative.
    """
    name = "gh200"
    gpu = GpuSpec(
        bus_id="00000009:01:00.0",
        name="NVIDIA GH200 480GB",
        uuid=_gpu_uuid(name, 0),
        device_id=0x2342,
        memory_mib=97871,
        compute_capability=(9, 0),
        slot=PcieSlot(root="pci0009:00", bridges=("0009:00:00.0",)),
        numa_node=0,
        cpus=parse_cpulist("0-71"),
        gpu_numa_node=1,
        mig_mode=pynvml.NVML_DEVICE_MIG_DISABLE,
    )
    return GpuMachine(name=name, gpus=(gpu,))


def _hgx_h100_gpu3_lost() -> GpuMachine:
    machine = _hgx_h100()
    gpus = tuple(replace(gpu, lost=True) if index == 3 else gpu for index, gpu in enumerate(machine.gpus))
    return replace(machine, name="hgx_h100_gpu3_lost", gpus=gpus)


DGX_A100 = _dgx_a100()
HGX_H100 = _hgx_h100()
GB200_TRAY = _gb200_tray()
L40S_4X = _l40s_4x()
PCIE_NVLINK_BRIDGES = _pcie_nvlink_bridges()
H200_VM = _h200_vm()
GH200 = _gh200()  # outside HEALTHY_MACHINES: its own tests say what it adds
HGX_H100_GPU3_LOST = _hgx_h100_gpu3_lost()

HEALTHY_MACHINES = (DGX_A100, HGX_H100, GB200_TRAY, L40S_4X, PCIE_NVLINK_BRIDGES)
ALL_MACHINES = (*HEALTHY_MACHINES, HGX_H100_GPU3_LOST)
