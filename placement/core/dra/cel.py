"""DRA device selectors: the CEL expressions of DeviceClasses and claim requests, evaluated per device.

kube-scheduler's DRA allocator keeps a device for a request only if every DeviceClass selector and then
every request selector (``spec.selectors[].cel.expression``) is true for it. This module evaluates those
expressions the same way (DRA-lib ``cel/compile.go``, the apiserver's quantity and semver libraries) with
cel-python: one variable ``device`` with ``driver``, ``attributes`` and ``capacity`` (domain -> id -> value;
an unknown domain is an empty map, an unknown id inside it a "no such key" error) and
``allowMultipleAllocations``. Capacities are ``Quantity`` objects, version attributes ``Semver`` objects,
both exact (fractions and integers, never floats) so that ``81559Mi == 80Gi`` is false, as upstream.

cel-python does not type-check, so an unknown function would only fail when evaluation reaches it. Each
expression is therefore checked when it is compiled against the exact surface this evaluator implements
(``GLOBAL_FUNCTIONS``, ``METHODS``, ``MACROS``, ``DEVICE_FIELDS``, ``cel.bind``); anything else is refused
up front, naming the unsupported part, never silently matched or missed. Every failure is a
``SelectorError`` whose ``outcome`` tells the allocator which of the three upstream outcomes it is.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

import celpy
import celpy.celtypes as ct
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from placement.core.quantity import QuantityError, exact_quantity

MAX_EXPRESSION_BYTES = 10 * 1024  # resource.k8s.io CELSelectorExpressionMaxLength
_MAX_MESSAGE = 300  # a refusal becomes a FailedScheduling reason: keep it readable
# cel-python evaluates recursively, several Python frames per tree level; deeper trees (e.g. 40 nested
# parentheses, or 400 terms chained with &&) are refused when compiling rather than failing per device.
MAX_TREE_DEPTH = 400


class SelectorOutcome(enum.Enum):
    """Why a selector gave no answer; the allocator treats each differently, as upstream does."""

    INVALID = "invalid"  # does not compile, or uses what this evaluator does not implement
    RUNTIME_ERROR = "runtime error"  # e.g. a missing attribute id: fatal for the pod, not "no match"
    NOT_BOOL = "not a bool"  # compiled and ran, but the result is not true or false


class SelectorError(Exception):
    """A selector that cannot decide a device: the expression, the outcome, and a one-line reason."""

    def __init__(self, expression: str, outcome: SelectorOutcome, reason: str) -> None:
        shown = expression if len(expression) <= 120 else expression[:117] + "..."
        super().__init__(f"CEL selector {shown!r}: {outcome.value}: {reason}")
        self.expression = expression
        self.outcome = outcome
        self.reason = reason


class _ValueError(Exception):
    """A malformed quantity or version literal (becomes a runtime error, as in Kubernetes)."""


# --- Kubernetes quantities ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity as an exact number of base units (``81559Mi`` is 85520809984)."""

    value: Fraction

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """``resource.ParseQuantity`` (``placement.core.quantity``)."""
        try:
            return cls(exact_quantity(text))
        except QuantityError as error:
            raise _ValueError(str(error)) from None

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)


# --- Semantic versions ---------------------------------------------------------------------------------

_NUMERIC = re.compile(r"0|[1-9][0-9]*")
_IDENTIFIER = re.compile(r"[0-9A-Za-z-]+")


