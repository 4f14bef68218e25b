"""What the service knows of Dynamic Resource Allocation: ResourceSlices, DeviceClasses, ResourceClaims and
the devices its own reservations hold, with each node's inventory kept while nothing it depends on changes.

The feed writes the objects (decoded by ``placement.core.dra``); the index gives each node's agent topology
(``set_topology``); reservations ``hold`` the devices they chose until the claims' ``status.allocation``
shows them (the binder writes it before binding) or the reservation goes. Every method runs under the
index lock, which the caller passes in.

Per node an ``Inventory`` (``core.dra.search``) is built from the node's devices of complete pools and the
devices taken among them (by some claim's allocation, or held). It is kept under a key that changes when
the pools change, when a claim or hold touches a device of that node, or when the node's labels change
(a pool may select nodes by label): a decision over 1,000 nodes rebuilds only the nodes that changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from kubenexus.topology.model import NodeTopology
from placement.core.dra.best_fit import PreparedNode, prepare_node
from placement.core.dra.claims import Consumer, DeviceClass, ResourceClaim
from placement.core.dra.device_types import ResourceSlice
from placement.core.dra.footprints import footprint
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS, dra_gpus
from placement.core.dra.inferred import gpu_topology
from placement.core.dra.join import infer_topology
from placement.core.dra.pools import DeviceRef, Pool, PoolDevice, gather_pools, node_devices
from placement.core.dra.search import Inventory

PodKey = tuple[str, str]
_CHANGE_LOG = 100_000
ClaimKey = tuple[str, str]
_K = TypeVar("_K")


@dataclass(frozen=True)
class Hold:
    """Devices a reservation chose for one claim, not yet in the claim's ``status.allocation``."""

    claim: ClaimKey
    node: str
    devices: frozenset[DeviceRef]


