"""Quantities read through the kept answers equal quantities read afresh, whatever the text's type."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.core import quantity
from placement.core.quantity import quantity_value

TEXTS = st.one_of(
    st.from_regex(r"[+-]?[0-9]{1,6}(\.[0-9]{0,3})?(m|k|M|G|Ki|Mi|Gi|e[0-9])?", fullmatch=True),
    st.text(max_size=8),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


@given(texts=st.lists(TEXTS, min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_kept_answers_are_the_fresh_ones(texts: list[str | int | float]) -> None:
    for text in texts + texts:  # the second pass reads the kept answers
        assert quantity_value(text) == quantity._value(text)


def test_a_boolean_is_not_the_number_it_hashes_as() -> None:
    assert quantity_value(1) == Decimal(1)
    assert quantity_value(True) is None  # "True" is no quantity, though True == 1
    assert quantity_value("1Gi") == Decimal(2**30)


def test_long_texts_are_read_but_not_kept() -> None:
    long = "1" + "0" * 100
    before = quantity._kept_value.cache_info().currsize
    assert quantity_value(long) == Decimal(2**63 - 1)  # capped as the API server caps it
    assert quantity._kept_value.cache_info().currsize == before
