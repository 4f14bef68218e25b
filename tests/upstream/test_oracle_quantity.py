"""Quantities printed as the API server prints them, judged by k8s.io/apimachinery v0.37.2's own
``Quantity.String()`` (tests/oracles/quantity): ``canonical_quantity``, what the service's node views and
Explain answer with (docs/api.md, "Amounts").

The values are drawn in nano units, as a quantity holds them: whole and fractional CPUs, byte counts with and
without a power of 1024 in them, and amounts up to the largest the API server stores (2^63-1 units).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from placement.core.quantity import canonical_quantity, exact_quantity
from tests.oracle_process import Oracle, oracle_settings

pytestmark = pytest.mark.oracle

_LARGEST_NANOS = (2**63 - 1) * 10**9

nanos = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12),  # up to a thousand units, to the nano
    st.integers(min_value=0, max_value=2**40).map(lambda n: n * 10**6),  # millis and whole units
    st.builds(lambda k, p: k * 1024**p * 10**9, st.integers(1, 4096), st.integers(0, 6)).filter(
        lambda n: n <= _LARGEST_NANOS
    ),  # byte sizes
    st.integers(min_value=-_LARGEST_NANOS, max_value=_LARGEST_NANOS),
)


@oracle_settings()
@given(nanos=nanos, binary=st.booleans())
def test_quantities_print_as_the_api_server_prints_them(quantity_oracle: Oracle, nanos: int, binary: bool) -> None:
    note(f"nanos={nanos} binary={binary}")
    upstream = quantity_oracle.ask({"nanos": str(nanos), "format": "BinarySI" if binary else "DecimalSI"})
    ours = canonical_quantity(Fraction(nanos, 10**9), binary=binary)
    assert ours == upstream
    assert exact_quantity(ours) == Fraction(nanos, 10**9)  # and reads back as the same value
