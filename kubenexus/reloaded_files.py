"""A value loaded from files and loaded again once they change: certificates renewed under a running process.

cert-manager renews a certificate at two thirds of its life and rewrites its Secret; the kubelet then swaps
the mounted files (a symlink to a new directory), which changes their modification times and often their
sizes. ``Reloaded.refresh`` compares those with the last load's and, when they moved, loads again: the new
value replaces the old one only if it loads (a set caught half written, a key that is not the certificate's,
keeps the previous value with a warning, and is tried again at the next refresh). Cheap enough to ask at
every new connection: a ``stat`` per file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

_T = TypeVar("_T")
Stamps = tuple[tuple[int, int] | None, ...]


def stamps(paths: Iterable[Path]) -> Stamps:
    """Each file's (modification time in ns, size), None for one that cannot be read."""
    found: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            status = path.stat()
        except OSError:
            found.append(None)
            continue
        found.append((status.st_mtime_ns, status.st_size))
    return tuple(found)


class Reloaded(Generic[_T]):
    """``value``: what ``load`` made of ``paths``, at the start (its errors raised) and after each change.

    ``load`` raises ``OSError`` (``ssl.SSLError`` is one) or ``ValueError`` for files that do not load;
    ``what`` names them in the log lines, written to ``log``. Thread-safe."""

    def __init__(self, paths: Iterable[Path], load: Callable[[], _T], *, what: str, log: logging.Logger) -> None:
        self._paths = tuple(paths)
        self._load = load
        self._what = what
        self._log = log
        self._lock = threading.Lock()
        self._stamp = stamps(self._paths)
        self.value = load()
        self.reloads = 0

    def refresh(self) -> bool:
        """True when the files changed and ``value`` is now loaded from them."""
        with self._lock:
            stamp = stamps(self._paths)
            if stamp == self._stamp:
                return False
            try:
                value = self._load()
            except (OSError, ValueError) as error:
                message = f"{self._what} changed but do not load; keeping the previous ones"
                self._log.warning(message, extra={"error": str(error)})
                return False
            self._stamp, self.value = stamp, value
            self.reloads += 1
            self._log.info(f"{self._what} changed; loaded again", extra={"files": [str(path) for path in self._paths]})
            return True
