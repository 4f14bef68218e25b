from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubenexus.topology.cpulist import format_cpulist, parse_cpulist, parse_cpumask


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11\n", (0, 1, 2, 3, 8, 10, 11)),
        ("", ()),
        ("\n", ()),
        ("5\x00", (5,)),
        ("1,3,5,7", (1, 3, 5, 7)),
    ],
)
def test_parse_cpulist(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "a-b", "1,,2", "-1", "0-", "x"])
def test_parse_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0000,00000000,0000000c\n", (2, 3)),
        ("ff", tuple(range(8))),
        ("00000001,00000000", (32,)),
        ("0", ()),
    ],
)
def test_parse_cpumask(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpumask(text) == cpus


def test_parse_cpumask_rejects_overlong_words() -> None:
    with pytest.raises(ValueError, match="mask word"):
        parse_cpumask("123456789")


def test_format_cpulist_ranges() -> None:
    assert format_cpulist([0, 1, 2, 3, 32, 33, 47, 5]) == "0-3,5,32-33,47"
    assert format_cpulist([], separator="_") == ""
    assert format_cpulist([4, 6, 7], separator="_") == "4_6-7"


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=200))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))
