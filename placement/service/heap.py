"""The garbage collector settled for a long-lived service, once its cache is loaded.

CPython's cyclic collector walks every tracked object of a generation it collects. The cluster cache is
hundreds of thousands of long-lived objects (nodes, pods, their facts), and the churn of watch events keeps
promoting new objects, so every so often a full collection walks the whole cache while a decision waits:
tens of ms at 10,000 nodes, the tail of the latency figures. ``gc.freeze`` moves everything alive into a
permanent generation the collector never walks; what is allocated afterwards is collected as before.
Objects of the frozen set that die later are freed by reference counting as ever; only those that die in a
reference cycle are never reclaimed, which bounds what can stay by the heap at the freeze, once: not a leak
that grows.
"""

from __future__ import annotations

import gc


def settle_heap() -> None:
    """Collect once, then freeze what is left (call once the cache has synced)."""
    gc.collect()
    gc.freeze()
