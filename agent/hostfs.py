"""HostFS: every read of the host's /sys and /proc goes through one object.

The root is chosen once (``--host-root``, default ``/``) and carried explicitly, so that
a captured snapshot of another machine reads exactly like a live host. Call sites write
absolute host paths (``"/sys/devices/system/node"``). Symbolic links are resolved inside
the root: an absolute link target in a snapshot means the snapshot's own tree, and no link (absolute, or
climbing with ``..``) leads a read out of the root.

Only regular files are read, and at most ``ATTRIBUTE_MAX_BYTES`` of each: a FIFO, device or socket, or a
file larger than any the kernel writes there, is a ``HostFSError`` (a warning to the sources), never a
read that blocks or a value cut short. What every source checks values against lives here too.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

from kubenexus.topology.cpulist import MAX_CPUS, parse_cpulist, parse_cpumask

_MAX_LINKS = 40
_MAX_CACHED_DIRECTORIES = 65536
MAX_NUMA_NODES = 1024  # the kernel's MAX_NUMNODES at its largest (NODES_SHIFT 10): every node id is below it
# The most a sysfs attribute can hold is PAGE_SIZE (up to 64 KiB on arm64/ppc64 kernels); the CPU
# lists and masks that outgrew it are binary attributes whose longest form (8192 CPUs, every other
# one listed) is about 20 KiB. The largest files read in the real snapshots are far smaller (node
# meminfo 1.5 KiB, cpumap 1.2 KiB), so 64 KiB leaves margin and bounds what a hostile file costs.
ATTRIBUTE_MAX_BYTES = 64 * 1024
_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a terminal must not become ours.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# C0 and C1 control characters but tab and newline (NUL included: C strings' padding in some attributes).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class HostFSError(Exception):
    """A host file is missing, unreadable or not what its reader expects."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class HostFS:
    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)
        self._prefix = "" if self.root == "/" else self.root
        self._directories: dict[str, str] = {}  # a directory's host path -> its path with links resolved

    @property
    def is_live(self) -> bool:
        """True when reading this machine itself; live-only probes (NVML) refuse other roots."""
        return self.root == "/"

    def host_path(self, path: str) -> str:
        """The local path for a host path such as ``/sys/bus/pci``, its links left to the OS (live only)."""
        return f"{self._prefix}/{path.lstrip('/')}"  # os.path.join's result, at a fraction of its cost per read

    def _local(self, path: str) -> str:
        """The local path to open for a host path: under another root, every link resolved inside the root
        first (``realpath``), so that an absolute link, or one with enough ``..``, never leads the OS out of
        it (to this machine's own /etc). The live root is the host itself: its links are the host's."""
        if self.is_live:
            return path
        return self.host_path(self.realpath(path))

    def read_text(self, path: str) -> str:
        """The whole file; one larger than ``ATTRIBUTE_MAX_BYTES`` raises HostFSError rather than being cut short."""
        data = self._read(path, ATTRIBUTE_MAX_BYTES + 1)
        if len(data) > ATTRIBUTE_MAX_BYTES:
            raise HostFSError(path, f"larger than {ATTRIBUTE_MAX_BYTES} bytes, not read")
        return _decode(data)

    def read_head(self, path: str, max_bytes: int) -> str:
        """At most the first ``max_bytes`` of a file whose beginning is all that counts (/proc/cpuinfo)."""
        return _decode(self._read(path, max_bytes))

    def read_str(self, path: str) -> str:
        return self.read_text(path).strip()

    def read_int(self, path: str, *, base: int = 10) -> int:
        text = self.read_str(path)
        try:
            return int(text, base)
        except ValueError:
            raise HostFSError(path, f"expected an integer, found {text[:40]!r}") from None

    def read_cpulist(self, path: str, *, limit: int = MAX_CPUS) -> tuple[int, ...]:
        """The CPUs of a CPU list file; ids at or above ``limit`` make the whole list garbled."""
        text = self.read_text(path)
        try:
            return parse_cpulist(text, limit=limit)
        except ValueError as error:
            raise HostFSError(path, f"garbled CPU list {text.strip()[:40]!r} ({error})") from None

    def read_cpumask(self, path: str, *, limit: int = MAX_CPUS) -> tuple[int, ...]:
        """The CPUs of a CPU mask file; bits at or above ``limit`` make the whole mask garbled."""
        text = self.read_text(path)
        try:
            return parse_cpumask(text, limit=limit)
        except ValueError as error:
            raise HostFSError(path, f"garbled CPU mask {text.strip()[:40]!r} ({error})") from None

    def listdir(self, path: str) -> list[str]:
        """Entry names, sorted; a missing or unreadable directory raises HostFSError."""
        try:
            return sorted(os.listdir(self._local(path)))
        except FileNotFoundError:
            raise HostFSError(path, "missing") from None
        except NotADirectoryError:
            raise HostFSError(path, "is a file, expected a directory") from None
        except OSError as error:
            raise HostFSError(path, f"unreadable ({error.strerror or error})") from None

    def is_dir(self, path: str) -> bool:
        try:
            return os.path.isdir(self._local(path))
        except HostFSError:  # a loop of links
            return False

    def exists(self, path: str) -> bool:
        try:
            return os.path.exists(self._local(path))
        except HostFSError:
            return False

    def realpath(self, path: str) -> str:
        """Resolve links inside the root and return the host path (``/sys/devices/...``).

        Each directory is resolved once per discovery pass (``forget_links``), from its own resolved parent,
        and a path's last component on every call: a read under another root costs one ``lstat`` more than
        the OS's own walk, not one per component."""
        parent, _, name = path.rstrip("/").rpartition("/")
        if not name or name in (".", ".."):
            return self._walk("/", path, _parts(path))
        base = self._directories.get(parent)
        if base is None:
            base = self.realpath(parent) if parent else "/"
            if len(self._directories) >= _MAX_CACHED_DIRECTORIES:
                self._directories.clear()
            self._directories[parent] = base
        return self._walk(base, path, [name])

    def forget_links(self) -> None:
        """Resolve every link afresh from now on: a device may have come or gone since the last pass."""
        self._directories.clear()

    def _walk(self, resolved: str, path: str, pending: list[str]) -> str:
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            if part == "..":
                resolved = posixpath.dirname(resolved)
                continue
            candidate = posixpath.join(resolved, part)
            local = self.host_path(candidate)
            if os.path.islink(local):
                hops += 1
                if hops > _MAX_LINKS:
                    raise HostFSError(path, "too many levels of symbolic links")
                try:
                    target = os.readlink(local)
                except OSError as error:
                    raise HostFSError(path, f"unreadable link ({error.strerror or error})") from None
                if target.startswith("/"):
                    resolved = "/"
                pending = _parts(target) + pending
                continue
            resolved = candidate
        return resolved

    def _read(self, path: str, size: int) -> bytes:
        """Up to ``size`` bytes of a regular file; a FIFO, device or socket is refused.

        The type is checked before opening (opening a FIFO waits for a writer, a device's open() may
        have effects) and again on the open descriptor, since the file may have been swapped between
        the two; the non-blocking open keeps that window from hanging the agent.
        """
        local = self._local(path)
        # Under another root every link is resolved already: one swapped in since is refused, not followed.
        flags = _OPEN_FLAGS if self.is_live else _OPEN_FLAGS | os.O_NOFOLLOW
        try:
            _require_regular_file(path, os.stat(local).st_mode)
            descriptor = os.open(local, flags)
        except FileNotFoundError:
            raise HostFSError(path, "missing") from None
        except OSError as error:
            raise HostFSError(path, f"unreadable ({error.strerror or error})") from None
        try:
            _require_regular_file(path, os.fstat(descriptor).st_mode)
            chunks: list[bytes] = []
            while size > 0 and (chunk := os.read(descriptor, size)):
                chunks.append(chunk)
                size -= len(chunk)
            return b"".join(chunks)
        except OSError as error:
            raise HostFSError(path, f"unreadable ({error.strerror or error})") from None
        finally:
            os.close(descriptor)


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _require_regular_file(path: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise HostFSError(path, "is a directory, expected a file")
    kind = next((name for is_kind, name in _NOT_REGULAR if is_kind(mode)), "not a regular file")
    raise HostFSError(path, f"is {kind}, not a regular file; not read")


def _decode(data: bytes) -> str:
    """UTF-8 text without control characters but tab and newline: no kernel attribute holds one, and an
    escape sequence in a hostile file (a ``model name`` that recolours or clears a terminal) must not reach
    the terminal that prints what was discovered, nor the labels and annotations published from it."""
    return _CONTROL.sub("", data.decode("utf-8", errors="replace"))
