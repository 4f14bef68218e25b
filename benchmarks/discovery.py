"""Discovery speed and agent memory on the largest real snapshots and on this machine.

    python -m benchmarks.discovery [--runs 20]

Prints the median full discovery time over N runs and the peak RSS of a fresh agent
process after one discovery (``kubenexus-agent discover --format json`` as a user runs it),
next to the targets: <= 50 ms per discovery, <= 40 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from agent.discovery import discover
from agent.hostfs import HostFS

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("KUBENEXUS_SHARED_DATA", REPO.parent / "shared" / "data"))
SNAPSHOTS = ("256ppc-8n8s4t", "128ia64-17n4s2c", "32em64t-2n8c+dax+nvme+mic+dimms")
TARGET_MS = 50.0
TARGET_RSS_MB = 40.0

_RSS_PROBE = """
import resource, sys, io, contextlib
from agent.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["discover", "--host-root", sys.argv[1], "--format", "json"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, code)
"""


def median_ms(root: str, runs: int) -> float:
    fs = HostFS(root)
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        discover(fs, nvml=None)
        timings.append((time.perf_counter() - start) * 1000)
    return statistics.median(timings)


def peak_rss_mb(root: str) -> float:
    result = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, root], capture_output=True, text=True, check=True, cwd=REPO
    )
    rss, code = result.stdout.split()
    if code != "0":
        raise RuntimeError(f"discovery failed on {root}: {result.stderr}")
    return float(rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    roots: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in SNAPSHOTS:
            tarball = SHARED_DATA / "hwloc" / f"{name}.tar.bz2"
            if not tarball.exists():
                print(f"skipping {name}: {tarball} not found")
                continue
            with tarfile.open(tarball) as archive:
                archive.extractall(Path(scratch) / name, filter="tar")
            (top,) = [p for p in (Path(scratch) / name).iterdir() if p.is_dir()]
            roots.append((name, str(top)))
        roots.append(("this machine (/)", "/"))
        print(f"{'host':40} {'median ms':>10} {'target':>7} {'peak RSS MB':>12} {'target':>7}")
        for name, root in roots:
            ms = median_ms(root, args.runs)
            rss = peak_rss_mb(root)
            ms_ok = "ok" if ms <= TARGET_MS else "MISSED"
            rss_ok = "ok" if rss <= TARGET_RSS_MB else "MISSED"
            print(f"{name:40} {ms:10.2f} {TARGET_MS:5.0f} {ms_ok:>2} {rss:10.1f} {TARGET_RSS_MB:5.0f} {rss_ok:>2}")


if __name__ == "__main__":
    main()
