"""Shorthand for writing hints the way the upstream tables read.
The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from placement.core.topology_manager import NumaMask, TopologyHint


def pref(*ids: int) -> TopologyHint:
    """``{NUMANodeAffinity: NewTestBitMask(ids...), Preferred: true}``"""
    return TopologyHint(NumaMask.of(*ids), True)


def nonpref(*ids: int) -> TopologyHint:
    return TopologyHint(NumaMask.of(*ids), False)


ANY_PREFERRED = TopologyHint(None, True)  # {nil, true}
ANY_NOT_PREFERRED = TopologyHint(None, False)  # {nil, false}
