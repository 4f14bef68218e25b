"""HostFS: every read of the host's /sys and /proc goes through one object.

The root is chosen once (``--host-root``, default ``/``) and carried explicitly, so that
a captured snapshot of another machine reads exactly like a live host. Call sites write
absolute host paths (``"/sys/devices/system/node"``). Symbolic links are resolved inside
the root: an absolute link target in a snapshot means the snapshot's own tree.
"""

from __future__ import annotations

import os
import posixpath

from kubenexus.topology.cpulist import parse_cpulist, parse_cpumask

_MAX_LINKS = 40


class HostFSError(Exception):
    """A host file is missing, unreadable or not what its reader expects."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class HostFS:
    def __init__(self, root: str = "/") -> None:
        self.root = os.path.abspath(root)

    @property
    def is_live(self) -> bool:
        """True when reading this machine itself; live-only probes (NVML) refuse other roots."""
        return self.root == "/"

    def host_path(self, path: str) -> str:
        """The local path for a host path such as ``/sys/bus/pci``."""
        return os.path.join(self.root, path.lstrip("/"))

    def read_text(self, path: str) -> str:
        try:
            with open(self.host_path(path), "rb") as handle:
                data = handle.read(1 << 20)
        except FileNotFoundError:
            raise HostFSError(path, "missing") from None
        except IsADirectoryError:
            raise HostFSError(path, "is a directory, expected a file") from None
        except OSError as error:
            raise HostFSError(path, f"unreadable ({error.strerror or error})") from None
        return data.decode("utf-8", errors="replace").replace("\x00", "")

    def read_str(self, path: str) -> str:
        return self.read_text(path).strip()

    def read_int(self, path: str, *, base: int = 10) -> int:
        text = self.read_str(path)
        try:
            return int(text, base)
        except ValueError:
            raise HostFSError(path, f"expected an integer, found {text[:40]!r}") from None

    def read_cpulist(self, path: str) -> tuple[int, ...]:
        text = self.read_text(path)
        try:
            return parse_cpulist(text)
        except ValueError as error:
            raise HostFSError(path, f"garbled CPU list {text.strip()[:40]!r} ({error})") from None

    def read_cpumask(self, path: str) -> tuple[int, ...]:
        text = self.read_text(path)
        try:
            return parse_cpumask(text)
        except ValueError as error:
            raise HostFSError(path, f"garbled CPU mask {text.strip()[:40]!r} ({error})") from None

    def listdir(self, path: str) -> list[str]:
        """Entry names, sorted; a missing or unreadable directory raises HostFSError."""
        try:
            return sorted(os.listdir(self.host_path(path)))
        except FileNotFoundError:
            raise HostFSError(path, "missing") from None
        except NotADirectoryError:
            raise HostFSError(path, "is a file, expected a directory") from None
        except OSError as error:
            raise HostFSError(path, f"unreadable ({error.strerror or error})") from None

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self.host_path(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(self.host_path(path))

    def realpath(self, path: str) -> str:
        """Resolve links inside the root and return the host path (``/sys/devices/...``)."""
        resolved = "/"
        pending = [part for part in path.split("/") if part]
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
                target = os.readlink(local)
                if target.startswith("/"):
                    resolved = "/"
                pending = [p for p in target.split("/") if p] + pending
                continue
            resolved = candidate
        return resolved
