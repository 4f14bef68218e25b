"""The shims' directory of pod-group objects (the binder's and the extender's, one each): which gang APIs the
cluster serves, and what their objects ask.

Four sources define gangs with an object (``placement.core.gang_sources``), each read at the first of its
APIs the cluster serves::

    scheduling.k8s.io/v1beta1     podgroups    Kubernetes 1.37 (gate GenericWorkload, beta)
    scheduling.k8s.io/v1alpha3    podgroups    Kubernetes 1.37 (the same PodGroup, alpha)
    scheduling.k8s.io/v1alpha2    podgroups    Kubernetes 1.36 (gate GenericWorkload)
    scheduling.k8s.io/v1alpha1    workloads    Kubernetes 1.35 (gate GenericWorkload)
    scheduling.x-k8s.io/v1alpha1  podgroups    scheduler-plugins' CRD
    scheduling.volcano.sh/v1beta1 podgroups    Volcano's CRD

Which versions are served is asked once per API group, from its discovery document (``GET /apis/<group>``,
as ``placement.cluster.dra_feed`` picks the ``resource.k8s.io`` version): a source none of whose APIs the
cluster serves is skipped with one info log line, and a pod that names one of its groups is told so. A
discovery call that fails otherwise (connection refused, 5xx, 403) is retried with backoff; meanwhile that
group's sources wait ("not read yet"). The API each source is read at then gets a ``Reflector`` (list, then
watch) on its own thread. Serving an API later (or a newer version of one: a cluster upgraded from 1.36 to
1.37) takes a restart.

``definition(key)`` answers with the group's ``GroupDefinition``, or ``Unresolved``: why the group waits
(its object is missing, or not read yet) or cannot be placed (the object is invalid, its API is not served).
``current(key)`` is the object as last seen and the API it was read at, for the status write-back
(``group_status``).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS, describe
from kubenexus.kube.paths import (
    SCHEDULER_PLUGINS_GROUP,
    SCHEDULING_GROUP,
    VOLCANO_GROUP,
    api_group_path,
    collection_path,
)
from kubenexus.kube.reflector import Reflector
from placement.core.gang_sources import (
    DEFAULT_VOLCANO_TIERS,
    SOURCE_PODGROUP,
    SOURCE_SCHEDULER_PLUGINS,
    SOURCE_VOLCANO,
    SOURCE_WORKLOAD,
    GangSourceError,
    GroupDefinition,
    PodGroupKey,
    definition_for_replica,
    parse_native_pod_group,
    parse_scheduler_plugins_pod_group,
    parse_volcano_pod_group,
    parse_workload,
)

log = logging.getLogger("kubenexus.placement.binder")

ObjectKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class GroupApi:
    """One API whose objects define gangs."""

    source: str
    group: str
    version: str
    plural: str
    kind: str
    status_subresource: bool  # its status is written through ``/status`` (else through the object itself)

    @property
    def name(self) -> str:
        return f"{self.group}/{self.version} {self.plural}"


# Newest first: a source is read at the first of its APIs the cluster serves. Kubernetes 1.37 serves the
# native PodGroup at v1beta1 and v1alpha3 (both with /status: k8s.io/api scheduling/v1beta1 types.go,
# ``+k8s:supportsSubresource="/status"``), 1.36 at v1alpha2 only.
GROUP_APIS = (
    GroupApi(SOURCE_PODGROUP, SCHEDULING_GROUP, "v1beta1", "podgroups", "PodGroup", status_subresource=True),
    GroupApi(SOURCE_PODGROUP, SCHEDULING_GROUP, "v1alpha3", "podgroups", "PodGroup", status_subresource=True),
    GroupApi(SOURCE_PODGROUP, SCHEDULING_GROUP, "v1alpha2", "podgroups", "PodGroup", status_subresource=True),
    GroupApi(SOURCE_WORKLOAD, SCHEDULING_GROUP, "v1alpha1", "workloads", "Workload", status_subresource=False),
    GroupApi(
        SOURCE_SCHEDULER_PLUGINS,
        SCHEDULER_PLUGINS_GROUP,
        "v1alpha1",
        "podgroups",
        "PodGroup",
        status_subresource=True,  # config/crd/bases/scheduling.x-k8s.io_podgroups.yaml: subresources.status
    ),
    # Volcano's CRD declares no status subresource (installer/helm/chart/volcano/crd/bases/
    # scheduling.volcano.sh_podgroups.yaml: ``subresources: {}``); its scheduler updates the whole object.
    GroupApi(SOURCE_VOLCANO, VOLCANO_GROUP, "v1beta1", "podgroups", "PodGroup", status_subresource=False),
)
APIS_OF = {api.source: tuple(other for other in GROUP_APIS if other.source == api.source) for api in GROUP_APIS}


def apis_named(source: str) -> str:
    """A source's APIs as messages name them: ``scheduling.x-k8s.io/v1alpha1 podgroups``, or for a source
    read at one of several versions ``scheduling.k8s.io/v1beta1 (or v1alpha3, v1alpha2) podgroups``."""
    first, *others = APIS_OF[source]
    if not others:
        return first.name
    return f"{first.group}/{first.version} (or {', '.join(api.version for api in others)}) {first.plural}"


@dataclass(frozen=True)
class Unresolved:
    """Why a group has no definition now: ``warning`` when it will not resolve by waiting alone."""

    message: str
    warning: bool


@dataclass(frozen=True)
class Seen:
    """A group's object as last seen, and the API it was read at (where its status is written)."""

    api: GroupApi
    obj: Json