@dataclass(frozen=True, eq=False)
class Semver:
    """A semantic version (semver.org 2.0, as blang/semver parses it): a version-typed attribute's value.

    Equality and order follow semver precedence: build metadata is ignored, a pre-release sorts before
    its release, numeric pre-release identifiers compare as numbers and before alphanumeric ones.
    """

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """Strict ``MAJOR.MINOR.PATCH[-pre][+build]``; ``normalize`` first drops a leading ``v``, pads a
        missing minor/patch with 0 and strips leading zeros (the apiserver's ``semver(s, true)``)."""
        original = text
        if normalize:
            text = _normalized(text)
        core, _, build = text.partition("+")
        core, has_pre, pre = core.partition("-")
        parts = core.split(".")
        pre_ids = tuple(pre.split(".")) if has_pre else ()
        build_ids = tuple(build.split(".")) if "+" in text else ()
        if (
            len(parts) != 3
            or not all(_NUMERIC.fullmatch(part) for part in parts)
            or not all(_IDENTIFIER.fullmatch(i) for i in pre_ids + build_ids)
            or any(i.isdigit() and not _NUMERIC.fullmatch(i) for i in pre_ids)
        ):
            raise _ValueError(f"{original!r} is not a semantic version")
        return cls(int(parts[0]), int(parts[1]), int(parts[2]), pre_ids, build_ids)

    def compare(self, other: Semver) -> int:
        mine, theirs = self._precedence(), other._precedence()
        return (mine > theirs) - (mine < theirs)

    def _precedence(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release (no pre-release) outranks every pre-release of the same triple.
        return (
            self.major,
            self.minor,
            self.patch,
            0 if self.prerelease else 1,
            tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in self.prerelease),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash(self._precedence())

    def __str__(self) -> str:
        pre = "-" + ".".join(self.prerelease) if self.prerelease else ""
        build = "+" + ".".join(self.build) if self.build else ""
        return f"{self.major}.{self.minor}.{self.patch}{pre}{build}"


def _normalized(text: str) -> str:
    parts = [_without_leading_zeros(part) for part in text.removeprefix("v").split(".", 2)]
    if len(parts) < 3:
        if any(mark in parts[-1] for mark in "+-"):
            raise _ValueError(f"{text!r}: a short version cannot carry pre-release or build metadata")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _without_leading_zeros(part: str) -> str:
    if len(part) <= 1:
        return part
    stripped = part.lstrip("0")
    return stripped if stripped[:1].isdigit() else "0" + stripped


# --- The device -----------------------------------------------------------------------------------------

AttributeScalar = int | bool | str | Semver
AttributeValue = AttributeScalar | Sequence[AttributeScalar]  # a list with DRAListTypeAttributes


@dataclass(frozen=True)
class SelectorDevice:
    """One device as its selectors see it: plain values, keyed by domain and then by id.

    A driver's bare attribute names (``productName``) belong under the driver's own domain, qualified ones
    (``resource.kubernetes.io/pcieRoot``) under theirs. Capacities are quantity strings (``"81559Mi"``),
    integers or ``Quantity`` values; version attributes are ``Semver`` values (a plain string stays a string).
    """

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, int | str | Quantity]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False


class _DomainMap(ct.MapType):
    """The outer map of ``device.attributes``/``device.capacity``: an unknown domain is an empty map."""

    def __missing__(self, key: Any) -> ct.MapType:
        return ct.MapType()


def _cel_attribute(value: AttributeValue) -> Any:
    if isinstance(value, bool):  # before int: bool is an int in Python
        return ct.BoolType(value)
    if isinstance(value, int):
        return ct.IntType(value)
    if isinstance(value, str):
        return ct.StringType(value)
    if isinstance(value, Semver):
        return value
    if isinstance(value, Sequence):
        return ct.ListType([_cel_attribute(item) for item in value])
    raise _ValueError(f"attribute value {value!r} is not an int, bool, string, version or a list of them")


def _cel_quantity(value: int | str | Quantity) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int):
        return Quantity(Fraction(value))
    return Quantity.parse(value)


def _cel_device(device: SelectorDevice) -> ct.MapType:
    attributes = _DomainMap(
        {
            ct.StringType(domain): ct.MapType({ct.StringType(k): _cel_attribute(v) for k, v in values.items()})
            for domain, values in device.attributes.items()
        }
    )
    capacity = _DomainMap(
        {
            ct.StringType(domain): ct.MapType({ct.StringType(k): _cel_quantity(v) for k, v in values.items()})
            for domain, values in device.capacity.items()
        }
    )
    return ct.MapType(
        {
            ct.StringType("driver"): ct.StringType(device.driver),
            ct.StringType("attributes"): attributes,
            ct.StringType("capacity"): capacity,
            ct.StringType("allowMultipleAllocations"): ct.BoolType(device.allow_multiple_allocations),
        }
    )


# --- The functions --------------------------------------------------------------------------------------


def _no_overload(name: str, *args: Any) -> CELEvalError:
    return CELEvalError(f"no such overload: {name}({', '.join(_cel_type_name(a) for a in args)})")


