"""GPU node discovery time: an 8-GPU, 8-NIC HGX H100 through the fake NVML and a matching sysfs tree.

    python -m benchmarks.gpu_discovery [--runs 50]

Prints the median and p90 of a full ``discover`` (CPU, NUMA, PCI, NVML with 36 NVLink slots per
GPU, link matrix) next to the target (<= 30 ms median), and the NVLink pairs that NVIDIA's
go-gpuallocator-style remote-bus-id matching would find on the same node.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from agent.discovery import discover
from agent.hostfs import HostFS
from kubenexus.topology.nvlink import naive_remote_bus_matching, nvlink_pair_counts
from tests.fake_nvml import FakeNvml
from tests.fake_sysfs import build_two_socket_host
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import DGX_A100, HGX_H100, GpuMachine

TARGET_MS = 30.0


def time_discovery(machine: GpuMachine, runs: int) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as scratch:
        root = build_gpu_sysfs(build_two_socket_host(Path(scratch) / "host"), machine)
        fs = HostFS(str(root))
        nvml = FakeNvml(machine).module
        timings = []
        for _ in range(runs):
            start = time.perf_counter()
            topology = discover(fs, nvml=nvml, nvml_with_host_root=True)
            timings.append((time.perf_counter() - start) * 1000)
        ours = set(nvlink_pair_counts(topology.gpus).values())
        naive = naive_remote_bus_matching(topology.gpus)
        summary = (
            f"{len(topology.gpus)} GPUs, {len(topology.nics)} NICs; "
            f"NVLink per pair: ours {ours}, naive {len(naive)} pairs"
        )
    timings.sort()
    return statistics.median(timings), timings[int(0.9 * (len(timings) - 1))], summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    print(f"{'machine':12} {'median ms':>10} {'p90 ms':>8} {'target':>7}  found")
    for machine in (HGX_H100, DGX_A100):
        median, p90, summary = time_discovery(machine, args.runs)
        verdict = "ok" if median <= TARGET_MS else "MISSED"
        print(f"{machine.name:12} {median:10.2f} {p90:8.2f} {TARGET_MS:5.0f} {verdict:>2}  {summary}")


if __name__ == "__main__":
    main()
