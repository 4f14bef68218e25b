"""The pod-set fingerprint of github.com/k8stopologyawareschedwg/podfingerprint (version ``v001``).

The scheduler-plugins NodeResourceTopology cache compares this value, published in the NRT object,
with the fingerprint of the pods it believes run on the node: it must be bit-for-bit what the Go
library computes. That library hashes each pod as XXH64(name, seed=XXH64(namespace)), sorts the
64-bit hashes, feeds them little-endian into one more XXH64 and prints ``pfp0`` + ``v001`` + the
digest in big-endian hex. XXH64 is written out here because the model package stays free of
native dependencies and the fingerprint is computed once per publish, over at most a few hundred pods.
"""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = "pfp0"
VERSION = "v001"
ANNOTATION = "topology.node.k8s.io/fingerprint"
ATTRIBUTE = "nodeTopologyPodsFingerprint"
ATTRIBUTE_METHOD = "nodeTopologyPodsFingerprintMethod"

METHOD_ALL = "all"
METHOD_WITH_EXCLUSIVE_RESOURCES = "with-exclusive-resources"
METHOD_EXCLUDE_TERMINAL = "exclude-terminal"

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def pods_fingerprint(pods: Iterable[tuple[str, str]]) -> str:
    """The fingerprint of a set of ``(namespace, name)`` pairs; the order they come in does not matter."""
    hashes = sorted(xxh64(name.encode(), seed=xxh64(namespace.encode())) for namespace, name in pods)
    digest = xxh64(b"".join(value.to_bytes(8, "little") for value in hashes))
    return PREFIX + VERSION + digest.to_bytes(8, "big").hex()


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 of ``data`` (the reference algorithm, as OneOfOne/xxhash implements it)."""
    length = len(data)
    offset = 0
    if length >= 32:
        lanes = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK, (seed - _P1) & _MASK]
        while offset + 32 <= length:
            for lane in range(4):
                start = offset + 8 * lane
                lanes[lane] = _round(lanes[lane], int.from_bytes(data[start : start + 8], "little"))
            offset += 32
        acc = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _MASK
        for lane_value in lanes:
            acc = (((acc ^ _round(0, lane_value)) * _P1) + _P4) & _MASK
    else:
        acc = (seed + _P5) & _MASK
    acc = (acc + length) & _MASK
    while offset + 8 <= length:
        acc ^= _round(0, int.from_bytes(data[offset : offset + 8], "little"))
        acc = (_rotl(acc, 27) * _P1 + _P4) & _MASK
        offset += 8
    if offset + 4 <= length:
        acc ^= (int.from_bytes(data[offset : offset + 4], "little") * _P1) & _MASK
        acc = (_rotl(acc, 23) * _P2 + _P3) & _MASK
        offset += 4
    while offset < length:
        acc ^= (data[offset] * _P5) & _MASK
        acc = (_rotl(acc, 11) * _P1) & _MASK
        offset += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK
    acc ^= acc >> 32
    return acc


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK
