"""Shared fixtures and helpers: the real data in ../shared/data, unpacked on demand and read in place;
the fixture machines as discovery builds them; waiting on what other threads do."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from kubenexus.topology.model import NodeTopology
from tools.throwaway_certificates import make_certificates

if TYPE_CHECKING:
    from tests.control_plane import ControlPlane
    from tests.oracle_process import Oracle

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
def unpack_snapshot() -> SnapshotUnpacker:
    return SnapshotUnpacker(SNAPSHOT_CACHE)


# Unpacked snapshots are kept between runs, outside pytest's temporary folders: unpacking them (290 MB, 200,000
# files) into each run's folder, and deleting a run's folder three runs later, cost a minute of the fast lane.
SNAPSHOT_CACHE = Path(os.environ.get("KUBENEXUS_SNAPSHOT_CACHE", Path.home() / ".cache" / "kubenexus" / "hwloc"))


class SnapshotUnpacker:
    """Unpacks a snapshot tarball once per machine (into ``base``, keyed by the tarball's size and time) and
    returns its fake root; the tests read it and never write it. Parallel workers unpack into their own
    folders and the first to finish publishes its copy with an atomic rename."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._roots: dict[str, Path] = {}

    def __call__(self, name: str) -> Path:
        if name not in self._roots:
            tarball = require_shared(HWLOC_DIR / f"{name}.tar.bz2")
            stat = tarball.stat()
            target = self._base / f"{name}-{stat.st_size}-{stat.st_mtime_ns}"
            if not target.is_dir():
                self._base.mkdir(parents=True, exist_ok=True)
                scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self._base))
                _extract(tarball, scratch)
                try:
                    scratch.rename(target)
                except OSError:  # another worker published it first
                    shutil.rmtree(scratch, ignore_errors=True)
            (top,) = [p for p in target.iterdir() if p.is_dir()]
            self._roots[name] = top
        return self._roots[name]


@pytest.fixture
def built(unpack_snapshot: SnapshotUnpacker, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], NodeTopology]:
    """One of ``tests.discovered_topologies.FIXTURES`` by its id, built once per session."""
    # Imported here: the machine catalogue it builds from imports this module's data paths.
    from tests.discovered_topologies import fixture_topology  # noqa: PLC0415

    return lambda fixture: fixture_topology(fixture, unpack_snapshot, tmp_path_factory)


def _extract(tarball: Path, target: Path) -> None:
    """GNU tar where there is one (a second for every snapshot; Python's tarfile takes a minute over bzip2),
    which, like the ``tar`` filter, keeps members inside ``target`` and drops their owners."""
    tar = shutil.which("tar")
    if tar is not None:
        subprocess.run([tar, "-xjf", str(tarball), "-C", str(target), "--no-same-owner"], check=True)
        return
    with tarfile.open(tarball) as archive:
        archive.extractall(target, filter="tar")


# How long a server a test starts in its own process (the emulator, a gRPC server) may take to come up: a bound
# against a hang, never a pace. Generous, since a loaded 2-core machine once took more than 10 s.
STARTUP_TIMEOUT_S = 120.0


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


# -- the real control plane (tests marked ``cluster``) ------------------------------------------------------
# Building it is the first run's long step (etcd and k8s.io/kubernetes from the Go modules); it happens once,
# before the first test, with its progress on the terminal, and never again while the cache holds the build.
REQUIRE_CONTROL_PLANE = os.environ.get("KUBENEXUS_REQUIRE_CONTROL_PLANE") == "1"


def _terminal(session: pytest.Session) -> Callable[[str], None]:
    """Writes a line on pytest's terminal (a build's progress before the first test)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def write(line: str) -> None:
        if reporter is not None:
            reporter.write_line(line)

    return write


def pytest_collection_finish(session: pytest.Session) -> None:
    _build_oracles(session)
    if not any(item.get_closest_marker("cluster") for item in session.items):
        return
    from tools import control_plane as builder  # noqa: PLC0415

    progress = _terminal(session)
    try:
        if not builder.is_built(builder.bin_dir()):
            builder.build(progress=progress)
        builder.crd_files(builder.bin_dir())
    except builder.BuildError as error:
        session.config.stash[_BUILD_ERROR] = str(error)
        progress(f"control plane: not built, the cluster tests will {'fail' if REQUIRE_CONTROL_PLANE else 'skip'}")


_BUILD_ERROR = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver v1.37, shared by every ``cluster`` test of the session (tests.control_plane)."""
    from tests.control_plane import ControlPlane  # noqa: PLC0415

    error = request.config.stash.get(_BUILD_ERROR, None)
    if error is not None:
        message = f"the test control plane could not be built: {error}"
        if REQUIRE_CONTROL_PLANE:
            pytest.fail(message)
        pytest.skip(message)
    with ControlPlane(tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


# -- the oracles (tests marked ``oracle``): upstream's Go code as programs, built like the control plane --------
_ORACLE_BUILD_ERROR = pytest.StashKey[str]()
_ORACLE_DIR = pytest.StashKey[Path]()


def _build_oracles(session: pytest.Session) -> None:
    if not any(item.get_closest_marker("oracle") for item in session.items):
        return
    from tools.oracles import PROGRAMS, BuildError  # noqa: PLC0415

    progress = _terminal(session)
    try:
        session.config.stash[_ORACLE_DIR] = PROGRAMS.build(progress=progress)
    except (BuildError, OSError, subprocess.CalledProcessError) as error:
        session.config.stash[_ORACLE_BUILD_ERROR] = str(error)
        progress(f"oracles: not built, the oracle tests will {'fail' if REQUIRE_CONTROL_PLANE else 'skip'}")


def _oracle(request: pytest.FixtureRequest, kind: str, restart_every: int | None = None) -> Iterator[Oracle]:
    from tests.oracle_process import Oracle  # noqa: PLC0415

    error = request.config.stash.get(_ORACLE_BUILD_ERROR, None)
    directory = request.config.stash.get(_ORACLE_DIR, None)
    if error is not None or directory is None:
        message = f"the oracles could not be built: {error or 'not selected at collection'}"
        if REQUIRE_CONTROL_PLANE:
            pytest.fail(message)
        pytest.skip(message)
    with Oracle(directory / kind, restart_every=restart_every) as oracle:
        yield oracle


@pytest.fixture(scope="session")
def scheduler_oracle(request: pytest.FixtureRequest) -> Iterator[Oracle]:
    """kube-scheduler v1.37.2's plugins through its framework runtime (tests/oracles/scheduler)."""
    yield from _oracle(request, "scheduler")


@pytest.fixture(scope="session")
def kubelet_oracle(request: pytest.FixtureRequest) -> Iterator[Oracle]:
    """The kubelet v1.37.2's Topology Manager with its CPU, memory and device managers (tests/oracles/kubelet)."""
    yield from _oracle(request, "kubelet", restart_every=2000)


@pytest.fixture(scope="session")
def dra_oracle(request: pytest.FixtureRequest) -> Iterator[Oracle]:
    """k8s.io/dynamic-resource-allocation v0.37.2's structured allocator (tests/oracles/dra)."""
    yield from _oracle(request, "dra")


@pytest.fixture(scope="session")
def quantity_oracle(request: pytest.FixtureRequest) -> Iterator[Oracle]:
    """k8s.io/apimachinery v0.37.2's resource.Quantity printing (tests/oracles/quantity)."""
    yield from _oracle(request, "quantity")
