from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubenexus.topology.cpulist import MAX_CPUS, format_cpulist, parse_cpulist, parse_cpumask
from tests.gpu_sysfs import cpumask


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


@pytest.mark.parametrize(
    ("text", "limit", "message"),
    [
        ("0-4294967295", MAX_CPUS, "CPU 4294967295 out of range: ids stop at 8191"),
        ("0-8192", MAX_CPUS, "CPU 8192 out of range"),
        ("0-15,32", 32, "CPU 32 out of range: ids stop at 31"),
        (",".join(["0"] * 33), 32, "33 entries, more than the 32 CPUs there can be"),
        ("9" * 5000, MAX_CPUS, "digits|out of range"),  # int() refuses 5000 digits unless told otherwise
    ],
)
def test_parse_cpulist_is_bounded_by_the_limit_not_by_the_text(text: str, limit: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cpulist(text, limit=limit)


def test_parse_cpulist_takes_every_cpu_below_the_limit() -> None:
    assert parse_cpulist("0-8191") == tuple(range(MAX_CPUS))
    assert parse_cpulist("0-31", limit=32) == tuple(range(32))


@pytest.mark.parametrize(
    ("text", "limit", "message"),
    [
        (",".join(["ffffffff"] * 200_000), MAX_CPUS, "200000 mask words, more than the 256 that 8192 CPUs take"),
        ("1," + "00000000," * 256 + "0", MAX_CPUS, "258 mask words"),
        ("ffffffff,ffffffff", 32, "CPU 63 out of range: ids stop at 31"),
        ("ff,,00", MAX_CPUS, "mask word ''"),
        ("-1", MAX_CPUS, "mask word '-1'"),
        ("0x1f", MAX_CPUS, "mask word '0x1f'"),
    ],
)
def test_parse_cpumask_is_bounded(text: str, limit: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cpumask(text, limit=limit)


def test_parse_cpumask_takes_leading_zero_words_of_an_old_kernel() -> None:
    """Kernels before nr_cpu_ids printed all NR_CPUS bits: 4096 on the 256ppc snapshot, whatever is possible."""
    assert parse_cpumask("00000000," * 127 + "ffffffff", limit=32) == tuple(range(32))
    assert parse_cpumask(",".join(["ffffffff"] * 256)) == tuple(range(MAX_CPUS))


@given(st.sets(st.integers(min_value=0, max_value=MAX_CPUS - 1), max_size=300))
def test_cpumask_round_trip(cpus: set[int]) -> None:
    assert parse_cpumask(cpumask(tuple(cpus))) == tuple(sorted(cpus))
