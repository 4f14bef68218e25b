"""Shared fixtures and helpers: the real data in ../shared/data, unpacked on demand and read in place;
the fixture machines as discovery builds them; waiting on what other threads do."""

from __future__ import annotations

import os
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kubenexus.topology.model import NodeTopology
from tools.throwaway_certificates import make_certificates

# Property tests judge results, not speed: on a loaded 2-core CI machine a slow example is no failure.
settings.register_profile("kubenexus", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kubenexus")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("KUBENEXUS_SHARED_DATA", REPO.parent / "shared" / "data"))
HWLOC_DIR = SHARED_DATA / "hwloc"
GPU_DIR = SHARED_DATA / "gpu"


def hwloc_snapshot_names() -> list[str]:
    """Names of the real sysfs snapshots (empty when the shared data is absent)."""
    if not HWLOC_DIR.is_dir():
        return []
    return sorted(p.name.removesuffix(".tar.bz2") for p in HWLOC_DIR.glob("*.tar.bz2"))


def require_shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared data not found at {path} (set KUBENEXUS_SHARED_DATA to the shared/data folder)")
    return path


@pytest.fixture(scope="session")
def unpack_snapshot(tmp_path_factory: pytest.TempPathFactory) -> SnapshotUnpacker:
    return SnapshotUnpacker(tmp_path_factory.mktemp("hwloc"))


class SnapshotUnpacker:
    """Unpacks a snapshot tarball once per test session and returns its fake root."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._roots: dict[str, Path] = {}

    def __call__(self, name: str) -> Path:
        if name not in self._roots:
            tarball = require_shared(HWLOC_DIR / f"{name}.tar.bz2")
            target = self._base / name
            target.mkdir()
            with tarfile.open(tarball) as archive:
                archive.extractall(target, filter="tar")
            (top,) = [p for p in target.iterdir() if p.is_dir()]
            self._roots[name] = top
        return self._roots[name]


@pytest.fixture
def built(unpack_snapshot: SnapshotUnpacker, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], NodeTopology]:
    """One of ``tests.discovered_topologies.FIXTURES`` by its id, built once per session."""
    # Imported here: the machine catalogue it builds from imports this module's data paths.
    from tests.discovered_topologies import fixture_topology  # noqa: PLC0415

    return lambda fixture: fixture_topology(fixture, unpack_snapshot, tmp_path_factory)


def wait_until(condition: Callable[[], object], timeout_s: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition``, set true by another thread or process, until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# Client certificates the TLS tests present, by Subject CN: the service reads a client's identity from it.
CLIENT_NAMES = ("client", "kubenexus-scheduler", "other-writer", "reader", "admin")


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA; a server certificate for 127.0.0.1 and localhost; a client certificate per ``CLIENT_NAMES``
    (``<name>.crt``, ``<name>.key``), all signed by the CA (``ca.crt``)."""
    folder = tmp_path_factory.mktemp("tls")
    try:
        make_certificates(folder, CLIENT_NAMES)
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"openssl cannot make test certificates: {error}")
    return folder
