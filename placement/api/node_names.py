"""Filter and Score requests with the bytes of their node-name field, the key of their candidate list.

``FilterRequest`` and ``ScoreRequest`` carry the pod in field 1 (``pod``) or 2 (``pod_json``) and the
candidates in field 3 (``node_names``). Serializers write fields in field-number order (protobuf's
implementations all do, Go's and upb's included), so the bytes after the leading pod field are the
node-name records: equal bytes, equal names. The engine keeps the list resolved to index slots by those
bytes (``placement.state.candidate_lists``), so a list sent again costs no Python work per name.

The key is only ever a suffix that starts on a record boundary after the first record, and only when that
record is a pod field: a suffix holds every node-name record in order, so equal suffixes mean equal
lists, whatever else they hold. A request laid out otherwise (names first) gets no key and is resolved name
by name, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

_POD_TAGS = frozenset((0x0A, 0x12))  # field 1 and field 2, wire type 2 (length-delimited)
_MAX_VARINT_BYTES = 10


Message = TypeVar("Message")


@dataclass(frozen=True, slots=True)
class KeyedRequest(Generic[Message]):
    """A parsed request and the key of its node-name list (None: resolve it name by name)."""

    message: Message
    names_key: bytes | None


def names_key(raw: bytes) -> bytes | None:
    """The node-name records of a serialized Filter or Score request that begins with its pod field."""
    if not raw or raw[0] not in _POD_TAGS:
        return None
    length, shift, position = 0, 0, 1
    while True:
        if position >= len(raw) or position > _MAX_VARINT_BYTES:
            return None
        byte = raw[position]
        length |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            break
        shift += 7
    end = position + length
    return raw[end:] if end <= len(raw) else None


def keyed_parser(parse: Callable[[bytes], Message]) -> Callable[[bytes], KeyedRequest[Message]]:
    """A gRPC request deserializer: ``parse`` (the message's ``FromString``) and the names key."""

    def parser(raw: bytes) -> KeyedRequest[Message]:
        return KeyedRequest(parse(raw), names_key(raw))

    return parser
