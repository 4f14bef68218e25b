"""The feasibility rules and the depth-first search that ``first_fit`` and ``best_fit`` share.

A port of DRA-lib's structured allocator as kube-scheduler 1.37 runs it with its default feature gates
(``structured/internal/incubating``: ``Allocate``, ``allocateOne``, ``allocateDevice``) for one pod's claims
on one node; tests/upstream/test_oracle_dra.py checks it against that code. Claims are visited in the given order,
requests in spec order, and each request's devices one slot at a time. For every slot the node's devices
are tried in search order (complete pools by driver and pool name, slices by name, devices as published,
as incubating sorts them), and a device is kept when, in this order:

1. no claim holds it (``status.allocation``), it is not in flight, and this search has not taken it;
2. every DeviceClass selector and then every request selector is true (a ``SelectorError`` aborts the
   whole search with that error as the reason, never a silent miss);
3. each of its NoSchedule/NoExecute taints is tolerated by the request;
4. it shares no silicon with a held, in-flight or already chosen device (``footprints.conflicts``),
   and, when it draws shared counters, no counter of its pool is overdrawn with it;
5. every constraint of its claim that covers the request still holds: ``matchAttribute`` (the first
   covered device fixes the value; a device without the attribute is refused) and ``distinctAttribute``
   (pairwise different values).

``All`` takes every selectable device of the node, pool by pool (an error when it reaches a pool the
node would use that is incomplete or invalid; no solution when one of them is taken, conflicts or is not
tolerated; an error when a constraint refuses one of them). ``firstAvailable`` alternatives are tried in
order, the first that leads to a complete solution wins, and results name it ``<request>/<subrequest>``.
A claim never gets more than 32 results (``AllocationResultsMaxSize``).

The search gives up with an error after ``MAX_DEVICE_TRIES`` device tries (backtracking is exponential
in the worst case; upstream is bounded by the scheduling cycle's deadline instead).

``solutions`` yields every complete solution in the order the search meets them. With
``combinations=True`` (first fit and best fit) a request's later slots only look past the device of its
previous slot, as incubating's ``startLocation`` does, so every set of devices is met once; with
``combinations=False`` the devices of one request are tried as permutations, as the older *stable*
implementation does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from placement.core.dra.cel import (
    AttributeValue,
    DeviceReads,
    SelectorDevice,
    SelectorError,
    Semver,
    compile_selector,
    selectors_match,
)
from placement.core.dra.claims import (
    AllocationMode,
    DeviceClass,
    DeviceRequest,
    ExactRequest,
    ResourceClaim,
    allocated_devices,
    taint_tolerated,
)
from placement.core.dra.device_types import Attribute, Device, Scalar, Version
from placement.core.dra.footprints import Footprint, conflicts, footprint, overdrawn_counters
from placement.core.dra.pools import DeviceRef, Pool, PoolDevice, PoolStatus, node_devices

MAX_RESULTS_PER_CLAIM = 32  # resource.k8s.io AllocationResultsMaxSize
# Devices tried before the search gives up: a backtracking search over n devices is n!/(n-k)! in the worst
# case. Upstream bounds it by the scheduling cycle's context instead; a pure function needs a count.
_KEPT_SELECTIONS = 65_536  # (selectors, device) answers kept: a cluster's devices times its classes
MAX_DEVICE_TRIES = 200_000


class AllocationError(Exception):
    """The search cannot go on: a bad claim or class, a selector error, an unusable pool for ``All``."""


@dataclass(frozen=True)
class Inventory:
    """What the search sees on one node: candidate devices in search order, and what is already used."""

    node_name: str
    devices: tuple[PoolDevice, ...]
    unusable_pools: tuple[Pool, ...]  # pools the node would use that are incomplete or invalid
    taken: frozenset[DeviceRef]  # held by some claim's status.allocation, or in flight
    taken_footprints: tuple[Footprint, ...]  # of the taken devices the pools still publish
    footprints: Mapping[DeviceRef, Footprint]  # of every candidate device


def node_inventory(
    pools: Sequence[Pool],
    node_name: str,
    node_labels: Mapping[str, str],
    *,
    claims: Iterable[ResourceClaim] = (),
    in_flight: Iterable[DeviceRef] = (),
) -> Inventory:
    """The node's candidate devices (complete pools only) and what ``claims`` hold plus ``in_flight``."""
    usable = node_devices(pools, node_name, node_labels)
    counter_sets = {(p.driver, p.name): p.counter_sets for p in pools}
    everywhere = {e.ref: e for p in pools for e in p.devices}
    taken = allocated_devices(claims) | frozenset(in_flight)
    taken_footprints = tuple(
        footprint(everywhere[ref], counter_sets[(ref.driver, ref.pool)])
        for ref in sorted(taken, key=str)
        if ref in everywhere
    )
    return Inventory(
        node_name=node_name,
        devices=usable.devices,
        unusable_pools=usable.unusable_pools,
        taken=taken,
        taken_footprints=taken_footprints,
        footprints={e.ref: footprint(e, counter_sets[(e.ref.driver, e.ref.pool)]) for e in usable.devices},
    )


