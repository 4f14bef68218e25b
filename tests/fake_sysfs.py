"""A small authored sysfs tree: a 2-socket, 2-NUMA-cell host with hugepages and HMAT.

It keeps the suite meaningful without the shared snapshots and is the victim of the
corruption property tests. Layout and value formats follow the kernel's ABI documents.
"""

from __future__ import annotations

from pathlib import Path

CELL_CPUS = {0: "0-3,8-11", 1: "4-7,12-15"}
CELL_MEMORY_KB = {0: 16_000_000, 1: 16_384_000}


def write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def build_two_socket_host(root: Path) -> Path:
    write(root, "/sys/devices/system/cpu/online", "0-15\n")
    write(root, "/sys/devices/system/cpu/present", "0-15\n")
    write(root, "/sys/devices/system/cpu/possible", "0-31\n")
    write(root, "/sys/devices/system/cpu/offline", "16-31\n")
    for cpu in range(16):
        package, core = (0 if cpu % 8 < 4 else 1), cpu % 8
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        write(root, f"{topology}/physical_package_id", f"{package}\n")
        write(root, f"{topology}/core_id", f"{core}\n")
        write(root, f"{topology}/thread_siblings_list", f"{cpu % 8},{cpu % 8 + 8}\n")
        if cpu:
            write(root, f"/sys/devices/system/cpu/cpu{cpu}/online", "1\n")
    write(root, "/sys/devices/system/node/online", "0-1\n")
    write(root, "/sys/devices/system/node/possible", "0-1\n")
    for node, cpus in CELL_CPUS.items():
        base = f"/sys/devices/system/node/node{node}"
        write(root, f"{base}/cpulist", f"{cpus}\n")
        write(root, f"{base}/cpumap", "0f0f\n" if node == 0 else "f0f0\n")
        write(
            root,
            f"{base}/meminfo",
            f"Node {node} MemTotal:       {CELL_MEMORY_KB[node]} kB\nNode {node} MemFree:        1000 kB\n",
        )
        write(root, f"{base}/distance", "10 21\n" if node == 0 else "21 10\n")
        write(root, f"{base}/hugepages/hugepages-2048kB/nr_hugepages", "512\n")
        write(root, f"{base}/hugepages/hugepages-2048kB/free_hugepages", "500\n")
        write(root, f"{base}/hugepages/hugepages-1048576kB/nr_hugepages", f"{node}\n")
        write(root, f"{base}/hugepages/hugepages-1048576kB/free_hugepages", f"{node}\n")
        initiators = f"{base}/access1/initiators"
        write(root, f"{initiators}/read_bandwidth", "131072\n")
        write(root, f"{initiators}/write_bandwidth", "65536\n")
        write(root, f"{initiators}/read_latency", "90\n")
        write(root, f"{initiators}/write_latency", "100\n")
        (root / initiators.lstrip("/") / f"node{node}").symlink_to(f"../../../node{node}")
    cache = "/sys/devices/system/node/node1/memory_side_cache/index1"
    write(root, f"{cache}/size", str(64 << 30) + "\n")
    write(root, f"{cache}/line_size", "64\n")
    write(root, f"{cache}/indexing", "0\n")
    write(root, f"{cache}/write_policy", "0\n")
    write(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: Test Xeon 9999\n\nprocessor\t: 1\n")
    write(root, "/proc/meminfo", "MemTotal:       32384000 kB\n")
    return root


def build_one_cell_vm(root: Path) -> Path:
    """A 16-CPU virtual machine with one NUMA cell and no HMAT, as a cloud GPU VM shows it."""
    write(root, "/sys/devices/system/cpu/online", "0-15\n")
    write(root, "/sys/devices/system/cpu/present", "0-15\n")
    write(root, "/sys/devices/system/cpu/possible", "0-15\n")
    for cpu in range(16):
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        write(root, f"{topology}/physical_package_id", "0\n")
        write(root, f"{topology}/core_id", f"{cpu}\n")
        write(root, f"{topology}/thread_siblings_list", f"{cpu}\n")
    write(root, "/sys/devices/system/node/online", "0\n")
    write(root, "/sys/devices/system/node/possible", "0\n")
    write(root, "/sys/devices/system/node/node0/cpulist", "0-15\n")
    write(root, "/sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:        4550128 kB\n")
    write(root, "/sys/devices/system/node/node0/distance", "10\n")
    for size in ("2048kB", "1048576kB"):
        write(root, f"/sys/devices/system/node/node0/hugepages/hugepages-{size}/nr_hugepages", "0\n")
        write(root, f"/sys/devices/system/node/node0/hugepages/hugepages-{size}/free_hugepages", "0\n")
    write(root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n")
    write(root, "/proc/meminfo", "MemTotal:       4550128 kB\n")
    return root


def add_pci_gpu(root: Path, *, numa_node: str = "1", local_cpulist: str = "4-7,12-15") -> str:
    """Put an NVIDIA H100 (3D controller) on the two-socket host's second socket; return its bus id."""
    bus_id = "0000:81:00.0"
    device = f"/sys/devices/pci0000:80/{bus_id}"
    attributes = {"class": "0x030200", "vendor": "0x10de", "device": "0x2330", "numa_node": numa_node}
    for name, value in {**attributes, "local_cpulist": local_cpulist, "local_cpus": "f0f0"}.items():
        write(root, f"{device}/{name}", f"{value}\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    (root / "sys/bus/pci/devices" / bus_id).symlink_to(f"../../../devices/pci0000:80/{bus_id}")
    return bus_id