class DraState:
    """The DRA objects and holds; read and written under ``lock`` (the index's)."""

    def __init__(self, lock: threading.RLock, *, gpu_drivers: Sequence[str] = NVIDIA_GPU_DRIVERS) -> None:
        self.lock = lock
        # The drivers whose devices are GPUs: joined to the agent's topology, scored by NVLink and NUMA.
        self.gpu_drivers = tuple(gpu_drivers)
        self.served = False  # the cluster serves resource.k8s.io: the feed lists its objects
        self._slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._claims: dict[ClaimKey, ResourceClaim] = {}
        self._owned: dict[tuple[str, str, str], ClaimKey] = {}  # (namespace, owner uid, pod claim) -> claim
        # What evicting a pod may free (``freed_by``): the claims reserved for it, and those it controls.
        self._reserved_for_pod: dict[PodKey, set[ClaimKey]] = {}
        self._controlled_by: dict[tuple[str, str], set[ClaimKey]] = {}  # (namespace, owner uid) -> claims
        self._holds: dict[PodKey, tuple[Hold, ...]] = {}
        self._topologies: dict[str, NodeTopology] = {}
        self._taken: dict[DeviceRef, int] = {}  # holders (claims' allocations and holds) per device
        self._pools: tuple[Pool, ...] = ()
        self._pools_stale = False
        self._ref_node: dict[DeviceRef, str | None] = {}  # the node of a node-local device; None otherwise
        self._pools_by_node: dict[str, list[Pool]] = {}  # pools whose every slice names one node
        self._pools_anywhere: list[Pool] = []  # the others (allNodes, node selectors, per-device selection)
        self.pools_version = 0
        self.classes_version = 0
        self._node_versions: dict[str, int] = {}
        self.shared_version = 0  # bumped for devices not local to one node
        # Every node change in order (``changed_since``): kept answers per slot are judged again only there.
        self._changed: list[str] = []
        self._prepared: dict[str, tuple[object, PreparedNode]] = {}
        self._inventories: dict[str, tuple[object, Inventory]] = {}
        self._inferred: dict[str, tuple[object, NodeTopology | None]] = {}  # GPU topology from the slices

    # --- the feed's writes --------------------------------------------------------------------------------

    def set_slice(self, name: str, resource_slice: ResourceSlice) -> None:
        with self.lock:
            if self._slices.get(name) != resource_slice:
                self._slices[name] = resource_slice
                self._pools_changed()

    def remove_slice(self, name: str) -> None:
        with self.lock:
            if self._slices.pop(name, None) is not None:
                self._pools_changed()

    def set_class(self, name: str, device_class: DeviceClass) -> None:
        with self.lock:
            if self._classes.get(name) != device_class:
                self._classes[name] = device_class
                self.classes_version += 1

    def remove_class(self, name: str) -> None:
        with self.lock:
            if self._classes.pop(name, None) is not None:
                self.classes_version += 1

    def set_claim(self, claim: ResourceClaim) -> None:
        key = (claim.namespace, claim.name)
        with self.lock:
            old = self._claims.get(key)
            if old == claim:
                return
            self._forget_claim(key)
            self._claims[key] = claim
            if claim.controller_uid and claim.pod_claim_name:
                self._owned[(claim.namespace, claim.controller_uid, claim.pod_claim_name)] = key
            for pod in _pod_consumers(claim):
                self._reserved_for_pod.setdefault(pod, set()).add(key)
            if claim.controller_uid:
                self._controlled_by.setdefault((claim.namespace, claim.controller_uid), set()).add(key)
            if claim.allocation is not None:
                self._take(d.ref for d in claim.allocation)
                self._settle_holds(key)

    def remove_claim(self, namespace: str, name: str) -> None:
        with self.lock:
            self._forget_claim((namespace, name))

    def set_topology(self, node: str, topology: NodeTopology | None) -> None:
        """The agent's report of ``node`` (None: gone); best fit reads its NVLink and NUMA layout."""
        with self.lock:
            old = self._topologies.pop(node, None)
            if _devices_of(old) == _devices_of(topology):  # a report of new availability changes no choice:
                topology = old  # the kept object keeps what is prepared from it
            else:
                self._bump_node(node)
            if topology is not None:
                self._topologies[node] = topology
            else:  # the node left the index: what was kept for it goes too
                for kept in (self._inventories, self._prepared, self._inferred):
                    kept.pop(node, None)

    # --- holds -------------------------------------------------------------------------------------------

    def hold(self, pod: PodKey, holds: Iterable[Hold]) -> None:
        """The devices a reservation of ``pod`` chose, until the claims show them or ``release``."""
        with self.lock:
            self.release(pod)
            kept = tuple(holds)
            if kept:
                self._holds[pod] = kept
                for held in kept:
                    self._take(held.devices)

    def release(self, pod: PodKey) -> None:
        with self.lock:
            for held in self._holds.pop(pod, ()):
                self._give_back(held.devices)

    def held(self, pod: PodKey) -> tuple[Hold, ...]:
        with self.lock:
            return self._holds.get(pod, ())

    # --- reads -------------------------------------------------------------------------------------------

    @property
    def classes(self) -> Mapping[str, DeviceClass]:
        return self._classes

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return self._claims.get((namespace, name))

    def owned_claim(self, namespace: str, owner_uid: str, pod_claim: str) -> ResourceClaim | None:
        """The claim the claim controller made for ``pod_claim`` of the pod with ``owner_uid``."""
        key = self._owned.get((namespace, owner_uid, pod_claim))
        return None if key is None else self._claims.get(key)

    def freed_by(self, victims: Mapping[PodKey, str]) -> frozenset[DeviceRef]:
        """The devices evicting ``victims`` (pod key -> metadata.uid, "" when unknown) would free, as the
        ResourceClaim controller deallocates a claim once no pod in its ``status.reservedFor`` exists.

        An allocated claim frees its devices when every consumer it is reserved for is a victim (a claim
        shared with a pod that stays keeps them; a consumer that is not a pod, a PodGroup's, is never a
        victim), and it is reserved for some victim or controlled by one (a claim made from a victim's
        template is deleted with it). A victim's holds (a reservation whose claims the cache has not seen
        allocated) are freed too. A device another holder keeps stays taken."""
        with self.lock:
            keys: set[ClaimKey] = set()
            uids = {(namespace, uid) for (namespace, _), uid in victims.items() if uid}
            for pod in victims:
                keys |= self._reserved_for_pod.get(pod, set())
            for owner in uids:
                keys |= self._controlled_by.get(owner, set())
            released: dict[DeviceRef, int] = {}
            for key in keys:
                claim = self._claims.get(key)
                if claim is None or claim.allocation is None:
                    continue
                consumers = claim.reserved_for
                if not all(_is_victim(claim.namespace, consumer, victims) for consumer in consumers):
                    continue
                for device in claim.allocation:
                    released[device.ref] = released.get(device.ref, 0) + 1
            for pod in victims:
                for held in self._holds.get(pod, ()):
                    for ref in held.devices:
                        released[ref] = released.get(ref, 0) + 1
            return frozenset(ref for ref, count in released.items() if count >= self._taken.get(ref, 0))

    def inventory_without(
        self,
        node: str,
        labels: Mapping[str, str],
        freed: frozenset[DeviceRef],
        *,
        taken_again: frozenset[DeviceRef] = frozenset(),
    ) -> Inventory:
        """``node``'s inventory with the devices ``freed`` (``freed_by``) no longer taken, and those
        ``taken_again`` (chosen for a gang's members before the one judged) taken; the kept one itself when
        that changes nothing there."""
        with self.lock:
            inventory = self.inventory(node, labels)
            again = frozenset(ref for ref in taken_again if ref in inventory.footprints)
            taken = (inventory.taken - freed) | again
            elsewhere = [f for f in inventory.taken_footprints if f.device not in inventory.footprints]
            kept_elsewhere = [f for f in elsewhere if f.device not in freed]
            if taken == inventory.taken and len(kept_elsewhere) == len(elsewhere):
                return inventory
            held = [*(inventory.footprints[ref] for ref in taken), *kept_elsewhere]
            return replace(
                inventory,
                taken=taken,
                taken_footprints=tuple(sorted(held, key=lambda f: str(f.device))),
            )

    def topology(self, node: str) -> NodeTopology | None:
        """The agent's topology of ``node`` when it reports GPUs; else what the node's own slices imply
        (``core.dra.inferred.gpu_topology``), None without either."""
        reported = self._topologies.get(node)
        if reported is not None and reported.gpus:
            return reported
        with self.lock:
            self._refresh_pools()
            key = (self.pools_version, self.shared_version)
            kept = self._inferred.get(node)
            if kept is None or kept[0] != key:
                gpus = dra_gpus(self.inventory(node, {}).devices, drivers=self.gpu_drivers)
                inferred = gpu_topology(infer_topology(node, gpus), gpus) if gpus else None
                kept = self._inferred[node] = (key, inferred)
            return kept[1]

    def inferred_note(self, node: str) -> str | None:
        """Why ``node``'s GPU topology is the driver's attributes' reading, when it is."""
        reported = self._topologies.get(node)
        if reported is not None and reported.gpus:
            return None
        inferred = self.topology(node)
        return None if inferred is None else inferred.warnings[0].message

    def local_devices(self, node: str) -> bool:
        """Whether slices naming ``node`` publish devices for it (its own driver runs there)."""
        with self.lock:
            self._refresh_pools()
            return any(pool.devices for pool in self._pools_by_node.get(node, ()))

    def node_key(self, node: str, labels: Mapping[str, str]) -> object:
        """What ``node``'s inventory depends on: equal keys, equal inventories (and device choices)."""
        self._refresh_pools()
        labels_key = tuple(sorted(labels.items()))
        return (self.pools_version, self.shared_version, self._node_versions.get(node, 0), labels_key)

    def prepared(self, node: str, labels: Mapping[str, str]) -> PreparedNode:
        """Best fit's view of ``node`` (``best_fit.prepare_node``): its devices joined to its GPU topology,
        kept while its pools, labels and topology stand, whatever is taken."""
        with self.lock:
            inventory = self.inventory(node, labels)
            topology = self.topology(node)
            key = (self.pools_version, self.shared_version, tuple(sorted(labels.items())), id(topology))
            kept = self._prepared.get(node)
            if kept is None or kept[0] != key or kept[1].refs != tuple(e.ref for e in inventory.devices):
                prepared = prepare_node(inventory.devices, inventory.footprints, topology, drivers=self.gpu_drivers)
                kept = self._prepared[node] = (key, prepared)
            return kept[1]

    def inventory(self, node: str, labels: Mapping[str, str]) -> Inventory:
        """``node``'s candidate devices and the taken ones among them, kept while its key stands."""
        with self.lock:
            key = self.node_key(node, labels)
            kept = self._inventories.get(node)
            if kept is not None and kept[0] == key:
                return kept[1]
            inventory = self._build_inventory(node, labels)
            self._inventories[node] = (key, inventory)
            return inventory

    # --- internals ---------------------------------------------------------------------------------------

    def _build_inventory(self, node: str, labels: Mapping[str, str]) -> Inventory:
        # Only the pools that may serve the node, in the order gather_pools gave (driver, then pool name).
        pools = sorted((*self._pools_by_node.get(node, ()), *self._pools_anywhere), key=_pool_order)
        usable = node_devices(pools, node, labels)
        counter_sets = {(p.driver, p.name): p.counter_sets for p in pools}
        taken = frozenset(e.ref for e in usable.devices if e.ref in self._taken)
        footprints = {
            e.ref: footprint(e, counter_sets[(e.ref.driver, e.ref.pool)], gpu_drivers=self.gpu_drivers)
            for e in usable.devices
        }
        # A device of these pools published for another node still draws on the pool's shared counters
        # (DRA-lib pools_incubating.go: buildPool keeps DeviceSlicesNotTargetingNode, and
        # allocator_incubating.go: checkAvailableCounters subtracts what their allocated devices consume).
        elsewhere = {
            e.ref: footprint(e, counter_sets[(e.ref.driver, e.ref.pool)], gpu_drivers=self.gpu_drivers)
            for pool in pools
            if pool.counter_sets
            for e in pool.devices
            if e.ref in self._taken and e.ref not in footprints and e.device.consumes_counters
        }
        held = {**{ref: footprints[ref] for ref in taken}, **elsewhere}
        return Inventory(
            node_name=node,
            devices=usable.devices,
            unusable_pools=usable.unusable_pools,
            taken=taken,
            taken_footprints=tuple(held[ref] for ref in sorted(held, key=str)),
            footprints=footprints,
        )

    def _pools_changed(self) -> None:
        self._pools_stale = True
        self.pools_version += 1

    def _refresh_pools(self) -> None:
        if not self._pools_stale:
            return
        self._pools = gather_pools(self._slices[name] for name in sorted(self._slices))
        # A device drawing on counters that devices of other nodes share touches every node when taken.
        self._ref_node = {}
        for pool in self._pools:
            spans = _spans_nodes(pool)
            for e in pool.devices:
                self._ref_node[e.ref] = None if spans and e.device.consumes_counters else _local_node(e)
        self._pools_by_node = {}
        self._pools_anywhere = []
        for pool in self._pools:
            nodes = {s.node_selection.node_name for s in pool.slices if not s.per_device_node_selection}
            if len(nodes) == 1 and None not in nodes and all(not s.per_device_node_selection for s in pool.slices):
                self._pools_by_node.setdefault(str(nodes.pop()), []).append(pool)
            else:
                self._pools_anywhere.append(pool)
        self._pools_stale = False
        self._inventories.clear()

    def _forget_claim(self, key: ClaimKey) -> None:
        old = self._claims.pop(key, None)
        if old is None:
            return
        if old.controller_uid and old.pod_claim_name:
            self._owned.pop((old.namespace, old.controller_uid, old.pod_claim_name), None)
        for pod in _pod_consumers(old):
            _discard(self._reserved_for_pod, pod, key)
        if old.controller_uid:
            _discard(self._controlled_by, (old.namespace, old.controller_uid), key)
        if old.allocation is not None:
            self._give_back(d.ref for d in old.allocation)

    def _settle_holds(self, claim: ClaimKey) -> None:
        """The claim's allocation is in the cache: holds for it are no longer needed."""
        for pod, holds in list(self._holds.items()):
            rest = tuple(h for h in holds if h.claim != claim)
            if len(rest) == len(holds):
                continue
            for held in holds:
                if held.claim == claim:
                    self._give_back(held.devices)
            if rest:
                self._holds[pod] = rest
            else:
                del self._holds[pod]

    def _take(self, refs: Iterable[DeviceRef]) -> None:
        for ref in refs:
            self._taken[ref] = self._taken.get(ref, 0) + 1
            self._touch(ref)

    def _give_back(self, refs: Iterable[DeviceRef]) -> None:
        for ref in refs:
            left = self._taken.get(ref, 0) - 1
            if left > 0:
                self._taken[ref] = left
            else:
                self._taken.pop(ref, None)
            self._touch(ref)

    def _touch(self, ref: DeviceRef) -> None:
        self._refresh_pools()
        node = self._ref_node.get(ref)
        if node is None:
            self.shared_version += 1  # not a node-local device (or not published): every node may see it
        else:
            self._bump_node(node)

    def _bump_node(self, node: str) -> None:
        self._node_versions[node] = self._node_versions.get(node, 0) + 1
        self._changed.append(node)
        if len(self._changed) > _CHANGE_LOG:  # forget the log: every kept answer is judged again
            self._changed.clear()
            self.shared_version += 1

    @property
    def change_count(self) -> int:
        """Where the change log stands (``changed_since`` of it is empty); reset with ``shared_version``."""
        return len(self._changed)

    def changed_since(self, count: int) -> set[str]:
        """The nodes whose devices, holds or topology changed after ``change_count`` was ``count``."""
        return set(self._changed[count:])


