"""The heap settled once the cache syncs: what is alive is frozen out of the collector's passes."""

from __future__ import annotations

import gc

from placement.service.heap import settle_heap


def test_settling_freezes_what_is_alive_and_leaves_new_objects_collectable() -> None:
    gc.unfreeze()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        cycle: list[object] = []
        cycle.append(cycle)
        assert gc.is_tracked(cycle)
        del cycle
        assert gc.collect() >= 1  # made after the freeze: collected as ever
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
