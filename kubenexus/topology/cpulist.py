"""The kernel's CPU list and CPU mask formats, both ways.

``cpulist``: ``"0-15,32-47"`` (sysfs ``cpulist``, ``online``, ``possible``).
``cpumask``: comma-separated 32-bit hex words, most significant first
(``"0000,00000000,0000000c"``; sysfs ``cpumap``, ``local_cpus``).

Parsing is bounded by a CPU id ``limit``, never by the numbers the text holds: a range such
as ``0-4294967295`` or a mask of 200,000 words is refused with a ValueError before anything
is allocated for it, so a hostile host file costs a warning, not the agent's memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The kernel's largest NR_CPUS (x86 MAXSMP and powerpc; arm64 stops at 4096): no CPU id reaches it.
MAX_CPUS = 8192
_WORD_BITS = 32
_MASK = re.compile(r"\s*[0-9a-fA-F]{1,8}\s*(?:,\s*[0-9a-fA-F]{1,8}\s*)*")


def parse_cpulist(text: str, *, limit: int = MAX_CPUS) -> tuple[int, ...]:
    """Parse ``"0-3,8,10-11"``; tolerate NUL terminators and whitespace.

    Every CPU id must be below ``limit``. Raise ValueError when garbled, out of bounds, or holding
    more entries than there can be CPUs.
    """
    cleaned = text.replace("\x00", "").strip()
    if not cleaned:
        return ()
    entries = cleaned.count(",") + 1
    if entries > limit:
        raise ValueError(f"{entries} entries, more than the {limit} CPUs there can be")
    cpus: set[int] = set()
    for part in (p.strip() for p in cleaned.split(",")):
        if "-" in part:
            low_text, high_text = part.split("-", 1)
            low, high = int(low_text), int(high_text)
            if low < 0 or high < low:
                raise ValueError(f"bad CPU range {part!r}")
            _check_bound(high, limit)
            cpus.update(range(low, high + 1))
        else:
            cpu = int(part)
            if cpu < 0:
                raise ValueError(f"bad CPU number {part!r}")
            _check_bound(cpu, limit)
            cpus.add(cpu)
    return tuple(sorted(cpus))


def parse_cpumask(text: str, *, limit: int = MAX_CPUS) -> tuple[int, ...]:
    """Parse ``"ff,00000000"``-style masks; every set bit must be below ``limit``. Raise ValueError when garbled.

    Old kernels print all NR_CPUS bits whatever ``limit`` is, so the word count is bounded by the
    kernel's largest NR_CPUS (or ``limit``, when larger), and leading zero words are fine.
    """
    cleaned = text.replace("\x00", "").strip()
    if not cleaned:
        return ()
    max_words = -(-max(limit, MAX_CPUS) // _WORD_BITS)
    words = cleaned.count(",") + 1
    if words > max_words:
        raise ValueError(f"{words} mask words, more than the {max_words} that {max_words * _WORD_BITS} CPUs take")
    if not _MASK.fullmatch(cleaned):
        bad = next(w.strip() for w in cleaned.split(",") if not _MASK.fullmatch(w.strip()))
        raise ValueError(f"bad CPU mask word {bad[:40]!r}")
    cpus: list[int] = []
    for position, word in enumerate(reversed(cleaned.split(","))):
        value = int(word, 16)
        while value:  # one step per set bit: masks are mostly zero words
            lowest = value & -value
            cpus.append(position * _WORD_BITS + lowest.bit_length() - 1)
            value ^= lowest
    if cpus:
        _check_bound(cpus[-1], limit)
    return tuple(cpus)


def format_cpulist(cpus: Iterable[int], *, separator: str = ",") -> str:
    """Format CPUs as ranges, ``"0-15,32-47"``; ``separator`` lets label encodings avoid commas."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start = previous = None
    for cpu in ordered:
        if previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            ranges.append(_range_text(start, previous))
        start = previous = cpu
    if start is not None:
        ranges.append(_range_text(start, previous))
    return separator.join(ranges)


def _check_bound(cpu: int, limit: int) -> None:
    if cpu >= limit:
        raise ValueError(f"CPU {cpu} out of range: ids stop at {limit - 1}")


def _range_text(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"
