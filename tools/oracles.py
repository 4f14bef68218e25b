"""Build the oracles, upstream's own Go code wrapped as programs, once, into a cache outside the tree.

    python -m tools.oracles build     # cold: compiles kube-scheduler's, the kubelet's and DRA's packages (minutes)
    python -m tools.oracles path      # prints the folder holding the programs (builds if needed)

The programs (``scheduler``, ``kubelet``, ``dra``, ``quantity``: tests/oracles/<name>/) link k8s.io/kubernetes
v1.37.2 and its staging modules, the same module set as the test control plane (tools/controlplane/go.mod),
with the same build flags (tools/go_programs.py). They are keyed by a hash of tests/oracles (go.mod, go.sum,
every .go file) and the Go version: a warm run checks a stamp file only. The cache is $KUBENEXUS_ORACLE_CACHE,
else ~/.cache/kubenexus/oracles.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools.go_programs import BuildError, GoPrograms

__all__ = ["ORACLES", "PROGRAMS", "BuildError"]

ORACLES = ("scheduler", "kubelet", "dra", "quantity")
PROGRAMS = GoPrograms(
    title="tools.oracles",
    module=Path(__file__).resolve().parent.parent / "tests" / "oracles",
    packages=tuple(f"./{name}" for name in ORACLES),
    cache_variable="KUBENEXUS_ORACLE_CACHE",
    cache_name="oracles",
)

if __name__ == "__main__":
    sys.exit(PROGRAMS.main(sys.argv[1:], __doc__))
