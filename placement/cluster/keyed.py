"""A reflector handler over objects by key: a list replaces the whole set, an event changes one object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from kubenexus.kube.client import Json

Key = TypeVar("Key", str, tuple[str, str])


class KeyedObjects(Generic[Key]):
    """A handler over objects by key (name, or namespace and name): ``replace`` turns a list into changes and
    removals."""

    def __init__(
        self, changed: Callable[[Key, Json], None], removed: Callable[[Key], None], key: Callable[[Json], Key]
    ) -> None:
        self._changed: Callable[[Key, Json], None] = changed
        self._removed: Callable[[Key], None] = removed
        self._key: Callable[[Json], Key] = key
        self._names: set[Key] = set()

    def replace(self, objects: list[Json]) -> None:
        seen = {self._key(obj): obj for obj in objects}
        for name in self._names - set(seen):
            self._removed(name)
        for name, obj in seen.items():
            self._changed(name, obj)
        self._names = set(seen)

    def apply(self, kind: str, obj: Json) -> None:
        name = self._key(obj)
        if kind == "DELETED":
            self._names.discard(name)
            self._removed(name)
        else:
            self._names.add(name)
            self._changed(name, obj)
