"""Kubernetes quantities ("500m", "4Gi", "1e3") read exactly, in base units.

One reader for every quantity the service accepts: a pod's resources (``placement.core.pods``), its GPU
memory annotation (``placement.core.gpu_annotations``), DRA capacities. Exact (``Decimal``), because
"0.1" CPU and "1Gi" of memory must compare as the API server compares them, not as floats round them.
"""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException

_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def quantity_value(text: str | int | float) -> Decimal | None:
    """The quantity's value in base units (bytes, cores, items); None when ``text`` is not a quantity."""
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None or match.group(2) not in _SUFFIX:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except DecimalException:  # malformed ("1.2.3"), or beyond the context's exponent range (1e999999999999999999)
        return None
