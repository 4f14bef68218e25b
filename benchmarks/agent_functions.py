"""Discovery's cost against the number of GPU (or network) functions a host lists (issue 30, item 5).

    python -m benchmarks.agent_functions [--counts 512,1024,2048,10000] [--kind gpu|nic]

For each count, a fake two-socket host (tests/fake_sysfs.py) with that many NVIDIA 3D-controller functions
(``--kind gpu``) or Ethernet functions with a net device (``--kind nic``) on one root port, then
``kubenexus-agent discover --no-nvml --format json`` as a user runs it, in a child process: its wall time and
peak RSS. Beside it, the same discovery with the model unbounded (``MAX_MODELLED_DEVICES`` lifted, the
code before the bound) up to 1,024 functions, where it was already quadratic.

Targets: near-linear time (seconds per 1,000 functions at each count within 2x of the 512's) and a peak RSS
within the DaemonSet's 160 MiB memory limit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fake_sysfs import build_two_socket_host, write

REPO = Path(__file__).resolve().parent.parent
TARGET_RSS_MB = 160.0
TARGET_SLOWDOWN = 2.0  # time per function at a count, over that at the smallest count
UNBOUNDED_UP_TO = 1024
_CHILD = """
import re, runpy, sys
if sys.argv[1] == "unbounded":
    import agent.discovery
    agent.discovery.MAX_MODELLED_DEVICES = 10**9
sys.argv = ["kubenexus-agent", "discover", "--host-root", sys.argv[2], "--no-nvml", "--format", "json"]
try:
    runpy.run_module("agent.main", run_name="__main__")
finally:
    # This process's own peak (VmHWM, kB): getrusage's ru_maxrss keeps the parent's across fork and exec.
    with open("/proc/self/status") as status:
        print(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1), file=sys.stderr)
"""


def build_host(root: Path, count: int, kind: str) -> Path:
    """The fake host with ``count`` functions of ``kind`` under one root port."""
    build_two_socket_host(root)
    (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
    pci_class = "0x030200" if kind == "gpu" else "0x020000"
    for number in range(count):
        bus_id = f"0000:{0x81 + number // 256:02x}:{(number // 8) % 32:02x}.{number % 8}"
        device = f"/sys/devices/pci0000:80/{bus_id}"
        attributes = {"class": pci_class, "vendor": "0x10de" if kind == "gpu" else "0x15b3", "device": "0x2330"}
        for name, value in {**attributes, "numa_node": "1", "local_cpulist": "4-7,12-15"}.items():
            write(root, f"{device}/{name}", f"{value}\n")
        if kind == "nic":
            netdev = root / device.lstrip("/") / "net" / f"eth{number}"
            netdev.mkdir(parents=True)
            (netdev / "device").symlink_to(f"../../../{bus_id}")
            (root / "sys/class/net").mkdir(parents=True, exist_ok=True)
            (root / "sys/class/net" / f"eth{number}").symlink_to(f"../../devices/pci0000:80/{bus_id}/net/eth{number}")
        (root / "sys/bus/pci/devices" / bus_id).symlink_to(f"../../../devices/pci0000:80/{bus_id}")
    return root


def measure(root: Path, mode: str, timeout_s: float) -> tuple[float, float] | None:
    """(seconds, peak RSS in MB) of one discovery in a child process; None past ``timeout_s``."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, mode, str(root)],
            capture_output=True, text=True, timeout=timeout_s, check=True, cwd=REPO,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    seconds = time.perf_counter() - started
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="512,1024,2048,10000", help="function counts (default: %(default)s)")
    parser.add_argument("--kind", choices=("gpu", "nic"), default="gpu", help="what the functions are")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per discovery (default: %(default)s)")
    args = parser.parse_args(argv)
    counts = sorted(int(count) for count in args.counts.split(","))
    print(f"| {args.kind} functions | seconds | s per 1,000 | peak RSS MB | unbounded (before) seconds, RSS MB |")
    print("|---|---|---|---|---|")
    first_rate: float | None = None
    misses = []
    for count in counts:
        with tempfile.TemporaryDirectory() as scratch:
            root = build_host(Path(scratch) / "host", count, args.kind)
            bounded = measure(root, "bounded", args.timeout)
            unbounded = measure(root, "unbounded", args.timeout) if count <= UNBOUNDED_UP_TO else None
        before = "not run" if count > UNBOUNDED_UP_TO else "over the timeout"
        if unbounded is not None:
            before = f"{unbounded[0]:.2f} s, {unbounded[1]:.0f} MB"
        if bounded is None:
            print(f"| {count} | over {args.timeout:g} s | | | {before} |")
            misses.append(f"{count}: over the timeout")
            continue
        seconds, rss = bounded
        rate = seconds / count * 1000
        first_rate = first_rate or rate
        print(f"| {count} | {seconds:.2f} | {rate:.3f} | {rss:.0f} | {before} |")
        if rate > TARGET_SLOWDOWN * first_rate:
            misses.append(f"{count}: {rate / first_rate:.1f}x the time per function of {counts[0]}")
        if rss > TARGET_RSS_MB:
            misses.append(f"{count}: {rss:.0f} MB peak RSS")
    print(
        f"targets: time per function within {TARGET_SLOWDOWN:g}x of the smallest count's, "
        f"peak RSS <= {TARGET_RSS_MB:g} MB"
    )
    print("MISSED: " + "; ".join(misses) if misses else "met")


if __name__ == "__main__":
    main()
