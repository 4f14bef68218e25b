"""Pods as the index counts them: a Kubernetes Pod object reduced to its requests and our placement.

The placement service writes its decision onto the pod (``ASSIGNED_CELLS_KEY``, ``ASSIGNED_GPUS_KEY``);
reading those back is how the index learns, after a restart or from another replica, which NUMA cells and
GPUs a pod placed by us holds. Pods placed by anyone else have unknown cells.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from placement.core.feasibility import PodDemand, demand_of
from placement.core.intent import POLICY_KEY, NumaIntentPolicy
from placement.core.topology_manager import Container, Pod, QOSClass

ASSIGNED_CELLS_KEY = "numa.scheduling.kubenexus.io/assigned-numa-nodes"
ASSIGNED_GPUS_KEY = "numa.scheduling.kubenexus.io/assigned-gpus"

_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_HANDLED = ("cpu", "memory")


class PodParseError(ValueError):
    """A pod the index cannot count; names the pod and the field."""


@dataclass(frozen=True)
class PodUsage:
    """One pod on one node: its demand, and where it sits when we placed it."""

    namespace: str
    name: str
    node: str
    demand: PodDemand
    cells: tuple[int, ...] = ()  # NUMA ids when known; () = unknown
    gpus: tuple[int, ...] = ()  # GPU indices when known
    isolated: bool = False  # holds its cell exclusively against our other pods

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def parse_quantity(text: str | int | float, *, where: str) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", "1e3") as a Decimal in base units."""
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise PodParseError(f"{where}: {text!r} is not a Kubernetes quantity")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise PodParseError(f"{where}: {text!r} is not a Kubernetes quantity") from None


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a bound pod object; None for a pod not bound to a node or already finished."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in ("Succeeded", "Failed"):
        return None
    namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name", ""))
    where = f"pod {namespace}/{name}"
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    containers = tuple(_container(c, f"{where} container", restartable=False) for c in spec.get("containers") or ())
    init = tuple(
        _container(c, f"{where} init container", restartable=c.get("restartPolicy") == "Always")
        for c in spec.get("initContainers") or ()
    )
    qos = _qos([*(spec.get("initContainers") or ()), *(spec.get("containers") or ())])
    model = Pod(containers=containers, init_containers=init, qos=qos)
    return PodUsage(
        namespace=namespace,
        name=name,
        node=str(node),
        demand=demand_of(model),
        cells=_ids(annotations.get(ASSIGNED_CELLS_KEY), f"{where} annotation {ASSIGNED_CELLS_KEY}"),
        gpus=_ids(annotations.get(ASSIGNED_GPUS_KEY), f"{where} annotation {ASSIGNED_GPUS_KEY}"),
        isolated=annotations.get(POLICY_KEY) == NumaIntentPolicy.ISOLATED.value,
    )


def _container(container: Mapping[str, Any], where: str, *, restartable: bool) -> Container:
    resources = container.get("resources") or {}
    # A limit without a request sets the request (the API server defaults it so).
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    label = f"{where} {container.get('name', '?')}"
    cpu = parse_quantity(requests.get("cpu", 0), where=f"{label} cpu")
    memory = parse_quantity(requests.get("memory", 0), where=f"{label} memory")
    hugepages = tuple(
        (n, int(parse_quantity(v, where=f"{label} {n}")))
        for n, v in sorted(requests.items())
        if n.startswith("hugepages-")
    )
    devices = tuple(
        (n, int(parse_quantity(v, where=f"{label} {n}")))
        for n, v in sorted(requests.items())
        if "/" in n and not n.startswith("hugepages-")
    )
    return Container(
        name=str(container.get("name", "")),
        cpu_millis=int((cpu * 1000).to_integral_value(rounding="ROUND_CEILING")),
        memory=int(memory),
        hugepages=hugepages,
        devices=devices,
        restartable=restartable,
    )


def _qos(containers: Sequence[Mapping[str, Any]]) -> QOSClass:
    """``GetPodQOS`` for cpu and memory: Guaranteed when every container's requests equal its limits."""
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        for name in _HANDLED:
            if name in requests or name in limits:
                any_set = True
            if name not in limits or parse_quantity(limits[name], where=name) != parse_quantity(
                requests.get(name, 0), where=name
            ):
                guaranteed = False
    if not any_set:
        return QOSClass.BEST_EFFORT
    return QOSClass.GUARANTEED if guaranteed else QOSClass.BURSTABLE


def _ids(text: str | None, where: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(sorted({int(item) for item in text.split(",")}))
    except ValueError:
        raise PodParseError(f"{where}: {text!r} is not a comma-separated list of ids") from None


def format_ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))
