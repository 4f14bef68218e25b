"""The versioned, lossless JSON form of ``NodeTopology``.

Encoding walks the dataclasses; decoding is driven by the same type hints, so a field
added to the model is carried both ways without touching this module. The document
carries ``schema_version``; a document from a newer agent is refused with a clear error
rather than half-read.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from functools import cache
from typing import Any

from kubenexus.topology.model import SCHEMA_VERSION, NodeTopology


class TopologyDecodeError(ValueError):
    """The JSON document is not a NodeTopology this version understands."""


def to_dict(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_dict(item) for item in value]
    return value


def dumps(topology: NodeTopology, *, indent: int | None = None) -> str:
    return json.dumps(to_dict(topology), indent=indent, sort_keys=True, separators=None if indent else (",", ":"))


def loads(text: str | bytes) -> NodeTopology:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise TopologyDecodeError(f"not JSON: {error}") from None
    return from_dict(document)


def from_dict(document: Any) -> NodeTopology:
    if not isinstance(document, dict):
        raise TopologyDecodeError("a topology document must be a JSON object")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise TopologyDecodeError("schema_version is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise TopologyDecodeError(
            f"schema_version {version} is newer than this program understands ({SCHEMA_VERSION}); upgrade it"
        )
    result = _decode(NodeTopology, document, "topology")
    assert isinstance(result, NodeTopology)
    return result


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, value, where)
            except TopologyDecodeError as error:
                errors.append(str(error))
        raise TopologyDecodeError("; ".join(errors))
    if origin is tuple:
        if not isinstance(value, list):
            raise TopologyDecodeError(f"{where}: expected a list")
        item_hint = typing.get_args(hint)[0]
        return tuple(_decode(item_hint, item, f"{where}[{i}]") for i, item in enumerate(value))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _decode_dataclass(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in hint)
            raise TopologyDecodeError(f"{where}: {value!r} is not one of {allowed}") from None
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TopologyDecodeError(f"{where}: expected an integer, found {value!r}")
    if hint is bool or hint is str or hint is float:
        if isinstance(value, hint) or (hint is float and isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise TopologyDecodeError(f"{where}: expected {hint.__name__}, found {value!r}")
    raise TopologyDecodeError(f"{where}: unsupported type {hint!r}")


def _decode_dataclass(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise TopologyDecodeError(f"{where}: expected an object")
    hints = _hints(cls)
    arguments: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            arguments[f.name] = _decode(hints[f.name], value[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise TopologyDecodeError(f"{where}: missing field {f.name!r}")
    return cls(**arguments)
