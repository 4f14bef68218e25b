"""Whether files changed: their modification times and sizes, as one comparable value.

For certificates read again once renewed (the kubelet replaces a mounted Secret's files by swapping a
symlink, which changes both): cheap enough to ask at every new connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

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