# cel-python's operators sometimes return plain Python values ('a' + 'b' is a str, 1.5 + 1.0 a float), so
# a value's CEL type is read from the Python base classes, most specific first.
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    *((ct.BoolType, "bool"), (bool, "bool"), (ct.UintType, "uint"), (int, "int"), (float, "double")),
    *((str, "string"), (bytes, "bytes"), (list, "list"), (dict, "map"), (type(None), "null")),
)


def _cel_type_name(value: Any) -> str:
    if isinstance(value, Quantity | Semver):
        return type(value).__name__
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def _quantity(text: Any) -> Any:
    if not isinstance(text, str):
        return _no_overload("quantity", text)
    try:
        return Quantity.parse(str(text))
    except _ValueError as error:
        return CELEvalError(f"quantity: {error}")


def _is_quantity(text: Any) -> Any:
    if not isinstance(text, str):
        return _no_overload("isQuantity", text)
    try:
        Quantity.parse(str(text))
    except _ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _semver(text: Any, normalize: Any = None) -> Any:
    if not isinstance(text, str) or _cel_type_name(normalize) not in ("bool", "null"):
        return _no_overload("semver", text, *([] if normalize is None else [normalize]))
    try:
        return Semver.parse(str(text), normalize=bool(normalize))
    except _ValueError as error:
        return CELEvalError(f"semver: {error}")


def _is_semver(text: Any, normalize: Any = None) -> Any:
    parsed = _semver(text, normalize)
    if isinstance(parsed, CELEvalError) and str(parsed.args[0]).startswith("no such overload"):
        return _no_overload("isSemver", text, *([] if normalize is None else [normalize]))
    return ct.BoolType(isinstance(parsed, Semver))


def _compare_to(left: Any, right: Any) -> Any:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return ct.IntType(left.compare(right))
    if isinstance(left, Semver) and isinstance(right, Semver):
        return ct.IntType(left.compare(right))
    return _no_overload("compareTo", left, right)


def _comparison(name: str, want: int) -> Callable[[Any, Any], Any]:
    def compare(left: Any, right: Any) -> Any:
        order = _compare_to(left, right)
        if isinstance(order, CELEvalError):
            return _no_overload(name, left, right)
        return ct.BoolType(order == want)

    return compare


def _arithmetic(name: str, sign: int) -> Callable[[Any, Any], Any]:
    def apply(left: Any, right: Any) -> Any:
        if isinstance(left, Quantity) and isinstance(right, Quantity):
            return Quantity(left.value + sign * right.value)
        if isinstance(left, Quantity) and _cel_type_name(right) == "int":
            return Quantity(left.value + sign * int(right))
        return _no_overload(name, left, right)

    return apply


def _quantity_method(name: str, result: Callable[[Quantity], Any]) -> Callable[[Any], Any]:
    def method(value: Any) -> Any:
        return result(value) if isinstance(value, Quantity) else _no_overload(name, value)

    return method


def _int64(value: Fraction) -> bool:
    return value.denominator == 1 and -(2**63) <= value <= 2**63 - 1


def _as_integer(quantity: Quantity) -> Any:
    if not _int64(quantity.value):
        return CELEvalError("asInteger: cannot convert value to integer (value is too large or not an integer)")
    return ct.IntType(int(quantity.value))


def _semver_part(name: str) -> Callable[[Any], Any]:
    def part(value: Any) -> Any:
        return ct.IntType(getattr(value, name)) if isinstance(value, Semver) else _no_overload(name, value)

    return part


def _includes(container: Any, item: Any) -> Any:
    """The DRA member function: ``x.includes(v)`` is ``x == v`` on a scalar, ``v in x`` on a list."""
    if isinstance(container, list):
        return _in(item, container)
    return _equal(container, item)


def _is_number(value: Any) -> bool:
    return _cel_type_name(value) in ("int", "uint", "double")


def _plain_number(value: Any) -> int | float:
    return float(value) if isinstance(value, float) else int(value)


