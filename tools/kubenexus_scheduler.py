"""Build kubenexus-scheduler (kube-scheduler v1.37.2 with the KubeNexus plugin, scheduler/) into a cache, with
kubenexus-loadgen (the plugin's own code driving a placement service, for benchmarks/placement_service.py).

    python -m tools.kubenexus_scheduler build   # cold: the kube-scheduler packages and the plugin (minutes)
    python -m tools.kubenexus_scheduler path    # prints the folder holding the binary (builds if needed)

For the tests on the real control plane and the benchmarks; the image builds it with Dockerfile.scheduler. The
same flags as the control plane's kube-scheduler (tools/go_programs.py), and its version ldflags, so that
`kubenexus-scheduler --version` says v1.37.2. Keyed by a hash of scheduler/ (go.mod, go.sum, every .go file)
and the Go version. The cache is $KUBENEXUS_SCHEDULER_CACHE, else ~/.cache/kubenexus/kubenexus-scheduler.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools.control_plane import version_ldflags
from tools.go_programs import BuildError, GoPrograms

__all__ = ["PROGRAMS", "BuildError"]

PROGRAMS = GoPrograms(
    title="tools.kubenexus_scheduler",
    module=Path(__file__).resolve().parent.parent / "scheduler",
    packages=("./cmd/kubenexus-scheduler", "./cmd/kubenexus-loadgen"),
    cache_variable="KUBENEXUS_SCHEDULER_CACHE",
    cache_name="kubenexus-scheduler",
    ldflags=version_ldflags(),
)

if __name__ == "__main__":
    sys.exit(PROGRAMS.main(sys.argv[1:], __doc__))
