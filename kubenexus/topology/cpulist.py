"""The kernel's CPU list and CPU mask formats, both ways.

``cpulist``: ``"0-15,32-47"`` (sysfs ``cpulist``, ``online``, ``possible``).
``cpumask``: comma-separated 32-bit hex words, most significant first
(``"0000,00000000,0000000c"``; sysfs ``cpumap``, ``local_cpus``).
"""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse ``"0-3,8,10-11"``; tolerate NUL terminators and whitespace. Raise ValueError when garbled."""
    cleaned = text.replace("\x00", "").strip()
    cpus: set[int] = set()
    if not cleaned:
        return ()
    for part in (p.strip() for p in cleaned.split(",")):
        if "-" in part:
            low_text, high_text = part.split("-", 1)
            low, high = int(low_text), int(high_text)
            if low < 0 or high < low:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(low, high + 1))
        else:
            cpu = int(part)
            if cpu < 0:
                raise ValueError(f"bad CPU number {part!r}")
            cpus.add(cpu)
    return tuple(sorted(cpus))


def parse_cpumask(text: str) -> tuple[int, ...]:
    """Parse ``"ff,00000000"``-style masks. Raise ValueError when garbled."""
    cleaned = text.replace("\x00", "").strip()
    if not cleaned:
        return ()
    value = 0
    for word in (w.strip() for w in cleaned.split(",")):
        if len(word) > 8:
            raise ValueError(f"bad CPU mask word {word!r}")
        value = (value << 32) | int(word, 16)
    return tuple(bit for bit in range(value.bit_length()) if value >> bit & 1)


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


def _range_text(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"
