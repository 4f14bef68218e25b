"""The running agent on an unchanged node: memory, and what it costs the API server.

    python -m benchmarks.agent_steady_state [--passes 200]

Runs ``kubenexus-agent run`` as a real process (8-GPU HGX H100 sysfs tree, sysfs-only GPUs, labels
and NRT) against kmock's Kubernetes API emulator with a 50 ms interval, waits for ``--passes``
passes, and prints next to the targets:

* the agent's RSS after those passes (Kubernetes client, Prometheus and the metrics server loaded),
  target <= 64 MB;
* the API requests it made after its first pass, and the extrapolation to one hour at the default
  60 s interval: writes per hour on an unchanged node, target 0 outside the resync;
* then the same with ``--resync`` shortened so that resyncs happen: what one resync costs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from tests.fake_sysfs import build_two_socket_host
from tests.gpu_sysfs import build_gpu_sysfs
from tests.kube_emulator import Emulator
from tests.machines.gpu_hardware import HGX_H100

TARGET_RSS_MB = 64.0
TARGET_WRITES_PER_HOUR = 0
DEFAULT_INTERVAL_S = 60.0
NODE = "bench-node"
# The agent as its image runs it: the image installs no test dependency, but the development environment
# has kubernetes-validate (a test dependency), which the client library imports whenever it is installed
# (for its dynamic client's validation, which the agent never uses): 2.7 MB more RSS, measured. Hidden
# here, so the figure is the deployed agent's.
_AS_DEPLOYED = (
    "import runpy, sys; sys.modules['kubernetes_validate'] = None; "
    "runpy.run_module('agent.main', run_name='__main__', alter_sys=True)"
)
_SKIPPED = 'kubenexus_agent_publish_results_total{outcome="skipped",target="node"}'
_RESYNCED = 'kubenexus_agent_publish_results_total{outcome="unchanged",target="node"}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Emulator() as api:
        host = build_gpu_sysfs(build_two_socket_host(Path(tmp) / "host"), HGX_H100)
        kubeconfig = api.write_kubeconfig(Path(tmp) / "kubeconfig")
        api.add_node(NODE, {"kubernetes.io/hostname": NODE})

        steady = measure(api, host, kubeconfig, passes=args.passes, resync_s=3600.0)
        resyncing = measure(api, host, kubeconfig, passes=args.passes, resync_s=1.0)

    writes_per_hour = steady["writes"] / steady["passes"] * (3600 / DEFAULT_INTERVAL_S)
    reads_per_resync = resyncing["reads"] / max(resyncing["resyncs"], 1)
    print(f"agent steady state: {steady['passes']} passes at a 50 ms interval, 8-GPU node, labels + NRT")
    print(f"{'figure':<44} {'measured':>10}  target")
    print(f"{'RSS after the passes (MB)':<44} {steady['rss_mb']:>10.1f}  <= {TARGET_RSS_MB:g}")
    print(f"{'API requests after the first pass':<44} {steady['reads'] + steady['writes']:>10d}")
    print(f"{'API writes per hour, unchanged node':<44} {writes_per_hour:>10.1f}  {TARGET_WRITES_PER_HOUR}")
    print(
        f"{'with --resync 1: resyncs / reads / writes':<44} "
        f"{resyncing['resyncs']:>4d} / {resyncing['reads']} / {resyncing['writes']}"
        f"  (one resync = {reads_per_resync:g} GETs, 0 writes)"
    )
    met = steady["rss_mb"] <= TARGET_RSS_MB and steady["writes"] == 0 and resyncing["writes"] == 0
    print("All targets met." if met else "TARGET MISSED.")


def measure(api: Emulator, host: Path, kubeconfig: Path, *, passes: int, resync_s: float) -> dict[str, int | float]:
    command = [
        sys.executable,
        "-c",
        _AS_DEPLOYED,
        "run",
        f"--node-name={NODE}",
        f"--host-root={host}",
        "--no-nvml",
        f"--kubeconfig={kubeconfig}",
        "--pod-resources-socket=",
        "--interval=0.05",
        f"--resync={resync_s}",
        "--metrics-address=127.0.0.1:0",
    ]
    with subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True) as agent:
        assert agent.stderr is not None
        try:
            port = next(json.loads(line)["port"] for line in agent.stderr if "serving /metrics" in line)
            base = f"http://127.0.0.1:{port}"
            # The first pass creates or repairs the data; count what comes after it.
            while metric(base, _SKIPPED) + metric(base, _RESYNCED) < 1:
                time.sleep(0.02)
            first = len(api.requests())
            resyncs_before = metric(base, _RESYNCED)
            while metric(base, _SKIPPED) + metric(base, _RESYNCED) < passes:
                time.sleep(0.1)
            rss_mb = psutil.Process(agent.pid).memory_info().rss / 2**20
            after = api.requests()[first:]
            resyncs = int(metric(base, _RESYNCED) - resyncs_before)
        finally:
            agent.terminate()
            agent.wait(timeout=10)
    writes = sum(1 for request in after if request.method.value != "GET")
    return {"passes": passes, "rss_mb": rss_mb, "reads": len(after) - writes, "writes": writes, "resyncs": resyncs}


def metric(base: str, sample: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
    return 0.0


if __name__ == "__main__":
    main()