def _pod_consumers(claim: ResourceClaim) -> list[PodKey]:
    """The pods in the claim's ``status.reservedFor`` (core/v1 ``pods`` entries; others are not pods)."""
    return [(claim.namespace, c.name) for c in claim.reserved_for if c.resource == "pods" and not c.api_group]


def _is_victim(namespace: str, consumer: Consumer, victims: Mapping[PodKey, str]) -> bool:
    """Whether a ``reservedFor`` entry is one of the victims (the same pod: its uid too, where both are known)."""
    if consumer.resource != "pods" or consumer.api_group:
        return False
    uid = victims.get((namespace, consumer.name))
    return uid is not None and (not uid or not consumer.uid or uid == consumer.uid)


def _discard(index: dict[_K, set[ClaimKey]], key: _K, claim: ClaimKey) -> None:
    claims = index.get(key)
    if claims is not None:
        claims.discard(claim)
        if not claims:
            del index[key]


def _devices_of(topology: NodeTopology | None) -> object:
    return None if topology is None else (topology.gpus, topology.links)


def _pool_order(pool: Pool) -> tuple[str, str]:
    return (pool.driver, pool.name)


def _spans_nodes(pool: Pool) -> bool:
    """Whether the pool's devices are published for more than one node (or for any node)."""
    nodes = {_local_node(e) for e in pool.devices}
    return len(nodes) > 1 or None in nodes


def _local_node(entry: PoolDevice) -> str | None:
    selection = entry.device.node_selection if entry.slice.per_device_node_selection else entry.slice.node_selection
    return selection.node_name