@dataclass(frozen=True)
class ChosenDevice:
    """One device of a solution: the result's request name, the device, and the request it serves."""

    request: str  # "<request>" or "<request>/<subrequest>"
    device: PoolDevice
    spec: ExactRequest


@dataclass(frozen=True)
class ClaimSolution:
    """The devices chosen for one claim, and the DeviceClass each request used (for configs)."""

    claim: ResourceClaim
    devices: tuple[ChosenDevice, ...]
    request_classes: tuple[DeviceClass, ...]  # per request in spec order: the chosen alternative's class
    chosen_subrequests: tuple[str | None, ...]  # per request: the chosen alternative's name, or None


@dataclass(frozen=True)
class Option:
    result_name: str  # what results call it
    request_name: str
    subrequest_name: str
    spec: ExactRequest
    device_class: DeviceClass
    all_devices: tuple[PoolDevice, ...]  # All mode only: every selectable device

    @property
    def count(self) -> int:
        return len(self.all_devices) if self.spec.allocation_mode is AllocationMode.ALL else self.spec.count


def selector_device(entry: PoolDevice) -> SelectorDevice:
    """A device as its CEL selectors see it (``cel.SelectorDevice``)."""
    return _selector_device(entry.slice.driver, entry.device)


def _selector_device(driver: str, device: Device) -> SelectorDevice:
    attributes: dict[str, dict[str, AttributeValue]] = {}
    for name, attribute in device.attributes:
        attributes.setdefault(name.domain, {})[name.id] = _selector_value(attribute)
    capacity: dict[str, dict[str, int | str]] = {}
    for name, quantity in device.capacity:
        capacity.setdefault(name.domain, {})[name.id] = quantity.text or quantity.value
    return SelectorDevice(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=device.allow_multiple_allocations,
    )


def _selectors_keep(selectors: tuple[str, ...], driver: str, device: Device) -> bool:
    """``selectors_match`` for a device, kept across decisions. The answer depends only on the expressions
    and what they read of the device: where every selector reads fixed fields only (``cel.DeviceReads``),
    devices equal on those share one answer (a cluster's GPUs of one model differ only in UUIDs and bus
    ids, which a class's selectors rarely read); otherwise the whole device (a frozen value: a republished
    device with other attributes is another key) and the driver are the key. An error is not kept: it is
    raised again each time."""
    reads = _selectors_read(selectors)
    key = (selectors, driver, device) if reads is None else (selectors, _read_values(reads, driver, device))
    known = _KEPT_ANSWERS.get(key)
    if known is None:
        known = selectors_match(selectors, _selector_device(driver, device))
        if len(_KEPT_ANSWERS) >= _KEPT_SELECTIONS:
            _KEPT_ANSWERS.clear()
        _KEPT_ANSWERS[key] = known
    return known


_KEPT_ANSWERS: dict[object, bool] = {}
_ABSENT = object()  # an attribute or capacity the device does not have (``has()`` tells it apart)


