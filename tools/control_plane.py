"""Build the pinned test control plane from Go source modules, once, into a cache outside the tree.

    python -m tools.control_plane build     # cold: builds etcd and k8s.io/kubernetes v1.37.2 (minutes)
    python -m tools.control_plane path      # prints the folder holding the binaries (builds if needed)

The binaries (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl) are keyed by a hash of
the two tools modules (tools/controlplane/go.mod, go.sum and etcd/) and the Go version, so a warm run only
checks a stamp file and takes well under a second. Nothing is downloaded but Go modules through the proxy.
The cache is $KUBENEXUS_CONTROL_PLANE_CACHE, else ~/.cache/kubenexus/control-plane.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.6.16"
# Third-party CRDs as their projects publish them in their Go modules: what the product reads (scheduler-plugins'
# PodGroup) and what deploy/ creates objects of (cert-manager's Certificate and Issuer).
MODULE_CRDS = {
    "sigs.k8s.io/scheduler-plugins@v0.34.7": ("config/crd/bases/scheduling.x-k8s.io_podgroups.yaml",),
    "github.com/cert-manager/cert-manager@v1.21.2": (
        "deploy/crds/cert-manager.io_issuers.yaml",
        "deploy/crds/cert-manager.io_certificates.yaml",
    ),
}
MODULE_DIR = Path(__file__).resolve().parent / "controlplane"
KUBE_COMMANDS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl")
BINARIES = ("etcd", *KUBE_COMMANDS)


class BuildError(RuntimeError):
    """The Go toolchain failed or is missing; the message says which step."""


def cache_root() -> Path:
    configured = os.environ.get("KUBENEXUS_CONTROL_PLANE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "kubenexus" / "control-plane"


def go_tool() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the Go toolchain (go) is not on PATH; the test control plane is built from Go modules")
    return go


def build_key() -> str:
    """Hash of what decides the binaries: both tools modules and the Go version."""
    digest = hashlib.sha256()
    for path in sorted(MODULE_DIR.rglob("go.*")):
        digest.update(path.relative_to(MODULE_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    go_version = subprocess.run([go_tool(), "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    digest.update(go_version.strip().encode())
    return f"{KUBERNETES_VERSION}-etcd{ETCD_VERSION}-{digest.hexdigest()[:12]}"


def bin_dir() -> Path:
    return cache_root() / build_key()


def is_built(directory: Path) -> bool:
    return (directory / "STAMP").is_file() and all((directory / name).is_file() for name in BINARIES)


def version_ldflags() -> str:
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    # hack/lib/version.sh sets the same keys in both packages; /version and `kubectl version` read them.
    flags = [
        f"-X '{package}.{key}={value}'"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for key, value in values.items()
    ]
    return " ".join(["-s", "-w", *flags])


def run_go(step: str, arguments: list[str], cwd: Path, progress: Callable[[str], None]) -> None:
    """``go <arguments>`` in ``cwd`` with the pinned build settings, its progress and failure named by ``step``."""
    command = [go_tool(), *arguments]
    progress(f"{step} ...")
    started = time.monotonic()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    result = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    if result.returncode != 0:
        raise BuildError(f"{step} failed (exit {result.returncode}):\n{result.stdout[-4000:]}")
    progress(f"{step} done in {time.monotonic() - started:.0f} s")


def _print(line: str) -> None:
    print(line, flush=True)


def build(*, force: bool = False, progress: Callable[[str], None] = _print) -> Path:
    """Build every binary into bin_dir() unless a finished build is there; return the folder."""
    target = bin_dir()
    if is_built(target) and not force:
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    run_go(
        f"control plane: etcd {ETCD_VERSION}",
        ["build", "-trimpath", "-o", str(staging / "etcd"), "go.etcd.io/etcd/server/v3"],
        MODULE_DIR / "etcd",
        progress,
    )
    run_go(
        f"control plane: k8s.io/kubernetes {KUBERNETES_VERSION} ({', '.join(KUBE_COMMANDS)}; "
        "15-30 min on 2 cores the first time)",
        [
            "build",
            "-trimpath",
            "-ldflags",
            version_ldflags(),
            "-o",
            str(staging) + os.sep,
            *(f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMMANDS),
        ],
        MODULE_DIR,
        progress,
    )
    (staging / "STAMP").write_text(f"{KUBERNETES_VERSION} etcd {ETCD_VERSION}\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def crd_files(directory: Path) -> dict[str, Path]:
    """The third-party CRDs (``MODULE_CRDS``) by file name, copied from their Go modules into ``directory/crds``
    once."""
    target = directory / "crds"
    wanted = {Path(name).name: target / Path(name).name for names in MODULE_CRDS.values() for name in names}
    if all(path.is_file() for path in wanted.values()):
        return wanted
    target.mkdir(exist_ok=True)
    for module, names in MODULE_CRDS.items():
        result = subprocess.run(
            [go_tool(), "mod", "download", "-json", module],
            cwd=directory,  # outside any module: the tools modules' go.sum stays as it is
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BuildError(f"go mod download {module} failed:\n{result.stdout}{result.stderr}")
        source = Path(json.loads(result.stdout)["Dir"])
        for name in names:
            shutil.copyfile(source / name, wanted[Path(name).name])
    return wanted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.control_plane", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("build", "path"), help="build: build if needed; path: print the folder")
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a finished build")
    args = parser.parse_args(argv)
    try:
        started = time.monotonic()
        directory = build(force=args.force)
        crd_files(directory)
    except BuildError as error:
        print(f"control plane: {error}", file=sys.stderr)
        return 1
    if args.command == "build":
        print(f"control plane: {', '.join(BINARIES)} ready in {directory} ({time.monotonic() - started:.1f} s)")
    else:
        print(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
