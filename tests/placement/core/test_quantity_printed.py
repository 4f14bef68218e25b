"""Which resources print in binary suffixes: those the kubelet reports in bytes (``resource_quantity``).

How each format prints is judged by apimachinery itself in tests/upstream/test_oracle_quantity.py."""

from __future__ import annotations

import pytest

from placement.core.quantity import resource_quantity

GIB = 1 << 30


@pytest.mark.parametrize(
    ("name", "value", "printed"),
    [
        ("memory", 510 * GIB, "510Gi"),
        ("hugepages-2Mi", 16 * GIB, "16Gi"),
        ("hugepages-1Gi", 0, "0"),
        ("ephemeral-storage", 1536 * 1024, "1536Ki"),
        ("cpu", 62, "62"),
        ("cpu", 63.5, "63500m"),
        ("cpu", 0.1 + 0.2, "300m"),  # a float's rounding stays below a nano unit
        ("nvidia.com/gpu", 8, "8"),
        ("alibabacloud.com/gpu-milli", 4000, "4k"),
        ("example.com/gpu-memory", 1024, "1024"),  # a device's count, not bytes: decimal
    ],
)
def test_bytes_print_binary_and_the_rest_decimal(name: str, value: float, printed: str) -> None:
    assert resource_quantity(name, value) == printed