@functools.lru_cache(maxsize=1024)
def _selectors_read(selectors: tuple[str, ...]) -> DeviceReads | None:
    """What the selectors read together, None when one of them reads the device otherwise."""
    reads = DeviceReads()
    for expression in selectors:
        read = compile_selector(expression).reads
        if read is None:
            return None
        reads = reads.union(read)
    return reads


def _read_values(reads: DeviceReads, driver: str, device: Device) -> tuple[object, ...]:
    attributes = tuple(device.attribute(domain, id) or _ABSENT for domain, id in sorted(reads.attributes))
    capacity = tuple(device.capacity_of(domain, id) or _ABSENT for domain, id in sorted(reads.capacity))
    return (
        driver if reads.driver else None,
        device.allow_multiple_allocations if reads.allow_multiple else None,
        attributes,
        capacity,
    )


def _selector_value(attribute: Attribute) -> AttributeValue:
    if isinstance(attribute.value, tuple):
        return tuple(_selector_scalar(v) for v in attribute.value)
    return _selector_scalar(attribute.value)


def _selector_scalar(value: Scalar) -> int | bool | str | Semver:
    if isinstance(value, Version):
        pre = tuple(value.prerelease.split(".")) if value.prerelease else ()
        build = tuple(value.build.split(".")) if value.build else ()
        return Semver(value.major, value.minor, value.patch, pre, build)
    return value


