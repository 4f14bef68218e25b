"""Which client identity made each reservation: ``Unreserve`` of another identity's reservation is refused unless
the caller is an admin (docs/api.md, the status codes)."""

from __future__ import annotations

from collections import OrderedDict


class Owners:
    """Which client identity made each reservation; the oldest are forgotten past ``limit`` entries.

    A forgotten reservation has long been bound or expired (single pods hold a reservation 30 s, gangs
    until they bind), so forgetting bounds the memory an endless stream of reservations could take.
    Call under the index lock.
    """

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._owner: OrderedDict[tuple[str, str], str] = OrderedDict()

    def record(self, key: tuple[str, str], caller: str) -> None:
        self._owner[key] = caller
        self._owner.move_to_end(key)
        while len(self._owner) > self._limit:
            self._owner.popitem(last=False)

    def owner_of(self, key: tuple[str, str]) -> str | None:
        return self._owner.get(key)

    def forget(self, key: tuple[str, str]) -> None:
        self._owner.pop(key, None)
