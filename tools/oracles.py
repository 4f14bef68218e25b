"""Build the oracles, upstream's own Go code wrapped as programs, once, into a cache outside the tree.

    python -m tools.oracles build     # cold: compiles kube-scheduler's, the kubelet's and DRA's packages (minutes)
    python -m tools.oracles path      # prints the folder holding the programs (builds if needed)

The programs (``scheduler``, ``kubelet``, ``dra``: tests/oracles/<name>/) link k8s.io/kubernetes v1.37.2 and its
staging modules, the same module set as the test control plane (tools/controlplane/go.mod), with the same build
flags, so that Go's build cache shares what both compile. They are keyed by a hash of tests/oracles (go.mod,
go.sum, every .go file) and the Go version: a warm run checks a stamp file only. The cache is
$KUBENEXUS_ORACLE_CACHE, else ~/.cache/kubenexus/oracles.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tools.control_plane import KUBERNETES_VERSION, BuildError, go_tool, run_go

__all__ = ["ORACLES", "BuildError", "bin_dir", "build", "build_key", "cache_root", "is_built"]

MODULE_DIR = Path(__file__).resolve().parent.parent / "tests" / "oracles"
ORACLES = ("scheduler", "kubelet", "dra")


def cache_root() -> Path:
    configured = os.environ.get("KUBENEXUS_ORACLE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kubenexus" / "oracles"


def _sources() -> list[Path]:
    return sorted(p for p in MODULE_DIR.rglob("*") if p.is_file() and (p.suffix == ".go" or p.name.startswith("go.")))


def build_key() -> str:
    """Hash of what decides the programs: the oracles' module, its Go files and the Go version."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.relative_to(MODULE_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    go_version = subprocess.run([go_tool(), "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    digest.update(go_version.strip().encode())
    return f"{KUBERNETES_VERSION}-{digest.hexdigest()[:12]}"


def bin_dir() -> Path:
    return cache_root() / build_key()


def is_built(directory: Path) -> bool:
    return (directory / "STAMP").is_file() and all((directory / name).is_file() for name in ORACLES)


def _print(line: str) -> None:
    print(line, flush=True)


def build(*, force: bool = False, progress: Callable[[str], None] = _print) -> Path:
    """Build every oracle into bin_dir() unless a finished build is there; return the folder."""
    target = bin_dir()
    if is_built(target) and not force:
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    run_go(
        f"oracles {', '.join(ORACLES)} (k8s.io/kubernetes {KUBERNETES_VERSION}; minutes the first time)",
        ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(staging) + os.sep, *(f"./{name}" for name in ORACLES)],
        MODULE_DIR,
        progress,
    )
    (staging / "STAMP").write_text(f"{KUBERNETES_VERSION}\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.oracles", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "path"), help="build: build if needed; path: print the folder")
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a finished build")
    args = parser.parse_args(argv)
    try:
        started = time.monotonic()
        directory = build(force=args.force)
    except BuildError as error:
        print(f"oracles: {error}", file=sys.stderr)
        return 1
    if args.command == "build":
        print(f"oracles: {', '.join(ORACLES)} ready in {directory} ({time.monotonic() - started:.1f} s)")
    else:
        print(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
