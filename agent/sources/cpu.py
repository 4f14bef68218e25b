"""The machine's processors: /sys/devices/system/cpu and /proc/cpuinfo.

Online CPUs come from ``cpu/online``; where that file is absent (old kernels, some
snapshots) from each ``cpuN/online`` flag, a CPU without the flag counting as online
as the kernel does for the boot CPU. Offline CPUs are the present ones that are not
online: ``cpu/offline`` also lists possible-but-absent CPUs, which are not hardware.
Sockets and cores are counted over online CPUs from ``cpuN/topology``.

Every CPU id is below ``cpu/possible``'s highest + 1 (the kernel's ``nr_cpu_ids``), or below the
kernel's largest NR_CPUS where ``possible`` is absent (old kernels) or impossible: a list or a
``cpuN`` directory past that bound is a warning, never a CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from agent.hostfs import HostFS, HostFSError
from kubenexus.topology.cpulist import MAX_CPUS, format_cpulist
from kubenexus.topology.model import DiscoveryWarning, Machine

CPU_DIR = "/sys/devices/system/cpu"
_CPU_NAME = re.compile(r"cpu(\d+)")
# Any of these identifies the CPU's package or core; kernels differ in which they provide.
_PACKAGE_FILES = ("physical_package_id", "package_cpus_list", "package_cpus", "core_siblings_list", "core_siblings")
_CORE_FILES = ("core_cpus_list", "core_cpus", "thread_siblings_list", "thread_siblings")
_MODEL_KEYS = ("model name", "cpu model", "cpu", "Processor", "uarch")
# Only the first processor's block is read, and it is well inside this (on 8192 CPUs the whole file is ~12 MiB).
_CPUINFO_HEAD_BYTES = 64 * 1024
_ARCH_HINTS = (("POWER", "ppc64"), ("Itanium", "ia64"), ("Intel", "x86_64"), ("AMD", "x86_64"), ("QEMU", "x86_64"))


@dataclass(frozen=True)
class CpuReport:
    machine: Machine
    warnings: tuple[DiscoveryWarning, ...]
    cpu_id_limit: int = MAX_CPUS  # every CPU id on this host is below it; the other sources' bound


def discover_machine(fs: HostFS) -> CpuReport:
    warnings: list[DiscoveryWarning] = []

    def warn(message: str, path: str | None = None) -> None:
        warnings.append(DiscoveryWarning("cpu", message, path))

    limit = _cpu_id_limit(fs, warn)
    cpu_dirs = _cpu_directories(fs, limit, warn)
    online = _online_cpus(fs, cpu_dirs, limit, warn)
    present = _read_list(fs, f"{CPU_DIR}/present", limit, warn)
    offline = tuple(sorted(set(present if present is not None else cpu_dirs) - set(online)))

    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    for cpu in online:
        topology = f"{CPU_DIR}/cpu{cpu}/topology"
        package = _first_readable(fs, topology, _PACKAGE_FILES)
        core = _first_readable(fs, topology, _CORE_FILES)
        if package is None or core is None:
            warn(f"no topology for online CPU {cpu}; counted as its own core and socket", topology)
            package, core = package or f"cpu{cpu}", core or f"cpu{cpu}"
        packages.add(package)
        cores.add((package, core))

    model, architecture = _cpu_model(fs, warn)
    machine = Machine(
        cpu_model=model,
        architecture=architecture,
        sockets=len(packages),
        cores=len(cores),
        threads=len(online),
        online_cpus=online,
        offline_cpus=offline,
    )
    return CpuReport(machine, tuple(warnings), limit)


def _cpu_id_limit(fs: HostFS, warn: _Warn) -> int:
    path = f"{CPU_DIR}/possible"
    try:
        possible = fs.read_cpulist(path)
    except HostFSError as error:
        if error.problem != "missing":
            warn(f"{error.problem}; CPU ids bounded by the kernel's maximum, {MAX_CPUS}", path)
        return MAX_CPUS
    if not possible:
        warn(f"lists no CPU; CPU ids bounded by the kernel's maximum, {MAX_CPUS}", path)
        return MAX_CPUS
    return possible[-1] + 1


def _cpu_directories(fs: HostFS, limit: int, warn: _Warn) -> tuple[int, ...]:
    try:
        names = fs.listdir(CPU_DIR)
    except HostFSError as error:
        warn(f"cannot list CPUs: {error.problem}", CPU_DIR)
        return ()
    cpus = sorted(int(m.group(1)) for n in names if (m := _CPU_NAME.fullmatch(n)))
    beyond = [cpu for cpu in cpus if cpu >= limit]
    if beyond:
        warn(
            f"{len(beyond)} cpuN directories past the highest possible CPU {limit - 1} ignored",
            f"{CPU_DIR}/cpu{beyond[0]}",
        )
    return tuple(cpu for cpu in cpus if cpu < limit)


def _online_cpus(fs: HostFS, cpu_dirs: tuple[int, ...], limit: int, warn: _Warn) -> tuple[int, ...]:
    if fs.exists(f"{CPU_DIR}/online"):
        online = _read_list(fs, f"{CPU_DIR}/online", limit, warn)
        if online is not None:
            return online
    result = []
    unreadable = []
    for cpu in cpu_dirs:
        try:
            if fs.read_int(f"{CPU_DIR}/cpu{cpu}/online") == 0:
                continue
        except HostFSError as error:
            if error.problem != "missing":
                unreadable.append(cpu)
        result.append(cpu)
    if unreadable:
        cpus = format_cpulist(unreadable)
        warn(f"unreadable online flag for CPUs {cpus}; counted as online", f"{CPU_DIR}/cpuN/online")
    return tuple(result)


def _read_list(fs: HostFS, path: str, limit: int, warn: _Warn) -> tuple[int, ...] | None:
    try:
        return fs.read_cpulist(path, limit=limit)
    except HostFSError as error:
        if error.problem != "missing":
            warn(error.problem, path)
        return None


def _first_readable(fs: HostFS, directory: str, names: tuple[str, ...]) -> str | None:
    """The first non-empty file among ``names``; a package id of -1 (some ARM firmware) does not count."""
    for name in names:
        try:
            text = fs.read_str(f"{directory}/{name}")
        except HostFSError:
            continue
        if text and text != "-1":
            return f"{name}={text}"
    return None


def _cpu_model(fs: HostFS, warn: _Warn) -> tuple[str | None, str | None]:
    try:
        text = fs.read_head("/proc/cpuinfo", _CPUINFO_HEAD_BYTES)
    except HostFSError as error:
        warn(f"no CPU model: {error.problem}", "/proc/cpuinfo")
        return None, None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    model = next((fields[k] for k in _MODEL_KEYS if fields.get(k)), None)
    architecture = next((arch for hint, arch in _ARCH_HINTS if model and hint in model), None)
    if architecture is None and ("CPU implementer" in fields or "CPU architecture" in fields):
        architecture = "aarch64"
    if model is None and architecture == "aarch64":
        model = f"ARM implementer {fields.get('CPU implementer')} part {fields.get('CPU part')}"
    return model, architecture


class _Warn(Protocol):
    def __call__(self, message: str, path: str | None = None, /) -> None: ...
