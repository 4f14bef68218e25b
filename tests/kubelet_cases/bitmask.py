"""Tables from kubernetes/kubernetes ``pkg/kubelet/cm/topologymanager/bitmask/bitmask_test.go``
@ 05c351a9037bd79bf88c56171a951c3097b658da: TestAnd, TestOr, TestIsEmpty, TestIsSet, TestAnySet,
TestIsEqual, TestCount, TestGetBits, TestIsNarrowerThan, TestIterateBitMasks. Masks are written as id
lists; the Go test's expected strings ("10") are converted to id lists.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

AND: list[tuple[str, list[list[int]], list[int]]] = [
    ("Mask 11 AND mask 11", [[0, 1], [0, 1]], [0, 1]),
    ("Mask 11 AND mask 10", [[0, 1], [1]], [1]),
    ("Mask 01 AND mask 11", [[0], [0, 1]], [0]),
    ("Mask 11 AND mask 11 AND mask 10", [[0, 1], [0, 1], [1]], [1]),
    ("Mask 01 AND mask 01 AND mask 10 AND mask 11", [[0], [0], [1], [0, 1]], []),
    ("Mask 1111 AND mask 1110 AND mask 1100 AND mask 1000", [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]], [3]),
]
OR: list[tuple[str, list[list[int]], list[int]]] = [
    ("Mask 01 OR mask 00", [[0], []], [0]),
    ("Mask 10 OR mask 10", [[1], [1]], [1]),
    ("Mask 01 OR mask 10", [[0], [1]], [0, 1]),
    ("Mask 11 OR mask 11", [[0, 1], [0, 1]], [0, 1]),
    ("Mask 01 OR mask 10 OR mask 11", [[0], [1], [0, 1]], [0, 1]),
    ("Mask 1000 OR mask 0100 OR mask 0010 OR mask 0001", [[3], [2], [1], [0]], [0, 1, 2, 3]),
]
IS_EMPTY: list[tuple[str, list[int], bool]] = [
    ("Check if mask 00 is empty", [], True),
    ("Check if mask 01 is empty", [0], False),
    ("Check if mask 11 is empty", [0, 1], False),
]
IS_SET: list[tuple[str, list[int], int, bool]] = [
    ("Check if bit 0 in mask 00 is set", [], 0, False),
    ("Check if bit 0 in mask 01 is set", [0], 0, True),
    ("Check if bit 1 in mask 11 is set", [0, 1], 1, True),
    ("Check if bit outside range 0-63 is set", [0, 1], 64, False),
]
ANY_SET: list[tuple[str, list[int], list[int], bool]] = [
    ("Check if any bits from 11 in mask 00 is set", [], [0, 1], False),
    ("Check if any bits from 11 in mask 01 is set", [0], [0, 1], True),
    ("Check if any bits from 11 in mask 11 is set", [0, 1], [0, 1], True),
    ("Check if any bit outside range 0-63 is set", [0, 1], [64, 65], False),
    ("Check if any bits from 1001 in mask 0110 is set", [1, 2], [0, 3], False),
]
IS_EQUAL: list[tuple[str, list[int], list[int], bool]] = [
    ("Check if mask 00 equals mask 00", [], [], True),
    ("Check if mask 00 equals mask 01", [], [0], False),
    ("Check if mask 01 equals mask 01", [0], [0], True),
    ("Check if mask 01 equals mask 10", [0], [1], False),
    ("Check if mask 11 equals mask 11", [0, 1], [0, 1], True),
]
COUNT: list[tuple[str, list[int], int]] = [
    ("Count number of bits set in mask 00", [], 0),
    ("Count number of bits set in mask 01", [0], 1),
    ("Count number of bits set in mask 11", [0, 1], 2),
]
GET_BITS: list[tuple[str, list[int], list[int]]] = [
    ("Get bits of mask 00", [], []),
    ("Get bits of mask 01", [0], [0]),
    ("Get bits of mask 11", [0, 1], [0, 1]),
]
IS_NARROWER_THAN: list[tuple[str, list[int], list[int], bool]] = [
    ("Check narrowness of masks with unequal bits set 1/2", [0], [0, 1], True),
    ("Check narrowness of masks with unequal bits set 2/2", [0, 1], [0], False),
    ("Check narrowness of masks with equal bits set 1/2", [0], [1], True),
    ("Check narrowness of masks with equal bits set 2/2", [1], [0], False),
]
ITERATE_BIT_MASKS: list[tuple[str, int]] = [("1 bit", 1), ("2 bits", 2), ("4 bits", 4), ("8 bits", 8), ("16 bits", 16)]