def _equality(left: Any, right: Any) -> bool:
    """CEL heterogeneous equality (cel-go, as Kubernetes configures it): values of different types are
    unequal, numbers compare across int/uint/double, lists and maps element-wise. Quantities and versions
    compare only with their own kind (Kubernetes' ``Equal`` gives "no such overload" otherwise)."""
    if isinstance(left, Quantity | Semver) or isinstance(right, Quantity | Semver):
        if type(left) is not type(right):
            raise TypeError(f"no such overload: {_cel_type_name(left)} == {_cel_type_name(right)}")
        return bool(left == right)
    if _is_number(left) and _is_number(right):
        return _plain_number(left) == _plain_number(right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_equality(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_equality(left[k], right[k]) for k in left)
    if _cel_type_name(left) != _cel_type_name(right):
        return False
    return bool(left == right)


def _equal(left: Any, right: Any) -> Any:
    try:
        return ct.BoolType(_equality(left, right))
    except TypeError as error:
        return CELEvalError(str(error))


def _not_equal(left: Any, right: Any) -> Any:
    result = _equal(left, right)
    return result if isinstance(result, CELEvalError) else ct.BoolType(not result)


def _in(item: Any, container: Any) -> Any:
    if isinstance(container, dict):
        return ct.BoolType(item in container)
    if isinstance(container, list):
        try:
            return ct.BoolType(any(_equality(item, element) for element in container))
        except TypeError as error:
            return CELEvalError(str(error))
    return _no_overload("in", item, container)


def _ordering(name: str, test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    """``<``, ``<=``, ``>``, ``>=``: numbers across int/uint/double, strings, bytes and bools with their
    own kind. Quantities and versions have no operators; they order through ``compareTo``."""

    def order(left: Any, right: Any) -> Any:
        if _is_number(left) and _is_number(right):
            return ct.BoolType(test(_plain_number(left), _plain_number(right)))
        kind = _cel_type_name(left)
        if kind == _cel_type_name(right) and kind in ("string", "bytes", "bool"):
            return ct.BoolType(test(left, right))
        return _no_overload(name, left, right)

    return order


def _string_method(name: str, apply: Callable[..., Any], *kinds: str) -> Callable[..., Any]:
    """A string member function taking arguments of CEL types ``kinds`` (the last ones may be left out)."""

    def method(text: Any, *args: Any) -> Any:
        if (
            not isinstance(text, str)
            or len(args) > len(kinds)
            or not all(_cel_type_name(arg) == kind for arg, kind in zip(args, kinds, strict=False))
        ):
            return _no_overload(name, text, *args)
        return apply(str(text), *args)

    return method


def _ascii_case(upper: bool) -> Callable[[str], Any]:
    # lowerAscii/upperAscii change only ASCII letters (cel-go strings extension), unlike str.lower().
    source, target = ("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    table = str.maketrans(source, target) if upper else str.maketrans(target, source)
    return lambda text: ct.StringType(text.translate(table))


def _split(text: str, separator: Any = None, limit: Any = None) -> Any:
    """cel-go ``split``: a limit of 0 gives no pieces, a negative one all; an empty separator splits
    into characters (Go's ``strings.SplitN``)."""
    if separator is None:
        return _no_overload("split", text)
    count = -1 if limit is None else int(limit)
    if count == 0:
        return ct.ListType([])
    if separator == "":
        pieces = list(text) if count < 0 or count >= len(text) else [*text[: count - 1], text[count - 1 :]]
    else:
        pieces = text.split(str(separator), -1 if count < 0 else count - 1)
    return ct.ListType([ct.StringType(piece) for piece in pieces])


def _size(value: Any) -> Any:
    if _cel_type_name(value) in ("string", "bytes", "list", "map"):
        return ct.IntType(len(value))
    return _no_overload("size", value)


def _matches(text: Any, pattern: Any) -> Any:
    if not isinstance(text, str) or not isinstance(pattern, str):
        return _no_overload("matches", text, pattern)
    return celpy.evaluation.function_matches(text, pattern)


def _propagating_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """An error operand is the result (cel-python hands operators evaluated operands, errors included)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        return function(*args)

    return call


_IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    # Operators with CEL's (not cel-python's) equality and cross-type numeric ordering.
    "_==_": _equal,
    "_!=_": _not_equal,
    "_in_": _in,
    "_<_": _ordering("<", lambda a, b: a < b),
    "_<=_": _ordering("<=", lambda a, b: a <= b),
    "_>_": _ordering(">", lambda a, b: a > b),
    "_>=_": _ordering(">=", lambda a, b: a >= b),
    # Standard CEL and the strings extension.
    "size": _size,
    "matches": _matches,
    "startsWith": _string_method("startsWith", lambda t, s: ct.BoolType(t.startswith(s)), "string"),
    "endsWith": _string_method("endsWith", lambda t, s: ct.BoolType(t.endswith(s)), "string"),
    "contains": _string_method("contains", lambda t, s: ct.BoolType(s in t), "string"),
    "lowerAscii": _string_method("lowerAscii", _ascii_case(upper=False)),
    "upperAscii": _string_method("upperAscii", _ascii_case(upper=True)),
    "split": _string_method("split", _split, "string", "int"),
    # Kubernetes quantities.
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _comparison("isGreaterThan", 1),
    "isLessThan": _comparison("isLessThan", -1),
    "add": _arithmetic("add", 1),
    "sub": _arithmetic("sub", -1),
    "sign": _quantity_method("sign", lambda q: ct.IntType((q.value > 0) - (q.value < 0))),
    "isInteger": _quantity_method("isInteger", lambda q: ct.BoolType(_int64(q.value))),
    "asInteger": _quantity_method("asInteger", _as_integer),
    "asApproximateFloat": _quantity_method("asApproximateFloat", lambda q: ct.DoubleType(float(q.value))),
    # Kubernetes semantic versions (compareTo, isGreaterThan, isLessThan shared with quantities).
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    # DRA.
    "includes": _includes,
}
_FUNCTIONS = {name: _propagating_errors(function) for name, function in _IMPLEMENTATIONS.items()}

GLOBAL_FUNCTIONS = frozenset({"has", "dyn", "size", "matches", "quantity", "isQuantity", "semver", "isSemver"})
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
METHODS = frozenset(
    {
        *("size", "matches", "startsWith", "endsWith", "contains", "lowerAscii", "upperAscii", "split"),
        *("compareTo", "isGreaterThan", "isLessThan", "add", "sub", "sign"),
        *("isInteger", "asInteger", "asApproximateFloat", "major", "minor", "patch", "includes"),
    }
)
DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})


# --- Compiling and checking -----------------------------------------------------------------------------


class _Unsupported(Exception):
    """Raised by the surface check with the part of the expression this evaluator does not implement."""


def _unwrapped(tree: celpy.Expression[Any]) -> celpy.Expression[Any]:
    """The first node below ``tree`` that does something (the grammar wraps every term in precedence levels)."""
    while len(tree.children) == 1 and isinstance(tree.children[0], celpy.Expression):
        tree = tree.children[0]
    return tree


def _identifier(tree: celpy.Expression[Any]) -> str | None:
    """The name if ``tree`` is nothing but a bare identifier (``x`` in ``l.all(x, ...)``)."""
    node = _unwrapped(tree)
    return str(node.children[0]) if node.data == "ident" else None


def _arguments(tree: celpy.Expression[Any], index: int) -> list[celpy.Expression[Any]]:
    if len(tree.children) <= index:
        return []
    return [cast(celpy.Expression[Any], child) for child in cast(celpy.Expression[Any], tree.children[index]).children]


def _depth(tree: celpy.Expression[Any]) -> int:
    deepest, pending = 0, [(tree, 1)]
    while pending:
        node, depth = pending.pop()
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in node.children if isinstance(child, celpy.Expression))
    return deepest


def _check(tree: celpy.Expression[Any], scope: frozenset[str]) -> None:
    """Refuses whatever lies outside the implemented surface; ``scope`` holds macro and bind variables."""
    kind = tree.data
    if kind in ("member_object", "dot_ident", "dot_ident_arg"):
        raise _Unsupported(f"{kind.replace('_', ' ')} (message construction or a leading-dot name)")
    if kind == "ident":
        name = str(tree.children[0])
        if name not in scope and name != "device":
            raise _Unsupported(f"undeclared reference to {name!r} (the only variable is 'device')")
        return
    if kind == "ident_arg":
        name = str(tree.children[0])
        if name not in GLOBAL_FUNCTIONS:
            raise _Unsupported(f"function {name}()")
        arguments = _arguments(tree, 1)
        if name == "has" and (len(arguments) != 1 or _unwrapped(arguments[0]).data != "member_dot"):
            raise _Unsupported("has() needs one field selection argument, as in has(m.field)")
        for argument in arguments:
            _check(argument, scope)
        return
    if kind == "member_dot":
        member, selected = tree.children
        if "device" not in scope and _identifier(cast(celpy.Expression[Any], member)) == "device":
            if str(selected) not in DEVICE_FIELDS:
                raise _Unsupported(f"device.{selected} (a device has only {', '.join(sorted(DEVICE_FIELDS))})")
            return
    if kind == "member_dot_arg":
        member, name = cast(celpy.Expression[Any], tree.children[0]), str(tree.children[1])
        arguments = _arguments(tree, 2)
        if name == "bind" and "cel" not in scope and _identifier(member) == "cel":
            variable = _identifier(arguments[0]) if len(arguments) == 3 else None
            if variable is None:
                raise _Unsupported("cel.bind needs (name, value, expression)")
            _check(arguments[1], scope)
            _check(arguments[2], scope | {variable})
            return
        if name in MACROS:
            variable = _identifier(arguments[0]) if len(arguments) == 2 else None
            if variable is None:
                raise _Unsupported(f"macro {name}() needs (name, expression)")
            _check(member, scope)
            _check(arguments[1], scope | {variable})
            return
        _check(member, scope)  # left to right: the receiver's own faults are named first
        if name not in METHODS:
            raise _Unsupported(f"method .{name}()")
        for argument in arguments:
            _check(argument, scope)
        return
    for child in tree.children:
        if isinstance(child, celpy.Expression):
            _check(child, scope)


_SIMPLE_STRING = re.compile("'([^'\\\\\\n]*)'|\"([^\"\\\\\\n]*)\"")


def _device_reads(tree: celpy.Expression[Any]) -> DeviceReads | None:
    """What ``tree`` (a checked selector) reads of ``device`` (``DeviceReads``), or None."""
    found: list[tuple[str, str, str]] = []
    return _read_summary(found) if _collect_reads(tree, frozenset(), found) else None


def _read_summary(found: list[tuple[str, str, str]]) -> DeviceReads:
    return DeviceReads(
        driver=any(kind == "driver" for kind, _, _ in found),
        allow_multiple=any(kind == "allowMultipleAllocations" for kind, _, _ in found),
        attributes=frozenset((domain, id) for kind, domain, id in found if kind == "attributes"),
        capacity=frozenset((domain, id) for kind, domain, id in found if kind == "capacity"),
    )


def _collect_reads(tree: celpy.Expression[Any], scope: frozenset[str], found: list[tuple[str, str, str]]) -> bool:
    """Add each fixed read of ``device`` in ``tree`` to ``found``; False when ``device`` is read otherwise.
    ``scope`` holds macro and bind variables, which may shadow ``device`` (as in ``_check``)."""
    if tree.data == "ident":
        return str(tree.children[0]) != "device" or "device" in scope
    if "device" not in scope:
        read = _fixed_read(tree)
        if read is not None:
            found.append(read)
            return True
    if tree.data == "member_dot_arg":
        member, name = cast(celpy.Expression[Any], tree.children[0]), str(tree.children[1])
        arguments = _arguments(tree, 2)
        if name == "bind" and _identifier(member) == "cel" and len(arguments) == 3:
            variable = _identifier(arguments[0]) or ""
            return _collect_reads(arguments[1], scope, found) and _collect_reads(
                arguments[2], scope | {variable}, found
            )
        if name in MACROS and len(arguments) == 2:
            variable = _identifier(arguments[0]) or ""
            return _collect_reads(member, scope, found) and _collect_reads(arguments[1], scope | {variable}, found)
    return all(_collect_reads(child, scope, found) for child in tree.children if isinstance(child, celpy.Expression))


def _fixed_read(tree: celpy.Expression[Any]) -> tuple[str, str, str] | None:
    """``(field, domain, id)`` when ``tree`` is ``device.driver``, ``device.allowMultipleAllocations``, or an
    attribute or capacity named by literals (``device.attributes['d'].id``, ``device.attributes['d']['id']``)."""
    if tree.data == "member_dot":
        member, selected = cast(celpy.Expression[Any], tree.children[0]), str(tree.children[1])
        if _identifier(member) == "device":
            return (selected, "", "") if selected in ("driver", "allowMultipleAllocations") else None
        inner = _unwrapped(member)
        return _named(inner, selected) if inner.data == "member_index" else None
    if tree.data == "member_index":
        inner = _unwrapped(cast(celpy.Expression[Any], tree.children[0]))
        key = _string_literal(cast(celpy.Expression[Any], tree.children[1]))
        return _named(inner, key) if inner.data == "member_index" and key is not None else None
    return None


def _named(index: celpy.Expression[Any], id: str) -> tuple[str, str, str] | None:
    """``device.attributes['domain']`` (or ``capacity``) indexed by ``id``."""
    base = _unwrapped(cast(celpy.Expression[Any], index.children[0]))
    if base.data != "member_dot":
        return None
    member, selected = cast(celpy.Expression[Any], base.children[0]), str(base.children[1])
    domain = _string_literal(cast(celpy.Expression[Any], index.children[1]))
    if _identifier(member) != "device" or selected not in ("attributes", "capacity") or domain is None:
        return None
    return (selected, domain, id)


def _string_literal(tree: celpy.Expression[Any]) -> str | None:
    """The value of a plain quoted string literal (no escapes, prefixes or triple quotes); else None."""
    node = _unwrapped(tree)
    if node.data != "literal":
        return None
    match = _SIMPLE_STRING.fullmatch(str(node.children[0]))
    return None if match is None else (match.group(1) if match.group(1) is not None else match.group(2))


class _Evaluator(Evaluator):
    """cel-python's interpreter plus the ``cel.bind(name, value, body)`` macro (cel-go ext.Bindings), with the
    comprehension macros ranging over lists and maps only.

    The value is evaluated before the body (cel-go evaluates it lazily, so an erroring value the body
    never reads is an error here but not upstream)."""

    def sub_evaluator(self, ast: celpy.Expression[Any]) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def member_dot_arg(self, tree: celpy.Expression[Any]) -> Any:
        member, name = cast(celpy.Expression[Any], tree.children[0]), str(tree.children[1])
        if name in MACROS:
            # cel-python iterates over anything Python can (a string's characters); CEL ranges over lists and
            # maps only (cel-go interpreter: "got 'types.String', expected iterable type").
            receiver = self.visit(member)
            if isinstance(receiver, CELEvalError):
                return receiver
            if not isinstance(receiver, ct.ListType | ct.MapType | list | dict):
                return CELEvalError(f"{name}(): got '{_cel_type_name(receiver)}', expected iterable type")
        if name != "bind" or _identifier(member) != "cel":
            return super().member_dot_arg(tree)
        variable_tree, value_tree, body_tree = _arguments(tree, 2)
        value = self.visit(value_tree)
        if isinstance(value, CELEvalError):
            return value
        try:
            return self.sub_evaluator(body_tree).evaluate({cast(str, _identifier(variable_tree)): value})
        except CELEvalError as error:
            return error


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


@functools.cache
def _environment() -> celpy.Environment:
    # Built on first use: creating one raises the interpreter's recursion limit (cel-python does that).
    return celpy.Environment(runner_class=_Runner)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _runtime_reason(error: CELEvalError) -> str:
    reason = str(error.args[0]) if error.args else "evaluation failed"
    # cel-python words a missing key reached by field selection differently from one reached by index.
    reason = reason.replace("no such member in mapping", "no such key")
    if len(error.args) >= 3 and isinstance(error.args[2], tuple) and error.args[2]:
        reason += ": " + ", ".join(repr(detail) if isinstance(detail, str) else str(detail) for detail in error.args[2])
    return _one_line(reason)


@dataclass(frozen=True)
class DeviceReads:
    """What a selector reads of the device, when it reads only fixed fields: ``device.driver``,
    ``device.allowMultipleAllocations``, and attributes and capacities named by literal strings
    (``device.attributes['gpu.nvidia.com'].productName``, ``device.capacity['d']['memory']``, inside
    ``has()`` too). Two devices equal on these give the selector the same answer."""

    driver: bool = False
    allow_multiple: bool = False
    attributes: frozenset[tuple[str, str]] = frozenset()  # (domain, id)
    capacity: frozenset[tuple[str, str]] = frozenset()

    def union(self, other: DeviceReads) -> DeviceReads:
        return DeviceReads(
            self.driver or other.driver,
            self.allow_multiple or other.allow_multiple,
            self.attributes | other.attributes,
            self.capacity | other.capacity,
        )


@dataclass(frozen=True, eq=False)
class CompiledSelector:
    """One checked, compiled selector expression; ``matches`` evaluates it for a device. ``reads`` is what
    it reads of the device (``DeviceReads``), None when it reads it in another way (a whole attribute map,
    a computed key): then only the whole device says what it answers."""

    expression: str
    _program: celpy.Runner = field(repr=False)
    reads: DeviceReads | None = None

    def matches(self, device: SelectorDevice) -> bool:
        """True or False for ``device``; a ``SelectorError`` when the expression cannot decide."""
        return self._decide(_device_activation(self.expression, device))

    def _decide(self, activation: dict[str, Any]) -> bool:
        try:
            result = self._program.evaluate(activation)
        except CELEvalError as error:
            raise SelectorError(self.expression, SelectorOutcome.RUNTIME_ERROR, _runtime_reason(error)) from None
        except RecursionError:
            reason = "nested too deeply to evaluate"
            raise SelectorError(self.expression, SelectorOutcome.RUNTIME_ERROR, reason) from None
        except Exception as error:  # a cel-python fault must not escape as a raw exception
            reason = _one_line(f"{type(error).__name__}: {error}")
            raise SelectorError(self.expression, SelectorOutcome.RUNTIME_ERROR, reason) from None
        if _cel_type_name(result) != "bool":
            reason = f"the result is {_cel_type_name(result)}, a selector must be a bool"
            raise SelectorError(self.expression, SelectorOutcome.NOT_BOOL, reason)
        return bool(result)


def _device_activation(expression: str, device: SelectorDevice) -> dict[str, Any]:
    try:
        return {"device": _cel_device(device)}
    except _ValueError as error:  # the device, not the selector, is bad; upstream never sees such a device
        raise SelectorError(expression, SelectorOutcome.RUNTIME_ERROR, f"device: {error}") from None


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """The compiled program for ``expression``, cached by its text; ``SelectorError`` (INVALID) when it
    is too long, does not parse, or uses something outside the implemented surface."""
    if len(expression.encode()) > MAX_EXPRESSION_BYTES:
        reason = f"longer than {MAX_EXPRESSION_BYTES} bytes"
        raise SelectorError(expression, SelectorOutcome.INVALID, reason)
    environment = _environment()
    try:
        ast = environment.compile(expression)
        if (depth := _depth(ast)) > MAX_TREE_DEPTH:
            raise _Unsupported(f"nesting {depth} levels deep (this evaluator stops at {MAX_TREE_DEPTH})")
        _check(ast, frozenset())
        program = environment.program(ast, functions=_FUNCTIONS)
        reads = _device_reads(ast)
    except _Unsupported as error:
        raise SelectorError(expression, SelectorOutcome.INVALID, f"unsupported: {error}") from None
    except CELParseError as error:
        raise SelectorError(expression, SelectorOutcome.INVALID, _one_line(f"syntax error: {error}")) from None
    except RecursionError:
        raise SelectorError(expression, SelectorOutcome.INVALID, "nested too deeply to compile") from None
    except Exception as error:  # a cel-python fault must not escape as a raw exception
        reason = _one_line(f"{type(error).__name__}: {error}")
        raise SelectorError(expression, SelectorOutcome.INVALID, reason) from None
    return CompiledSelector(expression, program, reads)


def selectors_match(expressions: Iterable[str], device: SelectorDevice) -> bool:
    """Whether every selector is true for ``device``, in order, stopping at the first false one (the
    allocator passes the DeviceClass selectors first, then the request's). All are compiled first, so an
    invalid one is reported even when an earlier one is false."""
    compiled = [compile_selector(expression) for expression in expressions]
    if not compiled:
        return True
    activation = _device_activation(compiled[0].expression, device)
    return all(selector._decide(activation) for selector in compiled)
