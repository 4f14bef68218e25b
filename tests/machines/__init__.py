"""The machines of the tests and benchmarks, in one catalogue: import them from ``tests.machines``.

Two views of a machine, one module each:

- ``gpu_hardware``: GPU machines as NVML and sysfs describe them (bus ids, NVLinks, fabric state), for
  the fake NVML module (``tests.fake_nvml``) and the fake sysfs tree (``tests.gpu_sysfs``) that the
  agent's discovery reads.
- ``node_topologies``: ``NodeTopology`` values, what the agent publishes and the placement service
  reads: real ``nvidia-smi topo -m`` captures with memory and kubelet settings added, and CPU nodes.
"""

from tests.machines.gpu_hardware import (
    ALL_MACHINES,
    DGX_A100,
    GB200_CLIQUE_ID,
    GB200_CLUSTER_UUID,
    GB200_TRAY,
    H200_VM,
    HEALTHY_MACHINES,
    HGX_H100,
    HGX_H100_BUS_IDS,
    HGX_H100_GPU0_UUID,
    HGX_H100_GPU3_LOST,
    L40S_4X,
    PCIE_NVLINK_BRIDGES,
    FabricSpec,
    GpuMachine,
    GpuSpec,
    NvLinkSpec,
    PciFunctionSpec,
    pci_devices,
)
from tests.machines.node_topologies import (
    GIB,
    L40S_CAPTURE,
    P5_CAPTURE,
    PCIE_CAPTURE,
    RDMA,
    amounts,
    cpu_node,
    inline_nvswitch,
    kubelet,
    l40s_node,
    nvswitch_node,
    pcie_node,
    two_socket,
    with_usage,
)

__all__ = [
    "ALL_MACHINES",
    "DGX_A100",
    "GB200_CLIQUE_ID",
    "GB200_CLUSTER_UUID",
    "GB200_TRAY",
    "GIB",
    "H200_VM",
    "HEALTHY_MACHINES",
    "HGX_H100",
    "HGX_H100_BUS_IDS",
    "HGX_H100_GPU0_UUID",
    "HGX_H100_GPU3_LOST",
    "L40S_4X",
    "L40S_CAPTURE",
    "P5_CAPTURE",
    "PCIE_CAPTURE",
    "PCIE_NVLINK_BRIDGES",
    "RDMA",
    "FabricSpec",
    "GpuMachine",
    "GpuSpec",
    "NvLinkSpec",
    "PciFunctionSpec",
    "amounts",
    "cpu_node",
    "inline_nvswitch",
    "kubelet",
    "l40s_node",
    "nvswitch_node",
    "pci_devices",
    "pcie_node",
    "two_socket",
    "with_usage",
]