class Search:
    """One allocation attempt for one pod's claims on one node; ``solutions()`` enumerates them."""

    def __init__(
        self,
        claims: Sequence[ResourceClaim],
        classes: Mapping[str, DeviceClass],
        inventory: Inventory,
        *,
        combinations: bool = False,
        max_tries: int = MAX_DEVICE_TRIES,
    ) -> None:
        self.claims = tuple(claims)
        self.max_tries = max_tries
        self.tries = 0
        self.classes = classes
        self.inventory = inventory
        self.combinations = combinations
        self._selectable: dict[tuple[int, int, int, DeviceRef], bool] = {}
        self._chosen: list[list[ChosenDevice]] = [[] for _ in self.claims]
        self._chosen_refs: set[DeviceRef] = set()
        self._subrequests: list[list[str | None]] = [[None] * len(c.spec.requests) for c in self.claims]
        self._classes_used: list[list[DeviceClass | None]] = [[None] * len(c.spec.requests) for c in self.claims]
        self._options = [self._claim_options(i, claim) for i, claim in enumerate(self.claims)]

    # --- checks done once, before searching (upstream's Allocate) ---

    def _claim_options(self, claim_index: int, claim: ResourceClaim) -> list[list[Option]]:
        options = [self._request_options(claim_index, r_index, r) for r_index, r in enumerate(claim.spec.requests)]
        fewest = sum(min(o.count for o in alternatives) for alternatives in options)
        if fewest > MAX_RESULTS_PER_CLAIM:
            raise AllocationError(
                f"claim {claim.namespace}/{claim.name}: number of requested devices {fewest} exceeds the claim limit of"
                f" {MAX_RESULTS_PER_CLAIM}"
            )
        return options

    def _request_options(self, claim_index: int, request_index: int, request: DeviceRequest) -> list[Option]:
        claim = self.claims[claim_index]
        if request.exactly is not None:
            alternatives = [("", request.exactly)]
        else:
            alternatives = [(sub.name, sub.spec) for sub in request.first_available]
        options = []
        for sub_index, (sub_name, spec) in enumerate(alternatives):
            shown = f"{request.name}/{sub_name}" if sub_name else request.name
            where = f"claim {claim.namespace}/{claim.name}, request {shown}"
            if spec.admin_access:
                raise AllocationError(f"{where}: admin access is not supported by this scheduler")
            if spec.capacity_requests:
                raise AllocationError(f"{where}: capacity requests (consumable capacity) are not supported")
            device_class = self.classes.get(spec.device_class_name)
            if device_class is None:
                raise AllocationError(f"{where}: device class {spec.device_class_name} does not exist")
            option = Option(shown, request.name, sub_name, spec, device_class, ())
            if spec.allocation_mode is AllocationMode.ALL:
                option = self._with_all_devices(option, where, (claim_index, request_index, sub_index))
            options.append(option)
        return options

    def _with_all_devices(self, option: Option, where: str, key: tuple[int, int, int]) -> Option:
        # Pool by pool in (driver, name) order, as DRA-lib's validateDeviceRequest walks them: an unusable
        # pool is an error when reached, after the selectors of the pools before it have run.
        unusable = {(p.driver, p.name): p for p in self.inventory.unusable_pools}
        usable: dict[tuple[str, str], list[PoolDevice]] = {}
        for entry in self.inventory.devices:
            usable.setdefault((entry.ref.driver, entry.ref.pool), []).append(entry)
        chosen: list[PoolDevice] = []
        for pool_id in sorted(unusable.keys() | usable.keys()):
            pool = unusable.get(pool_id)
            if pool is not None:
                state = "is currently being updated" if pool.status is PoolStatus.INCOMPLETE else "is currently invalid"
                raise AllocationError(
                    f"{where}: asks for all devices, but resource pool {pool.driver}/{pool.name} {state}"
                )
            chosen.extend(e for e in usable[pool_id] if self._is_selectable(key, option, e))
        return replace(option, all_devices=tuple(chosen))

    # --- the search ---

    def solutions(self) -> Iterator[tuple[ClaimSolution, ...]]:
        """Every complete solution, in the order the search meets them."""
        yield from self._claim(0)

    def _claim(self, claim_index: int) -> Iterator[tuple[ClaimSolution, ...]]:
        if claim_index == len(self.claims):
            yield self._snapshot()
            return
        yield from self._request(claim_index, 0)

    def _request(self, claim_index: int, request_index: int) -> Iterator[tuple[ClaimSolution, ...]]:
        if request_index == len(self._options[claim_index]):
            yield from self._claim(claim_index + 1)
            return
        for sub_index, option in enumerate(self._options[claim_index][request_index]):
            self._subrequests[claim_index][request_index] = option.subrequest_name or None
            self._classes_used[claim_index][request_index] = option.device_class
            found = False
            for solution in self._slot((claim_index, request_index, sub_index), option, 0, 0):
                found = True
                yield solution
            if found:  # the first alternative that leads to a solution is the one used
                return

    def _slot(
        self, key: tuple[int, int, int], option: Option, slot: int, start: int
    ) -> Iterator[tuple[ClaimSolution, ...]]:
        claim_index, request_index, _ = key
        if option.spec.allocation_mode is AllocationMode.ALL and not option.all_devices:
            return  # at least one device is required
        if slot >= option.count:
            yield from self._request(claim_index, request_index + 1)
            return
        if len(self._chosen[claim_index]) + option.count - slot > MAX_RESULTS_PER_CLAIM:
            return
        if option.spec.allocation_mode is AllocationMode.ALL:
            entry = option.all_devices[slot]
            if not self._usable(entry, option) or not self._fits(claim_index, option, entry, must=True):
                return  # every one of them is needed
            yield from self._taking(key, option, slot, 0, entry)
            return
        candidates = self.inventory.devices
        for position in range(start if self.combinations else 0, len(candidates)):
            entry = candidates[position]
            self.tries += 1
            if self.tries > self.max_tries:
                raise AllocationError(
                    f"node {self.inventory.node_name}: search stopped after {self.max_tries} device tries"
                )
            if entry.ref in self._chosen_refs or entry.ref in self.inventory.taken:
                continue  # the cheap check first, as upstream
            if not self._is_selectable(key, option, entry):
                continue
            if not self._usable(entry, option) or not self._fits(claim_index, option, entry, must=False):
                continue
            yield from self._taking(key, option, slot, position + 1, entry)

    def _taking(
        self, key: tuple[int, int, int], option: Option, slot: int, start: int, entry: PoolDevice
    ) -> Iterator[tuple[ClaimSolution, ...]]:
        chosen = self._chosen[key[0]]
        chosen.append(ChosenDevice(option.result_name, entry, option.spec))
        self._chosen_refs.add(entry.ref)
        try:
            yield from self._slot(key, option, slot + 1, start)
        finally:
            chosen.pop()
            self._chosen_refs.discard(entry.ref)

    # --- per device ---

    def request_options(self, claim_index: int) -> list[list[Option]]:
        """Per request of the claim, its alternatives (one unless ``firstAvailable``)."""
        return self._options[claim_index]

    def selectable(self, key: tuple[int, int, int], entry: PoolDevice) -> bool:
        """Whether the selectors of alternative ``key`` (claim, request, alternative) keep ``entry``."""
        claim_index, request_index, sub_index = key
        return self._is_selectable(key, self._options[claim_index][request_index][sub_index], entry)

    def _is_selectable(self, key: tuple[int, int, int], option: Option, entry: PoolDevice) -> bool:
        cache_key = (*key, entry.ref)
        known = self._selectable.get(cache_key)
        if known is not None:
            return known
        try:
            selectors = (*option.device_class.selectors, *option.spec.selectors)
            known = _selectors_keep(selectors, entry.slice.driver, entry.device)
        except SelectorError as error:
            claim = self.claims[key[0]]
            raise AllocationError(
                f"claim {claim.namespace}/{claim.name}, request {option.result_name}: device {entry.ref}: {error}"
            ) from error
        self._selectable[cache_key] = known
        return known

    def _usable(self, entry: PoolDevice, option: Option) -> bool:
        """Not taken, no untolerated taint, no silicon or counter shared with what is held or chosen."""
        if entry.ref in self._chosen_refs or entry.ref in self.inventory.taken:
            return False
        if not all(taint_tolerated(t, option.spec.tolerations) for t in entry.device.taints):
            return False
        mine = self.inventory.footprints[entry.ref]
        others = [*self.inventory.taken_footprints, *(self.inventory.footprints[r] for r in self._chosen_refs)]
        if any(conflicts(mine, other) for other in others):
            return False
        if not mine.counters:
            return True
        # As DRA-lib's checkAvailableCounters: with this device, no counter of its pool may be overdrawn,
        # not even one it does not draw on (allocated devices may have overdrawn one already).
        pool = (mine.device.driver, mine.device.pool)
        return not any((k.driver, k.pool) == pool for k in overdrawn_counters([*others, mine]))

    def _fits(self, claim_index: int, option: Option, entry: PoolDevice, *, must: bool) -> bool:
        """Whether every constraint of the claim that covers this request still holds with ``entry``."""
        claim = self.claims[claim_index]
        for number, constraint in enumerate(claim.spec.constraints):
            if constraint.requests and not _covers(constraint.requests, option):
                continue
            name = constraint.match_attribute or constraint.distinct_attribute
            assert name is not None  # the parser guarantees one of them
            value = entry.device.attribute(name.domain, name.id)
            peers = [
                c.device.device.attribute(name.domain, name.id)
                for c in self._chosen[claim_index]
                if not constraint.requests or _covers_name(constraint.requests, c.request)
            ]
            if constraint.match_attribute is not None:
                holds = value is not None and all(p == value for p in peers[:1])
            else:
                holds = value is not None and all(p != value for p in peers)
            if not holds:
                if must:
                    raise AllocationError(
                        f"claim {claim.namespace}/{claim.name}, request {option.result_name}: cannot add device"
                        f" {entry.ref} because claim constraint #{number} ({name}) would not be satisfied"
                    )
                return False
        return True

    def _snapshot(self) -> tuple[ClaimSolution, ...]:
        return tuple(
            ClaimSolution(
                claim=claim,
                devices=tuple(self._chosen[i]),
                request_classes=tuple(c for c in self._classes_used[i] if c is not None),
                chosen_subrequests=tuple(self._subrequests[i]),
            )
            for i, claim in enumerate(self.claims)
        )


def _covers(requests: tuple[str, ...], option: Option) -> bool:
    """A constraint names a request, or (for an alternative) the request or ``<request>/<subrequest>``."""
    return option.request_name in requests or (bool(option.subrequest_name) and option.result_name in requests)


def _covers_name(requests: tuple[str, ...], result_name: str) -> bool:
    return result_name in requests or result_name.partition("/")[0] in requests
