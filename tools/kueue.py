"""Build Kueue's controller (sigs.k8s.io/kueue/cmd/kueue, a pinned release) into a cache outside the tree, and find
its Helm chart in the same Go module.

    python -m tools.kueue build    # cold: Kueue's controller and its dependencies (minutes, once)
    python -m tools.kueue path     # prints the folder holding the binary (builds if needed)

For the tests on the real control plane (tests/kueue_cluster.py) and docs/kueue.md. The module tools/kueue pins
the release (its ``tool`` line); Kueue's own go.mod decides every dependency. Keyed, like the other Go programs
(tools/go_programs.py), by a hash of that module and the Go version; the cache is $KUBENEXUS_KUEUE_CACHE, else
~/.cache/kubenexus/kueue. The chart (charts/kueue: CRDs, RBAC, webhook configurations, the manager's
configuration) is read from the module as Go downloaded it, never copied into the tree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tools.control_plane import BuildError, go_tool
from tools.go_programs import GoPrograms

__all__ = ["KUEUE_VERSION", "PROGRAMS", "BuildError", "chart_dir"]

KUEUE_VERSION = "v0.19.2"
MODULE = Path(__file__).resolve().parent / "kueue"

PROGRAMS = GoPrograms(
    title="tools.kueue",
    module=MODULE,
    packages=("sigs.k8s.io/kueue/cmd/kueue",),
    cache_variable="KUBENEXUS_KUEUE_CACHE",
    cache_name="kueue",
    # Kueue's Makefile sets the same: the controller logs its version at start.
    ldflags=f"-s -w -X 'sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE_VERSION}'",
)


def chart_dir() -> Path:
    """Kueue's Helm chart (charts/kueue) in the pinned module, downloaded by Go if it is not yet."""
    result = subprocess.run(
        [go_tool(), "mod", "download", "-json", "sigs.k8s.io/kueue"],
        cwd=MODULE,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if result.returncode != 0:
        raise BuildError(f"go mod download sigs.k8s.io/kueue failed:\n{result.stdout}{result.stderr}")
    return Path(json.loads(result.stdout)["Dir"]) / "charts" / "kueue"


if __name__ == "__main__":
    sys.exit(PROGRAMS.main(sys.argv[1:], __doc__ or ""))
