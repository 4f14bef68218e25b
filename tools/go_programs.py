"""Go programs of this repository built once into a cache outside the tree, keyed by their sources.

``GoPrograms`` describes one module's programs (the oracles under tests/oracles, kubenexus-scheduler under
scheduler/): a hash of the module's go.mod, go.sum and every .go file, with the Go version, names the cache
folder, so a warm run checks a stamp file only and an edit rebuilds (the folders of earlier sources are removed
after a build). They are built with the control plane's
settings (``tools.control_plane.run_go``: CGO_ENABLED=0, -trimpath, -mod=readonly), so that Go's build cache
shares what they all compile.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.control_plane import KUBERNETES_VERSION, BuildError, go_tool, run_go

__all__ = ["BuildError", "GoPrograms"]


def _print(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class GoPrograms:
    title: str  # for progress lines: "oracles"
    module: Path  # the Go module's folder
    packages: tuple[str, ...]  # relative to the module: "./scheduler"; the binaries take their last element
    cache_variable: str  # the environment variable naming the cache folder
    cache_name: str  # else ~/.cache/kubenexus/<cache_name>
    ldflags: str = "-s -w"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(package.rstrip("/").rsplit("/", 1)[-1] for package in self.packages)

    def cache_root(self) -> Path:
        configured = os.environ.get(self.cache_variable)
        return Path(configured) if configured else Path.home() / ".cache" / "kubenexus" / self.cache_name

    def build_key(self) -> str:
        """Hash of what decides the programs: the module, its Go files and the Go version."""
        digest = hashlib.sha256()
        sources = (p for p in self.module.rglob("*") if p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
        for path in sorted(sources):
            digest.update(path.relative_to(self.module).as_posix().encode())
            digest.update(path.read_bytes())
        go_version = subprocess.run([go_tool(), "env", "GOVERSION"], capture_output=True, text=True, check=True)
        digest.update(go_version.stdout.strip().encode())
        return f"{KUBERNETES_VERSION}-{digest.hexdigest()[:12]}"

    def bin_dir(self) -> Path:
        return self.cache_root() / self.build_key()

    def is_built(self, directory: Path) -> bool:
        return (directory / "STAMP").is_file() and all((directory / name).is_file() for name in self.names)

    def build(self, *, force: bool = False, progress: Callable[[str], None] = _print) -> Path:
        """Build every program into bin_dir() unless a finished build is there; return the folder. Builds of
        one cache take turns (a lock file), so two test sessions never write the same staging folder."""
        target = self.bin_dir()
        if self.is_built(target) and not force:
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with (target.parent / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.is_built(target) and not force:  # built by the session we waited for
                return target
            return self._build(target, progress)

    def _build(self, target: Path, progress: Callable[[str], None]) -> Path:
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        run_go(
            f"{self.title}: {', '.join(self.names)} (k8s.io/kubernetes {KUBERNETES_VERSION}; minutes the first time)",
            ["build", "-trimpath", "-ldflags", self.ldflags, "-o", str(staging) + os.sep, *self.packages],
            self.module,
            progress,
        )
        (staging / "STAMP").write_text(f"{KUBERNETES_VERSION}\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        for stale in self.cache_root().iterdir():  # earlier sources' builds: each is tens of megabytes
            if stale != target and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        return target

    def main(self, argv: list[str] | None, doc: str) -> int:
        parser = argparse.ArgumentParser(prog=f"python -m {self.title}", description=doc.split("\n", maxsplit=1)[0])
        parser.add_argument("command", choices=("build", "path"), help="build: build if needed; path: print the folder")
        parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a finished build")
        args = parser.parse_args(argv)
        try:
            started = time.monotonic()
            directory = self.build(force=args.force)
        except BuildError as error:
            print(f"{self.title}: {error}", file=sys.stderr)
            return 1
        if args.command == "build":
            print(f"{self.title}: {', '.join(self.names)} ready in {directory} ({time.monotonic() - started:.1f} s)")
        else:
            print(directory)
        return 0