@dataclass(frozen=True)
class _Entry:
    obj: Json
    parsed: GroupDefinition | dict[str, GroupDefinition] | GangSourceError


class _Reading:
    """One source's state: discovered or not, the API it is read at (None: none served), and its objects by
    (namespace, name)."""

    def __init__(self) -> None:
        self.discovered = False
        self.api: GroupApi | None = None
        self.reflector: Reflector | None = None
        self.objects: dict[ObjectKey, _Entry] = {}


class GangDirectory:
    """Discovery, then one reflector per source at its API served; ``definition`` and ``current`` per group."""

    def __init__(
        self,
        api: KubeClient,
        *,
        stop: threading.Event,
        watch_timeout_s: float,
        backoff: Backoff | None = None,
        volcano_tiers: tuple[str, ...] = DEFAULT_VOLCANO_TIERS,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._api = api
        self._on_change = on_change  # told after every change of the objects: the binder's next pass
        self._stop = stop
        self._watch_timeout_s = watch_timeout_s
        self._backoff = backoff or Backoff()
        self._volcano_tiers = volcano_tiers
        self._lock = threading.Lock()
        self._readings = {source: _Reading() for source in APIS_OF}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        thread = threading.Thread(target=self.run, name="gang directory", daemon=True)
        thread.start()
        self.threads.append(thread)

    def run(self) -> None:
        """Discover each API group once, then start a reflector (each on its own thread) per source at the
        first of its APIs served."""
        for group in dict.fromkeys(api.group for api in GROUP_APIS):
            served = self._discover(group)
            if served is None:
                return  # stopping
            for source, apis in APIS_OF.items():
                if apis[0].group == group:
                    self._begin(source, next((api for api in apis if api.version in served), None))

    @property
    def synced(self) -> bool:
        """Every API discovered, and every served one listed and watched."""
        with self._lock:
            readings = list(self._readings.values())
        return all(r.discovered and (r.reflector is None or r.reflector.healthy) for r in readings)

    def definition(self, key: PodGroupKey) -> GroupDefinition | Unresolved:
        """The group's definition from its object, or why there is none now."""
        reading = self._readings[key.source]
        with self._lock:
            entry = reading.objects.get((key.namespace, key.name))
            discovered, api, reflector = reading.discovered, reading.api, reading.reflector
        if not discovered or (reflector is not None and not reflector.listed):
            return Unresolved(f"waiting for pod group {key}: {apis_named(key.source)} not read yet", warning=False)
        if api is None:
            return Unresolved(
                f"pod group {key} cannot be read: the cluster does not serve {apis_named(key.source)}", warning=True
            )
        if entry is None:
            return Unresolved(
                f"waiting for the {api.kind} object {key.namespace}/{key.name} ({key.source})", warning=False
            )
        parsed = entry.parsed
        if isinstance(parsed, GangSourceError):
            return Unresolved(str(parsed), warning=True)
        if isinstance(parsed, GroupDefinition):
            return parsed
        found = parsed.get(key.pod_group)
        if found is None:
            known = ", ".join(sorted(parsed)) or "none"
            return Unresolved(
                f"Workload {key.namespace}/{key.name} ({key.source}) has no pod group {key.pod_group!r} "
                f"(spec.podGroups: {known})",
                warning=True,
            )
        return definition_for_replica(found, key.replica_key) if key.replica_key else found

    def current(self, key: PodGroupKey) -> Seen | None:
        """The group's object as last seen and the API it was read at (None when unknown)."""
        reading = self._readings[key.source]
        with self._lock:
            entry = reading.objects.get((key.namespace, key.name))
            api = reading.api
        return None if entry is None or api is None else Seen(api, entry.obj)

    # --- discovery and reflecting ------------------------------------------------------------------------

    def _discover(self, group: str) -> set[str] | None:
        """The versions of ``group`` the cluster serves (empty when none); None when stopping."""
        failures = 0
        rng = random.Random()
        while not self._stop.is_set():
            try:
                document = self._api.get(api_group_path(group))
            except API_ERRORS as error:
                failures += 1
                delay = self._backoff.delay(failures, rng)
                log.warning(
                    "cannot discover a pod-group API; retrying",
                    extra={"group": group, "error": describe(error), "retry_in_s": round(delay, 2)},
                )
                self._stop.wait(delay)
                continue
            versions = (document or {}).get("versions") or []
            return {str(v.get("version")) for v in versions if isinstance(v, Mapping)}
        return None

    def _begin(self, source: str, api: GroupApi | None) -> None:
        reading = self._readings[source]
        if api is None:
            log.info(f"the cluster does not serve {apis_named(source)}: {source} pod groups are not read")
            with self._lock:
                reading.discovered = True
            return
        log.info("reading pod-group objects", extra={"api": api.name})
        reflector = Reflector(
            self._api,
            collection_path(api.group, api.version, api.plural),
            _Objects(self, api),
            stop=self._stop,
            watch_timeout_s=self._watch_timeout_s,
            backoff=self._backoff,
        )
        with self._lock:
            reading.api, reading.reflector, reading.discovered = api, reflector, True
        thread = threading.Thread(target=reflector.run, name=f"gang directory {api.name}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def _replace(self, api: GroupApi, objects: list[Json]) -> None:
        entries = {_namespaced(obj): self._entry(api, obj) for obj in objects}
        with self._lock:  # swapped whole: no moment in which a listed object seems missing
            self._readings[api.source].objects = entries
        self._changed()

    def _set(self, api: GroupApi, key: ObjectKey, obj: Json) -> None:
        entry = self._entry(api, obj)
        with self._lock:
            self._readings[api.source].objects[key] = entry
        self._changed()

    def _entry(self, api: GroupApi, obj: Json) -> _Entry:
        parse = self._parser(api.source)
        try:
            return _Entry(obj, parse(obj))
        except GangSourceError as error:
            log.warning(
                "cannot read a pod-group object", extra={"object": "/".join(_namespaced(obj)), "error": str(error)}
            )
            return _Entry(obj, error)

    def _remove(self, api: GroupApi, key: ObjectKey) -> None:
        with self._lock:
            self._readings[api.source].objects.pop(key, None)
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    def _parser(self, source: str) -> Callable[[Json], GroupDefinition | dict[str, GroupDefinition]]:
        if source == SOURCE_VOLCANO:
            return lambda obj: parse_volcano_pod_group(obj, tiers=self._volcano_tiers)
        if source == SOURCE_WORKLOAD:
            return parse_workload
        if source == SOURCE_PODGROUP:
            return parse_native_pod_group
        return parse_scheduler_plugins_pod_group


class _Objects:
    """The reflector's handler for one API: a list replaces its objects, an event changes one."""

    def __init__(self, directory: GangDirectory, api: GroupApi) -> None:
        self._directory = directory
        self._api = api

    def replace(self, objects: list[Json]) -> None:
        self._directory._replace(self._api, objects)

    def apply(self, kind: str, obj: Json) -> None:
        if kind == "DELETED":
            self._directory._remove(self._api, _namespaced(obj))
        else:
            self._directory._set(self._api, _namespaced(obj), obj)


def _namespaced(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
