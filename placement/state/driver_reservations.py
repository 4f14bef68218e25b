"""Driver reservations: room held for a driver's executors while they form, so the driver is not squeezed out.

A Spark driver (or a Ray head, or any pod that starts its own workers) that lands while its executors cannot
is stuck: it holds its node and waits for executors the cluster filled with other pods meanwhile. Palantir's
k8s-spark-scheduler answers this with a ResourceReservation: when it schedules the driver it reserves room
for every executor at once, and it gives an executor the room held for its application
(``internal/extender/resource.go``: ``selectDriverNode`` binpacks driver and executors and calls
``CreateReservations``; ``selectExecutorNode`` takes an unbound reservation first). We do the same on our
reservations (``placement.state.reservations``):

* **A driver** is a pod labelled ``spark-role: driver`` with Palantir's annotations (their names as in
  ``internal/common/constants.go``: ``spark-executor-count``, ``spark-executor-cpu``, ``spark-executor-mem``;
  with ``spark-dynamic-allocation-enabled: "true"``, ``spark-dynamic-allocation-min-executor-count``
  executors are held), or any pod carrying ours: ``scheduling.kubenexus.io/reserve-members: "<count>"`` and
  ``scheduling.kubenexus.io/reserve-member-resources: "cpu=4,memory=16Gi,nvidia.com/gpu=1"``.
* **When the driver is reserved**, one placeholder per executor is planned and reserved without expiry,
  exactly as a pod of the executor's shape (the Topology Manager model, the GPUs the kubelet would hand
  out): on the driver's node first, then on nodes sharing its NVLink fabric clique, its rack, its zone, then
  the rest (best score first within each). Placeholders go only where the driver's own constraints
  (nodeSelector, affinity, taints) let it go. When not every executor's room can be held, nothing is held
  and the driver's reservation is released too: it waits, as Palantir's extender answers ``failure-fit``
  (two half-held applications would wait on each other).
* **An executor** (a pod of the same namespace and application, not the driver) asking Reserve takes held
  room first: one placeholder is released on the nearest node holding one and the executor is decided there;
  when it does not fit (another shape), the placeholder is put back and the executor is decided as any pod.
* **The hold goes** when its last placeholder is taken, or when the driver no longer holds a reservation or
  a binding in the index (deleted, finished, unreserved, or its reservation expired unbound): checked on
  every decision and every engine tick.

The application is named by the ``spark-app-selector`` label (Apache Spark sets it on driver and
executors), else ``spark-app-id`` (Palantir's), else ``pod-group.scheduling.kubenexus.io/name``.
Placeholders are reservations named ``<driver>~member-<i>`` (``~`` cannot occur in a pod name); the
constraint plugins do not see them (they carry no labels), the resource filter does. Call under the index
lock, or let the methods take it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from placement.core.annotations import GROUP_NAME_KEY, InvalidValue
from placement.core.decision import rank
from placement.core.domains import DEFAULT_LEVELS, TopologyLevels
from placement.core.intent import PodIntent
from placement.core.pods import PendingPod, PodParseError, PodUsage, parse_quantity
from placement.core.scoring import Scores
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import IntArray, PodDemand, Rejected, RejectionKind, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Decision, Reservations, plan_on_slot

SPARK_ROLE_LABEL = "spark-role"
SPARK_DRIVER = "driver"
SPARK_APP_SELECTOR_LABEL = "spark-app-selector"  # Apache Spark's (Constants.SPARK_APP_ID_LABEL)
SPARK_APP_ID_LABEL = "spark-app-id"  # Palantir's (common.SparkAppIDLabel)
EXECUTOR_COUNT_KEY = "spark-executor-count"
EXECUTOR_CPU_KEY = "spark-executor-cpu"
EXECUTOR_MEMORY_KEY = "spark-executor-mem"
DYNAMIC_ALLOCATION_KEY = "spark-dynamic-allocation-enabled"
DYNAMIC_MIN_EXECUTORS_KEY = "spark-dynamic-allocation-min-executor-count"
RESERVE_MEMBERS_KEY = "scheduling.kubenexus.io/reserve-members"
RESERVE_RESOURCES_KEY = "scheduling.kubenexus.io/reserve-member-resources"
APPLICATION_LABELS = (SPARK_APP_SELECTOR_LABEL, SPARK_APP_ID_LABEL, GROUP_NAME_KEY)
MAX_MEMBERS = 1000  # Palantir casts executor counts to int: "executor count is small (<1000)"
PLACEHOLDER_SEPARATOR = "~"
_RESOURCES_ACCEPTED = "name=quantity pairs separated by commas, e.g. cpu=4,memory=16Gi,nvidia.com/gpu=1"
_MEMBER_INTENT = PodIntent()  # the members' NUMA intent is unknown until they come: none
_COUNT_ACCEPTED = f"a whole number of members from 1 to {MAX_MEMBERS}"


@dataclass(frozen=True)
class MemberRoom:
    """What a driver asks to hold: ``count`` members of one shape, for the pods of ``application``."""

    application: str
    count: int
    member: PodDemand
    shape: str  # the shape as people read it, for messages


def member_room(pod: PendingPod) -> MemberRoom | None:
    """The room the pod asks to hold for its members, or None for a pod that is no driver; raises
    ``InvalidValue`` naming the annotation."""
    annotations = pod.annotations
    if RESERVE_MEMBERS_KEY in annotations or RESERVE_RESOURCES_KEY in annotations:
        count = _count(RESERVE_MEMBERS_KEY, annotations.get(RESERVE_MEMBERS_KEY, ""))
        text = annotations.get(RESERVE_RESOURCES_KEY, "")
        amounts = _resources(text)
    elif pod.labels.get(SPARK_ROLE_LABEL) == SPARK_DRIVER and (
        EXECUTOR_COUNT_KEY in annotations or DYNAMIC_ALLOCATION_KEY in annotations
    ):
        dynamic = annotations.get(DYNAMIC_ALLOCATION_KEY, "false").lower() == "true"
        key = DYNAMIC_MIN_EXECUTORS_KEY if dynamic else EXECUTOR_COUNT_KEY
        count = _count(key, annotations.get(key, ""))
        amounts = {
            "cpu": _quantity(EXECUTOR_CPU_KEY, annotations.get(EXECUTOR_CPU_KEY, "")),
            "memory": _quantity(EXECUTOR_MEMORY_KEY, annotations.get(EXECUTOR_MEMORY_KEY, "")),
        }
        text = f"cpu={annotations[EXECUTOR_CPU_KEY]},memory={annotations[EXECUTOR_MEMORY_KEY]}"
    else:
        return None
    application = application_of(pod.labels)
    if not application:
        raise InvalidValue(
            APPLICATION_LABELS[0], "", f"one of the labels {', '.join(APPLICATION_LABELS)} naming the application"
        )
    return MemberRoom(application=application, count=count, member=demand_of(_member_pod(amounts)), shape=text)


def application_of(labels: Mapping[str, str]) -> str:
    return next((labels[key] for key in APPLICATION_LABELS if labels.get(key)), "")


def _count(key: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_MEMBERS:
        raise InvalidValue(key, text, _COUNT_ACCEPTED)
    return int(text)


def _quantity(key: str, text: str) -> Decimal:
    try:
        amount = parse_quantity(text, where=key)
    except PodParseError:
        raise InvalidValue(key, text, "a Kubernetes quantity, e.g. 4 or 16Gi") from None
    if not amount.is_finite() or amount <= 0:
        raise InvalidValue(key, text, "a positive Kubernetes quantity, e.g. 4 or 16Gi")
    return amount


def _resources(text: str) -> dict[str, Decimal]:
    amounts: dict[str, Decimal] = {}
    for part in text.split(","):
        name, equals, value = part.strip().partition("=")
        if not equals or not name or name in amounts or (name not in ("cpu", "memory") and "/" not in name):
            raise InvalidValue(RESERVE_RESOURCES_KEY, text, _RESOURCES_ACCEPTED)
        try:
            amount = _quantity(RESERVE_RESOURCES_KEY, value)
        except InvalidValue:
            raise InvalidValue(
                RESERVE_RESOURCES_KEY, text, _RESOURCES_ACCEPTED, f"{value!r} is no positive quantity"
            ) from None
        if "/" in name and amount != amount.to_integral_value():
            raise InvalidValue(RESERVE_RESOURCES_KEY, text, f"{_RESOURCES_ACCEPTED}; devices in whole numbers")
        amounts[name] = amount
    return amounts


def _member_pod(amounts: Mapping[str, Decimal]) -> Pod:
    """One member as the kubelet would admit it: requests only (Burstable), as Spark's executors are."""
    container = Container(
        name="member",
        cpu_millis=math.ceil(amounts.get("cpu", Decimal(0)) * 1000),
        memory=int(amounts.get("memory", Decimal(0))),
        devices=tuple(sorted((name, int(amount)) for name, amount in amounts.items() if "/" in name)),
    )
    return Pod(containers=(container,), qos=QOSClass.BURSTABLE)


