"""Kubernetes quantities ("500m", "4Gi", "1e3", "81559Mi") read exactly, in base units.

One reader for every quantity the service accepts: a pod's resources (``placement.core.pods``), its GPU
memory annotation (``placement.core.gpu_annotations``), DRA capacities (``placement.core.dra.slices``) and
the CEL selectors' ``quantity()`` (``placement.core.dra.cel``). It follows ``resource.ParseQuantity``
(k8s.io/apimachinery): an optional sign, digits with an optional fraction, then a decimal suffix (``n``
to ``E``), a binary suffix (``Ki`` to ``Ei``) or an exponent ``e<int>``; the value is rounded up to a
whole nano unit and capped at 2^63-1, as the API server stores it. Exact (``Fraction``), because "0.1" CPU
and "1Gi" of memory must compare as the API server compares them, not as floats round them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

_QUANTITY = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(.*)", re.DOTALL)
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]{1,18})")  # an int64 exponent, as Go's ParseInt reads it
_NANO = Fraction(1, 10**9)
_MAX_QUANTITY = Fraction(2**63 - 1)  # ParseQuantity caps larger magnitudes here


class QuantityError(ValueError):
    """Not a Kubernetes quantity; says why."""


def exact_quantity(text: str) -> Fraction:
    """``resource.ParseQuantity``: the value in base units, rounded up to a nano unit and capped."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    sign, number, suffix = match.groups()
    if suffix in _DECIMAL_SUFFIX:
        base, exponent = 10, _DECIMAL_SUFFIX[suffix]
    elif suffix in _BINARY_SUFFIX:
        base, exponent = 2, _BINARY_SUFFIX[suffix]
    elif (exponent_match := _EXPONENT.fullmatch(suffix)) is not None:
        # Clamped so that "1e999999999" costs nothing: beyond these bounds the cap or the nano rounding
        # below decides the value anyway.
        base, exponent = 10, max(min(int(exponent_match.group(1)), len(text) + 20), -(len(text) + 10))
    else:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (unknown suffix {suffix!r})")
    try:
        magnitude = Fraction(number) * Fraction(base) ** exponent
    except ValueError:  # more digits than Python converts (4300); no real quantity has them
        raise QuantityError(f"{text[:40]!r}... has too many digits") from None
    if magnitude:
        magnitude = min(Fraction(-((-magnitude) // _NANO)) * _NANO, _MAX_QUANTITY)  # round up to 1n
    return -magnitude if sign == "-" else magnitude


def quantity_value(text: str | int | float) -> Decimal | None:
    """The quantity's value in base units as a ``Decimal`` (exact: a whole number of nano units); None when
    ``text`` is not a quantity. Surrounding blanks are ignored, as the API server's JSON decoding does.

    Short texts are kept, the last 4,096 of them: every pod event is read through here ("1", "16Gi" again
    and again); a long one (no real quantity is) is read afresh, so that keeping stays small."""
    if isinstance(text, str) and len(text) > _KEPT_LENGTH:
        return _value(text)
    return _kept_value(text)


_KEPT_LENGTH = 64


def _value(text: str | int | float) -> Decimal | None:
    try:
        value = exact_quantity(str(text).strip())
    except QuantityError:
        return None
    return Decimal(int(value / _NANO)).scaleb(-9).normalize()


_kept_value = lru_cache(maxsize=4096, typed=True)(_value)  # typed: True is not a quantity, 1 is


BINARY_RESOURCES = ("memory", "ephemeral-storage")  # and every hugepages-<size>: what the kubelet reports in bytes
_DECIMAL_PRINTED = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_PRINTED = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def resource_quantity(name: str, value: float | int | Fraction) -> str:
    """A resource's amount as the API server prints it: bytes (memory, hugepages, ephemeral storage) in
    binary suffixes ("510Gi"), everything else in decimal ones ("62", "500m", "8")."""
    return canonical_quantity(value, binary=name in BINARY_RESOURCES or name.startswith("hugepages-"))


def canonical_quantity(value: float | int | Fraction, *, binary: bool) -> str:
    """``resource.Quantity.String()`` (k8s.io/apimachinery ``CanonicalizeBytes``) of ``value``, rounded to a
    nano unit and capped at 2^63-1 units as ParseQuantity caps it, in the ``BinarySI`` format when ``binary``
    else ``DecimalSI``.

    BinarySI is printed with the largest power of 1024 that divides the value ("1Gi", "1536Ki") when the value
    is whole and at least 1024 in size; otherwise, as for DecimalSI, with the decimal suffix whose power of
    1000 leaves the fewest digits and no fraction ("500m", "2k", "1536500m"). The quantity oracle
    (tests/oracles/quantity) holds this equal to apimachinery's own printing."""
    nanos = round(min(max(Fraction(value), -_MAX_QUANTITY), _MAX_QUANTITY) * 10**9)
    if nanos == 0:
        return "0"
    sign, magnitude = ("-" if nanos < 0 else ""), abs(nanos)
    whole, fraction = divmod(magnitude, 10**9)
    if binary and whole >= 1024 and not fraction:
        power = 0
        while whole % 1024 == 0 and power < len(_BINARY_PRINTED) - 1:
            whole //= 1024
            power += 1
        return f"{sign}{whole}{_BINARY_PRINTED[power]}"
    mantissa, exponent = magnitude, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    below = exponent % 3  # down to a multiple of 3: 15e2 is printed 1500, 5e-1 500m
    mantissa, exponent = mantissa * 10**below, exponent - below
    return f"{sign}{mantissa}{_DECIMAL_PRINTED[exponent]}"
