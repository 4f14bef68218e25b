"""Pods as the index counts them: a Kubernetes Pod object reduced to its requests and our placement.

The placement service writes its decision onto the pod (``ASSIGNED_CELLS_KEY``, ``ASSIGNED_GPUS_KEY``);
reading those back is how the index learns, after a restart or from another replica, which NUMA cells and
GPUs a pod placed by us holds. Pods placed by anyone else have unknown cells.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.core.feasibility import PodDemand, demand_of
from placement.core.intent import POLICY_KEY, NumaIntentPolicy
from placement.errors import InvalidRequest
from placement.pod_spec import pod_model, pod_spec_from_object

ASSIGNED_CELLS_KEY = "numa.scheduling.kubenexus.io/assigned-numa-nodes"
ASSIGNED_GPUS_KEY = "numa.scheduling.kubenexus.io/assigned-gpus"


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
    try:
        model = pod_model(pod_spec_from_object(pod), where)
    except InvalidRequest as error:
        raise PodParseError(str(error)) from None
    return PodUsage(
        namespace=namespace,
        name=name,
        node=str(node),
        demand=demand_of(model),
        cells=_ids(annotations.get(ASSIGNED_CELLS_KEY), f"{where} annotation {ASSIGNED_CELLS_KEY}"),
        gpus=_ids(annotations.get(ASSIGNED_GPUS_KEY), f"{where} annotation {ASSIGNED_GPUS_KEY}"),
        isolated=annotations.get(POLICY_KEY) == NumaIntentPolicy.ISOLATED.value,
    )


def _ids(text: str | None, where: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(sorted({int(item) for item in text.split(",")}))
    except ValueError:
        raise PodParseError(f"{where}: {text!r} is not a comma-separated list of ids") from None


def format_ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in sorted(ids))