@dataclass
class _Hold:
    driver: tuple[str, str]
    room: MemberRoom
    placeholders: list[PodUsage] = field(default_factory=list)  # nearest the driver first


class DriverReservations:
    """The holds of the drivers reserved here, over the engine's ``Reservations``."""

    def __init__(
        self, index: ClusterIndex, reservations: Reservations, *, levels: TopologyLevels = DEFAULT_LEVELS
    ) -> None:
        self._index = index
        self._reservations = reservations
        self._levels = levels.levels  # nearest first: the gang coordinator's (``serve --topology-levels``)
        self._holds: dict[tuple[str, str], _Hold] = {}  # by driver
        self._by_application: dict[tuple[str, str], tuple[str, str]] = {}  # (namespace, app) -> driver

    def decide(self, pod: PendingPod, candidate_names: Sequence[str]) -> Decision:
        """``Reservations.decide`` for ``pod``, holding its members' room when it is a driver and giving it
        held room when it is a member (see the module docstring). Raises ``InvalidValue`` for a driver whose
        annotations cannot be read, before anything is reserved."""
        decision = self.decide_held(pod, candidate_names)
        return self._reservations.decide(pod, candidate_names) if decision is None else decision

    def decide_held(self, pod: PendingPod, candidate_names: Sequence[str]) -> Decision | None:
        """``decide`` for a driver, and for a member that held room takes; None for any other pod (and for a
        member whose held room does not fit it): ``Reservations.decide`` decides it as any pod."""
        with self._index.lock:
            self.sweep()
            room = member_room(pod)
            if room is not None:
                return self._decide_driver(pod, room, candidate_names)
            hold = self._hold_of(pod)
            return None if hold is None else self._into_held_room(pod, hold, candidate_names)

    def sweep(self) -> list[tuple[str, str]]:
        """Release the holds of drivers the index no longer holds (deleted, finished, unreserved, expired)."""
        with self._index.lock:
            gone = [driver for driver in self._holds if self._index.pod(*driver) is None]
            for driver in gone:
                self.release(driver)
            return gone

    def release(self, driver: tuple[str, str]) -> bool:
        """Release every placeholder the driver holds; False when it holds none."""
        with self._index.lock:
            hold = self._holds.pop(driver, None)
            if hold is None:
                return False
            self._by_application.pop((driver[0], hold.room.application), None)
            for placeholder in hold.placeholders:
                self._reservations.unreserve(*placeholder.key)
            return True

    def held(self) -> dict[tuple[str, str], list[str]]:
        """Driver -> the nodes of its placeholders, nearest first."""
        with self._index.lock:
            return {driver: [p.node for p in hold.placeholders] for driver, hold in self._holds.items()}

    # --- drivers -----------------------------------------------------------------------------------------

    def _decide_driver(self, pod: PendingPod, room: MemberRoom, candidate_names: Sequence[str]) -> Decision:
        self.release(pod.key)  # a retry of the driver holds afresh
        decision = self._reservations.decide(pod, candidate_names)
        if decision.node is None:
            return decision
        placeholders = self._place_members(pod, room, decision.node)
        if len(placeholders) < room.count:
            for placeholder in placeholders:
                self._reservations.unreserve(*placeholder.key)
            self._reservations.unreserve(*pod.key)
            reason = (
                f"room for only {len(placeholders)} of the {room.count} members of application "
                f"{room.application} ({room.shape} each) can be held; the driver waits until all fit"
            )
            return _refused(pod, candidate_names or self._index.node_names(), reason)
        self._holds[pod.key] = _Hold(pod.key, room, placeholders)
        self._by_application[(pod.namespace, room.application)] = pod.key
        return decision

    def _place_members(self, pod: PendingPod, room: MemberRoom, driver_node: str) -> list[PodUsage]:
        index = self._index
        judge = index.judge(pod)  # members go where their driver may go
        rows = index.slots()
        nearness = self._nearness(driver_node)
        placed: list[PodUsage] = []
        for member in range(room.count):
            ranking = rank(index.arrays(), rows, room.member, constraints=judge)
            scores = ranking.scores
            order = np.lexsort((scores.rows, -scores.total, nearness[scores.rows]))
            usage = self._plan_one(pod, room, member, scores, order)
            if usage is None:
                break
            placed.append(usage)
        return placed

    def _plan_one(
        self, pod: PendingPod, room: MemberRoom, member: int, scores: Scores, order: IntArray
    ) -> PodUsage | None:
        """Reserve member ``member``'s placeholder on the first node in ``order`` whose exact plan holds it."""
        index = self._index
        for position in order.tolist():
            row = int(scores.rows[position])
            plan = plan_on_slot(index, row, room.member, _MEMBER_INTENT, int(scores.landing_cell[position]))
            if isinstance(plan, Rejected):
                continue
            usage = PodUsage(
                namespace=pod.namespace,
                name=f"{pod.name}{PLACEHOLDER_SEPARATOR}member-{member}",
                node=index.name_of(row) or "",
                demand=room.member,
                cells=plan.cells,
                gpus=plan.gpus,
            )
            self._reservations.reserve_all([usage], expires=False)
            return usage
        return None

    def _nearness(self, driver_node: str) -> IntArray:
        """Per slot: 0 the driver's node, i for the nodes sharing the driver's domain at the i-th level
        (nearest first), ``len(levels) + 1`` for the rest."""
        index = self._index
        nearness = np.full(index.capacity, len(self._levels) + 1, dtype=np.int64)
        driver_slot = index.slot_of(driver_node)
        if driver_slot is None:
            return nearness
        for position, level in reversed(list(enumerate(self._levels, start=1))):
            for key in level.keys:  # the first key the driver's node carries names its domain
                codes, _ = index.facts.label_column(key)
                if codes[driver_slot] >= 0:
                    nearness[codes[: index.capacity] == codes[driver_slot]] = position
                    break
        nearness[driver_slot] = 0
        return nearness

    # --- members -----------------------------------------------------------------------------------------

    def _hold_of(self, pod: PendingPod) -> _Hold | None:
        application = application_of(pod.labels)
        driver = self._by_application.get((pod.namespace, application)) if application else None
        if driver is None or driver == pod.key:
            return None
        return self._holds.get(driver)

    def _into_held_room(self, pod: PendingPod, hold: _Hold, candidate_names: Sequence[str]) -> Decision | None:
        """The member decided on the nearest node holding room for it, with one placeholder there released;
        None when no such node takes it (every placeholder tried is put back)."""
        allowed = set(candidate_names) if candidate_names else None
        tried: set[str] = set()
        for placeholder in list(hold.placeholders):
            node = placeholder.node
            if node in tried or (allowed is not None and node not in allowed):
                continue
            tried.add(node)
            self._reservations.unreserve(*placeholder.key)
            decision = self._reservations.decide(pod, [node])
            if decision.node is not None:
                hold.placeholders.remove(placeholder)
                if not hold.placeholders:
                    self.release(hold.driver)
                return decision
            self._reservations.reserve_all([placeholder], expires=False)
        return None


def _refused(pod: PendingPod, nodes: Sequence[str], reason: str) -> Decision:
    why = Rejected(reason, RejectionKind.INSUFFICIENT_RESOURCES)
    return Decision(namespace=pod.namespace, name=pod.name, skipped=dict.fromkeys(nodes, why))
